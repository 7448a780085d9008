//! Reading single values out of Arrow arrays, tolerant of the equivalent physical types
//! that parquet writers produce (`string`/`large_string`/`string_view`,
//! `binary`/`large_binary`/`binary_view`, `list`/`large_list`/`fixed_size_list`).
//!
//! Each accessor returns `Err(message)` with a short human-readable reason; callers attach
//! the file, row and field.

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryViewArray, BooleanArray, FixedSizeBinaryArray,
    FixedSizeListArray, LargeBinaryArray, LargeListArray, LargeStringArray, ListArray, StringArray,
    StringViewArray, StructArray,
};
use arrow::datatypes::{DataType, UInt64Type};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::{Map, Number, Value};

/// Whether row `i` of `arr` is null, including every row of a column typed `null` (what
/// pandas writes for a column of only `None`), whose arrays have no validity buffer and so
/// answer `false` to [`Array::is_null`].
fn is_null_at(arr: &dyn Array, i: usize) -> bool {
    arr.data_type() == &DataType::Null || arr.is_null(i)
}

/// A string at row `i`: `Ok(None)` when null. String types are taken as they are; binary
/// types must hold valid UTF-8 (the error says so otherwise).
pub fn get_string(arr: &dyn Array, i: usize) -> Result<Option<String>, String> {
    if is_null_at(arr, i) {
        return Ok(None);
    }
    let any = arr.as_any();
    if let Some(a) = any.downcast_ref::<StringArray>() {
        return Ok(Some(a.value(i).to_string()));
    }
    if let Some(a) = any.downcast_ref::<LargeStringArray>() {
        return Ok(Some(a.value(i).to_string()));
    }
    if let Some(a) = any.downcast_ref::<StringViewArray>() {
        return Ok(Some(a.value(i).to_string()));
    }
    // A dictionary-encoded column (pandas' `category` dtype written by `to_parquet`): the
    // string of this row's key.
    if let Some(dict) = arr.as_any_dictionary_opt() {
        let key = arrow::compute::cast(&dict.keys().slice(i, 1), &DataType::UInt64)
            .ok()
            .and_then(|k| k.as_primitive_opt::<UInt64Type>().map(|k| k.value(0)))
            .and_then(|k| usize::try_from(k).ok())
            .filter(|&k| k < dict.values().len())
            .ok_or_else(|| format!("dictionary key of row {i} is not a valid index"))?;
        return get_string(dict.values().as_ref(), key);
    }
    match get_bytes(arr, i) {
        Ok(Some(b)) => String::from_utf8(b).map(Some).map_err(|e| {
            format!(
                "binary value is not valid UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        }),
        Ok(None) => Ok(None),
        Err(_) => Err(format!("expected a string, found {}", arr.data_type())),
    }
}

/// The text of a reference answer at row `i`: a string as it is; an integer as Python's
/// `str()` prints it (`7`); a float as Python's `str()` prints it (`1.5`, `1e-05`, `nan`)
/// except that an integral float of magnitude below 2^53 is printed as the integer it is
/// (`1500.0` → `1500`): pandas stores an integer column that has a null as `float64`, and the
/// label `1500` read as `1500.0` would fail the string verifier (`15000` ≠ `1500`) and make the
/// number guard veto a judge's correct `CORRECT`. So a numeric answer column is read rather
/// than refused row by row. `Ok(None)` when null.
///
/// Errors (as a message): any other type, or a binary value that is not UTF-8.
pub fn get_answer_text(arr: &dyn Array, i: usize) -> Result<Option<String>, String> {
    if is_null_at(arr, i) {
        return Ok(None);
    }
    use arrow::datatypes::{Float16Type, Float32Type, Float64Type};
    let float = match arr.data_type() {
        DataType::Float16 => arr.as_primitive::<Float16Type>().value(i).to_f64(),
        DataType::Float32 => f64::from(arr.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => arr.as_primitive::<Float64Type>().value(i),
        t if t.is_integer() => return Ok(display(arr, i)),
        _ => return get_string(arr, i),
    };
    Ok(Some(integral_or_python_float_str(float)))
}

/// `x` as an integer's text when it is integral and exactly representable (|x| < 2^53, so
/// every integer up to there round-trips), else [`python_float_str`]. `-0.0` is `0`.
fn integral_or_python_float_str(x: f64) -> String {
    integral_text(x).unwrap_or_else(|| python_float_str(x))
}

/// The integer's text of an integral `x` below 2^53 in magnitude (`1500.0` → `1500`, `-0.0`
/// → `0`); `None` for a fraction, a larger magnitude, or a non-finite value. The reading of a
/// numeric reference answer, from parquet floats and JSON numbers alike.
pub fn integral_text(x: f64) -> Option<String> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
                                                // Exact: an integral f64 below 2^53 converts to i64 without rounding.
    (x.fract() == 0.0 && x.abs() < EXACT).then(|| (x as i64).to_string())
}

/// `x` as Python's `str(float)` (`repr`, the shortest text that reads back as `x`): fixed
/// notation with at least one decimal when the decimal exponent is in `-4..16`, else
/// scientific with a signed exponent of at least two digits (`1e+16`, `1.5e-05`); `nan`,
/// `inf`, `-inf`. Source: CPython `float_repr` (`PyOS_double_to_string(x, 'r', 0,
/// Py_DTSF_ADD_DOT_0)`).
pub fn python_float_str(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` is the shortest round-trip digits too: `-1.2345e6`, `1e-5`, `0e0`.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let fixed = match usize::try_from(point) {
            Err(_) | Ok(0) => format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize)),
            Ok(p) if p >= digits.len() => format!("{digits}{}.0", "0".repeat(p - digits.len())),
            Ok(p) => format!("{}.{}", &digits[..p], &digits[p..]),
        };
        format!("{sign}{fixed}")
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{dot}e{esign}{:02}", exp.unsigned_abs())
    }
}

/// Bytes at row `i`: `Ok(None)` when null. Accepts the binary types only.
pub fn get_bytes(arr: &dyn Array, i: usize) -> Result<Option<Vec<u8>>, String> {
    if is_null_at(arr, i) {
        return Ok(None);
    }
    let any = arr.as_any();
    if let Some(a) = any.downcast_ref::<BinaryArray>() {
        return Ok(Some(a.value(i).to_vec()));
    }
    if let Some(a) = any.downcast_ref::<LargeBinaryArray>() {
        return Ok(Some(a.value(i).to_vec()));
    }
    if let Some(a) = any.downcast_ref::<BinaryViewArray>() {
        return Ok(Some(a.value(i).to_vec()));
    }
    if let Some(a) = any.downcast_ref::<FixedSizeBinaryArray>() {
        return Ok(Some(a.value(i).to_vec()));
    }
    Err(format!("expected binary, found {}", arr.data_type()))
}

/// The elements of the list at row `i`: `Ok(None)` when null. Accepts the list types.
pub fn get_list(arr: &dyn Array, i: usize) -> Result<Option<ArrayRef>, String> {
    if is_null_at(arr, i) {
        return Ok(None);
    }
    let any = arr.as_any();
    if let Some(a) = any.downcast_ref::<ListArray>() {
        return Ok(Some(a.value(i)));
    }
    if let Some(a) = any.downcast_ref::<LargeListArray>() {
        return Ok(Some(a.value(i)));
    }
    if let Some(a) = any.downcast_ref::<FixedSizeListArray>() {
        return Ok(Some(a.value(i)));
    }
    Err(format!("expected a list, found {}", arr.data_type()))
}

/// `arr` as a struct array, or a message naming the type found.
pub fn as_struct(arr: &dyn Array) -> Result<&StructArray, String> {
    arr.as_any()
        .downcast_ref::<StructArray>()
        .ok_or_else(|| format!("expected a struct, found {}", arr.data_type()))
}

/// Any value as JSON, for carrying unknown columns through: null, bool, numbers, strings,
/// lists and structs map to their JSON counterparts; binary becomes a lowercase hex string;
/// anything else (dates, decimals, …) its Arrow display string.
pub fn to_json(arr: &dyn Array, i: usize) -> Value {
    if is_null_at(arr, i) {
        return Value::Null;
    }
    match arr.data_type() {
        DataType::Boolean => {
            if let Some(a) = arr.as_any().downcast_ref::<BooleanArray>() {
                return Value::Bool(a.value(i));
            }
        }
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            if let Some(v) = display(arr, i).and_then(|s| s.parse::<i64>().ok()) {
                return Value::Number(v.into());
            }
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            if let Some(v) = display(arr, i).and_then(|s| s.parse::<u64>().ok()) {
                return Value::Number(v.into());
            }
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            if let Some(n) = display(arr, i)
                .and_then(|s| s.parse::<f64>().ok())
                .and_then(Number::from_f64)
            {
                return Value::Number(n);
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            if let Ok(Some(s)) = get_string(arr, i) {
                return Value::String(s);
            }
        }
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => {
            if let Ok(Some(b)) = get_bytes(arr, i) {
                return Value::String(hex::encode(b));
            }
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            if let Ok(Some(items)) = get_list(arr, i) {
                return Value::Array(
                    (0..items.len())
                        .map(|j| to_json(items.as_ref(), j))
                        .collect(),
                );
            }
        }
        DataType::Struct(_) => {
            let s = arr.as_struct();
            let mut m = Map::new();
            for (f, col) in s.fields().iter().zip(s.columns()) {
                m.insert(f.name().clone(), to_json(col.as_ref(), i));
            }
            return Value::Object(m);
        }
        _ => {}
    }
    display(arr, i)
        .or_else(|| display_in_utc(arr, i))
        .map_or(Value::Null, Value::String)
}

/// A timestamp whose zone the formatter cannot resolve (a name outside the tz database),
/// shown as the same instant in UTC (`…Z`) rather than lost.
fn display_in_utc(arr: &dyn Array, i: usize) -> Option<String> {
    let DataType::Timestamp(unit, Some(_)) = arr.data_type() else {
        return None;
    };
    let utc = DataType::Timestamp(*unit, Some("+00:00".into()));
    let one = arrow::compute::cast(&arr.slice(i, 1), &utc).ok()?;
    display(one.as_ref(), 0)
}

fn display(arr: &dyn Array, i: usize) -> Option<String> {
    let opts = FormatOptions::default();
    ArrayFormatter::try_new(arr, &opts)
        .ok()
        .map(|f| f.value(i).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, LargeStringArray};
    use serde_json::json;
    use std::sync::Arc;

    /// A timestamp with a time zone keeps its value (it was `null`: the formatter knew no
    /// zone names): in its zone, or in UTC when the zone is unknown.
    #[test]
    fn timestamps_with_a_zone_keep_their_value() {
        let at = |tz: &str| {
            let a = arrow::array::TimestampSecondArray::from(vec![1_700_000_000])
                .with_timezone(tz.to_string());
            to_json(&a, 0)
        };
        assert_eq!(at("Europe/Berlin"), json!("2023-11-14T23:13:20+01:00"));
        assert_eq!(at("+02:00"), json!("2023-11-15T00:13:20+02:00"));
        assert_eq!(at("Mars/Olympus_Mons"), json!("2023-11-14T22:13:20Z"));
    }

    #[test]
    fn a_column_typed_null_is_null_at_every_row() {
        // pandas writes a column of only `None` (say the `bytes` of images given by path) as
        // type `null`: its rows are absent values, not a type error.
        let nulls = arrow::array::NullArray::new(2);
        assert!(!nulls.is_null(1), "arrow's physical nulls miss it");
        assert_eq!(get_bytes(&nulls, 1), Ok(None));
        assert_eq!(get_string(&nulls, 0), Ok(None));
        assert_eq!(get_list(&nulls, 1).map(|l| l.is_none()), Ok(true));
    }

    #[test]
    fn strings_from_all_string_and_binary_types() {
        let plain = StringArray::from(vec![Some("a"), None]);
        let large = LargeStringArray::from(vec!["b"]);
        let bin = BinaryArray::from(vec![b"c".as_ref()]);
        let bad = BinaryArray::from(vec![b"\xffx".as_ref()]);
        assert_eq!(get_string(&plain, 0), Ok(Some("a".into())));
        assert_eq!(get_string(&plain, 1), Ok(None));
        assert_eq!(get_string(&large, 0), Ok(Some("b".into())));
        assert_eq!(get_string(&bin, 0), Ok(Some("c".into())));
        assert!(get_string(&bad, 0).unwrap_err().contains("not valid UTF-8"));
        assert!(get_string(&Int32Array::from(vec![1]), 0)
            .unwrap_err()
            .contains("expected a string, found Int32"));
        // pandas' `category` dtype: dictionary-encoded strings, nulls kept.
        let category: arrow::array::DictionaryArray<arrow::datatypes::Int8Type> =
            vec![Some("x"), None, Some("y"), Some("x")]
                .into_iter()
                .collect();
        let got: Vec<_> = (0..4).map(|i| get_string(&category, i).unwrap()).collect();
        assert_eq!(
            got,
            [Some("x".into()), None, Some("y".into()), Some("x".into())]
        );
    }

    #[test]
    fn numbers_read_as_python_str_prints_them() {
        // Expected texts: CPython 3.11 `str(x)` of each value.
        for (x, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (123.456, "123.456"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (-2.5e20, "-2.5e+20"),
            (3e-310, "3e-310"),
            (f64::from(0.1f32), "0.10000000149011612"),
            (1234567.0, "1234567.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(python_float_str(x), want, "{x:e}");
        }
        let ints = arrow::array::Int64Array::from(vec![Some(-1432), None]);
        assert_eq!(get_answer_text(&ints, 0), Ok(Some("-1432".into())));
        assert_eq!(get_answer_text(&ints, 1), Ok(None));
        let floats = arrow::array::Float32Array::from(vec![2.5f32]);
        assert_eq!(get_answer_text(&floats, 0), Ok(Some("2.5".into())));
        // Integral floats (pandas' int column with a null) read as the integer; 2^53 and
        // beyond, non-finite and fractional values as Python prints them.
        let floats = arrow::array::Float64Array::from(vec![
            Some(1500.0),
            None,
            Some(-0.0),
            Some(-7.0),
            Some(9_007_199_254_740_991.0),
            Some(9_007_199_254_740_992.0),
            Some(f64::INFINITY),
            Some(0.5),
        ]);
        let got: Vec<_> = (0..8).map(|i| get_answer_text(&floats, i)).collect();
        let want = [
            Some("1500"),
            None,
            Some("0"),
            Some("-7"),
            Some("9007199254740991"),
            Some("9007199254740992.0"),
            Some("inf"),
            Some("0.5"),
        ];
        let want: Vec<_> = want.iter().map(|w| Ok(w.map(String::from))).collect();
        assert_eq!(got, want);
        assert_eq!(
            get_answer_text(&StringArray::from(vec!["x"]), 0),
            Ok(Some("x".into()))
        );
        assert!(get_answer_text(&BooleanArray::from(vec![true]), 0).is_err());
    }

    #[test]
    fn bytes_and_lists() {
        let lb = LargeBinaryArray::from(vec![b"xy".as_ref()]);
        assert_eq!(get_bytes(&lb, 0), Ok(Some(b"xy".to_vec())));
        assert!(get_bytes(&StringArray::from(vec!["s"]), 0).is_err());
        let list =
            ListArray::from_iter_primitive::<arrow::datatypes::Int32Type, _, _>(vec![Some(vec![
                Some(1),
                Some(2),
            ])]);
        let items = get_list(&list, 0).unwrap().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(to_json(&list, 0), json!([1, 2]));
    }

    #[test]
    fn json_of_struct_with_binary_and_float() {
        let s = StructArray::from(vec![
            (
                Arc::new(arrow::datatypes::Field::new("b", DataType::Binary, true)),
                Arc::new(BinaryArray::from(vec![b"\x01\xab".as_ref()])) as ArrayRef,
            ),
            (
                Arc::new(arrow::datatypes::Field::new("f", DataType::Float64, true)),
                Arc::new(arrow::array::Float64Array::from(vec![0.5])) as ArrayRef,
            ),
        ]);
        assert_eq!(to_json(&s, 0), json!({"b": "01ab", "f": 0.5}));
    }
}
