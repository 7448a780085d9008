//! The records that flow between stages: rows read from an input dataset, per-row errors,
//! and the `qa` entries written to the three output splits of contract §7.
//!
//! These types are the contract between the dataset reader/writer (`dataset`), the cleaning
//! passes (`clean`), the decisions (`verify`, `judge`, `route`) and the pipeline. They hold
//! plain data only: no I/O, no model.

use serde::{Deserialize, Serialize};

pub mod split_meta;

/// The HF `Image()` feature: `struct<bytes: binary, path: string>`, both nullable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ImageRef {
    /// The encoded file (PNG/JPEG/…), unchanged.
    pub bytes: Option<Vec<u8>>,
    /// The file name or relative path the image came from.
    pub path: Option<String>,
}

/// One question about an image with its official reference answer (contract §2 `qa` entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct QaItem {
    /// The user text, byte-identical to what the model receives (contract §4).
    pub question: String,
    /// The official reference answer; for several references (a list-valued input answer)
    /// their JSON array text, e.g. `["black","Black"]` (what `org_answer` and the rejected
    /// `answer` store).
    pub answer: String,
    /// All references when the input answer is a list of strings (in input order); `None`
    /// when it is one string, which is then the only reference ([`QaItem::references`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_list: Option<Vec<String>>,
    /// Where the item came from (a source image hash or path), used by the provenance check.
    pub source: Option<String>,
    /// Any other fields of the input `qa` struct, carried through as JSON.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl QaItem {
    /// The references the verifiers and the judge compare against: the list of a list-valued
    /// answer, else `[answer]`.
    pub fn references(&self) -> Vec<&str> {
        match &self.answer_list {
            Some(list) => list.iter().map(String::as_str).collect(),
            None => vec![self.answer.as_str()],
        }
    }
}

/// The message of `run`'s input check for an item without a usable reference.
pub const BLANK_REFERENCE: &str = "reference answer is missing or blank";

/// Whether `references` hold no reference at all: every one missing, empty or whitespace.
/// `run`'s input check reports such an item in `errors.jsonl` (field `qa[i].answer`,
/// [`BLANK_REFERENCE`]) and never generates it; `check` says the same.
pub fn references_blank(references: &[&str]) -> bool {
    references.iter().all(|r| r.trim().is_empty())
}

/// The input columns a flat-layout row was read from (`image, question, answer`-style
/// datasets; see `dataset::layout`), recorded in the row's `clean_meta.columns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceColumns {
    /// The image column (`image`, `img`, …).
    pub image: String,
    /// The question column (`question`, `query`, `prompt`, …).
    pub question: String,
    /// The reference-answer column (`answer`, `answers`, `label`, `ground_truth`, …).
    pub answer: String,
}

/// One decoded input row: one image and its questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct InputRow {
    /// The parquet file the row came from.
    pub source_file: String,
    /// 0-based row index inside `source_file`.
    pub row_index: usize,
    /// The image; after reading, `bytes` is always filled (a `path`-only image is resolved
    /// inside the dataset folder by the reader).
    pub image: ImageRef,
    /// The questions about this image.
    pub qa: Vec<QaItem>,
    /// Hex SHA-256 of `image.bytes` as stored in the input, if present.
    pub image_sha256: Option<String>,
    /// Benchmark family (e.g. `OrandCar`), if present.
    pub family: Option<String>,
    /// The input's other top-level columns as JSON (`prepare --parquet` keeps them as
    /// provenance columns); `run` carries them as [`InputRow::carried`] instead.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The input's other top-level columns of this row as Arrow values, when the reader was
    /// asked to carry them (`dataset::carry`): a one-row batch of the whole input's carried
    /// columns, written into each split row after its own columns. Not serialised.
    #[serde(skip)]
    pub carried: Option<arrow::array::RecordBatch>,
    /// The columns of a flat-layout row (one item per row); `None` for contract §2's `qa` layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<SourceColumns>,
}

