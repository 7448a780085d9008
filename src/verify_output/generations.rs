//! `verify`'s check of every split entry against the model's own output as the run recorded
//! it in `generations.jsonl` (issue 45 item 5): each entry is found by its `clean_meta`
//! (`position`, `cleaning.kept_from`, `sample_index`), its generation and judge output are
//! routed again with the entry's own question and reference, and every field the model's text
//! decides — `answer`, `vlm_answer`, `think`, `accepted_by`, `wrong_vlm`, `reason` (`truncated`
//! included: the finish reason is in the line), the judge's verdict and raw text — must be
//! what that gives. A successful answer that reached no split (a row dropped) is named too.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::{answer_is_list, Disagreement, FamilySplits, Problem, RecheckSettings};
use crate::judge::JudgeOutcome;
use crate::record::split_meta::{kept_from_of, SAMPLE_INDEX_KEY, THINK_BUDGET_HIT_KEY};
use crate::record::{AcceptedQa, OutputRow, QaItem, RejectedQa};
use crate::route::{route, Assessment, FinishReason, Generation, Routed};
use crate::verifiers::think::AnswerFormat;

/// (stream position, input `qa` index, sample) of an item: the key of a generation line.
type Key = (u64, u64, u64);

/// One line of `generations.jsonl`, as `verify` reads it.
#[derive(Debug)]
struct Line {
    /// Input file and row, to name a line.
    file: String,
    row: u64,
    /// The answer generation; `None` when it failed (its item is in `errors.jsonl`).
    answer: Option<Generation>,
    /// A thinking budget ended the answer's reasoning (`think_budget_hit`).
    budget_hit: bool,
    /// The judge's outcome when it judged a verifier reject (`judge_role` `rescue`); a failed
    /// judge generation is an empty `UNSURE`, as the write phase reads it.
    rescue: Option<JudgeOutcome>,
}

/// The model outputs of a run (`OUT/generations.jsonl`), and which of them the splits hold.
#[derive(Debug, Default)]
pub struct RunGenerations {
    lines: HashMap<Key, Line>,
    placed: BTreeSet<Key>,
}

/// `text` cut to 80 characters for a message.
fn short(text: &str) -> String {
    if text.chars().count() <= 80 {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(80).collect();
        format!("{head:?}…")
    }
}

