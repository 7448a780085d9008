//! `verisample run`: read → check → clean → prompt → batched greedy generation →
//! think/answer split → string verifier → judge pass over the verifier's rejects (and the
//! optional calibration pass over its accepts) → route to splits → write.
//!
//! The run goes in three phases over the input stream of this shard:
//!
//! 1. **generate** — read rows, check images and fields, clean, and send the kept questions
//!    in chunks to the [`Generator`]; every finished answer is journaled (fsync) before it
//!    counts as done.
//! 2. **judge** — split each answer at `</think>`, run the verifier; the rejects with an
//!    answer (and the first `--judge-calibrate N` accepts) go to the same model as a
//!    text-only judge; every verdict text is journaled.
//! 3. **write** — read the input again, route every question, hand the rows to the
//!    [`SplitSink`] in input order, write `errors.jsonl`, `cleaning.jsonl`,
//!    `generations.jsonl`, the chart and `run.json`, and check the accounting: every input
//!    question is in exactly one of a split, the cleaning report or `errors.jsonl`.
//!
//! Only generations are journaled: cleaning, verification and routing are pure functions of
//! the input and the generations, so a resumed run recomputes them and writes the same
//! bytes. Rerunning a finished run replays everything and rewrites identical outputs.

pub mod accounting;
pub mod backend;
mod changes;
pub mod control;
mod dataset_io;
mod decisions;
mod dedup;
mod engine_io;
mod errors;
pub mod inspect;
mod lock;
pub mod outputs;
mod passes;
mod plan;
mod write;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use backend::{
    Assessed, BackendError, CleanedItem, CleanedRow, Decisions, FinishReason, GenRequest,
    GenResult, Generation, Generator, ItemKey, JudgeOutcome, Pass, RouteInput, Routed, RowSource,
    SplitRow, SplitSink, Verdict,
};
#[cfg(feature = "test-hooks")]
pub use control::KillAt;
pub use control::{install_ctrlc, interrupted_exit_code, KillStage, RunControl, EXIT_INTERRUPTED};
pub use dataset_io::{ParquetSink, ParquetSource};
pub use decisions::StandardDecisions;
pub use engine_io::EngineGenerator;

use crate::journal::{Journal, JournalError};
use crate::report::RunStats;
use crate::settings::{Fingerprint, Settings};

/// Version of the journal record format.
pub const JOURNAL_FORMAT: u32 = 1;

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
// One header per journal, against thousands of small `Generated` records read one at a time:
// boxing the header would save nothing that matters.
#[allow(clippy::large_enum_variant)]
pub enum JournalEntry {
    /// First record: what produced this journal.
    Header {
        /// [`JOURNAL_FORMAT`].
        format: u32,
        /// The run's fingerprint.
        fingerprint: Fingerprint,
    },
    /// A finished generation request.
    Generated {
        /// The question.
        key: ItemKey,
        /// The pass.
        pass: Pass,
        /// What came out.
        outcome: JournalOutcome,
    },
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

/// Why a run stopped without producing its outputs.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Journal I/O or decoding.
    #[error(transparent)]
    Journal(#[from] JournalError),
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
    #[error("no item reached a split: {rows} row(s) read, {errors} error(s) in {out}/errors.jsonl, {dropped} item(s) dropped by cleaning ({out}/cleaning.jsonl); {out} holds the run's logs but no dataset")]
    NoSplit {
        /// The output folder.
        out: PathBuf,
        /// Input rows read.
        rows: u64,
        /// Lines of `errors.jsonl`.
        errors: u64,
        /// Items dropped by cleaning.
        dropped: u64,
    },
    /// Another process is running in OUT (it holds `OUT/.verisample.lock`).
    #[error("another verisample process is running in {} (it holds {}); wait for it to finish or use another --out", .0.display(), .0.join(outputs::LOCK_FILE).display())]
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
    #[error("{} holds the splits of an earlier run but no journal or run.json to check its settings against (journal.bin missing or unreadable); use --restart to discard them, or another --out", .0.display())]
    UncheckedEarlierRun(PathBuf),
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
    /// Ctrl-C, 143 for SIGTERM), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            PipelineError::Interrupted => interrupted_exit_code(),
            _ => 1,
        }
    }
}

