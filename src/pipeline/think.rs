//! Split a generated text into the reasoning trace and the answer (SPEC §4: the reasoning
//! trace is the text inside `<think>…</think>`; the answer is what follows it).

use serde::{Deserialize, Serialize};

/// Opening tag of the reasoning trace (Qwen3 / Qwen3-VL thinking templates).
pub const THINK_OPEN: &str = "<think>";
/// Closing tag of the reasoning trace.
pub const THINK_CLOSE: &str = "</think>";

/// A generated text split at its reasoning trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkSplit {
    /// The reasoning trace, trimmed of surrounding whitespace; `None` when the text has no
    /// `</think>` (no reasoning, or reasoning cut off by the token budget).
    pub think: Option<String>,
    /// The text after the first `</think>`, unchanged (not trimmed: `wrong_vlm` keeps it
    /// byte for byte). With reasoning on and no `</think>`, empty: the model never answered.
    pub answer: String,
    /// `false` when reasoning was expected but `</think>` never came (truncated trace).
    pub complete: bool,
}

/// Split `text`. `thinking` says whether the prompt enabled reasoning.
///
/// - A `</think>` present: `think` is what lies before it (after a leading `<think>` if
///   the model wrote one; thinking templates often put `<think>` in the prompt), `answer` is
///   what follows.
/// - No `</think>`, reasoning on: the trace never closed: `think = None`, `answer = ""`,
///   `complete = false`.
/// - No `</think>`, reasoning off: the whole text is the answer.
pub fn split_think(text: &str, thinking: bool) -> ThinkSplit {
    match text.find(THINK_CLOSE) {
        Some(end) => {
            let before = &text[..end];
            let inner = match before.find(THINK_OPEN) {
                Some(open) => &before[open + THINK_OPEN.len()..],
                None => before,
            };
            ThinkSplit {
                think: Some(inner.trim().to_string()),
                answer: text[end + THINK_CLOSE.len()..].to_string(),
                complete: true,
            }
        }
        None if thinking => ThinkSplit {
            think: None,
            answer: String::new(),
            complete: false,
        },
        None => ThinkSplit {
            think: None,
            answer: text.to_string(),
            complete: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_table() {
        // (text, thinking, think, answer, complete)
        let cases: &[(&str, bool, Option<&str>, &str, bool)] = &[
            (
                "<think>\nread 11850\n</think>\n\n11850",
                true,
                Some("read 11850"),
                "\n\n11850",
                true,
            ),
            (
                "digits look like 42\n</think>\n\n42",
                true,
                Some("digits look like 42"),
                "\n\n42",
                true,
            ),
            ("<think>\n\n</think>\n\n7", false, Some(""), "\n\n7", true),
            ("still thinking about it", true, None, "", false),
            ("1990", false, None, "1990", true),
            ("a</think>b</think>c", true, Some("a"), "b</think>c", true),
            ("<think>x</think>    ", true, Some("x"), "    ", true),
        ];
        for (text, thinking, think, answer, complete) in cases {
            let got = split_think(text, *thinking);
            assert_eq!(got.think.as_deref(), *think, "{text:?}");
            assert_eq!(got.answer, *answer, "{text:?}");
            assert_eq!(got.complete, *complete, "{text:?}");
        }
    }
}
