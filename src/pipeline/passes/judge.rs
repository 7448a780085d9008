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

use std::collections::{BTreeMap, HashMap};

use sha2::{Digest, Sha256};

use super::{chunk_size, run_requests, PassContext};
use crate::pipeline::backend::{GenRequest, Generator, ItemKey, Pass, Verdict};
use crate::pipeline::plan::{ItemPlan, JudgeRole, RowPlan};
use crate::pipeline::{JournalOutcome, PipelineError};

/// What phase 2 decided: why each item was judged, and which took the verdict of an earlier
/// item with the same judge prompt.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// The role of every judged item.
    pub roles: BTreeMap<ItemKey, JudgeRole>,
    /// Judged items whose judge prompt an earlier item (in input order) had: their result is
    /// that item's (counted in the card as reused, not generated).
    pub reused: u64,
}

/// Phase 2: verify every answer; judge the rejects with an answer (when `--judge on`) and
/// the first `--judge-calibrate N` verifier accepts of the shard in input order, each distinct
/// judge prompt generated once (module doc). Returns the role of every judged item.
///
/// Merging shards: each shard calibrates its own first N accepts; the first N accepts of
/// the whole input are, per shard, a prefix of those, so the merge finds all of them.
pub(crate) fn judge_answers(
    ctx: &mut PassContext<'_>,
    plans: &[RowPlan],
    generator: &mut dyn Generator,
) -> Result<Judged, PipelineError> {
    let settings = ctx.settings;
    let mut roles = BTreeMap::new();
    let mut pending = Vec::new();
    let mut replayed = 0u64;
    let mut calibrated = 0usize;
    // The first item of each judge prompt (by its SHA-256, so memory does not grow with the
    // text), and every later item with its first.
    let mut first_of_prompt: HashMap<[u8; 32], ItemKey> = HashMap::new();
    let mut copies: Vec<(ItemKey, ItemKey)> = Vec::new();
    for plan in plans {
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
            let user_text =
                ctx.decisions
                    .judge_prompt(&q.question, &q.references(), &assessed.candidate);
            let prompt: [u8; 32] = Sha256::digest(user_text.as_bytes()).into();
            if let Some(&first) = first_of_prompt.get(&prompt) {
                copies.push((key, first));
                continue;
            }
            first_of_prompt.insert(prompt, key);
            if ctx.results.contains_key(&(key, Pass::Judge)) {
                replayed += 1;
                continue;
            }
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
        }
    }
    drop(first_of_prompt);
    ctx.progress
        .phase("judge", (roles.len() - copies.len()) as u64);
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
    // Every later item of a prompt takes its first item's result (which is there: journaled
    // by an earlier process, or just generated), also over a result of its own a shard's
    // journal holds: a merge then writes what the single run writes.
    for &(key, first) in &copies {
        if let Some(outcome) = ctx.results.get(&(first, Pass::Judge)).cloned() {
            ctx.results.insert((key, Pass::Judge), outcome);
        }
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
    Ok(Judged {
        roles,
        reused: copies.len() as u64,
    })
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

    #[test]
    fn judge_outputs_cut_or_failed_are_counted_answer_passes_are_not() {
        let key = |position| ItemKey::question(position, 0);
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
