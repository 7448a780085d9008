//! A newcomer's input files that lack a column, or give images only by path, read alike by
//! `inspect` and `run`:
//!
//! - `qa` without `image` is refused by `run` before the model loads (exit 2, naming the file
//!   and the column), as `image` without `qa`; a later file of the input lacking it is one
//!   error for the file's rows, not one per row;
//! - `inspect` names both files NOT USABLE with the missing column (exit 1), and files
//!   whose `family` or `image_sha256` column is not text;
//! - `inspect --rows` reads an image given only by path as `run` does, and names a path `run`
//!   refuses with `run`'s own `image.path` message;
//! - a run where no row could be read says so: its rows are counted as in the input, not as
//!   read.

mod dataset_util;
mod pipeline_support;

use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields};
use dataset_util::{bin, png, repo, write_input, InputSpec};
use verisample::dataset::reader::InputReader;
use verisample::pipeline::{
    prepare, run, Backends, ParquetSink, ParquetSource, PipelineError, RunControl,
    StandardDecisions,
};
use verisample::settings::fingerprint;
use verisample::shard::Shard;

/// A `qa` column of `n` rows, one {question, answer} each.
fn qa_column(n: usize) -> ArrayRef {
    let fields = Fields::from(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", DataType::Utf8, true),
    ]);
    let values = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|_| "What is written?"),
            )),
            Arc::new(StringArray::from_iter_values((0..n).map(|i| i.to_string()))),
        ],
        None,
    );
    Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(fields), true)),
        OffsetBuffer::from_lengths(vec![1; n]),
        Arc::new(values),
        None,
    ))
}

/// An HF `Image()` column: `bytes` and `path` of each row.
fn image_column(rows: &[(Option<Vec<u8>>, Option<&str>)]) -> ArrayRef {
    let fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    Arc::new(StructArray::new(
        fields,
        vec![
            Arc::new(BinaryArray::from_iter(rows.iter().map(|r| r.0.clone()))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
        ],
        None,
    ))
}

fn write(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn verisample_run(data: &Path, out: &Path) -> Output {
    bin()
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--progress", "none"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// `qa` without `image` is refused as `image` without `qa` is: exit 2 before the model
/// loads (no `errors.jsonl`), naming the file and the column. Catches: a `qa` column alone
/// taken as contract §2's layout, every row then an identical `missing column` error.
#[test]
fn run_refuses_a_missing_image_column_up_front_as_a_missing_qa_column() {
    let tmp = tempfile::tempdir().unwrap();
    let only_qa = tmp.path().join("a/only_qa.parquet");
    write(&only_qa, vec![("qa", qa_column(3))]);
    let only_image = tmp.path().join("b/only_image.parquet");
    let image = png(3, 2, 1);
    write(
        &only_image,
        vec![("image", image_column(&[(Some(image), None)]))],
    );
    for (file, column) in [(&only_qa, "`image`"), (&only_image, "`qa`")] {
        let out = tmp.path().join(format!("out-{column}"));
        let done = verisample_run(file.parent().unwrap(), &out);
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{stderr}");
        let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
        assert!(
            error.contains(&file.display().to_string())
                && error.contains(&format!("missing column {column}")),
            "{error}"
        );
        assert!(!out.join("errors.jsonl").exists(), "refused before the run");
    }
}

/// A later file of the input without `image` (the first one fits) is one error for its
/// rows, counted, as a column of the wrong type is. Catches: one identical error per row.
#[test]
fn a_later_file_without_image_is_one_error_for_its_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let qa = [("What is written?", "1")];
    write_input(
        &tmp.path().join("a.parquet"),
        &[InputSpec::new(png(3, 2, 1), &qa)],
        10,
    );
    write(&tmp.path().join("b.parquet"), vec![("qa", qa_column(4))]);
    let read: Vec<_> = InputReader::open(&tmp.path().to_string_lossy())
        .unwrap()
        .collect();
    let errors: Vec<_> = read.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!((read.len(), errors.len()), (2, 1), "{read:?}");
    let e = errors[0];
    assert_eq!(
        (e.row, e.rows, e.field.as_str()),
        (Some(0), Some(4), "image")
    );
    assert!(
        e.file.ends_with("b.parquet")
            && e.message.contains("missing column `image`")
            && e.message.contains("none of the file's 4 rows can be read"),
        "{e:?}"
    );
}

/// `inspect` names a file without `image` or without a question column NOT USABLE with the
/// missing column, and exits 1, as `run` refuses both. Catches: exit 0, nothing flagged.
#[test]
fn inspect_names_a_missing_column_not_usable() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        &tmp.path().join("only_qa.parquet"),
        vec![("qa", qa_column(2))],
    );
    write(
        &tmp.path().join("only_image.parquet"),
        vec![("image", image_column(&[(Some(png(3, 2, 1)), None)]))],
    );
    // Integer provenance columns: `run` writes an error for each row (newcomer finding:
    // inspect passed them, and showed the stored hash 1 as null).
    for (file, column) in [
        ("family_int.parquet", "family"),
        ("sha_int.parquet", "image_sha256"),
    ] {
        let ints: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![1]));
        write(
            &tmp.path().join(file),
            vec![
                ("image", image_column(&[(Some(png(3, 2, 1)), None)])),
                ("qa", qa_column(1)),
                (column, ints),
            ],
        );
    }
    let out = bin().arg("inspect").arg(tmp.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("4 parquet file(s) unreadable or not usable"),
        "{stderr}"
    );
    for (file, needle) in [
        (
            "only_qa.parquet",
            "NOT USABLE: field image: missing column `image`",
        ),
        (
            "only_image.parquet",
            "NOT USABLE: field qa: missing column `qa`, and no question column",
        ),
        (
            "family_int.parquet",
            "NOT USABLE: field family: column `family` is Int64, want a string",
        ),
        (
            "sha_int.parquet",
            "NOT USABLE: field image_sha256: column `image_sha256` is Int64, want a string",
        ),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.contains(file) && l.contains("NOT USABLE"))
            .unwrap_or_else(|| panic!("{file} not flagged:\n{stdout}"));
        assert!(line.contains(needle), "{line}");
    }
}

