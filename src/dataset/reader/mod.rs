//! Streaming reader of an input dataset in the Hugging Face parquet layout (contract §2).
//!
//! The input is a parquet file, a folder (every `*.parquet` below it, sorted, hidden
//! entries skipped) or a glob. Files are read one row group at a time in batches of
//! [`BATCH_ROWS`] rows, so memory holds at most one batch of images, never the dataset.
//!
//! Every row becomes `Ok(InputRow)` or `Err(RowError)` naming the file, row and field; the
//! reader then goes on. A file whose footer cannot be read (truncated, not parquet) gives one
//! file-level `RowError` (`row: None`, field `file`); a row group that fails to decode gives
//! one error for that row group; the remaining files and row groups still stream. When the
//! failure is a string that is not UTF-8, the row group is re-read without the bad rows
//! instead, so only those rows become errors (naming the field, e.g. `qa[0].answer`). A panic
//! of the decoders on a corrupt file ([`super::isolate`]) is one of these errors too. A
//! column whose type cannot hold its values (the image, `qa`, a flat layout's question or
//! answer: [`column_type_problem`]) is one error for the file's rows, counted by the footer,
//! as is a file whose columns do not resolve to a layout (a missing or ambiguous column).
//!
//! Column handling: each file's layout comes from its column names ([`Layout::resolve`]). In
//! Contract §2's layout `image` (struct{bytes, path}) and `qa` (list of struct{question, answer,
//! source?, …}) are required; in a flat layout (`image, question, answer`, `image, query,
//! label`, …) each row is one item, and [`InputRow::columns`] records the columns used. In
//! both, an answer is a string or a list of strings (several references,
//! [`QaItem::answer_list`]); an integer or float answer reads as Python's `str()` prints it.
//! `image_sha256` and `family` are optional strings; every other
//! column is carried into [`InputRow::extra`] as JSON, and unknown `qa` fields into
//! [`QaItem::extra`]. A reader asked to carry the input's columns ([`InputReader::carrying`],
//! the schema [`super::carry::carried_schema`] decides) also keeps each row's values of
//! those columns (`family` included) as Arrow values in [`InputRow::carried`]: a one-row
//! slice of the batch [`super::carry::conform`] builds; a value that does not convert to its
//! carried type is that row's error, field the column. `string`/`large_string`/`binary`/`large_binary`/`list`/`large_list`
//! (and the view variants) are all accepted; a string stored as binary must be UTF-8.
//!
//! Which files are read, and the rule on links, are [`super::scan`]'s: nothing outside the
//! dataset's own folder (the folder given, or the directory of the file or the glob's fixed
//! prefix), each file once; a link not followed is a file-level `RowError` first in the
//! stream. An image given only by `path` is read from disk only when the path is relative and
//! resolves (after `canonicalize`, so symlinks and `..` are followed) inside that folder, or,
//! with `--images-root DIR` ([`ReadOptions::images_root`]), inside `DIR`, absolute paths
//! included ([`resolve_in_images_root`]).

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch, StructArray};
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use serde_json::Map;

use super::carry::conform;
use super::isolate::isolate;
use super::layout::{column_type_problem, Layout, ReadOptions};
pub use super::scan::{resolve_in_images_root, resolve_inputs, resolve_inside, InputFiles};
use super::values::{as_struct, get_answer_text, get_bytes, get_list, get_string, to_json};
use super::DatasetError;
use crate::record::{ImageRef, InputRow, QaItem, RowError, SourceColumns};
use retry::fall_back_per_row;
pub(super) use retry::reread_with_binary_strings;

mod retry;

/// Rows decoded at a time (bounds the images held in memory).
pub const BATCH_ROWS: usize = 64;

/// One parquet file being read row group by row group.
struct OpenFile {
    path: PathBuf,
    name: String,
    file: File,
    meta: ArrowReaderMetadata,
    /// The file's layout (a file whose columns do not resolve is one error, never opened).
    layout: Layout,
    next_group: usize,
    /// Index in the file of the first row of the next batch.
    next_row: usize,
    batches: Option<ParquetRecordBatchReader>,
    /// First row of the row group being read and its row count.
    group_start: usize,
    group_rows: usize,
    /// Whether the current row group is being re-read with its bad string columns as binary.
    retried: bool,
}

