//! Phase 3 of a run: read the input again, route every question, write the splits in input
//! order, the pipeline's own files and the card statistics, and check the accounting. The
//! splits are staged and sealed first; only then, after `run.json` says `writing`
//! ([`WriteInput::mark_writing`]), are the outputs in OUT replaced.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::accounting::Ledger;
use super::backend::{
    Decisions, ItemKey, JudgeOutcome, Pass, RouteInput, Routed, RowSource, SplitRow, SplitSink,
    Verdict,
};
use super::control::{KillStage, RunControl};
use super::dataset_io::EarlierSplits;
use super::dedup::DUPLICATE;
use super::errors_jsonl::error_line;
use super::outputs::{CleaningLine, DuplicateOf, ErrorLine, GenerationLine, JsonlLog, PassRecord};
use super::plan::{ItemPlan, JudgeRole, Plans, RowPlan};
use super::sampled::QuestionSamples;
use super::store::{item_key_bytes, Store, Table};
use super::{JournalOutcome, PipelineError};
use crate::atomic::write_atomic;
use crate::out_files::{CHART_FILE, CLEANING_FILE, ERRORS_FILE, GENERATIONS_FILE};
use crate::record::split_meta::split_row_meta;
use crate::record::{AcceptedQa, InputRow, OutputRow, QaItem, RejectedQa, SplitKind};
use crate::report::card::{ExampleRow, JudgeCase, JudgeCases, EXAMPLES_PER_SPLIT};
use crate::report::{chart, Calibration, Progress, RowLimit, RunStats};
use crate::route::RejectReason;
use crate::settings::Settings;
use crate::shard::Shard;
use crate::verifiers::think::AnswerFormat;

/// Inputs of [`write_outputs`].
pub(crate) struct WriteInput<'a> {
    pub settings: &'a Settings,
    pub decisions: &'a dyn Decisions,
    pub control: &'a RunControl,
    pub source: &'a dyn RowSource,
    pub sink: &'a mut dyn SplitSink,
    /// Judged items that took an earlier item's verdict for the same judge prompt
    /// (phase 2's `Judged::reused`).
    pub judge_reused: u64,
    /// The journaled outcomes and the judge pass's roles.
    pub results: &'a Store,
    pub progress: &'a mut Progress,
    pub prompt_tokens: u64,
    pub replayed: u64,
    /// Called once every split is sealed and before the first output in OUT is replaced
    /// (the JSONL files, the chart, the splits, the card), with the run's statistics whose
    /// `split_files` name every shard file an earlier run or this one may leave in OUT: it
    /// writes the `run.json` that says the outputs are being replaced (status `writing`).
    pub mark_writing: &'a mut dyn FnMut(&RunStats) -> Result<(), PipelineError>,
    /// The model's files and their hex SHA-256 (the fingerprint's), for the card.
    pub model_files: &'a BTreeMap<String, String>,
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    *map.entry(key.to_string()).or_insert(0) += 1;
}

fn pass_record(outcome: &JournalOutcome) -> PassRecord {
    match outcome {
        JournalOutcome::Done(g) => PassRecord {
            generation: Some(g.clone()),
            error: None,
        },
        JournalOutcome::Failed(m) => PassRecord {
            generation: None,
            error: Some(m.clone()),
        },
    }
}

/// The entries of one split row being collected, each with its input `qa` index and sample.
struct SplitItems<T> {
    items: Vec<T>,
    /// The input `qa` index of each entry (`clean_meta.cleaning.kept_from`).
    kept_from: Vec<u32>,
    /// The sample of each entry (`clean_meta.sample_index` of a sampled run).
    samples: Vec<u32>,
    /// Whether a thinking budget ended each entry's reasoning (`clean_meta.think_budget_hit`).
    budget_hits: Vec<bool>,
}

impl<T> Default for SplitItems<T> {
    fn default() -> Self {
        SplitItems {
            items: Vec::new(),
            kept_from: Vec::new(),
            samples: Vec::new(),
            budget_hits: Vec::new(),
        }
    }
}

