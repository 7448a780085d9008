//! `verisample inspect`: a human-readable summary of an input or output dataset — per split
//! (or per file when names do not follow the shard convention): schema, whether the
//! `huggingface` feature metadata is present, row count, and the first rows with image
//! size in bytes, decoded width×height, SHA-256 check and `qa` entries.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Cursor;
use std::path::PathBuf;

use arrow::array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

use super::reader::resolve_inputs;
use super::values::{as_struct, get_bytes, get_string, to_json};
use super::writer::sha256_hex;
use super::DatasetError;

/// Longest string shown for one value before it is cut with `…`.
const MAX_SHOWN_CHARS: usize = 160;

/// The split a shard file belongs to (`train-00000-of-00002.parquet` → `train`), or the
/// whole file name when it does not follow the convention.
fn split_of(path: &std::path::Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.len().checked_sub(23).map(|n| &name[..n]) {
        Some(split) if super::shards::is_shard_of(&name, split) => split.to_string(),
        _ => name,
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_SHOWN_CHARS {
        s.to_string()
    } else {
        let head: String = s.chars().take(MAX_SHOWN_CHARS).collect();
        format!("{head}… ({} chars)", s.chars().count())
    }
}

/// Cut long strings inside a JSON value.
fn cut_json(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(cut(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(cut_json).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, cut_json(v))).collect()),
        other => other,
    }
}

/// Describe the image at row `i` of an `image` struct column.
fn describe_image(col: &dyn Array, i: usize) -> (String, Option<String>) {
    let Ok(s) = as_struct(col) else {
        return (format!("not a struct ({})", col.data_type()), None);
    };
    if s.is_null(i) {
        return ("null".into(), None);
    }
    let path = s
        .column_by_name("path")
        .and_then(|c| get_string(c.as_ref(), i).ok().flatten());
    let bytes = s
        .column_by_name("bytes")
        .and_then(|c| get_bytes(c.as_ref(), i).ok().flatten());
    let path_txt = path.map_or_else(|| "null".to_string(), |p| format!("{p:?}"));
    match bytes {
        None => (format!("no bytes, path {path_txt}"), None),
        Some(b) => {
            let dims = image::ImageReader::new(Cursor::new(&b))
                .with_guessed_format()
                .ok()
                .and_then(|r| r.format().map(|f| (f, r)))
                .and_then(|(f, r)| {
                    r.into_dimensions()
                        .ok()
                        .map(|(w, h)| format!("{w}x{h} {f:?}"))
                })
                .unwrap_or_else(|| "undecodable".to_string());
            (
                format!("{} bytes, {dims}, path {path_txt}", b.len()),
                Some(sha256_hex(&b)),
            )
        }
    }
}

fn describe_row(batch: &RecordBatch, i: usize, out: &mut String) {
    let mut computed_sha = None;
    for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let name = f.name();
        match name.as_str() {
            "image" => {
                let (text, sha) = describe_image(col.as_ref(), i);
                computed_sha = sha;
                let _ = writeln!(out, "    image: {text}");
            }
            "image_sha256" => {
                let stored = get_string(col.as_ref(), i).ok().flatten();
                let check = match (&stored, &computed_sha) {
                    (Some(s), Some(c)) if s == c => " (matches the bytes)".to_string(),
                    (Some(_), Some(c)) => format!(" (MISMATCH: the bytes hash to {c})"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "    image_sha256: {}{check}",
                    stored.as_deref().unwrap_or("null")
                );
            }
            "qa" => match to_json(col.as_ref(), i) {
                Value::Array(items) => {
                    let _ = writeln!(out, "    qa: {} item(s)", items.len());
                    for (j, item) in items.into_iter().enumerate() {
                        let _ = writeln!(out, "      [{j}] {}", cut_json(item));
                    }
                }
                other => {
                    let _ = writeln!(out, "    qa: {}", cut_json(other));
                }
            },
            _ => {
                let _ = writeln!(out, "    {name}: {}", cut_json(to_json(col.as_ref(), i)));
            }
        }
    }
}

/// What [`inspect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The human-readable summary (schema, row counts, the first rows), ends with a newline.
    pub text: String,
    /// Files that could not be opened as parquet or whose rows could not be decoded; each is
    /// also described in `text`. A caller should fail when this is not empty.
    pub unreadable: Vec<PathBuf>,
}

