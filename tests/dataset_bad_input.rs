//! The input reader on broken files: each defect gives one clear `RowError` naming the file,
//! row and field, and the good rows around it still come through. The bad files are made
//! here with arrow (nothing binary is committed).

mod dataset_util;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, LargeBinaryArray, LargeListArray, LargeStringArray, ListArray,
    RecordBatch, StringArray, StructArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields};
use parquet::arrow::ArrowWriter;
use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::sha256_hex;
use verisample::record::{InputRow, RowError};

use dataset_util::png;

fn image_col(bytes: Vec<Option<Vec<u8>>>, paths: Vec<Option<&str>>) -> ArrayRef {
    let fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let b = BinaryArray::from(bytes.iter().map(|o| o.as_deref()).collect::<Vec<_>>());
    Arc::new(StructArray::new(
        fields,
        vec![
            Arc::new(b) as ArrayRef,
            Arc::new(StringArray::from(paths)) as ArrayRef,
        ],
        None,
    ))
}

/// `qa` with one item per row; `question` as the given array (string or binary).
fn qa_col(questions: ArrayRef, answers: Vec<&str>) -> ArrayRef {
    let n = answers.len();
    let fields = Fields::from(vec![
        Field::new("question", questions.data_type().clone(), true),
        Field::new("answer", DataType::Utf8, true),
    ]);
    let values = StructArray::new(
        fields.clone(),
        vec![questions, Arc::new(StringArray::from(answers)) as ArrayRef],
        None,
    );
    let item = Arc::new(Field::new("item", DataType::Struct(fields), true));
    Arc::new(ListArray::new(
        item,
        OffsetBuffer::from_lengths(std::iter::repeat_n(1, n)),
        Arc::new(values),
        None,
    ))
}

