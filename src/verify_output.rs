//! Re-checking an output folder (`verisample verify`): re-derives every decision of a
//! finished run from the stored splits alone (contract §7: "any accept/reject decision must be recomputable from the stored splits
//! plus the stored judge verdicts, with no model") and lists every disagreement.
//!
//! Per entry, with the family's verifier and the run's number-guard setting:
//! - accepted (`_RS_think`, `_RS_nothink`): the verifier is re-run on `vlm_answer` against
//!   `org_answer`, the stored verdict applied, and [`crate::route::decide`] must accept with
//!   the same `accepted_by` and with `answer` equal to the text it picks (the passing variant
//!   of the model's answer, or the whole answer for the judge) — so a reference copied into
//!   `answer` is caught;
//! - rejected: the same on `wrong_vlm` against `answer`; the decision must reject with the
//!   stored `reason` (with `--samples K > 1` each wrong sample is its own entry).
//!   `truncated` cannot be recomputed (the finish reason is not stored): it is taken as stored
//!   and counted in [`RecheckReport::taken_as_stored`];
//! - each row's `clean_meta` ([`crate::record::split_meta`]): `cleaning.kept_from` names one
//!   input `qa` item per entry, none that cleaning dropped, and one input item holds one
//!   question in every split; with K > 1 `sample_index` names one sample per entry;
//! - the stored verdict must be what the stored raw judge text parses to, and judge fields
//!   appear only where the judge decided;
//! - every `_RS_think` entry is in `_RS_nothink` (apart from `think`, which only `_RS_think`
//!   has); an `_RS_nothink` entry may lack its `_RS_think` twin, as an answer given without a
//!   reasoning trace is accepted into `_RS_nothink` only (a missing `_RS_think` row is caught
//!   by the row counts `run.json` records); no item is both accepted and rejected, and each
//!   row's `image_sha256` is the hash of its bytes.
//!
//! Reading the parquet splits belongs to the dataset module; this works on decoded rows.

use std::collections::BTreeMap;
use std::fmt::Write as _;

mod clean_meta;
pub mod generations;
pub mod input;

use clean_meta::check_clean_meta;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::judge::{parse_verdict, Verdict, NUMBER_GUARD_DEFAULT};
use crate::record::split_meta::{answer_format_of, kept_from_of};
use crate::verifiers::think::AnswerFormat;

/// Whether a split row's reference is a list, and where its answers are
/// ([`Checker::reading`]).
type Reading = (bool, AnswerFormat);
use crate::record::{AcceptedQa, OutputRow, RejectedQa, SplitKind};
use crate::route::{decide, Decision, RejectReason, ACCEPTED_BY_JUDGE};
use crate::verifiers::pytext::py_strip;
use crate::verifiers::{VerifierError, VerifierRegistry};

/// The run settings the decisions depend on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecheckSettings {
    /// Family → verifier.
    pub registry: VerifierRegistry,
    /// The number guard of contract §6 was on (default on).
    pub number_guard: bool,
    /// Reasoning was on (default on): each accepted item is in `_RS_nothink`, and in
    /// `_RS_think` too when its answer came with a reasoning trace; every `_RS_think` entry
    /// must have its `_RS_nothink` twin. With reasoning off a run writes no `_RS_think`, and a
    /// `_RS_think` row is itself a disagreement.
    #[serde(default = "thinking_default")]
    pub thinking: bool,
    /// Samples per question of the run (`--samples K`, 1 for greedy): with K > 1 every row's
    /// `clean_meta` must say so and name each item's sample ([`crate::record::split_meta`]).
    #[serde(default = "one")]
    pub samples: usize,
    /// The output records `cleaning.kept_from` per split row (a run of a version that records
    /// `stats.split_sha256` in `run.json`; earlier ones copied the input row's list into every
    /// split row): the `kept_from` checks, and those against the input and the model's outputs
    /// that find an entry by it, apply.
    #[serde(default)]
    pub kept_from_per_row: bool,
}

fn one() -> usize {
    1
}

fn thinking_default() -> bool {
    true
}

impl Default for RecheckSettings {
    /// The default registry, the number guard on ([`NUMBER_GUARD_DEFAULT`]), reasoning on.
    fn default() -> Self {
        RecheckSettings {
            registry: VerifierRegistry::default(),
            number_guard: NUMBER_GUARD_DEFAULT,
            thinking: true,
            samples: 1,
            kept_from_per_row: false,
        }
    }
}

