//! `verisample prepare`: build the input layout of contract §2 from plain files, so users
//! without parquet can start.
//!
//! Three sources:
//! - **labels**: a folder of images plus a labels JSONL, one object per image with `file`
//!   (path relative to the images folder) and `label` (the reference answer), every other
//!   field kept as a provenance column, typed by its values ([`ColumnKind`]). Every
//!   image gets the family's fixed question (e.g. [`crate::family::ORAND_CAR_QUESTION`]).
//!   Optionally only the lines whose `split` field equals a value.
//! - **qa-jsonl**: a JSONL of `{image, question, answer, …}` with `image` relative to the
//!   JSONL's folder; lines with the same image become one row with several `qa` entries;
//!   other fields become extra `qa` fields, typed alike. `answer` may be a list (several
//!   references; a null in it is dropped).
//! - **parquet** ([`from_parquet`]): any parquet input the reader takes, flat layouts
//!   included (column flags or detection), one row per input row, images as stored.
//!
//! In both JSONL sources ([`jsonl`]) a question or reference that is no text (a bool, an object, a
//! fraction whose text JSON does not keep: `1.50`) leaves out its question, named with its
//! line and field, as `--parquet` leaves out a row whose answer `run` cannot read; the other
//! rows are written. So is a `--jsonl` line without its `question` or `answer`, and a
//! `--jsonl` row whose `image` is missing, no text, or a file that cannot be read inside
//! its folder (not there, a path or link leading out); a labels line without its `file`
//! or `label`, or whose image cannot be read, is malformed and ends the prepare.
//!
//! When any answer is a list, `qa[].answer` is written as `list<string>` (a single
//! reference as a list of one, which reads back as that string).
//!
//! A provenance column (or extra `qa` field) takes the type of its values, nulls and absent
//! keys aside ([`ColumnKind::of`]): JSON integers `int64`, numbers with a fraction (or
//! integers and fractions, every integer within ±2⁵³) `float64`, booleans `bool`, strings
//! `string`; values of mixed kinds, lists and objects (the labels' `digits`), integers beyond
//! `int64` and a column of nulls only are `string`, non-string values as their JSON text.
//!
//! Output: `<out>/data/<split>-00000-of-0000N.parquet` with `image` = {the unchanged file
//! bytes, the file name}, `image_sha256`, `qa[].source` = the image's SHA-256 (provenance
//! for the cleaning pass), and `family`. Image files must resolve inside their folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use serde_json::{Map, Value};

use super::layout::ColumnFlags;
use super::reader::{resolve_in_images_root, resolve_inside};
use super::shards::{ShardOptions, ShardSummary, ShardedWriter};
use super::writer::{image_array, image_fields, sha256_hex};
use super::DatasetError;
use crate::record::{ImageRef, QaItem, SourceColumns};
use jsonl::{labels_rows, qa_jsonl_rows};

/// `run`'s input check of one row, as `prepare` applies it before writing: given the image
/// bytes and the row's `qa` items, `Err((field, message))` when the image fails (the whole
/// row is left out), else each item's problem or `None` (only failing items are left out, as
/// `run` refuses only them). Fields as `errors.jsonl` names them: `image.bytes`,
/// `qa[0].answer`, …. The CLI passes the pipeline's own checks
/// (`pipeline::input_check::check_image` and `check_qa`), so every prepared item is one `run`
/// takes. The third argument: the input columns of a flat-layout row (`--parquet`), whose
/// item problems then name the input's own question or answer column, as `run` does.
pub type RowCheck<'a> =
    &'a dyn Fn(&[u8], &[QaItem], Option<&SourceColumns>) -> Result<ItemProblems, (String, String)>;

/// Per `qa` item of a row, its `(field, message)` problem or `None` (see [`RowCheck`]).
pub type ItemProblems = Vec<Option<(String, String)>>;