/// Streams `Result<InputRow, RowError>` over all files of an input. See the module docs.
pub struct InputReader {
    root: PathBuf,
    /// `--images-root`, canonical.
    images_root: Option<PathBuf>,
    options: ReadOptions,
    /// The layout of the last file opened (a change is logged).
    last_layout: Option<Layout>,
    files: VecDeque<PathBuf>,
    current: Option<OpenFile>,
    pending: VecDeque<Result<InputRow, RowError>>,
    /// The carried columns each row keeps ([`InputReader::carrying`]).
    carried: Option<SchemaRef>,
}

impl std::fmt::Debug for InputReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputReader")
            .field("root", &self.root)
            .field("files_left", &self.files.len())
            .finish()
    }
}

impl InputReader {
    /// Open an input spec (file, folder or glob). Only the file list is resolved here; files
    /// are opened lazily while iterating.
    ///
    /// Errors: as [`resolve_inputs`].
    pub fn open(spec: &str) -> Result<Self, DatasetError> {
        Self::open_with(spec, &ReadOptions::default())
    }

    /// [`InputReader::open`] with column flags and `--images-root`.
    ///
    /// Errors: as [`resolve_inputs`]; an images root that does not exist.
    pub fn open_with(spec: &str, options: &ReadOptions) -> Result<Self, DatasetError> {
        Self::from_files(resolve_inputs(spec)?, options)
    }

    /// Read an already resolved file list.
    /// Links that were not followed ([`InputFiles::refused`]) come first, one file error
    /// each.
    ///
    /// Errors: an images root ([`ReadOptions::images_root`]) that does not exist.
    pub fn from_files(files: InputFiles, options: &ReadOptions) -> Result<Self, DatasetError> {
        let images_root = match &options.images_root {
            Some(r) => Some(r.canonicalize().map_err(|e| {
                DatasetError::Invalid(format!("--images-root {}: {e}", r.display()))
            })?),
            None => None,
        };
        let pending = files
            .refused
            .into_iter()
            .map(|r| Err(Self::file_error(&r.link, None, None, r.message)))
            .collect();
        Ok(Self {
            root: files.root,
            images_root,
            options: options.clone(),
            last_layout: None,
            files: files.files.into(),
            current: None,
            pending,
            carried: None,
        })
    }

    /// Keep each row's values of the carried columns `schema` (those
    /// [`super::carry::carried_schema`] found in the input, or a split's carried columns for
    /// `verify`) in [`InputRow::carried`]; `None` keeps none (the default).
    pub fn carrying(mut self, schema: Option<SchemaRef>) -> Self {
        self.carried = schema;
        self
    }

    /// An error of a whole file (`row` `None`) or of the `rows` rows from `row` on.
    fn file_error(path: &Path, row: Option<usize>, rows: Option<u64>, message: String) -> RowError {
        RowError {
            file: path.display().to_string(),
            row,
            rows,
            field: "file".into(),
            message,
        }
    }