impl RunGenerations {
    /// Read `path` (a run's `generations.jsonl`).
    ///
    /// Errors: the file cannot be read, or a line is not a generation line (its number said).
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut lines = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let bad = |what: &str| format!("{} line {}: {what}", path.display(), n + 1);
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
            let num = |k: &str| v[k].as_u64();
            let key = (
                num("position").ok_or_else(|| bad("no position"))?,
                num("qa").ok_or_else(|| bad("no qa"))?,
                num("sample").unwrap_or(0),
            );
            let generation = |p: &serde_json::Value| -> Option<Generation> {
                Some(Generation {
                    raw: p["text"].as_str()?.to_string(),
                    finish: serde_json::from_value::<FinishReason>(p["finish"].clone()).ok()?,
                    prefilled_open: p["prefilled_think"].as_bool().unwrap_or(false),
                    format: match p.get("answer_format") {
                        Some(f) => serde_json::from_value(f.clone()).ok()?,
                        None => AnswerFormat::AfterThink,
                    },
                })
            };
            let rescue = (v["judge_role"] == "rescue").then(|| match generation(&v["judge"]) {
                Some(g) => JudgeOutcome::from_raw(g.raw),
                None => JudgeOutcome::from_raw(""),
            });
            lines.insert(
                key,
                Line {
                    file: v["file"].as_str().unwrap_or_default().to_string(),
                    row: num("row").unwrap_or(0),
                    answer: generation(&v["answer"]),
                    budget_hit: v["answer"]["think_budget_hit"].as_bool().unwrap_or(false),
                    rescue,
                },
            );
        }
        Ok(Self {
            lines,
            placed: BTreeSet::new(),
        })
    }

    /// Check every entry of one family's splits against its generation line (module doc).
    pub fn check_family(
        &mut self,
        splits: &FamilySplits<'_>,
        settings: &RecheckSettings,
    ) -> Vec<Disagreement> {
        let names = crate::record::SplitKind::ALL.map(|k| k.split_name(splits.family));
        let mut out = Vec::new();
        let mut placed = Vec::new();
        for (side, rows) in [splits.think, splits.nothink].into_iter().enumerate() {
            for (r, row) in rows.iter().enumerate() {
                for (q, key, line) in self.entries(row, (&names[side], r), &mut out) {
                    let flag = |detail: String| Disagreement {
                        split: names[side].clone(),
                        row: r,
                        qa: Some(q),
                        problem: Problem::NotTheModelOutput,
                        detail,
                    };
                    let derived = derive(
                        splits.family,
                        row,
                        &row.qa[q].org_answer,
                        &row.qa[q].question,
                        line,
                        settings,
                    );
                    match derived {
                        Routed::Accepted { think, nothink } => {
                            let want = if side == 0 { think } else { nothink };
                            for d in accepted_differences(&row.qa[q], &want) {
                                out.push(flag(d));
                            }
                        }
                        Routed::Rejected(r) => out.push(flag(format!(
                            "generations.jsonl's answer at position {} qa {} sample {} is rejected ({}) when routed again",
                            key.0, key.1, key.2, r.reason
                        ))),
                    }
                    if side == 1 {
                        placed.push(key);
                    }
                }
            }
        }
        for (r, row) in splits.rejected.iter().enumerate() {
            for (q, key, line) in self.entries(row, (&names[2], r), &mut out) {
                let e = &row.qa[q];
                let flag = |detail: String| Disagreement {
                    split: names[2].clone(),
                    row: r,
                    qa: Some(q),
                    problem: Problem::NotTheModelOutput,
                    detail,
                };
                match derive(splits.family, row, &e.answer, &e.question, line, settings) {
                    Routed::Rejected(want) => {
                        for d in rejected_differences(e, &want) {
                            out.push(flag(d));
                        }
                    }
                    Routed::Accepted { .. } => out.push(flag(format!(
                        "generations.jsonl's answer at position {} qa {} sample {} is accepted when routed again",
                        key.0, key.1, key.2
                    ))),
                }
                placed.push(key);
            }
        }
        self.placed.extend(placed);
        out
    }

    /// The entries of split row `row` (split `name`, row `r`) with their key and generation
    /// line; an entry that names no line (or a failed one) is a disagreement in `out`. A row
    /// whose `clean_meta` names no input items (an output of a version before
    /// `cleaning.kept_from`) is skipped.
    fn entries<'l, Q>(
        &'l self,
        row: &OutputRow<Q>,
        (name, r): (&str, usize),
        out: &mut Vec<Disagreement>,
    ) -> Vec<(usize, Key, &'l Line)> {
        let meta: serde_json::Value = serde_json::from_str(&row.clean_meta).unwrap_or_default();
        let (Some(position), Some(Ok(kept))) =
            (meta["position"].as_u64(), kept_from_of(&row.clean_meta))
        else {
            return Vec::new();
        };
        let samples: Vec<u64> = meta[SAMPLE_INDEX_KEY]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_u64().unwrap_or(0)).collect())
            .unwrap_or_default();
        let hits = meta[THINK_BUDGET_HIT_KEY].as_array();
        let mut found = Vec::new();
        for (q, from) in kept.into_iter().enumerate().take(row.qa.len()) {
            let key = (position, from, samples.get(q).copied().unwrap_or(0));
            match self.lines.get(&key) {
                Some(line) if line.answer.is_some() => {
                    // clean_meta's `think_budget_hit` is the line's, entry by entry.
                    let said = hits.map(|h| h.get(q).and_then(serde_json::Value::as_bool));
                    if said.unwrap_or(Some(false)) != Some(line.budget_hit) {
                        let said = match said {
                            None => "nothing".to_string(),
                            Some(None) => "no flag for this entry".to_string(),
                            Some(Some(b)) => b.to_string(),
                        };
                        out.push(Disagreement {
                            split: name.to_string(),
                            row: r,
                            qa: Some(q),
                            problem: Problem::NotTheModelOutput,
                            detail: format!(
                                "clean_meta think_budget_hit says {said} but generations.jsonl's \
                                 answer at position {} qa {} sample {} says {}",
                                key.0, key.1, key.2, line.budget_hit
                            ),
                        });
                    }
                    found.push((q, key, line));
                }
                other => out.push(Disagreement {
                    split: name.to_string(),
                    row: r,
                    qa: Some(q),
                    problem: Problem::NotTheModelOutput,
                    detail: format!(
                        "generations.jsonl has {} for position {} qa {} sample {}",
                        if other.is_some() {
                            "a failed generation"
                        } else {
                            "no line"
                        },
                        key.0,
                        key.1,
                        key.2
                    ),
                }),
            }
        }
        found
    }

    /// Every successful answer of `generations.jsonl` that no split holds (checked families
    /// only: call after [`RunGenerations::check_family`] for each), as messages naming its
    /// input row. With `--distinct-samples on` an accepted repeat is left out by design, so
    /// `distinct` skips the check.
    pub fn unplaced(&self, distinct: bool) -> Vec<String> {
        if distinct {
            return Vec::new();
        }
        let mut missing: Vec<(&Key, &Line)> = self
            .lines
            .iter()
            .filter(|(k, l)| l.answer.is_some() && !self.placed.contains(k))
            .collect();
        missing.sort_by_key(|(k, _)| **k);
        missing
            .into_iter()
            .map(|(k, l)| {
                format!(
                    "generations.jsonl: {} row {} (position {} qa {} sample {}): its answer is in no split",
                    l.file, l.row, k.0, k.1, k.2
                )
            })
            .collect()
    }
}

