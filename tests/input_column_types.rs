//! A column whose type cannot hold its values — the image, a flat layout's question or
//! answer, or `qa` — is one error for the whole file (its rows counted from the footer),
//! naming the field, not one error per row. Types the row decoders accept (numbers as
//! answers, binary holding UTF-8 as text) are not refused.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::image_array;
use verisample::record::{ImageRef, InputRow, RowError};

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// `n` image structs (stand-in bytes: the reader does not decode images).
fn images(n: usize) -> ArrayRef {
    let refs: Vec<ImageRef> = (0..n)
        .map(|i| ImageRef {
            bytes: Some(vec![i as u8; 4]),
            path: Some(format!("{i}.png")),
        })
        .collect();
    Arc::new(image_array(refs.iter()))
}

fn texts(n: usize, prefix: &str) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("{prefix}{i}")),
    ))
}

fn read(path: &Path) -> Vec<Result<InputRow, RowError>> {
    InputReader::open(path.to_str().unwrap()).unwrap().collect()
}

/// The one error of a file none of whose rows can be read: (field, row, rows, message).
fn one_file_error(path: &Path) -> (String, Option<usize>, Option<u64>, String) {
    let items = read(path);
    assert_eq!(items.len(), 1, "one error for the file: {items:#?}");
    let e = items[0].as_ref().unwrap_err();
    (e.field.clone(), e.row, e.rows, e.message.clone())
}

/// A file's name, its columns, and the field and message of its one error.
type Case<'a> = (&'a str, Vec<(&'a str, ArrayRef)>, &'a str, &'a str);

#[test]
fn a_wrongly_typed_image_question_or_answer_column_is_one_error_per_file() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 4;
    let cases: Vec<Case> = vec![
        (
            "question_int.parquet",
            vec![
                ("image", images(n)),
                ("question", Arc::new(Int64Array::from(vec![1, 2, 3, 4]))),
                ("answer", texts(n, "a")),
            ],
            "question",
            "column `question` is Int64, want a string",
        ),
        (
            "answer_bool.parquet",
            vec![
                ("image", images(n)),
                ("query", texts(n, "q")),
                ("label", Arc::new(BooleanArray::from(vec![true; 4]))),
            ],
            "label",
            "column `label` is Boolean, want a string or a list of strings",
        ),
        (
            "image_text.parquet",
            vec![
                ("image", texts(n, "img")),
                ("question", texts(n, "q")),
                ("answer", texts(n, "a")),
            ],
            "image",
            "column `image` is Utf8, want struct{bytes, path}",
        ),
    ];
    for (name, columns, field, message) in cases {
        let path = tmp.path().join(name);
        write_parquet(&path, columns);
        let (got_field, row, rows, got) = one_file_error(&path);
        assert_eq!(got_field, field, "{name}");
        assert_eq!(
            (row, rows),
            (Some(0), Some(n as u64)),
            "{name}: the file's rows"
        );
        assert_eq!(
            got,
            format!("{message}: none of the file's {n} rows can be read"),
            "{name}"
        );
    }
}

#[test]
fn types_the_rows_decode_are_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // A numeric answer reads as Python's str(); a binary question holding UTF-8 as text.
    let path = tmp.path().join("ok.parquet");
    write_parquet(
        &path,
        vec![
            ("image", images(2)),
            (
                "question",
                Arc::new(BinaryArray::from_iter_values([b"q0", b"q1"])),
            ),
            ("answer", Arc::new(Int64Array::from(vec![7, 8]))),
        ],
    );
    let rows: Vec<InputRow> = read(&path)
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e:?}")))
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].qa[0].answer, "8");
    assert_eq!(rows[1].qa[0].question, "q1");
}
