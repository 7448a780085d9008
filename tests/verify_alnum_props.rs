//! Property tests of the `alnum` normalisation and candidates (contract §5).

use proptest::prelude::*;
use verisample::verifiers::alnum::{alnum_match, alnum_norm, first_line, first_paragraph};
use verisample::verifiers::pytext::{py_is_line_boundary, py_strip};
use verisample::verifiers::{Variant, Verifier};

/// Text mixing ASCII, look-alikes, whitespace and line boundaries of every kind.
fn mixed_text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "a", "Z", "0", "9", "l", "1", "O", "o", " ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c",
        "\x1c", "\x1f", "\u{85}", "\u{a0}", "\u{2028}", "\u{2029}", "\u{3000}", "\u{130}",
        "\u{212a}", "\u{ff11}", "\u{b9}", "\u{661}", ".", ",", "-", "!", "\u{4e2d}", "\u{200b}",
    ]);
    prop::collection::vec(
        prop_oneof![
            pieces.prop_map(String::from),
            any::<char>().prop_map(String::from)
        ],
        0..24,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn norm_is_idempotent_and_ascii(x in mixed_text()) {
        let n = alnum_norm(&x);
        prop_assert_eq!(alnum_norm(&n), n.clone());
        prop_assert!(n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }

    #[test]
    fn norm_ignores_ascii_case(x in mixed_text()) {
        prop_assert_eq!(alnum_norm(&x.to_ascii_uppercase()), alnum_norm(&x.to_ascii_lowercase()));
    }

    #[test]
    fn norm_ignores_inserted_punctuation(x in "[a-zA-Z0-9]{0,12}", seps in prop::collection::vec("[ .,;:!?'\"()/_-]{1,3}", 13)) {
        let mut spaced = String::new();
        for (i, c) in x.chars().enumerate() {
            spaced.push_str(&seps[i]);
            spaced.push(c);
        }
        prop_assert_eq!(alnum_norm(&spaced), x.to_ascii_lowercase());
        if !x.is_empty() {
            prop_assert_eq!(alnum_match(&spaced, &x), Some(Variant::Whole));
            prop_assert!(Verifier::Alnum.verify(&spaced, &x).accepted());
        }
    }

    #[test]
    fn candidates_are_well_formed(x in mixed_text()) {
        let line = first_line(&x);
        let para = first_paragraph(&x);
        prop_assert!(py_strip(&x).starts_with(line));
        prop_assert!(!line.chars().any(py_is_line_boundary));
        prop_assert!(para.starts_with(line));
        prop_assert!(para.split('\n').all(|l| !py_strip(l).is_empty()) || para.is_empty());
    }

    #[test]
    fn whole_match_means_equal_norms(pred in mixed_text(), gt in mixed_text()) {
        let m = alnum_match(&pred, &gt);
        prop_assert_eq!(m == Some(Variant::Whole), alnum_norm(&pred) == alnum_norm(&gt));
        let v = Verifier::Alnum.verify(&pred, &gt);
        prop_assert_eq!(v.matched, m);
        prop_assert_eq!(v.accepted(), m.is_some() && !alnum_norm(&gt).is_empty());
    }
}
