//! The input's own columns that travel with each row into the splits (issue 42): every
//! top-level column of an input file that its layout does not read — all but the image, the
//! questions and answers (`qa`, or a flat layout's question and answer columns) and
//! `image_sha256`; `family` and any id or provenance column are carried — written after the
//! splits' own columns with their Arrow types (`run --input-columns drop` leaves them out).
//!
//! [`carried_schema`] decides the carried columns of a whole input from its files' footers,
//! before anything is read: in the order the files and their columns first name them, each
//! nullable, its type the input's with nested fields nullable, list items named `item`
//! (as `datasets` writes them), dictionary-encoded values decoded and a fixed-size list a
//! list ([`normalized`]). A column missing from
//! one file is null in that file's rows. It refuses, naming the file and the column:
//! - a column named like a split column ([`SPLIT_COLUMNS`]);
//! - a column whose type differs between files (beyond nullability and list item names);
//! - a column held twice by one file;
//! - a type without a Hugging Face `datasets` feature ([`super::features`]: maps, unions,
//!   views, …).
//!
//! [`conform`] turns a decoded batch of one file into those columns (cast where the file's
//! nullability or names differ, nulls for a column it lacks); the reader keeps each row's
//! values as a one-row slice of the result ([`crate::record::InputRow::carried`]), so the
//! values travel as Arrow values, never through JSON.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};

use super::layout::{ColumnFlags, Layout};

/// The columns every split row has of its own (contract §7), in order: an input column of
/// one of these names cannot be carried.
pub const SPLIT_COLUMNS: [&str; 4] = ["image", "qa", "clean_meta", "image_sha256"];

/// The flag that leaves the input's other columns out, named in every refusal.
const DROP_FLAG: &str = "--input-columns drop";

/// Why the input's other columns cannot be carried into the splits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CarryError {
    /// A column named like one of the splits' own columns.
    #[error(
        "{file}: the input column `{column}` would be carried into every split, which has a \
         `{column}` column of its own; rename it in the input, or pass {DROP_FLAG} to leave \
         the input's other columns out of the splits"
    )]
    Clash {
        /// The file holding it.
        file: PathBuf,
        /// The column.
        column: String,
    },
    /// A column whose type differs between two files of the input.
    #[error(
        "the input column `{column}` is {first_type} in {first} but {other_type} in {other}: \
         a split column has one type; write it with one type in every file, or pass \
         {DROP_FLAG} to leave the input's other columns out of the splits"
    )]
    TypeDiffers {
        /// The column.
        column: String,
        /// The first file naming it.
        first: PathBuf,
        /// Its type there.
        first_type: String,
        /// The file where it differs.
        other: PathBuf,
        /// Its type there.
        other_type: String,
    },
    /// A column held twice by one file.
    #[error(
        "{file}: the input column `{column}` appears more than once; a split cannot carry \
         both; rename one, or pass {DROP_FLAG} to leave the input's other columns out of the \
         splits"
    )]
    Twice {
        /// The file.
        file: PathBuf,
        /// The column.
        column: String,
    },
    /// A column of a type the Hugging Face `datasets` library has no feature for.
    #[error(
        "{file}: the input column `{column}` is {data_type}, which a Hugging Face dataset \
         cannot describe ({why}); pass {DROP_FLAG} to leave the input's other columns out of \
         the splits"
    )]
    Unsupported {
        /// The file.
        file: PathBuf,
        /// The column.
        column: String,
        /// Its Arrow type.
        data_type: String,
        /// Why it has no feature.
        why: String,
    },
}

