//! Hugging Face `datasets` feature descriptions derived from an Arrow schema.
//!
//! `datasets` stores a dataset's features twice: in each parquet file's key-value metadata
//! under `huggingface` (`{"info": {"features": {...}}}`), and in the dataset card's YAML
//! (`dataset_info.features`). It silently ignores the parquet metadata when it does not match
//! the Arrow types exactly, so we derive both from the Arrow schema we actually write.
//!
//! Lists use the `[inner]` form (`"qa": [{"question": {...}}]`): checked by experiment,
//! datasets 3.6 cannot read the `{"_type": "List"}` form that 4.x writes ("Feature type 'List'
//! not found"), while 4.x and 5.x read the `[inner]` form as `List(inner)`. A struct
//! `{bytes: binary, path: string}` (in that order) is the `Image` feature. A `large_list` is
//! the `LargeList` feature (`{"feature": …, "_type": "LargeList"}`, YAML `large_list:`).
//! Dates, times, timestamps, durations and decimals are `Value`s named as pyarrow names their
//! types (`timestamp[us, tz=UTC]`, `decimal128(10, 2)`), as `datasets` does.

use arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};
use serde_json::{json, Map, Value};

use super::DatasetError;

/// The `datasets` feature JSON of one Arrow data type.
///
/// Errors: [`DatasetError::Schema`] for a type that has no `datasets` equivalent here
/// (maps, unions, dictionaries, temporal types).
pub fn feature_of(dt: &DataType) -> Result<Value, DatasetError> {
    let value = |dtype: &str| Ok(json!({"dtype": dtype, "_type": "Value"}));
    match dt {
        DataType::Null => value("null"),
        DataType::Boolean => value("bool"),
        DataType::Int8 => value("int8"),
        DataType::Int16 => value("int16"),
        DataType::Int32 => value("int32"),
        DataType::Int64 => value("int64"),
        DataType::UInt8 => value("uint8"),
        DataType::UInt16 => value("uint16"),
        DataType::UInt32 => value("uint32"),
        DataType::UInt64 => value("uint64"),
        DataType::Float16 => value("float16"),
        DataType::Float32 => value("float32"),
        DataType::Float64 => value("float64"),
        DataType::Utf8 => value("string"),
        DataType::LargeUtf8 => value("large_string"),
        DataType::Binary => value("binary"),
        DataType::LargeBinary => value("large_binary"),
        DataType::Struct(fields) if is_image_struct(fields) => Ok(json!({"_type": "Image"})),
        DataType::Struct(fields) => {
            let mut m = Map::new();
            for f in fields.iter() {
                m.insert(f.name().clone(), feature_of(f.data_type())?);
            }
            Ok(Value::Object(m))
        }
        DataType::List(inner) => Ok(Value::Array(vec![feature_of(inner.data_type())?])),
        DataType::LargeList(inner) => {
            Ok(json!({"feature": feature_of(inner.data_type())?, "_type": "LargeList"}))
        }
        other => match temporal_dtype(other) {
            Some(dtype) => value(&dtype),
            None => Err(DatasetError::Schema(format!(
                "no datasets feature for arrow type {other}"
            ))),
        },
    }
}

/// The `Value` dtype of a date, time, timestamp, duration or decimal type, as pyarrow names
/// it (and `datasets` with it); `None` for other types.
fn temporal_dtype(dt: &DataType) -> Option<String> {
    let unit = |u: &TimeUnit| match u {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    };
    Some(match dt {
        DataType::Date32 => "date32".into(),
        DataType::Date64 => "date64".into(),
        DataType::Time32(u) => format!("time32[{}]", unit(u)),
        DataType::Time64(u) => format!("time64[{}]", unit(u)),
        DataType::Timestamp(u, None) => format!("timestamp[{}]", unit(u)),
        DataType::Timestamp(u, Some(tz)) => format!("timestamp[{}, tz={tz}]", unit(u)),
        DataType::Duration(u) => format!("duration[{}]", unit(u)),
        DataType::Decimal128(p, s) => format!("decimal128({p}, {s})"),
        DataType::Decimal256(p, s) => format!("decimal256({p}, {s})"),
        _ => return None,
    })
}