impl RecheckSettings {
    /// Settings from CLI arguments: `--number-guard on|off` and `--verifier [FAMILY=]NAME`
    /// overrides (see [`VerifierRegistry::apply_override`]).
    ///
    /// # Errors
    /// [`VerifierError`] for an override that does not parse.
    pub fn from_args(
        number_guard: bool,
        verifier_overrides: &[String],
    ) -> Result<RecheckSettings, VerifierError> {
        let mut registry = VerifierRegistry::default();
        for spec in verifier_overrides {
            registry.apply_override(spec)?;
        }
        Ok(RecheckSettings {
            registry,
            number_guard,
            thinking: true,
            samples: 1,
            kept_from_per_row: false,
        })
    }
}

/// The three decoded splits of one family.
#[derive(Debug, Clone, Copy)]
pub struct FamilySplits<'a> {
    /// Family name (`OrandCar`).
    pub family: &'a str,
    /// `<Family>_RS_think` rows.
    pub think: &'a [OutputRow<AcceptedQa>],
    /// `<Family>_RS_nothink` rows.
    pub nothink: &'a [OutputRow<AcceptedQa>],
    /// `<Family>_rejected` rows.
    pub rejected: &'a [OutputRow<RejectedQa>],
}

/// What is wrong with a row or entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// `image_sha256` is not the SHA-256 of the image bytes.
    ImageHashMismatch,
    /// A row with no `qa` entries.
    EmptyRow,
    /// `clean_meta` is not a JSON object, or (a run with `--samples K > 1`) does not say K or
    /// name a valid sample for each entry.
    CleanMeta,
    /// The accepted `answer` is not the model text the decision picks (e.g. the reference).
    AnswerNotModelText,
    /// `accepted_by` differs from the recomputed one.
    WrongAcceptedBy,
    /// The recomputed decision puts the entry in the other split.
    WrongSplit,
    /// The stored rejection `reason` differs from the recomputed one.
    WrongReason,
    /// The stored verdict is not what the stored raw judge text parses to.
    VerdictMismatch,
    /// A verdict or reason that is not one of the known words.
    UnknownValue,
    /// Judge fields present where the judge did not decide, or a raw text without a verdict.
    JudgeFields,
    /// `think` present in `_RS_nothink`.
    ThinkField,
    /// An entry of `_RS_think` missing from `_RS_nothink`, or an `_RS_think` row of a run
    /// with reasoning off.
    ThinkNothinkMismatch,
    /// The same item (image, question, reference, model answer) accepted and rejected.
    AcceptedAndRejected,
    /// A field the model's text decides is not what the run's `generations.jsonl` gives for
    /// the entry ([`generations`]), or the entry names no generation there.
    NotTheModelOutput,
    /// The question or reference is not the input item's ([`input`]).
    NotTheInput,
}

/// One disagreement: where, what, and the details.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// The split name (`OrandCar_RS_think`).
    pub split: String,
    /// 0-based row index in the split.
    pub row: usize,
    /// 0-based index in the row's `qa`, `None` for a row-level problem.
    pub qa: Option<usize>,
    /// The kind of problem.
    pub problem: Problem,
    /// What was stored and what was expected.
    pub detail: String,
}

/// The result of `verify` for one family.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RecheckReport {
    /// The family.
    pub family: String,
    /// Rows checked per split name.
    pub rows: BTreeMap<String, usize>,
    /// Entries checked per split name.
    pub entries: BTreeMap<String, usize>,
    /// Rejected entries whose reason cannot be recomputed (`truncated`), taken as stored.
    pub taken_as_stored: usize,
    /// Every disagreement found, in split/row/qa order.
    pub disagreements: Vec<Disagreement>,
}

impl RecheckReport {
    /// No disagreement.
    pub fn is_clean(&self) -> bool {
        self.disagreements.is_empty()
    }

    /// The report as one JSON object (for `--json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Disagreement counts per problem.
    pub fn counts(&self) -> BTreeMap<Problem, usize> {
        let mut out = BTreeMap::new();
        for d in &self.disagreements {
            *out.entry(d.problem).or_default() += 1;
        }
        out
    }

