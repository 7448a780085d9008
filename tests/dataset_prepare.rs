//! `verisample prepare` through the real binary, read back with our reader.

mod dataset_util;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, ListArray, RecordBatch, StringArray,
    StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, Fields};
use parquet::arrow::ArrowWriter;
use parquet::file::reader::{FileReader, SerializedFileReader};
use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::{image_array, sha256_hex};
use verisample::family::ORAND_CAR_QUESTION;
use verisample::record::{ImageRef, InputRow};

use dataset_util::{bin, png, require_shared_data};

fn read_all(spec: &Path) -> Vec<InputRow> {
    InputReader::open(spec.to_str().unwrap())
        .unwrap()
        .map(|r| r.unwrap_or_else(|e| panic!("{e:?}")))
        .collect()
}

#[test]
fn prepare_orand_car_train_and_val_keeps_every_image_byte() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let src = data.join("orand-car-a");
    let labels: Vec<serde_json::Value> = std::fs::read_to_string(src.join("labels.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_file: HashMap<String, &serde_json::Value> = labels
        .iter()
        .map(|v| (v["file"].as_str().unwrap().to_string(), v))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let mut total = 0;
    for (split, want_rows) in [("train", 1080), ("val", 78)] {
        let out = tmp.path().join(split);
        let st = bin()
            .args(["-q", "prepare", "--labels"])
            .arg(src.join("labels.jsonl"))
            .args(["--family", "OrandCar", "--split", split, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let listed = String::from_utf8(st.stdout).unwrap();
        assert_eq!(
            listed.trim(),
            out.join(format!("data/{split}-00000-of-00001.parquet"))
                .display()
                .to_string()
        );

        let rows = read_all(&out);
        assert_eq!(rows.len(), want_rows, "{split}");
        for r in &rows {
            let file = r.extra["file"].as_str().unwrap();
            let label = by_file[file];
            let original = std::fs::read(src.join(file)).unwrap();
            let bytes = r.image.bytes.as_deref().unwrap();
            assert!(bytes == original.as_slice(), "{file}: image bytes differ");
            let sha = sha256_hex(&original);
            assert_eq!(r.image_sha256.as_deref(), Some(sha.as_str()), "{file}");
            assert_eq!(
                r.image.path.as_deref(),
                Path::new(file).file_name().and_then(|n| n.to_str())
            );
            assert_eq!(r.family.as_deref(), Some("OrandCar"));
            assert_eq!(r.qa.len(), 1);
            assert_eq!(r.qa[0].question, ORAND_CAR_QUESTION);
            assert_eq!(r.qa[0].answer, label["label"].as_str().unwrap());
            assert_eq!(r.qa[0].source.as_deref(), Some(sha.as_str()));
            assert_eq!(r.extra["split"], serde_json::json!(split));
            // Numbers stay numbers (int64 columns): the row's own width and height.
            for key in ["width", "height"] {
                assert!(r.extra[key].is_i64(), "{file}: {key} {}", r.extra[key]);
                assert_eq!(r.extra[key], label[key], "{file}: {key}");
            }
            assert_eq!(
                r.extra["digits"]
                    .as_str()
                    .map(|s| serde_json::from_str::<serde_json::Value>(s).unwrap()),
                Some(label["digits"].clone())
            );
        }
        // Row groups of at most 100 rows.
        let f = SerializedFileReader::new(
            std::fs::File::open(out.join(format!("data/{split}-00000-of-00001.parquet"))).unwrap(),
        )
        .unwrap();
        assert!(f
            .metadata()
            .row_groups()
            .iter()
            .all(|g| g.num_rows() <= 100));
        assert_eq!(f.metadata().num_row_groups(), want_rows.div_ceil(100));
        // The columns' types: JSON integers int64, strings string, nested values JSON text.
        let schema = parquet::arrow::parquet_to_arrow_schema(
            f.metadata().file_metadata().schema_descr(),
            f.metadata().file_metadata().key_value_metadata(),
        )
        .unwrap();
        for (column, want) in [
            ("width", DataType::Int64),
            ("height", DataType::Int64),
            ("split", DataType::Utf8),
            ("file", DataType::Utf8),
            ("digits", DataType::Utf8),
        ] {
            let got = schema.field_with_name(column).unwrap().data_type();
            assert_eq!(got, &want, "{split}: column {column}");
        }
        total += rows.len();
    }
    assert_eq!(total, 1158);
}

#[test]
fn prepare_generic_jsonl_groups_questions_per_image() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("imgs")).unwrap();
    let a = png(5, 4, 1);
    let b = png(6, 2, 2);
    std::fs::write(src.join("imgs/a.png"), &a).unwrap();
    std::fs::write(src.join("imgs/b.png"), &b).unwrap();
    std::fs::write(
        src.join("qa.jsonl"),
        "{\"image\": \"imgs/a.png\", \"question\": \"Q1\", \"answer\": \"A1\"}\n\
         {\"image\": \"imgs/b.png\", \"question\": \"Q2\", \"answer\": \"A2\", \"topic\": \"x\"}\n\
         {\"image\": \"imgs/a.png\", \"question\": \"Q3\", \"answer\": \"A3\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let st = bin()
        .args(["-q", "prepare", "--jsonl"])
        .arg(src.join("qa.jsonl"))
        .args(["--family", "Mine", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let rows = read_all(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].image.bytes.as_deref(), Some(a.as_slice()));
    assert_eq!(
        rows[0]
            .qa
            .iter()
            .map(|q| (q.question.as_str(), q.answer.as_str()))
            .collect::<Vec<_>>(),
        [("Q1", "A1"), ("Q3", "A3")]
    );
    assert_eq!(rows[1].image.bytes.as_deref(), Some(b.as_slice()));
    assert_eq!(
        rows[1].qa[0].extra.get("topic"),
        Some(&serde_json::json!("x"))
    );
    assert_eq!(
        rows[0].qa[0].extra.get("topic"),
        Some(&serde_json::Value::Null)
    );
    assert_eq!(rows[1].family.as_deref(), Some("Mine"));

    // inspect shows the rows with decoded sizes and a verified hash.
    let ins = bin()
        .args(["inspect", "--rows", "1"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(ins.status.success());
    let text = String::from_utf8(ins.stdout).unwrap();
    assert!(text.contains("== train (1 file(s))"), "{text}");
    assert!(
        text.contains(&format!(
            "image: {} bytes, 5x4 Png, path \"a.png\"",
            a.len()
        )),
        "{text}"
    );
    assert!(text.contains("(matches the bytes)"), "{text}");
    assert!(text.contains("huggingface metadata: yes"), "{text}");
    assert!(text.contains("  rows: 2\n"), "{text}");
    assert!(text.contains("\"question\":\"Q1\""), "{text}");
}

/// A QA JSONL in `tmp/src` of two images whose line 2 answers with a bool and line 3 with a
/// fraction; returns the JSONL.
fn jsonl_with_values_that_are_no_text(tmp: &Path) -> std::path::PathBuf {
    let src = tmp.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.png"), png(5, 4, 1)).unwrap();
    std::fs::write(src.join("b.png"), png(6, 2, 2)).unwrap();
    std::fs::write(
        src.join("qa.jsonl"),
        "{\"image\": \"a.png\", \"question\": \"Q1\", \"answer\": \"A1\"}\n\
         {\"image\": \"a.png\", \"question\": \"Q2\", \"answer\": true}\n\
         {\"image\": \"b.png\", \"question\": \"Q3\", \"answer\": 2.5}\n",
    )
    .unwrap();
    src.join("qa.jsonl")
}

/// Catches: `prepare --jsonl` stopping (exit 1, nothing written) at a bool or fractional
/// answer where `--parquet` leaves out a row whose answer `run` cannot read: the question is
/// left out, named by line and field, and the rest is written.
#[test]
fn prepare_jsonl_leaves_out_answers_that_are_no_text() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = jsonl_with_values_that_are_no_text(tmp.path());
    let out = tmp.path().join("out");
    let st = bin()
        .args(["-q", "prepare", "--jsonl"])
        .arg(&jsonl)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{err}");
    let at = jsonl.display();
    for want in [
        format!("left out: {at}:2: field qa[1].answer: `answer` must be a string, got true"),
        format!("left out: {at}:3: field qa[0].answer: `answer` is the number 2.5, whose exact text JSON does not keep"),
        "prepare: 2 row(s) or question(s) left out".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} in {err}");
    }
    let rows = read_all(&out);
    let written: Vec<Vec<(&str, &str)>> = rows
        .iter()
        .map(|r| {
            r.qa.iter()
                .map(|q| (q.question.as_str(), q.answer.as_str()))
                .collect()
        })
        .collect();
    assert_eq!(written, [vec![("Q1", "A1")]]);
}

/// Catches: a rerun of a `prepare` killed mid-write leaving the killed run's staged shards
/// in `OUT/data` (hidden files no later run removed), or removing files not its own.
#[cfg(target_os = "linux")]
#[test]
fn prepare_rerun_removes_what_a_killed_prepare_staged() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = jsonl_with_values_that_are_no_text(tmp.path());
    let data = tmp.path().join("out/data");
    std::fs::create_dir_all(&data).unwrap();
    // A pid above the kernel's largest pid_max (2^22): no live process has it.
    let dead = 4_194_305 + std::process::id() % 1000;
    let stale = [
        format!(".train-00000.staged-{dead}"),
        format!("..train-00001.staged-{dead}.tmp-{dead}-0"),
    ];
    let kept = [format!(".val-00000.staged-{dead}"), ".notes".to_string()];
    for name in stale.iter().chain(&kept) {
        std::fs::write(data.join(name), b"PAR1").unwrap();
    }
    let st = bin()
        .args(["-q", "prepare", "--jsonl"])
        .arg(&jsonl)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(
        st.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want = vec!["train-00000-of-00001.parquet".to_string()];
    want.extend(kept);
    want.sort();
    assert_eq!(left, want);
}

#[test]
fn prepare_refuses_images_outside_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(tmp.path().join("outside.png"), png(2, 2, 0)).unwrap();
    std::fs::write(
        src.join("labels.jsonl"),
        "{\"file\": \"../outside.png\", \"label\": \"1\"}\n",
    )
    .unwrap();
    let st = bin()
        .args(["prepare", "--labels"])
        .arg(src.join("labels.jsonl"))
        .args(["--family", "OrandCar", "--out"])
        .arg(tmp.path().join("o"))
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(1));
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains("escapes the dataset folder"), "{err}");
    assert!(err.contains("labels.jsonl:1: "), "{err}");
    assert!(!tmp
        .path()
        .join("o/data/train-00000-of-00001.parquet")
        .exists());
}