/// Summarise the dataset at `spec` (file, folder, output dir or glob), showing up to `rows`
/// rows per split.
///
/// Errors: no such input. Unreadable files are reported in the text and listed in
/// [`Inspection::unreadable`], so one bad file does not hide the others.
pub fn inspect(spec: &str, rows: usize) -> Result<Inspection, DatasetError> {
    let inputs = resolve_inputs(spec)?;
    let mut groups: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in &inputs.files {
        groups.entry(split_of(f)).or_default().push(f.clone());
    }
    let mut out = String::new();
    let mut unreadable = Vec::new();
    let _ = writeln!(
        out,
        "{}: {} parquet file(s), {} split(s)",
        spec,
        inputs.files.len(),
        groups.len()
    );
    for (split, files) in &groups {
        let _ = writeln!(out, "\n== {split} ({} file(s))", files.len());
        let mut total: u64 = 0;
        let mut shown = 0usize;
        let mut schema_done = false;
        for file in files {
            let opened = std::fs::File::open(file)
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    SerializedFileReader::new(f.try_clone().map_err(|e| e.to_string())?)
                        .map_err(|e| e.to_string())
                        .map(|r| (f, r))
                });
            let (f, meta_reader) = match opened {
                Ok(x) => x,
                Err(e) => {
                    let _ = writeln!(out, "  {}: UNREADABLE: {e}", file.display());
                    unreadable.push(file.clone());
                    continue;
                }
            };
            let meta = meta_reader.metadata();
            total += u64::try_from(meta.file_metadata().num_rows()).unwrap_or(0);
            let builder = match ParquetRecordBatchReaderBuilder::try_new(f) {
                Ok(b) => b,
                Err(e) => {
                    let _ = writeln!(out, "  {}: UNREADABLE: {e}", file.display());
                    unreadable.push(file.clone());
                    continue;
                }
            };
            if !schema_done {
                schema_done = true;
                let hf = meta
                    .file_metadata()
                    .key_value_metadata()
                    .is_some_and(|kv| kv.iter().any(|k| k.key == "huggingface"));
                let _ = writeln!(
                    out,
                    "  row groups in first file: {}, created_by: {}, huggingface metadata: {}",
                    meta.num_row_groups(),
                    meta.file_metadata().created_by().unwrap_or("?"),
                    if hf { "yes" } else { "no" }
                );
                let _ = writeln!(out, "  schema:");
                for field in builder.schema().fields() {
                    let _ = writeln!(out, "    {}: {}", field.name(), field.data_type());
                }
            }
            if shown >= rows {
                continue;
            }
            let reader = match builder.with_batch_size(rows - shown).build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = writeln!(out, "  {}: UNREADABLE: {e}", file.display());
                    unreadable.push(file.clone());
                    continue;
                }
            };
            for batch in reader {
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = writeln!(out, "  {}: cannot decode rows: {e}", file.display());
                        unreadable.push(file.clone());
                        break;
                    }
                };
                for i in 0..batch.num_rows().min(rows - shown) {
                    let _ = writeln!(
                        out,
                        "  row {shown} ({}, row {i}):",
                        file.file_name()
                            .map(|n| n.to_string_lossy())
                            .unwrap_or_default()
                    );
                    describe_row(&batch, i, &mut out);
                    shown += 1;
                }
                if shown >= rows {
                    break;
                }
            }
        }
        let _ = writeln!(out, "  rows: {total}");
    }
    Ok(Inspection {
        text: out,
        unreadable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_from_files() {
        for (file, want) in [
            (
                "data/OrandCar_RS_think-00000-of-00002.parquet",
                "OrandCar_RS_think",
            ),
            ("train-00003-of-00004.parquet", "train"),
            ("other.parquet", "other.parquet"),
        ] {
            assert_eq!(split_of(std::path::Path::new(file)), want);
        }
    }

    #[test]
    fn long_strings_are_cut() {
        let long = "x".repeat(MAX_SHOWN_CHARS + 5);
        let c = cut(&long);
        assert!(c.ends_with(&format!("… ({} chars)", MAX_SHOWN_CHARS + 5)));
        assert_eq!(cut("short"), "short");
    }
}