/// Whether `fields` is exactly the HF `Image()` storage: `bytes: binary`, `path: string`.
pub fn is_image_struct(fields: &Fields) -> bool {
    fields.len() == 2
        && fields[0].name() == "bytes"
        && fields[0].data_type() == &DataType::Binary
        && fields[1].name() == "path"
        && fields[1].data_type() == &DataType::Utf8
}

/// The feature object of a whole schema: `{"image": {"_type": "Image"}, "qa": [...], ...}`.
///
/// Errors: as [`feature_of`].
pub fn features_of(schema: &Schema) -> Result<Value, DatasetError> {
    let mut m = Map::new();
    for f in schema.fields().iter() {
        m.insert(f.name().clone(), feature_of(f.data_type())?);
    }
    Ok(Value::Object(m))
}

/// The value of the parquet key-value metadata entry `huggingface`:
/// `{"info": {"features": …}}` as compact JSON (what `datasets` writes, minus whitespace).
/// Columns and struct fields keep the schema's order: `datasets` matches a struct feature
/// against the Arrow struct field by field, in order, and ignores the metadata on any
/// difference (a `serde_json::Map` would sort the keys).
///
/// Errors: as [`feature_of`].
pub fn huggingface_metadata(schema: &Schema) -> Result<String, DatasetError> {
    let mut out = String::from(r#"{"info":{"features":{"#);
    fields_json(schema.fields(), &mut out)?;
    out.push_str("}}}");
    Ok(out)
}

/// `"name":feature` of each field, in order, comma-separated.
fn fields_json(fields: &Fields, out: &mut String) -> Result<(), DatasetError> {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(f.name().clone()).to_string());
        out.push(':');
        feature_json(f.data_type(), out)?;
    }
    Ok(())
}

