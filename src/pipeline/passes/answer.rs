//! Phase 1: plan every element of the shard (checks, cleaning, `clean_meta`, duplicates) and
//! generate the answers the journal does not hold yet, in chunks.

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{chunk_size, finished_run, run_requests, PassContext, MAX_CHUNK_PIXEL_BYTES};
use crate::engine::ImageInput;
use crate::pipeline::backend::{
    CleanedItem, Decisions, GenRequest, Generator, ItemKey, Pass, RowSource,
};
use crate::pipeline::dedup::Dedup;
use crate::pipeline::input_check::{check_image, check_qa, FieldProblem};
use crate::pipeline::plan::{ItemPlan, Plans, RowOk, RowPlan};
use crate::pipeline::store::StoreError;
use crate::pipeline::{JournalOutcome, PipelineError};
use crate::record::{InputRow, QaItem, RowError};
use crate::settings::Settings;

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

/// Which rows of the input stream a run plans, in order, and how: `--limit` (this shard's
/// first N rows), `--shard`, and the duplicate marker over the whole input (the rows of other
/// shards are planned too, only to be seen by it). Run's answer pass and `bench` plan through
/// it, so that `bench` runs the requests `run` runs.
pub(crate) struct RowPlanner {
    dedup: Dedup,
    planned: usize,
}

/// What [`RowPlanner::select`] says of the next stream element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Select {
    /// `--limit` is reached: the stream ends here.
    Stop,
    /// Not planned (another shard's row, with the duplicate marker off).
    Skip,
    /// Planned; `mine`: a row of this shard (else planned only for the duplicate marker).
    Plan {
        /// Whether the row is this shard's.
        mine: bool,
    },
}

/// One row of this shard as planned: its decisions and, when readable, its image.
pub(crate) struct PlannedRow {
    /// Checks, cleaning and duplicate decisions of the row.
    pub plan: RowPlan,
    /// The image, decoded and hashed by the checks (`None` for a refused row).
    pub image: Option<ImageInput>,
}

impl PlannedRow {
    /// `bench`'s view of the row: its image and kept questions `(qa index, question)`, and
    /// what `run` reports for it in errors.jsonl (`file row R: field: message`, the row's or
    /// each invalid question's).
    pub(crate) fn questions(self) -> (Option<ImageInput>, Vec<(u32, String)>, Vec<String>) {
        let at = match self.plan.row {
            Some(r) => format!("{} row {r}", self.plan.file),
            None => self.plan.file.clone(),
        };
        let body = match self.plan.body {
            Ok(body) => body,
            Err(p) => {
                return (
                    None,
                    vec![],
                    vec![format!("{at}: {}: {}", p.field, p.message)],
                )
            }
        };
        let (mut kept, mut problems) = (Vec::new(), Vec::new());
        for (qa, item) in body.items.into_iter().enumerate() {
            match item {
                ItemPlan::Keep(q) => kept.push((qa as u32, q.question)),
                ItemPlan::Invalid(p) => problems.push(format!("{at}: {}: {}", p.field, p.message)),
                ItemPlan::Dropped { .. } | ItemPlan::Duplicate(_) => {}
            }
        }
        (self.image, kept, problems)
    }
}

impl RowPlanner {
    /// A planner for `settings` (its `--dedup`); the duplicate marker keeps its keys in a
    /// temporary file in `dir`.
    ///
    /// Errors: [`StoreError`] when that file cannot be created.
    pub fn new(settings: &Settings, dir: &std::path::Path) -> Result<Self, StoreError> {
        Ok(RowPlanner {
            dedup: Dedup::new(settings.dedup, dir)?,
            planned: 0,
        })
    }

    /// What to do with the stream element at `position`.
    pub fn select(&self, position: u64, settings: &Settings) -> Select {
        // `--limit N`: the stream ends after this shard's Nth element; the rows after it are
        // neither decoded nor seen by the duplicate marker (whose decisions over a prefix are
        // those over the whole input, as it keeps first occurrences).
        if settings.limit.is_some_and(|n| self.planned >= n) {
            return Select::Stop;
        }
        let mine = settings.shard.contains(position);
        if !mine && !settings.dedup {
            return Select::Skip;
        }
        Select::Plan { mine }
    }

