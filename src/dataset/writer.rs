//! The three output splits of contract §7 (`<Family>_RS_think`, `<Family>_RS_nothink`,
//! `<Family>_rejected`): Arrow schema, typed writer, and the reader that gives the same
//! [`OutputRow`]s back.
//!
//! Schema (all fields nullable, plain `binary`/`string`/`list`, as `datasets` writes):
//!
//! | column | Arrow type |
//! | --- | --- |
//! | `image` | `struct<bytes: binary, path: string>` (HF `Image()`) |
//! | `qa` | `list<struct<…>>`, fields per [`QaRecord::field_names`] |
//! | `clean_meta` | `string` (a JSON object) |
//! | `image_sha256` | `string` (hex SHA-256 of `image.bytes`) |
//! | the input's other columns | as in the input ([`super::carry`]), after these four |
//!
//! `qa` fields: think split `question, answer, org_answer, vlm_answer, think, accepted_by,
//! judge_verdict, judge_raw`; nothink split the same without `think`; rejected split `question, answer,
//! wrong_vlm, reason, judge_verdict, judge_raw`. `None` is written as null.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sha2::{Digest, Sha256};

use super::reader::resolve_inputs;
use super::shards::{list_shards, ShardOptions, ShardSummary, ShardedWriter};
use super::values::{as_struct, get_bytes, get_list, get_string};
use super::DatasetError;
use crate::record::{AcceptedQa, ImageRef, OutputRow, RejectedQa, SplitKind};

/// A `qa` entry type that can be stored in an output split. All its fields are strings.
pub trait QaRecord: Sized {
    /// Whether this entry type belongs in splits of `kind`.
    fn supports(kind: SplitKind) -> bool;
    /// The `qa` struct field names of `kind`, in column order.
    fn field_names(kind: SplitKind) -> &'static [&'static str];
    /// The value of field `name` (`None` → null).
    fn field(&self, name: &str) -> Option<&str>;
    /// Rebuild an entry from its fields; `get(name)` gives a field's value (`None` for a null
    /// or absent field). Errors: `(field, message)` when a required field is null or absent.
    fn from_fields(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, (String, String)>;
}

fn required(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<String, (String, String)> {
    get(name).ok_or_else(|| {
        (
            name.to_string(),
            "required field is null or missing".to_string(),
        )
    })
}

const THINK_FIELDS: &[&str] = &[
    "question",
    "answer",
    "org_answer",
    "vlm_answer",
    "think",
    "accepted_by",
    "judge_verdict",
    "judge_raw",
];
const NOTHINK_FIELDS: &[&str] = &[
    "question",
    "answer",
    "org_answer",
    "vlm_answer",
    "accepted_by",
    "judge_verdict",
    "judge_raw",
];
const REJECTED_FIELDS: &[&str] = &[
    "question",
    "answer",
    "wrong_vlm",
    "reason",
    "judge_verdict",
    "judge_raw",
];

impl QaRecord for AcceptedQa {
    fn supports(kind: SplitKind) -> bool {
        matches!(kind, SplitKind::Think | SplitKind::NoThink)
    }

    fn field_names(kind: SplitKind) -> &'static [&'static str] {
        match kind {
            SplitKind::Think => THINK_FIELDS,
            _ => NOTHINK_FIELDS,
        }
    }

    fn field(&self, name: &str) -> Option<&str> {
        match name {
            "question" => Some(&self.question),
            "answer" => Some(&self.answer),
            "org_answer" => Some(&self.org_answer),
            "vlm_answer" => Some(&self.vlm_answer),
            "think" => self.think.as_deref(),
            "accepted_by" => Some(&self.accepted_by),
            "judge_verdict" => self.judge_verdict.as_deref(),
            "judge_raw" => self.judge_raw.as_deref(),
            _ => None,
        }
    }

    fn from_fields(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, (String, String)> {
        Ok(Self {
            question: required(get, "question")?,
            answer: required(get, "answer")?,
            org_answer: required(get, "org_answer")?,
            vlm_answer: required(get, "vlm_answer")?,
            think: get("think"),
            accepted_by: required(get, "accepted_by")?,
            judge_verdict: get("judge_verdict"),
            judge_raw: get("judge_raw"),
        })
    }
}

impl QaRecord for RejectedQa {
    fn supports(kind: SplitKind) -> bool {
        kind == SplitKind::Rejected
    }

    fn field_names(_kind: SplitKind) -> &'static [&'static str] {
        REJECTED_FIELDS
    }

    fn field(&self, name: &str) -> Option<&str> {
        match name {
            "question" => Some(&self.question),
            "answer" => Some(&self.answer),
            "wrong_vlm" => Some(&self.wrong_vlm),
            "reason" => Some(&self.reason),
            "judge_verdict" => self.judge_verdict.as_deref(),
            "judge_raw" => self.judge_raw.as_deref(),
            _ => None,
        }
    }

    fn from_fields(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, (String, String)> {
        Ok(Self {
            question: required(get, "question")?,
            answer: required(get, "answer")?,
            wrong_vlm: required(get, "wrong_vlm")?,
            reason: required(get, "reason")?,
            judge_verdict: get("judge_verdict"),
            judge_raw: get("judge_raw"),
        })
    }
}

/// The `image` column type: `struct<bytes: binary, path: string>`.
pub fn image_fields() -> Fields {
    Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ])
}