/// Where `prepare` takes its rows from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareSource {
    /// Images folder plus a labels JSONL (`file`, `label`, provenance fields).
    Labels {
        /// The labels JSONL.
        labels: PathBuf,
        /// The folder `file` is relative to.
        images: PathBuf,
        /// The question asked of every image (byte-identical, contract §4).
        question: String,
        /// Keep only lines whose `split` field equals this.
        split_filter: Option<String>,
    },
    /// A JSONL of `{image, question, answer, …}`, `image` relative to the JSONL's folder.
    QaJsonl {
        /// The JSONL file.
        jsonl: PathBuf,
    },
    /// A parquet input (file, folder or glob) in any layout the reader takes.
    Parquet {
        /// The input spec.
        input: String,
        /// `--image-column`, `--question-column`, `--answer-column`.
        columns: ColumnFlags,
    },
}

/// A full `prepare` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Input files.
    pub source: PrepareSource,
    /// Value of the `family` column (`None` → null).
    pub family: Option<String>,
    /// Output dataset folder; shards go to `<out>/data/`.
    pub out: PathBuf,
    /// Split name of the shards (`train`).
    pub split: String,
    /// Shard size and row-group bounds.
    pub shard: ShardOptions,
    /// `--images-root DIR`: image paths (absolute ones included) are read from under `DIR`
    /// instead of the JSONL's (images) folder, and refused when they lead outside it; as `run`'s
    /// [`ReadOptions::images_root`](super::layout::ReadOptions::images_root).
    pub images_root: Option<PathBuf>,
}

/// Columns that `prepare` writes itself, and `clean_meta`, a column every split of `run` has
/// of its own (it would refuse to carry the input's); provenance keys with these names get an
/// `orig_` prefix.
const RESERVED: [&str; 5] = ["image", "qa", "image_sha256", "family", "clean_meta"];

/// One image with its questions, before reading the file.
#[derive(Debug, Clone, PartialEq)]
struct PendingRow {
    /// `file:line` of the (first) JSONL line of this row, for error messages.
    origin: String,
    image_rel: String,
    qa: Vec<PendingQa>,
    provenance: Map<String, Value>,
    /// The input columns of a flat-layout parquet row (`None` otherwise).
    columns: Option<SourceColumns>,
    /// Why the row has no image to check (`(field, message)`): the parquet reader's refusal,
    /// or a JSONL line's `image` missing, outside the folder or unreadable. It is left out
    /// without the check.
    unread: Option<(String, String)>,
    /// A problem `run` finds once the image passed its check (a `family` that cannot name
    /// a split, a stored `image_sha256` not the image's): the row is left out.
    refused: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
struct PendingQa {
    question: String,
    /// The references: one, or those of a list-valued answer (`listed`).
    answers: Vec<String>,
    /// The answer was given as a list.
    listed: bool,
    extra: Map<String, Value>,
    /// `file:line` of its JSONL line when the row groups several lines (else the row's).
    origin: Option<String>,
    /// A question or reference of its JSONL line that is no text (a bool, an object, a
    /// fraction whose text JSON does not keep), as `(field, message)`: the question is left
    /// out, as `prepare --parquet` leaves out a row whose answer `run` cannot read.
    unread: Option<(String, String)>,
    /// A problem `run`'s cleaning finds in the question once its text passed the check (a
    /// `source` neither the image's hash nor its path): the question is left out.
    refused: Option<(String, String)>,
}

impl PendingQa {
    /// The item as `run` reads it back (the references, as [`QaItem::references`] gives them).
    fn to_item(&self) -> QaItem {
        QaItem {
            question: self.question.clone(),
            answer: self.answers.first().cloned().unwrap_or_default(),
            answer_list: self.listed.then(|| self.answers.clone()),
            source: None,
            extra: Map::new(),
        }
    }

    /// The item of a labels line: `question` and the `label` as read ([`take_item_text`]).
    fn labelled(question: String, label: Result<String, String>) -> Self {
        let (answer, unread) = match label {
            Ok(a) => (a, None),
            Err(e) => (String::new(), Some(("qa[0].answer".to_string(), e))),
        };
        Self {
            question,
            answers: vec![answer],
            listed: false,
            extra: Map::new(),
            origin: None,
            unread,
            refused: None,
        }
    }
}

/// A JSON value as a string column value: strings as they are, null as null, others as JSON.
fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn rename_reserved(m: Map<String, Value>, reserved: &[&str]) -> Map<String, Value> {
    m.into_iter()
        .map(|(k, v)| {
            if reserved.contains(&k.as_str()) {
                (format!("orig_{k}"), v)
            } else {
                (k, v)
            }
        })
        .collect()
}

/// The `qa[].answer` type: `list<string>` when any answer is a list, else `string`.
fn answer_type(listed: bool) -> DataType {
    if listed {
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
    } else {
        DataType::Utf8
    }
}

/// The type a provenance column (or extra `qa` field) of JSON values is written as (see the
/// module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Every value a JSON integer within `int64`: `int64`.
    Int,
    /// Every value a number, one at least with a fraction, every integer within ±2⁵³
    /// (exact in a double): `float64`.
    Float,
    /// Every value a boolean: `bool`.
    Bool,
    /// Anything else: `string`, a non-string value as its JSON text.
    Text,
}