/// A per-row problem: the run goes on, and the row is reported in `errors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowError {
    /// Input file the row came from.
    pub file: String,
    /// 0-based row index in `file`, when known (`None` for a whole-file error).
    pub row: Option<usize>,
    /// How many input rows the error stands for when not one: the rows of a row group that
    /// cannot be read (from `row` on, counted by the parquet footer). `None` for one row
    /// (`row` set), or for a file whose rows cannot be counted (`row` `None`: no readable
    /// footer, a link not followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// The field at fault (`image.bytes`, `qa`, `qa[0].question`, …).
    pub field: String,
    /// A human-readable message.
    pub message: String,
}

/// Which of the three per-family splits of contract §7 a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SplitKind {
    /// `<Family>_RS_think`: accepted, with the reasoning trace.
    Think,
    /// `<Family>_RS_nothink`: accepted, without the reasoning trace.
    NoThink,
    /// `<Family>_rejected`: the official ground truth and what the model said instead.
    Rejected,
}

impl SplitKind {
    /// All kinds in output order.
    pub const ALL: [SplitKind; 3] = [SplitKind::Think, SplitKind::NoThink, SplitKind::Rejected];

    /// The split name for `family`, e.g. `OrandCar_RS_think`.
    pub fn split_name(self, family: &str) -> String {
        match self {
            SplitKind::Think => format!("{family}_RS_think"),
            SplitKind::NoThink => format!("{family}_RS_nothink"),
            SplitKind::Rejected => format!("{family}_rejected"),
        }
    }
}

/// A `qa` entry of an accepted split (`_RS_think` / `_RS_nothink`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedQa {
    /// Byte-identical prompt text.
    pub question: String,
    /// The model's own verified output: the text that passed the verifier, or the judged answer.
    pub answer: String,
    /// The original reference answer.
    pub org_answer: String,
    /// The model's whole answer after its reasoning (Python-stripped), from which `answer`
    /// was taken: lets `verify` recompute the verifier variant and prove `answer` is the
    /// model's text, not the reference.
    pub vlm_answer: String,
    /// The reasoning trace; `Some` only in `_RS_think`.
    pub think: Option<String>,
    /// How it was accepted: `verifier:<name>:<variant>` (e.g. `verifier:alnum:first_line`) or `judge`.
    pub accepted_by: String,
    /// The judge's verdict when the judge accepted it (`CORRECT`), else `None`.
    pub judge_verdict: Option<String>,
    /// The judge's raw generated text when the judge accepted it, else `None`.
    pub judge_raw: Option<String>,
}

/// A `qa` entry of the `_rejected` split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedQa {
    /// Byte-identical prompt text.
    pub question: String,
    /// The official ground truth.
    pub answer: String,
    /// What the model said instead: its answer after the reasoning, Python-stripped.
    pub wrong_vlm: String,
    /// Why: `wrong_answer`, `judge_unsure`, `judge_numbers_disagree`, `no_answer`, `truncated`,
    /// `unusable_reference`, ….
    pub reason: String,
    /// The judge's parsed verdict (`CORRECT`/`WRONG`/`UNSURE`), if the judge ran.
    pub judge_verdict: Option<String>,
    /// The judge's raw generated text, if the judge ran.
    pub judge_raw: Option<String>,
}

/// One output row: one image with the `qa` entries of this image that landed in one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRow<Q> {
    /// The original image, unchanged bytes.
    pub image: ImageRef,
    /// The entries of this image that landed in this split (never empty).
    pub qa: Vec<Q>,
    /// Per-row provenance and the cleaning policy that admitted it, as a JSON object string.
    pub clean_meta: String,
    /// Hex SHA-256 of the image bytes.
    pub image_sha256: String,
    /// The input row's carried columns ([`InputRow::carried`]), a one-row batch written after
    /// the columns above; `None` when nothing is carried. Not serialised.
    #[serde(skip)]
    pub carried: Option<arrow::array::RecordBatch>,
}
