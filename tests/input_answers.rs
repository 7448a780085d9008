//! Issue 15, newcomer mends: answers that are numbers are read as Python's `str()` prints
//! them, a null inside an answer list is dropped while other references remain, and the `qa`
//! layout's `answer` may be a list of strings too. The image bytes are a stand-in: the reader
//! does not decode images.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, ListBuilder, RecordBatch, StringArray, StringBuilder,
    StructBuilder,
};
use arrow::datatypes::{DataType, Field};
use parquet::arrow::ArrowWriter;
use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::image_array;
use verisample::record::{ImageRef, InputRow};

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn images(n: usize) -> ArrayRef {
    let refs: Vec<ImageRef> = (0..n)
        .map(|i| ImageRef {
            bytes: Some(vec![i as u8; 4]),
            path: Some(format!("{i}.png")),
        })
        .collect();
    Arc::new(image_array(refs.iter()))
}

fn questions(n: usize) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("q{i}")),
    ))
}

fn read(path: &Path) -> Vec<InputRow> {
    InputReader::open(path.to_str().unwrap())
        .unwrap()
        .map(|r| r.unwrap_or_else(|e| panic!("{e:?}")))
        .collect()
}

/// (answer, answer_list) of each row's first item.
fn answers(rows: &[InputRow]) -> Vec<(String, Option<Vec<String>>)> {
    rows.iter()
        .map(|r| (r.qa[0].answer.clone(), r.qa[0].answer_list.clone()))
        .collect()
}

#[test]
fn integer_and_float_answers_read_as_python_str() {
    let tmp = tempfile::tempdir().unwrap();
    let ints = tmp.path().join("ints.parquet");
    write_parquet(
        &ints,
        vec![
            ("image", images(3)),
            ("question", questions(3)),
            ("answer", Arc::new(Int64Array::from(vec![11850, -7, 0]))),
        ],
    );
    let got: Vec<String> = read(&ints)
        .into_iter()
        .map(|r| r.qa[0].answer.clone())
        .collect();
    assert_eq!(got, ["11850", "-7", "0"]);
    let floats = tmp.path().join("floats.parquet");
    write_parquet(
        &floats,
        vec![
            ("image", images(4)),
            ("query", questions(4)),
            (
                "label",
                Arc::new(Float64Array::from(vec![2.0, 0.25, 1.5e-5, 1e16])),
            ),
        ],
    );
    let got: Vec<String> = read(&floats)
        .into_iter()
        .map(|r| r.qa[0].answer.clone())
        .collect();
    // CPython 3.11: str(2.0), str(0.25), str(1.5e-05), str(1e16).
    assert_eq!(got, ["2.0", "0.25", "1.5e-05", "1e+16"]);
}

#[test]
fn a_null_in_an_answer_list_is_dropped_and_the_row_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("lists.parquet");
    let mut b = ListBuilder::new(StringBuilder::new());
    for row in [
        vec![Some("black"), None, Some("Black")],
        vec![None, Some("blue")],
        vec![None],
    ] {
        for v in row {
            b.values().append_option(v);
        }
        b.append(true);
    }
    write_parquet(
        &path,
        vec![
            ("image", images(3)),
            ("question", questions(3)),
            ("answers", Arc::new(b.finish())),
        ],
    );
    assert_eq!(
        answers(&read(&path)),
        [
            (
                r#"["black","Black"]"#.to_string(),
                Some(vec!["black".to_string(), "Black".to_string()])
            ),
            ("blue".to_string(), None),
            // Nothing left: an empty answer, which the pipeline reports as missing.
            (String::new(), None),
        ]
    );
}

#[test]
fn the_qa_layout_takes_list_answers_too() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("qa.parquet");
    let fields = vec![
        Field::new("question", DataType::Utf8, true),
        Field::new(
            "answer",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
    ];
    let mut qa = ListBuilder::new(StructBuilder::from_fields(fields, 2));
    for refs in [vec!["7", "seven"], vec!["x"]] {
        let item = qa.values();
        item.field_builder::<StringBuilder>(0)
            .unwrap()
            .append_value("how many?");
        let list = item
            .field_builder::<ListBuilder<Box<dyn arrow::array::ArrayBuilder>>>(1)
            .unwrap();
        for r in refs {
            list.values()
                .as_any_mut()
                .downcast_mut::<StringBuilder>()
                .unwrap()
                .append_value(r);
        }
        list.append(true);
        item.append(true);
        qa.append(true);
    }
    write_parquet(
        &path,
        vec![("image", images(2)), ("qa", Arc::new(qa.finish()))],
    );
    let rows = read(&path);
    assert_eq!(rows[0].columns, None, "the qa layout");
    assert_eq!(
        answers(&rows),
        [
            (
                r#"["7","seven"]"#.to_string(),
                Some(vec!["7".to_string(), "seven".to_string()])
            ),
            ("x".to_string(), None),
        ]
    );
}
