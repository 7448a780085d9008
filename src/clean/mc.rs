//! Multiple-choice normalisation (contract §3): options flattened into prose ("… Options: A. cat
//! B. dog") are re-rendered as a lettered block, one option per line, and a reference given as
//! option text is rewritten to the bare letter. When detection is not certain, the item is
//! left unchanged.
//!
//! Detection, per marker style — `A.` (dot), `(A)` (paren), `A)` (close) — each marker
//! preceded by the start or whitespace:
//! - the markers of one style form one run `A, B, C, …` (consecutive from `A`, at least two);
//!   a marker of that style outside the run, or runs in two styles, is uncertain;
//! - the stem (text before `A`, minus a trailing `Options:` / `Choices:` label) is non-empty;
//! - every option text is non-empty and holds no sentence break (`[.?!]` then an upper-case
//!   letter) — so `Mr. Smith` is uncertain, not split;
//! - a trailing instruction after the last option is recognised only when it starts on a new
//!   line or with a known instruction phrase (`Answer with`, `Please answer`, …);
//! - the reference is a letter in range (`B`, `(B)`, `B.`), a label plus its option text
//!   (`B. dog`), or exactly one option's text (case, spaces and a final full stop ignored).
//!
//! Output: `stem`, then one `X. text` line per option, then the trailing instruction if any,
//! joined with `\n`.

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::verifiers::pytext::py_strip;

/// Instruction phrases that may follow the last option on the same line (case-insensitive).
pub const TRAILING_INSTRUCTIONS: [&str; 6] = [
    "answer with",
    "please answer",
    "please select",
    "please choose",
    "select the",
    "choose the",
];

/// The result of [`normalise_mc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum McOutcome {
    /// No option run was found.
    NotMultipleChoice,
    /// Options in block form already and the reference is a bare letter: nothing to do.
    AlreadyNormal,
    /// Rewritten question and/or reference.
    Rewritten {
        /// The question with the lettered block.
        question: String,
        /// The reference as a bare upper-case letter.
        answer: String,
    },
    /// Something option-like was found but not with certainty: left unchanged.
    Uncertain {
        /// Which check failed.
        why: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Dot,
    Paren,
    Close,
}

impl Style {
    const ALL: [Style; 3] = [Style::Dot, Style::Paren, Style::Close];

    fn regex(self) -> &'static Regex {
        static RES: OnceLock<[Regex; 3]> = OnceLock::new();
        let res = RES.get_or_init(|| {
            [
                Regex::new(r"(?:^|\s)([A-Z])\.\s").expect("static regex"),
                Regex::new(r"(?:^|\s)\(([A-Z])\)\s").expect("static regex"),
                Regex::new(r"(?:^|\s)([A-Z])\)\s").expect("static regex"),
            ]
        });
        &res[self as usize]
    }
}

/// One marker: its letter, where the marker starts (after the preceding whitespace) and where
/// the option text begins.
#[derive(Debug, Clone, Copy)]
struct Marker {
    letter: u8,
    start: usize,
    text_start: usize,
}

fn markers(text: &str, style: Style) -> Vec<Marker> {
    // Append a space so a marker at the very end still matches; positions stay valid.
    let padded = format!("{text} ");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(caps) = style.regex().captures_at(&padded, from) {
        let (Some(all), Some(letter)) = (caps.get(0), caps.get(1)) else {
            break;
        };
        let start = if all.as_str().starts_with(char::is_whitespace) {
            all.start() + all.as_str().chars().next().map_or(0, char::len_utf8)
        } else {
            all.start()
        };
        out.push(Marker {
            letter: letter.as_str().as_bytes()[0],
            start,
            text_start: all.end().min(text.len()),
        });
        // Markers may share the whitespace between them: resume at the last whitespace.
        from = all.end() - 1;
    }
    out
}

fn sentence_break_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"[.?!]\s+\p{Lu}").expect("static regex"))
}

fn label_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?i)(?:options|choices)\s*:\s*$").expect("static regex"))
}

