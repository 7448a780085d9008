//! The judge of contract §6: the text-only prompt, the fail-closed verdict parser and the number
//! guard. Pure functions: the model call itself belongs to the pipeline.

use serde::{Deserialize, Serialize};

use crate::verifiers::pytext::{py_splitlines, py_strip};
use crate::verifiers::think::{THINK_CLOSE, THINK_OPEN};

/// The judge's user message. Byte-identical to the text a small judge model is trained on:
/// do not edit. Placeholders `{question}`, `{reference}`, `{candidate}` are substituted in one
/// pass by [`build_judge_prompt`]; there is no trailing newline.
pub const JUDGE_TEMPLATE: &str = "You are grading an answer to a question about an image. You cannot see the image. Do not solve the question yourself: only compare the candidate answer with the reference answer.

Question: {question}
Reference answer: {reference}
Candidate answer: {candidate}

The candidate is CORRECT if it gives the same answer as the reference, ignoring case, spacing, punctuation and formatting. Numbers must agree exactly: every digit must match. It is WRONG if it gives a different answer. Say UNSURE only if the reference itself is empty, unreadable or ambiguous.
Reply with one word: CORRECT, WRONG or UNSURE.";

/// The judge's verdict (contract §6). Stored as `CORRECT`, `WRONG`, `UNSURE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// Same answer as the reference: the only verdict that can accept an item.
    Correct,
    /// A different answer.
    Wrong,
    /// The reference is unusable or ambiguous, or the output could not be parsed.
    Unsure,
}

impl Verdict {
    /// All verdicts; also the words the parser looks for.
    pub const ALL: [Verdict; 3] = [Verdict::Correct, Verdict::Wrong, Verdict::Unsure];

    /// The stored word: `CORRECT`, `WRONG`, `UNSURE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Correct => "CORRECT",
            Verdict::Wrong => "WRONG",
            Verdict::Unsure => "UNSURE",
        }
    }

    /// Parses a stored word (exactly `CORRECT`, `WRONG` or `UNSURE`).
    pub fn parse_stored(word: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == word)
    }
}

/// A judge call's result: the raw generated text and the verdict parsed from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeOutcome {
    /// The parsed verdict ([`parse_verdict`] of `raw`).
    pub verdict: Verdict,
    /// The judge's raw generated text, as stored in the splits.
    pub raw: String,
}

impl JudgeOutcome {
    /// Parses `raw` (the judge's whole output, reasoning tags included) into an outcome.
    pub fn from_raw(raw: impl Into<String>) -> JudgeOutcome {
        let raw = raw.into();
        JudgeOutcome {
            verdict: parse_verdict(&raw),
            raw,
        }
    }

    /// An outcome from the judge's generated text. When the chat template pre-filled an open
    /// `<think>` (`prefilled_open`) and the text holds none, `"<think>\n"` is put in front, so
    /// the stored `raw` re-parses to the same verdict on its own: a judge cut off while still
    /// reasoning is `UNSURE`, not the last line of its reasoning.
    pub fn from_generation(generated: &str, prefilled_open: bool) -> JudgeOutcome {
        if prefilled_open && !generated.contains(THINK_OPEN) {
            JudgeOutcome::from_raw(format!("{THINK_OPEN}\n{generated}"))
        } else {
            JudgeOutcome::from_raw(generated)
        }
    }
}