fn write(path: &Path, cols: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn strings(v: &[&str]) -> ArrayRef {
    Arc::new(StringArray::from(v.to_vec()))
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    good_png: Vec<u8>,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ds");
    let data = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(root.join("img")).unwrap();
    let good = png(4, 3, 9);
    std::fs::write(root.join("img/ok.png"), &good).unwrap();
    std::fs::write(tmp.path().join("secret.png"), png(2, 2, 1)).unwrap();
    let g = || Some(good.clone());

    // a_null_bytes: rows 0 and 2 good, row 1 has neither bytes nor path.
    write(
        &data.join("a_null_bytes.parquet"),
        vec![
            (
                "image",
                image_col(
                    vec![g(), None, g()],
                    vec![Some("x.png"), None, Some("y.png")],
                ),
            ),
            (
                "qa",
                qa_col(strings(&["q0", "q1", "q2"]), vec!["a0", "a1", "a2"]),
            ),
        ],
    );
    // b_bad_utf8: question stored as binary; row 1 is not UTF-8.
    let qs: ArrayRef = Arc::new(BinaryArray::from(vec![
        b"fine".as_ref(),
        b"\xff\xfeoops".as_ref(),
    ]));
    write(
        &data.join("b_bad_utf8.parquet"),
        vec![
            ("image", image_col(vec![g(), g()], vec![None, None])),
            ("qa", qa_col(qs, vec!["a", "b"])),
        ],
    );
    // c_paths: row 0 escapes with .., row 1 absolute, row 2 a good path-only image.
    write(
        &data.join("c_paths.parquet"),
        vec![
            (
                "image",
                image_col(
                    vec![None, None, None],
                    vec![
                        Some("../../secret.png"),
                        Some("/etc/passwd"),
                        Some("img/ok.png"),
                    ],
                ),
            ),
            ("qa", qa_col(strings(&["q", "q", "q"]), vec!["a", "a", "a"])),
        ],
    );
    // d_missing_qa: no qa column at all.
    write(
        &data.join("d_missing_qa.parquet"),
        vec![("image", image_col(vec![g()], vec![None]))],
    );
    // e_wrong_qa: qa is a plain string, in each of 3 rows (one error for the file).
    write(
        &data.join("e_wrong_qa.parquet"),
        vec![
            (
                "image",
                image_col(vec![g(), g(), g()], vec![None, None, None]),
            ),
            ("qa", strings(&["not a list", "nor this", "nor that"])),
        ],
    );
    // f_truncated: a valid file cut in half.
    let full = data.join("f_full.tmp");
    write(
        &full,
        vec![
            ("image", image_col(vec![g(), g()], vec![None, None])),
            ("qa", qa_col(strings(&["q", "q"]), vec!["a", "a"])),
        ],
    );
    let bytes = std::fs::read(&full).unwrap();
    std::fs::write(data.join("f_truncated.parquet"), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::remove_file(full).unwrap();
    // g_large: large_* variants, an extra column and an extra qa field, all good.
    let img_fields = Fields::from(vec![
        Field::new("bytes", DataType::LargeBinary, true),
        Field::new("path", DataType::LargeUtf8, true),
    ]);
    let img: ArrayRef = Arc::new(StructArray::new(
        img_fields,
        vec![
            Arc::new(LargeBinaryArray::from(vec![good.as_slice()])) as ArrayRef,
            Arc::new(LargeStringArray::from(vec!["l.png"])) as ArrayRef,
        ],
        None,
    ));
    let qf = Fields::from(vec![
        Field::new("question", DataType::LargeUtf8, true),
        Field::new("answer", DataType::LargeUtf8, true),
        Field::new("source", DataType::Utf8, true),
        Field::new("lang", DataType::Utf8, true),
    ]);
    let qv = StructArray::new(
        qf.clone(),
        vec![
            Arc::new(LargeStringArray::from(vec!["ql"])) as ArrayRef,
            Arc::new(LargeStringArray::from(vec!["al"])) as ArrayRef,
            Arc::new(StringArray::from(vec!["src"])) as ArrayRef,
            Arc::new(StringArray::from(vec!["en"])) as ArrayRef,
        ],
        None,
    );
    let qa: ArrayRef = Arc::new(LargeListArray::new(
        Arc::new(Field::new("item", DataType::Struct(qf), true)),
        OffsetBuffer::from_lengths([1]),
        Arc::new(qv),
        None,
    ));
    write(
        &data.join("g_large.parquet"),
        vec![
            ("image", img),
            ("qa", qa),
            ("image_sha256", strings(&["abc"])),
            ("family", strings(&["OrandCar"])),
            (
                "width",
                Arc::new(arrow::array::Int64Array::from(vec![108])) as ArrayRef,
            ),
        ],
    );
    Fixture {
        _tmp: tmp,
        root,
        good_png: good,
    }
}

fn file_name(e: &RowError) -> String {
    Path::new(&e.file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn each_defect_is_one_clear_row_error_and_good_rows_survive() {
    let fx = fixture();
    let items: Vec<Result<InputRow, RowError>> = InputReader::open(fx.root.to_str().unwrap())
        .unwrap()
        .collect();
    let errors: Vec<&RowError> = items.iter().filter_map(|r| r.as_ref().err()).collect();
    let rows: Vec<&InputRow> = items.iter().filter_map(|r| r.as_ref().ok()).collect();

    let got: BTreeSet<(String, Option<usize>, String)> = errors
        .iter()
        .map(|e| (file_name(e), e.row, e.field.clone()))
        .collect();
    let want: BTreeSet<(String, Option<usize>, String)> = [
        ("a_null_bytes.parquet", Some(1), "image.bytes"),
        ("b_bad_utf8.parquet", Some(1), "qa[0].question"),
        ("c_paths.parquet", Some(0), "image.path"),
        ("c_paths.parquet", Some(1), "image.path"),
        ("d_missing_qa.parquet", Some(0), "qa"),
        ("e_wrong_qa.parquet", Some(0), "qa"),
        ("f_truncated.parquet", None, "file"),
    ]
    .into_iter()
    .map(|(f, r, field)| (f.to_string(), r, field.to_string()))
    .collect();
    assert_eq!(got, want, "{errors:#?}");
    assert_eq!(errors.len(), want.len(), "one error per defect");
    let wrong_qa = errors.iter().find(|e| file_name(e) == "e_wrong_qa.parquet");
    assert_eq!(
        wrong_qa.and_then(|e| e.rows),
        Some(3),
        "the file's rows, counted"
    );

    let message = |file: &str, row: Option<usize>| {
        errors
            .iter()
            .find(|e| file_name(e) == file && e.row == row)
            .unwrap()
            .message
            .clone()
    };
    for (file, row, needle) in [
        ("a_null_bytes.parquet", Some(1), "null image"),
        ("b_bad_utf8.parquet", Some(1), "not valid UTF-8"),
        ("c_paths.parquet", Some(0), "escapes the dataset folder"),
        ("c_paths.parquet", Some(1), "absolute path"),
        ("d_missing_qa.parquet", Some(0), "missing column `qa`"),
        (
            "e_wrong_qa.parquet",
            Some(0),
            "column `qa` is Utf8, want list<struct{question, answer, …}>: none of the file's 3 rows",
        ),
        ("f_truncated.parquet", None, "parquet"),
    ] {
        let m = message(file, row);
        assert!(m.contains(needle), "{file} {row:?}: {m}");
    }

    // Good rows, in file order, with their own row index.
    let good: Vec<(String, usize)> = rows
        .iter()
        .map(|r| {
            (
                Path::new(&r.source_file)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                r.row_index,
            )
        })
        .collect();
    assert_eq!(
        good,
        [
            ("a_null_bytes.parquet".to_string(), 0),
            ("a_null_bytes.parquet".to_string(), 2),
            ("b_bad_utf8.parquet".to_string(), 0),
            ("c_paths.parquet".to_string(), 2),
            ("g_large.parquet".to_string(), 0),
        ]
    );
    assert_eq!(rows[1].qa[0].question, "q2");
    assert_eq!(rows[2].qa[0].question, "fine");
    // The path-only image was read from inside the folder.
    assert_eq!(rows[3].image.bytes.as_deref(), Some(fx.good_png.as_slice()));
    assert_eq!(rows[3].image.path.as_deref(), Some("img/ok.png"));
    // large_* types, extra column and extra qa field.
    let g = rows[4];
    assert_eq!(
        g.image.bytes.as_deref().map(sha256_hex),
        Some(sha256_hex(&fx.good_png))
    );
    assert_eq!(g.image.path.as_deref(), Some("l.png"));
    assert_eq!(
        (
            g.qa[0].question.as_str(),
            g.qa[0].answer.as_str(),
            g.qa[0].source.as_deref()
        ),
        ("ql", "al", Some("src"))
    );
    assert_eq!(g.qa[0].extra.get("lang"), Some(&serde_json::json!("en")));
    assert_eq!(g.image_sha256.as_deref(), Some("abc"));
    assert_eq!(g.family.as_deref(), Some("OrandCar"));
    assert_eq!(g.extra.get("width"), Some(&serde_json::json!(108)));
}

#[test]
fn a_glob_and_a_single_file_read_the_same_rows() {
    let fx = fixture();
    let by_glob: Vec<_> = InputReader::open(&format!("{}/data/a_*.parquet", fx.root.display()))
        .unwrap()
        .collect();
    let by_file: Vec<_> =
        InputReader::open(fx.root.join("data/a_null_bytes.parquet").to_str().unwrap())
            .unwrap()
            .collect();
    assert_eq!(by_glob, by_file);
    assert_eq!(by_glob.len(), 3);
    assert!(InputReader::open(&format!("{}/data/zzz*.parquet", fx.root.display())).is_err());
}

#[test]
fn a_corrupt_row_group_is_one_error_and_the_next_row_group_still_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("h_corrupt_page.parquet");
    let img = png(3, 3, 4);
    let batch = RecordBatch::try_from_iter(vec![
        (
            "image",
            image_col(vec![Some(img.clone()); 4], vec![None; 4]),
        ),
        (
            "qa",
            qa_col(
                strings(&["q0", "q1", "q2", "q3"]),
                vec!["a0", "a1", "a2", "a3"],
            ),
        ),
    ])
    .unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(2))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    // Overwrite the first page header of row group 0 (it starts right after the `PAR1` magic).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4..24].fill(0xff);
    std::fs::write(&path, bytes).unwrap();

    let items: Vec<Result<InputRow, RowError>> =
        InputReader::open(path.to_str().unwrap()).unwrap().collect();
    assert_eq!(items.len(), 3, "{items:#?}");
    let e = items[0].as_ref().unwrap_err();
    assert_eq!(
        (e.row, e.rows, e.field.as_str()),
        (Some(0), Some(2), "file")
    );
    assert!(
        e.message.contains("rows 0..2 (row group 0)"),
        "{}",
        e.message
    );
    let ok: Vec<(usize, String)> = items[1..]
        .iter()
        .map(|r| {
            r.as_ref()
                .map(|r| (r.row_index, r.qa[0].question.clone()))
                .unwrap()
        })
        .collect();
    assert_eq!(ok, [(2, "q2".to_string()), (3, "q3".to_string())]);
}

/// A parquet file `bad_answer.parquet` in `dir`: one row group of `n` rows (`q{i}`, `a{i}`,
/// one small PNG each) whose row `bad` has an answer that is not UTF-8 in a `string` column.
fn bad_answer_file(dir: &Path, n: usize, bad: usize) -> std::path::PathBuf {
    let good = png(4, 3, 9);
    let mut answers: Vec<Vec<u8>> = (0..n).map(|i| format!("a{i}").into_bytes()).collect();
    answers[bad] = b"\xff\xfebad".to_vec();
    let offsets = OffsetBuffer::from_lengths(answers.iter().map(Vec::len));
    let values = arrow::buffer::Buffer::from(answers.concat());
    // SAFETY: deliberately invalid UTF-8 in a string array, to write a broken parquet file;
    // the offsets are valid and the array is only handed to the parquet writer.
    let answer_col: ArrayRef =
        Arc::new(unsafe { StringArray::new_unchecked(offsets, values, None) });
    let questions: Vec<String> = (0..n).map(|i| format!("q{i}")).collect();
    let fields = Fields::from(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", DataType::Utf8, true),
    ]);
    let items = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(StringArray::from(questions)) as ArrayRef,
            answer_col,
        ],
        None,
    );
    let qa: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(fields), true)),
        OffsetBuffer::from_lengths(std::iter::repeat_n(1, n)),
        Arc::new(items),
        None,
    ));
    let path = dir.join("bad_answer.parquet");
    write(
        &path,
        vec![
            ("image", image_col(vec![Some(good); n], vec![None; n])),
            ("qa", qa),
        ],
    );
    path
}