/// The carried columns of the input files `files` read with the column flags `flags` (see
/// the module docs); `None` when no file has any. Files whose footer cannot be read or whose
/// columns resolve to no layout are passed over: the reader reports them.
///
/// Errors: [`CarryError`], naming the first file and column at fault.
pub fn carried_schema(
    files: &[PathBuf],
    flags: &ColumnFlags,
) -> Result<Option<SchemaRef>, CarryError> {
    let mut fields: Vec<(Field, &Path)> = Vec::new();
    for file in files {
        let Some(schema) = super::layout::file_schema(file) else {
            continue;
        };
        let Ok(layout) = Layout::of_schema(&schema, flags) else {
            continue;
        };
        let mut seen: Vec<&str> = Vec::new();
        for f in carried_fields(&schema, &layout) {
            let name = f.name().as_str();
            if seen.contains(&name) {
                return Err(CarryError::Twice {
                    file: file.clone(),
                    column: name.to_string(),
                });
            }
            seen.push(name);
            if SPLIT_COLUMNS.contains(&name) {
                return Err(CarryError::Clash {
                    file: file.clone(),
                    column: name.to_string(),
                });
            }
            let data_type = normalized(f.data_type());
            match fields.iter().find(|(g, _)| g.name() == name) {
                Some((g, first)) if g.data_type() != &data_type => {
                    return Err(CarryError::TypeDiffers {
                        column: name.to_string(),
                        first: first.to_path_buf(),
                        first_type: g.data_type().to_string(),
                        other: file.clone(),
                        other_type: data_type.to_string(),
                    })
                }
                Some(_) => {}
                None => {
                    supported(&data_type).map_err(|why| CarryError::Unsupported {
                        file: file.clone(),
                        column: name.to_string(),
                        data_type: f.data_type().to_string(),
                        why,
                    })?;
                    fields.push((Field::new(name, data_type, true), file));
                }
            }
        }
    }
    if fields.is_empty() {
        return Ok(None);
    }
    let fields: Vec<Field> = fields.into_iter().map(|(f, _)| f).collect();
    Ok(Some(Arc::new(Schema::new(fields))))
}

/// The fields of `schema` a file laid out as `layout` carries: all but the columns the layout
/// reads and `image_sha256`, in the file's order.
pub fn carried_fields<'a>(schema: &'a Schema, layout: &Layout) -> Vec<&'a Field> {
    let read: Vec<&str> = match layout {
        Layout::Nested => vec!["image", "qa"],
        Layout::Flat(c) => vec![&c.image, &c.question, &c.answer],
    };
    schema
        .fields()
        .iter()
        .map(AsRef::as_ref)
        .filter(|f| {
            let name = f.name().as_str();
            name != "image_sha256" && !read.contains(&name)
        })
        .collect()
}

/// `dt` as a split carries it: nested fields nullable, list items named `item`,
/// dictionary-encoded values decoded, a fixed-size list a list (two files whose types differ
/// only so carry one type, and every such type has a `datasets` feature).
pub fn normalized(dt: &DataType) -> DataType {
    let item = |f: &Field| Arc::new(Field::new("item", normalized(f.data_type()), true));
    match dt {
        DataType::LargeList(f) => DataType::LargeList(item(f)),
        // `datasets` names a fixed-size list differently across versions: a plain list.
        DataType::List(f) | DataType::FixedSizeList(f, _) => DataType::List(item(f)),
        DataType::Struct(fields) => DataType::Struct(Fields::from(
            fields
                .iter()
                .map(|f| Field::new(f.name(), normalized(f.data_type()), true))
                .collect::<Vec<_>>(),
        )),
        DataType::Dictionary(_, value) => normalized(value),
        other => other.clone(),
    }
}

/// Whether a split can carry a column of type `dt`: its `datasets` feature exists, in the
/// parquet metadata and in the card's YAML alike.
///
/// Errors: why not, in words.
fn supported(dt: &DataType) -> Result<(), String> {
    let schema = Schema::new(vec![Field::new("c", dt.clone(), true)]);
    super::features::huggingface_metadata(&schema)
        .and_then(|_| super::features::features_yaml(&schema, 0))
        .map(|_| ())
        .map_err(|e| match e {
            super::DatasetError::Schema(m) => m,
            other => other.to_string(),
        })
}