fn fold(s: &str) -> String {
    let t = py_strip(s).trim_end_matches('.');
    t.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn uncertain(why: &str) -> McOutcome {
    McOutcome::Uncertain {
        why: why.to_string(),
    }
}

/// The run of markers `A, B, …` of one style, or why it is uncertain; `Ok(None)` when the
/// style has fewer than two markers in a run from `A`.
fn find_run(text: &str, style: Style) -> Result<Option<Vec<Marker>>, &'static str> {
    let all = markers(text, style);
    let Some(first) = all.iter().position(|m| m.letter == b'A') else {
        return Ok(None);
    };
    let mut run = vec![all[first]];
    for m in &all[first + 1..] {
        if m.letter == run[run.len() - 1].letter + 1 {
            run.push(*m);
        } else {
            return Err("a marker outside the option run");
        }
    }
    if run.len() < 2 {
        return Ok(None);
    }
    if first > 0 {
        return Err("a marker before option A");
    }
    Ok(Some(run))
}

/// Resolves a reference to an option letter, or `None`.
fn reference_letter(reference: &str, options: &[String]) -> Option<u8> {
    let r = py_strip(reference);
    let in_range = |c: u8| (c >= b'A' && usize::from(c - b'A') < options.len()).then_some(c);
    let bare = r.trim_start_matches('(').trim_end_matches(['.', ')']);
    if bare.len() == 1 && bare.as_bytes()[0].is_ascii_alphabetic() {
        let c = bare.as_bytes()[0].to_ascii_uppercase();
        // A lower-case bare letter that is also an option's text is ambiguous.
        let clash = options.iter().any(|o| fold(o) == fold(bare));
        return if clash && bare.as_bytes()[0].is_ascii_lowercase() {
            None
        } else {
            in_range(c)
        };
    }
    for style in Style::ALL {
        if let Some(m) = markers(r, style).first() {
            if m.start == 0 {
                let c = in_range(m.letter)?;
                let text = &r[m.text_start..];
                return (fold(text) == fold(&options[usize::from(c - b'A')])).then_some(c);
            }
        }
    }
    let target = fold(r);
    let mut hits = options
        .iter()
        .enumerate()
        .filter(|(_, o)| fold(o) == target);
    match (hits.next(), hits.next()) {
        (Some((i, _)), None) => u8::try_from(i).ok().map(|i| b'A' + i),
        _ => None,
    }
}

