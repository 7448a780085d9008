//! Answers that are numbers are read as Python's `str()` prints
//! them, a null inside an answer list is dropped while other references remain, and the `qa`
//! layout's `answer` may be a list of strings too; `prepare --parquet` writes that layout from
//! flat files (column flags or detection) and `prepare --jsonl` takes list answers. The image
//! bytes are a stand-in: neither the reader nor `prepare` decodes images.

use std::path::Path;
use std::process::{Command, Output};
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

/// `n` images, each a distinct 2x2 PNG (`prepare` writes only rows whose image decodes).
fn images(n: usize) -> ArrayRef {
    let png = |seed: u8| {
        let mut out = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(2, 2, image::Rgb([seed, 1, 2]))
            .write_to(&mut out, image::ImageFormat::Png)
            .expect("encode png");
        out.into_inner()
    };
    let refs: Vec<ImageRef> = (0..n)
        .map(|i| ImageRef {
            bytes: Some(png(i as u8)),
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
    // CPython 3.11: str(0.25), str(1.5e-05), str(1e16); the integral 2.0 as the integer it
    // is (pandas makes an int column with a null float64: the label 2 must not read "2.0").
    assert_eq!(got, ["2", "0.25", "1.5e-05", "1e+16"]);
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

fn prepare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verisample"))
        .arg("prepare")
        .args(args)
        .output()
        .unwrap()
}

fn list_answers(rows: &[&[&str]]) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for refs in rows {
        for r in *refs {
            b.values().append_value(r);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

#[test]
fn prepare_parquet_writes_the_qa_layout_from_flat_files() {
    let tmp = tempfile::tempdir().unwrap();
    let chartqa = tmp.path().join("chartqa/test.parquet");
    std::fs::create_dir_all(chartqa.parent().unwrap()).unwrap();
    write_parquet(
        &chartqa,
        vec![
            ("img", images(2)),
            ("query", questions(2)),
            ("label", list_answers(&[&["black", "Black"], &["7"]])),
            (
                "human_or_machine",
                Arc::new(StringArray::from(vec!["human", "machine"])),
            ),
        ],
    );
    let out = tmp.path().join("prepared");
    let done = prepare(&[
        "--parquet",
        chartqa.to_str().unwrap(),
        "--image-column",
        "img",
        "--family",
        "ChartQA",
        "--split",
        "test",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let written = out.join("data/test-00000-of-00001.parquet");
    let rows = read(&written);
    assert_eq!(rows.len(), 2);
    let flat = read(&chartqa);
    for (r, f) in rows.iter().zip(&flat) {
        assert_eq!(r.columns, None, "written in the qa layout");
        assert_eq!(r.image.bytes, f.image.bytes, "image bytes unchanged");
        assert_eq!(r.qa.len(), 1);
        assert_eq!(
            (&r.qa[0].question, &r.qa[0].answer, &r.qa[0].answer_list),
            (&f.qa[0].question, &f.qa[0].answer, &f.qa[0].answer_list)
        );
        assert_eq!(r.family.as_deref(), Some("ChartQA"));
        assert_eq!(r.extra["human_or_machine"], f.extra["human_or_machine"]);
    }
    assert_eq!(
        rows[0].qa[0].answer_list,
        Some(vec!["black".to_string(), "Black".to_string()])
    );

    // Both `answer` and `label`: a usage error (exit 2) listing the columns.
    let ambiguous = tmp.path().join("ambiguous.parquet");
    write_parquet(
        &ambiguous,
        vec![
            ("image", images(1)),
            ("question", questions(1)),
            ("answer", Arc::new(StringArray::from(vec!["a"]))),
            ("label", Arc::new(StringArray::from(vec!["a"]))),
        ],
    );
    let refused = prepare(&[
        "--parquet",
        ambiguous.to_str().unwrap(),
        "--out",
        tmp.path().join("p2").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ambiguous answer column: answer, label")
            && err.contains("columns found: image, question, answer, label"),
        "{err}"
    );
}

#[test]
fn prepare_jsonl_takes_list_answers() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, seed) in [("a.png", 1), ("b.png", 2)] {
        let mut png = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(2, 2, image::Rgb([seed, 0, 0]))
            .write_to(&mut png, image::ImageFormat::Png)
            .unwrap();
        std::fs::write(tmp.path().join(name), png.into_inner()).unwrap();
    }
    let jsonl = tmp.path().join("qa.jsonl");
    std::fs::write(
        &jsonl,
        "{\"image\": \"a.png\", \"question\": \"q\", \"answer\": [\"black\", null, \"Black\"]}\n\
         {\"image\": \"b.png\", \"question\": \"q\", \"answer\": \"7\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let done = prepare(&[
        "--jsonl",
        jsonl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let rows = read(&out.join("data/train-00000-of-00001.parquet"));
    assert_eq!(
        answers(&rows),
        [
            (
                r#"["black","Black"]"#.to_string(),
                Some(vec!["black".to_string(), "Black".to_string()])
            ),
            ("7".to_string(), None),
        ]
    );
}