impl<T> SplitItems<T> {
    /// Add the entry of sample `key.sample` of input question `key.qa`; `budget_hit`: a
    /// thinking budget ended its reasoning.
    fn push(&mut self, entry: T, key: ItemKey, budget_hit: bool) {
        self.items.push(entry);
        self.kept_from.push(key.qa);
        self.samples.push(key.sample);
        self.budget_hits.push(budget_hit);
    }
}

/// Per-row collector of the entries of each split.
#[derive(Default)]
struct RowSplits {
    think: SplitItems<AcceptedQa>,
    nothink: SplitItems<AcceptedQa>,
    rejected: SplitItems<RejectedQa>,
    /// Where the model wrote its answers (its generations', one model per run).
    answer_format: AnswerFormat,
}

/// Everything the write phase accumulates.
struct Collected {
    stats: RunStats,
    ledger: Ledger,
    errors: JsonlLog,
    cleaning: JsonlLog,
    generations: JsonlLog,
    /// The answers of the current row a thinking budget cut (`Generation::think_budget_hit`).
    budget_hits: std::collections::HashSet<ItemKey>,
    rows_written: u64,
    /// The judged items the card shows.
    judge_cases: JudgeCases,
    /// Split name → its first rows, for the card.
    examples: BTreeMap<String, Vec<ExampleRow>>,
}

impl Collected {
    /// List an error in `errors.jsonl` and count it by field.
    fn error(&mut self, line: ErrorLine) {
        self.stats.errors += 1;
        bump(&mut self.stats.errors_by_field, &line.field);
        self.errors.push(&line);
    }
}

fn input_changed(position: u64, what: impl Into<String>) -> PipelineError {
    PipelineError::InputChanged {
        position,
        what: what.into(),
    }
}

/// Count and list a question dropped by cleaning (`detail`: what failed; `duplicate_of`: the
/// kept occurrence of a duplicate).
fn record_drop(
    c: &mut Collected,
    plan: &RowPlan,
    key: ItemKey,
    (reason, detail): (String, Option<String>),
    duplicate_of: Option<DuplicateOf>,
) {
    bump(&mut c.stats.cleaning_drops, &reason);
    c.cleaning.push(&CleaningLine {
        file: plan.file.clone(),
        row: plan.row.unwrap_or(0),
        position: plan.position,
        qa: key.qa,
        reason,
        detail,
        duplicate_of,
    });
    c.ledger.place((plan.position, Some(key.qa)), "cleaning");
}

/// The cleaned question of a kept item; an invalid, dropped or duplicate item is listed in
/// `errors.jsonl` or `cleaning.jsonl` and placed there instead (`None`).
fn kept_question<'p>(
    c: &mut Collected,
    plan: &RowPlan,
    key: ItemKey,
    item: &'p ItemPlan,
) -> Option<&'p QaItem> {
    match item {
        ItemPlan::Invalid(p) => {
            c.error(error_line(plan, Some(key.qa), &p.field, &p.message));
            c.ledger.place((plan.position, Some(key.qa)), "errors");
            None
        }
        ItemPlan::Dropped { reason, detail } => {
            record_drop(c, plan, key, (reason.clone(), detail.clone()), None);
            None
        }
        ItemPlan::Duplicate(kept) => {
            let reason = (DUPLICATE.to_string(), None);
            record_drop(c, plan, key, reason, Some(kept.clone()));
            None
        }
        ItemPlan::Keep(q) => Some(q),
    }
}

/// Why the judge looked at an item, and what its journaled pass holds.
type JudgePass = (JudgeRole, JournalOutcome);

/// The journaled answer of `key`, and its judge pass (why and what came back) when the judge
/// looked at it.
///
/// Errors: [`PipelineError::Missing`] for a pass the journal should hold and does not;
/// the store's.
fn journaled(
    w: &WriteInput<'_>,
    key: ItemKey,
) -> Result<(JournalOutcome, Option<JudgePass>), PipelineError> {
    let get = |pass| -> Result<JournalOutcome, PipelineError> {
        w.results
            .result(key, pass)?
            .ok_or(PipelineError::Missing { key, pass })
    };
    let answer = get(Pass::Answer)?;
    let role = w
        .results
        .get::<JudgeRole>(Table::JudgeRoles, &item_key_bytes(key))?;
    let judge = match role {
        Some(role) => Some((role, get(Pass::Judge)?)),
        None => None,
    };
    Ok((answer, judge))
}

