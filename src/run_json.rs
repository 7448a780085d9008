//! `OUT/run.json`, the run report: its file name, its status values, its record type, and
//! reading it back. Every reader goes through here: the commands that need the whole record
//! ([`read`]: `merge`) and those that look at a few fields of any version's file, a user's
//! file of the same name included ([`RunJsonView`]: resume, the write phase, `verify`,
//! `inspect`, the output-folder checks).
//!
//! A leaf module (but for the file names of [`crate::out_files`]): the record's settings,
//! fingerprint and statistics are type parameters ([`RunJson`]), filled in as `pipeline::RunReport` by the pipeline, so that the settings'
//! own output-folder checks can read a `run.json` without importing the pipeline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Status of a finished run.
pub const STATUS_COMPLETE: &str = "complete";
/// Status of a finished whole run (not one shard of several) in which no item reached a
/// split (the command fails).
pub const STATUS_NO_SPLIT: &str = "no_split";
/// Status while a run replaces the outputs in OUT (written before the first of them, replaced
/// by the final status after the last): OUT may mix this run's files with an earlier run's,
/// so nothing in it is to be trusted; a rerun of the same command finishes it.
pub const STATUS_WRITING: &str = "writing";

/// `OUT/run.json`.
pub fn path(out: &Path) -> PathBuf {
    out.join(crate::out_files::RUN_FILE)
}

/// `run.json`: what ran, on what, and what came out. `S`: the settings, `F`: the fingerprint,
/// `T`: the statistics (`pipeline::RunReport` names the three).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunJson<S, F, T> {
    /// [`STATUS_COMPLETE`] or [`STATUS_NO_SPLIT`], written after the splits and logs; or
    /// [`STATUS_WRITING`], written before the first of them is replaced (its
    /// `stats.split_files` names the files of both runs).
    pub status: String,
    /// `verisample` crate version.
    pub verisample_version: String,
    /// The engine's version string.
    pub engine_version: String,
    /// The engine's statistics (this process only).
    #[serde(default)]
    pub engine_stats: Option<serde_json::Value>,
    /// Throughput and latency of this process's generations, as `bench` defines them
    /// (docs/bench.md), over every `generate` call of the run (answers and judge).
    #[serde(default)]
    pub engine_metrics: Option<serde_json::Value>,
    /// All settings of the run.
    pub settings: S,
    /// Fingerprint (canonical settings, model file hashes).
    pub fingerprint: F,
    /// sha256 of each safetensors file of the model.
    pub model_weights: BTreeMap<String, String>,
    /// Counts and throughput.
    pub stats: T,
    /// Peak resident memory, bytes (`VmHWM`).
    pub peak_memory_bytes: Option<u64>,
    /// Generation results replayed from the journal at start.
    pub replayed_results: usize,
    /// Bytes of a torn journal record dropped at start.
    pub torn_journal_bytes: u64,
}

/// Why a `run.json` could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum RunJsonError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a run report of this version.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What serde said.
        message: String,
    },
}

/// The whole record of `out/run.json`.
///
/// Errors: [`RunJsonError`] when the file is missing, unreadable or not a whole record.
pub fn read<S, F, T>(out: &Path) -> Result<RunJson<S, F, T>, RunJsonError>
where
    S: DeserializeOwned,
    F: DeserializeOwned,
    T: DeserializeOwned,
{
    let path = path(out);
    let bytes = std::fs::read(&path).map_err(|source| RunJsonError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|e| RunJsonError::Invalid {
        path,
        message: e.to_string(),
    })
}

/// A lenient view of a `run.json` of any version (or a user's JSON file of that name): the
/// fields that readers look at, each absent when the file lacks it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunJsonView {
    /// The status, when recorded.
    #[serde(default)]
    pub status: Option<String>,
    /// The writing version, when recorded (a file without it is not ours).
    #[serde(default)]
    pub verisample_version: Option<String>,
    /// The fingerprint as written ([`RunJsonView::fingerprint`] reads it typed).
    #[serde(default)]
    fingerprint: Option<serde_json::Value>,
    /// The recorded settings that `verify` applies.
    #[serde(default)]
    pub settings: RecordedSettings,
    /// The recorded statistics that later runs look at.
    #[serde(default)]
    pub stats: RecordedStats,
}

/// Settings a [`RunJsonView`] reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RecordedSettings {
    /// Reasoning on.
    #[serde(default)]
    pub think: Option<bool>,
    /// The number guard on.
    #[serde(default)]
    pub number_guard: Option<bool>,
    /// Verifier overrides, `[FAMILY=]NAME`.
    #[serde(default)]
    pub verifiers: Option<Vec<String>>,
    /// `--samples` and the sampling knobs (absent for a greedy run).
    #[serde(default)]
    pub sampling: Option<RecordedSampling>,
    /// The input as `--data` gave it (a path, or a hub id).
    #[serde(default)]
    pub data: Option<std::path::PathBuf>,
    /// `--family`, when given.
    #[serde(default)]
    pub family: Option<String>,
    /// How the input was read (column flags, `--images-root`), as recorded; the dataset
    /// module's `ReadOptions` in JSON (this module imports nothing of the crate).
    #[serde(default)]
    pub read: Option<serde_json::Value>,
}

