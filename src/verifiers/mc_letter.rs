//! The `mc_letter` verifier: the chosen option letter of a multiple-choice answer, extracted
//! from free text, compared case-insensitively with the reference letter.
//!
//! Extraction rules, tried in order on the Python-stripped text (the answer-extraction
//! conventions of MMMU / MMBench / ScienceQA evaluation scripts, made fail-closed):
//! 1. the whole text is one letter, optionally bracketed and/or followed by `.`, `:` or `)`:
//!    `B`, `b`, `(B)`, `[B]`, `B.`, `B)`;
//! 2. a cue word (`answer`, `option`, `choice`, any case, optionally followed by `is` and/or
//!    `:`) followed by a letter: `The answer is B`, `Answer: b`, `Option (C).` — an upper-case
//!    letter must be followed by a non-alphanumeric character or the end, a lower-case one by
//!    the end or punctuation (so `the answer is a cat` yields nothing); all cued letters
//!    must agree;
//! 3. the text opens with an option label and its text: `B. dog`, `(B) dog`, `B) dog`,
//!    `B: dog` (upper-case letter, or any case when bracketed).
//!
//! A letter inside a word never counts (`Because` has no `B`). Anything else yields `None`.

use std::sync::OnceLock;

use regex::Regex;

use super::pytext::py_strip;

fn whole_letter_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Za-z]))[.:)]?$").expect("static regex")
    })
}

fn cue_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?i:\b(?:answer|option|choice)\b)(?:\s+(?i:is))?\s*:?\s*(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Za-z]))([^A-Za-z0-9]|$)",
        )
        .expect("static regex")
    })
}

fn label_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Z])[.:)])\s*\S").expect("static regex")
    })
}

fn first_group(caps: &regex::Captures<'_>) -> Option<char> {
    (1..=3)
        .find_map(|i| caps.get(i))
        .and_then(|m| m.as_str().chars().next())
}

/// The option letter a reference names, upper-cased: rules 1 and 3 only (`B`, `(B)`, `B.`,
/// `B. dog`). `None` when the reference names no letter (then it is unusable for `mc_letter`).
pub fn reference_letter(reference: &str) -> Option<char> {
    let t = py_strip(reference);
    let caps = whole_letter_re()
        .captures(t)
        .or_else(|| label_re().captures(t))?;
    first_group(&caps).map(|c| c.to_ascii_uppercase())
}

/// The option letter a free-text answer chooses, upper-cased, by the rules in the module
/// doc; `None` when there is none or the cues disagree.
pub fn extract_choice(text: &str) -> Option<char> {
    let t = py_strip(text);
    if let Some(caps) = whole_letter_re().captures(t) {
        return first_group(&caps).map(|c| c.to_ascii_uppercase());
    }
    let mut cued: Option<char> = None;
    for caps in cue_re().captures_iter(t) {
        let bracketed = caps.get(1).or(caps.get(2)).is_some();
        let Some(letter) = first_group(&caps) else {
            continue;
        };
        let next = caps.get(4).map(|m| m.as_str()).unwrap_or("");
        let lower_ok = next.is_empty() || next.chars().all(|c| ".,;:!?)".contains(c));
        if letter.is_ascii_lowercase() && !bracketed && !lower_ok {
            continue;
        }
        let letter = letter.to_ascii_uppercase();
        match cued {
            Some(prev) if prev != letter => return None,
            _ => cued = Some(letter),
        }
    }
    if cued.is_some() {
        return cued;
    }
    label_re()
        .captures(t)
        .and_then(|caps| first_group(&caps))
        .map(|c| c.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extraction_table() {
        let cases = [
            ("B", Some('B')),
            ("b", Some('B')),
            ("(B)", Some('B')),
            ("[c]", Some('C')),
            ("B.", Some('B')),
            ("D)", Some('D')),
            ("The answer is B", Some('B')),
            ("The answer is B.", Some('B')),
            ("Answer: b", Some('B')),
            ("answer: (d)", Some('D')),
            ("I choose option C, the dog.", Some('C')),
            ("The correct choice is (A) because it is red", Some('A')),
            ("B. dog", Some('B')),
            ("(B) dog", Some('B')),
            ("Because it is blue", None),
            ("the answer is a cat", None),
            ("Answer: B. Wait, no, the answer is C", None),
            ("Answer: B. Final answer: B", Some('B')),
            ("Bb", None),
            ("", None),
            ("A cat", None),
            ("Answers vary", None),
        ];
        for (text, want) in cases {
            assert_eq!(extract_choice(text), want, "{text:?}");
        }
    }

    #[test]
    fn reference_table() {
        let cases = [
            ("B", Some('B')),
            (" (c) ", Some('C')),
            ("D. a dog", Some('D')),
            ("a dog", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(reference_letter(text), want, "{text:?}");
        }
    }
}