impl ColumnKind {
    /// The kind of a column of `values` (nulls are left aside; none left is text).
    pub fn of<'a>(values: impl IntoIterator<Item = &'a Value>) -> ColumnKind {
        const EXACT: u64 = 1 << 53;
        let mut kind: Option<ColumnKind> = None;
        for v in values {
            let this = match v {
                Value::Null => continue,
                Value::Bool(_) => ColumnKind::Bool,
                Value::Number(n) if n.is_i64() => ColumnKind::Int,
                Value::Number(n) if n.is_f64() => ColumnKind::Float,
                _ => return ColumnKind::Text,
            };
            kind = Some(match (kind, this) {
                (None, k) => k,
                (Some(a), b) if a == b => a,
                (Some(ColumnKind::Int), ColumnKind::Float)
                | (Some(ColumnKind::Float), ColumnKind::Int) => ColumnKind::Float,
                _ => return ColumnKind::Text,
            });
            // An integer beside fractions must be exact in a double.
            if kind == Some(ColumnKind::Float)
                && v.as_i64().is_some_and(|i| i.unsigned_abs() > EXACT)
            {
                return ColumnKind::Text;
            }
        }
        kind.unwrap_or(ColumnKind::Text)
    }

    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnKind::Int => DataType::Int64,
            ColumnKind::Float => DataType::Float64,
            ColumnKind::Bool => DataType::Boolean,
            ColumnKind::Text => DataType::Utf8,
        }
    }

    /// The column of `values` (`None`: null) as this kind.
    fn array<'a>(self, values: impl Iterator<Item = Option<&'a Value>>) -> ArrayRef {
        let values = values.map(|v| v.filter(|v| !v.is_null()));
        match self {
            ColumnKind::Int => Arc::new(Int64Array::from_iter(
                values.map(|v| v.and_then(Value::as_i64)),
            )),
            ColumnKind::Float => Arc::new(Float64Array::from_iter(
                values.map(|v| v.and_then(Value::as_f64)),
            )),
            ColumnKind::Bool => Arc::new(BooleanArray::from_iter(
                values.map(|v| v.and_then(Value::as_bool)),
            )),
            ColumnKind::Text => {
                Arc::new(StringArray::from_iter(values.map(|v| v.and_then(as_text))))
            }
        }
    }
}

/// The input-layout schema for these provenance columns and extra `qa` fields (both sorted,
/// each with its [`ColumnKind`]); `qa[].answer` is `list<string>` when `listed` (some answer
/// has several references).
pub fn input_schema(
    provenance: &[(String, ColumnKind)],
    qa_extra: &[(String, ColumnKind)],
    listed: bool,
) -> SchemaRef {
    let mut qa_fields = vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", answer_type(listed), true),
        Field::new("source", DataType::Utf8, true),
    ];
    qa_fields.extend(
        qa_extra
            .iter()
            .map(|(k, kind)| Field::new(k, kind.data_type(), true)),
    );
    let item = Field::new("item", DataType::Struct(Fields::from(qa_fields)), true);
    let mut cols = vec![
        Field::new("image", DataType::Struct(image_fields()), true),
        Field::new("qa", DataType::List(Arc::new(item)), true),
        Field::new("image_sha256", DataType::Utf8, true),
        Field::new("family", DataType::Utf8, true),
    ];
    cols.extend(
        provenance
            .iter()
            .map(|(k, kind)| Field::new(k, kind.data_type(), true)),
    );
    Arc::new(Schema::new(cols))
}