/// The sampling settings a [`RunJsonView`] reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RecordedSampling {
    /// Samples per question.
    #[serde(default)]
    pub samples: Option<usize>,
    /// `--distinct-samples on`: accepted repeats of a pair were left out of the splits.
    #[serde(default)]
    pub distinct: Option<bool>,
}

/// Statistics a [`RunJsonView`] reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RecordedStats {
    /// Split name → rows written.
    #[serde(default)]
    pub split_rows: Option<BTreeMap<String, u64>>,
    /// Split name → `qa` items written.
    #[serde(default)]
    pub split_items: Option<BTreeMap<String, u64>>,
    /// Split name → shard file names (absent before versions that record them).
    #[serde(default)]
    pub split_files: Option<BTreeMap<String, Vec<String>>>,
    /// Shard file name → hex SHA-256 of its content at the end of the run (absent before
    /// versions that record it).
    #[serde(default)]
    pub split_sha256: Option<BTreeMap<String, String>>,
    /// The `--limit` of the run and the rows it left out.
    #[serde(default)]
    pub limit: Option<RecordedLimit>,
}

/// `stats.limit` of a [`RunJsonView`].
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct RecordedLimit {
    /// The `--limit`.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Rows the limit left out.
    #[serde(default)]
    pub left_out_rows: Option<u64>,
}

impl RunJsonView {
    /// The view of `out/run.json`: `None` when there is no such file or it is not a JSON
    /// object of the fields' types.
    pub fn read(out: &Path) -> Option<RunJsonView> {
        let bytes = std::fs::read(path(out)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The view of `out/run.json`, distinguishing a missing file (`Ok(None)`) from one that
    /// is not valid JSON.
    ///
    /// Errors: [`RunJsonError`] when the file exists but cannot be read or parsed.
    pub fn read_strict(out: &Path) -> Result<Option<RunJsonView>, RunJsonError> {
        let path = path(out);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| RunJsonError::Invalid {
                        path,
                        message: format!("not valid JSON: {e}"),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(RunJsonError::Io { path, source }),
        }
    }

    /// Written by verisample: it records its version and a fingerprint.
    pub fn is_ours(&self) -> bool {
        self.verisample_version.is_some() && self.fingerprint.is_some()
    }

    /// Whether its run stopped while replacing its outputs ([`STATUS_WRITING`]).
    pub fn is_writing(&self) -> bool {
        self.status.as_deref() == Some(STATUS_WRITING)
    }

    /// The fingerprint read as `F`; `None` when absent or of another shape.
    pub fn fingerprint<F: DeserializeOwned>(&self) -> Option<F> {
        serde_json::from_value(self.fingerprint.clone()?).ok()
    }
}

/// Whether `out/run.json` is a run report written by verisample ([`RunJsonView::is_ours`]),
/// not a user's file of the same name.
pub fn is_ours(out: &Path) -> bool {
    RunJsonView::read(out).is_some_and(|v| v.is_ours())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_reads_old_new_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        assert!(RunJsonView::read(out).is_none());
        assert!(RunJsonView::read_strict(out).unwrap().is_none());
        // A user's notes: a JSON object, not ours.
        std::fs::write(path(out), r#"{"my":"notes"}"#).unwrap();
        let v = RunJsonView::read(out).unwrap();
        assert!(!v.is_ours() && !is_ours(out) && v.status.is_none());
        // Not JSON: the lenient view has nothing, the strict one says so.
        std::fs::write(path(out), "not json").unwrap();
        assert!(RunJsonView::read(out).is_none());
        assert!(RunJsonView::read_strict(out).is_err());
        // An older run's file: no split_files, a limit that left rows out.
        std::fs::write(
            path(out),
            r#"{"status":"writing","verisample_version":"0.1.0","fingerprint":{"sha256":"ab"},
               "settings":{"think":false},
               "stats":{"split_rows":{"A":3},"limit":{"limit":5,"left_out_rows":2}}}"#,
        )
        .unwrap();
        let v = RunJsonView::read(out).unwrap();
        assert!(v.is_ours() && v.is_writing() && is_ours(out));
        assert_eq!(v.settings.think, Some(false));
        assert_eq!(v.settings.number_guard, None);
        assert_eq!(v.stats.split_rows.as_ref().unwrap()["A"], 3);
        assert!(v.stats.split_files.is_none());
        assert_eq!(v.stats.limit.unwrap().left_out_rows, Some(2));
        #[derive(Deserialize)]
        struct Fp {
            sha256: String,
        }
        assert_eq!(v.fingerprint::<Fp>().unwrap().sha256, "ab");
    }
}
