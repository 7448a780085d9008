//! Split routing (contract §6–§7): from one QA item, the model's raw generation, the family's
//! verifier and the judge's outcome, decide the split and build the `qa` entry. Pure.
//!
//! The decision, in order ([`decide`]; `verify` re-runs the same function on stored fields):
//!
//! | # | condition | result | judge? |
//! | --- | --- | --- | --- |
//! | 1 | finish reason `length`, or the think never closed | rejected `truncated` | no |
//! | 2 | the answer is blank ([`is_blank`]) | rejected `no_answer` | no |
//! | 3 | the string verifier accepts (usable reference) | accepted, `verifier:<name>:<variant>` | no |
//! | 4 | judge `CORRECT`, number guard on and digits differ | rejected `judge_numbers_disagree` | yes |
//! | 5 | judge `CORRECT` otherwise | accepted, `judge` | yes |
//! | 6 | the reference is unusable for the verifier | rejected `unusable_reference` | yes |
//! | 7 | judge `UNSURE` (or unparseable) | rejected `judge_unsure` | yes |
//! | 8 | judge `WRONG`, or the judge did not run | rejected `wrong_answer` | yes |
//!
//! Contract §1 sends every verifier reject to the judge; a truncated or blank answer has nothing
//! to grade, so rows 1–2 are routed without it ([`Assessment::needs_judge`]). Row 4 comes
//! before row 6 so a vetoed `CORRECT` is always reported as such.
//!
//! Accepted entries carry the model's text, never the reference (contract §7): the variant that
//! passed the verifier, or the whole answer the judge graded. Rejected entries carry the
//! reference as `answer` and the model's stripped answer as `wrong_vlm`.

use serde::{Deserialize, Serialize};
use unicode_general_category::{get_general_category, GeneralCategory};

use crate::judge::{guard_vetoes, JudgeOutcome, Verdict};
use crate::record::{AcceptedQa, QaItem, RejectedQa};
use crate::verifiers::pytext::py_isspace;
use crate::verifiers::pytext::py_strip;
use crate::verifiers::think::{split_think, AnswerFormat, ThinkSplit};
use crate::verifiers::{Verification, Verifier};

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-sequence or a stop token.
    Stop,
    /// The token limit was reached.
    Length,
}

/// A model's raw generation for one QA item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// Decoded text (special tokens removed), reasoning included.
    pub raw: String,
    /// Why it stopped.
    pub finish: FinishReason,
    /// The prompt ended with an open `<think>` pre-filled by the chat template.
    pub prefilled_open: bool,
    /// Where the model's family writes its final answer after the reasoning.
    #[serde(default)]
    pub format: AnswerFormat,
}

/// Why an item was rejected; stored as the snake-case `reason` of the rejected split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The verifier rejected and the judge said `WRONG` or did not run.
    WrongAnswer,
    /// The verifier rejected and the judge said `UNSURE` or its output did not parse.
    JudgeUnsure,
    /// The judge said `CORRECT` but the number guard vetoed it.
    JudgeNumbersDisagree,
    /// The answer after the reasoning is blank.
    NoAnswer,
    /// The generation hit the token limit or never closed its reasoning.
    Truncated,
    /// The reference cannot be string-verified and the judge did not accept.
    UnusableReference,
}

impl RejectReason {
    /// Every reason.
    pub const ALL: [RejectReason; 6] = [
        RejectReason::WrongAnswer,
        RejectReason::JudgeUnsure,
        RejectReason::JudgeNumbersDisagree,
        RejectReason::NoAnswer,
        RejectReason::Truncated,
        RejectReason::UnusableReference,
    ];

    /// The stored name (`wrong_answer`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::WrongAnswer => "wrong_answer",
            RejectReason::JudgeUnsure => "judge_unsure",
            RejectReason::JudgeNumbersDisagree => "judge_numbers_disagree",
            RejectReason::NoAnswer => "no_answer",
            RejectReason::Truncated => "truncated",
            RejectReason::UnusableReference => "unusable_reference",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<RejectReason> {
        RejectReason::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// Whether the judge is consulted before this reason is given (rows 4–8).
    pub fn is_judged(self) -> bool {
        !matches!(self, RejectReason::NoAnswer | RejectReason::Truncated)
    }
}

/// `accepted_by` of a judge-accepted entry.
pub const ACCEPTED_BY_JUDGE: &str = "judge";

/// The decision for one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Accepted into `_RS_think` / `_RS_nothink`.
    Accept {
        /// `verifier:<name>:<variant>` or `judge`.
        accepted_by: String,
        /// The model's text to store as `answer`.
        answer: String,
    },
    /// Rejected, with the reason.
    Reject(RejectReason),
}