/// A value of a carried column that does not convert to the column's type: its row in the
/// batch, the column and why.
pub type CarryProblem = (usize, String, String);

/// The carried columns `schema` of the rows of `batch`, a decoded batch of one input file:
/// each column taken from the batch by name (cast to the carried type where the file's
/// nullability or names differ), or null when the file lacks it. A value that does not
/// convert is null in the result and named in the problems (its row, the column, why), so
/// the caller can refuse that row alone.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> (RecordBatch, Vec<CarryProblem>) {
    let rows = batch.num_rows();
    let mut problems = Vec::new();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|field| {
            let want = field.data_type();
            let Some(col) = batch.column_by_name(field.name()) else {
                return new_null_array(want, rows);
            };
            if col.data_type() == want {
                return col.clone();
            }
            let options = CastOptions {
                safe: true,
                ..CastOptions::default()
            };
            match cast_with_options(col.as_ref(), want, &options) {
                Ok(cast) => {
                    for i in (0..rows).filter(|&i| col.is_valid(i) && cast.is_null(i)) {
                        problems.push((
                            i,
                            field.name().clone(),
                            format!("{} value does not convert to {want}", col.data_type()),
                        ));
                    }
                    cast
                }
                Err(e) => {
                    for i in 0..rows {
                        problems.push((i, field.name().clone(), e.to_string()));
                    }
                    new_null_array(want, rows)
                }
            }
        })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    // The columns are built to the schema's types and the batch's row count: this cannot
    // fail; should it, every row names the cause rather than a panic.
    match RecordBatch::try_new_with_options(schema.clone(), columns, &options) {
        Ok(b) => (b, problems),
        Err(e) => {
            let problems = (0..rows)
                .map(|i| (i, "row".to_string(), e.to_string()))
                .collect();
            (RecordBatch::new_empty(schema.clone()), problems)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int64Type;

    fn list_of(item_name: &str, nullable: bool) -> DataType {
        DataType::List(Arc::new(Field::new(item_name, DataType::Int64, nullable)))
    }

    /// Catches: `element`-named or non-null list items of one writer refused as another type.
    #[test]
    fn types_differing_only_in_names_and_nullability_are_one_type() {
        assert_eq!(
            normalized(&list_of("element", false)),
            normalized(&list_of("item", true))
        );
        assert_eq!(
            normalized(&list_of("element", false)),
            list_of("item", true)
        );
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        assert_eq!(normalized(&dict), DataType::Utf8);
        assert_ne!(normalized(&DataType::Int32), normalized(&DataType::Int64));
    }

    /// Catches: a column a file lacks dropped instead of null, a cast list losing its values.
    #[test]
    fn conform_fills_missing_columns_and_casts_names() {
        let list = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
        ]);
        let element = list_of("element", true);
        let list = arrow::compute::cast(&list, &element).unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("digits", element, true),
                Field::new("id", DataType::Int64, false),
            ])),
            vec![list, Arc::new(Int64Array::from(vec![7, 8]))],
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("note", DataType::Utf8, true),
            Field::new("digits", list_of("item", true), true),
        ]));
        let (got, problems) = conform(&batch, &schema);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(got.schema(), schema);
        let ids = got.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values(), &[7, 8]);
        assert_eq!(got.column(1).null_count(), 2);
        let digits = got.column(2).as_any().downcast_ref::<ListArray>().unwrap();
        let first = digits.value(0);
        let first = first.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(first.values(), &[1, 2]);
        assert!(digits.is_null(1));
    }

    /// Catches: a value that does not convert silently null instead of named with its row.
    #[test]
    fn a_value_that_does_not_convert_is_named_with_its_row() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("n", DataType::Utf8, true)])),
            vec![Arc::new(StringArray::from(vec![
                Some("3"),
                Some("x"),
                None,
            ]))],
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, true)]));
        let (got, problems) = conform(&batch, &schema);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!((problems[0].0, problems[0].1.as_str()), (1, "n"));
        let n = got.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(n.value(0), 3);
    }
}
