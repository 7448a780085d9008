//! `verify`'s check of every split entry against the run's input (issue 45 item 5): the entry
//! is found by its `clean_meta` (`position`, `cleaning.kept_from`), and its
//! question and reference (`org_answer` in the accepted splits, `answer` in the rejected one)
//! must be the input item's — or, for an item cleaning rewrote (multiple-choice
//! normalisation), the original its `cleaning.rewritten` note keeps must be. The input's
//! columns a split row carries (`dataset::carry`) must hold the input row's values, column by
//! column (the caller reads the input carrying the splits' columns, converted to their types).

use std::collections::{HashMap, HashSet};

use arrow::array::{Array, RecordBatch};

use sha2::{Digest, Sha256};

use super::{Disagreement, FamilySplits, Problem};
use crate::record::split_meta::kept_from_of;
use crate::record::{InputRow, OutputRow, SplitKind};

/// The questions and references of an input by stream position (the `position` a run gives
/// each element of its input in reader order, recorded in `clean_meta`): what `verify`
/// compares the splits with. Reading the input is the caller's (the dataset module's).
#[derive(Debug, Default)]
pub struct InputItems {
    rows: HashMap<u64, InputElement>,
    /// Positions whose element cannot be read now (an image given by path that moved, …):
    /// their split rows are not checked.
    unreadable: HashSet<u64>,
}

/// What `verify` keeps of one input element: its items' `(question, reference)`, the hex
/// SHA-256 of its image bytes and its carried columns' values, when read.
#[derive(Debug)]
struct InputElement {
    items: Vec<(String, String)>,
    image: Option<String>,
    carried: Option<RecordBatch>,
}

impl InputItems {
    /// Keep the `(question, reference)` of each item of the row at `position` (the reference
    /// as a split stores it: the JSON array text of several), and its carried columns' values
    /// when the reader kept them ([`InputRow::carried`]).
    pub fn add(&mut self, position: u64, row: &InputRow) {
        let items = row
            .qa
            .iter()
            .map(|q| (q.question.clone(), q.answer.clone()))
            .collect();
        let image = (row.image.bytes.as_deref()).map(|b| hex::encode(Sha256::digest(b)));
        let carried = row.carried.clone();
        self.rows.insert(
            position,
            InputElement {
                items,
                image,
                carried,
            },
        );
    }

    /// Record that the element at `position` cannot be read now.
    pub fn add_unreadable(&mut self, position: u64) {
        self.unreadable.insert(position);
    }

    /// Elements of the input that could not be read (their split rows are not checked).
    pub fn unreadable(&self) -> usize {
        self.unreadable.len()
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
        let (Some(position), Some(Ok(kept))) =
            (meta["position"].as_u64(), kept_from_of(&row.clean_meta))
        else {
            return;
        };
        if self.unreadable.contains(&position) {
            return;
        }
        let file = meta["source_file"].as_str().unwrap_or("?");
        let index = meta["row_index"].as_u64().unwrap_or(0);
        let mut flag = |qa: Option<usize>, detail: String| {
            out.push(Disagreement {
                split: name.to_string(),
                row: r,
                qa,
                problem: Problem::NotTheInput,
                detail,
            })
        };
        let Some(element) = self.rows.get(&position) else {
            flag(
                None,
                format!("the input has no element at position {position} ({file} row {index})"),
            );
            return;
        };
        if element
            .image
            .as_deref()
            .is_some_and(|sha| sha != row.image_sha256)
        {
            flag(
                None,
                format!(
                    "image_sha256 {} is not the hash of the image of the input's {file} row {index}",
                    row.image_sha256
                ),
            );
        }
        if let (Some(stored), Some(input)) = (&row.carried, &element.carried) {
            for (column, value, says) in carried_differences(stored, input) {
                flag(
                    None,
                    format!(
                        "column `{column}` is {value}, the input's {file} row {index} says {says}"
                    ),
                );
            }
        }
        let items = &element.items;
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

/// The carried columns of a split row (`stored`, one row) whose value is not the input row's
/// (`input`, one row, read as the split's types): each column with the stored and the input's
/// value as [`shown`]. A column the input no longer has reads as null there.
fn carried_differences(stored: &RecordBatch, input: &RecordBatch) -> Vec<(String, String, String)> {
    stored
        .schema()
        .fields()
        .iter()
        .zip(stored.columns())
        .filter_map(|(field, value)| {
            let theirs = input.column_by_name(field.name());
            let same = theirs.is_some_and(|t| t.to_data() == value.to_data());
            (!same).then(|| {
                let says = theirs.map_or_else(|| "null".to_string(), |t| shown(t.as_ref()));
                (field.name().clone(), shown(value.as_ref()), says)
            })
        })
        .collect()
}

/// The one value of `a` as a person reads it: `null`, a string quoted, any other value as
/// Arrow displays it (`7`, `2.5`, `true`, `[a, b]`, `{a: 1}`).
fn shown(a: &dyn Array) -> String {
    use arrow::datatypes::DataType;
    if a.is_null(0) {
        return "null".into();
    }
    let text =
        arrow::util::display::array_value_to_string(a, 0).unwrap_or_else(|e| format!("<{e}>"));
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => format!("{text:?}"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(id: i64, note: Option<&str>) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("note", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![id])),
                Arc::new(StringArray::from(vec![note])),
            ],
        )
        .unwrap()
    }

    /// Catches: an edited carried value passing, or a slice compared by its offset.
    #[test]
    fn an_edited_carried_value_is_named_with_both_values() {
        assert!(carried_differences(&batch(7, Some("a")), &batch(7, Some("a"))).is_empty());
        let two = RecordBatch::try_new(
            batch(7, Some("a")).schema(),
            vec![
                Arc::new(Int64Array::from(vec![1, 7])),
                Arc::new(StringArray::from(vec![Some("z"), Some("a")])),
            ],
        )
        .unwrap();
        assert!(carried_differences(&batch(7, Some("a")), &two.slice(1, 1)).is_empty());
        assert_eq!(
            carried_differences(&batch(8, Some("a")), &batch(7, None)),
            vec![
                ("id".to_string(), "8".to_string(), "7".to_string()),
                ("note".to_string(), "\"a\"".to_string(), "null".to_string()),
            ]
        );
    }
}