/// `inspect --rows` reads an image given only by path as `run` reads it: a path `run`
/// refuses (absolute, `..` out, a link out, missing, a folder, empty) is NOT USABLE with
/// the message `run` writes under `image.path`; a file inside the dataset folder is read and
/// checked. Catches: `no bytes, path "…"` shown as if usable.
#[cfg(unix)]
#[test]
fn inspect_reads_image_paths_as_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(ds.join("data/folder")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ds.join("data/good.png"), png(3, 2, 1)).unwrap();
    std::fs::write(outside.join("secret.png"), png(4, 4, 2)).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.png"), ds.join("data/link.png")).unwrap();
    let absolute = outside.join("secret.png").display().to_string();
    let paths = [
        absolute.as_str(),
        "../../outside/secret.png",
        "link.png",
        "missing.png",
        "folder",
        "",
        "good.png",
    ];
    let rows: Vec<_> = paths.iter().map(|p| (None, Some(*p))).collect();
    let file = ds.join("data/in.parquet");
    write(
        &file,
        vec![
            ("image", image_column(&rows)),
            ("qa", qa_column(paths.len())),
        ],
    );

    let read: Vec<_> = InputReader::open(&ds.to_string_lossy()).unwrap().collect();
    let out = bin()
        .arg("inspect")
        .arg(&ds)
        .args(["--rows", "10"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "rows do not fail inspect: {stdout}"
    );
    let image_line = |i: usize| {
        let start = stdout
            .find(&format!("(in.parquet, row {i}):"))
            .unwrap_or_else(|| panic!("row {i} not shown:\n{stdout}"));
        let rest = &stdout[start..];
        let line = rest.lines().find(|l| l.trim_start().starts_with("image:"));
        line.unwrap().to_string()
    };
    for (i, r) in read.iter().enumerate().take(paths.len() - 1) {
        let e = r.as_ref().expect_err(paths[i]);
        assert_eq!(e.field, "image.path", "{e:?}");
        let want = format!("NOT USABLE: image.path: {}", e.message);
        assert!(
            image_line(i).contains(&want),
            "{}\nwant {want}",
            image_line(i)
        );
    }
    assert!(read[paths.len() - 1].is_ok());
    let good = image_line(paths.len() - 1);
    assert!(
        good.contains("path \"good.png\": ") && good.contains("3x2 Png") && !good.contains("NOT"),
        "{good}"
    );
}

/// A run none of whose rows could be read (a `qa` column of strings) says its rows were in
/// the input and not read. Catches: "3 row(s) read" of rows that were never read.
#[test]
fn no_split_counts_rows_not_read_as_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.parquet");
    let image = png(3, 2, 1);
    write(
        &data,
        vec![
            (
                "image",
                image_column(&[
                    (Some(image.clone()), None),
                    (Some(image.clone()), None),
                    (Some(image), None),
                ]),
            ),
            ("qa", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
        ],
    );
    let out = tmp.path().join("out");
    let mut s = pipeline_support::settings(&out, Shard::WHOLE);
    s.data = data;
    let prepared = prepare(
        &s,
        fingerprint(s.canonical(), pipeline_support::model_files(), Vec::new()),
    )
    .unwrap();
    let err = run(
        prepared,
        Backends {
            source: &ParquetSource::new(&s.data),
            generator: &mut pipeline_support::ScriptedModel::new(),
            decisions: &StandardDecisions::default(),
            sink: &mut ParquetSink::new(&s.out),
        },
        &RunControl::default(),
    )
    .unwrap_err();
    assert!(matches!(err, PipelineError::NoSplit { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("no item reached a split: 3 input row(s), 3 of them not read"),
        "{text}"
    );
    assert!(!text.contains("row(s) read"), "{text}");
}
