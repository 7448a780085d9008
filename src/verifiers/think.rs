//! Think/answer split of a raw generation (contract §4: the reasoning trace is the text inside
//! `<think>…</think>`; the answer is what follows it).
//!
//! Rules:
//! - With a `</think>`: the reasoning ends at the **last** `</think>` (so the answer never
//!   holds a closing tag); it starts after the first `<think>` before that, or at the start of
//!   the text when the opening tag is missing because the chat template pre-filled it. The
//!   answer is everything after the last `</think>`.
//! - Without `</think>`, when the text holds a `<think>` or the prompt pre-filled an open
//!   `<think>`: the reasoning never ended, the answer is empty and the generation counts as
//!   truncated.
//! - Otherwise (a model or mode without reasoning): no trace, the whole text is the answer.
//!
//! Trace and answer are trimmed of surrounding whitespace with Python's `strip()` set.

use serde::{Deserialize, Serialize};

use super::pytext::py_strip;

/// The reasoning tags of the Qwen3 chat templates (declared with the templates).
pub use verisample_models::chat::{THINK_CLOSE, THINK_OPEN};
/// Where a family's answer is in the text after the reasoning (GLM: its last box).
pub use verisample_models::AnswerFormat;

/// A raw generation split into reasoning and answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkSplit {
    /// The reasoning trace, stripped; `None` when the generation has no reasoning.
    pub think: Option<String>,
    /// The answer after the reasoning, stripped (empty for an unterminated think).
    pub answer: String,
    /// The reasoning was opened but never closed (the generation is truncated).
    pub unterminated: bool,
}

/// Splits `raw` by the rules of the module doc. `prefilled_open` says whether the prompt
/// ended with an open `<think>` (the template pre-fills it, so the generation starts inside
/// the reasoning).
pub fn split_think(raw: &str, prefilled_open: bool) -> ThinkSplit {
    if let Some(close) = raw.rfind(THINK_CLOSE) {
        let before = &raw[..close];
        let trace = match before.find(THINK_OPEN) {
            Some(open) => &before[open + THINK_OPEN.len()..],
            None => before,
        };
        return ThinkSplit {
            think: Some(py_strip(trace).to_string()),
            answer: py_strip(&raw[close + THINK_CLOSE.len()..]).to_string(),
            unterminated: false,
        };
    }
    match raw.find(THINK_OPEN) {
        Some(open) => ThinkSplit {
            think: Some(py_strip(&raw[open + THINK_OPEN.len()..]).to_string()),
            answer: String::new(),
            unterminated: true,
        },
        None if prefilled_open => ThinkSplit {
            think: Some(py_strip(raw).to_string()),
            answer: String::new(),
            unterminated: true,
        },
        None => ThinkSplit {
            think: None,
            answer: py_strip(raw).to_string(),
            unterminated: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_table() {
        // (raw, prefilled_open, think, answer, unterminated)
        let cases: [(&str, bool, Option<&str>, &str, bool); 9] = [
            (
                "<think>\nlooks like 11850\n</think>\n\n11850",
                false,
                Some("looks like 11850"),
                "11850",
                false,
            ),
            (
                "reads 1432\n</think>\n\n1432\n",
                true,
                Some("reads 1432"),
                "1432",
                false,
            ),
            (
                "reads 1432\n</think>\n\n1432\n",
                false,
                Some("reads 1432"),
                "1432",
                false,
            ),
            (
                "<think>\nstill thinking about the dig",
                false,
                Some("still thinking about the dig"),
                "",
                true,
            ),
            (
                "still thinking about the dig",
                true,
                Some("still thinking about the dig"),
                "",
                true,
            ),
            ("11850", false, None, "11850", false),
            (
                "<think>a</think>b</think> c\u{3000}",
                false,
                Some("a</think>b"),
                "c",
                false,
            ),
            (
                "<think>\n\n</think>\n\n\x1c\u{2028}",
                false,
                Some(""),
                "",
                false,
            ),
            ("\u{a0} M. Este \x1f", false, None, "M. Este", false),
        ];
        for (raw, pre, think, answer, unterminated) in cases {
            let got = split_think(raw, pre);
            assert_eq!(got.think.as_deref(), think, "{raw:?}");
            assert_eq!(got.answer, answer, "{raw:?}");
            assert_eq!(got.unterminated, unterminated, "{raw:?}");
        }
    }
}
