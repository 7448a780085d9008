//! Helpers shared by the `dataset_*` integration tests.
#![allow(dead_code)]

use std::io::Cursor;

#[path = "../shared_data/mod.rs"]
mod shared_data;
#[allow(unused_imports)] // not every dataset_* test needs the real data
pub use shared_data::{repo, require_shared_data, skip};
use verisample::dataset::writer::sha256_hex;
use verisample::record::{AcceptedQa, ImageRef, OutputRow, RejectedQa};

/// The built `verisample` binary.
pub fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_verisample"))
}

/// `out` of a command that must have succeeded (`what` names it), else a panic with its
/// status and both streams.
pub fn check(out: std::process::Output, what: &str) -> std::process::Output {
    assert!(
        out.status.success(),
        "{what} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A small PNG whose pixels depend on `seed` (so different seeds give different bytes).
pub fn png(w: u32, h: u32, seed: u8) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([
            seed,
            (x as u8).wrapping_mul(7),
            (y as u8).wrapping_add(seed),
        ])
    });
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .expect("encode png");
    out.into_inner()
}

fn image(i: usize) -> (ImageRef, String) {
    let bytes = png(3 + (i % 5) as u32, 2 + (i % 3) as u32, i as u8);
    let sha = sha256_hex(&bytes);
    (
        ImageRef {
            bytes: Some(bytes),
            path: Some(format!("img_{i:04}.png")),
        },
        sha,
    )
}

/// Accepted rows with varied content: unicode, empty strings, `None`s, several qa per row.
pub fn accepted_rows(n: usize) -> Vec<OutputRow<AcceptedQa>> {
    (0..n)
        .map(|i| {
            let (image, sha) = image(i);
            let qa = (0..1 + i % 3)
                .map(|j| AcceptedQa {
                    question: format!("What is written in the image? #{i}.{j}"),
                    answer: format!("{}", 1000 + i * 10 + j),
                    org_answer: format!("{}", 1000 + i * 10 + j),
                    vlm_answer: format!("{}\n\nThe amount is {i}.", 1000 + i * 10 + j),
                    think: if (i + j).is_multiple_of(4) {
                        None
                    } else {
                        Some(format!("Reading digits… «{i}»\nline two"))
                    },
                    accepted_by: if j == 1 {
                        "judge".into()
                    } else {
                        "verifier:alnum:first_line".into()
                    },
                    judge_verdict: if j == 1 { Some("CORRECT".into()) } else { None },
                    judge_raw: if j == 1 {
                        Some("<think>\nsame digits\n</think>\n\nCORRECT".into())
                    } else {
                        None
                    },
                })
                .collect();
            OutputRow {
                image,
                qa,
                clean_meta: format!("{{\"row\":{i},\"policy\":\"orandcar-v1\"}}"),
                image_sha256: sha,
                carried: None,
            }
        })
        .collect()
}

/// Rejected rows, including an empty `wrong_vlm` and a whitespace-only one.
pub fn rejected_rows(n: usize) -> Vec<OutputRow<RejectedQa>> {
    (0..n)
        .map(|i| {
            let (image, sha) = image(1000 + i);
            let qa = vec![RejectedQa {
                question: "What is written in the image?".into(),
                answer: "11850".into(),
                wrong_vlm: match i % 3 {
                    0 => "ll.850".into(),
                    1 => " \t\n ".into(),
                    _ => String::new(),
                },
                reason: if i.is_multiple_of(2) {
                    "wrong_answer".into()
                } else {
                    "judge_unsure".into()
                },
                judge_verdict: if i.is_multiple_of(2) {
                    None
                } else {
                    Some("UNSURE".into())
                },
                judge_raw: if i.is_multiple_of(2) {
                    None
                } else {
                    Some("<think>hm</think>\nUNSURE".into())
                },
            }];
            OutputRow {
                image,
                qa,
                clean_meta: "{}".into(),
                image_sha256: sha,
                carried: None,
            }
        })
        .collect()
}

/// One input row for [`write_input`]: image bytes, the stored `image_sha256` (`None`: the
/// column is null), and (question, reference) pairs.
pub struct InputSpec {
    pub image: Vec<u8>,
    pub sha: Option<String>,
    pub qa: Vec<(String, String)>,
}

impl InputSpec {
    /// A row whose stored hash is the true hash of `image`.
    pub fn new(image: Vec<u8>, qa: &[(&str, &str)]) -> InputSpec {
        InputSpec {
            sha: Some(sha256_hex(&image)),
            image,
            qa: qa
                .iter()
                .map(|(q, a)| (q.to_string(), a.to_string()))
                .collect(),
        }
    }
}

/// Write `rows` as an input parquet file (contract §2 columns `image`, `qa`, `image_sha256`,
/// `family` = `TestSet`), `rows_per_group` rows per row group (dictionary-encoded strings,
/// the writer's default).
pub fn write_input(path: &std::path::Path, rows: &[InputSpec], rows_per_group: usize) {
    use arrow::array::{ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray};
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::{DataType, Field, Fields};
    use std::sync::Arc;
    let image_fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let image: ArrayRef = Arc::new(StructArray::new(
        image_fields,
        vec![
            Arc::new(BinaryArray::from_iter_values(
                rows.iter().map(|r| r.image.as_slice()),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..rows.len()).map(|i| format!("img{i}.png")),
            )),
        ],
        None,
    ));
    let qa_fields = Fields::from(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", DataType::Utf8, true),
    ]);
    let items = rows.iter().flat_map(|r| r.qa.iter());
    let values = StructArray::new(
        qa_fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(
                items.clone().map(|(q, _)| q.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                items.map(|(_, a)| a.as_str()),
            )),
        ],
        None,
    );
    let qa: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(qa_fields), true)),
        OffsetBuffer::from_lengths(rows.iter().map(|r| r.qa.len())),
        Arc::new(values),
        None,
    ));
    let sha: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|r| r.sha.clone()).collect::<Vec<_>>(),
    ));
    let family: ArrayRef = Arc::new(StringArray::from_iter_values(
        rows.iter().map(|_| "TestSet"),
    ));
    let batch = RecordBatch::try_from_iter(vec![
        ("image", image),
        ("qa", qa),
        ("image_sha256", sha),
        ("family", family),
    ])
    .expect("batch");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows_per_group))
        .build();
    let file = std::fs::File::create(path).expect("create input");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
}

/// sha256 of every output file of `out` (and `out/data`) but those that hold timings or the
/// order generations finished in (`run.json`, `chart.svg`, `journal.bin`): what a run promises
/// to write byte for byte whatever the batch, threads, resume or shards.
pub fn output_hashes(out: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let mut files = std::collections::BTreeMap::new();
    for dir in [out.to_path_buf(), out.join("data")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_file()
                && !["run.json", "chart.svg", "journal.bin"].contains(&name.as_str())
                && !name.starts_with('.')
            {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(name, sha256_hex(&bytes));
            }
        }
    }
    files
}
