//! The real `verisample` binary end to end on the 78 OrandCar-A `val` images with
//! the default checkpoint (`assets/model`): `prepare` → `run` → `verify`, then every input
//! question must be accounted for exactly once (a split, the cleaning report or
//! `errors.jsonl`), the think and nothink splits must hold the same items, and `run.json`'s
//! counts must agree with what the splits hold.
//!
//! Needs the shared data (`$VERISAMPLE_SHARED_DATA`, `<repo>/../../shared/data` or
//! `<repo>/../shared/data`); without it prints "skipped: …"
//! (and fails under CI, see tests/shared_data).

mod dataset_util;
use dataset_util::{bin, check, repo, require_shared_data};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::{read_accepted_split, read_rejected_split, split_files};
use verisample::record::{AcceptedQa, OutputRow, RejectedQa};
use verisample::verifiers::alnum::alnum_match;

/// Rows of OrandCar-A with `"split": "val"` in `labels.jsonl`.
const VAL_ROWS: usize = 78;
/// Generation limit of the run: the default checkpoint reads in ~20 tokens
/// (`<think>\ndigits: …\n</think>\n\n…<|im_end|>`) and judges in at most ~55 (a tagged
/// trace per digit, see scripts/tiny_tokenizer.py `judge_trace`); 64 is the limit of the
/// fixtures in tests/fixtures/default_model.
const MAX_NEW_TOKENS: &str = "64";
const THINK: &str = "OrandCar_RS_think";
const NOTHINK: &str = "OrandCar_RS_nothink";
const REJECTED: &str = "OrandCar_rejected";

fn accepted(out: &Path, split: &str) -> Vec<OutputRow<AcceptedQa>> {
    split_files(out, split)
        .unwrap_or_default()
        .iter()
        .flat_map(|f| read_accepted_split(f).unwrap_or_else(|e| panic!("{split}: {e}")))
        .collect()
}

fn rejected(out: &Path) -> Vec<OutputRow<RejectedQa>> {
    split_files(out, REJECTED)
        .unwrap_or_default()
        .iter()
        .flat_map(|f| read_rejected_split(f).unwrap_or_else(|e| panic!("{REJECTED}: {e}")))
        .collect()
}

/// The lines of a JSONL report (absent file: none).
fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn qa_count<Q>(rows: &[OutputRow<Q>]) -> u64 {
    rows.iter().map(|r| r.qa.len() as u64).sum()
}