/// Normalises one multiple-choice item by the rules of the module doc.
pub fn normalise_mc(question: &str, reference: &str) -> McOutcome {
    let mut found = None;
    for style in Style::ALL {
        match find_run(question, style) {
            Err(why) => return uncertain(why),
            Ok(None) => {}
            Ok(Some(run)) if found.is_none() => found = Some(run),
            Ok(Some(_)) => return uncertain("option runs in two marker styles"),
        }
    }
    let Some(run) = found else {
        return McOutcome::NotMultipleChoice;
    };
    let stem_raw = &question[..run[0].start];
    let stem = py_strip(label_re().replace(py_strip(stem_raw), "").as_ref()).to_string();
    if stem.is_empty() {
        return uncertain("no question before the options");
    }
    let mut options: Vec<String> = Vec::with_capacity(run.len());
    let mut trailing = String::new();
    for (k, m) in run.iter().enumerate() {
        let end = run.get(k + 1).map_or(question.len(), |n| n.start);
        let mut text = py_strip(&question[m.text_start..end]).to_string();
        if k + 1 == run.len() {
            if let Some((head, tail)) = text.split_once('\n') {
                trailing = py_strip(tail).to_string();
                text = py_strip(head).to_string();
            } else {
                let lower = text.to_lowercase();
                let cut = TRAILING_INSTRUCTIONS
                    .iter()
                    .filter_map(|p| lower.find(p))
                    .min()
                    .filter(|&i| text.is_char_boundary(i));
                if let Some(i) = cut {
                    trailing = text[i..].to_string();
                    text = py_strip(&text[..i]).to_string();
                }
            }
        }
        if text.is_empty() {
            return uncertain("an empty option");
        }
        if text.contains('\n') || sentence_break_re().is_match(&text) {
            return uncertain("an option text with a sentence break");
        }
        options.push(text);
    }
    let Some(letter) = reference_letter(reference, &options) else {
        return uncertain("the reference names no single option");
    };
    let mut lines = vec![stem];
    for (i, o) in options.iter().enumerate() {
        lines.push(format!(
            "{}. {o}",
            char::from(b'A' + u8::try_from(i).unwrap_or(0))
        ));
    }
    if !trailing.is_empty() {
        lines.push(trailing);
    }
    let rendered = lines.join("\n");
    let answer = char::from(letter).to_string();
    if rendered == question && answer == reference {
        McOutcome::AlreadyNormal
    } else {
        McOutcome::Rewritten {
            question: rendered,
            answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(q: &str, a: &str) -> (String, String) {
        match normalise_mc(q, a) {
            McOutcome::Rewritten { question, answer } => (question, answer),
            other => panic!("{q:?}: expected a rewrite, got {other:?}"),
        }
    }

    #[test]
    fn rewrite_table() {
        // (question, reference, rendered question, letter)
        let cases = [
            ("What animal is shown? Options: A. cat B. dog C. bird", "dog", "What animal is shown?\nA. cat\nB. dog\nC. bird", "B"),
            ("What animal is shown? (A) cat (B) dog", "(A)", "What animal is shown?\nA. cat\nB. dog", "A"),
            ("Which colour? A) red B) green C) blue D) light grey", "Light grey.", "Which colour?\nA. red\nB. green\nC. blue\nD. light grey", "D"),
            ("Which colour? A. red B. green Answer with the option's letter from the given choices directly.", "b", "Which colour?\nA. red\nB. green\nAnswer with the option's letter from the given choices directly.", "B"),
            ("Which colour?\nA. red\nB. green\nAnswer with the letter.", "green", "Which colour?\nA. red\nB. green\nAnswer with the letter.", "B"),
            ("Which sign? Choices: A. STOP B. YIELD", "B. YIELD", "Which sign?\nA. STOP\nB. YIELD", "B"),
        ];
        for (q, a, want_q, want_a) in cases {
            let (got_q, got_a) = rewritten(q, a);
            assert_eq!(got_q, want_q, "{q:?}");
            assert_eq!(got_a, want_a, "{q:?}");
        }
    }

    #[test]
    fn unchanged_table() {
        let cases = [
            (
                "What is written in the image?",
                "11850",
                McOutcome::NotMultipleChoice,
            ),
            (
                "Is option A. better than the rest?",
                "yes",
                McOutcome::NotMultipleChoice,
            ),
            (
                "Which is it?\nA. cat\nB. dog",
                "B",
                McOutcome::AlreadyNormal,
            ),
            (
                "Who? A. Mr. Smith B. Mrs. Jones",
                "A",
                uncertain("an option text with a sentence break"),
            ),
            (
                "Which? A. cat B. dog",
                "horse",
                uncertain("the reference names no single option"),
            ),
            (
                "Which? A. cat B. dog",
                "C",
                uncertain("the reference names no single option"),
            ),
            (
                "Plan B. Which? A. cat B. dog",
                "A",
                uncertain("a marker before option A"),
            ),
            (
                "Which? A. cat B. dog D. fish",
                "A",
                uncertain("a marker outside the option run"),
            ),
            (
                "A. cat B. dog",
                "A",
                uncertain("no question before the options"),
            ),
            ("Which? A. cat B.  ", "A", uncertain("an empty option")),
            (
                "Which? A. cat B. dog (A) x (B) y",
                "A",
                uncertain("option runs in two marker styles"),
            ),
            (
                "Which? A. a B. b",
                "b",
                uncertain("the reference names no single option"),
            ),
        ];
        for (q, a, want) in cases {
            assert_eq!(normalise_mc(q, a), want, "{q:?}");
        }
    }
}