/// The journal opened and checked against this run's fingerprint; made before the model is
/// loaded so that a refused resume fails fast.
#[derive(Debug)]
pub struct Prepared {
    /// The run's settings.
    pub settings: Settings,
    /// The run's fingerprint.
    pub fingerprint: Fingerprint,
    /// `OUT/.verisample.lock`, locked for as long as this run lives, removed with it.
    lock: lock::OutLock,
    journal: Journal<JournalEntry>,
    results: BTreeMap<(ItemKey, Pass), JournalOutcome>,
    /// Bytes of a torn last record dropped on open.
    pub torn_bytes: u64,
}

impl Prepared {
    /// Generation results replayed from the journal.
    pub fn replayed(&self) -> usize {
        self.results.len()
    }

    /// Give up a run that failed before generating anything (the model does not load, a KV
    /// cache that does not fit, …): remove the journal when it holds no generation, the lock,
    /// and OUT itself when this process created it and nothing else is in it, so that the
    /// corrected command starts as on a fresh folder.
    pub fn abandon(self) {
        if self.results.is_empty() {
            let journal = self.settings.out.join(outputs::JOURNAL_FILE);
            if let Err(e) = std::fs::remove_file(&journal) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("cannot remove {}: {e}", journal.display());
                }
            }
        }
        drop(self.journal);
        self.lock.release();
    }
}

/// With no journal to replay (missing, or its header unreadable), the earlier run in `out`
/// that this run would overwrite is checked as a journal would be: `run.json`'s fingerprint
/// must be this run's; splits without a `run.json` cannot be checked and are refused too.
///
/// Errors: [`PipelineError::FingerprintMismatch`], [`PipelineError::UncheckedEarlierRun`].
fn check_earlier_run(
    out: &std::path::Path,
    fingerprint: &Fingerprint,
) -> Result<(), PipelineError> {
    let old = std::fs::read(out.join(outputs::RUN_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|mut v| {
            serde_json::from_value::<Fingerprint>(v.get_mut("fingerprint")?.take()).ok()
        });
    match old {
        Some(old) if old.sha256 == fingerprint.sha256 => Ok(()),
        Some(old) => {
            tracing::debug!(
                "run.json fingerprint {}, this run's {}",
                old.sha256,
                fingerprint.sha256
            );
            Err(PipelineError::FingerprintMismatch {
                out: out.to_path_buf(),
                old: old.sha256.clone(),
                new: fingerprint.sha256.clone(),
                changed: changes::describe_changes(&old, fingerprint),
            })
        }
        None => {
            // A folder that cannot be listed holds no split this run could delete.
            let splits = crate::dataset::card::output_split_files(out).unwrap_or_default();
            if splits.is_empty() {
                Ok(())
            } else {
                Err(PipelineError::UncheckedEarlierRun(out.to_path_buf()))
            }
        }
    }
}

/// Whether OUT holds no work a rerun could lose: no split, and a journal (if any) without a
/// single generation — what a run that failed before its first generation (a model that does
/// not load, bad input) or that had nothing to generate leaves. Its files are replaced like
/// with `--restart`, so that the corrected command is not refused as a different run.
fn nothing_to_lose(out: &std::path::Path, journal: &std::path::Path) -> bool {
    // As in `check_earlier_run`: a folder that cannot be listed holds no split to lose.
    let no_splits = crate::dataset::card::output_split_files(out)
        .unwrap_or_default()
        .is_empty();
    let no_generation = match crate::journal::read_records::<JournalEntry>(journal) {
        Ok(replay) => replay
            .records
            .iter()
            .all(|r| matches!(r, JournalEntry::Header { .. })),
        Err(_) => !journal.exists(),
    };
    no_splits && no_generation
}

/// Open (or create) `OUT/journal.bin`, check its header against `fingerprint`, and replay
/// it: [`prepare_with`] with nothing to start.
///
/// Errors: as [`prepare_with`].
pub fn prepare(settings: &Settings, fingerprint: Fingerprint) -> Result<Prepared, PipelineError> {
    prepare_with(settings, fingerprint, || Ok::<_, PipelineError>(())).map(|(p, ())| p)
}

/// Take OUT's lock, check the journal's header against `fingerprint` and replay it, and call
/// `start` (the model load) at the one point where its failure loses nothing:
/// - resuming (a journal or splits to keep): the journal is checked first, so a changed
///   setting or model is refused before any weight is loaded; if `start` fails, a journal
///   without a generation is removed again ([`Prepared::abandon`]);
/// - with `settings.restart`, or when OUT holds nothing a rerun could lose: `start` runs
///   before the pipeline's files in OUT ([`outputs::OWNED_FILES`]) are discarded, so a
///   restart whose model does not load leaves the earlier output exactly as it was.
///
/// Temporary files of killed runs are removed ([`outputs::remove_debris`]); without a
/// journal to replay, an earlier run in OUT must match as well (`check_earlier_run`).
///
/// Errors: `start`'s error; [`PipelineError::FingerprintMismatch`] (settings or model
/// changed), [`PipelineError::UncheckedEarlierRun`], [`PipelineError::NoHeader`],
/// [`PipelineError::Locked`], journal I/O.
pub fn prepare_with<T, E: From<PipelineError>>(
    settings: &Settings,
    fingerprint: Fingerprint,
    start: impl FnOnce() -> Result<T, E>,
) -> Result<(Prepared, T), E> {
    let lock = lock::OutLock::take(&settings.out)?;
    let path = settings.out.join(outputs::JOURNAL_FILE);
    if settings.restart || nothing_to_lose(&settings.out, &path) {
        let started = match start() {
            Ok(started) => started,
            Err(e) => {
                lock.release();
                return Err(e);
            }
        };
        for name in outputs::OWNED_FILES {
            let p = settings.out.join(name);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(PipelineError::from(JournalError::Io { path: p, source }).into());
                }
            }
        }
        return Ok((open_journal(lock, settings, fingerprint)?, started));
    }
    let prepared = open_journal(lock, settings, fingerprint)?;
    match start() {
        Ok(started) => Ok((prepared, started)),
        Err(e) => {
            prepared.abandon();
            Err(e)
        }
    }
}

