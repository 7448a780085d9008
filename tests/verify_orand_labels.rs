//! The OrandCar labels under the string verifier (contract §8: the reference is the digit string
//! without separators, `1.990` is labelled `1990`). Uses the real data when present.

mod shared_data;
use shared_data::require_shared_data;

use verisample::judge::numbers_disagree;
use verisample::verifiers::alnum::alnum_norm;
use verisample::verifiers::{Variant, Verifier};

/// Renders a digit string with `.` thousands separators, as written on a cheque.
fn with_separators(digits: &str) -> String {
    let n = digits.len();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (n - i).is_multiple_of(3) {
            out.push('.');
        }
        out.push(c);
    }
    out
}

#[test]
fn every_label_is_a_usable_digit_reference() {
    let Some(root) = require_shared_data() else {
        return;
    };
    let path = root.join("orand-car-a/labels.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("labels.jsonl line");
        let label = v["label"].as_str().expect("label");
        assert!(
            !label.is_empty() && label.chars().all(|c| c.is_ascii_digit()),
            "{label:?}"
        );
        assert_eq!(alnum_norm(label), label);
        let written = with_separators(label);
        let check =
            Verifier::Alnum.verify(&format!("{written}\n\nThe amount is {written}."), label);
        assert_eq!(
            check.accepted_trial().map(|t| (t.variant, t.text.as_str())),
            Some((Variant::FirstLine, written.as_str()))
        );
        assert!(!numbers_disagree(&written, label));
        n += 1;
    }
    assert_eq!(n, 1080 + 78, "labels for train/ and val/");
}
