//! `verify`'s check of every split entry against the run's input (issue 45 item 5): the entry
//! is found by its `clean_meta` (`source_file`, `row_index`, `cleaning.kept_from`), and its
//! question and reference (`org_answer` in the accepted splits, `answer` in the rejected one)
//! must be the input item's — or, for an item cleaning rewrote (multiple-choice
//! normalisation), the original its `cleaning.rewritten` note keeps must be.

use std::collections::HashMap;

use super::{Disagreement, FamilySplits, Problem};
use crate::record::split_meta::kept_from_of;
use crate::record::{InputRow, OutputRow, SplitKind};

/// The questions and references of an input, by (file name, row index): what `verify`
/// compares the splits with. Reading the input is the caller's (the dataset module's).
#[derive(Debug, Default)]
pub struct InputItems {
    rows: HashMap<(String, u64), Vec<(String, String)>>,
}

impl InputItems {
    /// Keep the `(question, reference)` of each item of `row` (the reference as a split
    /// stores it: the JSON array text of several).
    pub fn add(&mut self, row: &InputRow) {
        let name = std::path::Path::new(&row.source_file)
            .file_name()
            .map_or_else(
                || row.source_file.clone(),
                |n| n.to_string_lossy().into_owned(),
            );
        let items = row
            .qa
            .iter()
            .map(|q| (q.question.clone(), q.answer.clone()))
            .collect();
        self.rows.insert((name, row.row_index as u64), items);
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Check every entry of one family's splits (module doc).
    pub fn check_family(&self, splits: &FamilySplits<'_>) -> Vec<Disagreement> {
        let mut out = Vec::new();
        let [think, nothink, rejected] = SplitKind::ALL.map(|k| k.split_name(splits.family));
        let accepted = |e: &crate::record::AcceptedQa| (e.question.clone(), e.org_answer.clone());
        for (name, rows) in [(think, splits.think), (nothink, splits.nothink)] {
            for (r, row) in rows.iter().enumerate() {
                let entries = row.qa.iter().map(accepted).collect();
                self.check_row((&name, r), row, entries, "org_answer", &mut out);
            }
        }
        for (r, row) in splits.rejected.iter().enumerate() {
            let entries = row
                .qa
                .iter()
                .map(|e| (e.question.clone(), e.answer.clone()))
                .collect();
            self.check_row((&rejected, r), row, entries, "answer", &mut out);
        }
        out
    }

    /// Check the `(question, reference)` `entries` of split row `row` (split `name`, row `r`;
    /// `reference` names the reference field) against the input items its `clean_meta` names.
    fn check_row<Q>(
        &self,
        (name, r): (&str, usize),
        row: &OutputRow<Q>,
        entries: Vec<(String, String)>,
        reference: &str,
        out: &mut Vec<Disagreement>,
    ) {
        let meta: serde_json::Value = serde_json::from_str(&row.clean_meta).unwrap_or_default();
        let (Some(file), Some(index), Some(Ok(kept))) = (
            meta["source_file"].as_str(),
            meta["row_index"].as_u64(),
            kept_from_of(&row.clean_meta),
        ) else {
            return;
        };
        let mut flag = |qa: Option<usize>, detail: String| {
            out.push(Disagreement {
                split: name.to_string(),
                row: r,
                qa,
                problem: Problem::NotTheInput,
                detail,
            })
        };
        let Some(items) = self.rows.get(&(file.to_string(), index)) else {
            flag(
                None,
                format!("the input has no row {index} in a file {file}"),
            );
            return;
        };
        let rewritten = meta["cleaning"]["rewritten"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (q, ((question, answer), from)) in entries.into_iter().zip(kept).enumerate() {
            let Some((in_question, in_answer)) = items.get(from as usize) else {
                flag(Some(q), format!("{file} row {index} has no qa[{from}]"));
                continue;
            };
            // A rewritten item's stored fields are the rewrite: its note keeps the original.
            let note = rewritten
                .iter()
                .find(|n| n["qa_index"].as_u64() == Some(from));
            let (question, answer, what) = match note {
                Some(n) => (
                    n["original_question"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    n["original_answer"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    "clean_meta's rewrite note of",
                ),
                None => (question, answer, "field"),
            };
            for (field, stored, input) in [
                ("question", &question, in_question),
                (reference, &answer, in_answer),
            ] {
                if stored != input {
                    flag(
                        Some(q),
                        format!(
                            "{what} {field} is {stored:?}, the input's {file} row {index} qa[{from}] says {input:?}"
                        ),
                    );
                }
            }
        }
    }
}
