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
//!    question is in exactly one of a split, the cleaning report or `errors.jsonl`. From the
//!    first replaced output to the last, `run.json` says `writing` ([`STATUS_WRITING`]).
//!
//! Only generations are journaled: cleaning, verification and routing are pure functions of
//! the input and the generations, so a resumed run recomputes them and writes the same
//! bytes. Rerunning a finished run replays everything and rewrites identical outputs.

pub mod accounting;
pub mod backend;
mod card;
mod changes;
pub mod control;
mod dataset_io;
mod decisions;
mod dedup;
mod engine_io;
mod error;
mod errors_jsonl;
pub mod input_check;
pub mod job;
mod lock;
pub mod outputs;
mod passes;
mod plan;
mod resume;
pub mod sampled;
mod store;
mod write;

pub use backend::{
    Assessed, BackendError, CleanedItem, CleanedRow, Decisions, FinishReason, GenRequest,
    GenResult, Generation, Generator, ItemKey, JudgeOutcome, Pass, RouteInput, Routed, RowSource,
    SplitRow, SplitSink, Verdict,
};
pub use changes::describe_changes;
#[cfg(feature = "test-hooks")]
pub use control::KillAt;
pub use control::{install_ctrlc, interrupted_exit_code, KillStage, RunControl, EXIT_INTERRUPTED};
pub use dataset_io::{ParquetSink, ParquetSource};
pub use decisions::StandardDecisions;
pub use engine_io::{EngineGenerator, LoadedGenerator, ENGINE_VERSION};
pub use error::PipelineError;
pub use errors_jsonl::image_refusals;
pub use lock::OutLock;
pub(crate) use passes::{RowPlanner, Select};
pub(crate) use resume::{fold_record, import_results};
pub use resume::{prepare, prepare_with, JournalEntry, JournalOutcome, Prepared, JOURNAL_FORMAT};
pub(crate) use store::Store;
pub use store::StoreError;

use crate::journal::JournalError;
use crate::report::RunStats;
use crate::settings::{Fingerprint, Settings};

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

pub use crate::run_json::{STATUS_COMPLETE, STATUS_NO_SPLIT, STATUS_WRITING};

/// `run.json` ([`crate::run_json`]) with this crate's settings, fingerprint and statistics.
pub type RunReport = crate::run_json::RunJson<Settings, Fingerprint, RunStats>;

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
        results: &prepared.results,
        progress: &mut progress,
        prompt_tokens: 0,
        replayed: 0,
        errors_seen: 0,
        recorded_errors: passes::recorded_errors(&settings),
    };
    let mut plans = passes::generate_answers(&mut ctx, source, generator)?;
    let judged = passes::judge_answers(&mut ctx, &mut plans, generator)?;
    let replayed = ctx.replayed;
    let prompt_tokens = ctx.prompt_tokens;
    let report = |status: &str, stats: RunStats| RunReport {
        status: status.into(),
        verisample_version: env!("CARGO_PKG_VERSION").into(),
        engine_version: generator.version(),
        engine_stats: generator.stats(),
        engine_metrics: generator.metrics(),
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
        peak_memory_bytes: crate::engine::metrics::peak_rss_bytes(),
        replayed_results,
        torn_journal_bytes: prepared.torn_bytes,
    };
    let run_json = settings.out.join(crate::out_files::RUN_FILE);
    let write_report = |report: &RunReport| -> Result<(), PipelineError> {
        let json = serde_json::to_vec_pretty(report).unwrap_or_default();
        crate::atomic::write_atomic(&run_json, &json)?;
        Ok(())
    };
    let mut mark_writing = |stats: &RunStats| write_report(&report(STATUS_WRITING, stats.clone()));
    let stats = write::write_outputs(
        write::WriteInput {
            settings: &settings,
            decisions,
            control,
            source,
            sink,
            judge_reused: judged.reused,
            results: &prepared.results,
            progress: &mut progress,
            prompt_tokens,
            replayed,
            mark_writing: &mut mark_writing,
            model_files: &prepared.fingerprint.model_files,
        },
        &mut plans,
    )?;
    // errors.jsonl is written by now; an input of which nothing decoded is an error, not an
    // empty but complete run.
    if plans.all_unreadable_files() {
        // No run report, as none was before: an earlier run of these files decoded nothing
        // either (the input's hashes are in the fingerprint), and a `writing` one would make
        // OUT look unfinished when the run failed for its input.
        match std::fs::remove_file(&run_json) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                return Err(JournalError::Io {
                    path: run_json.clone(),
                    source,
                }
                .into())
            }
            _ => {}
        }
        let (file, message) = plans.first().map_or_else(Default::default, |first| {
            let message = first.body.as_ref().err().map_or("", |p| p.message.as_str());
            (first.file.clone(), message.to_string())
        });
        return Err(PipelineError::InputUnreadable {
            errors: settings.out.join(crate::out_files::ERRORS_FILE),
            count: plans.len(),
            first: format!("{file}: {message}"),
        });
    }
    // A whole run that published no split failed (exit 1 below), and says so in run.json; a
    // shard of several may be empty and still be a complete part of its job.
    let no_split = stats.split_rows.is_empty() && settings.shard.count == 1;
    let status = if no_split {
        STATUS_NO_SPLIT
    } else {
        STATUS_COMPLETE
    };
    let report = report(status, stats);
    write_report(&report)?;
    if report.stats.split_rows.is_empty() {
        let err = PipelineError::NoSplit {
            out: settings.out.clone(),
            rows: report.stats.input_rows,
            unread_rows: report.stats.unread_rows,
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