/// Characters outside categories Cc/Cf/Z* that render as nothing: the non-format
/// `Default_Ignorable_Code_Point`s (combining grapheme joiner, Hangul fillers, Khmer inherent
/// vowels, Mongolian free variation selectors, variation selectors) and the blank braille
/// pattern U+2800.
fn renders_as_nothing(c: char) -> bool {
    matches!(
        c,
        '\u{34F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{2800}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FFA0}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

/// Whether an answer has no visible content: every character is Python whitespace, a
/// control or format character (zero-width space, BOM, word joiner, soft hyphen, …), a
/// space/line/paragraph separator or another character that renders as nothing (Hangul
/// filler, variation selector, blank braille). Such an answer is `no_answer` (contract §8, first
/// row: "4 characters that render as nothing").
pub fn is_blank(answer: &str) -> bool {
    answer.chars().all(|c| {
        py_isspace(c)
            || renders_as_nothing(c)
            || matches!(
                get_general_category(c),
                GeneralCategory::Control
                    | GeneralCategory::Format
                    | GeneralCategory::SpaceSeparator
                    | GeneralCategory::LineSeparator
                    | GeneralCategory::ParagraphSeparator
            )
    })
}

/// The decision table of the module doc. `answer` is the model's stripped answer,
/// `verification` the verifier's result on it, `judge` the judge's verdict if it ran,
/// `references` the item's references (several for a list-valued answer): the number guard
/// vetoes a `CORRECT` only when the answer's digits agree with none of them.
pub fn decide(
    answer: &str,
    truncated: bool,
    verification: &Verification,
    judge: Option<Verdict>,
    references: &[&str],
    number_guard: bool,
) -> Decision {
    if truncated {
        return Decision::Reject(RejectReason::Truncated);
    }
    if is_blank(answer) {
        return Decision::Reject(RejectReason::NoAnswer);
    }
    if let (Some(by), Some(trial)) = (verification.accepted_by(), verification.accepted_trial()) {
        return Decision::Accept {
            accepted_by: by,
            answer: trial.text.clone(),
        };
    }
    match judge {
        Some(Verdict::Correct)
            if references
                .iter()
                .all(|r| guard_vetoes(Verdict::Correct, answer, r, number_guard)) =>
        {
            Decision::Reject(RejectReason::JudgeNumbersDisagree)
        }
        Some(Verdict::Correct) => Decision::Accept {
            accepted_by: ACCEPTED_BY_JUDGE.to_string(),
            answer: answer.to_string(),
        },
        _ if verification.unusable_reference => Decision::Reject(RejectReason::UnusableReference),
        Some(Verdict::Unsure) => Decision::Reject(RejectReason::JudgeUnsure),
        Some(Verdict::Wrong) | None => Decision::Reject(RejectReason::WrongAnswer),
    }
}

/// Everything known about an item before the judge.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// The generation split into reasoning and the text after it (`vlm_answer`,
    /// `wrong_vlm`).
    pub split: ThinkSplit,
    /// The final answer in that text, as the family writes it ([`AnswerFormat`]; the whole
    /// text but for GLM's box), stripped: what the verifier checks and the judge grades.
    pub answer: String,
    /// Finish reason `length` or an unterminated think.
    pub truncated: bool,
    /// The verifier's result on the stripped answer against the reference.
    pub verification: Verification,
}

impl Assessment {
    /// Splits the generation and runs the verifier against the item's references (one, or
    /// several for a list-valued answer: [`Verifier::verify_any`]).
    pub fn new(generation: &Generation, references: &[&str], verifier: &Verifier) -> Assessment {
        let split = split_think(&generation.raw, generation.prefilled_open);
        let answer = py_strip(generation.format.answer_of(&split.answer)).to_string();
        let truncated = generation.finish == FinishReason::Length || split.unterminated;
        let verification = verifier.verify_any(&answer, references);
        Assessment {
            split,
            answer,
            truncated,
            verification,
        }
    }

    /// Whether the judge must grade this item: not truncated, not blank, rejected by the
    /// verifier (an unusable reference included).
    pub fn needs_judge(&self) -> bool {
        !self.truncated && !is_blank(&self.answer) && !self.verification.accepted()
    }

    /// The candidate text the judge grades (the stripped answer).
    pub fn judge_candidate(&self) -> &str {
        &self.answer
    }
}

/// Where an item went, with its entries. (Short-lived, one per item: the size difference
/// between the variants does not matter.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Routed {
    /// Accepted: the `_RS_think` entry (with `think`) and the `_RS_nothink` entry (without).
    Accepted {
        /// For `_RS_think`.
        think: AcceptedQa,
        /// For `_RS_nothink` (`think` is `None`).
        nothink: AcceptedQa,
    },
    /// For `_rejected`.
    Rejected(RejectedQa),
}

/// Routes one item. `judge` is ignored unless [`Assessment::needs_judge`] (a judge verdict on
/// a verifier-accepted item is calibration only, not stored).
pub fn route(
    qa: &QaItem,
    assessment: &Assessment,
    judge: Option<&JudgeOutcome>,
    number_guard: bool,
) -> Routed {
    let judge = judge.filter(|_| assessment.needs_judge());
    let decision = decide(
        &assessment.answer,
        assessment.truncated,
        &assessment.verification,
        judge.map(|j| j.verdict),
        &qa.references(),
        number_guard,
    );
    let verdict = judge.map(|j| j.verdict.as_str().to_string());
    let raw = judge.map(|j| j.raw.clone());
    match decision {
        Decision::Accept {
            accepted_by,
            answer,
        } => {
            let by_judge = accepted_by == ACCEPTED_BY_JUDGE;
            let think = AcceptedQa {
                question: qa.question.clone(),
                answer,
                org_answer: qa.answer.clone(),
                vlm_answer: assessment.split.answer.clone(),
                think: assessment.split.think.clone(),
                accepted_by,
                judge_verdict: verdict.filter(|_| by_judge),
                judge_raw: raw.filter(|_| by_judge),
            };
            let nothink = AcceptedQa {
                think: None,
                ..think.clone()
            };
            Routed::Accepted { think, nothink }
        }
        Decision::Reject(reason) => Routed::Rejected(RejectedQa {
            question: qa.question.clone(),
            answer: qa.answer.clone(),
            wrong_vlm: assessment.split.answer.clone(),
            reason: reason.as_str().to_string(),
            judge_verdict: verdict,
            judge_raw: raw,
        }),
    }
}

#[cfg(test)]
mod tests;