/// Route `line` again as the write phase did, for the entry of `row` whose question is
/// `question` and whose stored reference is `reference` (a JSON array of several when the
/// row's `clean_meta` says `answer_list`).
fn derive<Q>(
    family: &str,
    row: &OutputRow<Q>,
    reference: &str,
    question: &str,
    line: &Line,
    settings: &RecheckSettings,
) -> Routed {
    let answer_list = answer_is_list(&row.clean_meta)
        .then(|| serde_json::from_str::<Vec<String>>(reference).ok())
        .flatten();
    let item = QaItem {
        question: question.to_string(),
        answer: reference.to_string(),
        answer_list,
        ..QaItem::default()
    };
    let generation = line
        .answer
        .as_ref()
        .expect("entries keep successful answers only");
    let verifier = settings.registry.for_family(Some(family));
    let assessment = Assessment::new(generation, &item.references(), &verifier);
    route(
        &item,
        &assessment,
        line.rescue.as_ref(),
        settings.number_guard,
    )
}

/// The fields of a stored accepted entry that differ from `want`, each said in words.
fn accepted_differences(stored: &AcceptedQa, want: &AcceptedQa) -> Vec<String> {
    differences([
        ("answer", Some(&stored.answer), Some(&want.answer)),
        (
            "vlm_answer",
            Some(&stored.vlm_answer),
            Some(&want.vlm_answer),
        ),
        ("think", stored.think.as_ref(), want.think.as_ref()),
        (
            "accepted_by",
            Some(&stored.accepted_by),
            Some(&want.accepted_by),
        ),
        (
            "judge_verdict",
            stored.judge_verdict.as_ref(),
            want.judge_verdict.as_ref(),
        ),
        (
            "judge_raw",
            stored.judge_raw.as_ref(),
            want.judge_raw.as_ref(),
        ),
    ])
}

/// The fields of a stored rejected entry that differ from `want`, each said in words.
fn rejected_differences(stored: &RejectedQa, want: &RejectedQa) -> Vec<String> {
    differences([
        ("wrong_vlm", Some(&stored.wrong_vlm), Some(&want.wrong_vlm)),
        ("reason", Some(&stored.reason), Some(&want.reason)),
        (
            "judge_verdict",
            stored.judge_verdict.as_ref(),
            want.judge_verdict.as_ref(),
        ),
        (
            "judge_raw",
            stored.judge_raw.as_ref(),
            want.judge_raw.as_ref(),
        ),
    ])
}

/// A message for each `(field, stored, derived)` whose values differ (`None`: null).
fn differences<const N: usize>(
    fields: [(&str, Option<&String>, Option<&String>); N],
) -> Vec<String> {
    let shown = |v: Option<&String>| v.map_or_else(|| "null".to_string(), |t| short(t));
    fields
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(field, a, b)| {
            format!(
                "field {field} is {}, generations.jsonl gives {}",
                shown(a),
                shown(b)
            )
        })
        .collect()
}