    /// A human-readable summary and one line per disagreement. `other_problems` counts the
    /// disagreements found outside this report (row counts against `run.json`, printed
    /// before it): with any, a clean report does not say `OK`.
    pub fn to_human(&self, other_problems: usize) -> String {
        let mut s = String::new();
        for (split, n) in &self.entries {
            let _ = writeln!(
                s,
                "{split}: {} rows, {n} entries",
                self.rows.get(split).copied().unwrap_or(0)
            );
        }
        if self.taken_as_stored > 0 {
            let _ = writeln!(
                s,
                "{} truncated entries taken as stored (finish reason not stored)",
                self.taken_as_stored
            );
        }
        if self.is_clean() && other_problems == 0 {
            let _ = writeln!(s, "OK: every decision recomputes");
        } else if self.is_clean() {
            let _ = writeln!(
                s,
                "every decision recomputes, but there are {other_problems} MISMATCH line(s) above (counts or split file contents against run.json, answers of generations.jsonl in no split)"
            );
        } else {
            let _ = writeln!(s, "{} disagreements:", self.disagreements.len());
            for d in &self.disagreements {
                let qa = d.qa.map(|q| format!(" qa {q}")).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {} row {}{qa}: {:?}: {}",
                    d.split, d.row, d.problem, d.detail
                );
            }
        }
        s
    }
}

struct Checker<'s> {
    settings: &'s RecheckSettings,
    family: String,
    report: RecheckReport,
}