/// A row group of 12 rows whose row 7 has an answer that is not UTF-8 in a `string` column:
/// only row 7 is an error (naming `qa[0].answer`); the other 11 rows are read in order.
#[test]
fn one_non_utf8_string_loses_only_its_row() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 12;
    let bad = 7;
    let path = bad_answer_file(tmp.path(), n, bad);
    let out: Vec<Result<InputRow, RowError>> =
        InputReader::open(path.to_str().unwrap()).unwrap().collect();
    assert_eq!(out.len(), n, "{out:?}");
    let errors: Vec<&RowError> = out.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].row, Some(bad));
    assert_eq!(errors[0].field, "qa[0].answer");
    assert!(errors[0].file.ends_with("bad_answer.parquet"));
    assert!(errors[0].message.contains("UTF-8"), "{}", errors[0].message);
    let rows: Vec<&InputRow> = out.iter().filter_map(|r| r.as_ref().ok()).collect();
    let got: Vec<(usize, String)> = rows
        .iter()
        .map(|r| (r.row_index, r.qa[0].answer.clone()))
        .collect();
    let want: Vec<(usize, String)> = (0..n)
        .filter(|&i| i != bad)
        .map(|i| (i, format!("a{i}")))
        .collect();
    assert_eq!(got, want);
}

