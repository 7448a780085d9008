//! Write a small synthetic output (the three OrandCar splits, card, run.json) plus
//! `expected.json` describing every row, for `scripts/check_hf_load.py` to load with the
//! real `datasets` library and compare.
//!
//! Usage: `cargo run --release --example write_sample_splits -- OUT_DIR`

use std::io::Cursor;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{json, Value};
use verisample::atomic::write_atomic;
use verisample::dataset::card::{output_configs, write_card, CardSplit};
use verisample::dataset::shards::{ShardOptions, ShardSummary};
use verisample::dataset::writer::{sha256_hex, QaRecord, SplitWriter};
use verisample::family::{ORAND_CAR, ORAND_CAR_QUESTION};
use verisample::record::{AcceptedQa, ImageRef, OutputRow, RejectedQa, SplitKind};

/// An image with distinct bytes per `i`: PNG for even `i`, JPEG for odd.
fn image(i: usize) -> anyhow::Result<(ImageRef, String)> {
    let (w, h) = (8 + (i % 7) as u32, 4 + (i % 5) as u32);
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(i * 37) as u8, (x * 20) as u8, (y * 30) as u8])
    });
    let mut out = Cursor::new(Vec::new());
    let (fmt, ext) = if i.is_multiple_of(2) {
        (image::ImageFormat::Png, "png")
    } else {
        (image::ImageFormat::Jpeg, "jpg")
    };
    img.write_to(&mut out, fmt)?;
    let bytes = out.into_inner();
    let sha = sha256_hex(&bytes);
    Ok((
        ImageRef {
            bytes: Some(bytes),
            path: Some(format!("a_car_{i:06}.{ext}")),
        },
        sha,
    ))
}

fn accepted(i: usize) -> Vec<AcceptedQa> {
    (0..1 + i % 2)
        .map(|j| AcceptedQa {
            question: ORAND_CAR_QUESTION.to_string(),
            answer: format!("{}", 100 * i + j),
            org_answer: format!("{}", 100 * i + j),
            vlm_answer: format!("{}", 100 * i + j),
            think: if j == 0 {
                Some(format!("The digits read {} — «ok»", 100 * i + j))
            } else {
                None
            },
            accepted_by: if j == 0 {
                "verifier:alnum:whole".into()
            } else {
                "judge".into()
            },
            judge_verdict: if j == 0 { None } else { Some("CORRECT".into()) },
            judge_raw: if j == 0 { None } else { Some("CORRECT".into()) },
        })
        .collect()
}

fn rejected(i: usize) -> Vec<RejectedQa> {
    vec![RejectedQa {
        question: ORAND_CAR_QUESTION.to_string(),
        answer: "11850".into(),
        wrong_vlm: if i.is_multiple_of(2) {
            "ll.850".into()
        } else {
            " \n ".into()
        },
        reason: if i.is_multiple_of(2) {
            "judge_numbers_disagree".into()
        } else {
            "no_answer".into()
        },
        judge_verdict: if i.is_multiple_of(2) {
            Some("CORRECT".into())
        } else {
            None
        },
        judge_raw: if i.is_multiple_of(2) {
            Some("CORRECT".into())
        } else {
            None
        },
    }]
}

fn write_split<Q: QaRecord + serde::Serialize>(
    out: &std::path::Path,
    kind: SplitKind,
    range: std::ops::Range<usize>,
    qa: impl Fn(usize) -> Vec<Q>,
    expected: &mut serde_json::Map<String, Value>,
) -> anyhow::Result<ShardSummary> {
    // Row groups of 10 so the check also sees several row groups.
    let opts = ShardOptions {
        rows_per_group: 10,
        ..ShardOptions::default()
    };
    let mut w = SplitWriter::<Q>::create(out, ORAND_CAR, kind, opts)?;
    let mut rows = Vec::new();
    for i in range {
        let (image, sha) = image(i)?;
        let qa = qa(i);
        let mut qa_json = serde_json::to_value(&qa)?;
        if kind == SplitKind::NoThink {
            qa_json
                .as_array_mut()
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
                .for_each(|m| {
                    m.remove("think");
                });
        }
        rows.push(json!({
            "image_hex": hex::encode(image.bytes.as_deref().unwrap_or_default()),
            "path": image.path,
            "qa": qa_json,
            "clean_meta": format!("{{\"row\": {i}}}"),
            "image_sha256": sha,
        }));
        w.write_row(OutputRow {
            image,
            qa,
            clean_meta: format!("{{\"row\": {i}}}"),
            image_sha256: sha,
            carried: None,
        })?;
    }
    let s = w.finish(|_| true)?;
    expected.insert(s.split.clone(), Value::Array(rows));
    Ok(s)
}

fn main() -> anyhow::Result<()> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .context("usage: write_sample_splits OUT_DIR")?,
    );
    std::fs::create_dir_all(&out)?;
    let mut expected = serde_json::Map::new();
    let splits = [
        write_split(&out, SplitKind::Think, 0..23, accepted, &mut expected)?,
        write_split(&out, SplitKind::NoThink, 0..23, accepted, &mut expected)?,
        write_split(&out, SplitKind::Rejected, 100..107, rejected, &mut expected)?,
    ];
    let cards: Vec<CardSplit> = splits.iter().map(CardSplit::from).collect();
    write_card(
        &out,
        &output_configs(&cards),
        "verisample sample output",
        "",
    )?;
    let run = json!({"engine": "verisample", "version": env!("CARGO_PKG_VERSION"), "note": "synthetic sample"});
    write_atomic(
        out.join(verisample::out_files::RUN_FILE),
        format!("{}\n", serde_json::to_string_pretty(&run)?).as_bytes(),
    )?;
    std::fs::write(
        out.join("expected.json"),
        serde_json::to_string(&Value::Object(expected))?,
    )?;
    println!("{}", out.display());
    Ok(())
}