impl Checker<'_> {
    fn flag(
        &mut self,
        split: &str,
        row: usize,
        qa: Option<usize>,
        problem: Problem,
        detail: String,
    ) {
        self.report.disagreements.push(Disagreement {
            split: split.to_string(),
            row,
            qa,
            problem,
            detail,
        });
    }

    /// The questions of a split row against the input items its `cleaning.kept_from` names:
    /// one input item (source file, row, `qa` index) holds one question in every split row
    /// that names it (`seen`: the first split row naming each item, and its question).
    fn check_kept_questions<'q>(
        &mut self,
        (split, index): (&str, usize),
        meta: &str,
        questions: impl Iterator<Item = &'q str>,
        seen: &mut KeptQuestions,
    ) {
        if !self.settings.kept_from_per_row {
            return;
        }
        let m: serde_json::Value = serde_json::from_str(meta).unwrap_or_default();
        let (Some(Ok(kept)), Some(position)) = (kept_from_of(meta), m["position"].as_u64()) else {
            return;
        };
        for (q, (from, question)) in kept.into_iter().zip(questions).enumerate() {
            let first = seen
                .entry((position, from))
                .or_insert_with(|| (question.to_string(), split.to_string(), index));
            if first.0 != question {
                let detail = format!(
                    "clean_meta cleaning.kept_from names qa item {from} of the input element at \
                     position {position}, whose question is {:?} in {} row {}",
                    first.0, first.1, first.2
                );
                self.flag(split, index, Some(q), Problem::CleanMeta, detail);
            }
        }
    }

    fn check_row<Q>(&mut self, split: &str, index: usize, row: &OutputRow<Q>) {
        let kept_from = self.settings.kept_from_per_row;
        if let Err(m) = check_clean_meta(
            &row.clean_meta,
            self.settings.samples,
            row.qa.len(),
            kept_from,
        ) {
            self.flag(split, index, None, Problem::CleanMeta, m);
        }
        *self.report.rows.entry(split.to_string()).or_default() += 1;
        *self.report.entries.entry(split.to_string()).or_default() += row.qa.len();
        if row.qa.is_empty() {
            self.flag(
                split,
                index,
                None,
                Problem::EmptyRow,
                "no qa entries".into(),
            );
        }
        if let Some(bytes) = &row.image.bytes {
            let sha = hex::encode(Sha256::digest(bytes));
            if !sha.eq_ignore_ascii_case(&row.image_sha256) {
                self.flag(
                    split,
                    index,
                    None,
                    Problem::ImageHashMismatch,
                    format!("stored {:?}, bytes hash to {sha}", row.image_sha256),
                );
            }
        }
    }

    /// The stored verdict, checked against the raw judge text; unknown words count as UNSURE.
    fn stored_verdict(
        &mut self,
        at: (&str, usize, usize),
        verdict: Option<&str>,
        raw: Option<&str>,
    ) -> Option<Verdict> {
        let (split, row, qa) = at;
        let parsed = verdict.map(|w| {
            Verdict::parse_stored(w).unwrap_or_else(|| {
                self.flag(
                    split,
                    row,
                    Some(qa),
                    Problem::UnknownValue,
                    format!("judge_verdict {w:?}"),
                );
                Verdict::Unsure
            })
        });
        match (parsed, raw) {
            (Some(v), Some(raw)) if parse_verdict(raw) != v => {
                let again = parse_verdict(raw).as_str();
                self.flag(
                    split,
                    row,
                    Some(qa),
                    Problem::VerdictMismatch,
                    format!("stored {}, judge_raw parses to {again}", v.as_str()),
                );
            }
            (None, Some(_)) => self.flag(
                split,
                row,
                Some(qa),
                Problem::JudgeFields,
                "judge_raw without judge_verdict".into(),
            ),
            _ => {}
        }
        parsed
    }

    /// How a split row's entries are read, from its `clean_meta`: whether its reference is a
    /// list ([`answer_is_list`]) and where the model's answer is in `vlm_answer` / `wrong_vlm`
    /// ([`answer_format_of`]; an unknown format is flagged and read as the whole text).
    fn reading(&mut self, split: &str, row: usize, clean_meta: &str) -> Reading {
        let format = answer_format_of(clean_meta).unwrap_or_else(|msg| {
            self.flag(split, row, None, Problem::UnknownValue, msg);
            AnswerFormat::AfterThink
        });
        (answer_is_list(clean_meta), format)
    }

    /// `reading`: the row's [`Reading`]; the verifier checks the final answer in `vlm_answer`.
    fn check_accepted(
        &mut self,
        split: &str,
        row: usize,
        qa: usize,
        e: &AcceptedQa,
        reading: Reading,
    ) {
        let (list, format) = reading;
        let at = (split, row, qa);
        let verdict = self.stored_verdict(at, e.judge_verdict.as_deref(), e.judge_raw.as_deref());
        let verifier = self.settings.registry.for_family(Some(&self.family));
        let references = stored_references(&e.org_answer, list);
        let references: Vec<&str> = references.iter().map(String::as_str).collect();
        let final_answer = py_strip(format.answer_of(&e.vlm_answer));
        let v = verifier.verify_any(final_answer, &references);
        match decide(
            final_answer,
            false,
            &v,
            verdict,
            &references,
            self.settings.number_guard,
        ) {
            Decision::Accept {
                accepted_by,
                answer,
            } => {
                if accepted_by != e.accepted_by {
                    self.flag(
                        split,
                        row,
                        Some(qa),
                        Problem::WrongAcceptedBy,
                        format!("stored {:?}, recomputed {accepted_by:?}", e.accepted_by),
                    );
                }
                if answer != e.answer {
                    self.flag(
                        split,
                        row,
                        Some(qa),
                        Problem::AnswerNotModelText,
                        format!("answer {:?} is not the model text {answer:?} (vlm_answer {:?}, org_answer {:?})", e.answer, e.vlm_answer, e.org_answer),
                    );
                }
                if accepted_by != ACCEPTED_BY_JUDGE
                    && (e.judge_verdict.is_some() || e.judge_raw.is_some())
                {
                    self.flag(
                        split,
                        row,
                        Some(qa),
                        Problem::JudgeFields,
                        "judge fields on a verifier-accepted entry".into(),
                    );
                }
            }
            Decision::Reject(reason) => self.flag(
                split,
                row,
                Some(qa),
                Problem::WrongSplit,
                format!(
                    "recomputed: rejected ({}), not accepted by {:?}",
                    reason.as_str(),
                    e.accepted_by
                ),
            ),
        }
    }

    /// `reading`: as in [`Checker::check_accepted`].
    fn check_rejected(
        &mut self,
        split: &str,
        row: usize,
        qa: usize,
        e: &RejectedQa,
        reading: Reading,
    ) {
        let (list, format) = reading;
        let at = (split, row, qa);
        let verdict = self.stored_verdict(at, e.judge_verdict.as_deref(), e.judge_raw.as_deref());
        let stored = RejectReason::parse(&e.reason);
        if stored.is_none() {
            self.flag(
                split,
                row,
                Some(qa),
                Problem::UnknownValue,
                format!("reason {:?}", e.reason),
            );
        }
        let truncated = stored == Some(RejectReason::Truncated);
        if truncated {
            self.report.taken_as_stored += 1;
        }
        let answer = py_strip(format.answer_of(py_strip(&e.wrong_vlm)));
        let verifier = self.settings.registry.for_family(Some(&self.family));
        let references = stored_references(&e.answer, list);
        let references: Vec<&str> = references.iter().map(String::as_str).collect();
        let v = verifier.verify_any(answer, &references);
        match decide(
            answer,
            truncated,
            &v,
            verdict,
            &references,
            self.settings.number_guard,
        ) {
            Decision::Accept { accepted_by, .. } => self.flag(
                split,
                row,
                Some(qa),
                Problem::WrongSplit,
                format!(
                    "recomputed: accepted by {accepted_by}, stored as rejected ({})",
                    e.reason
                ),
            ),
            Decision::Reject(reason) => {
                if stored.is_some() && stored != Some(reason) {
                    self.flag(
                        split,
                        row,
                        Some(qa),
                        Problem::WrongReason,
                        format!("stored {:?}, recomputed {:?}", e.reason, reason.as_str()),
                    );
                }
                if !reason.is_judged() && (e.judge_verdict.is_some() || e.judge_raw.is_some()) {
                    self.flag(
                        split,
                        row,
                        Some(qa),
                        Problem::JudgeFields,
                        format!(
                            "judge fields on a {} entry the judge never sees",
                            reason.as_str()
                        ),
                    );
                }
            }
        }
    }
}