/// The `{reference}` text of the judge prompt: the one reference as it is, or several (a
/// list-valued answer) each as a JSON string, joined by ` or ` — `"black" or "Black"` — so
/// the judge sees every reference and where each begins and ends. No reference is `""`.
pub fn reference_text(references: &[&str]) -> String {
    match references {
        [one] => (*one).to_string(),
        many => many
            .iter()
            .map(|r| serde_json::Value::from(*r).to_string())
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// Fills [`JUDGE_TEMPLATE`] in one pass: a value containing a placeholder such as
/// `{reference}` is inserted literally, never expanded.
pub fn build_judge_prompt(question: &str, reference: &str, candidate: &str) -> String {
    let mut out = String::with_capacity(
        JUDGE_TEMPLATE.len() + question.len() + reference.len() + candidate.len(),
    );
    let mut rest = JUDGE_TEMPLATE;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let tail = &rest[open..];
        let (value, len) = [
            ("{question}", question),
            ("{reference}", reference),
            ("{candidate}", candidate),
        ]
        .into_iter()
        .find(|(ph, _)| tail.starts_with(ph))
        .map(|(ph, v)| (v, ph.len()))
        .unwrap_or(("{", 1));
        out.push_str(value);
        rest = &tail[len..];
    }
    out.push_str(rest);
    out
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether the text before a verdict word ends with a negation (`not`, `never`, `…n't`),
/// skipping markdown and spaces: `NOT CORRECT`, `not **WRONG**`, `isn't CORRECT`.
fn negated(before: &str) -> bool {
    let trimmed = before.trim_end_matches(|c: char| !is_word_char(c));
    let word_start = trimmed
        .char_indices()
        .rev()
        .find(|&(_, c)| !(is_word_char(c) || c == '\'' || c == '\u{2019}'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = trimmed[word_start..].to_lowercase();
    word == "not" || word == "never" || word.ends_with("n't") || word.ends_with("n\u{2019}t")
}

/// The verdict words standing as whole words in `line`, in order (`INCORRECT`, `CORRECTLY`,
/// `Correct` do not count). A negated word yields `Unsure`.
fn verdict_words(line: &str) -> Vec<Verdict> {
    let mut found = Vec::new();
    for verdict in Verdict::ALL {
        let word = verdict.as_str();
        for (at, _) in line.match_indices(word) {
            let before = line[..at].chars().next_back();
            let after = line[at + word.len()..].chars().next();
            if before.is_some_and(is_word_char) || after.is_some_and(is_word_char) {
                continue;
            }
            found.push(if negated(&line[..at]) {
                Verdict::Unsure
            } else {
                verdict
            });
        }
    }
    found
}

/// The judge's final answer: the text after its own last `</think>`; `None` when it opened a
/// `<think>` and never closed it (no final answer).
pub fn final_answer(raw: &str) -> Option<&str> {
    match raw.rfind(THINK_CLOSE) {
        Some(close) => Some(&raw[close + THINK_CLOSE.len()..]),
        None if raw.contains(THINK_OPEN) => None,
        None => Some(raw),
    }
}

/// Parses a judge output into a verdict, failing closed (contract §6): only the final answer
/// ([`final_answer`]) is read; its last non-empty line (Python `splitlines`/`strip`) must hold
/// verdict words of exactly one kind, as whole upper-case words (surrounding punctuation and
/// markdown are fine; `CORRECT … CORRECT` is fine, `CORRECT or WRONG` is not). Anything else
/// is [`Verdict::Unsure`]. Beyond contract §6, also fail-closed: a verdict word directly preceded
/// by a negation (`NOT CORRECT`, `isn't CORRECT`) is `Unsure`.
pub fn parse_verdict(raw: &str) -> Verdict {
    let Some(answer) = final_answer(raw) else {
        return Verdict::Unsure;
    };
    let Some(last) = py_splitlines(answer)
        .into_iter()
        .rev()
        .find(|line| !py_strip(line).is_empty())
    else {
        return Verdict::Unsure;
    };
    let words = verdict_words(last);
    match words.first() {
        Some(&first) if words.iter().all(|&w| w == first) => first,
        _ => Verdict::Unsure,
    }
}

/// The number guard is on unless switched off (contract §6).
pub const NUMBER_GUARD_DEFAULT: bool = true;

/// All ASCII digits of `s`, in order.
pub fn ascii_digits(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// The number guard's test (contract §6): both texts contain ASCII digits and their digit
/// sequences differ (`ll.850` → `850` vs `11850`).
pub fn numbers_disagree(candidate: &str, reference: &str) -> bool {
    let c = ascii_digits(candidate);
    let r = ascii_digits(reference);
    !c.is_empty() && !r.is_empty() && c != r
}

/// Whether the number guard vetoes a verdict: only a `CORRECT`, only when the guard is on
/// and [`numbers_disagree`] holds (reason `judge_numbers_disagree`).
pub fn guard_vetoes(verdict: Verdict, candidate: &str, reference: &str, guard_on: bool) -> bool {
    verdict == Verdict::Correct && guard_on && numbers_disagree(candidate, reference)
}

/// Calibration tally (contract §6): the judge run over items the string verifier accepted; a
/// `CORRECT` counts as agreement. The reference run agreed on 59 of 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Calibration {
    /// Verifier-accepted items the judge graded.
    pub judged: usize,
    /// Of those, the ones it called `CORRECT`.
    pub agreed: usize,
}

impl Calibration {
    /// Counts one verdict on a verifier-accepted item.
    pub fn record(&mut self, verdict: Verdict) {
        self.judged += 1;
        self.agreed += usize::from(verdict == Verdict::Correct);
    }

    /// `agreed / judged`, or `None` before any item.
    pub fn agreement(&self) -> Option<f64> {
        (self.judged > 0).then(|| self.agreed as f64 / self.judged as f64)
    }
}

#[cfg(test)]
mod tests;
