//! The seams of the pipeline: what it needs from the reader, the engine, the decisions and
//! the writer, as small traits. The real implementations (`dataset`, `engine`, `verify` /
//! `judge` / `route` / `clean`) plug in through thin adapters; tests use deterministic
//! doubles.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};

use crate::engine::ImageInput;
pub use crate::judge::{JudgeOutcome, Verdict};
use crate::record::{AcceptedQa, InputRow, OutputRow, QaItem, RejectedQa, RowError, SplitKind};
use crate::report::card::CardText;
pub use crate::route::FinishReason;
use crate::verifiers::think::AnswerFormat;

/// Errors from a backend (reader, engine, writer), kept opaque: the pipeline only reports them.
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// Identity of one question: its row's 0-based position in the input stream (see
/// [`crate::shard`]) and its index in the row's `qa` list. Ordering by key is the canonical
/// output order (input order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemKey {
    /// 0-based position of the row in the input stream (all files, in reader order).
    pub position: u64,
    /// 0-based index in the row's `qa` list.
    pub qa: u32,
    /// 0-based sample index of the answer (`--samples K`: `0..K`; always 0 for greedy runs,
    /// and then absent from the journal and `generations.jsonl`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ItemKey {
    /// Sample 0 of question `qa` of the row at `position` (the only one of a greedy run).
    pub fn question(position: u64, qa: u32) -> Self {
        Self {
            position,
            qa,
            sample: 0,
        }
    }

    /// The same question's sample `sample`.
    pub fn with_sample(self, sample: u32) -> Self {
        Self { sample, ..self }
    }
}

/// Which generation pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// The model answers the question about the image.
    Answer,
    /// The model, as a text-only judge, grades an answer against the reference.
    Judge,
}

/// One prompt for the engine.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// The question this request belongs to.
    pub key: ItemKey,
    /// The pass.
    pub pass: Pass,
    /// The image for the answer pass, decoded by the input check (so the engine's processor
    /// resizes it without decoding it again) and shared by the row's questions; `None` for
    /// the text-only judge pass.
    pub image: Option<ImageInput>,
    /// The user text, byte-identical to what the model receives inside its chat template.
    pub user_text: String,
    /// Enable the chat template's thinking mode.
    pub think: bool,
    /// Token budget for the generated text.
    pub max_new_tokens: usize,
    /// Sample from this stream (`--samples`, `--temperature`); `None`: greedy.
    pub sampling: Option<crate::engine::sampling::SampleStream>,
    /// End the reasoning after this many tokens (`--think-budget`); `None`: no budget.
    pub think_budget: Option<usize>,
}

/// The engine's output for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// Decoded generated text (special tokens such as `</think>` kept as text).
    pub text: String,
    /// Generated token ids, excluding the prompt, including the final EOS if any.
    pub token_ids: Vec<u32>,
    /// Prompt length in tokens (image tokens included).
    pub prompt_tokens: usize,
    /// Why generation stopped.
    pub finish: FinishReason,
    /// The prompt ended with an open `<think>` pre-filled by the chat template, so the text
    /// starts inside the reasoning (Qwen3 thinking templates).
    #[serde(default)]
    pub prefilled_think: bool,
    /// The thinking budget was reached: the reasoning was ended by the family's
    /// early-stopping text (`--think-budget`); absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub think_budget_hit: bool,
    /// Where the model's family writes its final answer after the reasoning (GLM-4.1V: in a
    /// box inside `<answer>`); absent for the text after the reasoning.
    #[serde(default, skip_serializing_if = "AnswerFormat::is_after_think")]
    pub answer_format: AnswerFormat,
}

/// A journaled generation result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalOutcome {
    /// The engine produced a generation.
    Done(Generation),
    /// The engine refused this request (recorded in `errors.jsonl`, not retried).
    Failed(String),
}