/// The judge's verdict from its journaled pass; a judge request the engine refused counts as
/// an unparseable verdict: UNSURE.
fn verdict_of(decisions: &dyn Decisions, outcome: &JournalOutcome) -> JudgeOutcome {
    match outcome {
        JournalOutcome::Done(g) => JudgeOutcome {
            verdict: decisions.parse_verdict(&g.text),
            raw: g.text.clone(),
        },
        JournalOutcome::Failed(_) => JudgeOutcome {
            verdict: Verdict::Unsure,
            raw: String::new(),
        },
    }
}

/// Keep a judged item the card shows: one the judge overturned, one whose `CORRECT` the
/// number guard refused, a calibration item the judge did not call `CORRECT`.
fn show_judged(cases: &mut JudgeCases, judge: Option<&(JudgeRole, JudgeOutcome)>, routed: &Routed) {
    let Some((role, j)) = judge else {
        return;
    };
    let case = |question: &str, reference: &str, answer: &str| JudgeCase {
        question: question.to_string(),
        reference: reference.to_string(),
        answer: answer.to_string(),
        verdict: j.verdict.as_str().to_string(),
    };
    match (role, routed) {
        (JudgeRole::Rescue, Routed::Accepted { nothink: a, .. }) => JudgeCases::keep(
            &mut cases.overturned,
            case(&a.question, &a.org_answer, &a.vlm_answer),
        ),
        (JudgeRole::Rescue, Routed::Rejected(r))
            if r.reason == RejectReason::JudgeNumbersDisagree.as_str() =>
        {
            JudgeCases::keep(
                &mut cases.guard_refused,
                case(&r.question, &r.answer, &r.wrong_vlm),
            )
        }
        (JudgeRole::Calibration, Routed::Accepted { nothink: a, .. })
            if j.verdict != Verdict::Correct =>
        {
            JudgeCases::keep(
                &mut cases.calibration_disagreed,
                case(&a.question, &a.org_answer, &a.vlm_answer),
            )
        }
        _ => {}
    }
}

/// Count a judge verdict: calibration agreement, or a rescue verdict.
fn count_verdict(stats: &mut RunStats, role: JudgeRole, judge: &JudgeOutcome) {
    match role {
        JudgeRole::Calibration => {
            let cal = stats.calibration.get_or_insert(Calibration::default());
            cal.total += 1;
            cal.agreed += u64::from(judge.verdict == Verdict::Correct);
        }
        JudgeRole::Rescue => {
            stats.judge.judged += 1;
            bump(&mut stats.judge.verdicts, judge.verdict.as_str());
        }
    }
}

/// Count one routed sample of a question (`key`) and put an accepted one into the row's
/// `splits` (`rescue`: the judge decided) — unless `distinct` (`--distinct-samples on`) and
/// an earlier sample of the question had its (reasoning, answer) pair; a rejected one is
/// kept in `outcome` until the question's samples are all routed ([`place_question`]).
fn place_routed(
    c: &mut Collected,
    (key, distinct): (ItemKey, bool),
    routed: Routed,
    rescue: bool,
    splits: &mut RowSplits,
    outcome: &mut QuestionSamples,
) {
    match routed {
        Routed::Accepted { think, nothink } => {
            bump(&mut c.stats.accepted_by, &nothink.accepted_by);
            if rescue {
                c.stats.judge.overturns += 1;
            }
            let reasoning = think.as_ref().and_then(|t| t.think.as_deref());
            let first = outcome.first_of_pair(reasoning, &nothink.answer);
            outcome.accepted.push(key.sample);
            if distinct && !first {
                return;
            }
            let hit = c.budget_hits.contains(&key);
            if let Some(t) = think {
                splits.think.push(t, key, hit);
            }
            splits.nothink.push(nothink, key, hit);
        }
        Routed::Rejected(r) => {
            bump(&mut c.stats.reject_reasons, &r.reason);
            if r.reason == "judge_numbers_disagree" {
                c.stats.judge.number_guard_blocks += 1;
            }
            outcome.wrong.push((key.sample, r));
        }
    }
}

