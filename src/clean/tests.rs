//! Tests of the cleaning passes and their counts.

use super::*;
use crate::record::ImageRef;

/// SHA-256 of `b"abc"` (FIPS 180-2, appendix B.1).
const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fn item(question: &str, answer: &str, source: Option<&str>) -> QaItem {
    QaItem {
        question: question.to_string(),
        answer: answer.to_string(),
        source: source.map(String::from),
        ..QaItem::default()
    }
}

fn row(family: Option<&str>, qa: Vec<QaItem>) -> InputRow {
    InputRow {
        source_file: "train-00000.parquet".into(),
        row_index: 7,
        image: ImageRef {
            bytes: Some(b"abc".to_vec()),
            path: Some("train/a_car_000154.jpg".into()),
        },
        qa,
        image_sha256: Some(ABC_SHA256.into()),
        family: family.map(String::from),
        ..InputRow::default()
    }
}

#[test]
fn provenance_table() {
    let upper = ABC_SHA256.to_uppercase();
    // (source, kept)
    let cases = [
        (None, true),
        (Some(ABC_SHA256), true),
        (Some(upper.as_str()), true),
        (Some("train/a_car_000154.jpg"), true),
        (Some("a_car_000154.jpg"), false),
        (Some("train/a_car_000155.jpg"), false),
        (
            Some("0000000000000000000000000000000000000000000000000000000000000000"),
            false,
        ),
        (Some(""), false),
    ];
    for (source, kept) in cases {
        let mut c = Cleaner::new(CleanPolicy::default());
        let out = c.clean_row(row(
            Some("OrandCar"),
            vec![item(ORAND_CAR_QUESTION, "2250", source)],
        ));
        assert_eq!(out.is_some(), kept, "{source:?}");
        assert_eq!(
            c.report
                .dropped
                .get("provenance_mismatch")
                .copied()
                .unwrap_or(0),
            usize::from(!kept)
        );
    }
}

#[test]
fn provenance_uses_computed_hash_not_stored_column() {
    let mut r = row(None, vec![item("q", "a", Some(ABC_SHA256))]);
    r.image.bytes = Some(b"abd".to_vec());
    let mut c = Cleaner::new(CleanPolicy::default());
    assert!(c.clean_row(r).is_none());
    assert_eq!(c.report.rows_without_qa, 1);
}

#[test]
fn task_purity_and_counts() {
    let mut c = Cleaner::new(CleanPolicy::default());
    let out = c
        .clean_row(row(
            Some("OrandCar"),
            vec![
                item("What color is the car?", "red", None),
                item(ORAND_CAR_QUESTION, "2250", Some("train/a_car_000154.jpg")),
                item(&format!("{ORAND_CAR_QUESTION} "), "2250", None),
                item(ORAND_CAR_QUESTION, "2250", Some("elsewhere.jpg")),
            ],
        ))
        .expect("one item survives");
    assert_eq!(out.row.qa.len(), 1);
    assert_eq!(out.row.qa[0].answer, "2250");
    assert_eq!(out.notes.kept_from, [1]);
    assert_eq!(
        out.notes.dropped,
        [
            (0, DropReason::OffTask),
            (2, DropReason::OffTask),
            (3, DropReason::ProvenanceMismatch)
        ]
    );
    assert_eq!(c.report.items_in, 4);
    assert_eq!(c.report.items_out, 1);
    assert_eq!(c.report.dropped.get("off_task"), Some(&2));
    // Where an off-task question differs: a trailing space is at the end of the task question.
    let policy = CleanPolicy::default();
    let spaced = format!("{ORAND_CAR_QUESTION} ");
    let n = ORAND_CAR_QUESTION.chars().count();
    assert_eq!(
        crate::clean::off_task_detail(&policy, "OrandCar", &spaced).unwrap(),
        format!(
            "the question is not OrandCar's task question {ORAND_CAR_QUESTION:?}: character {} \
             is ' ' where the end is expected",
            n + 1
        )
    );
    let cut: String = ORAND_CAR_QUESTION.chars().take(3).collect();
    assert!(crate::clean::off_task_detail(&policy, "OrandCar", &cut)
        .unwrap()
        .ends_with(&format!(
            "character 4 is the end where {:?} is expected",
            ORAND_CAR_QUESTION.chars().nth(3).unwrap()
        )));
    assert_eq!(crate::clean::off_task_detail(&policy, "TextVQA", "q"), None);
    assert_eq!(c.report.dropped.get("provenance_mismatch"), Some(&1));
    assert_eq!((c.report.rows_in, c.report.rows_out), (1, 1));

    // Another family has no allow-list.
    let out = c.clean_row(row(
        Some("TextVQA"),
        vec![item("What color is the car?", "red", None)],
    ));
    assert_eq!(out.map(|o| o.row.qa.len()), Some(1));
}