#[test]
fn prepare_names_the_line_of_a_missing_image_and_refuses_to_mix_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.png"), png(2, 2, 0)).unwrap();
    std::fs::write(src.join("b.png"), png(2, 2, 1)).unwrap();
    let prepare = |labels: &str, split: Option<&str>| {
        std::fs::write(src.join("labels.jsonl"), labels).unwrap();
        let mut cmd = bin();
        cmd.args(["prepare", "--labels"])
            .arg(src.join("labels.jsonl"))
            .args(["--family", "OrandCar", "--out"])
            .arg(tmp.path().join("o"));
        if let Some(s) = split {
            cmd.args(["--split", s]);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = prepare(
        "{\"file\": \"a.png\", \"label\": \"1\"}\n\n{\"file\": \"gone.png\", \"label\": \"2\"}\n",
        None,
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("labels.jsonl:3: image file \"gone.png\" not found"),
        "{err}"
    );

    let two_splits = "{\"file\": \"a.png\", \"split\": \"train\", \"label\": \"1\"}\n\
                      {\"file\": \"b.png\", \"split\": \"val\", \"label\": \"2\"}\n";
    let (code, err) = prepare(two_splits, None);
    assert_eq!(code, Some(2), "a usage error: --split is missing");
    assert!(
        err.contains("has lines of 2 splits (train, val): pass --split"),
        "{err}"
    );
    assert!(!tmp
        .path()
        .join("o/data/train-00000-of-00001.parquet")
        .exists());
    let (code, err) = prepare(two_splits, Some("val"));
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn prepare_leaves_out_rows_run_would_refuse_naming_row_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let good = png(3, 2, 7);
    std::fs::write(src.join("a.png"), &good).unwrap();
    std::fs::write(src.join("text.png"), "not an image, a text file renamed").unwrap();
    std::fs::write(src.join("cut.png"), &good[..good.len() / 2]).unwrap();
    std::fs::write(src.join("d.png"), png(2, 2, 8)).unwrap();
    std::fs::write(
        src.join("labels.jsonl"),
        "{\"file\": \"a.png\", \"label\": \"1\"}\n\
         {\"file\": \"text.png\", \"label\": \"2\"}\n\
         {\"file\": \"cut.png\", \"label\": \"3\"}\n\
         {\"file\": \"d.png\", \"label\": null}\n\
         {\"file\": \"d.png\", \"label\": \"  \"}\n",
    )
    .unwrap();
    let out = tmp.path().join("o");
    let st = bin()
        .args(["-q", "prepare", "--labels"])
        .arg(src.join("labels.jsonl"))
        .args(["--family", "OrandCar", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(
        st.status.code(),
        Some(0),
        "as `run` with rows in errors.jsonl: {err}"
    );
    for want in [
        "labels.jsonl:2: field image.bytes: unsupported or unrecognised image format",
        "labels.jsonl:3: field image.bytes: ",
        "labels.jsonl:4: field qa[0].answer: reference answer is missing or blank",
        "labels.jsonl:5: field qa[0].answer: reference answer is missing or blank",
        "4 row(s) or question(s) left out",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
    assert!(!err.contains("labels.jsonl:1:"), "{err}");
    let rows = read_all(&out);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].image.bytes.as_deref(), Some(good.as_slice()));
    assert_eq!(rows[0].qa[0].answer, "1");

    // A generic JSONL with a null answer, and nothing left: an error listing why.
    std::fs::write(
        src.join("qa.jsonl"),
        "{\"image\": \"text.png\", \"question\": \"Q\", \"answer\": \"x\"}\n\
         {\"image\": \"a.png\", \"question\": \"Q\", \"answer\": null}\n",
    )
    .unwrap();
    let st = bin()
        .args(["-q", "prepare", "--jsonl"])
        .arg(src.join("qa.jsonl"))
        .args(["--out"])
        .arg(tmp.path().join("o2"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(1), "{err}");
    assert!(err.contains("every row was left out"), "{err}");
    assert!(err.contains("qa.jsonl:1: field image.bytes"), "{err}");
    assert!(err.contains("qa.jsonl:2: field qa[0].answer"), "{err}");
    assert!(!tmp
        .path()
        .join("o2/data/train-00000-of-00001.parquet")
        .exists());

    // A blank reference leaves out only its question, named by its own line; the image's
    // other question is written.
    std::fs::write(
        src.join("two.jsonl"),
        "{\"image\": \"a.png\", \"question\": \"Q1\", \"answer\": \"x\"}\n\
         {\"image\": \"d.png\", \"question\": \"Q\", \"answer\": \"y\"}\n\
         {\"image\": \"a.png\", \"question\": \"Q2\", \"answer\": \" \"}\n\
         {\"image\": \"a.png\", \"question\": null, \"answer\": \"z\"}\n\
         {\"image\": \"a.png\", \"question\": \"Q4\", \"answer\": [null]}\n\
         {\"image\": \"d.png\", \"question\": \"Q5\", \"answer\": []}\n",
    )
    .unwrap();
    let o3 = tmp.path().join("o3");
    let st = bin()
        .args(["-q", "prepare", "--jsonl"])
        .arg(src.join("two.jsonl"))
        .args(["--out"])
        .arg(&o3)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{err}");
    for want in [
        "two.jsonl:3: field qa[1].answer: reference answer is missing or blank",
        "two.jsonl:4: field qa[2].question: ",
        "two.jsonl:5: field qa[3].answer: ",
        "two.jsonl:6: field qa[1].answer: ",
        "4 row(s) or question(s) left out",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
    let rows = read_all(&o3);
    let questions: Vec<Vec<&str>> = rows
        .iter()
        .map(|r| r.qa.iter().map(|q| q.question.as_str()).collect())
        .collect();
    assert_eq!(questions, [vec!["Q1"], vec!["Q"]]);
}

/// A parquet file of the given columns.
fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// An image column: each row's bytes (`None`: a null image), path `<i>.png`.
fn image_column(images: &[Option<Vec<u8>>]) -> ArrayRef {
    let refs: Vec<ImageRef> = images
        .iter()
        .enumerate()
        .map(|(i, bytes)| ImageRef {
            bytes: bytes.clone(),
            path: bytes.as_ref().map(|_| format!("{i}.png")),
        })
        .collect();
    Arc::new(image_array(refs.iter()))
}

fn text_column(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// Catches: `prepare --parquet` writing the true hash over a stored `image_sha256` that is
/// not the image's, and a `source` neither hash nor path as `orig_source` (so `run` takes
/// from the prepared data what it drops from the input); stopping (exit 1, nothing written)
/// at a row the reader refuses (null image, null `qa`, answer not UTF-8, a bool, a decimal
/// or a struct); writing a `family` that cannot name a split. Each is left out, named by
/// file, row and field, and the other rows are written.
#[test]
fn prepare_parquet_leaves_out_rows_run_refuses_or_drops_naming_row_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let img: Vec<Vec<u8>> = (0..6).map(|i| png(3, 2, i)).collect();
    let sha = |i: usize| sha256_hex(&img[i]);
    let upper = sha(2).to_uppercase();
    let some = |i: usize| Some(img[i].clone());
    write_parquet(
        &src.join("a_flat.parquet"),
        vec![
            (
                "image",
                image_column(&[some(0), some(1), some(2), some(3), some(4), None]),
            ),
            (
                "question",
                text_column(&[
                    Some("q0"),
                    Some("q1"),
                    Some("q2"),
                    Some("q3"),
                    Some("q4"),
                    Some("q5"),
                ]),
            ),
            (
                "answer",
                text_column(&[
                    Some("a0"),
                    Some("a1"),
                    Some("a2"),
                    Some("a3"),
                    Some("a4"),
                    Some("a5"),
                ]),
            ),
            (
                "image_sha256",
                text_column(&[
                    Some(&sha(0)),
                    Some("deadbeef"),
                    Some(&upper),
                    None,
                    None,
                    None,
                ]),
            ),
            (
                "family",
                text_column(&[
                    Some("Fam"),
                    Some("Fam"),
                    None,
                    Some("Bad/../x"),
                    Some("  "),
                    Some("Fam"),
                ]),
            ),
        ],
    );
    let flat_typed = |name: &str, answer: ArrayRef| {
        write_parquet(
            &src.join(name),
            vec![
                ("image", image_column(&[some(0)])),
                ("question", text_column(&[Some("q")])),
                ("answer", answer),
            ],
        )
    };
    flat_typed("b_bool.parquet", Arc::new(BooleanArray::from(vec![true])));
    flat_typed(
        "b_decimal.parquet",
        Arc::new(
            Decimal128Array::from(vec![150_i128])
                .with_precision_and_scale(5, 2)
                .unwrap(),
        ),
    );
    flat_typed(
        "b_struct.parquet",
        Arc::new(StructArray::from(vec![(
            Arc::new(Field::new("text", DataType::Utf8, true)),
            text_column(&[Some("x")]),
        )])),
    );
    flat_typed(
        "c_binary.parquet",
        Arc::new(BinaryArray::from(vec![b"\xff\xfe".as_ref()])),
    );
    // The `qa` layout with `source`: row 0's `qa` is null, row 2's empty; row 1 has a question whose source
    // is elsewhere and one whose source is its path.
    let qa_fields = Fields::from(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", DataType::Utf8, true),
        Field::new("source", DataType::Utf8, true),
    ]);
    let items = StructArray::new(
        qa_fields.clone(),
        vec![
            text_column(&[Some("elsewhere"), Some("by path")]),
            text_column(&[Some("x"), Some("y")]),
            text_column(&[Some("other.png"), Some("1.png")]),
        ],
        None,
    );
    let qa: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(qa_fields), true)),
        OffsetBuffer::from_lengths([0, 2, 0]),
        Arc::new(items),
        Some(NullBuffer::from(vec![false, true, true])),
    ));
    write_parquet(
        &src.join("d_qa.parquet"),
        vec![
            ("image", image_column(&[some(5), some(5), some(4)])),
            ("qa", qa),
        ],
    );

    let out = tmp.path().join("out");
    let st = bin()
        .args(["-q", "prepare", "--parquet"])
        .arg(&src)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{err}");
    let file = |name: &str| src.join(name).display().to_string();
    for want in [
        format!("{}: row 1: field image_sha256: stored image_sha256 \"deadbeef\" is not the SHA-256 of the image bytes ({})", file("a_flat.parquet"), sha(1)),
        format!("{}: row 3: field family: family \"Bad/../x\" cannot name a split", file("a_flat.parquet")),
        format!("{}: row 4: field family: family \"  \" cannot name a split", file("a_flat.parquet")),
        format!("{}: row 5: field image.bytes: null image", file("a_flat.parquet")),
        format!("{}: row 0: field answer: column `answer` is Boolean, want a string or a list of strings: none of the file's 1 rows can be read", file("b_bool.parquet")),
        format!("{}: row 0: field answer: binary value is not valid UTF-8", file("c_binary.parquet")),
        format!("{}: row 0: field qa: qa is null", file("d_qa.parquet")),
        format!("{}: row 1: field qa[0].source: source \"other.png\" is neither the image's SHA-256 nor its path", file("d_qa.parquet")),
        format!("{}: row 0: field answer: column `answer` is Decimal128(5, 2), want a string or a list of strings", file("b_decimal.parquet")),
        format!("{}: row 0: field answer: column `answer` is Struct(\"text\": Utf8), want a string or a list of strings", file("b_struct.parquet")),
        format!("{}: row 2: field qa: row has no questions", file("d_qa.parquet")),
        "11 row(s) or question(s) left out".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} in {err}");
    }
    let rows = read_all(&out);
    let written: Vec<(Vec<&str>, Option<&str>)> = rows
        .iter()
        .map(|r| {
            let questions = r.qa.iter().map(|q| q.question.as_str()).collect();
            (questions, r.family.as_deref())
        })
        .collect();
    assert_eq!(
        written,
        [
            (vec!["q0"], Some("Fam")),
            (vec!["q2"], None),
            (vec!["by path"], None)
        ]
    );
    assert_eq!(rows[1].image_sha256.as_deref(), Some(sha(2).as_str()));
    assert_eq!(rows[2].qa[0].source.as_deref(), Some(sha(5).as_str()));
}