/// The identity of an accepted entry apart from `think` (for the think/nothink comparison).
fn accepted_key(sha: &str, e: &AcceptedQa) -> String {
    let mut e = e.clone();
    e.think = None;
    format!(
        "{sha}\u{0}{}",
        serde_json::to_string(&e).unwrap_or_default()
    )
}

/// The first split row naming each input item (stream position, `qa` index) in its
/// `cleaning.kept_from`: the item's question, that split and row.
type KeptQuestions = BTreeMap<(u64, u64), (String, String, usize)>;

/// The identity of an item across accepted and rejected splits.
fn item_key(
    sha: &str,
    question: &str,
    reference: &str,
    model: &str,
) -> (String, String, String, String) {
    (
        sha.to_ascii_lowercase(),
        question.to_string(),
        reference.to_string(),
        py_strip(model).to_string(),
    )
}

/// Whether a row's `clean_meta` (a JSON object) records that its reference answer was a list
/// of several (`"answer_list": true`, written by `run` for a list-valued answer column).
pub fn answer_is_list(clean_meta: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(clean_meta)
        .is_ok_and(|m| m.get("answer_list") == Some(&serde_json::Value::Bool(true)))
}

/// The references of a stored reference field: its JSON array of strings when `list` (the
/// form `run` stores several references in), else the field itself. A `list` field that is
/// not such an array is taken as one reference (its decision is then recomputed against it
/// and disagrees).
pub fn stored_references(stored: &str, list: bool) -> Vec<String> {
    list.then(|| serde_json::from_str::<Vec<String>>(stored).ok())
        .flatten()
        .unwrap_or_else(|| vec![stored.to_string()])
}