    /// Plan the element at `position` that [`RowPlanner::select`] chose ([`plan_row`], then
    /// the duplicate marker); `Some` for a row of this shard.
    ///
    /// Errors: [`StoreError`] (the duplicate marker's keys).
    pub fn plan(
        &mut self,
        mine: bool,
        (position, element): (u64, Result<InputRow, RowError>),
        settings: &Settings,
        decisions: &dyn Decisions,
        generator: &dyn Generator,
    ) -> Result<Option<PlannedRow>, StoreError> {
        let (mut plan, image) = plan_row(position, element, settings, decisions, generator);
        self.dedup.mark(&mut plan)?;
        if !mine {
            return Ok(None);
        }
        self.planned += 1;
        Ok(Some(PlannedRow { plan, image }))
    }
}

/// Plan one stream element: checks (the image's size against `generator`'s vision memory
/// budget among them), cleaning, `clean_meta`. Returns the plan and, for a readable row, its
/// image for the answer requests: decoded by the check, hashed once (the hash is also the
/// plan's `image_sha256`).
fn plan_row(
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

/// Phase 1: plan every element of the shard and generate the missing answers; returns the
/// plans, in a temporary file in OUT. On a `--max-errors` abort, `errors.jsonl` is written (atomically) for the rows planned so far
/// before the error is returned, so the message's pointer to it holds — unless OUT holds a
/// finished run (`run.json`) that took every row, whose complete `errors.jsonl` is kept.
pub(crate) fn generate_answers(
    ctx: &mut PassContext<'_>,
    source: &dyn RowSource,
    generator: &mut dyn Generator,
) -> Result<Plans, PipelineError> {
    let mut plans = Plans::temporary(&ctx.settings.out)?;
    match generate_answers_into(ctx, source, generator, &mut plans) {
        Ok(()) => Ok(plans),
        Err(e @ PipelineError::TooManyErrors { .. }) => {
            // A finished output's errors.jsonl already lists every error of this input and
            // these settings (the fingerprint matched): a rerun that aborts leaves it whole —
            // unless that run left rows out with `--limit`, whose errors it does not list.
            if finished_run(&ctx.settings.out) != Some(None) {
                crate::pipeline::errors_jsonl::write_abort_errors(
                    &ctx.settings.out,
                    &mut plans,
                    ctx.results,
                    ctx.settings.sampling.samples as u32,
                )?;
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// The answer requests waiting for the engine: sent as a chunk once they number
/// [`chunk_size`] or their decoded images reach [`MAX_CHUNK_PIXEL_BYTES`].
struct AnswerQueue {
    requests: Vec<GenRequest>,
    /// Decoded pixel bytes of the images the queued requests hold.
    pixel_bytes: usize,
    /// (family, question) of each queued answer, for the live accept rate.
    verify_ctx: HashMap<ItemKey, (String, QaItem)>,
    chunk: usize,
    /// Journal records appended by this pass (the kill hook's counter).
    appended: u64,
}

impl AnswerQueue {
    fn new(settings: &Settings) -> Self {
        Self {
            requests: Vec::new(),
            pixel_bytes: 0,
            verify_ctx: HashMap::new(),
            chunk: chunk_size(settings),
            appended: 0,
        }
    }

    /// Send the queued requests when the chunk is full (`force`: whatever is queued).
    ///
    /// Errors: from [`run_requests`].
    fn flush(
        &mut self,
        ctx: &mut PassContext<'_>,
        generator: &mut dyn Generator,
        force: bool,
    ) -> Result<(), PipelineError> {
        if !force && self.requests.len() < self.chunk && self.pixel_bytes < MAX_CHUNK_PIXEL_BYTES {
            return Ok(());
        }
        self.pixel_bytes = 0;
        let requests = std::mem::take(&mut self.requests);
        run_requests(
            ctx,
            generator,
            requests,
            Pass::Answer,
            &self.verify_ctx,
            &mut self.appended,
        )?;
        self.verify_ctx.clear();
        Ok(())
    }
}

/// Rows of the shard the pass will take, when the source knows its length (after `--shard`
/// and `--limit`), for the progress bar.
fn rows_estimate(settings: &Settings, source: &dyn RowSource) -> Option<u64> {
    source.len_hint().map(|n| {
        let rows = settings.shard.share_of(n);
        settings.limit.map_or(rows, |l| rows.min(l as u64))
    })
}

/// For one readable row: count its invalid questions against `--max-errors`, then replay each
/// kept question's journaled answer or queue its request.
///
/// Errors: [`PipelineError::TooManyErrors`].
fn answer_row(
    ctx: &mut PassContext<'_>,
    queue: &mut AnswerQueue,
    position: u64,
    body: &RowOk,
    image: Option<&ImageInput>,
) -> Result<(), PipelineError> {
    let invalid = body
        .items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, ItemPlan::Invalid(_)))
        .map(|(qa, _)| (position, Some(qa as u32)));
    ctx.count_errors(invalid)?;
    let before = queue.requests.len();
    let sampling = ctx.settings.sampling;
    let keys = body.items.iter().enumerate().flat_map(|(qa, item)| {
        (0..sampling.samples as u32)
            .map(move |s| (item, ItemKey::question(position, qa as u32).with_sample(s)))
    });
    for (item, key) in keys {
        let ItemPlan::Keep(q) = item else { continue };
        forget_if_image_changed(ctx, key, &body.image_sha256)?;
        match ctx.results.result(key, Pass::Answer)? {
            Some(JournalOutcome::Done(g)) => {
                let ok = ctx.decisions.assess(&body.family, q, &g);
                ctx.progress.advance(0, false, Some(ok.accepted));
                ctx.replayed += 1;
            }
            Some(JournalOutcome::Failed(_)) => {
                ctx.progress.advance(0, false, None);
                ctx.replayed += 1;
                ctx.count_errors([(position, Some(key.qa))])?;
            }
            None => {
                queue
                    .verify_ctx
                    .insert(key, (body.family.clone(), q.clone()));
                queue.requests.push(GenRequest {
                    key,
                    pass: Pass::Answer,
                    image: image.cloned(),
                    user_text: q.question.clone(),
                    think: ctx.settings.think,
                    max_new_tokens: ctx.settings.max_new_tokens,
                    sampling: sampling.stream(position, key.qa, key.sample),
                    think_budget: ctx.settings.think_budget,
                });
            }
        }
    }
    if queue.requests.len() > before {
        queue.pixel_bytes += image.map_or(0, |i| i.content.pixel_bytes());
    }
    Ok(())
}

/// An answer journaled for another image (one given by path and changed since, which the
/// input's hashes do not cover) is answered again, and judged again.
///
/// Errors: [`StoreError`].
fn forget_if_image_changed(
    ctx: &mut PassContext<'_>,
    key: ItemKey,
    image_sha256: &str,
) -> Result<(), StoreError> {
    if ctx
        .results
        .answer_image(key)?
        .is_some_and(|sha| sha != image_sha256)
    {
        ctx.results.remove_result(key, Pass::Answer)?;
        ctx.results.remove_result(key, Pass::Judge)?;
    }
    Ok(())
}

/// Phase 1's loop over the input stream: plan each element (the rows of other shards only
/// for the duplicate marker), then [`answer_row`] for this shard's readable rows, sending a
/// chunk whenever it fills. `plans` holds every row planned so far, also on error.
fn generate_answers_into(
    ctx: &mut PassContext<'_>,
    source: &dyn RowSource,
    generator: &mut dyn Generator,
    plans: &mut Plans,
) -> Result<(), PipelineError> {
    let settings = ctx.settings;
    let rows_est = rows_estimate(settings, source);
    ctx.progress.phase("generate", rows_est.unwrap_or(0));
    let mut queue = AnswerQueue::new(settings);
    let mut items_seen = 0u64;
    let mut planner = RowPlanner::new(settings, &settings.out)?;
    let stream = source.rows().map_err(PipelineError::Source)?;
    for (position, element) in stream.enumerate() {
        let position = position as u64;
        let mine = match planner.select(position, settings) {
            Select::Stop => break,
            Select::Skip => continue,
            Select::Plan { mine } => mine,
        };
        if ctx.control.stopped() {
            return Err(PipelineError::Interrupted);
        }
        let row = (position, element);
        let Some(PlannedRow { plan, image }) =
            planner.plan(mine, row, settings, ctx.decisions, &*generator)?
        else {
            continue;
        };
        let answered = match &plan.body {
            Ok(body) => {
                items_seen += (body.items.len() * settings.sampling.samples) as u64;
                if let Some(rows) = rows_est {
                    // Items per row so far, times the rows: the bar's total grows with the input.
                    let per_row = items_seen as f64 / (plans.len() + 1) as f64;
                    let total = ((rows as f64) * per_row).round().max(items_seen as f64);
                    ctx.progress.set_total(total as u64);
                }
                answer_row(ctx, &mut queue, position, body, image.as_ref())
            }
            Err(_) => ctx.count_errors([(position, None)]),
        };
        plans.push(plan)?;
        answered?;
        queue.flush(ctx, generator, false)?;
    }
    queue.flush(ctx, generator, true)
}
