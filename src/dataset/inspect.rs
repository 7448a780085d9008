//! `verisample inspect`: a human-readable summary of an input or output dataset — per split
//! (or per file when names do not follow the shard convention): schema, whether the
//! `huggingface` feature metadata is present, row count, and the first rows with image
//! size in bytes, width×height once the image passed `run`'s own image check (an
//! [`ImageCheck`] given by the caller: a full decode within the pipeline's limits), SHA-256
//! check and `qa` entries; an image given only by path is read as `run` reads it. A file
//! whose columns `run` cannot read, or that lacks one it needs, is NOT USABLE. Every row
//! group is decoded, as `run` reads it: one that fails is named with its rows, as `run`
//! reports it, and the file's other row groups are still read; one that fails on a string
//! that is not UTF-8 is re-read by `run`'s own path, and each bad row is named with its field
//! as `run`'s `errors.jsonl` names it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
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
    match super::shards::split_of_shard(&name) {
        Some(split) => split.to_string(),
        None => name,
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

/// `run`'s check of one image's bytes: its `(width, height)` when `run` would use it, else
/// what `run` would report (field and message).
pub type ImageCheck<'a> = &'a dyn Fn(&[u8]) -> Result<(usize, usize), String>;

/// Describe the image at row `i` of an `image` struct column; an image given only by path is
/// read as `run` reads it (inside the dataset folder, [`Show::root`], from the file's folder
/// [`Show::base`]) and checked as bytes would be.
fn describe_image(col: &dyn Array, i: usize, show: &Show<'_>) -> (String, Option<String>) {
    let Ok(s) = as_struct(col) else {
        return (format!("not a struct ({})", col.data_type()), None);
    };
    if s.is_null(i) {
        return (
            format!("null, NOT USABLE: image: {}", super::reader::IMAGE_NULL),
            None,
        );
    }
    let path = s
        .column_by_name("path")
        .and_then(|c| get_string(c.as_ref(), i).ok().flatten());
    let bytes = s
        .column_by_name("bytes")
        .and_then(|c| get_bytes(c.as_ref(), i).ok().flatten());
    let path_txt = path
        .as_ref()
        .map_or_else(|| "null".to_string(), |p| format!("{p:?}"));
    match bytes {
        None if path.is_none() => (
            format!(
                "no bytes, path null, NOT USABLE: image.bytes: {}",
                super::reader::IMAGE_EMPTY
            ),
            None,
        ),
        None => {
            let p = path.as_deref().unwrap_or_default();
            match super::reader::read_image_path(show.root, show.base, None, p) {
                Ok(b) => {
                    let (text, sha) = describe_bytes(&b, show.check);
                    (format!("no bytes, path {path_txt}: {text}"), sha)
                }
                Err(m) => (
                    format!("no bytes, path {path_txt}, NOT USABLE: image.path: {m}"),
                    None,
                ),
            }
        }
        Some(b) => {
            let (text, sha) = describe_bytes(&b, show.check);
            (format!("{text}, path {path_txt}"), sha)
        }
    }
}

/// Size, format and `run`'s check of an image's bytes, and their SHA-256.
fn describe_bytes(b: &[u8], check: ImageCheck<'_>) -> (String, Option<String>) {
    let format = image::ImageReader::new(Cursor::new(b))
        .with_guessed_format()
        .ok()
        .and_then(|r| r.format())
        .map_or_else(|| "unknown format".to_string(), |f| format!("{f:?}"));
    let dims = match check(b) {
        Ok((w, h)) => format!("{w}x{h} {format}"),
        Err(m) => format!("{format}, NOT USABLE: {m}"),
    };
    (format!("{} bytes, {dims}", b.len()), Some(sha256_hex(b)))
}

fn describe_row(batch: &RecordBatch, i: usize, show: &Show<'_>, out: &mut String) {
    let mut computed_sha = None;
    for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let name = f.name();
        match name.as_str() {
            "image" => {
                let (text, sha) = describe_image(col.as_ref(), i, show);
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
    /// Files that could not be opened as parquet (no readable footer), have a column of a
    /// type `run` cannot read or lack a column it needs (NOT USABLE); each is also described
    /// in `text`. A caller should fail when this is not empty.
    pub unreadable: Vec<PathBuf>,
    /// Row groups that could not be decoded, as (file, row group index): `run` reports each
    /// as one `errors.jsonl` line for its rows and reads the file's other row groups. Each is
    /// also described in `text`.
    pub damaged: Vec<(PathBuf, usize)>,
}

/// What [`inspect`] has seen of one split so far.
#[derive(Debug, Clone, Default)]
struct SplitState {
    /// Rows in the footers of its files.
    total: u64,
    /// Rows shown.
    shown: usize,
    /// Whether the schema was shown (once, from the first readable file).
    schema_done: bool,
}

/// Describe one file of a split into `out`, showing rows while fewer than `show.rows` are
/// shown, and decoding every row group (each isolated: a decoder panic fails that row group only).
/// Returns the row groups that could not be decoded, each described in `out` with its rows.
///
/// Errors: the file cannot be opened or its footer read (`UNREADABLE: …`); what was written
/// to `out` before the failure stays.
fn inspect_file(
    file: &std::path::Path,
    show: &Show<'_>,
    state: &mut SplitState,
    out: &mut String,
) -> Result<Vec<usize>, String> {
    let unreadable = |e: &dyn std::fmt::Display| format!("UNREADABLE: {e}");
    let f = std::fs::File::open(file).map_err(|e| unreadable(&e))?;
    let meta = super::isolate::isolate(|| ArrowReaderMetadata::load(&f, ArrowReaderOptions::new()))
        .map_err(|panic| unreadable(&panic))?
        .map_err(|e| unreadable(&e))?;
    let footer = meta.metadata().clone();
    state.total += u64::try_from(footer.file_metadata().num_rows()).unwrap_or(0);
    if !state.schema_done {
        state.schema_done = true;
        let hf = footer
            .file_metadata()
            .key_value_metadata()
            .is_some_and(|kv| kv.iter().any(|k| k.key == "huggingface"));
        let _ = writeln!(
            out,
            "  row groups in first file: {}, created_by: {}, huggingface metadata: {}",
            footer.num_row_groups(),
            footer.file_metadata().created_by().unwrap_or("?"),
            if hf { "yes" } else { "no" }
        );
        let _ = writeln!(out, "  schema:");
        for field in meta.schema().fields() {
            let _ = writeln!(out, "    {}: {}", field.name(), field.data_type());
        }
    }
    // A column that is missing or ambiguous, or whose type cannot hold its values, fails
    // every row of the file in `run`: one errors.jsonl line for the file, and the input
    // refused before the model loads when it is the first file (the layout as `run` detects
    // it without column flags).
    let rows = footer.file_metadata().num_rows();
    let one_line = format!("run reports the file's {rows} rows as one errors.jsonl line");
    let layout = match super::layout::Layout::of_schema(meta.schema(), &Default::default()) {
        Err(e) => {
            return Err(format!(
                "NOT USABLE: field {}: {e}; run refuses the input before the model loads when \
                 this is its first file, else {one_line}",
                e.field
            ))
        }
        Ok(layout) => {
            if let Some(p) = super::layout::column_type_problem(meta.schema(), &layout) {
                return Err(format!(
                    "NOT USABLE: field {}: {}: {one_line}",
                    p.field, p.message
                ));
            }
            if let Some(p) = super::layout::provenance_type_problem(meta.schema()) {
                return Err(format!(
                    "NOT USABLE: field {}: {}: run writes an errors.jsonl line for each of the \
                     file's {rows} rows (a `family` column is not read with --family)",
                    p.field, p.message
                ));
            }
            layout
        }
    };
    let base = file
        .parent()
        .map_or_else(|| show.root.to_path_buf(), Path::to_path_buf);
    let base = base.canonicalize().unwrap_or(base);
    let show = &Show {
        base: &base,
        ..*show
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut damaged = Vec::new();
    let mut first_row = 0usize;
    for g in 0..footer.num_row_groups() {
        let group_rows = usize::try_from(footer.row_group(g).num_rows()).unwrap_or(0);
        let group = (&f, &meta, &layout);
        if let Err(e) = inspect_row_group(group, (g, first_row), &name, show, state, out) {
            let _ = writeln!(
                out,
                "  {}: rows {first_row}..{} (row group {g}): UNREADABLE: {e}; run reports these \
                 rows as one errors.jsonl line and reads the file's other row groups",
                file.display(),
                first_row + group_rows
            );
            damaged.push(g);
        }
        first_row += group_rows;
    }
    Ok(damaged)
}

/// Which rows [`inspect`] shows, and how it checks their images.
#[derive(Clone, Copy)]
struct Show<'a> {
    /// Rows shown per split.
    rows: usize,
    /// `run`'s image check.
    check: ImageCheck<'a>,
    /// The dataset folder (canonical): image paths must stay inside it, as in `run`.
    root: &'a Path,
    /// The folder of the file being read (canonical), where image paths are tried first.
    base: &'a Path,
}

/// Decode row group `g` of `file` (with its footer `meta` and `layout`; the group's first row
/// is row `first_row` of the file, named `name`), showing its rows in `out` while fewer than
/// `show.rows` are shown. Each batch is decoded isolated, so a decoder panic is this row
/// group's error. A batch that fails on a `string` value that is not UTF-8 is re-read as
/// `run` re-reads it ([`super::reader::reread_with_binary_strings`]), and each row `run`
/// would then report is named with its field, as its `errors.jsonl` line names it.
///
/// Errors: the row group cannot be decoded (the parquet error or the panic).
fn inspect_row_group(
    (file, meta, layout): (&std::fs::File, &ArrowReaderMetadata, &super::layout::Layout),
    (g, first_row): (usize, usize),
    name: &str,
    show: &Show<'_>,
    state: &mut SplitState,
    out: &mut String,
) -> Result<(), String> {
    let group_rows = usize::try_from(meta.metadata().row_group(g).num_rows()).unwrap_or(0);
    let mut reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
        file.try_clone().map_err(|e| e.to_string())?,
        meta.clone(),
    )
    .with_row_groups(vec![g])
    .with_batch_size(super::reader::BATCH_ROWS)
    .build()
    .map_err(|e| e.to_string())?;
    let mut reread = false;
    let mut at = first_row;
    loop {
        let next = super::isolate::isolate(|| reader.next())?;
        let Some(batch) = next else {
            return Ok(());
        };
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) if !reread => {
                let rows = at - first_row..group_rows;
                let again = super::isolate::isolate(|| {
                    super::reader::reread_with_binary_strings(file, meta, g, rows)
                })?;
                reader = again.ok_or_else(|| e.to_string())?;
                reread = true;
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let batch = if reread {
            let roots = (show.root, show.base);
            for e in super::reader::row_errors(&batch, (name, at), layout, roots) {
                let row = e.row.unwrap_or(at);
                let _ = writeln!(
                    out,
                    "  {name}: row {row} (row group {g}): NOT USABLE: {}: {}; run writes this \
                     row to errors.jsonl and reads the group's other rows",
                    e.field, e.message
                );
            }
            with_types_of(&batch, meta.schema())
        } else {
            batch
        };
        for i in 0..batch.num_rows() {
            if state.shown < show.rows {
                let _ = writeln!(out, "  row {} ({name}, row {}):", state.shown, at + i);
                describe_row(&batch, i, show, out);
                state.shown += 1;
            }
        }
        at += batch.num_rows();
    }
}

/// `batch` (re-read with some string columns as binary) with the column types of `schema`,
/// the file's own, so its rows show as any other; a value that is not UTF-8 shows as null
/// (its row is named NOT USABLE above it). `batch` unchanged when a column cannot be cast.
fn with_types_of(batch: &RecordBatch, schema: &arrow::datatypes::SchemaRef) -> RecordBatch {
    let options = arrow::compute::CastOptions {
        safe: true,
        ..Default::default()
    };
    let columns: Result<Vec<_>, _> = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| arrow::compute::cast_with_options(c, f.data_type(), &options))
        .collect();
    columns
        .and_then(|c| RecordBatch::try_new(schema.clone(), c))
        .unwrap_or_else(|_| batch.clone())
}

/// Summarise the dataset at `spec` (file, folder, output dir or glob), showing up to `rows`
/// rows per split, each image described after `check` (`run`'s own image check).
///
/// Errors: no such input. Unreadable files and row groups are reported in the text and
/// listed in [`Inspection::unreadable`] and [`Inspection::damaged`], so one bad file does not
/// hide the others.
pub fn inspect(spec: &str, rows: usize, check: ImageCheck<'_>) -> Result<Inspection, DatasetError> {
    let inputs = resolve_inputs(spec)?;
    let mut groups: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in &inputs.files {
        groups.entry(split_of(f)).or_default().push(f.clone());
    }
    let mut out = String::new();
    let mut unreadable = Vec::new();
    let mut damaged = Vec::new();
    let show = Show {
        rows,
        check,
        root: &inputs.root,
        base: &inputs.root,
    };
    let _ = writeln!(
        out,
        "{}: {} parquet file(s), {} split(s)",
        spec,
        inputs.files.len(),
        groups.len()
    );
    for r in &inputs.refused {
        let _ = writeln!(out, "  {}: NOT READ: {}", r.link.display(), r.message);
    }
    // The input's other columns, which `run` carries into every split: one it cannot carry
    // refuses the whole input before the model loads (an output folder's own columns are
    // not an input's).
    if !inputs.root.join(crate::out_files::RUN_FILE).exists() {
        if let Err(e) = super::carry::carried_schema(&inputs.files, &Default::default()) {
            let _ = writeln!(out, "  NOT USABLE as it is: run refuses the input: {e}");
        }
    }
    for (split, files) in &groups {
        let _ = writeln!(out, "\n== {split} ({} file(s))", files.len());
        let mut split_state = SplitState::default();
        for file in files {
            match inspect_file(file, &show, &mut split_state, &mut out) {
                Ok(groups) => damaged.extend(groups.into_iter().map(|g| (file.clone(), g))),
                Err(e) => {
                    let _ = writeln!(out, "  {}: {e}", file.display());
                    unreadable.push(file.clone());
                }
            }
        }
        let _ = writeln!(out, "  rows: {}", split_state.total);
    }
    Ok(Inspection {
        text: out,
        unreadable,
        damaged,
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
            // 24 bytes: the 23 before the end start inside 'é' (this panicked).
            ("éxxxxxxxxxxxxxx.parquet", "éxxxxxxxxxxxxxx.parquet"),
            ("ünï-00000-of-00001.parquet", "ünï"),
        ] {
            assert_eq!(split_of(std::path::Path::new(file)), want);
        }
    }

    /// A null image struct and one with neither bytes nor path are named as `run`'s reader
    /// names them (field and message), not shown as if usable.
    #[test]
    fn images_without_bytes_are_named_as_run_reports_them() {
        use arrow::array::{BinaryArray, StringArray, StructArray};
        use arrow::buffer::NullBuffer;
        use arrow::datatypes::{DataType, Field, Fields};
        use std::sync::Arc;
        let fields = Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Utf8, true),
        ]);
        let bytes = BinaryArray::from(vec![None::<&[u8]>, None, None]);
        let paths = StringArray::from(vec![None, None, Some("a.png")]);
        let col = StructArray::new(
            fields,
            vec![Arc::new(bytes), Arc::new(paths)],
            Some(NullBuffer::from(vec![false, true, true])),
        );
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::write(root.join("a.png"), [1, 2, 3]).unwrap();
        let show = Show {
            rows: 3,
            check: &|b| Ok((b.len(), 1)),
            root: &root,
            base: &root,
        };
        let shown = |i| describe_image(&col, i, &show).0;
        assert_eq!(shown(0), "null, NOT USABLE: image: image is null");
        assert_eq!(
            shown(1),
            "no bytes, path null, NOT USABLE: image.bytes: null image: neither bytes nor path"
        );
        assert_eq!(
            shown(2),
            "no bytes, path \"a.png\": 3 bytes, 3x1 unknown format",
            "read from the dataset folder and checked as run does"
        );
    }

    /// A file whose `qa` column is a string (or a flat answer column of booleans) is named
    /// NOT USABLE with the field and types `run` reports, not shown as readable rows.
    #[test]
    fn a_column_of_the_wrong_type_makes_the_file_not_usable() {
        use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
        use std::sync::Arc;
        let tmp = tempfile::tempdir().unwrap();
        let image: ArrayRef = Arc::new(crate::dataset::writer::image_array(
            [crate::record::ImageRef {
                bytes: Some(vec![1, 2, 3]),
                path: None,
            }]
            .iter(),
        ));
        let text = |v: &str| -> ArrayRef { Arc::new(StringArray::from(vec![v])) };
        let write = |name: &str, columns: Vec<(&str, ArrayRef)>| {
            let batch = RecordBatch::try_from_iter(columns).unwrap();
            let path = tmp.path().join(name);
            let mut w = parquet::arrow::ArrowWriter::try_new(
                std::fs::File::create(&path).unwrap(),
                batch.schema(),
                None,
            )
            .unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            path
        };
        let qa = write(
            "qa.parquet",
            vec![("image", image.clone()), ("qa", text("x"))],
        );
        let flat = write(
            "flat.parquet",
            vec![
                ("image", image),
                ("question", text("q")),
                ("answer", Arc::new(BooleanArray::from(vec![true]))),
            ],
        );
        let check: ImageCheck<'_> = &|_| Ok((1, 1));
        for (path, want) in [
            (qa, "NOT USABLE: field qa: column `qa` is Utf8"),
            (flat, "NOT USABLE: field answer: column `answer` is Boolean"),
        ] {
            let found = inspect(path.to_str().unwrap(), 2, check).unwrap();
            assert!(found.text.contains(want), "{}", found.text);
            assert_eq!(found.unreadable, [path]);
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