    fn open_next_file(&mut self) -> bool {
        let Some(path) = self.files.pop_front() else {
            return false;
        };
        let opened = File::open(&path)
            .map_err(|e| e.to_string())
            .and_then(|file| {
                isolate(|| ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()))
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map(|meta| (file, meta))
                    .map_err(|e| {
                        format!("cannot read parquet footer (truncated or not a parquet file): {e}")
                    })
            });
        let opened = opened.map(|(file, meta)| {
            let layout = Layout::of_schema(meta.schema(), &self.options.columns);
            let problem = layout
                .as_ref()
                .ok()
                .and_then(|l| column_type_problem(meta.schema(), l));
            (file, meta, layout, problem)
        });
        // A column that is missing or ambiguous, or whose type cannot hold its values (`qa`,
        // the image, a flat layout's question or answer), fails every row alike: one error
        // for the file's rows (counted by the footer), not one per row.
        let whole_file = |meta: &ArrowReaderMetadata, field: String, message: String| {
            let rows = meta.metadata().file_metadata().num_rows();
            RowError {
                file: path.display().to_string(),
                row: Some(0),
                rows: Some(u64::try_from(rows).unwrap_or(0)),
                field,
                message: format!("{message}: none of the file's {rows} rows can be read"),
            }
        };
        match opened {
            Ok((_, meta, Err(e), _)) => {
                let mut error = whole_file(&meta, e.field, e.message);
                error.message += &format!("; columns found: {}", e.found.join(", "));
                self.pending.push_back(Err(error));
            }
            Ok((_, meta, Ok(_), Some(problem))) => {
                let error = whole_file(&meta, problem.field, problem.message);
                self.pending.push_back(Err(error));
            }
            Ok((file, meta, Ok(layout), None)) => {
                if self.last_layout.as_ref() != Some(&layout) {
                    match &layout {
                        Layout::Nested => {
                            tracing::debug!(file = %path.display(), "input columns: image, qa")
                        }
                        Layout::Flat(c) => tracing::info!(
                            file = %path.display(),
                            "input columns: image `{}`, question `{}`, answer `{}` (one question per row)",
                            c.image, c.question, c.answer
                        ),
                    }
                    self.last_layout = Some(layout.clone());
                }
                tracing::debug!(file = %path.display(), row_groups = meta.metadata().num_row_groups(), "reading");
                self.current = Some(OpenFile {
                    name: path.display().to_string(),
                    path,
                    file,
                    meta,
                    layout,
                    next_group: 0,
                    next_row: 0,
                    batches: None,
                    group_start: 0,
                    group_rows: 0,
                    retried: false,
                });
            }
            Err(message) => self
                .pending
                .push_back(Err(Self::file_error(&path, None, None, message))),
        }
        true
    }

    /// Decode the next batch of the current file into `pending`; `false` when the file is done.
    fn advance_current(&mut self) -> bool {
        let Some(cur) = self.current.as_mut() else {
            return false;
        };
        loop {
            if let Some(reader) = cur.batches.as_mut() {
                let next = isolate(|| reader.next()).unwrap_or_else(|panic| {
                    Some(Err(arrow::error::ArrowError::ExternalError(panic.into())))
                });
                match next {
                    Some(Ok(batch)) => {
                        let start = cur.next_row;
                        cur.next_row += batch.num_rows();
                        let base = cur
                            .path
                            .parent()
                            .map(Path::to_path_buf)
                            .unwrap_or_else(|| PathBuf::from("."));
                        let base = base.canonicalize().unwrap_or(base);
                        let ctx = RowContext {
                            layout: &cur.layout,
                            root: &self.root,
                            base: &base,
                            images_root: self.images_root.as_deref(),
                            skip_family: self.options.skip_family_column,
                        };
                        let carried = self.carried.as_ref().map(|s| conform(&batch, s));
                        decode_batch(
                            (&batch, carried.as_ref()),
                            &cur.name,
                            start,
                            &ctx,
                            &mut self.pending,
                        );
                        return true;
                    }
                    Some(Err(e)) => {
                        let end = cur.group_start + cur.group_rows;
                        if !cur.retried
                            && isolate(|| fall_back_per_row(cur)).ok().flatten().is_some()
                        {
                            continue;
                        }
                        self.pending.push_back(Err(Self::file_error(
                            &cur.path,
                            Some(cur.next_row),
                            Some((end - cur.next_row) as u64),
                            format!(
                                "cannot decode rows {}..{end} (row group {}): {e}",
                                cur.next_row,
                                cur.next_group - 1
                            ),
                        )));
                        cur.batches = None;
                        cur.next_row = end;
                        return true;
                    }
                    None => cur.batches = None,
                }
            }
            let groups = cur.meta.metadata().row_groups();
            if cur.next_group >= groups.len() {
                return false;
            }
            let g = cur.next_group;
            cur.next_group += 1;
            cur.retried = false;
            cur.group_start = cur.next_row;
            cur.group_rows = usize::try_from(groups[g].num_rows()).unwrap_or(0);
            let built = cur
                .file
                .try_clone()
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    isolate(|| {
                        ParquetRecordBatchReaderBuilder::new_with_metadata(f, cur.meta.clone())
                            .with_row_groups(vec![g])
                            .with_batch_size(BATCH_ROWS)
                            .build()
                    })?
                    .map_err(|e| e.to_string())
                });
            match built {
                Ok(r) => cur.batches = Some(r),
                Err(e) => {
                    let msg = format!(
                        "cannot read rows {}..{} (row group {g}): {e}",
                        cur.next_row,
                        cur.next_row + cur.group_rows
                    );
                    self.pending.push_back(Err(Self::file_error(
                        &cur.path,
                        Some(cur.next_row),
                        Some(cur.group_rows as u64),
                        msg,
                    )));
                    cur.next_row += cur.group_rows;
                    return true;
                }
            }
        }
    }
}