/// Place a question (`key`, sample 0) whose samples are routed: accepted when one of them
/// is, else rejected when one was wrong, else in `errors.jsonl` (every generation failed).
/// Each wrong sample is its own rejected entry, in sample order.
fn place_question(
    c: &mut Collected,
    (family, key): (&str, ItemKey),
    outcome: QuestionSamples,
    splits: &mut RowSplits,
) {
    if let Some(stats) = &mut c.stats.sampling {
        outcome.count(stats);
    }
    let samples = c.stats.sampling.as_ref().map_or(1, |s| s.samples);
    let in_family = c
        .stats
        .families
        .entry(family.to_string())
        .or_insert_with(|| crate::report::SamplingStats {
            samples,
            ..Default::default()
        });
    outcome.count(in_family);
    let destination = if !outcome.accepted.is_empty() {
        c.stats.accepted += 1;
        "accepted"
    } else if !outcome.wrong.is_empty() {
        c.stats.rejected += 1;
        "rejected"
    } else {
        "errors"
    };
    for (sample, entry) in outcome.wrong {
        let key = key.with_sample(sample);
        splits
            .rejected
            .push(entry, key, c.budget_hits.contains(&key));
    }
    c.ledger.place((key.position, Some(key.qa)), destination);
}

/// The image as a split stores it: the bytes, and the path as given unless it is absolute —
/// then only its file name, as `datasets` does when it embeds local files
/// (`Image.embed_storage`: `os.path.basename`), so that a published dataset does not carry
/// this machine's folders and its bytes do not depend on where the images lay.
fn published_image(image: &crate::record::ImageRef) -> crate::record::ImageRef {
    let path = image.path.as_ref().map(|p| {
        let path = std::path::Path::new(p);
        match path.file_name() {
            Some(name) if path.is_absolute() => name.to_string_lossy().into_owned(),
            _ => p.clone(),
        }
    });
    crate::record::ImageRef {
        bytes: image.bytes.clone(),
        path,
    }
}

/// Route the kept questions of one readable row into `splits`, each of its samples
/// ([`route_sample`]), then the question ([`place_question`]).
fn route_row(
    w: &WriteInput<'_>,
    c: &mut Collected,
    plan: &RowPlan,
    family: &str,
    items: &[ItemPlan],
    splits: &mut RowSplits,
) -> Result<(), PipelineError> {
    let samples = w.settings.sampling.samples;
    for (qa, item) in items.iter().enumerate() {
        let key = ItemKey::question(plan.position, qa as u32);
        let unit = (plan.position, Some(key.qa));
        c.ledger.expect(unit);
        let Some(q) = kept_question(c, plan, key, item) else {
            continue;
        };
        let mut outcome = QuestionSamples::default();
        let question = Question { plan, family, q };
        for s in 0..samples as u32 {
            route_sample(w, c, &question, key.with_sample(s), splits, &mut outcome)?;
        }
        place_question(c, (family, key), outcome, splits);
    }
    Ok(())
}

/// A kept question of a readable row: its row's plan, the row's family, the cleaned question.
struct Question<'a> {
    plan: &'a RowPlan,
    family: &'a str,
    q: &'a QaItem,
}