#[test]
fn mc_rewrite_is_recorded() {
    let mut c = Cleaner::new(CleanPolicy::default());
    let q = "What animal is shown? Options: A. cat B. dog";
    let out = c
        .clean_row(row(
            None,
            vec![
                item(q, "dog", None),
                item("Who? A. Mr. Smith B. Mrs. Jones", "A", None),
            ],
        ))
        .expect("kept");
    assert_eq!(
        out.row.qa[0].question,
        "What animal is shown?\nA. cat\nB. dog"
    );
    assert_eq!(out.row.qa[0].answer, "B");
    assert_eq!(out.row.qa[1].question, "Who? A. Mr. Smith B. Mrs. Jones");
    assert_eq!(out.notes.rewritten[0].original_question, q);
    assert_eq!(out.notes.rewritten[0].original_answer, "dog");
    assert_eq!(out.notes.uncertain.len(), 1);
    assert_eq!(c.report.rewritten.get("mc_normalised"), Some(&1));
    assert_eq!(c.report.uncertain.get("mc_uncertain"), Some(&1));
    let meta = c.clean_meta(&out.notes);
    assert_eq!(meta["policy"]["mc_normalise"], true);
    assert_eq!(
        meta["policy"]["allowed_questions"]["OrandCar"][0],
        ORAND_CAR_QUESTION
    );
    assert_eq!(meta["cleaning"]["rewritten"][0]["qa_index"], 0);
}

#[test]
fn passes_can_be_switched_off() {
    let policy = CleanPolicy {
        provenance: false,
        task_purity: false,
        mc_normalise: false,
        ..CleanPolicy::default()
    };
    let mut c = Cleaner::new(policy);
    assert!(c.passes().is_empty());
    let q = "Which? A. cat B. dog";
    let out = c
        .clean_row(row(
            Some("OrandCar"),
            vec![item(q, "dog", Some("elsewhere.jpg"))],
        ))
        .expect("kept");
    assert_eq!(
        (
            out.row.qa[0].question.as_str(),
            out.row.qa[0].answer.as_str()
        ),
        (q, "dog")
    );
    assert!(c.report.dropped.is_empty() && c.report.rewritten.is_empty());
}

#[test]
fn a_stored_image_sha256_that_lies_drops_every_item() {
    let upper = ABC_SHA256.to_uppercase();
    let lie = ABC_SHA256.replace('b', "c");
    // (stored hash, provenance pass on, items kept)
    let cases = [
        (Some(ABC_SHA256), true, 2),
        (Some(upper.as_str()), true, 2),
        (None, true, 2),
        (Some(lie.as_str()), true, 0),
        (Some(""), true, 0),
        (Some(lie.as_str()), false, 2),
    ];
    for (stored, on, kept) in cases {
        let mut r = row(None, vec![item("q1", "a", None), item("q2", "b", None)]);
        r.image_sha256 = stored.map(String::from);
        let mut c = Cleaner::new(CleanPolicy {
            provenance: on,
            ..CleanPolicy::default()
        });
        let out = c.clean_row(r);
        assert_eq!(out.map_or(0, |o| o.row.qa.len()), kept, "{stored:?} {on}");
        let dropped = c.report.dropped.get("image_sha256_mismatch").copied();
        assert_eq!(dropped, (kept == 0).then_some(2), "{stored:?} {on}");
    }
}