/// A row whose image has been read.
struct ReadyRow {
    image: ImageRef,
    sha: String,
    family: Option<String>,
    pending: PendingRow,
}

/// The columns a batch is built with: provenance columns and extra `qa` fields with their
/// kinds, and whether `qa[].answer` is a list.
struct Columns {
    prov: Vec<(String, ColumnKind)>,
    qa_extra: Vec<(String, ColumnKind)>,
    listed: bool,
}

impl Columns {
    /// The columns of `rows` (sorted, as [`input_schema`] wants them), each typed by its
    /// values in every row ([`ColumnKind::of`]).
    fn of(rows: &[PendingRow]) -> Self {
        let (mut prov, mut qa_extra, mut listed) = (BTreeSet::new(), BTreeSet::new(), false);
        for r in rows {
            prov.extend(r.provenance.keys().cloned());
            for q in &r.qa {
                qa_extra.extend(q.extra.keys().cloned());
                listed |= q.listed;
            }
        }
        let prov = prov
            .into_iter()
            .map(|k| {
                let kind = ColumnKind::of(rows.iter().filter_map(|r| r.provenance.get(&k)));
                (k, kind)
            })
            .collect();
        let qa_extra = qa_extra
            .into_iter()
            .map(|k| {
                let values = rows
                    .iter()
                    .flat_map(|r| &r.qa)
                    .filter_map(|q| q.extra.get(&k));
                let kind = ColumnKind::of(values);
                (k, kind)
            })
            .collect();
        Self {
            prov,
            qa_extra,
            listed,
        }
    }

    fn schema(&self) -> SchemaRef {
        input_schema(&self.prov, &self.qa_extra, self.listed)
    }
}

/// The `qa[].answer` values of `items`: strings, or lists of strings when `listed`.
fn answer_array(items: &[(&PendingQa, &str)], listed: bool) -> ArrayRef {
    if !listed {
        return Arc::new(StringArray::from_iter_values(
            items
                .iter()
                .map(|(q, _)| q.answers.first().map_or("", String::as_str)),
        ));
    }
    let mut b = arrow::array::ListBuilder::new(arrow::array::StringBuilder::new());
    for (q, _) in items {
        for a in &q.answers {
            b.values().append_value(a);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

fn ready_batch(
    rows: &[ReadyRow],
    schema: &SchemaRef,
    columns: &Columns,
) -> Result<RecordBatch, DatasetError> {
    let (prov, qa_extra) = (&columns.prov, &columns.qa_extra);
    let items: Vec<(&PendingQa, &str)> = rows
        .iter()
        .flat_map(|r| r.pending.qa.iter().map(move |q| (q, r.sha.as_str())))
        .collect();
    let mut qa_cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            items.iter().map(|(q, _)| q.question.as_str()),
        )),
        answer_array(&items, columns.listed),
        Arc::new(StringArray::from_iter_values(
            items.iter().map(|(_, sha)| *sha),
        )),
    ];
    for (k, kind) in qa_extra {
        qa_cols.push(kind.array(items.iter().map(|(q, _)| q.extra.get(k))));
    }
    let DataType::List(item_field) = schema.field(1).data_type() else {
        return Err(DatasetError::Schema("qa column is not a list".into()));
    };
    let DataType::Struct(qa_fields) = item_field.data_type() else {
        return Err(DatasetError::Schema("qa items are not structs".into()));
    };
    let values = StructArray::try_new(qa_fields.clone(), qa_cols, None)?;
    let qa = ListArray::try_new(
        item_field.clone(),
        OffsetBuffer::from_lengths(rows.iter().map(|r| r.pending.qa.len())),
        Arc::new(values),
        None,
    )?;
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(image_array(rows.iter().map(|r| &r.image))),
        Arc::new(qa),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.sha.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.family.as_deref()),
        )),
    ];
    for (k, kind) in prov {
        cols.push(kind.array(rows.iter().map(|r| r.pending.provenance.get(k))));
    }
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// What `prepare` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareSummary {
    /// The shards.
    pub shards: ShardSummary,
    /// Total `qa` entries written.
    pub qa_items: u64,
    /// The rows (bad image) and questions (blank question or reference) the [`RowCheck`] left
    /// out, in input order, each as `"<file:line or file: row N>: field <field>: <message>"`
    /// (a question's own JSONL line).
    pub left_out: Vec<String>,
    /// Groups of written families whose names differ only in case
    /// ([`crate::dataset::families::case_clashes`] of the rows' split families): `run`
    /// refuses such a dataset unless `--family` puts every row in one family.
    pub family_case_clashes: Vec<Vec<String>>,
}

