//! Why a run stopped without producing its outputs, and its exit status.

use std::path::PathBuf;

use super::backend::{BackendError, ItemKey, Pass};
use super::control::interrupted_exit_code;
use crate::journal::JournalError;

/// Why a run stopped without producing its outputs.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Journal I/O or decoding.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The run's temporary on-disk index ([`super::store`]) failed (I/O, a full disk).
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
    /// No row of the input could be decoded: every element was a whole-file error.
    #[error("no row of the input could be read ({count} unreadable input file(s); first: {first}); all are listed in {}", errors.display())]
    InputUnreadable {
        /// `OUT/errors.jsonl`.
        errors: PathBuf,
        /// File-level errors.
        count: usize,
        /// The first one, `file: message`.
        first: String,
    },
    /// The run finished but no item reached a split: every item went to `errors.jsonl` or
    /// was dropped by cleaning. `datasets` loads neither a dataset without splits nor a
    /// zero-row parquet file, so there is nothing to publish; the logs and `run.json` are
    /// written. Raised for a whole run or a merge; one shard of several only warns.
    #[error("no item reached a split: {rows} input row(s), {unread_rows} of them not read (damaged row groups, or a column missing or of the wrong type), {errors} error(s) in {out}/errors.jsonl, {dropped} item(s) dropped by cleaning ({out}/cleaning.jsonl); {out} holds the run's logs but no dataset")]
    NoSplit {
        /// The output folder.
        out: PathBuf,
        /// Input rows, read or not ([`crate::report::RunStats::input_rows`]).
        rows: u64,
        /// Of these, rows not read ([`crate::report::RunStats::unread_rows`]).
        unread_rows: u64,
        /// Lines of `errors.jsonl`.
        errors: u64,
        /// Items dropped by cleaning.
        dropped: u64,
    },
    /// Another process is running in OUT (it holds `OUT/.verisample.lock`).
    #[error("another verisample process is running in {} (it holds {}); wait for it to finish or use another --out", .0.display(), .0.join(crate::out_files::LOCK_FILE).display())]
    Locked(PathBuf),
    /// OUT holds the output of a run with other settings, model or input. The message names
    /// the differences in words; the fingerprints are logged at debug level (`-v`).
    #[error("{} holds the output of a different run ({}); rerun with --restart to replace that output, or choose another --out", out.display(), changed.join("; "))]
    FingerprintMismatch {
        /// The output folder.
        out: PathBuf,
        /// Fingerprint in the journal.
        old: String,
        /// Fingerprint of this run.
        new: String,
        /// What differs, in words (`--think changed: on → off`, `the model changed: a → b`).
        changed: Vec<String>,
    },
    /// OUT holds the splits of an earlier run, and neither a journal nor `run.json` says
    /// with which settings they were made.
    #[error("{} holds the splits of an earlier run but no journal or run.json to check its settings against (journal.bin missing or unreadable); use --restart to discard them (with --force as well when the folder is otherwise not a verisample output), or another --out", .0.display())]
    UncheckedEarlierRun(PathBuf),
    /// `OUT/data/` holds a file or folder named like a split shard that the run would keep
    /// (no earlier run in OUT wrote it) and that is not a readable parquet file: found before
    /// the model loads, since the card (and `load_dataset`) would fail on it after the run.
    #[error("{} is named like a split shard but {problem}: verisample did not write it, and the dataset card and load_dataset would read it as part of that split; move it out of {}, or choose another --out", path.display(), path.parent().map_or_else(|| "data/".into(), |p| p.display().to_string()))]
    UnusableSplitFile {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong with it (`is not a file`, `is not a readable parquet file (…)`).
        problem: String,
    },
    /// The journal does not start with a header.
    #[error("journal {0} has no header record; remove it or use --restart")]
    NoHeader(PathBuf),
    /// The input cannot be opened.
    #[error("cannot read input: {0}")]
    Source(BackendError),
    /// The engine failed.
    #[error("generation failed: {0}")]
    Engine(BackendError),
    /// The split writer failed.
    #[error("writing splits failed: {0}")]
    Sink(BackendError),
    /// Writing one of the pipeline's files failed.
    #[error(transparent)]
    Write(#[from] crate::atomic::AtomicError),
    /// Stopped by Ctrl-C after journaling the finished work; rerun to resume.
    #[error("interrupted; finished work is journaled, rerun the same command to resume")]
    Interrupted,
    /// More input errors than `--max-errors`.
    #[error(
        "{count} input errors exceed --max-errors {max}; see errors.jsonl in the output folder"
    )]
    TooManyErrors {
        /// Errors so far.
        count: u64,
        /// The limit.
        max: usize,
    },
    /// The input changed between the generate and write phases.
    #[error("input changed during the run at stream position {position}: {what}")]
    InputChanged {
        /// Stream position.
        position: u64,
        /// What differs.
        what: String,
    },
    /// A question has no journaled answer in the write phase (a merge of incomplete shards).
    #[error("no generation for position {} qa {} ({pass:?} pass)", key.position, key.qa)]
    Missing {
        /// The question.
        key: ItemKey,
        /// The pass.
        pass: Pass,
    },
    /// The end-of-run accounting found questions in no output or in two.
    #[error("accounting check failed: {0}")]
    Accounting(String),
}

impl PipelineError {
    /// Process exit status for this error: 128 + the stop signal for a stopped run (130 for
    /// Ctrl-C, 143 for SIGTERM), 2 for an OUT the run refuses before any work
    /// ([`PipelineError::UnusableSplitFile`], [`PipelineError::Locked`]: another live process
    /// holds it), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            PipelineError::Interrupted => interrupted_exit_code(),
            PipelineError::UnusableSplitFile { .. } | PipelineError::Locked(_) => 2,
            _ => 1,
        }
    }
}
