//! Phases 1 and 2 of a run: plan every row of the shard and generate the answers, then
//! verify them and run the judge (rescue over rejects, calibration over accepts). Every
//! finished generation is journaled before it counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::accounting::Unit;
use super::backend::{
    CleanedItem, Decisions, GenRequest, GenResult, Generator, ItemKey, Pass, RowSource, Verdict,
};
use super::control::{KillStage, RunControl};
use super::dedup::Dedup;
use super::input_check::{check_image, check_qa, FieldProblem};
use super::plan::{ItemPlan, JudgeRole, RowOk, RowPlan};
use super::{JournalEntry, JournalOutcome, PipelineError};
use crate::engine::ImageInput;
use crate::journal::Journal;
use crate::record::{InputRow, QaItem, RowError};
use crate::report::Progress;
use crate::settings::Settings;

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
    pub results: &'a mut BTreeMap<(ItemKey, Pass), JournalOutcome>,
    /// The image each journaled answer was generated from (hex SHA-256), where recorded.
    pub answer_images: &'a mut BTreeMap<ItemKey, String>,
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
    let path = settings.out.join(super::outputs::ERRORS_FILE);
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
    fn count_errors(&mut self, units: impl IntoIterator<Item = Unit>) -> Result<(), PipelineError> {
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

fn row_error(position: u64, e: RowError) -> RowPlan {
    RowPlan {
        position,
        file: e.file,
        row: e.row,
        rows: e.rows,
        body: Err(FieldProblem {
            field: e.field,
            message: e.message,
        }),
    }
}

/// Plan one stream element: checks (the image's size against `generator`'s vision memory
/// budget among them), cleaning, `clean_meta`. Returns the plan and, for a readable row, its
/// image for the answer requests: decoded by the check, hashed once (the hash is also the
/// plan's `image_sha256`).
pub(crate) fn plan_row(
    position: u64,
    element: Result<InputRow, RowError>,
    settings: &Settings,
    decisions: &dyn Decisions,
    generator: &dyn Generator,
) -> (RowPlan, Option<ImageInput>) {
    let mut row = match element {
        Ok(row) => row,
        Err(e) => return (row_error(position, e), None),
    };
    let fail = |field: &str, message: String| {
        row_error(
            position,
            RowError {
                file: row.source_file.clone(),
                row: Some(row.row_index),
                rows: None,
                field: field.into(),
                message,
            },
        )
    };
    let rgb = match check_image(row.image.bytes.as_deref(), |w, h| {
        generator.check_image(position, w, h)
    }) {
        Ok(rgb) => rgb,
        Err(p) => return (fail(&p.field, p.message), None),
    };
    if row.qa.is_empty() {
        return (fail("qa", "row has no questions".into()), None);
    }
    let family = settings
        .family
        .clone()
        .unwrap_or_else(|| crate::family::split_family(row.family.as_deref()));
    if !crate::family::is_valid_family_name(&family) {
        let rule = crate::family::FAMILY_NAME_RULE;
        let msg = format!("family {family:?} cannot name a split ({rule})");
        return (fail("family", msg), None);
    }
    // `--family` says which benchmark the rows belong to: cleaning (task purity) and the
    // verifier choice follow it.
    row.family = Some(family.clone());
    let cleaned = decisions.clean(&row);
    if cleaned.items.len() != row.qa.len() {
        let msg = format!(
            "cleaning returned {} decisions for {} questions",
            cleaned.items.len(),
            row.qa.len()
        );
        return (fail("qa", msg), None);
    }
    let items = row
        .qa
        .iter()
        .zip(cleaned.items)
        .enumerate()
        .map(
            |(i, (qa, c))| match (check_qa(i, qa, row.columns.as_ref()), c) {
                (Err(p), _) => ItemPlan::Invalid(p),
                (Ok(()), CleanedItem::Keep(q)) => ItemPlan::Keep(q),
                (Ok(()), CleanedItem::Drop { reason, detail }) => {
                    ItemPlan::Dropped { reason, detail }
                }
            },
        )
        .collect();
    let sha256: [u8; 32] = Sha256::digest(row.image.bytes.as_deref().unwrap_or_default()).into();
    // Only the file name: the path as typed on the command line (often absolute and local)
    // would leak into a published dataset and make its bytes depend on how `--data` was spelt.
    let source_name = std::path::Path::new(&row.source_file)
        .file_name()
        .map_or_else(
            || row.source_file.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
    // Provenance next to the cleaner's own keys (`policy`, `cleaning`), one level deep.
    let mut clean_meta = serde_json::json!({
        "source_file": source_name,
        "row_index": row.row_index,
        "position": position,
    });
    // A flat-layout row records the input columns it was read from.
    if let (Some(top), Some(columns)) = (clean_meta.as_object_mut(), &row.columns) {
        top.insert("columns".into(), serde_json::json!(columns));
    }
    // Several references are stored as their JSON array text; `verify` reads them back so.
    if let Some(top) = clean_meta.as_object_mut() {
        if row.qa.iter().any(|q| q.answer_list.is_some()) {
            top.insert("answer_list".into(), true.into());
        }
    }
    if let (Some(top), serde_json::Value::Object(cleaner_keys)) =
        (clean_meta.as_object_mut(), cleaned.meta)
    {
        top.extend(cleaner_keys);
    }
    let clean_meta = clean_meta.to_string();
    let plan = RowPlan {
        position,
        file: row.source_file.clone(),
        row: Some(row.row_index),
        rows: None,
        body: Ok(RowOk {
            family,
            clean_meta,
            image_sha256: hex::encode(sha256),
            items,
        }),
    };
    (plan, Some(ImageInput::decoded(Arc::new(rgb), sha256)))
}

/// Requests per engine call.
fn chunk_size(settings: &Settings) -> usize {
    MIN_CHUNK.max(8 * settings.max_batch)
}

/// Send `requests` to the engine, journaling each result (fsync) before it counts.
/// `verify_ctx` maps answer keys to (family, question) for the live accept rate.
fn run_requests(
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
        let results = &mut *ctx.results;
        let answer_images = &mut *ctx.answer_images;
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
            if let Some(sha) = &image_sha256 {
                answer_images.insert(r.key, sha.clone());
            }
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
                key, pass, outcome, ..
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
            results.insert((key, pass), outcome);
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

/// Phase 1: plan every element of the shard and generate the missing answers.
/// On a `--max-errors` abort, `errors.jsonl` is written (atomically) for the rows planned so far
/// before the error is returned, so the message's pointer to it holds — unless OUT holds a
/// finished run (`run.json`) that took every row, whose complete `errors.jsonl` is kept.
pub(crate) fn generate_answers(
    ctx: &mut PassContext<'_>,
    source: &dyn RowSource,
    generator: &mut dyn Generator,
) -> Result<Vec<RowPlan>, PipelineError> {
    let mut plans = Vec::new();
    match generate_answers_into(ctx, source, generator, &mut plans) {
        Ok(()) => Ok(plans),
        Err(e @ PipelineError::TooManyErrors { .. }) => {
            // A finished output's errors.jsonl already lists every error of this input and
            // these settings (the fingerprint matched): a rerun that aborts leaves it whole —
            // unless that run left rows out with `--limit`, whose errors it does not list.
            if finished_run(&ctx.settings.out) != Some(None) {
                super::errors_jsonl::write_abort_errors(&ctx.settings.out, &plans, ctx.results)?;
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

fn generate_answers_into(
    ctx: &mut PassContext<'_>,
    source: &dyn RowSource,
    generator: &mut dyn Generator,
    plans: &mut Vec<RowPlan>,
) -> Result<(), PipelineError> {
    let settings = ctx.settings;
    let shard = settings.shard;
    let rows_est = source.len_hint().map(|n| {
        let rows = shard.share_of(n);
        settings.limit.map_or(rows, |l| rows.min(l as u64))
    });
    ctx.progress.phase("generate", rows_est.unwrap_or(0));
    let chunk = chunk_size(settings);
    let mut pending = Vec::new();
    let mut pending_pixel_bytes = 0usize;
    let mut verify_ctx = HashMap::new();
    let mut appended = 0u64;
    let mut items_seen = 0u64;
    // Duplicates are marked over the whole input, so the rows of other shards are planned
    // too (only to be seen by the marker).
    let mut dedup = Dedup::new(settings.dedup);
    let stream = source.rows().map_err(PipelineError::Source)?;
    for (position, element) in stream.enumerate() {
        let position = position as u64;
        // `--limit N`: the stream ends after this shard's Nth element; the rows after it are
        // neither decoded nor seen by the duplicate marker (whose decisions over a prefix are
        // those over the whole input, as it keeps first occurrences).
        if settings.limit.is_some_and(|n| plans.len() >= n) {
            break;
        }
        let mine = shard.contains(position);
        if !mine && !settings.dedup {
            continue;
        }
        if ctx.control.stopped() {
            return Err(PipelineError::Interrupted);
        }
        let (mut plan, image) = plan_row(position, element, settings, ctx.decisions, &*generator);
        dedup.mark(&mut plan);
        if !mine {
            continue;
        }
        let body = match &plan.body {
            Ok(body) => body,
            Err(_) => {
                plans.push(plan);
                ctx.count_errors([(position, None)])?;
                continue;
            }
        };
        items_seen += body.items.len() as u64;
        if let Some(rows) = rows_est {
            let per_row = items_seen as f64 / (plans.len() + 1) as f64;
            ctx.progress
                .set_total(((rows as f64) * per_row).round().max(items_seen as f64) as u64);
        }
        let invalid = body
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i, ItemPlan::Invalid(_)))
            .map(|(qa, _)| (position, Some(qa as u32)));
        if let Err(e) = ctx.count_errors(invalid) {
            plans.push(plan);
            return Err(e);
        }
        let mut abort = None;
        let before = pending.len();
        for (qa, item) in body.items.iter().enumerate() {
            let ItemPlan::Keep(q) = item else { continue };
            let key = ItemKey {
                position,
                qa: qa as u32,
            };
            // An answer journaled for another image (one given by path and changed since, which
            // the input's hashes do not cover) is answered again, and judged again.
            if ctx
                .answer_images
                .get(&key)
                .is_some_and(|sha| *sha != body.image_sha256)
            {
                ctx.results.remove(&(key, Pass::Answer));
                ctx.results.remove(&(key, Pass::Judge));
            }
            match ctx.results.get(&(key, Pass::Answer)) {
                Some(JournalOutcome::Done(g)) => {
                    let ok = ctx.decisions.assess(&body.family, q, g);
                    ctx.progress.advance(0, false, Some(ok.accepted));
                    ctx.replayed += 1;
                }
                Some(JournalOutcome::Failed(_)) => {
                    ctx.progress.advance(0, false, None);
                    ctx.replayed += 1;
                    if let Err(e) = ctx.count_errors([(position, Some(key.qa))]) {
                        abort = Some(e);
                        break;
                    }
                }
                None => {
                    verify_ctx.insert(key, (body.family.clone(), q.clone()));
                    pending.push(GenRequest {
                        key,
                        pass: Pass::Answer,
                        image: image.clone(),
                        user_text: q.question.clone(),
                        think: settings.think,
                        max_new_tokens: settings.max_new_tokens,
                    });
                }
            }
        }
        plans.push(plan);
        if let Some(e) = abort {
            return Err(e);
        }
        let held = image.as_ref().filter(|_| pending.len() > before);
        pending_pixel_bytes += held.map_or(0, |i| i.content.pixel_bytes());
        if pending.len() >= chunk || pending_pixel_bytes >= MAX_CHUNK_PIXEL_BYTES {
            pending_pixel_bytes = 0;
            let reqs = std::mem::take(&mut pending);
            run_requests(
                ctx,
                generator,
                reqs,
                Pass::Answer,
                &verify_ctx,
                &mut appended,
            )?;
            verify_ctx.clear();
        }
    }
    run_requests(
        ctx,
        generator,
        pending,
        Pass::Answer,
        &verify_ctx,
        &mut appended,
    )?;
    Ok(())
}

/// Phase 2: verify every answer; judge the rejects with an answer (when `--judge on`) and
/// the first `--judge-calibrate N` verifier accepts of the shard in input order. Returns the
/// role of every judged item.
///
/// Merging shards: each shard calibrates its own first N accepts; the first N accepts of
/// the whole input are, per shard, a prefix of those, so the merge finds all of them.
pub(crate) fn judge_answers(
    ctx: &mut PassContext<'_>,
    plans: &[RowPlan],
    generator: &mut dyn Generator,
) -> Result<BTreeMap<ItemKey, JudgeRole>, PipelineError> {
    let settings = ctx.settings;
    let mut roles = BTreeMap::new();
    let mut pending = Vec::new();
    let mut replayed = 0u64;
    let mut calibrated = 0usize;
    for plan in plans {
        let Ok(body) = &plan.body else { continue };
        for (qa, item) in body.items.iter().enumerate() {
            let ItemPlan::Keep(q) = item else { continue };
            let key = ItemKey {
                position: plan.position,
                qa: qa as u32,
            };
            let Some(JournalOutcome::Done(g)) = ctx.results.get(&(key, Pass::Answer)) else {
                continue;
            };
            let assessed = ctx.decisions.assess(&body.family, q, g);
            let role = if !assessed.accepted {
                (settings.judge && assessed.needs_judge).then_some(JudgeRole::Rescue)
            } else if calibrated < settings.judge_calibrate {
                calibrated += 1;
                Some(JudgeRole::Calibration)
            } else {
                None
            };
            let Some(role) = role else { continue };
            roles.insert(key, role);
            if ctx.results.contains_key(&(key, Pass::Judge)) {
                replayed += 1;
                continue;
            }
            pending.push(GenRequest {
                key,
                pass: Pass::Judge,
                image: None,
                user_text: ctx.decisions.judge_prompt(
                    &q.question,
                    &q.references(),
                    &assessed.candidate,
                ),
                think: settings.think,
                max_new_tokens: settings.max_new_tokens,
            });
        }
    }
    ctx.progress.phase("judge", roles.len() as u64);
    for _ in 0..replayed {
        ctx.progress.advance(0, false, None);
    }
    ctx.replayed += replayed;
    let chunk = chunk_size(settings);
    let mut appended = 0u64;
    let none = HashMap::new();
    while !pending.is_empty() {
        let rest = pending.split_off(pending.len().min(chunk));
        let reqs = std::mem::replace(&mut pending, rest);
        run_requests(ctx, generator, reqs, Pass::Judge, &none, &mut appended)?;
    }
    let decisions = ctx.decisions;
    let short = JudgeShortfall::of(&roles, ctx.results, &|text| decisions.parse_verdict(text));
    if short.cut > 0 {
        tracing::warn!(
            "{} of {} judge outputs stopped at the token limit (--max-new-tokens {}) with no \
             CORRECT or WRONG on their last line and count as UNSURE (the item stays rejected; \
             in calibration, a disagreement){}; the judge shares the answers' limit: raise \
             --max-new-tokens for a run with the judge on",
            short.cut,
            roles.len(),
            settings.max_new_tokens,
            after_verdict(short.cut_after_verdict)
        );
    } else if short.cut_after_verdict > 0 {
        tracing::info!(
            "{} of {} judge outputs ran on to the token limit (--max-new-tokens {}) after their \
             verdict, which stands",
            short.cut_after_verdict,
            roles.len(),
            settings.max_new_tokens
        );
    }
    if let Some(first) = &short.first_failure {
        tracing::warn!(
            "{} of {} judge generations failed and count as UNSURE (the item stays rejected; in \
             calibration, a disagreement); the first: {first} (generations.jsonl has each)",
            short.failed,
            roles.len()
        );
    }
    Ok(roles)
}

/// The clause of the token-limit warning on the judge outputs that reached the limit after a
/// verdict (those keep it: contract §6 reads the verdict from the last non-empty line).
fn after_verdict(n: usize) -> String {
    match n {
        0 => String::new(),
        n => format!("; {n} more reached the limit after their verdict, which stands"),
    }
}

/// Judge generations that gave no verdict: stopped at the token limit (`finish_reason:
/// length`) with no verdict parsed from them, or failed (a prompt larger than the KV cache,
/// …). Both count as `UNSURE`. An output that reached the limit after printing its verdict
/// keeps that verdict (contract §6 parses the text, whatever stopped it) and is counted apart.
#[derive(Debug, PartialEq, Eq)]
struct JudgeShortfall {
    /// Stopped at the token limit and parsed as `UNSURE`.
    cut: usize,
    /// Stopped at the token limit, but parsed as `CORRECT` or `WRONG`.
    cut_after_verdict: usize,
    failed: usize,
    first_failure: Option<String>,
}

impl JudgeShortfall {
    /// Counts the judge outputs of `roles` in `results`, parsing each cut one with `parse`
    /// (the run's [`Decisions::parse_verdict`]).
    fn of(
        roles: &BTreeMap<ItemKey, JudgeRole>,
        results: &BTreeMap<(ItemKey, Pass), JournalOutcome>,
        parse: &dyn Fn(&str) -> Verdict,
    ) -> Self {
        let mut short = JudgeShortfall {
            cut: 0,
            cut_after_verdict: 0,
            failed: 0,
            first_failure: None,
        };
        for &key in roles.keys() {
            match results.get(&(key, Pass::Judge)) {
                Some(JournalOutcome::Done(g))
                    if g.finish == super::backend::FinishReason::Length =>
                {
                    if parse(&g.text) == Verdict::Unsure {
                        short.cut += 1
                    } else {
                        short.cut_after_verdict += 1
                    }
                }
                Some(JournalOutcome::Failed(m)) => {
                    short.failed += 1;
                    short.first_failure.get_or_insert_with(|| m.clone());
                }
                _ => {}
            }
        }
        short
    }
}

#[cfg(test)]
mod tests {
    use super::super::backend::{FinishReason, Generation};
    use super::*;

    fn done(finish: FinishReason) -> JournalOutcome {
        said("<think>\ncomparing the", finish)
    }

    fn said(text: &str, finish: FinishReason) -> JournalOutcome {
        JournalOutcome::Done(Generation {
            text: text.into(),
            token_ids: vec![1, 2, 3],
            prompt_tokens: 9,
            finish,
            prefilled_think: false,
        })
    }

    #[test]
    fn judge_outputs_cut_or_failed_are_counted_answer_passes_are_not() {
        let key = |position| ItemKey { position, qa: 0 };
        let roles = BTreeMap::from([
            (key(0), JudgeRole::Rescue),
            (key(1), JudgeRole::Calibration),
            (key(2), JudgeRole::Rescue),
        ]);
        let results = BTreeMap::from([
            ((key(0), Pass::Judge), done(FinishReason::Length)),
            ((key(1), Pass::Judge), done(FinishReason::Stop)),
            (
                (key(2), Pass::Judge),
                JournalOutcome::Failed("refused".into()),
            ),
            // An answer cut short is not a judge output, nor is an unjudged item's.
            ((key(1), Pass::Answer), done(FinishReason::Length)),
            ((key(3), Pass::Judge), done(FinishReason::Length)),
        ]);
        assert_eq!(
            JudgeShortfall::of(&roles, &results, &crate::judge::parse_verdict),
            JudgeShortfall {
                cut: 1,
                cut_after_verdict: 0,
                failed: 1,
                first_failure: Some("refused".into()),
            }
        );
    }

    /// Only an output cut before a verdict counts as UNSURE for the token-limit warning: one
    /// that printed `WRONG` (or `CORRECT`) on its last non-empty line and then ran on to the
    /// limit keeps that verdict (contract §6), as the write phase stores it (`wrong_answer`).
    #[test]
    fn judge_outputs_cut_after_their_verdict_are_not_counted_as_unsure() {
        let key = |position| ItemKey { position, qa: 0 };
        let cut = |text: &str| said(text, FinishReason::Length);
        let outputs = [
            // A verdict, then only blank lines up to the limit: WRONG stands.
            cut("<think>\nthe digits differ\n</think>\n\nWRONG\n\n\n"),
            // The same verdict over and over: CORRECT stands.
            cut("CORRECT\nCORRECT\nCORRECT"),
            // Cut inside its reasoning: no final answer.
            cut("<think>\nthe candidate reads ll.850 and the refer"),
            // A verdict, then more text: its last line holds none.
            cut("</think>\n\nWRONG\n\nThe candidate misreads the fir"),
            // Not cut: a plain UNSURE is no shortfall.
            said("</think>\nUNSURE", FinishReason::Stop),
        ];
        let roles: BTreeMap<_, _> = (0..outputs.len() as u64)
            .map(|p| (key(p), JudgeRole::Rescue))
            .collect();
        let results: BTreeMap<_, _> = outputs
            .into_iter()
            .enumerate()
            .map(|(p, o)| ((key(p as u64), Pass::Judge), o))
            .collect();
        assert_eq!(
            JudgeShortfall::of(&roles, &results, &crate::judge::parse_verdict),
            JudgeShortfall {
                cut: 2,
                cut_after_verdict: 2,
                failed: 0,
                first_failure: None,
            }
        );
        let clause = "; 2 more reached the limit after their verdict, which stands";
        assert_eq!(
            (after_verdict(2).as_str(), after_verdict(0)),
            (clause, String::new())
        );
    }
}