impl Iterator for InputReader {
    type Item = Result<InputRow, RowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.current.is_some() {
                if !self.advance_current() {
                    self.current = None;
                }
                continue;
            }
            if !self.open_next_file() {
                return None;
            }
        }
    }
}

/// Optional columns with a meaning of their own in every layout; the others that are not the
/// layout's image and question columns go to `extra`.
const PROVENANCE_COLUMNS: [&str; 2] = ["image_sha256", "family"];

/// A decode failure of one row: (field, message).
type FieldError = (String, String);

/// How the rows of a batch are decoded and where their image paths may point.
struct RowContext<'a> {
    layout: &'a Layout,
    /// The dataset folder (canonical).
    root: &'a Path,
    /// The folder of the parquet file (canonical).
    base: &'a Path,
    /// `--images-root` (canonical), replacing `root` and `base` for image paths.
    images_root: Option<&'a Path>,
    /// [`ReadOptions::skip_family_column`].
    skip_family: bool,
}

/// A batch of one file with, when the reader carries columns, its carried columns and the
/// values of them that did not convert ([`conform`]).
type CarriedBatch = (RecordBatch, Vec<super::carry::CarryProblem>);

/// Decode the rows of `batch` (with its carried columns, when kept), the first being row
/// `start` of `file`, into `out`.
fn decode_batch(
    (batch, carried): (&RecordBatch, Option<&CarriedBatch>),
    file: &str,
    start: usize,
    ctx: &RowContext<'_>,
    out: &mut VecDeque<Result<InputRow, RowError>>,
) {
    for i in 0..batch.num_rows() {
        let row = start + i;
        let item = isolate(|| decode_row(batch, i, ctx))
            .unwrap_or_else(|panic| Err(("row".to_string(), panic)))
            .and_then(|mut r| match carried {
                None => Ok(r),
                Some((values, problems)) => match problems.iter().find(|p| p.0 == i) {
                    Some((_, column, message)) => Err((column.clone(), message.clone())),
                    None => {
                        r.carried = Some(values.slice(i, 1));
                        Ok(r)
                    }
                },
            })
            .map(|mut r| {
                r.source_file = file.to_string();
                r.row_index = row;
                r
            })
            .map_err(|(field, message)| RowError {
                file: file.to_string(),
                row: Some(row),
                rows: None,
                field,
                message,
            });
        out.push_back(item);
    }
}

