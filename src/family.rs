//! Per-family constants: the one place where a benchmark family's name and its
//! byte-identical question text (contract §4) live.
//!
//! The importer (`verisample prepare`) writes these questions into `qa[].question`, and the
//! cleaning/verification passes compare against them, so both sides use these constants.

/// The OrandCar family name, as used in split names (`OrandCar_RS_think`, contract §7).
pub const ORAND_CAR: &str = "OrandCar";

/// The OrandCar question, byte-identical to the user text the model receives (contract §4).
pub const ORAND_CAR_QUESTION: &str = "What is written in the image? Answer this question using the text in the image directly without any other context. Answer in short without any other content.";

/// Family used in split names when neither `--family` nor the row names one.
pub const DEFAULT_FAMILY: &str = "Default";

/// The family whose splits a row lands in, from its `family` value (without `--family`):
/// the value itself, or [`DEFAULT_FAMILY`] when it is null or empty. One rule for `run`'s
/// planning and the up-front case check of `dataset::families`, so both see the same names.
pub fn split_family(column: Option<&str>) -> String {
    match column {
        Some(f) if !f.is_empty() => f.to_string(),
        _ => DEFAULT_FAMILY.to_string(),
    }
}

/// A known benchmark family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilySpec {
    /// Family name (`OrandCar`).
    pub name: &'static str,
    /// The fixed question asked for every image of the family, if it has one.
    pub question: Option<&'static str>,
}

/// Every family this build knows by name. Others may still be used with an explicit question.
pub const KNOWN_FAMILIES: &[FamilySpec] = &[FamilySpec {
    name: ORAND_CAR,
    question: Some(ORAND_CAR_QUESTION),
}];

/// Look up a known family by exact name.
pub fn family_spec(name: &str) -> Option<&'static FamilySpec> {
    KNOWN_FAMILIES.iter().find(|f| f.name == name)
}

/// Most characters of a family name: its split files (`<Family>_RS_nothink-00000-of-00001.parquet`)
/// must stay well inside the 255-byte file-name limit of common file systems.
pub const MAX_FAMILY_LEN: usize = 128;

/// The rule [`is_valid_family_name`] checks, for messages.
pub const FAMILY_NAME_RULE: &str = "1 to 128 ASCII letters, digits or '_'";

/// Whether `name` can be used as a family: 1 to [`MAX_FAMILY_LEN`] ASCII word characters
/// (`[A-Za-z0-9_]`), so that the split names built from it match the Hugging Face rule
/// `^\w+(\.\w+)*$` and their files can be created.
pub fn is_valid_family_name(name: &str) -> bool {
    (1..=MAX_FAMILY_LEN).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_family_name_must_fit_in_split_file_names() {
        assert!(is_valid_family_name(&"F".repeat(MAX_FAMILY_LEN)));
        assert!(!is_valid_family_name(&"F".repeat(MAX_FAMILY_LEN + 1)));
        assert!(!is_valid_family_name(""));
        assert!(!is_valid_family_name("a-b"));
        // The longest family's longest split file name stays well inside 255 bytes.
        let file = format!(
            "{}_RS_nothink-00000-of-00001.parquet",
            "F".repeat(MAX_FAMILY_LEN)
        );
        assert!(file.len() < 200, "{}", file.len());
    }
    use super::*;

    #[test]
    fn orand_car_question_is_the_spec_text() {
        // contract §4 (docs/contract.md) (and equal to `ORAND_QUESTION` of
        // scripts/tiny_tokenizer.py, the question the bundled model was trained on).
        // Catches: any byte of the question edited (a word, a space, the full stop).
        const SPEC_TEXT: &str = "What is written in the image? Answer this question using the text in the image directly without any other context. Answer in short without any other content.";
        assert_eq!(ORAND_CAR_QUESTION, SPEC_TEXT);
        assert_eq!(
            family_spec("OrandCar").and_then(|f| f.question),
            Some(SPEC_TEXT)
        );
        assert_eq!(family_spec("orandcar"), None);
    }

    #[test]
    fn family_names() {
        for (name, ok) in [
            ("OrandCar", true),
            ("IIIT5K", true),
            ("a_b", true),
            ("", false),
            ("a-b", false),
            ("a.b", false),
            ("a b", false),
            ("é", false),
        ] {
            assert_eq!(is_valid_family_name(name), ok, "{name:?}");
        }
    }
}
