//! Phase 2: verify every answer, judge the rejects (and the calibration accepts), and report
//! the judge outputs that gave no verdict.
//!
//! The judge is greedy and batch-invariant, so one judge prompt — one (question, references,
//! candidate answer) under the run's model and settings, all in the fingerprint — always gets
//! the same output. Each distinct prompt is generated once, for its first item in input order;
//! every later item with the same prompt takes that item's journaled result ([`Judged::reused`]).
//! The copy is derived again on every run from the first item's result rather than journaled
//! twice, so a resume that retries the first item (an outcome of the engine's resource limits)
//! cannot leave a stale copy behind, and a merge derives the same copies as the single run.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::{chunk_size, run_requests, PassContext};
use crate::pipeline::backend::{GenRequest, Generator, ItemKey, Pass, Verdict};
use crate::pipeline::plan::{ItemPlan, JudgeRole, Plans};
use crate::pipeline::store::{item_key_bytes, Store, StoreError, Table};
use crate::pipeline::{JournalOutcome, PipelineError};

/// What the judge pass leaves for the write phase besides the store's judge roles
/// (`Table::JudgeRoles`) and outcomes.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// Judged items whose judge prompt an earlier item (in input order) had: their result is
    /// that item's (counted in the card as reused, not generated).
    pub reused: u64,
}