/// The errors `run` reports for the rows of `batch` (its first is row `start` of `file`, laid
/// out as `layout`, in folder `base` of dataset folder `root`, both canonical; no
/// `--images-root`), each row decoded as [`InputReader`] does: `inspect`'s for a re-read group.
pub(super) fn row_errors(
    batch: &RecordBatch,
    (file, start): (&str, usize),
    layout: &Layout,
    (root, base): (&Path, &Path),
) -> Vec<RowError> {
    let ctx = RowContext {
        layout,
        root,
        base,
        images_root: None,
        skip_family: false,
    };
    let mut out = VecDeque::new();
    decode_batch((batch, None), file, start, &ctx, &mut out);
    out.into_iter().filter_map(Result::err).collect()
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a dyn Array, FieldError> {
    batch
        .column_by_name(name)
        .map(|c| c.as_ref())
        .ok_or_else(|| (name.to_string(), format!("missing column `{name}`")))
}

fn decode_row(batch: &RecordBatch, i: usize, ctx: &RowContext<'_>) -> Result<InputRow, FieldError> {
    let (image, qa, known, columns) = match ctx.layout {
        Layout::Nested => (
            decode_image(column(batch, "image")?, i, ctx, "image")?,
            decode_qa(column(batch, "qa")?, i)?,
            vec!["image", "qa"],
            None,
        ),
        Layout::Flat(c) => {
            let image = decode_image(column(batch, &c.image)?, i, ctx, &c.image)?;
            let item = decode_flat_item(batch, i, c)?;
            let known = vec![c.image.as_str(), c.question.as_str(), c.answer.as_str()];
            (image, vec![item], known, Some(c.clone()))
        }
    };
    let opt_string = |name: &str| match batch.column_by_name(name) {
        None => Ok(None),
        Some(c) => get_string(c.as_ref(), i).map_err(|m| (name.to_string(), m)),
    };
    let image_sha256 = opt_string("image_sha256")?;
    let family = if ctx.skip_family {
        None
    } else {
        opt_string("family")?
    };
    let mut extra = Map::new();
    for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let name = f.name().as_str();
        if !PROVENANCE_COLUMNS.contains(&name) && !known.contains(&name) {
            extra.insert(f.name().clone(), to_json(col.as_ref(), i));
        }
    }
    Ok(InputRow {
        source_file: String::new(),
        row_index: 0,
        image,
        qa,
        image_sha256,
        family,
        extra,
        carried: None,
        columns,
    })
}

/// The one item of a flat-layout row. A null question or answer is kept as an empty string,
/// as in [`decode_qa`], so the pipeline reports it as missing or blank.
fn decode_flat_item(
    batch: &RecordBatch,
    i: usize,
    c: &SourceColumns,
) -> Result<QaItem, FieldError> {
    let question = get_string(column(batch, &c.question)?, i)
        .map_err(|m| (c.question.clone(), m))?
        .unwrap_or_default();
    let (answer, answer_list) = decode_answer(column(batch, &c.answer)?, i, &c.answer)?;
    Ok(QaItem {
        question,
        answer,
        answer_list,
        ..QaItem::default()
    })
}

/// A reference answer at row `i` of `col` (field name `field`): a string (an integer or a
/// float as Python's `str()` prints it, [`get_answer_text`]), or a list of them (several
/// references) given back with its JSON array text as the stored answer. Null is an empty
/// answer; a null inside a list is dropped while other references remain; a list of one is
/// that one.
fn decode_answer(
    col: &dyn Array,
    i: usize,
    field: &str,
) -> Result<(String, Option<Vec<String>>), FieldError> {
    let Ok(Some(items)) = get_list(col, i) else {
        return get_answer_text(col, i)
            .map(|s| (s.unwrap_or_default(), None))
            .map_err(|m| {
                (
                    field.to_string(),
                    format!("{m} (want a string or a list of strings)"),
                )
            });
    };
    let mut list = Vec::with_capacity(items.len());
    for j in 0..items.len() {
        let at = format!("{field}[{j}]");
        if let Some(s) = get_answer_text(items.as_ref(), j).map_err(|m| (at, m))? {
            list.push(s);
        }
    }
    if list.len() < items.len() {
        tracing::debug!(
            "{field}: {} null reference(s) dropped",
            items.len() - list.len()
        );
    }
    Ok(match list.as_slice() {
        [] => (String::new(), None),
        [one] => (one.clone(), None),
        _ => (
            serde_json::Value::from(list.clone()).to_string(),
            Some(list),
        ),
    })
}

/// The error of a row whose image struct is null (field: the image column).
pub(crate) const IMAGE_NULL: &str = "image is null";
/// The error of a row whose image has neither bytes nor a path (field: `<column>.bytes`).
pub(crate) const IMAGE_EMPTY: &str = "null image: neither bytes nor path";