/// The part of [`prepare_with`] after the lock: debris, journal header, replay.
fn open_journal(
    lock: lock::OutLock,
    settings: &Settings,
    fingerprint: Fingerprint,
) -> Result<Prepared, PipelineError> {
    let path = settings.out.join(outputs::JOURNAL_FILE);
    let removed = outputs::remove_debris(&settings.out).map_err(|source| JournalError::Io {
        path: settings.out.clone(),
        source,
    })?;
    if !removed.is_empty() {
        tracing::info!(
            "removed {} temporary file(s) of a killed run",
            removed.len()
        );
    }
    let (mut journal, replay) = Journal::<JournalEntry>::open(&path)?;
    let mut records = replay.records.into_iter();
    match records.next() {
        None => {
            if !settings.restart {
                check_earlier_run(&settings.out, &fingerprint)?;
            }
            journal.append(&JournalEntry::Header {
                format: JOURNAL_FORMAT,
                fingerprint: fingerprint.clone(),
            })?
        }
        Some(JournalEntry::Header {
            fingerprint: old, ..
        }) => {
            if old.sha256 != fingerprint.sha256 {
                tracing::debug!(
                    "journal fingerprint {}, this run's {}",
                    old.sha256,
                    fingerprint.sha256
                );
                return Err(PipelineError::FingerprintMismatch {
                    out: settings.out.clone(),
                    old: old.sha256.clone(),
                    new: fingerprint.sha256.clone(),
                    changed: changes::describe_changes(&old, &fingerprint),
                });
            }
        }
        Some(JournalEntry::Generated { .. }) => return Err(PipelineError::NoHeader(path)),
    }
    let mut results = BTreeMap::new();
    for rec in records {
        if let JournalEntry::Generated { key, pass, outcome } = rec {
            results.insert((key, pass), outcome);
        }
    }
    Ok(Prepared {
        settings: settings.clone(),
        fingerprint,
        lock,
        journal,
        results,
        torn_bytes: replay.torn_bytes,
    })
}

/// Append pre-existing generation results (from shard journals) to a freshly prepared
/// journal: used by `verisample merge`. Existing keys are kept.
///
/// Errors: journal I/O.
pub fn import_results(
    prepared: &mut Prepared,
    results: impl IntoIterator<Item = (ItemKey, Pass, JournalOutcome)>,
) -> Result<(), PipelineError> {
    for (key, pass, outcome) in results {
        if prepared.results.contains_key(&(key, pass)) {
            continue;
        }
        prepared.journal.append(&JournalEntry::Generated {
            key,
            pass,
            outcome: outcome.clone(),
        })?;
        prepared.results.insert((key, pass), outcome);
    }
    Ok(())
}

/// The backends a run talks to.
pub struct Backends<'a> {
    /// The input dataset.
    pub source: &'a dyn RowSource,
    /// The batch engine.
    pub generator: &'a mut dyn Generator,
    /// Cleaning, verifier, judge prompt/parser, routing.
    pub decisions: &'a dyn Decisions,
    /// The split writer (publishes atomically on finish).
    pub sink: &'a mut dyn SplitSink,
}