/// Phase 2: verify every answer, give the rejects to the judge (and the first
/// `--judge-calibrate` accepts), journaling every verdict.
///
/// Two passes, neither holding more than a chunk of requests: the plans are read once to
/// decide each item's role and whether its prompt is new (roles, prompts, copies and the
/// prompts still to generate go to the store); then the pending prompts are sent in key
/// (input) order, a chunk at a time, and the copies take their first item's result.
///
/// Merging shards: each shard calibrates its own first N accepts; the first N accepts of
/// the whole input are, per shard, a prefix of those, so the merge finds all of them.
///
/// Errors: [`PipelineError`] from the engine, the journal or the store.
pub(crate) fn judge_answers(
    ctx: &mut PassContext<'_>,
    plans: &mut Plans,
    generator: &mut dyn Generator,
) -> Result<Judged, PipelineError> {
    let settings = ctx.settings;
    let store = ctx.results;
    let (mut roles, mut copies, mut replayed) = (0u64, 0u64, 0u64);
    let mut calibrated = 0usize;
    for plan in plans.iter()? {
        let plan = plan?;
        let Ok(body) = &plan.body else { continue };
        let samples = settings.sampling.samples as u32;
        let keys = body.items.iter().enumerate().flat_map(|(qa, item)| {
            (0..samples).map(move |s| {
                (
                    item,
                    ItemKey::question(plan.position, qa as u32).with_sample(s),
                )
            })
        });
        for (item, key) in keys {
            let ItemPlan::Keep(q) = item else { continue };
            let Some(JournalOutcome::Done(g)) = store.result(key, Pass::Answer)? else {
                continue;
            };
            let assessed = ctx.decisions.assess(&body.family, q, &g);
            let role = if !assessed.accepted {
                (settings.judge && assessed.needs_judge).then_some(JudgeRole::Rescue)
            } else if calibrated < settings.judge_calibrate {
                calibrated += 1;
                Some(JudgeRole::Calibration)
            } else {
                None
            };
            let Some(role) = role else { continue };
            roles += 1;
            let item_key = item_key_bytes(key);
            store.put(Table::JudgeRoles, &item_key, &role)?;
            let user_text =
                ctx.decisions
                    .judge_prompt(&q.question, &q.references(), &assessed.candidate);
            let prompt: [u8; 32] = Sha256::digest(user_text.as_bytes()).into();
            if let Some(first) = store.get::<ItemKey>(Table::JudgePrompts, &prompt)? {
                store.put(Table::JudgeCopies, &item_key, &first)?;
                copies += 1;
                continue;
            }
            store.put(Table::JudgePrompts, &prompt, &key)?;
            if store.has_result(key, Pass::Judge)? {
                replayed += 1;
                continue;
            }
            store.put(Table::JudgePending, &item_key, &user_text)?;
        }
    }
    ctx.progress.phase("judge", roles - copies);
    for _ in 0..replayed {
        ctx.progress.advance(0, false, None);
    }
    ctx.replayed += replayed;
    let chunk = chunk_size(settings);
    let mut appended = 0u64;
    let none = HashMap::new();
    let mut pending = Vec::new();
    store.for_each_item(Table::JudgePending, |key, user_text: String| {
        pending.push(GenRequest {
            key,
            pass: Pass::Judge,
            image: None,
            user_text,
            think: settings.think,
            max_new_tokens: settings.max_new_tokens,
            sampling: None,
            think_budget: None,
        });
        if pending.len() == chunk {
            let reqs = std::mem::take(&mut pending);
            run_requests(ctx, generator, reqs, Pass::Judge, &none, &mut appended)?;
        }
        Ok::<_, PipelineError>(())
    })?;
    run_requests(ctx, generator, pending, Pass::Judge, &none, &mut appended)?;
    // Every later item of a prompt takes its first item's result (which is there: journaled
    // by an earlier process, or just generated), also over a result of its own a shard's
    // journal holds: a merge then writes what the single run writes.
    store.for_each_item(Table::JudgeCopies, |key, first: ItemKey| {
        if let Some(outcome) = store.result(first, Pass::Judge)? {
            store.set_result(key, Pass::Judge, &outcome)?;
        }
        Ok::<_, PipelineError>(())
    })?;
    let decisions = ctx.decisions;
    let short = JudgeShortfall::of(store, &|text| decisions.parse_verdict(text))?;
    if short.cut > 0 {
        tracing::warn!(
            "{} of {} judge outputs stopped at the token limit (--max-new-tokens {}) with no \
             CORRECT or WRONG on their last line and count as UNSURE (the item stays rejected; \
             in calibration, a disagreement){}; the judge shares the answers' limit: raise \
             --max-new-tokens for a run with the judge on",
            short.cut,
            roles,
            settings.max_new_tokens,
            after_verdict(short.cut_after_verdict)
        );
    } else if short.cut_after_verdict > 0 {
        tracing::info!(
            "{} of {} judge outputs ran on to the token limit (--max-new-tokens {}) after their \
             verdict, which stands",
            short.cut_after_verdict,
            roles,
            settings.max_new_tokens
        );
    }
    if let Some(first) = &short.first_failure {
        tracing::warn!(
            "{} of {} judge generations failed and count as UNSURE (the item stays rejected; in \
             calibration, a disagreement); the first: {first} (generations.jsonl has each)",
            short.failed,
            roles
        );
    }
    Ok(Judged { reused: copies })
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
    /// Counts the judge outputs of the items `store` gives a judge role, parsing each cut one
    /// with `parse` (the run's [`Decisions::parse_verdict`]).
    ///
    /// Errors: [`StoreError`].
    fn of(store: &Store, parse: &dyn Fn(&str) -> Verdict) -> Result<Self, StoreError> {
        let mut short = JudgeShortfall {
            cut: 0,
            cut_after_verdict: 0,
            failed: 0,
            first_failure: None,
        };
        store.for_each_item(Table::JudgeRoles, |key, _: JudgeRole| {
            match store.result(key, Pass::Judge)? {
                Some(JournalOutcome::Done(g))
                    if g.finish == crate::pipeline::backend::FinishReason::Length =>
                {
                    if parse(&g.text) == Verdict::Unsure {
                        short.cut += 1
                    } else {
                        short.cut_after_verdict += 1
                    }
                }
                Some(JournalOutcome::Failed(m)) => {
                    short.failed += 1;
                    short.first_failure.get_or_insert(m);
                }
                _ => {}
            }
            Ok::<_, StoreError>(())
        })?;
        Ok(short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::backend::{FinishReason, Generation};

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
            think_budget_hit: false,
            answer_format: Default::default(),
        })
    }

    /// A store holding `roles` and `results`, in a temporary folder kept as long as it.
    fn store_of(
        roles: &[(ItemKey, JudgeRole)],
        results: Vec<((ItemKey, Pass), JournalOutcome)>,
    ) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::temporary(dir.path()).unwrap();
        for (key, role) in roles {
            store
                .put(Table::JudgeRoles, &item_key_bytes(*key), role)
                .unwrap();
        }
        for ((key, pass), outcome) in results {
            store.set_result(key, pass, &outcome).unwrap();
        }
        (dir, store)
    }

    #[test]
    fn judge_outputs_cut_or_failed_are_counted_answer_passes_are_not() {
        let key = |position| ItemKey::question(position, 0);
        let roles = [
            (key(0), JudgeRole::Rescue),
            (key(1), JudgeRole::Calibration),
            (key(2), JudgeRole::Rescue),
        ];
        let results = vec![
            ((key(0), Pass::Judge), done(FinishReason::Length)),
            ((key(1), Pass::Judge), done(FinishReason::Stop)),
            (
                (key(2), Pass::Judge),
                JournalOutcome::Failed("refused".into()),
            ),
            // An answer cut short is not a judge output, nor is an unjudged item's.
            ((key(1), Pass::Answer), done(FinishReason::Length)),
            ((key(3), Pass::Judge), done(FinishReason::Length)),
        ];
        let (_dir, store) = store_of(&roles, results);
        assert_eq!(
            JudgeShortfall::of(&store, &crate::judge::parse_verdict).unwrap(),
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
        let key = |position| ItemKey::question(position, 0);
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
        let roles: Vec<_> = (0..outputs.len() as u64)
            .map(|p| (key(p), JudgeRole::Rescue))
            .collect();
        let results: Vec<_> = outputs
            .into_iter()
            .enumerate()
            .map(|(p, o)| ((key(p as u64), Pass::Judge), o))
            .collect();
        let (_dir, store) = store_of(&roles, results);
        assert_eq!(
            JudgeShortfall::of(&store, &crate::judge::parse_verdict).unwrap(),
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