/// Families `default` and a null family (which `run` puts in `Default`) would write split
/// files differing only in case: `prepare` writes them (the data is not wrong) but warns that
/// `run` will refuse the dataset, as `run` then does. Catches: comparing raw column values
/// (null vs `default` do not clash as values) or no warning at all.
#[test]
fn prepare_warns_of_families_that_differ_only_in_case() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.parquet");
    write_parquet(
        &src,
        vec![
            (
                "image",
                image_column(&[
                    Some(png(3, 2, 0)),
                    Some(png(3, 2, 1)),
                    Some(png(3, 2, 2)),
                    Some(png(3, 2, 3)),
                ]),
            ),
            (
                "query",
                text_column(&[Some("q0"), Some("q1"), Some("q2"), Some("q3")]),
            ),
            (
                "label",
                text_column(&[Some("a0"), Some("a1"), Some("a2"), Some(" ")]),
            ),
            (
                "family",
                text_column(&[Some("default"), None, Some("Other"), Some("Other")]),
            ),
        ],
    );
    let out = tmp.path().join("out");
    let st = bin()
        .args(["-q", "prepare", "--parquet"])
        .arg(&src)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: families Default, default differ only in case"),
        "{err}"
    );
    assert!(!err.contains("family Other"), "{err}");
    // A flat layout's blank reference is named by the input's own column, as `run` names it.
    assert!(
        err.contains("row 3: field label: reference answer is missing or blank"),
        "{err}"
    );
    assert_eq!(read_all(&out).len(), 3);
    let run = bin()
        .args(["run", "--data"])
        .arg(out.join("data"))
        .arg("--out")
        .arg(tmp.path().join("run"))
        .output()
        .unwrap();
    let run_err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{run_err}");
    assert!(run_err.contains("differ only in case"), "{run_err}");
}

/// A `--question` other than the family's fixed one is written (the user may mean it) with a
/// warning that `run` drops every such item as `off_task`; the fixed question itself, given
/// explicitly, warns of nothing.
#[test]
fn prepare_warns_of_a_question_the_family_does_not_ask() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let src = data.join("orand-car-a");
    let tmp = tempfile::tempdir().unwrap();
    let prepare = |question: &str, out: &str| {
        bin()
            .args(["-q", "prepare", "--labels"])
            .arg(src.join("labels.jsonl"))
            .args([
                "--family",
                "OrandCar",
                "--split",
                "val",
                "--question",
                question,
            ])
            .arg("--out")
            .arg(tmp.path().join(out))
            .output()
            .unwrap()
    };
    let other = prepare("Different question?", "other");
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: family OrandCar asks its own fixed question")
            && err.contains("off_task"),
        "{err}"
    );
    let same = prepare(ORAND_CAR_QUESTION, "same");
    assert_eq!(same.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&same.stderr).contains("warning"));
}