/// One finished request, as handed to the `on_done` callback.
#[derive(Debug, Clone)]
pub struct GenResult {
    /// The request's question.
    pub key: ItemKey,
    /// The request's pass.
    pub pass: Pass,
    /// The generation, or a per-request failure message (e.g. an image the processor
    /// refuses). A per-request failure is recorded in `errors.jsonl`; it does not stop the run.
    pub outcome: Result<Generation, String>,
    /// The outcome came from the engine's resource limits, not from the request (a prompt
    /// larger than the KV cache pool, or a generation cut because its context filled the
    /// pool): recorded like any outcome, but a resumed run tries the request again (with a
    /// larger `--kv-cache-gib` it may run further).
    pub exceeds_capacity: bool,
}

/// The batch engine, as the pipeline uses it.
pub trait Generator {
    /// Generate greedily for all `requests`, in any order and batching, calling `on_done`
    /// once per finished request as soon as it finishes. When `on_done` returns
    /// [`ControlFlow::Break`], stop after the current engine step: the other sequences that
    /// finished in that same step may still be delivered, unfinished sequences are dropped
    /// (they are regenerated on resume), and `generate` returns `Ok(())`.
    ///
    /// Errors: an engine failure that affects the whole batch (device, out of memory).
    fn generate(
        &mut self,
        requests: Vec<GenRequest>,
        on_done: &mut dyn FnMut(GenResult) -> ControlFlow<()>,
    ) -> Result<(), BackendError>;

    /// Whether the image of the row at stream `position`, `width × height` pixels (its header
    /// size), can be encoded within the engine's vision memory budget; checked before the
    /// image is decoded. Default: any.
    ///
    /// Errors: a message naming the size, the estimate and the `--max-pixels` that would
    /// fit; the row goes to `errors.jsonl` under `image.bytes` and the run goes on.
    fn check_image(&self, _position: u64, _width: u32, _height: u32) -> Result<(), String> {
        Ok(())
    }

    /// Engine name and version for `run.json` (e.g. `verisample-engine 0.1.0`).
    fn version(&self) -> String;

    /// Engine counters for `run.json` (prefill/decode tokens and seconds, preemptions, …),
    /// when the engine keeps any.
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }

    /// Throughput and latency of this process's generations for `run.json`
    /// ([`crate::engine::metrics::ThroughputMetrics`], `bench`'s definitions), when the
    /// generator measures them.
    fn metrics(&self) -> Option<serde_json::Value> {
        None
    }
}

/// The input dataset, readable twice (once to generate, once to write the splits) in the
/// same deterministic order.
pub trait RowSource {
    /// The ordered stream of rows: files in a fixed order, rows in file order. A row that
    /// cannot be decoded is an `Err(RowError)` in its place (`row: None` for a whole
    /// unreadable file).
    ///
    /// Errors: the dataset cannot be opened at all.
    fn rows(
        &self,
    ) -> Result<Box<dyn Iterator<Item = Result<InputRow, RowError>> + '_>, BackendError>;

    /// Number of input rows, when known cheaply (parquet footers; equal to the stream
    /// elements when every row group is readable): for progress, and for the estimate of
    /// the rows `--limit` left out.
    fn len_hint(&self) -> Option<u64>;
}

/// An output row for one split.
#[derive(Debug, Clone, PartialEq)]
pub enum SplitRow {
    /// A row of `_RS_think` or `_RS_nothink`.
    Accepted(OutputRow<AcceptedQa>),
    /// A row of `_rejected`.
    Rejected(OutputRow<RejectedQa>),
}

/// The split writer. Rows arrive in canonical order per split; nothing may become visible
/// under OUT before [`SplitSink::finish`], which publishes all splits atomically (so a
/// killed run never leaves a partial split behind).
pub trait SplitSink {
    /// Append `row` to the split `kind.split_name(family)` (e.g. `OrandCar_RS_think`).
    ///
    /// Errors: I/O or encoding.
    fn write(&mut self, family: &str, kind: SplitKind, row: SplitRow) -> Result<(), BackendError>;

    /// Close every split without publishing it (its files staged under temporary names) and
    /// return split name → the names of the files [`SplitSink::finish`] will publish, so that
    /// the run can record them before the first of them replaces an earlier run's file. A
    /// sink that records no file names returns none (the default).
    ///
    /// Errors: I/O or encoding.
    fn seal(&mut self) -> Result<BTreeMap<String, Vec<String>>, BackendError> {
        Ok(BTreeMap::new())
    }