/// The bytes of an image given only by `path`, in a file whose folder is `base` (canonical)
/// of the dataset folder `root` (canonical): the file [`resolve_inside`] finds, or with
/// `--images-root` (`images_root`, canonical) [`resolve_in_images_root`].
///
/// Errors: the message of the row's `<column>.path` error (the path refused, or the file
/// that cannot be read).
pub(crate) fn read_image_path(
    root: &Path,
    base: &Path,
    images_root: Option<&Path>,
    path: &str,
) -> Result<Vec<u8>, String> {
    let file = match images_root {
        Some(r) => resolve_in_images_root(r, path),
        None => resolve_inside(root, base, path),
    }?;
    std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))
}

/// The image at row `i` of `col`, the column named `name` (used in the error fields).
fn decode_image(
    col: &dyn Array,
    i: usize,
    ctx: &RowContext<'_>,
    name: &str,
) -> Result<ImageRef, FieldError> {
    let err = |sub: &str, m: String| (format!("{name}{sub}"), m);
    let s = as_struct(col).map_err(|m| err("", format!("{m} (want struct{{bytes, path}})")))?;
    if s.is_null(i) {
        return Err(err("", IMAGE_NULL.into()));
    }
    let bytes = match s.column_by_name("bytes") {
        Some(c) => get_bytes(c.as_ref(), i).map_err(|m| err(".bytes", m))?,
        None => None,
    };
    let path = match s.column_by_name("path") {
        Some(c) => get_string(c.as_ref(), i).map_err(|m| err(".path", m))?,
        None => None,
    };
    if s.column_by_name("bytes").is_none() && s.column_by_name("path").is_none() {
        return Err(err(
            "",
            format!(
                "struct has neither `bytes` nor `path` ({})",
                col.data_type()
            ),
        ));
    }
    let bytes = match (bytes, &path) {
        (Some(b), _) => b,
        (None, Some(p)) => {
            read_image_path(ctx.root, ctx.base, ctx.images_root, p).map_err(|m| err(".path", m))?
        }
        (None, None) => return Err(err(".bytes", IMAGE_EMPTY.into())),
    };
    Ok(ImageRef {
        bytes: Some(bytes),
        path,
    })
}

fn decode_qa(col: &dyn Array, i: usize) -> Result<Vec<QaItem>, FieldError> {
    let items = get_list(col, i)
        .map_err(|m| {
            (
                "qa".to_string(),
                format!("{m} (want list<struct{{question, answer, …}}>)"),
            )
        })?
        .ok_or_else(|| ("qa".to_string(), "qa is null".to_string()))?;
    let s: &StructArray = as_struct(items.as_ref()).map_err(|m| {
        (
            "qa".to_string(),
            format!("list items: {m} (want struct{{question, answer, …}})"),
        )
    })?;
    let mut out = Vec::with_capacity(s.len());
    for j in 0..s.len() {
        let field = |name: &str| format!("qa[{j}].{name}");
        // A null entry, question or answer is kept as an empty string: the pipeline then
        // reports just that entry (`qa[j].question` / `qa[j].answer`, "missing or blank")
        // and the row's other entries are still processed.
        if s.is_null(j) {
            out.push(QaItem::default());
            continue;
        }
        let required = |name: &str| -> Result<String, FieldError> {
            let c = s
                .column_by_name(name)
                .ok_or_else(|| (field(name), format!("missing field `{name}`")))?;
            Ok(get_string(c.as_ref(), j)
                .map_err(|m| (field(name), m))?
                .unwrap_or_default())
        };
        let question = required("question")?;
        let answer_col = s
            .column_by_name("answer")
            .ok_or_else(|| (field("answer"), "missing field `answer`".to_string()))?;
        let (answer, answer_list) = decode_answer(answer_col.as_ref(), j, &field("answer"))?;
        let source = match s.column_by_name("source") {
            Some(c) => get_string(c.as_ref(), j).map_err(|m| (field("source"), m))?,
            None => None,
        };
        let mut extra = Map::new();
        for (f, c) in s.fields().iter().zip(s.columns()) {
            if !matches!(f.name().as_str(), "question" | "answer" | "source") {
                extra.insert(f.name().clone(), to_json(c.as_ref(), j));
            }
        }
        out.push(QaItem {
            question,
            answer,
            answer_list,
            source,
            extra,
        });
    }
    Ok(out)
}
