//! The layouts visual-QA datasets on the Hub use, read as they are. The parquet
//! files are built here at test time from real OrandCar-A `val` images of the shared data
//! (no image bytes are committed), in the shapes `datasets`' `to_parquet` writes: an HF
//! `Image()` struct column, string columns, and `list<string>` for several references.
//!
//! The same layouts written by the real `datasets` library (`scripts/make_layouts_datasets.py`)
//! give the splits of the Rust-built ones; that test also needs python3 with `datasets`.
//!
//! Needs the shared data (`$VERISAMPLE_SHARED_DATA`, `<repo>/../../shared/data` or
//! `<repo>/../shared/data`); without it prints "skipped: …" (and fails under CI, see
//! tests/shared_data).

mod dataset_util;
use dataset_util::{bin, check, repo, require_shared_data, skip};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow::array::{ArrayRef, ListBuilder, RecordBatch, StringArray, StringBuilder};
use parquet::arrow::ArrowWriter;
use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::{image_array, read_split, split_files};
use verisample::family::ORAND_CAR_QUESTION;
use verisample::record::{AcceptedQa, ImageRef, InputRow, OutputRow, RejectedQa, SourceColumns};

/// Images taken from the `val` split: enough for accepted and rejected rows with the
/// bundled model, few enough for a quick run.
const N: usize = 6;

/// One real image with its label.
struct Sample {
    file: PathBuf,
    bytes: Vec<u8>,
    label: String,
}

