//! `verisample prepare --jsonl`: a line `run` could not use leaves out its question (or its
//! row), named by file:line and field and counted, as a null answer does; the prepare goes
//! on (exit 0) while something is written. Only a line that is not JSON ends it. And
//! `prepare --parquet --family` leaves the input's `family` column unread, as `run` does.

mod dataset_util;

use std::path::Path;
use std::process::Output;

use verisample::dataset::reader::InputReader;

use dataset_util::{bin, png};

fn prepare(jsonl: &Path, out: &Path) -> Output {
    bin()
        .args(["prepare", "--jsonl"])
        .arg(jsonl)
        .args(["--family", "Mine", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// Catches: a line without `answer` or `question`, or whose image path escapes the folder,
/// is a link out or is missing, aborting the whole prepare (exit 1, `qa.jsonl:3: missing
/// 'answer'`) while `"answer": null` only leaves its question out (newcomer finding).
#[test]
fn lines_run_could_not_use_are_left_out_named_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (i, name) in ["a.png", "b.png", "c.png"].iter().enumerate() {
        std::fs::write(src.join(name), png(5, 4, i as u8)).unwrap();
    }
    std::fs::write(tmp.path().join("outside.png"), png(3, 3, 9)).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside.png"), src.join("link.png")).unwrap();
    let jsonl = src.join("qa.jsonl");
    std::fs::write(
        &jsonl,
        [
            r#"{"image": "a.png", "question": "Q1", "answer": "A1"}"#,
            r#"{"image": "a.png", "question": "Q2"}"#,
            r#"{"image": "b.png", "answer": "A3"}"#,
            r#"{"image": "../../../../etc/passwd", "question": "Q4", "answer": "A4"}"#,
            r#"{"image": "link.png", "question": "Q5", "answer": "A5"}"#,
            r#"{"image": "nope.png", "question": "Q6", "answer": "A6"}"#,
            r#"{"image": "c.png", "question": "Q7", "answer": null}"#,
            r#"{"image": "c.png", "question": "Q8", "answer": "A8"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let st = prepare(&jsonl, &out);
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{stderr}");
    let left: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("left out: "))
        .collect();
    let at = |n: usize| format!("{}:{n}: field ", jsonl.display());
    let want = [
        (2, "qa[1].answer: missing `answer`"),
        (3, "qa[0].question: missing `question`"),
        (
            4,
            "image: path \"../../../../etc/passwd\" escapes the dataset folder",
        ),
        (5, "image: path \"link.png\" escapes the dataset folder"),
        (
            6,
            "image: image file \"nope.png\" not found in the dataset folder",
        ),
        (7, "qa[0].answer: reference answer is missing or blank"),
    ];
    assert_eq!(left.len(), want.len(), "{stderr}");
    for (line, (n, what)) in left.iter().zip(want) {
        assert!(line.starts_with(&format!("{}{what}", at(n))), "{line}");
    }
    assert!(
        stderr.contains("prepare: 6 row(s) or question(s) left out"),
        "{stderr}"
    );
    assert!(stderr.contains(", 2 row(s) written"), "{stderr}");
    let rows: Vec<(Option<String>, Vec<String>)> = InputReader::open(out.to_str().unwrap())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.image.path, r.qa.into_iter().map(|q| q.question).collect())
        })
        .collect();
    assert_eq!(
        rows,
        [
            (Some("a.png".to_string()), vec!["Q1".to_string()]),
            (Some("c.png".to_string()), vec!["Q8".to_string()]),
        ]
    );
}

/// Catches: a JSONL of which every line is left out exiting 0 with nothing written, or a line
/// that is not JSON being left out instead of ending the prepare (README: exit 1 for both).
#[test]
fn nothing_left_or_a_line_that_is_not_json_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("qa.jsonl");
    std::fs::write(tmp.path().join("a.png"), png(5, 4, 1)).unwrap();
    std::fs::write(
        &jsonl,
        "{\"image\": \"nope.png\", \"question\": \"Q\", \"answer\": \"A\"}\n{\"image\": \"a.png\", \"answer\": \"A\"}\n",
    )
    .unwrap();
    let st = prepare(&jsonl, &tmp.path().join("none"));
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("every row was left out")
            && stderr.contains("qa.jsonl:1: field image: image file \"nope.png\" not found")
            && stderr.contains("qa.jsonl:2: field qa[0].question: missing `question`"),
        "{stderr}"
    );
    assert!(!tmp
        .path()
        .join("none/data/train-00000-of-00001.parquet")
        .exists());

    std::fs::write(
        &jsonl,
        "{\"image\": \"a.png\", \"question\": \"Q\", \"answer\": \"A\"}\n{\"image\": \"a.png\",\n",
    )
    .unwrap();
    let st = prepare(&jsonl, &tmp.path().join("bad"));
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("qa.jsonl:2: invalid JSON"), "{stderr}");
}

/// Catches: `prepare --parquet --family X` of a file whose `family` column holds integers
/// leaving every row out (`field family: expected a string, found Int64`, exit 1) while
/// `run --family X` takes them all: the flag replaces the column (newcomer finding).
#[test]
fn prepare_parquet_with_family_does_not_read_the_family_column() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use verisample::dataset::writer::image_array;
    use verisample::record::ImageRef;

    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let refs: Vec<ImageRef> = (0..2)
        .map(|i| ImageRef {
            bytes: Some(png(6, 5, i)),
            path: Some(format!("{i}.png")),
        })
        .collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("image", Arc::new(image_array(refs.iter()))),
        ("question", Arc::new(StringArray::from(vec!["Q0", "Q1"]))),
        ("answer", Arc::new(StringArray::from(vec!["A0", "A1"]))),
        ("family", Arc::new(Int64Array::from(vec![1, 2]))),
    ];
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(src.join("a.parquet")).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let out = tmp.path().join("out");
    let st = bin()
        .args(["prepare", "--parquet"])
        .arg(&src)
        .args(["--family", "Mine", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("field family"), "{stderr}");
    let rows: Vec<_> = InputReader::open(out.join("data").to_str().unwrap())
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.family.as_deref() == Some("Mine")));
}
