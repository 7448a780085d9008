//! Phases 1 and 2 of a run: plan every row of the shard and generate the answers
//! ([`answer`]), then verify them and run the judge ([`judge`]: rescue over rejects,
//! calibration over accepts). Every finished generation is journaled before it counts
//! ([`run_requests`]).

use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;

use super::accounting::Unit;
use super::backend::{Decisions, GenRequest, GenResult, Generator, ItemKey, Pass};
use super::control::{KillStage, RunControl};
use super::store::Store;
use super::{JournalEntry, JournalOutcome, PipelineError};
use crate::journal::Journal;
use crate::record::QaItem;
use crate::report::Progress;
use crate::settings::Settings;

mod answer;
mod judge;

pub(crate) use answer::generate_answers;
pub(crate) use answer::{RowPlanner, Select};
pub(crate) use judge::judge_answers;

/// Smallest number of requests handed to the engine at once. Chunks are
/// `max(MIN_CHUNK, 8 × max_batch)` so the engine's continuous batching stays full while
/// the input is streamed (only one chunk of images is held in memory, at most
/// [`MAX_CHUNK_PIXEL_BYTES`] of pixels).
pub const MIN_CHUNK: usize = 256;
/// Most bytes of decoded pixels (8-bit RGB) the pending answer requests may hold: their
/// images travel decoded to the engine, so a chunk is sent early once its images reach this
/// (1 GiB: about 90 images of 12 megapixels). Greedy results do not depend on the chunking.
pub const MAX_CHUNK_PIXEL_BYTES: usize = 1 << 30;

/// State shared by the passes.
pub(crate) struct PassContext<'a> {
    pub settings: &'a Settings,
    pub decisions: &'a dyn Decisions,
    pub control: &'a RunControl,
    pub journal: &'a mut Journal<JournalEntry>,
    /// The journaled outcomes and the image each answer was generated from, on disk.
    pub results: &'a Store,
    pub progress: &'a mut Progress,
    pub prompt_tokens: u64,
    pub replayed: u64,
    /// Errors found by this invocation that `recorded_errors` does not hold: what
    /// `--max-errors` counts.
    pub errors_seen: u64,
    /// The errors of the finished run in OUT ([`recorded_errors`]): a rerun finds them again,
    /// and they do not count again.
    pub recorded_errors: BTreeSet<Unit>,
}

/// The units (`(position, qa)`, `qa` `None` for a whole row) of `OUT/errors.jsonl` when OUT
/// holds a finished run (`run.json`), read only when `--max-errors` is set: after
/// [`super::prepare`] that run is this one (same fingerprint; a `--restart` or a fresh start
/// removed any other's), and its list is complete for the rows it took: every row, or with a
/// `--limit` that left rows out, its shard's first N (errors past them, which an abort after
/// it may have listed, count again). An interrupted or aborted run's errors count again on
/// resume, so an abort holds until the limit is raised. Unreadable lines add nothing.
pub(crate) fn recorded_errors(settings: &Settings) -> BTreeSet<Unit> {
    let Some(earlier) = settings.max_errors.and(finished_run(&settings.out)) else {
        return BTreeSet::new();
    };
    let last = earlier.map_or(u64::MAX, |n| {
        settings.shard.position_of(n.saturating_sub(1))
    });
    let path = settings.out.join(crate::out_files::ERRORS_FILE);
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<super::outputs::ErrorLine>(l).ok())
        .filter(|e| e.position <= last)
        .map(|e| (e.position, e.qa))
        .collect()
}

/// The finished run in OUT, by its `run.json`: `None` when there is none, or when its status
/// is [`super::STATUS_WRITING`] (a run that stopped while replacing its outputs: OUT may mix
/// two runs' files), `Some(None)` when it took every row of its shard (or its `run.json`
/// cannot be parsed: as before `--limit` existed), `Some(Some(n))` when its `--limit n` left
/// rows out.
pub(crate) fn finished_run(out: &std::path::Path) -> Option<Option<u64>> {
    if !crate::run_json::path(out).exists() {
        return None;
    }
    let report = crate::run_json::RunJsonView::read(out);
    if report.as_ref().is_some_and(|v| v.is_writing()) {
        return None;
    }
    let limit = report
        .and_then(|v| v.stats.limit)
        .and_then(|l| (l.left_out_rows? > 0).then_some(l.limit)?);
    Some(limit)
}

impl PassContext<'_> {
    /// Count the error `units` this invocation found against `--max-errors`, less those an
    /// earlier invocation recorded.
    ///
    /// Errors: [`PipelineError::TooManyErrors`] past the limit.
    pub(super) fn count_errors(
        &mut self,
        units: impl IntoIterator<Item = Unit>,
    ) -> Result<(), PipelineError> {
        let recorded = &self.recorded_errors;
        self.errors_seen += units.into_iter().filter(|u| !recorded.contains(u)).count() as u64;
        match self.settings.max_errors {
            Some(max) if self.errors_seen > max as u64 => Err(PipelineError::TooManyErrors {
                count: self.errors_seen,
                max,
            }),
            _ => Ok(()),
        }
    }
}