/// The first [`N`] `val` rows of `labels.jsonl`.
fn samples(data: &Path) -> Vec<Sample> {
    let root = data.join("orand-car-a");
    std::fs::read_to_string(root.join("labels.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["split"] == "val")
        .take(N)
        .map(|v| {
            let file = root.join(v["file"].as_str().unwrap());
            Sample {
                bytes: std::fs::read(&file).unwrap(),
                file,
                label: v["label"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

/// Writes one parquet file with `columns`, making its parent folder.
fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The HF `Image()` column: bytes and the file name, as `datasets` stores images it read.
fn images(s: &[Sample]) -> ArrayRef {
    let refs: Vec<ImageRef> = s
        .iter()
        .map(|x| ImageRef {
            bytes: Some(x.bytes.clone()),
            path: x.file.file_name().map(|n| n.to_string_lossy().into_owned()),
        })
        .collect();
    Arc::new(image_array(refs.iter()))
}

fn strings(values: impl IntoIterator<Item = String>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

fn questions(s: &[Sample]) -> ArrayRef {
    strings(s.iter().map(|_| ORAND_CAR_QUESTION.to_string()))
}

fn labels(s: &[Sample]) -> ArrayRef {
    strings(s.iter().map(|x| x.label.clone()))
}

fn read(path: &Path) -> Vec<InputRow> {
    InputReader::open(path.to_str().unwrap())
        .unwrap()
        .map(|r| r.unwrap_or_else(|e| panic!("{e:?}")))
        .collect()
}

#[test]
fn flat_layouts_read_one_item_per_row_with_the_columns_used() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let s = samples(&data);
    let tmp = tempfile::tempdir().unwrap();
    let chartqa = tmp.path().join("chartqa/test.parquet");
    write_parquet(
        &chartqa,
        vec![
            ("img", images(&s)),
            ("query", questions(&s)),
            ("label", labels(&s)),
            (
                "human_or_machine",
                strings(s.iter().map(|_| "human".into())),
            ),
        ],
    );
    let rows = read(&chartqa);
    assert_eq!(rows.len(), N);
    for (r, x) in rows.iter().zip(&s) {
        assert_eq!(r.image.bytes.as_deref(), Some(x.bytes.as_slice()));
        assert_eq!(r.qa.len(), 1);
        assert_eq!(r.qa[0].question, ORAND_CAR_QUESTION);
        assert_eq!(r.qa[0].answer, x.label);
        assert_eq!(r.qa[0].answer_list, None);
        assert_eq!(
            r.columns,
            Some(SourceColumns {
                image: "img".into(),
                question: "query".into(),
                answer: "label".into(),
            })
        );
        // Columns that are not the layout's stay with the row.
        assert_eq!(r.extra.keys().collect::<Vec<_>>(), ["human_or_machine"]);
    }

    // Both `answer` and `label`: the reader names the ambiguity and the columns, once for
    // the file's rows (as a column of the wrong type), not once per row.
    let ambiguous = tmp.path().join("ambiguous/a.parquet");
    write_parquet(
        &ambiguous,
        vec![
            ("image", images(&s)),
            ("question", questions(&s)),
            ("answer", labels(&s)),
            ("label", labels(&s)),
        ],
    );
    let errs: Vec<_> = InputReader::open(ambiguous.to_str().unwrap())
        .unwrap()
        .collect();
    assert_eq!(errs.len(), 1, "one error for the file: {errs:?}");
    let e = errs[0].as_ref().unwrap_err();
    assert_eq!(
        (e.row, e.rows, e.field.as_str()),
        (Some(0), Some(N as u64), "qa")
    );
    assert!(
        e.message.contains("ambiguous answer column: answer, label")
            && e.message
                .contains("columns found: image, question, answer, label"),
        "{e:?}"
    );
    // `run` refuses it as a setting, before loading the model.
    let out = bin()
        .arg("run")
        .arg("--data")
        .arg(ambiguous.parent().unwrap())
        .arg("--out")
        .arg(tmp.path().join("out"))
        .args(["--device", "cpu", "--progress", "none"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--answer-column")
            && stderr.contains("columns found: image, question, answer, label"),
        "{stderr}"
    );
}

/// `OUT`'s rows of one split, `clean_meta` parsed.
fn split_rows<Q: verisample::dataset::writer::QaRecord>(
    out: &Path,
    split: &str,
) -> Vec<(OutputRow<Q>, serde_json::Value)> {
    split_files(out, split)
        .unwrap_or_default()
        .iter()
        .flat_map(|f| read_split::<Q>(f).unwrap())
        .map(|r| {
            let meta = serde_json::from_str(&r.clean_meta).unwrap();
            (r, meta)
        })
        .collect()
}

fn run(input: &Path, out: &Path, extra: &[&str]) {
    check(
        bin()
            .arg("run")
            .arg("--model")
            .arg(repo().join("assets/model"))
            .arg("--data")
            .arg(input)
            .arg("--out")
            .arg(out)
            .args([
                "--progress",
                "none",
                "--device",
                "cpu",
                "--family",
                "OrandCar",
            ])
            .args(["--max-new-tokens", "64"])
            .args(extra)
            .output()
            .unwrap(),
        "run",
    );
    check(bin().arg("verify").arg(out).output().unwrap(), "verify");
}

/// Asserts two outputs hold the same splits apart from `clean_meta.columns`, which only
/// `flat` records; returns the number of accepted and rejected items.
fn assert_same_splits(nested: &Path, flat: &Path, columns: &serde_json::Value) -> (usize, usize) {
    let mut counts = (0, 0);
    for split in ["OrandCar_RS_think", "OrandCar_RS_nothink"] {
        let a = split_rows::<AcceptedQa>(nested, split);
        let b = split_rows::<AcceptedQa>(flat, split);
        assert_eq!(a.len(), b.len(), "{split}");
        for ((ra, ma), (rb, mb)) in a.iter().zip(&b) {
            assert_eq!(
                (&ra.image, &ra.qa, &ra.image_sha256),
                (&rb.image, &rb.qa, &rb.image_sha256)
            );
            assert_eq!(ma.get("columns"), None);
            assert_eq!(&mb["columns"], columns);
            assert_eq!(ma["policy"], mb["policy"]);
        }
        counts.0 = a.len();
    }
    let a = split_rows::<RejectedQa>(nested, "OrandCar_rejected");
    let b = split_rows::<RejectedQa>(flat, "OrandCar_rejected");
    assert_eq!(a.len(), b.len());
    for ((ra, _), (rb, mb)) in a.iter().zip(&b) {
        assert_eq!(
            (&ra.image, &ra.qa, &ra.image_sha256),
            (&rb.image, &rb.qa, &rb.image_sha256)
        );
        assert_eq!(&mb["columns"], columns);
    }
    counts.1 = a.len();
    counts
}

/// Contract §2's `qa` column: one {question, answer} item per sample.
fn qa_column(s: &[Sample]) -> ArrayRef {
    let mut qa = ListBuilder::new(arrow::array::StructBuilder::from_fields(
        vec![
            arrow::datatypes::Field::new("question", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("answer", arrow::datatypes::DataType::Utf8, true),
        ],
        1,
    ));
    for x in s {
        let item = qa.values();
        item.field_builder::<StringBuilder>(0)
            .unwrap()
            .append_value(ORAND_CAR_QUESTION);
        item.field_builder::<StringBuilder>(1)
            .unwrap()
            .append_value(&x.label);
        item.append(true);
        qa.append(true);
    }
    Arc::new(qa.finish())
}

#[test]
fn a_flat_dataset_and_the_same_data_in_qa_layout_give_the_same_splits() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let s = samples(&data);
    let tmp = tempfile::tempdir().unwrap();
    // Our layout: `image` + `qa` list of {question, answer}.
    let nested = tmp.path().join("nested/data/val.parquet");
    write_parquet(&nested, vec![("image", images(&s)), ("qa", qa_column(&s))]);
    // DocVQA-style flat layout.
    let flat = tmp.path().join("flat/data/val.parquet");
    write_parquet(
        &flat,
        vec![
            ("image", images(&s)),
            ("question", questions(&s)),
            ("answer", labels(&s)),
        ],
    );
    let (out_nested, out_flat) = (tmp.path().join("out-nested"), tmp.path().join("out-flat"));
    run(nested.parent().unwrap(), &out_nested, &[]);
    run(flat.parent().unwrap(), &out_flat, &[]);
    let columns = serde_json::json!({"image": "image", "question": "question", "answer": "answer"});
    let (accepted, rejected) = assert_same_splits(&out_nested, &out_flat, &columns);
    println!("{accepted} accepted rows, {rejected} rejected rows in both");
    assert_eq!(accepted + rejected, N, "every image lands in one split");
}

/// `answers: list<string>` column: the label second behind a decoy ("0"), one row with the
/// label alone (a list of one is that string).
fn answer_lists(s: &[Sample]) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for (i, x) in s.iter().enumerate() {
        if i > 0 {
            b.values().append_value("0");
        }
        b.values().append_value(&x.label);
        b.append(true);
    }
    Arc::new(b.finish())
}

#[test]
fn several_references_are_kept_run_and_verify() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let s = samples(&data);
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single/data/val.parquet");
    write_parquet(
        &single,
        vec![
            ("image", images(&s)),
            ("question", questions(&s)),
            ("answer", labels(&s)),
        ],
    );
    let multi = tmp.path().join("multi/data/val.parquet");
    write_parquet(
        &multi,
        vec![
            ("image", images(&s)),
            ("question", questions(&s)),
            ("answers", answer_lists(&s)),
        ],
    );
    let rows = read(&multi);
    assert_eq!(rows[0].qa[0].answer, s[0].label);
    assert_eq!(rows[0].qa[0].answer_list, None);
    assert_eq!(
        rows[1].qa[0].answer_list,
        Some(vec!["0".to_string(), s[1].label.clone()])
    );
    assert_eq!(rows[1].qa[0].answer, format!("[\"0\",\"{}\"]", s[1].label));

    let (out_single, out_multi) = (tmp.path().join("out-single"), tmp.path().join("out-multi"));
    run(single.parent().unwrap(), &out_single, &[]);
    run(multi.parent().unwrap(), &out_multi, &[]);
    // The decoy reference changes no decision: the same images land in the same splits, and
    // the stored references are the input's list.
    let mut landed = 0;
    for split in ["OrandCar_RS_think", "OrandCar_RS_nothink"] {
        let a = split_rows::<AcceptedQa>(&out_single, split);
        let b = split_rows::<AcceptedQa>(&out_multi, split);
        assert_eq!(a.len(), b.len(), "{split}");
        for ((ra, _), (rb, mb)) in a.iter().zip(&b) {
            assert_eq!(ra.image_sha256, rb.image_sha256);
            assert_eq!(ra.qa[0].answer, rb.qa[0].answer);
            assert_eq!(ra.qa[0].accepted_by, rb.qa[0].accepted_by);
            let list = rb.qa[0].org_answer.starts_with('[');
            assert_eq!(mb.get("answer_list").is_some(), list, "{mb}");
            if list {
                assert_eq!(
                    rb.qa[0].org_answer,
                    format!("[\"0\",{:?}]", ra.qa[0].org_answer)
                );
            }
        }
        landed = a.len();
    }
    let a = split_rows::<RejectedQa>(&out_single, "OrandCar_rejected");
    let b = split_rows::<RejectedQa>(&out_multi, "OrandCar_rejected");
    assert_eq!(a.len(), b.len());
    for ((ra, _), (rb, _)) in a.iter().zip(&b) {
        assert_eq!(ra.image_sha256, rb.image_sha256);
        assert_eq!(
            (&ra.qa[0].wrong_vlm, &ra.qa[0].reason),
            (&rb.qa[0].wrong_vlm, &rb.qa[0].reason)
        );
    }
    assert_eq!(landed + a.len(), N);
    // Tampering with a stored list is caught: dropping the real label from an accepted
    // entry's references makes `verify` recompute a reject.
    let accepted = split_rows::<AcceptedQa>(&out_multi, "OrandCar_RS_nothink");
    let i = accepted
        .iter()
        .position(|(r, _)| {
            r.qa[0].org_answer.starts_with('[') && r.qa[0].accepted_by.starts_with("verifier:")
        })
        .expect("a verifier-accepted entry with several references");
    {
        let report = verisample::verify_output::recheck_family(
            &verisample::verify_output::FamilySplits {
                family: "OrandCar",
                think: &[],
                nothink: &[OutputRow {
                    qa: vec![AcceptedQa {
                        org_answer: "[\"0\"]".into(),
                        ..accepted[i].0.qa[0].clone()
                    }],
                    ..accepted[i].0.clone()
                }],
                rejected: &[],
            },
            &verisample::verify_output::RecheckSettings::default(),
        );
        assert!(
            report
                .disagreements
                .iter()
                .any(|d| d.problem == verisample::verify_output::Problem::WrongSplit),
            "{report:?}"
        );
    }
}

#[test]
fn images_given_by_absolute_path_need_images_root() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let s = samples(&data);
    let tmp = tempfile::tempdir().unwrap();
    // As `datasets`' to_parquet writes images that were files: absolute path, null bytes.
    let refs: Vec<ImageRef> = s
        .iter()
        .map(|x| ImageRef {
            bytes: None,
            path: Some(x.file.to_string_lossy().into_owned()),
        })
        .collect();
    let by_path = tmp.path().join("paths/test.parquet");
    write_parquet(
        &by_path,
        vec![
            ("image", Arc::new(image_array(refs.iter())) as ArrayRef),
            ("question", questions(&s)),
            ("answer", labels(&s)),
        ],
    );
    let spec = by_path.to_str().unwrap();
    // By default: refused, each row naming its field.
    let refused: Vec<_> = InputReader::open(spec).unwrap().collect();
    assert_eq!(refused.len(), N);
    for r in &refused {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.field, "image.path");
        assert!(e.message.contains("absolute path"), "{e:?}");
    }
    // Under the images' folder: read, bytes unchanged.
    let val = s[0].file.parent().unwrap().to_path_buf();
    let read_with = |root: PathBuf| -> Vec<_> {
        let opts = verisample::dataset::layout::ReadOptions {
            images_root: Some(root),
            ..Default::default()
        };
        InputReader::open_with(spec, &opts).unwrap().collect()
    };
    let rows = read_with(val.clone());
    for (r, x) in rows.iter().zip(&s) {
        let r = r.as_ref().unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(r.image.bytes.as_deref(), Some(x.bytes.as_slice()));
    }
    // pandas writes a `bytes` field of only `None` as type `null`: the same images, by path.
    let paths: Vec<Option<String>> = refs.iter().map(|r| r.path.clone()).collect();
    let null_bytes = arrow::array::StructArray::from(vec![
        (
            Arc::new(arrow::datatypes::Field::new(
                "bytes",
                arrow::datatypes::DataType::Null,
                true,
            )),
            Arc::new(arrow::array::NullArray::new(paths.len())) as ArrayRef,
        ),
        (
            Arc::new(arrow::datatypes::Field::new(
                "path",
                arrow::datatypes::DataType::Utf8,
                true,
            )),
            Arc::new(StringArray::from(paths)) as ArrayRef,
        ),
    ]);
    let null_typed = tmp.path().join("null-bytes/test.parquet");
    write_parquet(
        &null_typed,
        vec![
            ("image", Arc::new(null_bytes) as ArrayRef),
            ("question", questions(&s)),
            ("answer", labels(&s)),
        ],
    );
    let opts = verisample::dataset::layout::ReadOptions {
        images_root: Some(val.clone()),
        ..Default::default()
    };
    let rows: Vec<_> = InputReader::open_with(null_typed.to_str().unwrap(), &opts)
        .unwrap()
        .collect();
    assert_eq!(rows.len(), N);
    for (r, x) in rows.iter().zip(&s) {
        let r = r.as_ref().unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(r.image.bytes.as_deref(), Some(x.bytes.as_slice()));
    }
    // A root that does not hold them still refuses them: `train/` is beside `val/`.
    let train = val.parent().unwrap().join("train");
    for r in read_with(train) {
        let e = r.unwrap_err();
        assert_eq!(e.field, "image.path");
        assert!(e.message.contains("outside --images-root"), "{e:?}");
    }
}

/// The image hashes of each split of `out`, in order.
fn split_shas(out: &Path) -> Vec<Vec<String>> {
    let accepted = ["OrandCar_RS_think", "OrandCar_RS_nothink"]
        .map(|split| split_rows::<AcceptedQa>(out, split));
    let rejected = split_rows::<RejectedQa>(out, "OrandCar_rejected");
    accepted
        .iter()
        .map(|rows| rows.iter().map(|(r, _)| r.image_sha256.clone()).collect())
        .chain([rejected
            .iter()
            .map(|(r, _)| r.image_sha256.clone())
            .collect()])
        .collect()
}

#[test]
fn layouts_written_by_datasets_give_the_splits_of_the_rust_built_ones() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let has_datasets = Command::new("python3")
        .args(["-c", "import datasets"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_datasets {
        skip("python3 with the `datasets` library not importable");
        return;
    }
    let s = samples(&data);
    let tmp = tempfile::tempdir().unwrap();
    let made = tmp.path().join("datasets");
    let orand = data.join("orand-car-a");
    check(
        Command::new("python3")
            .arg(repo().join("scripts/make_layouts_datasets.py"))
            .arg(&orand)
            .arg(&made)
            .arg(N.to_string())
            .output()
            .unwrap(),
        "make_layouts_datasets.py",
    );
    let nested = tmp.path().join("nested/data/val.parquet");
    write_parquet(&nested, vec![("image", images(&s)), ("qa", qa_column(&s))]);
    let out_nested = tmp.path().join("out-nested");
    run(nested.parent().unwrap(), &out_nested, &[]);
    let columns =
        |i: &str, q: &str, a: &str| serde_json::json!({"image": i, "question": q, "answer": a});
    for (layout, cols) in [
        ("qa", serde_json::Value::Null),
        ("flat", columns("image", "question", "answer")),
        ("chartqa", columns("img", "query", "label")),
    ] {
        let out = tmp.path().join(format!("out-{layout}"));
        run(&made.join(layout), &out, &[]);
        let (accepted, rejected) = assert_same_splits(&out_nested, &out, &cols);
        assert_eq!(accepted + rejected, N, "{layout}");
    }
    // Several references (a decoy "0" beside the label) and path-only images (read under
    // --images-root): the same images land in the same splits.
    let want = split_shas(&out_nested);
    let out = tmp.path().join("out-multi");
    run(&made.join("multi"), &out, &[]);
    assert_eq!(split_shas(&out), want, "multi");
    let out = tmp.path().join("out-paths");
    let root = orand.to_string_lossy().into_owned();
    run(&made.join("paths"), &out, &["--images-root", &root]);
    assert_eq!(split_shas(&out), want, "paths");
}

/// A blank question or reference in a flat layout is an error naming the input's own column
/// (`query`, `label`), not `qa[0].…`, a field the user's file does not have; the other rows
/// are generated.
#[test]
fn errors_of_a_flat_layout_name_its_columns() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let s = samples(&data);
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("flat/test.parquet");
    let mut qs: Vec<String> = s.iter().map(|_| ORAND_CAR_QUESTION.to_string()).collect();
    let mut ls: Vec<String> = s.iter().map(|x| x.label.clone()).collect();
    ls[0] = "  ".into();
    qs[1] = String::new();
    write_parquet(
        &input,
        vec![
            ("img", images(&s)),
            ("query", strings(qs)),
            ("label", strings(ls)),
        ],
    );
    let out = tmp.path().join("out");
    run(&input, &out, &[]);
    let errors: Vec<(u64, String)> = std::fs::read_to_string(out.join("errors.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["row"].as_u64().unwrap(),
                v["field"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(errors, [(0, "label".to_string()), (1, "query".to_string())]);
}
