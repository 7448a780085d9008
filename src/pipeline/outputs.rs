//! The pipeline's own files under OUT (the splits and the card belong to the writer):
//! `errors.jsonl`, `cleaning.jsonl`, `generations.jsonl`, `chart.png`, `run.json`, and the
//! journal `journal.bin`. Every file is written atomically (temporary file, fsync, rename,
//! fsync of the folder) so a kill never leaves half a file.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::backend::{Generation, ItemKey, Pass};

/// The journal of completed generations (kept after success; see [`crate::journal`]).
pub const JOURNAL_FILE: &str = "journal.bin";
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

/// File failures.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// The I/O error.
    pub source: std::io::Error,
}

/// Write `bytes` to `path` atomically: a temporary sibling, `fsync`, rename over `path`,
/// `fsync` of the folder.
///
/// Errors: [`WriteError`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let err = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
    }
    std::fs::rename(&tmp, path).map_err(err)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err)
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

/// Which pass generated a journal record, for the generation lines.
pub fn pass_name(pass: Pass) -> &'static str {
    match pass {
        Pass::Answer => "answer",
        Pass::Judge => "judge",
    }
}