/// Route the answer of `key` (one sample of `question`): its `generations.jsonl` line, its
/// judge verdict, its decision; a failed generation is an `errors.jsonl` line.
///
/// Errors: [`PipelineError::Missing`] for a pass the journal should hold and does not.
fn route_sample(
    w: &WriteInput<'_>,
    c: &mut Collected,
    question: &Question<'_>,
    key: ItemKey,
    splits: &mut RowSplits,
    outcome: &mut QuestionSamples,
) -> Result<(), PipelineError> {
    let Question { plan, family, q } = *question;
    let (answer, judge_pass) = journaled(w, key)?;
    c.generations.push(&GenerationLine {
        file: plan.file.clone(),
        row: plan.row.unwrap_or(0),
        key,
        answer: pass_record(&answer),
        judge: judge_pass.as_ref().map(|(_, o)| pass_record(o)),
        judge_role: judge_pass.as_ref().map(|(r, _)| r.name().to_string()),
    });
    let generation = match &answer {
        JournalOutcome::Done(g) => g,
        JournalOutcome::Failed(m) => {
            c.error(ErrorLine {
                sample: (w.settings.sampling.samples > 1).then_some(key.sample),
                ..error_line(plan, Some(key.qa), "generation", m)
            });
            return Ok(());
        }
    };
    splits.answer_format = generation.answer_format;
    if let Some(b) = &mut c.stats.think_budget {
        b.answers += 1;
        if generation.think_budget_hit {
            b.hit += 1;
            c.budget_hits.insert(key);
        }
    }
    let judge = judge_pass.map(|(role, o)| (role, verdict_of(w.decisions, &o)));
    if let Some((role, j)) = &judge {
        count_verdict(&mut c.stats, *role, j);
    }
    let rescue = matches!(judge, Some((JudgeRole::Rescue, _)));
    let routed = w.decisions.route(&RouteInput {
        family,
        item: q,
        generation,
        judge: judge.as_ref().filter(|_| rescue).map(|(_, j)| j),
        number_guard: w.settings.number_guard,
        thinking: w.settings.think,
    });
    c.stats.answer_lengths.record(
        generation.token_ids.len() as u64,
        matches!(routed, Routed::Accepted { .. }),
    );
    show_judged(&mut c.judge_cases, judge.as_ref(), &routed);
    let distinct = w.settings.sampling.distinct;
    place_routed(c, (key, distinct), routed, rescue, splits, outcome);
    Ok(())
}

fn write_row_splits(
    w: &mut WriteInput<'_>,
    c: &mut Collected,
    row: &InputRow,
    family: &str,
    clean_meta: &str,
    image_sha256: &str,
    splits: RowSplits,
) -> Result<(), PipelineError> {
    // Each split row says which input question each item is, and in a sampled run which
    // sample ([`crate::record::split_meta`]).
    let samples = w.settings.sampling.samples;
    let budget = w.settings.think_budget;
    let image = published_image(&row.image);
    // The input's other columns travel with each of the row's split rows.
    fn make<Q>(
        items: SplitItems<Q>,
        (clean_meta, samples, budget, format): (&str, usize, Option<usize>, AnswerFormat),
        (image, image_sha256, carried): (&crate::record::ImageRef, &str, &InputRow),
    ) -> OutputRow<Q> {
        let sampling = (samples > 1).then_some((samples, items.samples.as_slice()));
        let budget = budget.map(|n| (n, items.budget_hits.as_slice()));
        OutputRow {
            image: image.clone(),
            clean_meta: split_row_meta(clean_meta, &items.kept_from, sampling, budget, format),
            qa: items.items,
            image_sha256: image_sha256.to_string(),
            carried: carried.carried.clone(),
        }
    }
    let meta = (clean_meta, samples, budget, splits.answer_format);
    let image = (&image, image_sha256, row);
    let rows = [
        (
            SplitKind::Think,
            splits.think.items.len(),
            SplitRow::Accepted(make(splits.think, meta, image)),
        ),
        (
            SplitKind::NoThink,
            splits.nothink.items.len(),
            SplitRow::Accepted(make(splits.nothink, meta, image)),
        ),
        (
            SplitKind::Rejected,
            splits.rejected.items.len(),
            SplitRow::Rejected(make(splits.rejected, meta, image)),
        ),
    ];
    for (kind, n, out) in rows {
        if n == 0 {
            continue;
        }
        let name = kind.split_name(family);
        let shown = c.examples.entry(name.clone()).or_default();
        if shown.len() < EXAMPLES_PER_SPLIT {
            shown.push(match &out {
                SplitRow::Accepted(r) => ExampleRow::Accepted(r.clone()),
                SplitRow::Rejected(r) => ExampleRow::Rejected(r.clone()),
            });
        }
        *c.stats.split_rows.entry(name.clone()).or_insert(0) += 1;
        *c.stats.split_items.entry(name.clone()).or_insert(0) += n as u64;
        w.sink
            .write(family, kind, out)
            .map_err(PipelineError::Sink)?;
        c.rows_written += 1;
        w.control.kill_point(KillStage::Write, c.rows_written);
    }
    Ok(())
}

