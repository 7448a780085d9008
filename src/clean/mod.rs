//! Cleaning before sampling (contract §3) as composable passes over [`InputRow`]s. Each dropped
//! or rewritten item is counted in a [`CleanReport`] (serialisable into `run.json`), never
//! silent; what happened to each row is kept in [`RowNotes`] for its `clean_meta`, together
//! with the [`CleanPolicy`] applied.
//!
//! Passes, in order, on each `qa` item:
//! 1. [`Pass::Provenance`]: the row's stored `image_sha256`, when present, must be the hex
//!    SHA-256 of its image bytes (computed here, case-insensitive); else every item of the
//!    row is dropped as `image_sha256_mismatch` (never silently re-hashed). Then a `source`,
//!    when present, must equal that hash or the image `path` (exact); else the item is
//!    dropped as `provenance_mismatch`. An item without `source` passes.
//! 2. [`Pass::TaskPurity`]: for a family with an allow-list, the question must be one of its
//!    allowed questions, byte for byte; else dropped as `off_task` (OrandCar keeps only
//!    [`ORAND_CAR_QUESTION`]). Families without a list, and rows without a family, pass.
//! 3. [`Pass::McNormalise`]: multiple-choice normalisation ([`mc`]); rewrites are counted
//!    as `mc_normalised`, uncertain detections left unchanged as `mc_uncertain`.
//!
//! A row whose items are all dropped is dropped (`rows_without_qa`).

pub mod mc;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::family::{ORAND_CAR, ORAND_CAR_QUESTION};
use crate::record::{InputRow, QaItem};
use mc::{normalise_mc, McOutcome};

/// Why an item was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The item's `source` is neither the image's hash nor its path.
    ProvenanceMismatch,
    /// The row's stored `image_sha256` is not the hash of its image bytes.
    ImageSha256Mismatch,
    /// The question is not the family's task.
    OffTask,
}

impl DropReason {
    /// The reported name.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::ProvenanceMismatch => "provenance_mismatch",
            DropReason::ImageSha256Mismatch => "image_sha256_mismatch",
            DropReason::OffTask => "off_task",
        }
    }
}

/// The cleaning policy: which passes run and the per-family question allow-lists. Recorded
/// in every row's `clean_meta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanPolicy {
    /// Run the provenance checks (stored image hash, item `source`).
    pub provenance: bool,
    /// Run task purity.
    pub task_purity: bool,
    /// Family → the only questions it keeps (byte-identical).
    pub allowed_questions: BTreeMap<String, Vec<String>>,
    /// Run multiple-choice normalisation.
    pub mc_normalise: bool,
}

impl Default for CleanPolicy {
    /// All passes on; OrandCar keeps only [`ORAND_CAR_QUESTION`].
    fn default() -> Self {
        let mut allowed_questions = BTreeMap::new();
        allowed_questions.insert(ORAND_CAR.to_string(), vec![ORAND_CAR_QUESTION.to_string()]);
        CleanPolicy {
            provenance: true,
            task_purity: true,
            allowed_questions,
            mc_normalise: true,
        }
    }
}

/// One cleaning pass over a `qa` item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Contract §3 provenance check.
    Provenance,
    /// Contract §3 task purity.
    TaskPurity,
    /// Contract §3 multiple-choice normalisation.
    McNormalise,
}

/// What a pass did to an item.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Kept as is.
    Keep,
    /// Replaced by a rewritten item.
    Rewrite(QaItem),
    /// Kept unchanged, but a detection was uncertain (counted as `mc_uncertain`).
    Uncertain(String),
    /// Dropped.
    Drop(DropReason),
}

/// Per-row context the passes need, computed once per row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowContext<'a> {
    /// Hex SHA-256 of the image bytes, if the row has bytes.
    pub sha256: Option<String>,
    /// The row's stored `image_sha256`, if any.
    pub stored_sha256: Option<&'a str>,
    /// The image path, if any.
    pub path: Option<&'a str>,
    /// The row's family, if any.
    pub family: Option<&'a str>,
}

