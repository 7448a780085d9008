//! The `alnum` string verifier of contract §5 (the scene-text-recognition protocol used by
//! IIIT5K, CUTE80, SVT, IC13/15, WordArt, Total-Text and OrandCar), and the three candidate
//! variants of a prediction that every verifier tries.
//!
//! Reference semantics (Python, contract §5):
//!
//! ```text
//! alnum_norm(x) = re.sub(r"[^a-z0-9]", "", (x or "").lower())
//! s = (pred or "").strip(); lines = s.splitlines()
//! first_line = lines[0] if lines else ""
//! first_paragraph = "\n".join(lines up to, not including, the first line whose strip() is "")
//! candidates = [pred, first_line, first_paragraph]
//! ```
//!
//! Checked pair by pair against `scripts/alnum_reference.py` (fixture
//! `tests/fixtures/alnum/pairs.jsonl`, test `tests/verify_alnum_differential.rs`).

use super::pytext::{py_lower_ascii_alnum, py_splitlines, py_strip};
use super::Variant;

/// `alnum_norm(x)` of contract §5: Python's full Unicode `lower()`, then only ASCII `a-z0-9`
/// kept. Only `İ` (→ `i`) and the Kelvin sign (→ `k`) are non-ASCII characters that leave
/// something behind; no Unicode normalisation is applied. Output is ASCII.
pub fn alnum_norm(x: &str) -> String {
    x.chars().filter_map(py_lower_ascii_alnum).collect()
}

/// The first line of a prediction per contract §5: `(pred.strip().splitlines() or [""])[0]`,
/// with Python's whitespace set and line boundaries. A sub-slice of `pred`.
pub fn first_line(pred: &str) -> &str {
    py_splitlines(py_strip(pred)).first().copied().unwrap_or("")
}

/// The first paragraph of a prediction per contract §5: the lines of `pred.strip()` up to, not
/// including, the first line whose `strip()` is empty, joined with `"\n"` (so a `\r\n` or
/// `\u2028` boundary inside the paragraph becomes `\n`).
pub fn first_paragraph(pred: &str) -> String {
    let lines = py_splitlines(py_strip(pred));
    let kept: Vec<&str> = lines
        .into_iter()
        .take_while(|line| !py_strip(line).is_empty())
        .collect();
    kept.join("\n")
}

/// The three candidates of contract §5 in trial order: `[(Whole, pred), (FirstLine, …),
/// (FirstParagraph, …)]`.
pub fn candidates(pred: &str) -> [(Variant, String); 3] {
    [
        (Variant::Whole, pred.to_string()),
        (Variant::FirstLine, first_line(pred).to_string()),
        (Variant::FirstParagraph, first_paragraph(pred)),
    ]
}

/// The pure reference `match` of contract §5 over the three candidates: the first variant whose
/// `alnum_norm` equals `alnum_norm(gt)`, or `None`. Keeps the exact reference semantics, so a
/// reference that normalises to `""` matches a prediction that also does; the pipeline's
/// [`super::Verifier::verify`] flags such a reference unusable and never accepts it.
pub fn alnum_match(pred: &str, gt: &str) -> Option<Variant> {
    let g = alnum_norm(gt);
    candidates(pred)
        .into_iter()
        .find(|(_, text)| alnum_norm(text) == g)
        .map(|(variant, _)| variant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_table() {
        let cases = [
            ("HELLO!", "hello"),
            ("Hello.", "hello"),
            ("ll.850", "ll850"),
            ("1.990", "1990"),
            ("M. Este", "meste"),
            ("\u{130}stanbul", "istanbul"),
            ("\u{212A}elvin", "kelvin"),
            ("\u{FF11}\u{FF12}3", "3"),
            ("\u{B9}\u{B2}\u{2083}", ""),
            ("\u{661}\u{662}", ""),
            ("\u{4E2D}\u{6587}", ""),
            ("Stra\u{DF}e", "strae"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(alnum_norm(input), want, "{input:?}");
        }
    }

    #[test]
    fn candidate_table() {
        // (pred, first_line, first_paragraph)
        let cases = [
            ("\n\n11850\n\nThe amount is \u{2026}", "11850", "11850"),
            ("1\r\n2\r\n\r\n3", "1", "1\n2"),
            ("1\u{2028}2\u{2029}\x1f\n3", "1", "1\n2"),
            ("  a b \n c", "a b ", "a b \n c"),
            ("\x1c12", "12", "12"),
            ("", "", ""),
            ("\u{3000}", "", ""),
        ];
        for (pred, line, para) in cases {
            assert_eq!(first_line(pred), line, "{pred:?}");
            assert_eq!(first_paragraph(pred), para, "{pred:?}");
        }
    }

    #[test]
    fn match_table() {
        let cases = [
            ("HELLO!", "hello", Some(Variant::Whole)),
            (
                "\n\n11850\n\nThe amount is \u{2026}",
                "11850",
                Some(Variant::FirstLine),
            ),
            ("11\n850\n\nbecause", "11850", Some(Variant::FirstParagraph)),
            ("ll.850", "11850", None),
            ("M. Este", "11956", None),
            ("\u{3000}\u{2002} \u{200A}", "1432", None),
            ("bridgestone", "Bridgestone", Some(Variant::Whole)),
            ("anything!", "!!", None),
            ("??", "!!", Some(Variant::Whole)),
        ];
        for (pred, gt, want) in cases {
            assert_eq!(alnum_match(pred, gt), want, "{pred:?} vs {gt:?}");
        }
    }
}
