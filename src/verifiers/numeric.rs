//! The `numeric` verifier: ChartQA's "relaxed accuracy" (Masry et al., ChartQA, ACL Findings
//! 2022; `relaxed_correctness` in the pix2struct / ChartQA evaluation code), with the
//! tolerance as a parameter: relative tolerance 0 is exact numeric equality (the default),
//! 0.05 is ChartQA's 5 %.
//!
//! As in ChartQA, a value ending in `%` is divided by 100 (`45%` is 0.45, not 45), and when
//! either side is not a number the two texts are compared case-insensitively. Differences,
//! made for free-text model answers: thousands separators (`1,234`), a leading `+`, `-` or
//! U+2212 `−` sign, and a number embedded in text (`The answer is 42.`, when it is the only
//! number in the text) are understood; a zero reference is compared exactly. Scientific
//! notation (`1e-05`, `1e+16`: Python's `str()` of small and large floats, which ChartQA's
//! `float(text)` reads) is a number too.

use std::fmt;
use std::sync::OnceLock;

use regex::Regex;

use super::pytext::py_strip;

/// ChartQA's relaxed-accuracy tolerance (5 %, relative to the reference).
pub const CHARTQA_RELAXED_TOL: f64 = 0.05;

/// A parsed side of a numeric comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct NumericValue {
    /// The Python-stripped text, lower-cased (the fallback comparison).
    pub text: String,
    /// The single number the text holds, if any (percent already divided by 100).
    pub number: Option<f64>,
}

fn number_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"[+\-\u{2212}]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:[eE][+\-]?\d+)?%?",
        )
            .expect("static regex")
    })
}

/// Parses one number token matched by `number_re`: drops separators, maps `−` to `-`,
/// divides a `%` value by 100.
fn token_value(token: &str) -> Option<f64> {
    let (body, percent) = match token.strip_suffix('%') {
        Some(b) => (b, true),
        None => (token, false),
    };
    let cleaned: String = body
        .chars()
        .filter(|&c| c != ',' && c != '+')
        .map(|c| if c == '\u{2212}' { '-' } else { c })
        .collect();
    let v: f64 = cleaned.parse().ok()?;
    Some(if percent { v / 100.0 } else { v })
}

impl NumericValue {
    /// Parses `text`: the whole stripped text as one number, else the only number token in it
    /// (a token touching a letter or digit outside it, like `x5` or `1,2345`, makes the text
    /// not a number).
    pub fn parse(text: &str) -> NumericValue {
        let t = py_strip(text);
        let lowered = t.to_lowercase();
        let mut tokens = Vec::new();
        for m in number_re().find_iter(t) {
            let before = t[..m.start()].chars().next_back();
            let after = t[m.end()..].chars().next();
            let touches = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric());
            if touches(before) || touches(after) {
                return NumericValue {
                    text: lowered,
                    number: None,
                };
            }
            tokens.push(m.as_str());
        }
        let number = match tokens.as_slice() {
            [only] => token_value(only),
            _ => None,
        };
        NumericValue {
            text: lowered,
            number,
        }
    }

    /// Whether the text is empty (an unusable reference).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl fmt::Display for NumericValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.number {
            Some(v) => write!(f, "{v}"),
            None => f.write_str(&self.text),
        }
    }
}

/// ChartQA relaxed correctness with tolerance `rel_tol`: both numbers →
/// `|pred - ref| <= rel_tol * |ref|` (exact equality for a zero reference); otherwise the
/// lower-cased texts must be equal and non-empty.
pub fn numeric_match(pred: &NumericValue, reference: &NumericValue, rel_tol: f64) -> bool {
    match (pred.number, reference.number) {
        (Some(p), Some(0.0)) => p == 0.0,
        (Some(p), Some(r)) => (p - r).abs() <= rel_tol * r.abs(),
        _ => !reference.text.is_empty() && pred.text == reference.text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases = [
            ("42", Some(42.0)),
            ("  1,234.5 ", Some(1234.5)),
            ("-7", Some(-7.0)),
            ("\u{2212}7", Some(-7.0)),
            ("+3.25", Some(3.25)),
            ("45%", Some(0.45)),
            (".5", Some(0.5)),
            ("The answer is 42.", Some(42.0)),
            ("between 3 and 5", None),
            ("x5", None),
            ("1,2345", None),
            ("1e-05", Some(1e-5)),
            ("1E+16", Some(1e16)),
            ("2.5e3%", Some(25.0)),
            ("2each", None),
            ("twelve", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(NumericValue::parse(text).number, want, "{text:?}");
        }
    }

    #[test]
    fn match_table() {
        let cases = [
            ("1,234", "1234", 0.0, true),
            ("1234.0", "1234", 0.0, true),
            ("1235", "1234", 0.0, false),
            ("1295", "1234", CHARTQA_RELAXED_TOL, true),
            ("1296", "1234", CHARTQA_RELAXED_TOL, false),
            ("0", "0", CHARTQA_RELAXED_TOL, true),
            ("0.01", "0", CHARTQA_RELAXED_TOL, false),
            ("45%", "45", CHARTQA_RELAXED_TOL, false),
            ("45%", "0.45", 0.0, true),
            ("Yes", "yes", 0.0, true),
            ("0.00001", "1e-05", 0.0, true),
            ("10000000000000000", "1e+16", 0.0, true),
            ("1e3", "1000", 0.0, true),
            ("1e3", "1001", 0.0, false),
            ("", "", 0.0, false),
        ];
        for (pred, reference, tol, want) in cases {
            let got = numeric_match(
                &NumericValue::parse(pred),
                &NumericValue::parse(reference),
                tol,
            );
            assert_eq!(got, want, "{pred:?} vs {reference:?} tol {tol}");
        }
    }
}