/// The `qa` item struct fields of `kind` (all nullable strings).
pub fn qa_fields(kind: SplitKind) -> Fields {
    let names = match kind {
        SplitKind::Think => THINK_FIELDS,
        SplitKind::NoThink => NOTHINK_FIELDS,
        SplitKind::Rejected => REJECTED_FIELDS,
    };
    Fields::from(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    )
}

/// The Arrow schema of an output split of `kind` carrying no input column (see the module
/// docs).
pub fn split_schema(kind: SplitKind) -> SchemaRef {
    split_schema_carrying(kind, &Fields::empty())
}

/// The Arrow schema of an output split of `kind` carrying the input's columns `carried`
/// ([`super::carry`]) after its own.
pub fn split_schema_carrying(kind: SplitKind, carried: &Fields) -> SchemaRef {
    let item = Field::new("item", DataType::Struct(qa_fields(kind)), true);
    let mut fields = vec![
        Arc::new(Field::new("image", DataType::Struct(image_fields()), true)),
        Arc::new(Field::new("qa", DataType::List(Arc::new(item)), true)),
        Arc::new(Field::new("clean_meta", DataType::Utf8, true)),
        Arc::new(Field::new("image_sha256", DataType::Utf8, true)),
    ];
    fields.extend(carried.iter().cloned());
    Arc::new(Schema::new(fields))
}

/// The carried columns of a split schema: every column after the four of its own.
pub fn carried_of(schema: &Schema) -> Fields {
    schema
        .fields()
        .iter()
        .filter(|f| !super::carry::SPLIT_COLUMNS.contains(&f.name().as_str()))
        .cloned()
        .collect()
}

/// The carried columns of `rows` as `carried` says them: each column the rows' one-row
/// batches hold (null for a row without one).
///
/// Errors: [`DatasetError::Invalid`] for a row whose carried columns are not `carried`.
fn carried_arrays<Q>(
    rows: &[OutputRow<Q>],
    carried: &Fields,
) -> Result<Vec<ArrayRef>, DatasetError> {
    carried
        .iter()
        .map(|field| {
            let parts = rows
                .iter()
                .map(|r| match &r.carried {
                    None => Ok(new_null_array(field.data_type(), 1)),
                    Some(b) => b
                        .column_by_name(field.name())
                        .filter(|c| c.data_type() == field.data_type() && c.len() == 1)
                        .cloned()
                        .ok_or_else(|| {
                            DatasetError::Invalid(format!(
                                "output row of image {} does not carry the column `{}` as {}",
                                r.image_sha256,
                                field.name(),
                                field.data_type()
                            ))
                        }),
                })
                .collect::<Result<Vec<ArrayRef>, DatasetError>>()?;
            let refs: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
            Ok(arrow::compute::concat(&refs)?)
        })
        .collect()
}

/// Hex SHA-256 of `bytes` (lowercase).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Build the `image` struct column from images.
pub fn image_array<'a>(images: impl Iterator<Item = &'a ImageRef>) -> StructArray {
    let (bytes, paths): (Vec<Option<&[u8]>>, Vec<Option<&str>>) = images
        .map(|im| (im.bytes.as_deref(), im.path.as_deref()))
        .unzip();
    StructArray::new(
        image_fields(),
        vec![
            Arc::new(BinaryArray::from(bytes)) as ArrayRef,
            Arc::new(StringArray::from(paths)) as ArrayRef,
        ],
        None,
    )
}