impl<'a> RowContext<'a> {
    /// Computes the context of `row` (hashes the image bytes).
    pub fn new(row: &'a InputRow) -> RowContext<'a> {
        RowContext {
            sha256: row
                .image
                .bytes
                .as_ref()
                .map(|b| hex::encode(Sha256::digest(b))),
            stored_sha256: row.image_sha256.as_deref(),
            path: row.image.path.as_deref(),
            family: row.family.as_deref(),
        }
    }
}

impl Pass {
    /// Applies the pass to one item.
    pub fn apply(self, policy: &CleanPolicy, ctx: &RowContext<'_>, item: &QaItem) -> Action {
        match self {
            Pass::Provenance => {
                if let (Some(stored), Some(computed)) = (ctx.stored_sha256, &ctx.sha256) {
                    if !stored.eq_ignore_ascii_case(computed) {
                        return Action::Drop(DropReason::ImageSha256Mismatch);
                    }
                }
                let Some(source) = item.source.as_deref() else {
                    return Action::Keep;
                };
                let by_hash = ctx
                    .sha256
                    .as_deref()
                    .is_some_and(|h| h.eq_ignore_ascii_case(source));
                let by_path = ctx.path == Some(source);
                if by_hash || by_path {
                    Action::Keep
                } else {
                    Action::Drop(DropReason::ProvenanceMismatch)
                }
            }
            Pass::TaskPurity => match ctx.family.and_then(|f| policy.allowed_questions.get(f)) {
                Some(allowed) if !allowed.iter().any(|q| q == &item.question) => {
                    Action::Drop(DropReason::OffTask)
                }
                _ => Action::Keep,
            },
            Pass::McNormalise => match normalise_mc(&item.question, &item.answer) {
                McOutcome::Rewritten { question, answer } => Action::Rewrite(QaItem {
                    question,
                    answer,
                    answer_list: None,
                    ..item.clone()
                }),
                McOutcome::Uncertain { why } => Action::Uncertain(why),
                McOutcome::NotMultipleChoice | McOutcome::AlreadyNormal => Action::Keep,
            },
        }
    }
}

/// Why `question` failed task purity for `family` under `policy` (for `cleaning.jsonl`): where
/// it first differs from the allowed question it comes closest to (the longest common prefix,
/// in characters), what was found there and what was expected — a trailing space or a
/// different quote mark is otherwise invisible. `None` when the family has no allow-list.
pub fn off_task_detail(policy: &CleanPolicy, family: &str, question: &str) -> Option<String> {
    let common = |allowed: &String| {
        question
            .chars()
            .zip(allowed.chars())
            .take_while(|(a, b)| a == b)
            .count()
    };
    let allowed = policy
        .allowed_questions
        .get(family)?
        .iter()
        .max_by_key(|a| common(a))?;
    let at = common(allowed);
    let shown = |c: Option<char>| c.map_or_else(|| "the end".to_string(), |c| format!("{c:?}"));
    Some(format!(
        "the question is not {family}'s task question {allowed:?}: character {} is {} where {} \
         is expected",
        at + 1,
        shown(question.chars().nth(at)),
        shown(allowed.chars().nth(at)),
    ))
}

/// What cleaning did to one row; goes into its `clean_meta`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RowNotes {
    /// For each kept item (in output order), its index in the input row's `qa`.
    pub kept_from: Vec<usize>,
    /// Dropped items: input `qa` index and reason.
    pub dropped: Vec<(usize, DropReason)>,
    /// Rewritten items: input `qa` index and the original question and answer.
    pub rewritten: Vec<RewriteNote>,
    /// Items left unchanged after an uncertain detection: input `qa` index and why.
    pub uncertain: Vec<(usize, String)>,
}

/// The original of a rewritten item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewriteNote {
    /// Index in the input row's `qa`.
    pub qa_index: usize,
    /// The question before the rewrite.
    pub original_question: String,
    /// The reference before the rewrite.
    pub original_answer: String,
}

