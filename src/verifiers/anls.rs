//! The `anls` verifier: Average Normalized Levenshtein Similarity for one answer (Biten et
//! al., "Scene Text Visual Question Answering", ICCV 2019; used unchanged by DocVQA, Mathew
//! et al., WACV 2021).
//!
//! Both sides are normalised as the official evaluation does (`" ".join(s.strip().lower()
//! .split())`), `NL = levenshtein(a, b) / max(len(a), len(b))` over characters, and the score
//! is `1 - NL` when `NL < τ`, else 0, with τ = [`ANLS_TAU`]. The verifier accepts when the
//! score is above 0.

use super::pytext::py_isspace;

/// τ of ST-VQA / DocVQA: a normalised edit distance of τ or more scores 0.
pub const ANLS_TAU: f64 = 0.5;

/// `" ".join(s.strip().lower().split())`: lower-cased, Python-whitespace runs collapsed to one
/// space, ends trimmed.
pub fn anls_normalise(s: &str) -> String {
    s.split(py_isspace)
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Levenshtein distance over Unicode scalar values (insert, delete, substitute; cost 1).
pub fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The ANLS score of two already-normalised strings with threshold `tau`: `1 - NL` if
/// `NL < tau`, else 0; two empty strings score 1.
pub fn anls_score(pred: &str, reference: &str, tau: f64) -> f64 {
    let longest = pred.chars().count().max(reference.chars().count());
    if longest == 0 {
        return 1.0;
    }
    let nl = levenshtein(pred, reference) as f64 / longest as f64;
    if nl < tau {
        1.0 - nl
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levenshtein_table() {
        let cases = [
            ("", "", 0),
            ("abc", "", 3),
            ("kitten", "sitting", 3),
            ("flaw", "lawn", 2),
            ("\u{00E9}t\u{00E9}", "ete", 2),
        ];
        for (a, b, want) in cases {
            assert_eq!(levenshtein(a, b), want, "{a:?} {b:?}");
            assert_eq!(levenshtein(b, a), want, "{b:?} {a:?}");
        }
    }

    #[test]
    fn score_table() {
        let cases = [
            ("Main  Street\n", "main street", 1.0),
            ("main stret", "main street", 1.0 - 1.0 / 11.0),
            ("abcd", "abxy", 0.0),
            ("abcd", "abcx", 0.75),
        ];
        for (pred, reference, want) in cases {
            let got = anls_score(&anls_normalise(pred), &anls_normalise(reference), ANLS_TAU);
            assert!((got - want).abs() < 1e-12, "{pred:?}: {got} != {want}");
        }
    }
}