/// Checks the three splits of one family; see the module doc for what is checked.
pub fn recheck_family(splits: &FamilySplits<'_>, settings: &RecheckSettings) -> RecheckReport {
    let mut c = Checker {
        settings,
        family: splits.family.to_string(),
        report: RecheckReport {
            family: splits.family.to_string(),
            ..RecheckReport::default()
        },
    };
    let names = SplitKind::ALL.map(|k| k.split_name(splits.family));
    let [think_name, nothink_name, rejected_name] = &names;

    let mut by_key: BTreeMap<String, [Vec<(usize, usize)>; 2]> = BTreeMap::new();
    let mut accepted_items = BTreeMap::new();
    let mut kept_questions = KeptQuestions::new();
    for (side, (name, rows)) in [(think_name, splits.think), (nothink_name, splits.nothink)]
        .into_iter()
        .enumerate()
    {
        for (r, row) in rows.iter().enumerate() {
            c.check_row(name, r, row);
            let questions = row.qa.iter().map(|e| e.question.as_str());
            c.check_kept_questions((name, r), &row.clean_meta, questions, &mut kept_questions);
            let reading = c.reading(name, r, &row.clean_meta);
            for (q, e) in row.qa.iter().enumerate() {
                c.check_accepted(name, r, q, e, reading);
                if side == 0 && !settings.thinking {
                    c.flag(
                        name,
                        r,
                        Some(q),
                        Problem::ThinkNothinkMismatch,
                        "a think split from a run with reasoning off".into(),
                    );
                }
                if side == 1 && e.think.is_some() {
                    c.flag(
                        name,
                        r,
                        Some(q),
                        Problem::ThinkField,
                        "think present in the nothink split".into(),
                    );
                }
                by_key
                    .entry(accepted_key(&row.image_sha256, e))
                    .or_default()[side]
                    .push((r, q));
                accepted_items
                    .entry(item_key(
                        &row.image_sha256,
                        &e.question,
                        &e.org_answer,
                        &e.vlm_answer,
                    ))
                    .or_insert((name.clone(), r, q));
            }
        }
    }
    // An `_RS_think` entry without its `_RS_nothink` twin; not the other way round: an
    // answer without a reasoning trace is accepted into `_RS_nothink` only.
    for [t, n] in by_key.values().filter(|_| settings.thinking) {
        for &(r, q) in t.iter().rev().take(t.len().saturating_sub(n.len())) {
            c.flag(
                think_name,
                r,
                Some(q),
                Problem::ThinkNothinkMismatch,
                format!("no matching entry in {nothink_name}"),
            );
        }
    }
    for (r, row) in splits.rejected.iter().enumerate() {
        c.check_row(rejected_name, r, row);
        let questions = row.qa.iter().map(|e| e.question.as_str());
        c.check_kept_questions(
            (rejected_name, r),
            &row.clean_meta,
            questions,
            &mut kept_questions,
        );
        let reading = c.reading(rejected_name, r, &row.clean_meta);
        for (q, e) in row.qa.iter().enumerate() {
            c.check_rejected(rejected_name, r, q, e, reading);
            if let Some((name, ar, aq)) = accepted_items.get(&item_key(
                &row.image_sha256,
                &e.question,
                &e.answer,
                &e.wrong_vlm,
            )) {
                c.flag(
                    rejected_name,
                    r,
                    Some(q),
                    Problem::AcceptedAndRejected,
                    format!("also accepted in {name} row {ar} qa {aq}"),
                );
            }
        }
    }
    c.report
        .disagreements
        .sort_by(|a, b| (&a.split, a.row, a.qa).cmp(&(&b.split, b.row, b.qa)));
    c.report
}

/// Compare the counts `run.json` recorded per split (`stats.split_rows`, or with `unit`
/// `"items"` `stats.split_items`) with those found on disk, both keyed by split name: a split
/// whose rows were deleted or added after the run cannot be caught by re-deriving the
/// decisions of the rows that remain.
///
/// Returns one message per split whose counts differ (a split missing on either side counts
/// as 0 there), in split-name order; empty when they agree.
pub fn count_mismatches(
    unit: &str,
    recorded: &BTreeMap<String, u64>,
    found: &BTreeMap<String, u64>,
) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = recorded.keys().chain(found.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let want = recorded.get(name).copied().unwrap_or(0);
            let got = found.get(name).copied().unwrap_or(0);
            (want != got).then(|| format!("{name}: run.json records {want} {unit}, found {got}"))
        })
        .collect()
}

#[cfg(test)]
mod row_count_tests {
    use super::*;

    #[test]
    fn row_counts_table() {
        let m = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        type Counts<'a> = &'a [(&'a str, u64)];
        let cases: [(Counts, Counts, Vec<&str>); 4] = [
            (&[("A_rejected", 76)], &[("A_rejected", 76)], vec![]),
            (
                &[("A_rejected", 76)],
                &[("A_rejected", 10)],
                vec!["A_rejected: run.json records 76 rows, found 10"],
            ),
            (
                &[("A_RS_think", 2)],
                &[],
                vec!["A_RS_think: run.json records 2 rows, found 0"],
            ),
            (
                &[],
                &[("B_rejected", 1)],
                vec!["B_rejected: run.json records 0 rows, found 1"],
            ),
        ];
        for (recorded, found, want) in cases {
            assert_eq!(count_mismatches("rows", &m(recorded), &m(found)), want);
        }
    }
}
