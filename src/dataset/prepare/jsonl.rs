//! The JSONL sources of `prepare`: a labels file (`--labels`) and a generic QA JSONL
//! (`--jsonl`), read into pending rows (see the parent module's docs).

use std::collections::{BTreeSet, HashMap};
use std::io::BufRead;
use std::path::Path;

use serde_json::{Map, Value};

use super::{rename_reserved, PendingQa, PendingRow, RESERVED};
use crate::dataset::values::integral_text;
use crate::dataset::DatasetError;

/// One JSONL object with its 1-based line number.
type NumberedLine = (usize, Map<String, Value>);

fn read_jsonl(path: &Path) -> Result<Vec<NumberedLine>, DatasetError> {
    let f = std::fs::File::open(path).map_err(|e| DatasetError::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line =
            line.map_err(|e| DatasetError::Invalid(format!("{}:{}: {e}", path.display(), i + 1)))?;
        // A UTF-8 byte order mark (as Windows editors save) opens the file, not the JSON.
        let line = match i {
            0 => line.strip_prefix('\u{feff}').unwrap_or(&line),
            _ => &line,
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(m)) => out.push((i + 1, m)),
            Ok(_) => {
                return Err(DatasetError::Invalid(format!(
                    "{}:{}: not a JSON object",
                    path.display(),
                    i + 1
                )))
            }
            Err(e) => {
                return Err(DatasetError::Invalid(format!(
                    "{}:{}: invalid JSON: {e}",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(out)
}

/// The message for a line without `key`.
fn missing_key(key: &str) -> String {
    format!("missing `{key}`")
}

/// `key` of a labels line, which must be there.
fn missing(key: &str, path: &Path, line: usize) -> DatasetError {
    DatasetError::Invalid(format!("{}:{line}: {}", path.display(), missing_key(key)))
}

/// `key` of a labels line as text ([`json_text`]); a line without it, or with a value that
/// is no text, is malformed (the image path of a row).
fn take_text(
    m: &mut Map<String, Value>,
    key: &str,
    path: &Path,
    line: usize,
) -> Result<String, DatasetError> {
    let v = m.remove(key).ok_or_else(|| missing(key, path, line))?;
    json_text(v, key).map_err(|e| DatasetError::Invalid(format!("{}:{line}: {e}", path.display())))
}

/// A question or reference of a line: its text, a null read as blank (`""`: the row check
/// then leaves out the question, naming its line), or `Err` (a message) for a line without
/// `key` or a value that is no text ([`json_text`]; [`PendingQa::unread`] leaves the
/// question out).
fn take_item_text(m: &mut Map<String, Value>, key: &str) -> Result<String, String> {
    match m.remove(key) {
        None => Err(missing_key(key)),
        Some(Value::Null) => Ok(String::new()),
        Some(v) => json_text(v, key),
    }
}

/// `answer` of a QA line: a string (or integer), or a list of them (several references; a
/// null in the list is dropped, as the reader does). Returns the references and whether
/// they came as a list, or `Err` (a message) for a line without `answer` or a value that is
/// no text (as [`take_item_text`]).
fn take_answers(m: &mut Map<String, Value>) -> Result<(Vec<String>, bool), String> {
    match m.remove("answer") {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter(|v| !v.is_null())
            .map(|v| json_text(v, "answer[]"))
            .collect::<Result<Vec<_>, _>>()
            // No reference left (`[]`, `[null]`): blank, the row check leaves the question out.
            .map(|a| {
                if a.is_empty() {
                    (vec![String::new()], false)
                } else {
                    (a, true)
                }
            }),
        // A blank reference: the row check leaves the row out.
        Some(Value::Null) => Ok((vec![String::new()], false)),
        Some(v) => json_text(v, "answer").map(|a| (vec![a], false)),
        None => Err(missing_key("answer")),
    }
}

/// A JSON value as the text of a string field: a string as it is, an integer (or an
/// integral float, as a parquet float answer is: `1500.0` → `1500`) as its digits.
///
/// Errors (as a message naming `key`): a fraction, whose text does not survive parsing
/// (`1.50` would become `1.5`: it must be quoted), or any other value (bool, list, object,
/// null).
fn json_text(v: Value, key: &str) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        v @ Value::Number(_) => v.as_f64().and_then(integral_text).ok_or_else(|| {
            format!(
                "`{key}` is the number {v}, whose exact text JSON does not keep: write it as a \
                 string (e.g. \"1.50\")"
            )
        }),
        other => Err(format!("`{key}` must be a string, got {other}")),
    }
}

/// Read the labels JSONL into pending rows (one per line, in file order), keeping with
/// `split_filter` only the lines whose `split` is that value.
///
/// Errors: a malformed line (naming file and line); [`DatasetError::Choice`] naming the splits
/// present when `split_filter` keeps no line.
pub(super) fn labels_rows(
    labels: &Path,
    question: &str,
    split_filter: Option<&str>,
) -> Result<Vec<PendingRow>, DatasetError> {
    let mut rows = Vec::new();
    // The `split` values of the lines the filter left out, to name them if none is left.
    let mut others: BTreeSet<String> = BTreeSet::new();
    for (line, mut m) in read_jsonl(labels)? {
        if let Some(want) = split_filter {
            let split = m.get("split").and_then(Value::as_str);
            if split != Some(want) {
                others.insert(split.map_or_else(|| "(no split field)".into(), str::to_string));
                continue;
            }
        }
        let file = take_text(&mut m, "file", labels, line)?;
        if !m.contains_key("label") {
            return Err(missing("label", labels, line));
        }
        // A null label is a blank reference: the row check leaves the row out.
        let label = take_item_text(&mut m, "label");
        m.insert("file".into(), Value::String(file.clone()));
        rows.push(PendingRow {
            columns: None,
            origin: format!("{}:{line}", labels.display()),
            image_rel: file,
            qa: vec![PendingQa::labelled(question.to_string(), label)],
            provenance: rename_reserved(m, &RESERVED),
            unread: None,
            refused: None,
        });
    }
    match split_filter {
        Some(want) if rows.is_empty() && !others.is_empty() => Err(DatasetError::Choice(format!(
            "--split {want}: no line of {} has split {want:?}; the splits present: {}",
            labels.display(),
            others.into_iter().collect::<Vec<_>>().join(", ")
        ))),
        _ => Ok(rows),
    }
}

/// Read a generic QA JSONL, grouping lines by image (first appearance order). A line without
/// its `image` (or with one that is no text) is a row of its own, left out
/// ([`PendingRow::unread`]); a line without its `question` or `answer` leaves out its
/// question ([`PendingQa::unread`]), named by its line.
///
/// Errors: a line that is not a JSON object (naming file and line).
pub(super) fn qa_jsonl_rows(jsonl: &Path) -> Result<Vec<PendingRow>, DatasetError> {
    let mut rows: Vec<PendingRow> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (line, mut m) in read_jsonl(jsonl)? {
        let image = m
            .remove("image")
            .ok_or_else(|| missing_key("image"))
            .and_then(|v| json_text(v, "image"));
        let image = match image {
            Ok(image) => image,
            Err(e) => {
                rows.push(PendingRow {
                    columns: None,
                    origin: format!("{}:{line}", jsonl.display()),
                    image_rel: String::new(),
                    qa: Vec::new(),
                    provenance: Map::new(),
                    unread: Some(("image".to_string(), e)),
                    refused: None,
                });
                continue;
            }
        };
        // A null question is blank: the row check leaves it out, naming this line.
        let question = take_item_text(&mut m, "question");
        let answers = take_answers(&mut m);
        let at = index.get(&image).map_or(0, |&i| rows[i].qa.len());
        let unread = match (&question, &answers) {
            (Err(e), _) => Some((format!("qa[{at}].question"), e.clone())),
            (_, Err(e)) => Some((format!("qa[{at}].answer"), e.clone())),
            _ => None,
        };
        let (answers, listed) = answers.unwrap_or_else(|_| (vec![String::new()], false));
        let item = PendingQa {
            question: question.unwrap_or_default(),
            answers,
            listed,
            extra: rename_reserved(m, &["source"]),
            origin: Some(format!("{}:{line}", jsonl.display())),
            unread,
            refused: None,
        };
        match index.get(&image) {
            Some(&i) => rows[i].qa.push(item),
            None => {
                index.insert(image.clone(), rows.len());
                rows.push(PendingRow {
                    columns: None,
                    origin: format!("{}:{line}", jsonl.display()),
                    image_rel: image,
                    qa: vec![item],
                    provenance: Map::new(),
                    unread: None,
                    refused: None,
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file saved with a UTF-8 byte order mark reads as without it (its first line failed
    /// as `invalid JSON: expected value at line 1 column 1`; newcomer finding); a mark
    /// elsewhere is still an error.
    #[test]
    fn a_byte_order_mark_opening_the_file_is_not_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("labels.jsonl");
        std::fs::write(
            &path,
            "\u{feff}{\"file\": \"a.png\"}\n{\"file\": \"b.png\"}\n",
        )
        .unwrap();
        let lines = read_jsonl(&path).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].0, 1);
        assert_eq!(lines[0].1["file"], "a.png");
        std::fs::write(
            &path,
            "{\"file\": \"a.png\"}\n\u{feff}{\"file\": \"b.png\"}\n",
        )
        .unwrap();
        let err = read_jsonl(&path).unwrap_err().to_string();
        assert!(err.contains("labels.jsonl:2: invalid JSON"), "{err}");
    }
}
