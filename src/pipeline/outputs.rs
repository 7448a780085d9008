//! The pipeline's own files under OUT (the splits and the card belong to the writer):
//! `errors.jsonl`, `cleaning.jsonl`, `generations.jsonl`, `chart.png`, `run.json`, and the
//! journal `journal.bin`. Every file is written atomically ([`crate::atomic`]: temporary file,
//! fsync, rename, fsync of the folder) so a kill never leaves half a file.

use serde::{Deserialize, Serialize};

use super::backend::{Generation, ItemKey};

/// The journal of completed generations (kept after success; see [`crate::journal`]).
pub const JOURNAL_FILE: &str = "journal.bin";
/// Held (advisory OS lock) by the process running in OUT; empty, never removed.
pub const LOCK_FILE: &str = ".verisample.lock";
/// One line per input problem: unreadable rows, bad images, blank fields, failed generations.
pub const ERRORS_FILE: &str = "errors.jsonl";
/// One line per `qa` entry dropped by cleaning, with its reason.
pub const CLEANING_FILE: &str = "cleaning.jsonl";
/// One line per question that was generated for: raw text, token ids, prompt length and
/// finish reason of the answer pass and (when it ran) the judge pass.
pub const GENERATIONS_FILE: &str = "generations.jsonl";
/// Run report: settings, fingerprint, statistics, throughput, peak memory.
pub const RUN_FILE: &str = "run.json";
/// The card chart.
pub const CHART_FILE: &str = "chart.png";

/// The files this module owns, for `--restart`.
pub const OWNED_FILES: [&str; 6] = [
    JOURNAL_FILE,
    ERRORS_FILE,
    CLEANING_FILE,
    GENERATIONS_FILE,
    RUN_FILE,
    CHART_FILE,
];

/// A line of `errors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorLine {
    /// Input file.
    pub file: String,
    /// 0-based row in `file` (`None`: the whole file).
    pub row: Option<usize>,
    /// Position in the input stream.
    pub position: u64,
    /// `qa` index when the error concerns one question, `None` for the whole row.
    pub qa: Option<u32>,
    /// Field at fault (`image.bytes`, `qa[1].answer`, `generation`, …).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// A line of `cleaning.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleaningLine {
    /// Input file.
    pub file: String,
    /// 0-based row in `file`.
    pub row: usize,
    /// Position in the input stream.
    pub position: u64,
    /// `qa` index.
    pub qa: u32,
    /// Why it was dropped.
    pub reason: String,
}

/// One pass of a [`GenerationLine`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassRecord {
    /// The generation, when it succeeded.
    #[serde(flatten)]
    pub generation: Option<Generation>,
    /// The per-request failure, when it failed.
    pub error: Option<String>,
}

/// A line of `generations.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationLine {
    /// Input file.
    pub file: String,
    /// 0-based row in `file`.
    pub row: usize,
    /// The question.
    #[serde(flatten)]
    pub key: ItemKey,
    /// The answer pass.
    pub answer: PassRecord,
    /// The judge pass, when it ran.
    pub judge: Option<PassRecord>,
    /// `rescue` (judge on a verifier reject) or `calibration` (on a verifier accept).
    pub judge_role: Option<String>,
}

/// Serialise `lines` as JSON lines.
pub fn jsonl<T: Serialize>(lines: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        // Serialising plain data structs to a Vec cannot fail.
        if serde_json::to_writer(&mut out, l).is_ok() {
            out.push(b'\n');
        }
    }
    out
}