    /// Close every split, write the dataset card with `card`'s Hub metadata and body (see
    /// [`crate::report::card`]; its example images are written already) and publish
    /// atomically.
    ///
    /// Errors: I/O or encoding.
    fn finish(&mut self, card: &CardText) -> Result<(), BackendError>;

    /// After [`SplitSink::finish`]: split name → the names of the files it published for that
    /// split (recorded in `run.json`, so that a later run replaces only these). A sink whose
    /// files need no such record returns none (the default).
    fn published(&self) -> BTreeMap<String, Vec<String>> {
        BTreeMap::new()
    }
}

/// The cleaning decision for one `qa` entry (contract §3).
#[derive(Debug, Clone, PartialEq)]
pub enum CleanedItem {
    /// Keep the entry, possibly rewritten (multiple-choice normalisation).
    Keep(QaItem),
    /// Drop it for `reason` (e.g. `provenance_mismatch`, `off_task`).
    Drop {
        /// Machine-readable reason, counted in the report.
        reason: String,
        /// What exactly failed, for a person (`off_task`: where the question differs from the
        /// family's task question), listed in `cleaning.jsonl`.
        detail: Option<String>,
    },
}

/// The cleaning result for one row.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanedRow {
    /// One decision per input `qa` entry, same order and length.
    pub items: Vec<CleanedItem>,
    /// The cleaning policy that admitted the row (goes into `clean_meta.cleaning`).
    pub meta: serde_json::Value,
}

/// What the pipeline needs to know about one answer to schedule the judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessed {
    /// The string verifier accepted the answer.
    pub accepted: bool,
    /// A verifier reject with something to grade (not truncated, not blank).
    pub needs_judge: bool,
    /// The answer after the reasoning, as shown to the judge.
    pub candidate: String,
}

/// Everything routing needs for one item.
#[derive(Debug, Clone, Copy)]
pub struct RouteInput<'a> {
    /// The row's family (chooses the verifier).
    pub family: &'a str,
    /// The cleaned question and reference.
    pub item: &'a QaItem,
    /// The answer pass.
    pub generation: &'a Generation,
    /// The judge, when it ran on a verifier reject (calibration verdicts are not passed).
    pub judge: Option<&'a JudgeOutcome>,
    /// The number guard is on.
    pub number_guard: bool,
    /// Reasoning was on (`_RS_think` gets entries only then).
    pub thinking: bool,
}

/// Where routing sent an item (short-lived, one per item: the size difference between the
/// variants does not matter).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Routed {
    /// Accepted: the `_RS_nothink` entry, and the `_RS_think` entry when there is a trace.
    Accepted {
        /// Entry of `_RS_think` (with `think`), when reasoning was on and produced a trace.
        think: Option<AcceptedQa>,
        /// Entry of `_RS_nothink`.
        nothink: AcceptedQa,
    },
    /// Rejected, with its reason.
    Rejected(RejectedQa),
}

/// The decisions of contract §3 and §5–§7 (pure functions, no I/O, no model). The product
/// implementation is [`super::StandardDecisions`] over `clean`, `verify`, `judge` and
/// `route`.
pub trait Decisions {
    /// Clean one row (provenance, task purity, multiple-choice normalisation).
    fn clean(&self, row: &InputRow) -> CleanedRow;
    /// Split the answer at its reasoning and run the family's verifier.
    fn assess(&self, family: &str, item: &QaItem, generation: &Generation) -> Assessed;
    /// The judge's user text for (question, references, candidate); `references` holds one
    /// reference, or several for a list-valued answer (the judge sees them all).
    fn judge_prompt(&self, question: &str, references: &[&str], candidate: &str) -> String;
    /// Parse the judge's raw output into a verdict (fails closed to `Unsure`).
    fn parse_verdict(&self, judge_text: &str) -> Verdict;
    /// Route one item to a split.
    fn route(&self, input: &RouteInput<'_>) -> Routed;
}