/// Requests per engine call.
pub(super) fn chunk_size(settings: &Settings) -> usize {
    MIN_CHUNK.max(8 * settings.max_batch)
}

/// Send `requests` to the engine, journaling each result (fsync) before it counts.
/// `verify_ctx` maps answer keys to (family, question) for the live accept rate.
pub(super) fn run_requests(
    ctx: &mut PassContext<'_>,
    generator: &mut dyn Generator,
    requests: Vec<GenRequest>,
    pass: Pass,
    verify_ctx: &HashMap<ItemKey, (String, QaItem)>,
    appended: &mut u64,
) -> Result<(), PipelineError> {
    if requests.is_empty() {
        return Ok(());
    }
    let stage = match pass {
        Pass::Answer => KillStage::Generation,
        Pass::Judge => KillStage::Judge,
    };
    let decisions = ctx.decisions;
    let control = ctx.control;
    let mut failure: Option<PipelineError> = None;
    let mut new_errors: Vec<Unit> = Vec::new();
    let mut capacity_failures = 0u64;
    let mut prompt_tokens = 0u64;
    // The image of each answer request, recorded with its answer.
    let images: HashMap<ItemKey, String> = requests
        .iter()
        .filter(|r| r.pass == Pass::Answer)
        .filter_map(|r| Some((r.key, hex::encode(r.image.as_ref()?.sha256))))
        .collect();
    {
        let journal = &mut *ctx.journal;
        let results = ctx.results;
        let progress = &mut *ctx.progress;
        let mut on_done = |r: GenResult| -> ControlFlow<()> {
            let outcome = match r.outcome {
                Ok(g) => JournalOutcome::Done(g),
                Err(m) => JournalOutcome::Failed(m),
            };
            capacity_failures += u64::from(r.exceeds_capacity);
            let image_sha256 = images
                .get(&r.key)
                .filter(|_| r.pass == Pass::Answer)
                .cloned();
            let entry = JournalEntry::Generated {
                key: r.key,
                pass: r.pass,
                outcome,
                exceeds_capacity: r.exceeds_capacity,
                image_sha256,
            };
            *appended += 1;
            control.kill_point_journaled(stage, *appended, journal, &entry);
            if let Err(e) = journal.append(&entry) {
                failure = Some(e.into());
                return ControlFlow::Break(());
            }
            let JournalEntry::Generated {
                key,
                pass,
                outcome,
                image_sha256,
                ..
            } = entry
            else {
                return ControlFlow::Continue(());
            };
            let (tokens, accepted) = match &outcome {
                JournalOutcome::Done(g) => {
                    prompt_tokens += g.prompt_tokens as u64;
                    let accepted = verify_ctx
                        .get(&key)
                        .map(|(family, item)| decisions.assess(family, item, g).accepted);
                    (g.token_ids.len() as u64, accepted)
                }
                JournalOutcome::Failed(_) => {
                    if pass == Pass::Answer {
                        new_errors.push((key.position, Some(key.qa)));
                    }
                    (0, None)
                }
            };
            let stored = match &image_sha256 {
                Some(sha) => results.set_answer_image(key, Some(sha)),
                None => Ok(()),
            };
            if let Err(e) = stored.and_then(|()| results.set_result(key, pass, &outcome)) {
                failure = Some(e.into());
                return ControlFlow::Break(());
            }
            progress.advance(tokens, true, accepted);
            if control.stopped() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        generator
            .generate(requests, &mut on_done)
            .map_err(PipelineError::Engine)?;
    }
    ctx.prompt_tokens += prompt_tokens;
    if capacity_failures > 0 {
        let what = match pass {
            Pass::Answer => {
                "a prompt larger than the whole pool: in errors.jsonl; or a generation cut when \
                 its context filled it: rejected as truncated"
            }
            Pass::Judge => {
                "a prompt larger than the whole pool: UNSURE; or a generation cut when its \
                 context filled it: UNSURE unless its last line already held the verdict"
            }
        };
        tracing::warn!(
            "{capacity_failures} {pass:?}-pass request(s) did not fit the KV cache pool ({what}); \
             a rerun with a larger --kv-cache-gib generates them again (they are tried again on \
             resume)"
        );
    }
    if let Some(f) = failure {
        return Err(f);
    }
    ctx.count_errors(new_errors)?;
    if control.stopped() {
        return Err(PipelineError::Interrupted);
    }
    Ok(())
}