/// `run.json`: what ran, on what, and what came out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// `complete`, or `no_split` for a whole run (not one shard of several) in which no item
    /// reached a split (the command fails). The file is written after the splits and logs.
    pub status: String,
    /// `verisample` crate version.
    pub verisample_version: String,
    /// The engine's [`Generator::version`].
    pub engine_version: String,
    /// The engine's [`Generator::stats`] (this process only).
    #[serde(default)]
    pub engine_stats: Option<serde_json::Value>,
    /// All settings of the run.
    pub settings: Settings,
    /// Fingerprint (canonical settings, model file hashes).
    pub fingerprint: Fingerprint,
    /// sha256 of each safetensors file of the model.
    pub model_weights: BTreeMap<String, String>,
    /// Counts and throughput.
    pub stats: RunStats,
    /// Peak resident memory, bytes (`VmHWM`).
    pub peak_memory_bytes: Option<u64>,
    /// Generation results replayed from the journal at start.
    pub replayed_results: usize,
    /// Bytes of a torn journal record dropped at start.
    pub torn_journal_bytes: u64,
}

/// Run the job prepared by [`prepare`] to completion.
///
/// Errors: [`PipelineError`]; on [`PipelineError::Interrupted`] (exit 130) and on a kill,
/// the journal holds every finished generation and a rerun resumes.
pub fn run(
    mut prepared: Prepared,
    backends: Backends<'_>,
    control: &RunControl,
) -> Result<RunReport, PipelineError> {
    let Backends {
        source,
        generator,
        decisions,
        sink,
    } = backends;
    let settings = prepared.settings.clone();
    let replayed_results = prepared.replayed();
    let mut progress = crate::report::Progress::new(settings.progress);
    let mut ctx = passes::PassContext {
        settings: &settings,
        decisions,
        control,
        journal: &mut prepared.journal,
        results: &mut prepared.results,
        progress: &mut progress,
        prompt_tokens: 0,
        replayed: 0,
        errors_seen: 0,
    };
    let plans = passes::generate_answers(&mut ctx, source, generator)?;
    let judged = passes::judge_answers(&mut ctx, &plans, generator)?;
    let replayed = ctx.replayed;
    let prompt_tokens = ctx.prompt_tokens;
    let stats = write::write_outputs(write::WriteInput {
        settings: &settings,
        decisions,
        control,
        source,
        sink,
        plans: &plans,
        judged: &judged,
        results: &prepared.results,
        progress: &mut progress,
        prompt_tokens,
        replayed,
    })?;
    // errors.jsonl is written by now; an input of which nothing decoded is an error, not an
    // empty but complete run.
    let whole_file = |p: &plan::RowPlan| p.row.is_none() && p.body.is_err();
    if !plans.is_empty() && plans.iter().all(whole_file) {
        let first = &plans[0];
        let message = first.body.as_ref().err().map_or("", |p| p.message.as_str());
        return Err(PipelineError::InputUnreadable {
            errors: settings.out.join(outputs::ERRORS_FILE),
            count: plans.len(),
            first: format!("{}: {message}", first.file),
        });
    }
    // A whole run that published no split failed (exit 1 below), and says so in run.json; a
    // shard of several may be empty and still be a complete part of its job.
    let no_split = stats.split_rows.is_empty() && settings.shard.count == 1;
    let report = RunReport {
        status: if no_split { "no_split" } else { "complete" }.into(),
        verisample_version: env!("CARGO_PKG_VERSION").into(),
        engine_version: generator.version(),
        engine_stats: generator.stats(),
        settings: settings.clone(),
        fingerprint: prepared.fingerprint.clone(),
        model_weights: prepared
            .fingerprint
            .model_files
            .iter()
            .filter(|(k, _)| k.ends_with(".safetensors"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        stats,
        peak_memory_bytes: crate::report::peak_memory_bytes(),
        replayed_results,
        torn_journal_bytes: prepared.torn_bytes,
    };
    let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
    crate::atomic::write_atomic(settings.out.join(outputs::RUN_FILE), &json)?;
    if report.stats.split_rows.is_empty() {
        let err = PipelineError::NoSplit {
            out: settings.out.clone(),
            rows: report.stats.input_rows,
            errors: report.stats.errors,
            dropped: report.stats.cleaning_drops.values().sum(),
        };
        if settings.shard.count == 1 {
            return Err(err);
        }
        tracing::warn!("shard {}: {err}", settings.shard);
    }
    Ok(report)
}