#[test]
fn run_on_orand_val_accounts_for_every_question_and_verifies() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let model = repo().join("assets/model");
    assert!(model.join("config.json").is_file(), "no assets/model");
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("orand-val");
    let out = tmp.path().join("out");

    // prepare
    check(
        bin()
            .args(["-q", "prepare", "--labels"])
            .arg(data.join("orand-car-a/labels.jsonl"))
            .args(["--family", "OrandCar", "--split", "val", "--out"])
            .arg(&input)
            .output()
            .unwrap(),
        "prepare",
    );
    let inputs: Vec<_> = InputReader::open(input.to_str().unwrap())
        .unwrap()
        .map(|r| r.unwrap_or_else(|e| panic!("{e:?}")))
        .collect();
    assert_eq!(inputs.len(), VAL_ROWS);
    assert!(inputs.iter().all(|r| r.qa.len() == 1));
    // (parquet file, row) → image path: cleaning and error lines name input rows.
    let path_of: BTreeMap<(String, usize), String> = inputs
        .iter()
        .map(|r| {
            let name = Path::new(&r.source_file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (
                (name, r.row_index),
                r.image.path.clone().unwrap_or_default(),
            )
        })
        .collect();

    // run
    let t0 = Instant::now();
    check(
        bin()
            .arg("run")
            .arg("--model")
            .arg(&model)
            .arg("--data")
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .args(["--progress", "none", "--device", "cpu"])
            .args(["--max-new-tokens", MAX_NEW_TOKENS])
            .output()
            .unwrap(),
        "run",
    );
    println!(
        "run: {:.1} s for {VAL_ROWS} rows",
        t0.elapsed().as_secs_f64()
    );

    // Read everything back.
    let think = accepted(&out, THINK);
    let nothink = accepted(&out, NOTHINK);
    let rej = rejected(&out);
    let cleaning = jsonl(&out.join("cleaning.jsonl"));
    let errors = jsonl(&out.join("errors.jsonl"));
    let n_acc = qa_count(&nothink);
    let n_rej = qa_count(&rej);
    println!(
        "accepted {n_acc}, rejected {n_rej}, cleaning drops {}, errors {}",
        cleaning.len(),
        errors.len()
    );

    // Provenance names the input file, never a local path (the run was given an absolute one).
    let metas = think
        .iter()
        .map(|r| &r.clean_meta)
        .chain(rej.iter().map(|r| &r.clean_meta));
    for meta in metas {
        let v: serde_json::Value = serde_json::from_str(meta).expect("clean_meta is JSON");
        let file = v["source_file"].as_str().expect("source_file");
        assert!(
            file.ends_with(".parquet") && !file.contains('/'),
            "clean_meta.source_file should be a bare file name, got {file:?}"
        );
        // One level: provenance, the cleaning policy and this row's cleaning notes.
        assert!(
            v["policy"]["allowed_questions"]["OrandCar"].is_array(),
            "{v}"
        );
        assert_eq!(v["cleaning"]["kept_from"], serde_json::json!([0]), "{v}");
        assert!(v["cleaning"].get("cleaning").is_none(), "{v}");
    }

    // Every question exactly once.
    let mut seen: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for r in &nothink {
        seen.entry(r.image.path.clone().unwrap_or_default())
            .or_default()
            .extend(r.qa.iter().map(|_| "accepted"));
    }
    for r in &rej {
        seen.entry(r.image.path.clone().unwrap_or_default())
            .or_default()
            .extend(r.qa.iter().map(|_| "rejected"));
    }
    for (what, lines) in [("cleaning", &cleaning), ("error", &errors)] {
        for l in lines {
            let file = l["file"].as_str().unwrap_or_default();
            let name = Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let row = l["row"]
                .as_u64()
                .unwrap_or_else(|| panic!("{what} line {l}")) as usize;
            let path = path_of
                .get(&(name, row))
                .unwrap_or_else(|| panic!("{what} line names no input row: {l}"));
            seen.entry(path.clone()).or_default().push(what);
        }
    }
    assert_eq!(
        n_acc + n_rej + cleaning.len() as u64 + errors.len() as u64,
        VAL_ROWS as u64,
        "accepted + rejected + cleaning drops + errors"
    );
    assert_eq!(seen.len(), VAL_ROWS, "distinct images accounted for");
    for (path, places) in &seen {
        assert_eq!(places.len(), 1, "{path} is in {places:?}");
        assert!(path_of.values().any(|p| p == path), "{path} is no input");
    }

    // Think and nothink hold the same items, in the same order.
    assert_eq!(think.len(), nothink.len());
    for (t, n) in think.iter().zip(&nothink) {
        assert_eq!(t.image_sha256, n.image_sha256);
        assert_eq!(t.image.path, n.image.path);
        assert_eq!(t.qa.len(), n.qa.len());
        for (a, b) in t.qa.iter().zip(&n.qa) {
            assert_eq!(
                (&a.question, &a.answer, &a.org_answer, &a.accepted_by),
                (&b.question, &b.answer, &b.org_answer, &b.accepted_by)
            );
            assert!(a.think.is_some(), "think split without a trace: {a:?}");
            assert_eq!(b.think, None, "nothink split with a trace: {b:?}");
            if b.accepted_by.starts_with("verifier:") {
                assert!(alnum_match(&b.vlm_answer, &b.org_answer).is_some(), "{b:?}");
            }
        }
    }
    for r in &rej {
        for q in &r.qa {
            assert!(!q.reason.is_empty(), "{q:?}");
        }
    }

    // verify
    check(bin().arg("verify").arg(&out).output().unwrap(), "verify");

    // run.json agrees with the splits.
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    let st = &run["stats"];
    assert_eq!(run["status"], "complete");
    assert_eq!(st["input_rows"], VAL_ROWS as u64);
    assert_eq!(st["input_items"], VAL_ROWS as u64);
    assert_eq!(st["accepted"], n_acc);
    assert_eq!(st["rejected"], n_rej);
    assert_eq!(st["errors"], errors.len() as u64);
    let sum = |v: &serde_json::Value| -> u64 {
        v.as_object()
            .map_or(0, |m| m.values().filter_map(|x| x.as_u64()).sum())
    };
    assert_eq!(sum(&st["cleaning_drops"]), cleaning.len() as u64);
    assert_eq!(sum(&st["accepted_by"]), n_acc);
    assert_eq!(sum(&st["reject_reasons"]), n_rej);
    for (split, rows, items) in [
        (THINK, think.len(), qa_count(&think)),
        (NOTHINK, nothink.len(), n_acc),
        (REJECTED, rej.len(), n_rej),
    ] {
        assert_eq!(
            st["split_rows"][split].as_u64().unwrap_or(0),
            rows as u64,
            "{split} rows"
        );
        assert_eq!(
            st["split_items"][split].as_u64().unwrap_or(0),
            items,
            "{split} items"
        );
    }
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for q in nothink.iter().flat_map(|r| &r.qa) {
        *by.entry(q.accepted_by.clone()).or_default() += 1;
    }
    let by_json: BTreeMap<String, u64> =
        serde_json::from_value(st["accepted_by"].clone()).unwrap_or_default();
    assert_eq!(by, by_json, "accepted_by");
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for q in rej.iter().flat_map(|r| &r.qa) {
        *reasons.entry(q.reason.clone()).or_default() += 1;
    }
    let reasons_json: BTreeMap<String, u64> =
        serde_json::from_value(st["reject_reasons"].clone()).unwrap_or_default();
    assert_eq!(reasons, reasons_json, "reject_reasons");
    println!("accepted_by {by:?}, reject_reasons {reasons:?}");

    // The reading accuracy transformers measured for this checkpoint on these 78 images
    // (tests/fixtures/default_model/val_reference.jsonl: 66 read exactly): the verifier
    // accepts exactly the images the reference reads correctly. Catches: a run that reads
    // nothing, or the wrong image, while every count above still adds up (zero accuracy).
    let reference =
        reference_reads(&repo().join("tests/fixtures/default_model/val_reference.jsonl"));
    assert_eq!(reference.len(), 66, "val_reference.jsonl correct items");
    let by_verifier: BTreeSet<String> = nothink
        .iter()
        .filter(|r| r.qa.iter().any(|q| q.accepted_by.starts_with("verifier:")))
        .map(|r| file_name(r.image.path.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(by_verifier, reference, "images the verifier accepted");
    let verifier_count: u64 = by_json
        .iter()
        .filter(|(k, _)| k.starts_with("verifier:"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(verifier_count, 66, "run.json accepted_by verifier:*");
}

/// The bare file names of the images a reading reference marks `correct`.
fn reference_reads(path: &Path) -> BTreeSet<String> {
    let lines = jsonl(path);
    assert_eq!(lines[0]["meta"]["n"], VAL_ROWS, "{}", path.display());
    lines[1..]
        .iter()
        .filter(|l| l["correct"] == true)
        .map(|l| file_name(l["file"].as_str().expect("file")))
        .collect()
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