/// Run `prepare` (see the module docs). Each row is checked with `check` (`run`'s input
/// check) before it is written; a row that fails it (an image that does not decode, a
/// blank or null answer, …) is left out and named in [`PrepareSummary::left_out`], and so
/// is a JSONL question whose text or reference is no text (a bool, a fraction).
///
/// A parquet row the reader refuses, or whose `family` or stored `image_sha256` `run`
/// refuses, is left out the same way (see [`from_parquet`]), and so is a `--jsonl` line
/// without its `question` or `answer`, or whose image is missing or outside its folder.
///
/// Errors: unreadable or malformed JSONL (naming file and line), a labels line's image that
/// is missing or outside its folder (naming the path), [`DatasetError::Choice`] for an input
/// that needs an option (`--split`, a column flag), no rows after filtering or after the
/// check, or a write failure.
#[tracing::instrument(skip_all, fields(out = %opts.out.display(), split = %opts.split))]
pub fn prepare(opts: &PrepareOptions, check: RowCheck) -> Result<PrepareSummary, DatasetError> {
    let (rows, image_dir) = match &opts.source {
        PrepareSource::Labels {
            labels,
            images,
            question,
            split_filter,
        } => (
            labels_rows(labels, question, split_filter.as_deref())?,
            images.clone(),
        ),
        PrepareSource::QaJsonl { jsonl } => {
            let dir = jsonl
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            (qa_jsonl_rows(jsonl)?, dir)
        }
        PrepareSource::Parquet { input, columns } => {
            return from_parquet::prepare_parquet(opts, input, columns, check)
        }
    };
    if rows.is_empty() {
        return Err(no_rows());
    }
    if let PrepareSource::Labels {
        labels,
        split_filter: None,
        ..
    } = &opts.source
    {
        let splits: BTreeSet<&str> = rows
            .iter()
            .filter_map(|r| r.provenance.get("split").and_then(Value::as_str))
            .collect();
        if splits.len() > 1 {
            return Err(DatasetError::Choice(format!(
                "{} has lines of {} splits ({}): pass --split NAME to prepare one of them \
                 (they would otherwise be mixed into one split)",
                labels.display(),
                splits.len(),
                splits.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let root = opts.images_root.as_ref().unwrap_or(&image_dir);
    let root = root.canonicalize().map_err(|e| DatasetError::io(root, e))?;
    let resolve = |rel: &str| match opts.images_root {
        Some(_) => resolve_in_images_root(&root, rel),
        None => resolve_inside(&root, &root, rel),
    };
    let read_image = |rel: &str| -> Result<(PathBuf, Vec<u8>), String> {
        let file = resolve(rel)?;
        let bytes = std::fs::read(&file)
            .map_err(|e| format!("image {rel:?}: cannot read {}: {e}", file.display()))?;
        Ok((file, bytes))
    };
    // A JSONL line's image that cannot be read (missing, outside the folder, a link out)
    // leaves its row out, as `run` records a row whose image path it cannot read; a labels
    // line's ends the prepare.
    let leave_out = matches!(opts.source, PrepareSource::QaJsonl { .. });
    let columns = Columns::of(&rows);
    let ready = rows.into_iter().map(|mut pending| {
        if pending.unread.is_none() {
            match read_image(&pending.image_rel) {
                Ok((file, bytes)) => {
                    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
                    return Ok(ReadyRow {
                        sha: sha256_hex(&bytes),
                        image: ImageRef {
                            bytes: Some(bytes),
                            path: name,
                        },
                        family: opts.family.clone(),
                        pending,
                    });
                }
                Err(m) if leave_out => pending.unread = Some(("image".to_string(), m)),
                Err(m) => return Err(DatasetError::Invalid(format!("{}: {m}", pending.origin))),
            }
        }
        // No image: `write_rows` leaves the row out before it looks at one.
        Ok(ReadyRow {
            image: ImageRef::default(),
            sha: String::new(),
            family: None,
            pending,
        })
    });
    write_rows(opts, &columns, ready, check)
}

fn no_rows() -> DatasetError {
    DatasetError::Invalid(
        "no rows to prepare (empty input or nothing matches the split filter)".into(),
    )
}

/// One row left out by the [`RowCheck`]: `"<origin>: field <field>: <message>"`, where the
/// origin is `file:line` of a JSONL or `file: row N` of a parquet input.
fn left_out_message(origin: &str, (field, message): (String, String)) -> String {
    format!("{origin}: field {field}: {message}")
}

/// Write the rows that pass `check` as `opts.split` into `opts.out/data/`, in row groups of
/// `opts.shard.rows_per_group`; the others are left out, each named in
/// [`PrepareSummary::left_out`].
///
/// Errors: the first error of `rows`, no row passing `check` (listing why each was left
/// out), or a write failure.
fn write_rows(
    opts: &PrepareOptions,
    columns: &Columns,
    rows: impl Iterator<Item = Result<ReadyRow, DatasetError>>,
    check: RowCheck,
) -> Result<PrepareSummary, DatasetError> {
    let schema = columns.schema();
    let mut writer = ShardedWriter::create(
        &opts.out.join("data"),
        &opts.split,
        schema.clone(),
        opts.shard,
    )?;
    let mut ready: Vec<ReadyRow> = Vec::with_capacity(opts.shard.rows_per_group);
    let (mut qa_items, mut written, mut left_out) = (0u64, 0u64, Vec::new());
    let mut families = BTreeSet::new();
    for row in rows {
        let mut row = row?;
        if let Some(problem) = row.pending.unread.take() {
            left_out.push(left_out_message(&row.pending.origin, problem));
            continue;
        }
        if row.pending.qa.is_empty() {
            // `run` reports such a row as an error of field `qa`.
            let problem = ("qa".to_string(), "row has no questions".to_string());
            left_out.push(left_out_message(&row.pending.origin, problem));
            continue;
        }
        let items: Vec<QaItem> = row.pending.qa.iter().map(PendingQa::to_item).collect();
        let bytes = row.image.bytes.as_deref().unwrap_or_default();
        let refused = row.pending.refused.take();
        let problems = match check(bytes, &items, row.pending.columns.as_ref())
            .and_then(|p| refused.map_or(Ok(p), Err))
        {
            Ok(problems) => problems,
            Err(problem) => {
                left_out.push(left_out_message(&row.pending.origin, problem));
                continue;
            }
        };
        let origin = row.pending.origin.clone();
        let mut kept = Vec::with_capacity(row.pending.qa.len());
        for (i, mut qa) in std::mem::take(&mut row.pending.qa).into_iter().enumerate() {
            let problem = qa
                .unread
                .take()
                .or_else(|| problems.get(i).cloned().flatten());
            match problem.or_else(|| qa.refused.take()) {
                Some(problem) => {
                    let at = qa.origin.as_deref().unwrap_or(&origin);
                    left_out.push(left_out_message(at, problem));
                }
                None => kept.push(qa),
            }
        }
        if kept.is_empty() {
            continue;
        }
        row.pending.qa = kept;
        qa_items += row.pending.qa.len() as u64;
        written += 1;
        families.insert(crate::family::split_family(row.family.as_deref()));
        ready.push(row);
        if ready.len() >= opts.shard.rows_per_group {
            writer.write(&ready_batch(&ready, &schema, columns)?)?;
            ready.clear();
        }
    }
    if written == 0 {
        return Err(DatasetError::Invalid(format!(
            "no rows to prepare: every row was left out:\n{}",
            left_out.join("\n")
        )));
    }
    if !ready.is_empty() {
        writer.write(&ready_batch(&ready, &schema, columns)?)?;
    }
    Ok(PrepareSummary {
        shards: writer.finish()?,
        qa_items,
        left_out,
        family_case_clashes: crate::dataset::families::case_clashes(&families),
    })
}

mod from_parquet;
mod jsonl;

#[cfg(test)]
mod tests;