/// The input rows of `shard` that `--limit` left out, when `more` (an element of the shard
/// follows the limit): those the footers count ([`RowSource::len_hint`]) past the `taken`
/// rows, at least 1 (an unreadable row group is one element of many rows, so the footer
/// count is an estimate under `--shard`); 0 when nothing of the shard follows the limit.
fn left_out_rows(source: &dyn RowSource, shard: Shard, more: bool, taken: u64) -> u64 {
    if !more {
        return 0;
    }
    source
        .len_hint()
        .map_or(1, |n| shard.share_of(n).saturating_sub(taken).max(1))
}

/// Phase 3, over phase 1's `plans` (read in order). Returns the run's statistics.
pub(crate) fn write_outputs(
    mut w: WriteInput<'_>,
    plans: &mut Plans,
) -> Result<RunStats, PipelineError> {
    let shard = w.settings.shard;
    w.progress.phase("write", plans.len() as u64);
    let out = &w.settings.out;
    let log = |name: &str| JsonlLog::create(&out.join(name));
    let mut c = Collected {
        stats: RunStats {
            sampling: w
                .settings
                .sampling
                .params
                .map(|_| crate::report::SamplingStats {
                    samples: w.settings.sampling.samples as u64,
                    ..Default::default()
                }),
            judge: crate::report::JudgeStats {
                reused: w.judge_reused,
                ..Default::default()
            },
            think_budget: w
                .settings
                .think_budget
                .map(|n| crate::report::ThinkBudgetStats {
                    budget: n as u64,
                    ..Default::default()
                }),
            ..RunStats::default()
        },
        ledger: Ledger::new(),
        errors: log(ERRORS_FILE)?,
        cleaning: log(CLEANING_FILE)?,
        generations: log(GENERATIONS_FILE)?,
        budget_hits: Default::default(),
        rows_written: 0,
        judge_cases: JudgeCases::default(),
        examples: BTreeMap::new(),
    };
    let planned = plans.len();
    let mut plans = plans.iter()?;
    let (mut taken, mut more) = (0usize, false);
    let stream = w.source.rows().map_err(PipelineError::Source)?;
    for (position, element) in stream.enumerate() {
        let position = position as u64;
        if !shard.contains(position) {
            continue;
        }
        // `--limit N`: as the generate phase, stop after this shard's Nth element; whether
        // another element of the shard follows decides if rows were left out.
        if w.settings.limit.is_some_and(|n| taken >= n) {
            more = true;
            break;
        }
        taken += 1;
        if w.control.stopped() {
            return Err(PipelineError::Interrupted);
        }
        let plan = plans
            .next()
            .ok_or_else(|| input_changed(position, "more rows than in the generate phase"))??;
        // Rows by the parquet footer: an unreadable row group counts its rows, a file whose
        // rows cannot be counted counts as no row (and as an unread file).
        match plan.input_rows() {
            Some(n) => c.stats.input_rows += n,
            None => c.stats.unread_files += 1,
        }
        c.stats.unread_rows += plan.rows.unwrap_or(0);
        let plan = &plan;
        if plan.position != position {
            return Err(input_changed(position, "row order differs"));
        }
        match (&plan.body, element) {
            (Err(p), _) => {
                let unit = (position, None);
                c.ledger.expect(unit);
                c.error(error_line(plan, None, &p.field, &p.message));
                c.ledger.place(unit, "errors");
            }
            (Ok(body), Ok(row)) => {
                let sha = hex::encode(Sha256::digest(row.image.bytes.as_deref().unwrap_or(&[])));
                if sha != body.image_sha256 || row.qa.len() != body.items.len() {
                    return Err(input_changed(position, "image bytes or questions differ"));
                }
                // The headline's questions: those of rows not refused whole (a row whose image
                // or family fails its check is one errors.jsonl line, its questions uncounted).
                c.stats.input_items += body.items.len() as u64;
                let mut splits = RowSplits::default();
                route_row(&w, &mut c, plan, &body.family, &body.items, &mut splits)?;
                write_row_splits(
                    &mut w,
                    &mut c,
                    &row,
                    &body.family,
                    &body.clean_meta,
                    &body.image_sha256,
                    splits,
                )?;
            }
            (Ok(_), Err(_)) => return Err(input_changed(position, "row no longer readable")),
        }
        c.ledger.settle();
        c.budget_hits.clear();
        w.progress.advance(0, false, None);
    }
    if taken < planned {
        return Err(input_changed(
            u64::MAX,
            "fewer rows than in the generate phase",
        ));
    }
    if let Some(n) = w.settings.limit {
        c.stats.limit = Some(RowLimit {
            limit: n as u64,
            left_out_rows: left_out_rows(w.source, shard, more, c.stats.input_rows),
        });
        // OUT's run.json is still the earlier run's (this run's is written after the splits).
        let took_more = match super::passes::finished_run(&w.settings.out) {
            Some(None) => true,
            Some(Some(m)) => m > n as u64,
            None => false,
        };
        if more && took_more {
            tracing::warn!(
                "{} holds a finished run that took more rows than --limit {n}: this run's \
                 splits, card and reports hold only the first {n} rows of the shard (nothing \
                 generated is lost: a run without the limit writes them all again, generating \
                 nothing anew)",
                w.settings.out.display()
            );
        }
    }
    c.ledger.check().map_err(PipelineError::Accounting)?;
    c.stats.throughput = w.progress.finish(w.prompt_tokens, w.replayed);

    // From the first replaced file to the final run.json, OUT mixes two runs' outputs should
    // the run fail or be killed: run.json says so first, naming every split file either run
    // may leave (read before anything is replaced), so that a rerun replaces them all.
    let sealed = w.sink.seal().map_err(PipelineError::Sink)?;
    let mut marked = c.stats.clone();
    marked.split_files = EarlierSplits::read(out).with_new(out, &sealed);
    (w.mark_writing)(&marked)?;
    for (n, log) in (1..).zip([c.errors, c.cleaning, c.generations]) {
        log.commit()?;
        w.control.kill_point(KillStage::Publish, n);
    }
    let chart_path = out.join(CHART_FILE);
    if c.stats.split_rows.is_empty() {
        // No dataset, so no figures (the card is left out by the sink alike); a chart of an
        // earlier run in this folder would describe other data.
        match std::fs::remove_file(&chart_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(PipelineError::Sink(
                    crate::dataset::DatasetError::io(&chart_path, e).into(),
                ))
            }
            _ => {}
        }
    } else {
        write_atomic(
            chart_path,
            chart::chart_svg(&c.stats, w.settings.judge).as_bytes(),
        )?;
    }
    let card = super::card::compose(
        w.settings,
        w.model_files,
        (&c.stats, &c.judge_cases, &c.examples),
    );
    super::card::write_examples(out, &card.images)?;
    w.sink.finish(&card).map_err(PipelineError::Sink)?;
    c.stats.split_files = w.sink.published();
    // The content of every split file as published, for `verify` to find an edit made after
    // the run (one that leaves every decision recomputable).
    let data = w.settings.out.join(crate::out_files::SPLITS_DIR);
    for name in c.stats.split_files.values().flatten() {
        let path = data.join(name);
        let sha = crate::settings::sha256_file(&path).map_err(|e| {
            PipelineError::Sink(format!("cannot read back {}: {e}", path.display()).into())
        })?;
        c.stats.split_sha256.insert(name.clone(), sha);
    }
    Ok(c.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_keeps_only_the_file_name_of_an_absolute_image_path() {
        let image = |path: &str| crate::record::ImageRef {
            bytes: Some(vec![1, 2]),
            path: Some(path.into()),
        };
        let published = published_image(&image("/home/me/scans/a_car_007000.jpg"));
        assert_eq!(published.path.as_deref(), Some("a_car_007000.jpg"));
        assert_eq!(published.bytes.as_deref(), Some(&[1u8, 2][..]));
        // A relative path, as `prepare` and the hub write it, is portable: kept as given.
        let relative = published_image(&image("val/a_car_007000.jpg"));
        assert_eq!(relative.path.as_deref(), Some("val/a_car_007000.jpg"));
    }
}