/// [`feature_of`] as JSON text with struct fields in order.
fn feature_json(dt: &DataType, out: &mut String) -> Result<(), DatasetError> {
    match dt {
        DataType::Struct(fields) if !is_image_struct(fields) => {
            out.push('{');
            fields_json(fields, out)?;
            out.push('}');
        }
        DataType::List(inner) => {
            out.push('[');
            feature_json(inner.data_type(), out)?;
            out.push(']');
        }
        DataType::LargeList(inner) => {
            out.push_str(r#"{"feature":"#);
            feature_json(inner.data_type(), out)?;
            out.push_str(r#","_type":"LargeList"}"#);
        }
        other => out.push_str(&feature_of(other)?.to_string()),
    }
    Ok(())
}

/// The card YAML list of features (`datasets.Features._to_yaml_list` layout), each line
/// prefixed with `indent` spaces. Ends with a newline.
///
/// Errors: as [`feature_of`].
pub fn features_yaml(schema: &Schema, indent: usize) -> Result<String, DatasetError> {
    let mut out = String::new();
    for f in schema.fields().iter() {
        field_yaml(f, indent, &mut out)?;
    }
    Ok(out)
}

fn field_yaml(f: &Field, indent: usize, out: &mut String) -> Result<(), DatasetError> {
    let pad = " ".repeat(indent);
    out.push_str(&format!("{pad}- name: {}\n", yaml_scalar(f.name())));
    type_yaml(f.data_type(), indent + 2, out)
}

/// The body of one feature (`dtype: string`, `list:` + children, `struct:` + children),
/// as `datasets.Features._to_yaml_list` writes it: a list of structs lists the struct's
/// fields under `list:`, a list of lists (or of an image) nests its item's body one level
/// deeper (`list:` / `  list: int64`), a list of a value names its dtype (`list: int64`);
/// `large_list:` alike.
fn type_yaml(dt: &DataType, indent: usize, out: &mut String) -> Result<(), DatasetError> {
    let pad = " ".repeat(indent);
    match dt {
        DataType::Struct(fields) if is_image_struct(fields) => {
            out.push_str(&format!("{pad}dtype: image\n"))
        }
        DataType::Struct(fields) => {
            out.push_str(&format!("{pad}struct:\n"));
            for f in fields.iter() {
                field_yaml(f, indent, out)?;
            }
        }
        DataType::List(inner) | DataType::LargeList(inner) => {
            let key = match dt {
                DataType::LargeList(_) => "large_list",
                _ => "list",
            };
            match inner.data_type() {
                DataType::Struct(fields) if !is_image_struct(fields) => {
                    out.push_str(&format!("{pad}{key}:\n"));
                    for f in fields.iter() {
                        field_yaml(f, indent, out)?;
                    }
                }
                nested @ (DataType::List(_) | DataType::LargeList(_)) => {
                    out.push_str(&format!("{pad}{key}:\n"));
                    type_yaml(nested, indent + 2, out)?;
                }
                other => out.push_str(&format!("{pad}{key}: {}\n", yaml_dtype(other)?)),
            }
        }
        other => out.push_str(&format!("{pad}dtype: {}\n", yaml_dtype(other)?)),
    }
    Ok(())
}

/// A scalar's dtype as a YAML value: `null` (Arrow's null type) quoted as `'null'`, as
/// `datasets` writes it, since a plain `null` is YAML's empty value and `load_dataset` fails
/// on it.
fn yaml_dtype(dt: &DataType) -> Result<String, DatasetError> {
    let dtype = scalar_dtype(dt)?;
    Ok(if dtype == "null" {
        "'null'".into()
    } else {
        dtype
    })
}

fn scalar_dtype(dt: &DataType) -> Result<String, DatasetError> {
    match feature_of(dt)? {
        Value::Object(m) if m.get("_type") == Some(&json!("Image")) => Ok("image".into()),
        Value::Object(m) => match m.get("dtype") {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(DatasetError::Schema(format!(
                "arrow type {dt} is not a scalar feature"
            ))),
        },
        _ => Err(DatasetError::Schema(format!(
            "arrow type {dt} is not a scalar feature"
        ))),
    }
}

/// A type as a card's schema table names it: `Image`, a scalar's `datasets` dtype (`string`,
/// `int64`, `timestamp[us]`), `list<…>` / `large_list<…>`, `struct`; Arrow's own name for a
/// type `datasets` has no feature for.
pub fn dtype_label(dt: &DataType) -> String {
    match dt {
        DataType::Struct(fields) if is_image_struct(fields) => "Image".into(),
        DataType::Struct(_) => "struct".into(),
        DataType::List(inner) => format!("list<{}>", dtype_label(inner.data_type())),
        DataType::LargeList(inner) => format!("large_list<{}>", dtype_label(inner.data_type())),
        other => scalar_dtype(other).unwrap_or_else(|_| other.to_string().to_lowercase()),
    }
}

/// A YAML scalar: bare when it is a plain word, else a double-quoted JSON string (valid YAML).
pub fn yaml_scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '*'))
        && !s.starts_with(['-', '*', '.'])
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~"
        )
        && s.parse::<f64>().is_err();
    if plain {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn image_type() -> DataType {
        DataType::Struct(Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Utf8, true),
        ]))
    }

    fn qa_type() -> DataType {
        let item = DataType::Struct(Fields::from(vec![
            Field::new("question", DataType::Utf8, true),
            Field::new("think", DataType::Utf8, true),
        ]));
        DataType::List(Arc::new(Field::new("item", item, true)))
    }

    #[test]
    fn feature_json_matches_datasets_list_form() {
        let schema = Schema::new(vec![
            Field::new("image", image_type(), true),
            Field::new("qa", qa_type(), true),
            Field::new("n", DataType::Int64, true),
        ]);
        let got = huggingface_metadata(&schema).unwrap();
        let want = r#"{"info":{"features":{"image":{"_type":"Image"},"qa":[{"question":{"_type":"Value","dtype":"string"},"think":{"_type":"Value","dtype":"string"}}],"n":{"_type":"Value","dtype":"int64"}}}}"#;
        let a: Value = serde_json::from_str(&got).unwrap();
        let b: Value = serde_json::from_str(want).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn image_struct_needs_exact_types_and_order() {
        let swapped = Fields::from(vec![
            Field::new("path", DataType::Utf8, true),
            Field::new("bytes", DataType::Binary, true),
        ]);
        let large = Fields::from(vec![
            Field::new("bytes", DataType::LargeBinary, true),
            Field::new("path", DataType::Utf8, true),
        ]);
        assert!(is_image_struct(match &image_type() {
            DataType::Struct(f) => f,
            _ => unreachable!(),
        }));
        assert!(!is_image_struct(&swapped));
        assert!(!is_image_struct(&large));
        assert_eq!(
            feature_of(&DataType::Struct(swapped)).unwrap()["path"]["dtype"],
            "string"
        );
    }

    #[test]
    fn yaml_matches_datasets_layout() {
        let schema = Schema::new(vec![
            Field::new("image", image_type(), true),
            Field::new("qa", qa_type(), true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
        ]);
        let want = "  - name: image\n    dtype: image\n  - name: qa\n    list:\n    - name: question\n      dtype: string\n    - name: think\n      dtype: string\n  - name: tags\n    list: string\n";
        assert_eq!(features_yaml(&schema, 2).unwrap(), want);
    }

    /// A column of Arrow's null type (pandas writes a column of only `None` so) is a
    /// `Value('null')`, quoted in the YAML: a plain `null` is YAML's empty value, on which
    /// `load_dataset` fails ("Expected a dict or a list but got NoneType"); its list too.
    #[test]
    fn a_null_typed_column_is_quoted_in_the_yaml() {
        let schema = Schema::new(vec![
            Field::new("n", DataType::Null, true),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("item", DataType::Null, true))),
                true,
            ),
        ]);
        let want = "  - name: n\n    dtype: 'null'\n  - name: l\n    list: 'null'\n";
        assert_eq!(features_yaml(&schema, 2).unwrap(), want);
    }

    /// The input columns a split carries, in `datasets`' own YAML and JSON (checked against
    /// `Features.from_arrow_schema(...)._to_yaml_list()` and `.to_dict()` of datasets 5.2).
    /// Catches: nested lists refused, `large_list` or timestamps without a feature.
    #[test]
    fn carried_types_match_datasets() {
        let list = |dt: DataType| DataType::List(Arc::new(Field::new("item", dt, true)));
        let schema = Schema::new(vec![
            Field::new(
                "a",
                DataType::LargeList(Arc::new(Field::new("item", DataType::Int64, true))),
                true,
            ),
            Field::new("b", list(list(DataType::Int32)), true),
            Field::new(
                "c",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("e", DataType::Decimal128(10, 2), true),
            Field::new(
                "g",
                DataType::Struct(Fields::from(vec![Field::new(
                    "y",
                    list(DataType::Float32),
                    true,
                )])),
                true,
            ),
            Field::new("p", list(image_type()), true),
        ]);
        let want = "- name: a\n  large_list: int64\n- name: b\n  list:\n    list: int32\n- name: c\n  dtype: timestamp[us, tz=UTC]\n- name: e\n  dtype: decimal128(10, 2)\n- name: g\n  struct:\n  - name: y\n    list: float32\n- name: p\n  list: image\n";
        assert_eq!(features_yaml(&schema, 0).unwrap(), want);
        let got: Value = serde_json::from_str(&huggingface_metadata(&schema).unwrap()).unwrap();
        let features = &got["info"]["features"];
        assert_eq!(
            features["a"],
            json!({"feature": {"dtype": "int64", "_type": "Value"}, "_type": "LargeList"})
        );
        assert_eq!(
            features["b"],
            json!([[{"dtype": "int32", "_type": "Value"}]])
        );
        assert_eq!(features["c"]["dtype"], "timestamp[us, tz=UTC]");
        assert_eq!(
            features["g"]["y"],
            json!([{"dtype": "float32", "_type": "Value"}])
        );
    }

    #[test]
    fn yaml_scalars_are_quoted_when_needed() {
        for (s, want) in [
            ("OrandCar_RS_think", "OrandCar_RS_think"),
            ("data/x-*.parquet", "data/x-*.parquet"),
            ("true", "\"true\""),
            ("123", "\"123\""),
            ("a: b", "\"a: b\""),
            ("", "\"\""),
            ("*x", "\"*x\""),
        ] {
            assert_eq!(yaml_scalar(s), want, "{s:?}");
        }
    }

    #[test]
    fn unsupported_types_are_errors() {
        assert!(feature_of(&DataType::Utf8View).is_err());
        let map = DataType::Map(
            Arc::new(Field::new(
                "entries",
                DataType::Struct(Fields::from(vec![
                    Field::new("k", DataType::Utf8, false),
                    Field::new("v", DataType::Int64, true),
                ])),
                false,
            )),
            false,
        );
        assert!(feature_of(&map).is_err());
        assert_eq!(feature_of(&DataType::Date32).unwrap()["dtype"], "date32");
    }
}