/// A null question, a null `qa` entry and a null answer fail only their own entries: the row
/// is still read with all four entries, the valid one intact, and the pipeline's entry check
/// names each bad one (`qa[i].question` / `qa[i].answer`), so it alone goes to errors.jsonl.
#[test]
fn null_qa_entries_fail_only_themselves() {
    use verisample::pipeline::input_check::check_qa;
    let tmp = tempfile::tempdir().unwrap();
    let fields = Fields::from(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", DataType::Utf8, true),
    ]);
    let items = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(StringArray::from(vec![
                Some("q0"),
                None,
                Some("q2"),
                Some("q3"),
            ])) as ArrayRef,
            Arc::new(StringArray::from(vec![
                Some("a0"),
                Some("a1"),
                Some("a2"),
                None,
            ])) as ArrayRef,
        ],
        Some(arrow::buffer::NullBuffer::from(vec![
            true, true, false, true,
        ])),
    );
    let qa: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(fields), true)),
        OffsetBuffer::from_lengths([4]),
        Arc::new(items),
        None,
    ));
    let path = tmp.path().join("nulls.parquet");
    write(
        &path,
        vec![
            ("image", image_col(vec![Some(png(4, 3, 9))], vec![None])),
            ("qa", qa),
        ],
    );
    let out: Vec<Result<InputRow, RowError>> =
        InputReader::open(path.to_str().unwrap()).unwrap().collect();
    assert_eq!(out.len(), 1);
    let row = out[0].as_ref().expect("the row is read");
    assert_eq!(row.qa.len(), 4);
    assert_eq!(
        (row.qa[0].question.as_str(), row.qa[0].answer.as_str()),
        ("q0", "a0")
    );
    let checks: Vec<Result<(), String>> = row
        .qa
        .iter()
        .enumerate()
        .map(|(i, q)| check_qa(i, q, row.columns.as_ref()).map_err(|p| p.field))
        .collect();
    assert_eq!(
        checks,
        vec![
            Ok(()),
            Err("qa[1].question".to_string()),
            Err("qa[2].question".to_string()),
            Err("qa[3].answer".to_string()),
        ]
    );
}