/// Counts over a run (serialisable into `run.json`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CleanReport {
    /// Rows seen.
    pub rows_in: usize,
    /// Rows kept (at least one item left).
    pub rows_out: usize,
    /// Rows dropped because no item was left.
    pub rows_without_qa: usize,
    /// Items seen.
    pub items_in: usize,
    /// Items kept.
    pub items_out: usize,
    /// Dropped items per reason (`image_sha256_mismatch`, `provenance_mismatch`, `off_task`).
    pub dropped: BTreeMap<String, usize>,
    /// Rewritten items per pass (`mc_normalised`).
    pub rewritten: BTreeMap<String, usize>,
    /// Items left unchanged after an uncertain detection (`mc_uncertain`).
    pub uncertain: BTreeMap<String, usize>,
}

/// A cleaned row and what happened to it.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanedRow {
    /// The row with its surviving, possibly rewritten, items.
    pub row: InputRow,
    /// What cleaning did.
    pub notes: RowNotes,
}

/// Applies the passes of a [`CleanPolicy`] to rows, accumulating a [`CleanReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct Cleaner {
    /// The policy (recorded in `clean_meta`).
    pub policy: CleanPolicy,
    /// The counts so far.
    pub report: CleanReport,
}

impl Cleaner {
    /// A cleaner with `policy` and empty counts.
    pub fn new(policy: CleanPolicy) -> Cleaner {
        Cleaner {
            policy,
            report: CleanReport::default(),
        }
    }

    /// The passes the policy turns on, in order.
    pub fn passes(&self) -> Vec<Pass> {
        [
            (self.policy.provenance, Pass::Provenance),
            (self.policy.task_purity, Pass::TaskPurity),
            (self.policy.mc_normalise, Pass::McNormalise),
        ]
        .into_iter()
        .filter_map(|(on, p)| on.then_some(p))
        .collect()
    }

    /// Cleans one row; `None` when no item is left (counted as `rows_without_qa`).
    pub fn clean_row(&mut self, mut row: InputRow) -> Option<CleanedRow> {
        let passes = self.passes();
        let items = std::mem::take(&mut row.qa);
        let mut notes = RowNotes::default();
        let mut kept = Vec::with_capacity(items.len());
        {
            let ctx = RowContext::new(&row);
            'items: for (index, original) in items.into_iter().enumerate() {
                self.report.items_in += 1;
                let mut item = original.clone();
                for pass in &passes {
                    match pass.apply(&self.policy, &ctx, &item) {
                        Action::Keep => {}
                        Action::Rewrite(new) => {
                            *self
                                .report
                                .rewritten
                                .entry("mc_normalised".into())
                                .or_default() += 1;
                            notes.rewritten.push(RewriteNote {
                                qa_index: index,
                                original_question: original.question.clone(),
                                original_answer: original.answer.clone(),
                            });
                            item = new;
                        }
                        Action::Uncertain(why) => {
                            *self
                                .report
                                .uncertain
                                .entry("mc_uncertain".into())
                                .or_default() += 1;
                            notes.uncertain.push((index, why));
                        }
                        Action::Drop(reason) => {
                            *self
                                .report
                                .dropped
                                .entry(reason.as_str().into())
                                .or_default() += 1;
                            notes.dropped.push((index, reason));
                            continue 'items;
                        }
                    }
                }
                notes.kept_from.push(index);
                kept.push(item);
            }
        }
        self.report.rows_in += 1;
        self.report.items_out += kept.len();
        if kept.is_empty() {
            self.report.rows_without_qa += 1;
            return None;
        }
        self.report.rows_out += 1;
        row.qa = kept;
        Some(CleanedRow { row, notes })
    }

    /// The `clean_meta` object of a cleaned row: the policy and the row's notes.
    pub fn clean_meta(&self, notes: &RowNotes) -> serde_json::Value {
        serde_json::json!({ "policy": self.policy, "cleaning": notes })
    }
}

#[cfg(test)]
mod tests;
