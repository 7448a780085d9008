//! The product [`Decisions`]: the cleaning passes of `clean`, the verifier registry of
//! `verify`, the judge prompt and parser of `judge` and the routing of `route`, adapted to
//! the pipeline's per-item calls.

use super::backend::{
    Assessed, CleanedItem, CleanedRow, Decisions, Generation, RouteInput, Routed, Verdict,
};
use crate::clean::{CleanPolicy, Cleaner, DropReason};
use crate::record::{InputRow, QaItem};
use crate::route::{self, Assessment};
use crate::verifiers::VerifierRegistry;

/// Cleaning policy plus verifier registry; everything else is fixed by contract §6–§7.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StandardDecisions {
    /// Which cleaning passes run (default: all, OrandCar task purity).
    pub policy: CleanPolicy,
    /// Family → verifier (default: `alnum` everywhere).
    pub verifiers: VerifierRegistry,
}

impl StandardDecisions {
    fn assessment(&self, family: &str, item: &QaItem, generation: &Generation) -> Assessment {
        let g = route::Generation {
            raw: generation.text.clone(),
            finish: generation.finish,
            prefilled_open: generation.prefilled_think,
            format: generation.answer_format,
        };
        Assessment::new(
            &g,
            &item.references(),
            &self.verifiers.for_family(Some(family)),
        )
    }
}

impl StandardDecisions {
    /// The `cleaning.jsonl` detail of `row`'s question `index` dropped for `reason`: where an
    /// `off_task` question differs from its family's task question; `None` otherwise.
    fn drop_detail(&self, row: &InputRow, index: usize, reason: &str) -> Option<String> {
        if reason != DropReason::OffTask.as_str() {
            return None;
        }
        crate::clean::off_task_detail(
            &self.policy,
            row.family.as_deref()?,
            &row.qa.get(index)?.question,
        )
    }
}

impl Decisions for StandardDecisions {
    fn clean(&self, row: &InputRow) -> CleanedRow {
        let mut cleaner = Cleaner::new(self.policy.clone());
        let n = row.qa.len();
        match cleaner.clean_row(row.clone()) {
            Some(cleaned) => {
                let mut items: Vec<Option<CleanedItem>> = vec![None; n];
                for (kept, from) in cleaned.row.qa.into_iter().zip(&cleaned.notes.kept_from) {
                    if let Some(slot) = items.get_mut(*from) {
                        *slot = Some(CleanedItem::Keep(kept));
                    }
                }
                for (index, reason) in &cleaned.notes.dropped {
                    if let Some(slot) = items.get_mut(*index) {
                        *slot = Some(CleanedItem::Drop {
                            reason: reason.as_str().to_string(),
                            detail: self.drop_detail(row, *index, reason.as_str()),
                        });
                    }
                }
                let meta = cleaner.clean_meta(&cleaned.notes);
                CleanedRow {
                    // A slot the cleaner left empty would be a cleaner bug: keep the item.
                    items: items
                        .into_iter()
                        .zip(&row.qa)
                        .map(|(c, q)| c.unwrap_or_else(|| CleanedItem::Keep(q.clone())))
                        .collect(),
                    meta,
                }
            }
            None => {
                // No item left: the cleaner counted the drops in its report; recompute the
                // per-item reasons by cleaning each item alone.
                let items = row
                    .qa
                    .iter()
                    .enumerate()
                    .map(|(index, q)| {
                        let mut single = row.clone();
                        single.qa = vec![q.clone()];
                        let mut c = Cleaner::new(self.policy.clone());
                        let _ = c.clean_row(single);
                        let reason = c
                            .report
                            .dropped
                            .keys()
                            .next()
                            .cloned()
                            .unwrap_or_else(|| "dropped".to_string());
                        let detail = self.drop_detail(row, index, &reason);
                        CleanedItem::Drop { reason, detail }
                    })
                    .collect();
                CleanedRow {
                    items,
                    meta: serde_json::json!({ "policy": self.policy }),
                }
            }
        }
    }

    fn assess(&self, family: &str, item: &QaItem, generation: &Generation) -> Assessed {
        let a = self.assessment(family, item, generation);
        Assessed {
            accepted: a.verification.accepted(),
            needs_judge: a.needs_judge(),
            candidate: a.judge_candidate().to_string(),
        }
    }

    fn judge_prompt(&self, question: &str, references: &[&str], candidate: &str) -> String {
        crate::judge::build_judge_prompt(
            question,
            &crate::judge::reference_text(references),
            candidate,
        )
    }

    fn parse_verdict(&self, judge_text: &str) -> Verdict {
        crate::judge::parse_verdict(judge_text)
    }

    fn route(&self, input: &RouteInput<'_>) -> Routed {
        let a = self.assessment(input.family, input.item, input.generation);
        match route::route(input.item, &a, input.judge, input.number_guard) {
            route::Routed::Accepted { think, nothink } => Routed::Accepted {
                think: (input.thinking && think.think.is_some()).then_some(think),
                nothink,
            },
            route::Routed::Rejected(r) => Routed::Rejected(r),
        }
    }
}
