//! The reader's second try at a row group whose batch failed on a `string` value that is not
//! UTF-8: the group re-read with those columns as binary, so only the bad rows become errors.

use std::collections::BTreeSet;
use std::fs::File;
use std::sync::Arc;

use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::file::metadata::{FileMetaData, ParquetMetaData};
use parquet::schema::types::{SchemaDescriptor, Type, TypePtr};

use super::{OpenFile, BATCH_ROWS};

/// Fallback for a row group whose batch failed on a `string` value that is not UTF-8: the rest
/// of the group re-read ([`reread_with_binary_strings`]), only the bad rows errors (naming the
/// field, e.g. `qa[0].answer`). `None`: the caller reports the rest of the group as one error.
pub(super) fn fall_back_per_row(cur: &mut OpenFile) -> Option<()> {
    let g = cur.next_group.checked_sub(1)?;
    let offset = cur.next_row.checked_sub(cur.group_start)?;
    let reader = reread_with_binary_strings(&cur.file, &cur.meta, g, offset..cur.group_rows)?;
    cur.batches = Some(reader);
    cur.retried = true;
    Some(())
}

/// A reader of rows `rows` (within the group) of row group `g` of `file` (footer `meta`), each
/// `string` column holding a value that is not UTF-8 read as binary, [`BATCH_ROWS`] a batch:
/// how `run` ([`super::InputReader`]) and `inspect` read such a group, each bad value one row's field
/// error ([`super::row_errors`]). `None` when no such value explains the failure or on a read error.
pub(crate) fn reread_with_binary_strings(
    file: &File,
    meta: &ArrowReaderMetadata,
    g: usize,
    rows: std::ops::Range<usize>,
) -> Option<ParquetRecordBatchReader> {
    let bad = bad_string_columns(file, g).ok()?;
    if bad.is_empty() {
        return None;
    }
    let md = meta.metadata();
    let group_rows = usize::try_from(md.row_group(g).num_rows()).ok()?;
    let root = as_binary(
        &md.file_metadata().schema_descr().root_schema_ptr(),
        None,
        &bad,
    )
    .ok()?;
    let fm = md.file_metadata();
    let file_meta = FileMetaData::new(
        fm.version(),
        fm.num_rows(),
        fm.created_by().map(str::to_string),
        None,
        Arc::new(SchemaDescriptor::new(root)),
        fm.column_orders().cloned(),
    );
    let meta = ArrowReaderMetadata::try_new(
        Arc::new(ParquetMetaData::new(file_meta, md.row_groups().to_vec())),
        ArrowReaderOptions::new().with_skip_arrow_metadata(true),
    )
    .ok()?;
    let selection = RowSelection::from_consecutive_ranges(std::iter::once(rows), group_rows);
    file.try_clone().ok().and_then(|f| {
        ParquetRecordBatchReaderBuilder::new_with_metadata(f, meta)
            .with_row_groups(vec![g])
            .with_row_selection(selection)
            .with_batch_size(BATCH_ROWS)
            .build()
            .ok()
    })
}

/// `ty` with every leaf whose column path (dot-joined, below the root) is in `bad` stripped
/// of its string annotation, so arrow reads it as `Binary`. `path` is `None` for the schema
/// root, else the column path of `ty`.
///
/// Errors: the parquet error of a type builder (only on an invalid schema).
fn as_binary(
    ty: &TypePtr,
    path: Option<&str>,
    bad: &BTreeSet<String>,
) -> Result<TypePtr, parquet::errors::ParquetError> {
    let info = ty.get_basic_info();
    let id = info.has_id().then(|| info.id());
    if ty.is_primitive() {
        if !path.is_some_and(|p| bad.contains(p)) {
            return Ok(ty.clone());
        }
        let mut b = Type::primitive_type_builder(info.name(), ty.get_physical_type());
        if info.has_repetition() {
            b = b.with_repetition(info.repetition());
        }
        return Ok(Arc::new(b.with_id(id).build()?));
    }
    let mut fields = Vec::with_capacity(ty.get_fields().len());
    for f in ty.get_fields() {
        let name = f.get_basic_info().name();
        let child = match path {
            None => name.to_string(),
            Some(p) => format!("{p}.{name}"),
        };
        fields.push(as_binary(f, Some(&child), bad)?);
    }
    let mut b = Type::group_type_builder(info.name())
        .with_fields(fields)
        .with_logical_type(info.logical_type_ref().cloned())
        .with_converted_type(info.converted_type())
        .with_id(id);
    if info.has_repetition() {
        b = b.with_repetition(info.repetition());
    }
    Ok(Arc::new(b.build()?))
}

/// The paths (dot-joined, e.g. `qa.list.element.answer`) of the `string` leaf columns of row
/// group `g` holding a value that is not UTF-8, found by reading the raw byte arrays.
///
/// Errors: the parquet error when the row group cannot be read at the column level.
fn bad_string_columns(
    file: &File,
    g: usize,
) -> Result<BTreeSet<String>, parquet::errors::ParquetError> {
    use parquet::basic::{ConvertedType, LogicalType};
    use parquet::column::reader::ColumnReader;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(file.try_clone()?)?;
    let group = reader.get_row_group(g)?;
    let rows = usize::try_from(group.metadata().num_rows()).unwrap_or(0);
    let mut out = BTreeSet::new();
    for c in 0..group.num_columns() {
        let descr = group.metadata().column(c).column_descr_ptr();
        let is_string = matches!(descr.logical_type_ref(), Some(LogicalType::String))
            || descr.converted_type() == ConvertedType::UTF8;
        if !is_string {
            continue;
        }
        let ColumnReader::ByteArrayColumnReader(mut col) = group.get_column_reader(c)? else {
            continue;
        };
        let (mut defs, mut reps, mut values) = (Vec::new(), Vec::new(), Vec::new());
        col.read_records(rows, Some(&mut defs), Some(&mut reps), &mut values)?;
        if values
            .iter()
            .any(|v| std::str::from_utf8(v.data()).is_err())
        {
            out.insert(descr.path().parts().join("."));
        }
    }
    Ok(out)
}