#[test]
fn a_family_column_of_another_type_is_an_error_unless_family_is_given() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("int_family.parquet");
    let good = png(4, 3, 9);
    write(
        &file,
        vec![
            ("image", image_col(vec![Some(good)], vec![Some("a.png")])),
            ("qa", qa_col(strings(&["q"]), vec!["a"])),
            (
                "family",
                Arc::new(arrow::array::Int64Array::from(vec![7])) as ArrayRef,
            ),
        ],
    );
    let spec = file.to_str().unwrap();
    let read = |skip_family_column| -> Vec<Result<InputRow, RowError>> {
        let opts = verisample::dataset::layout::ReadOptions {
            skip_family_column,
            ..Default::default()
        };
        InputReader::open_with(spec, &opts).unwrap().collect()
    };
    let refused = read(false);
    let e = refused[0].as_ref().unwrap_err();
    assert_eq!((e.field.as_str(), e.row), ("family", Some(0)), "{e:?}");
    // `--family` overrides the column: it is not read at all.
    let rows = read(true);
    let row = rows[0].as_ref().unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!((row.family.as_deref(), row.qa.len()), (None, 1));
}

/// `inspect` reads a row group holding one answer that is not UTF-8 as `run` does (issue 45
/// item 7): the group is read, the one row is named with the field `run`'s errors.jsonl
/// names (`qa[0].answer`), the rows after it are shown, and the exit status is 0 (run goes on).
#[test]
fn inspect_names_the_non_utf8_field_as_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let path = bad_answer_file(tmp.path(), 12, 7);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_verisample"))
        .args(["inspect", "--rows", "12"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("UNREADABLE"), "{stdout}");
    let named: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("NOT USABLE"))
        .collect();
    assert_eq!(named.len(), 1, "{stdout}");
    assert!(
        named[0].contains("bad_answer.parquet: row 7 (row group 0): NOT USABLE: qa[0].answer:")
            && named[0].contains("UTF-8"),
        "{}",
        named[0]
    );
    // Every row is shown as written, the ones after the bad one included; the bad value null.
    assert!(
        stdout.contains(r#"{"answer":null,"question":"q7"}"#),
        "{stdout}"
    );
    for i in [0, 6, 8, 11] {
        assert!(
            stdout.contains(&format!("\"a{i}\"")),
            "a{i} missing:\n{stdout}"
        );
    }
    assert!(stdout.contains("rows: 12"), "{stdout}");
}