/// Build one record batch of output rows of `kind` carrying the input columns `carried`.
///
/// Errors: [`DatasetError::Arrow`] if the arrays are inconsistent (a bug);
/// [`DatasetError::Invalid`] for a row whose carried columns are not `carried`.
pub fn rows_to_batch<Q: QaRecord>(
    rows: &[OutputRow<Q>],
    kind: SplitKind,
    carried: &Fields,
) -> Result<RecordBatch, DatasetError> {
    let schema = split_schema_carrying(kind, carried);
    let names = Q::field_names(kind);
    let items: Vec<&Q> = rows.iter().flat_map(|r| r.qa.iter()).collect();
    let columns: Vec<ArrayRef> = names
        .iter()
        .map(|n| Arc::new(StringArray::from_iter(items.iter().map(|q| q.field(n)))) as ArrayRef)
        .collect();
    let values = StructArray::try_new(qa_fields(kind), columns, None)?;
    let item_field = Arc::new(Field::new("item", DataType::Struct(qa_fields(kind)), true));
    let qa = ListArray::try_new(
        item_field,
        OffsetBuffer::from_lengths(rows.iter().map(|r| r.qa.len())),
        Arc::new(values),
        None,
    )?;
    let image = image_array(rows.iter().map(|r| &r.image));
    let meta = StringArray::from_iter_values(rows.iter().map(|r| r.clean_meta.as_str()));
    let sha = StringArray::from_iter_values(rows.iter().map(|r| r.image_sha256.as_str()));
    let mut columns: Vec<ArrayRef> =
        vec![Arc::new(image), Arc::new(qa), Arc::new(meta), Arc::new(sha)];
    columns.extend(carried_arrays(rows, carried)?);
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Writes one output split as sharded parquet under `<out>/data/`.
#[derive(Debug)]
pub struct SplitWriter<Q: QaRecord> {
    kind: SplitKind,
    /// The input's columns each row carries ([`super::carry`]).
    carried: Fields,
    rows_per_group: usize,
    buffer: Vec<OutputRow<Q>>,
    inner: ShardedWriter,
}

impl<Q: QaRecord> SplitWriter<Q> {
    /// Start the split `kind.split_name(family)` in `<out_dir>/data/`, carrying no input
    /// column.
    ///
    /// Errors: `Q` does not belong in `kind` (e.g. `RejectedQa` in a think split), invalid
    /// family or options, or the folder cannot be created.
    pub fn create(
        out_dir: &Path,
        family: &str,
        kind: SplitKind,
        opts: ShardOptions,
    ) -> Result<Self, DatasetError> {
        Self::create_carrying(out_dir, family, kind, opts, Fields::empty())
    }

    /// [`SplitWriter::create`] for rows carrying the input's columns `carried`
    /// ([`OutputRow::carried`]), written after the split's own.
    ///
    /// Errors: as [`SplitWriter::create`].
    pub fn create_carrying(
        out_dir: &Path,
        family: &str,
        kind: SplitKind,
        opts: ShardOptions,
        carried: Fields,
    ) -> Result<Self, DatasetError> {
        if !Q::supports(kind) {
            return Err(DatasetError::Invalid(format!(
                "{} entries cannot be written to a {kind:?} split",
                std::any::type_name::<Q>()
            )));
        }
        if !crate::family::is_valid_family_name(family) {
            return Err(DatasetError::Invalid(format!(
                "family {family:?} must be {}",
                crate::family::FAMILY_NAME_RULE
            )));
        }
        let inner = ShardedWriter::create(
            &out_dir.join(crate::out_files::SPLITS_DIR),
            &kind.split_name(family),
            split_schema_carrying(kind, &carried),
            opts,
        )?;
        Ok(Self {
            kind,
            carried,
            rows_per_group: opts.rows_per_group,
            buffer: Vec::new(),
            inner,
        })
    }

    /// Add one row. Rows are written in the order given, in row groups of `rows_per_group`.
    ///
    /// Errors: the row has no `qa` entries, no image bytes, an `image_sha256` that is not the
    /// SHA-256 of its bytes, a `clean_meta` that is not a JSON object, or carried columns
    /// that are not the writer's; or a write fails.
    pub fn write_row(&mut self, row: OutputRow<Q>) -> Result<(), DatasetError> {
        let bytes = row
            .image
            .bytes
            .as_deref()
            .ok_or_else(|| DatasetError::Invalid("output row without image bytes".into()))?;
        if row.qa.is_empty() {
            return Err(DatasetError::Invalid(format!(
                "output row for image {} has no qa entries",
                row.image_sha256
            )));
        }
        let sha = sha256_hex(bytes);
        if sha != row.image_sha256 {
            return Err(DatasetError::Invalid(format!(
                "image_sha256 {} is not the hash of the image bytes ({sha})",
                row.image_sha256
            )));
        }
        if !matches!(
            serde_json::from_str(&row.clean_meta),
            Ok(serde_json::Value::Object(_))
        ) {
            return Err(DatasetError::Invalid(format!(
                "clean_meta of image {} is not a JSON object: {:?}",
                row.image_sha256, row.clean_meta
            )));
        }
        if let Some(b) = &row.carried {
            let same = b.num_rows() == 1
                && b.schema().fields().len() == self.carried.len()
                && b.schema()
                    .fields()
                    .iter()
                    .zip(self.carried.iter())
                    .all(|(a, c)| a.name() == c.name() && a.data_type() == c.data_type());
            if !same {
                return Err(DatasetError::Invalid(format!(
                    "output row of image {} carries the columns {:?}, not the split's {:?}",
                    row.image_sha256,
                    b.schema().fields(),
                    self.carried
                )));
            }
        }
        self.buffer.push(row);
        if self.buffer.len() >= self.rows_per_group {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DatasetError> {
        if !self.buffer.is_empty() {
            let batch = rows_to_batch(&self.buffer, self.kind, &self.carried)?;
            self.inner.write(&batch)?;
            self.buffer.clear();
        }
        Ok(())
    }

    /// Write the remaining rows and close the last shard; returns the final names of the
    /// split's shards, published only by [`SplitWriter::finish`] (see [`ShardedWriter::seal`]).
    ///
    /// Errors: a write fails.
    pub fn seal(&mut self) -> Result<Vec<String>, DatasetError> {
        self.flush()?;
        self.inner.seal()
    }

    /// Write the remaining rows and publish the shards, replacing the older shards of the
    /// split that `replaceable` accepts (see [`ShardedWriter::finish_replacing`]).
    ///
    /// Errors: a write, remove or rename fails.
    pub fn finish(
        mut self,
        replaceable: impl Fn(&Path) -> bool,
    ) -> Result<ShardSummary, DatasetError> {
        self.flush()?;
        self.inner.finish_replacing(replaceable)
    }
}

/// The shard files of split `split` in output directory `out_dir` (`<out_dir>/data/<split>-*`).
///
/// Errors: the folder cannot be listed.
pub fn split_files(out_dir: &Path, split: &str) -> Result<Vec<PathBuf>, DatasetError> {
    list_shards(&out_dir.join(crate::out_files::SPLITS_DIR), split)
}

/// The input columns the split shard `shard` carries ([`carried_of`] its schema, from its
/// footer); `None` when it carries none or cannot be read.
pub fn carried_columns(shard: &Path) -> Option<SchemaRef> {
    let carried = carried_of(&*super::layout::file_schema(shard)?);
    (!carried.is_empty()).then(|| Arc::new(Schema::new(carried)))
}

/// Read every row of an accepted split (think or nothink: a missing `think` field reads as
/// `None`). `path` is a parquet file, a glob, or a folder holding only this split's files.
///
/// Errors: no such input, unreadable parquet, or a row that does not decode (named by file,
/// row and field).
pub fn read_accepted_split(path: &Path) -> Result<Vec<OutputRow<AcceptedQa>>, DatasetError> {
    read_split(path)
}

/// Read every row of a rejected split. `path` as in [`read_accepted_split`].
///
/// Errors: as [`read_accepted_split`].
pub fn read_rejected_split(path: &Path) -> Result<Vec<OutputRow<RejectedQa>>, DatasetError> {
    read_split(path)
}

/// Read every row of an output split of entry type `Q`, in file then row order.
///
/// Errors: as [`read_accepted_split`].
pub fn read_split<Q: QaRecord>(path: &Path) -> Result<Vec<OutputRow<Q>>, DatasetError> {
    let inputs = resolve_inputs(&path.to_string_lossy())?;
    let mut out = Vec::new();
    for file in &inputs.files {
        out.extend(DatasetError::isolated(file, || read_split_file(file))?);
    }
    Ok(out)
}

/// The rows of one shard file of an output split.
///
/// Errors: as [`read_accepted_split`].
fn read_split_file<Q: QaRecord>(file: &Path) -> Result<Vec<OutputRow<Q>>, DatasetError> {
    let name = file.display().to_string();
    let f = std::fs::File::open(file).map_err(|e| DatasetError::io(file, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .map_err(|e| DatasetError::parquet(file, e))?
        .with_batch_size(super::reader::BATCH_ROWS)
        .build()
        .map_err(|e| DatasetError::parquet(file, e))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(DatasetError::Arrow)?;
        let row = out.len();
        // The carried columns, kept apart from the images so a row's slice holds no image.
        let carried: Vec<usize> = (0..batch.num_columns())
            .filter(|&c| {
                !super::carry::SPLIT_COLUMNS.contains(&batch.schema().field(c).name().as_str())
            })
            .collect();
        let carried = (!carried.is_empty())
            .then(|| batch.project(&carried))
            .transpose()?;
        for i in 0..batch.num_rows() {
            let decoded = decode_output_row::<Q>(&batch, i).map(|mut r| {
                r.carried = carried.as_ref().map(|c| c.slice(i, 1));
                r
            });
            let decoded = decoded.map_err(|(field, message)| DatasetError::Decode {
                file: name.clone(),
                row: row + i,
                field,
                message,
            })?;
            out.push(decoded);
        }
    }
    Ok(out)
}

fn decode_output_row<Q: QaRecord>(
    batch: &RecordBatch,
    i: usize,
) -> Result<OutputRow<Q>, (String, String)> {
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| (name.to_string(), format!("missing column `{name}`")))
    };
    let req_string = |name: &str| -> Result<String, (String, String)> {
        get_string(col(name)?.as_ref(), i)
            .map_err(|m| (name.to_string(), m))?
            .ok_or_else(|| (name.to_string(), "null".to_string()))
    };
    let image_col = col("image")?;
    let image_struct = as_struct(image_col.as_ref()).map_err(|m| ("image".to_string(), m))?;
    let bytes = match image_struct.column_by_name("bytes") {
        Some(c) => get_bytes(c.as_ref(), i).map_err(|m| ("image.bytes".to_string(), m))?,
        None => None,
    };
    let path = match image_struct.column_by_name("path") {
        Some(c) => get_string(c.as_ref(), i).map_err(|m| ("image.path".to_string(), m))?,
        None => None,
    };
    let items = get_list(col("qa")?.as_ref(), i)
        .map_err(|m| ("qa".to_string(), m))?
        .ok_or_else(|| ("qa".to_string(), "null".to_string()))?;
    let s = as_struct(items.as_ref()).map_err(|m| ("qa".to_string(), m))?;
    let mut qa = Vec::with_capacity(s.len());
    for j in 0..s.len() {
        let mut bad: Option<(String, String)> = None;
        let get = |name: &str| -> Option<String> {
            let c = s.column_by_name(name)?;
            get_string(c.as_ref(), j).ok().flatten()
        };
        // Report wrong types explicitly instead of reading them as null.
        for f in s.fields().iter() {
            if let Some(c) = s.column_by_name(f.name()) {
                if let Err(m) = get_string(c.as_ref(), j) {
                    bad = Some((format!("qa[{j}].{}", f.name()), m));
                }
            }
        }
        if let Some(b) = bad {
            return Err(b);
        }
        qa.push(Q::from_fields(&get).map_err(|(f, m)| (format!("qa[{j}].{f}"), m))?);
    }
    Ok(OutputRow {
        image: ImageRef { bytes, path },
        qa,
        clean_meta: req_string("clean_meta")?,
        image_sha256: req_string("image_sha256")?,
        carried: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_per_kind() {
        let names = |k| -> Vec<String> { qa_fields(k).iter().map(|f| f.name().clone()).collect() };
        assert_eq!(
            names(SplitKind::Think),
            [
                "question",
                "answer",
                "org_answer",
                "vlm_answer",
                "think",
                "accepted_by",
                "judge_verdict",
                "judge_raw"
            ]
        );
        assert!(!names(SplitKind::NoThink).contains(&"think".to_string()));
        assert_eq!(
            names(SplitKind::Rejected),
            [
                "question",
                "answer",
                "wrong_vlm",
                "reason",
                "judge_verdict",
                "judge_raw"
            ]
        );
        let s = split_schema(SplitKind::Think);
        let cols: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(cols, ["image", "qa", "clean_meta", "image_sha256"]);
        assert!(s.fields().iter().all(|f| f.is_nullable()));
        assert_eq!(s.field(0).data_type(), &DataType::Struct(image_fields()));
        let img: Vec<(String, DataType, bool)> = image_fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
            .collect();
        assert_eq!(
            img,
            [
                ("bytes".to_string(), DataType::Binary, true),
                ("path".to_string(), DataType::Utf8, true)
            ]
        );
    }

    #[test]
    fn sha256_of_known_input() {
        // FIPS 180-2 test vector "abc".
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn wrong_entry_type_for_kind_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = SplitWriter::<RejectedQa>::create(
            dir.path(),
            "OrandCar",
            SplitKind::Think,
            ShardOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot be written"), "{e}");
        assert!(SplitWriter::<AcceptedQa>::create(
            dir.path(),
            "Orand-Car",
            SplitKind::Think,
            ShardOptions::default()
        )
        .is_err());
    }
}
