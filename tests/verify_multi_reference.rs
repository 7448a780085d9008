//! The table of multi-reference cases in docs/datasets.md is a test. Each
//! row is run through [`Verifier::verify_any`]; the accepted variant, the text that passed
//! and the ANLS score must be what the table says, and so must the routing of a rejected row
//! (`unusable_reference` vs a plain reject).

use verisample::verifiers::Verifier;

/// The marker line above the table in docs/datasets.md.
const MARKER: &str = "<!-- multi-reference cases: tests/verify_multi_reference.rs -->";

/// One table row, cells with their backticks removed.
struct Case {
    verifier: String,
    prediction: String,
    references: Vec<String>,
    accepted: String,
    passed: String,
    anls: String,
}

fn cases() -> Vec<Case> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/datasets.md"))
        .expect("docs/datasets.md");
    let start = readme
        .find(MARKER)
        .expect("docs/datasets.md has the multi-reference table");
    readme[start..]
        .lines()
        .skip(3) // marker, header, separator
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            assert_eq!(cells.len(), 6, "{line}");
            Case {
                verifier: cells[0].clone(),
                prediction: serde_json::from_str(&cells[1]).expect(line),
                references: serde_json::from_str(&cells[2]).expect(line),
                accepted: cells[3].clone(),
                passed: cells[4].clone(),
                anls: cells[5].clone(),
            }
        })
        .collect()
}

#[test]
fn readme_multi_reference_table_holds() {
    let cases = cases();
    assert_eq!(
        cases.len(),
        11,
        "every row of the docs/datasets.md table is read"
    );
    for c in cases {
        let verifier: Verifier = c.verifier.parse().expect("verifier name");
        let refs: Vec<&str> = c.references.iter().map(String::as_str).collect();
        let v = verifier.verify_any(&c.prediction, &refs);
        let at = format!("{} {:?} vs {:?}", c.verifier, c.prediction, c.references);
        let trial = v.accepted_trial();
        match c.accepted.as_str() {
            "no" => {
                assert!(trial.is_none(), "{at}: accepted {trial:?}");
                assert!(!v.unusable_reference, "{at}: a usable reference was given");
            }
            "no (unusable)" => {
                assert!(trial.is_none(), "{at}");
                assert!(v.unusable_reference, "{at}");
            }
            variant => {
                let t = trial.unwrap_or_else(|| panic!("{at}: rejected, {v:?}"));
                assert_eq!(t.variant.as_str(), variant, "{at}");
                let passed: String = serde_json::from_str(&c.passed).expect("passed");
                assert_eq!(t.text, passed, "{at}");
            }
        }
        let shown = trial.or(v.trials.first()).and_then(|t| t.score);
        match c.anls.as_str() {
            "–" => assert_eq!(shown, None, "{at}"),
            want => assert_eq!(format!("{:.4}", shown.expect("a score")), want, "{at}"),
        }
    }
}

#[test]
fn one_reference_is_the_single_reference_verifier() {
    // `verify` is `verify_any` over one reference: same trials, same decision.
    for (verifier, pred, reference) in [
        (Verifier::Alnum, "Hello.", "HELLO!"),
        (
            Verifier::Anls { threshold: 0.5 },
            "main stret",
            "Main Street",
        ),
        (Verifier::Alnum, "?!", "\u{4E2D}"),
    ] {
        assert_eq!(
            verifier.verify(pred, reference),
            verifier.verify_any(pred, &[reference])
        );
    }
    // The normalised references are listed when there are several.
    let v = Verifier::Alnum.verify_any("x", &["Black.", "\u{4E2D}", "BLACK"]);
    assert_eq!(v.reference_normalised, r#"["black","black"]"#);
}
