//! The pipeline's own files under OUT (the splits and the card belong to the writer):
//! `errors.jsonl`, `cleaning.jsonl`, `generations.jsonl`, `chart.svg`, `run.json`, and the
//! journal `journal.bin`. Every file is written atomically ([`crate::atomic`]: temporary file,
//! fsync, rename, fsync of the folder) so a kill never leaves half a file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::backend::{Generation, ItemKey};

use crate::out_files::{
    CHART_FILE, CLEANING_FILE, ERRORS_FILE, GENERATIONS_FILE, JOURNAL_FILE, RUN_FILE,
};

/// The files this module owns, for `--restart`.
pub const OWNED_FILES: [&str; 6] = [
    JOURNAL_FILE,
    ERRORS_FILE,
    CLEANING_FILE,
    GENERATIONS_FILE,
    RUN_FILE,
    CHART_FILE,
];

/// Remove the temporary files that killed runs left in `out` and `out/data`: hidden files of
/// an atomic write ([`crate::atomic::temp_file_pid`]) or staged split shards
/// ([`crate::dataset::shards::staged_file_pid`]) whose process is dead. Call it holding the
/// OUT lock. Returns the files removed.
///
/// Errors: a folder cannot be listed or a file cannot be removed.
pub fn remove_debris(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for dir in [out.to_path_buf(), out.join(crate::out_files::SPLITS_DIR)] {
        let entries = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = crate::atomic::temp_file_pid(&name)
                .or_else(|| crate::dataset::shards::staged_file_pid(&name));
            let dead = pid.is_some_and(|p| !crate::atomic::process_alive(p));
            if dead && entry.file_type()?.is_file() {
                tracing::info!("removing {} (left by a killed run)", entry.path().display());
                std::fs::remove_file(entry.path())?;
                removed.push(entry.path());
            }
        }
    }
    removed.sort();
    Ok(removed)
}

/// A line of `errors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorLine {
    /// Input file.
    pub file: String,
    /// 0-based row in `file` (`None`: the whole file).
    pub row: Option<usize>,
    /// How many rows from `row` on the error covers when not one (an unreadable row group:
    /// rows `row..row + rows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// Position in the input stream.
    pub position: u64,
    /// `qa` index when the error concerns one question, `None` for the whole row.
    pub qa: Option<u32>,
    /// The sample whose generation failed, in a run with `--samples K > 1` (absent
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<u32>,
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
    /// What exactly failed, for a person (`off_task`: where the question first differs from
    /// the family's task question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// For reason `duplicate`: the kept occurrence of the same image, question and reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<DuplicateOf>,
}

/// The kept occurrence of a duplicate question (contract §3 duplicates).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DuplicateOf {
    /// Input file of the kept row.
    pub file: String,
    /// 0-based row in `file`.
    pub row: usize,
    /// Position of the kept row in the input stream.
    pub position: u64,
    /// `qa` index of the kept question.
    pub qa: u32,
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

/// A JSONL file of the run (`errors.jsonl`, `cleaning.jsonl`, `generations.jsonl`) written
/// line by line as the write phase goes, to a temporary file published by
/// [`JsonlLog::commit`], so that no line is held in memory. The first write failure is kept
/// and returned by `commit`.
pub(crate) struct JsonlLog {
    file: crate::atomic::AtomicFile,
    failed: Option<std::io::Error>,
}

impl JsonlLog {
    /// Start the file that will replace `dest`.
    ///
    /// Errors: the temporary file cannot be created.
    pub(crate) fn create(dest: &std::path::Path) -> Result<JsonlLog, crate::atomic::AtomicError> {
        Ok(JsonlLog {
            file: crate::atomic::AtomicFile::create(dest)?,
            failed: None,
        })
    }

    /// Append one line.
    pub(crate) fn push<T: Serialize>(&mut self, line: &T) {
        use std::io::Write;
        if self.failed.is_some() {
            return;
        }
        let written = serde_json::to_writer(&mut self.file, line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.file.write_all(b"\n"));
        self.failed = written.err();
    }

    /// Publish the file (fsync, rename over the destination).
    ///
    /// Errors: a write that failed, or the publication.
    pub(crate) fn commit(self) -> Result<std::path::PathBuf, crate::atomic::AtomicError> {
        if let Some(e) = self.failed {
            let dest = self.file.dest().to_path_buf();
            return Err(crate::atomic::AtomicError::new("write", &dest, e));
        }
        self.file.commit()
    }
}
