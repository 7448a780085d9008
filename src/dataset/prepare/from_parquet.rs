//! `prepare --parquet INPUT`: contract §2's `qa` layout from any parquet input the reader takes
//! (file, folder or glob; the `qa` layout or a flat one, its columns named by
//! `--image-column`/`--question-column`/`--answer-column` or detected, [`Layout::resolve`]).
//! One output row per input row: the image bytes as stored (an image given by path is read
//! under the input's folder), `image.path` its file name, the references as read (a list
//! answer stays a list), the input's other columns as provenance columns typed by their
//! values as JSON ([`super::ColumnKind`]: integer columns `int64`, floating-point `float64`,
//! booleans `bool`, strings `string`; lists, structs, dates and the like as JSON text),
//! `family` from `--family` else the input's. (`run` itself carries an input's columns with
//! their own Arrow types: `dataset::carry`.)
//!
//! A row `run` would not take is left out, as the row check's are (named in
//! [`PrepareSummary::left_out`]): one the reader refuses (a null image or `qa`, an answer
//! of a type `run` reports per row), one whose `family` cannot name a split or whose stored
//! `image_sha256` is not its image's, and a question whose `source` is neither.

use serde_json::{Map, Value};

use super::{
    no_rows, rename_reserved, write_rows, Columns, PendingQa, PendingRow, PrepareOptions,
    PrepareSummary, ReadyRow, RowCheck, RESERVED,
};
use crate::clean::{Action, CleanPolicy, DropReason, Pass, RowContext};
use crate::dataset::layout::{file_columns, ColumnFlags, Layout, ReadOptions};
use crate::dataset::reader::{resolve_inputs, InputReader};
use crate::dataset::writer::sha256_hex;
use crate::dataset::DatasetError;
use crate::family::{is_valid_family_name, split_family};
use crate::record::{ImageRef, InputRow, RowError};

/// A row (or row group, or file) the reader refused, as a row `prepare` leaves out, its
/// origin naming file and row (`rows A-B` for a row group, the file alone when no row is
/// known), the refusal naming the field.
fn unread(e: &RowError) -> PendingRow {
    let origin = match (e.row, e.rows) {
        (Some(r), Some(n)) if n > 1 => format!("{}: rows {r}-{}", e.file, r as u64 + n - 1),
        (Some(r), _) => format!("{}: row {r}", e.file),
        (None, _) => e.file.clone(),
    };
    PendingRow {
        origin,
        image_rel: String::new(),
        qa: Vec::new(),
        provenance: Map::new(),
        columns: None,
        unread: Some((e.field.clone(), e.message.clone())),
        refused: None,
    }
}

/// What `run` refuses in `row` once its image passed the check, written as `family`:
/// a family that cannot name a split (`run`'s row error), else a stored `image_sha256`
/// that is not the image's (cleaning's `image_sha256_mismatch`, contract §3). Then per item a
/// `source` neither the image's hash nor its path (`provenance_mismatch`). `prepare` writes
/// the true hash and keeps `source` as `orig_source`, so without this `run` would take from
/// the prepared data what it drops from the input.
fn refusals(row: &InputRow, ctx: &RowContext<'_>, family: Option<&str>, pending: &mut PendingRow) {
    let split = split_family(family);
    if !is_valid_family_name(&split) {
        let rule = crate::family::FAMILY_NAME_RULE;
        let message = format!("family {split:?} cannot name a split ({rule})");
        pending.refused = Some(("family".into(), message));
        return;
    }
    let policy = CleanPolicy::default();
    for (i, (item, q)) in row.qa.iter().zip(&mut pending.qa).enumerate() {
        match Pass::Provenance.apply(&policy, ctx, item) {
            Action::Drop(DropReason::ImageSha256Mismatch) => {
                let message = format!(
                    "stored image_sha256 {:?} is not the SHA-256 of the image bytes ({}): \
                     `run` drops the row as image_sha256_mismatch",
                    row.image_sha256.as_deref().unwrap_or_default(),
                    ctx.sha256.as_deref().unwrap_or_default()
                );
                pending.refused = Some(("image_sha256".into(), message));
                return;
            }
            Action::Drop(reason) => {
                let message = format!(
                    "source {:?} is neither the image's SHA-256 nor its path: `run` drops \
                     the question as {}",
                    item.source.as_deref().unwrap_or_default(),
                    reason.as_str()
                );
                q.refused = Some((format!("qa[{i}].source"), message));
            }
            _ => {}
        }
    }
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
                unread: None,
                refused: None,
            }
        })
        .collect();
    PendingRow {
        origin: format!("{}: row {}", row.source_file, row.row_index),
        image_rel: String::new(),
        qa,
        provenance: rename_reserved(row.extra.clone(), &RESERVED),
        columns: row.columns.clone(),
        unread: None,
        refused: None,
    }
}

/// Write `input` (read with `columns`) as `opts.split` into `opts.out`. Two passes over the
/// input: the first finds the columns of the output without keeping images, the second
/// writes, leaving out the rows and questions `run` would not take (module docs).
///
/// Errors: [`DatasetError::Choice`] when the first file's columns do not resolve to a
/// layout (ambiguous or missing, listing the columns found); no rows, or every row left
/// out (listing why); I/O.
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
        images_root: opts.images_root.clone(),
        // As `run`: `--family` replaces the column, which is then not read (an integer
        // `family` column failed every row here while `run --family` took them).
        skip_family_column: opts.family.is_some(),
        ..ReadOptions::default()
    };
    let pendings: Vec<PendingRow> = InputReader::open_with(input, &read)?
        .map(|row| row.map_or_else(|e| unread(&e), |r| pending(&r)))
        .collect();
    if pendings.is_empty() {
        return Err(no_rows());
    }
    let out_columns = Columns::of(&pendings);
    let rows = InputReader::open_with(input, &read)?
        .zip(pendings)
        .map(|(row, mut pending)| {
            let row = match row {
                Ok(row) => row,
                Err(e) => {
                    return Ok(ReadyRow {
                        image: ImageRef::default(),
                        sha: String::new(),
                        family: None,
                        pending: unread(&e),
                    })
                }
            };
            let family = opts.family.clone().or_else(|| row.family.clone());
            // The image is hashed once: for cleaning's provenance check and the output.
            let ctx = RowContext::new(&row);
            refusals(&row, &ctx, family.as_deref(), &mut pending);
            let sha = ctx.sha256.unwrap_or_else(|| sha256_hex(&[]));
            let bytes = row.image.bytes.unwrap_or_default();
            let name = row.image.path.as_deref().and_then(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            });
            Ok(ReadyRow {
                sha,
                image: ImageRef {
                    bytes: Some(bytes),
                    path: name,
                },
                family,
                pending,
            })
        });
    write_rows(opts, &out_columns, rows, check)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a row group's refusal named as its first row only, or a file's as `row 0`.
    #[test]
    fn unread_rows_name_their_row_group_or_file() {
        let error = |row, rows| RowError {
            file: "in/a.parquet".into(),
            row,
            rows,
            field: "qa".into(),
            message: "m".into(),
        };
        for (row, rows, want) in [
            (Some(3), None, "in/a.parquet: row 3"),
            (Some(3), Some(1), "in/a.parquet: row 3"),
            (Some(100), Some(50), "in/a.parquet: rows 100-149"),
            (None, None, "in/a.parquet"),
        ] {
            let p = unread(&error(row, rows));
            assert_eq!(p.origin, want);
            assert_eq!(p.unread, Some(("qa".to_string(), "m".to_string())));
        }
    }
}
