//! `prepare --parquet INPUT`: SPEC §2's `qa` layout from any parquet input the reader takes
//! (file, folder or glob; the `qa` layout or a flat one, its columns named by
//! `--image-column`/`--question-column`/`--answer-column` or detected, [`Layout::resolve`]).
//! One output row per input row: the image bytes as stored (an image given by path is read
//! under the input's folder), `image.path` its file name, the references as read (a list
//! answer stays a list), the input's other columns as provenance columns (strings; other
//! values as JSON text), `family` from `--family` else the input's.

use serde_json::Value;

use super::{
    no_rows, rename_reserved, write_rows, Columns, PendingQa, PendingRow, PrepareOptions,
    PrepareSummary, ReadyRow, RowCheck, RESERVED,
};
use crate::dataset::layout::{file_columns, ColumnFlags, Layout, ReadOptions};
use crate::dataset::reader::{resolve_inputs, InputReader};
use crate::dataset::writer::sha256_hex;
use crate::dataset::DatasetError;
use crate::record::{ImageRef, InputRow, RowError};

/// A row the reader refused, as the error that stops `prepare` (naming file, row, field).
fn row_error(e: &RowError) -> DatasetError {
    DatasetError::Invalid(match e.row {
        Some(r) => format!("{}: row {r}: field {}: {}", e.file, e.field, e.message),
        None => format!("{}: field {}: {}", e.file, e.field, e.message),
    })
}

/// The text part of an input row (its image stays with the caller).
fn pending(row: &InputRow) -> PendingRow {
    let qa = row
        .qa
        .iter()
        .map(|q| {
            let mut extra = rename_reserved(q.extra.clone(), &["source"]);
            if let Some(s) = &q.source {
                extra.insert("orig_source".into(), Value::String(s.clone()));
            }
            PendingQa {
                question: q.question.clone(),
                answers: q.references().into_iter().map(str::to_string).collect(),
                listed: q.answer_list.is_some(),
                extra,
                origin: None,
            }
        })
        .collect();
    PendingRow {
        origin: format!("{}: row {}", row.source_file, row.row_index),
        image_rel: String::new(),
        qa,
        provenance: rename_reserved(row.extra.clone(), &RESERVED),
    }
}

/// Write `input` (read with `columns`) as `opts.split` into `opts.out`. Two passes over the
/// input: the first finds the columns of the output (and the first bad row) without keeping
/// images, the second writes.
///
/// Errors: [`DatasetError::Choice`] when the first file's columns do not resolve to a
/// layout (ambiguous or missing, listing the columns found); a row the reader refuses
/// (naming file, row and field); no rows; I/O.
pub(super) fn prepare_parquet(
    opts: &PrepareOptions,
    input: &str,
    columns: &ColumnFlags,
    check: RowCheck,
) -> Result<PrepareSummary, DatasetError> {
    let inputs = resolve_inputs(input)?;
    if let Some(found) = inputs.files.first().and_then(|f| file_columns(f)) {
        Layout::resolve(&found, columns).map_err(|e| {
            DatasetError::Choice(format!("--parquet {}: {e}", inputs.files[0].display()))
        })?;
    }
    let read = ReadOptions {
        columns: columns.clone(),
        ..ReadOptions::default()
    };
    let pendings = InputReader::open_with(input, &read)?
        .map(|row| row.map(|r| pending(&r)).map_err(|e| row_error(&e)))
        .collect::<Result<Vec<_>, _>>()?;
    if pendings.is_empty() {
        return Err(no_rows());
    }
    let out_columns = Columns::of(&pendings);
    let rows = InputReader::open_with(input, &read)?
        .zip(pendings)
        .map(|(row, pending)| {
            let row = row.map_err(|e| row_error(&e))?;
            let bytes = row.image.bytes.unwrap_or_default();
            let name = row.image.path.as_deref().and_then(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            });
            Ok(ReadyRow {
                sha: sha256_hex(&bytes),
                image: ImageRef {
                    bytes: Some(bytes),
                    path: name,
                },
                family: opts.family.clone().or(row.family),
                pending,
            })
        });
    write_rows(opts, &out_columns, rows, check)
}
