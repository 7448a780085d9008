//! Rejection sampling end to end on the bundled default model and sample (`--samples 4
//! --temperature 0.7`): the splits do not depend on the batch, the threads, a `kill -9` and
//! resume, or sharding then merging; `verify` recomputes every sample's decision; the samples
//! really differ; the summary reports pass@1 and pass@K.

#[path = "dataset_util/mod.rs"]
mod dataset_util;

use std::collections::BTreeMap;
use std::path::Path;

use dataset_util::{bin, check, output_hashes as outputs, repo};

const SAMPLING: [&str; 6] = [
    "--samples",
    "4",
    "--temperature",
    "0.7",
    "--max-new-tokens",
    "48",
];

/// `verisample run` with the sampling flags into `out`, `threads` rayon threads, more
/// arguments `extra`, and the environment `env`.
fn run(out: &Path, threads: &str, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = bin();
    cmd.current_dir(repo())
        .env("RAYON_NUM_THREADS", threads)
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .args(["run", "-q", "--out"])
        .arg(out)
        // Spelt as the shards' run.json records it, which a merge reads (the JSONL files name
        // the input as `--data` spells it).
        .arg("--data")
        .arg(repo().join("assets/sample/data"))
        .args(SAMPLING)
        .args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn samples_are_the_same_whatever_the_batch_threads_interruption_or_shards() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("ref");
    check(run(&reference, "2", &["--max-batch", "64"], &[]), "run");
    let want = outputs(&reference);
    assert!(want.keys().any(|k| k.contains("rejected")), "{want:?}");

    for (name, threads, batch) in [("b1", "1", "1"), ("b7", "2", "7"), ("b64t1", "1", "64")] {
        let out = dir.path().join(name);
        check(run(&out, threads, &["--max-batch", batch], &[]), name);
        assert_eq!(
            outputs(&out),
            want,
            "--max-batch {batch}, {threads} thread(s)"
        );
    }

    // Killed after 50 journaled samples, then resumed.
    let killed = dir.path().join("killed");
    let first = run(
        &killed,
        "2",
        &["--max-batch", "7"],
        &[("VERISAMPLE_TEST_KILL_AT", "generation:50")],
    );
    assert!(
        !first.status.success(),
        "the hook should have killed the run"
    );
    check(run(&killed, "2", &["--max-batch", "7"], &[]), "resume");
    assert_eq!(outputs(&killed), want, "after kill -9 and resume");

    // Two shards, then merged.
    let shards: Vec<_> = (0..2)
        .map(|i| dir.path().join(format!("shard{i}")))
        .collect();
    for (i, s) in shards.iter().enumerate() {
        check(run(s, "2", &["--shard", &format!("{i}/2")], &[]), "shard");
    }
    let merged = dir.path().join("merged");
    check(
        bin()
            .current_dir(repo())
            .args(["merge", "-q"])
            .args(&shards)
            .arg("--out")
            .arg(&merged)
            .output()
            .unwrap(),
        "merge",
    );
    assert_eq!(outputs(&merged), want, "sharded then merged");

    // Every sample's decision recomputes from the splits.
    let verify = bin().arg("verify").arg(&reference).output().unwrap();
    let text = String::from_utf8_lossy(&check(verify, "verify").stdout).into_owned();
    assert!(text.contains("every decision recomputes"), "{text}");
}

#[test]
fn the_samples_of_a_question_differ_and_the_summary_reports_pass_at_k() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let summary = check(run(&out, "2", &["--json"], &[]), "run");
    let summary: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
    let s = &summary["sampling"];
    assert_eq!(
        (s["samples"].as_u64(), s["questions"].as_u64()),
        (Some(4), Some(48))
    );
    let (p1, pk) = (
        s["pass_at_1"].as_u64().unwrap(),
        s["pass_at_k"].as_u64().unwrap(),
    );
    assert!(p1 <= pk && pk <= 48, "{s}");
    assert_eq!(summary["accepted"].as_u64(), Some(pk));

    // generations.jsonl: four samples per question, and not all alike.
    let text = std::fs::read_to_string(out.join("generations.jsonl")).unwrap();
    let mut by_question: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        by_question
            .entry((v["position"].as_u64().unwrap(), v["qa"].as_u64().unwrap()))
            .or_default()
            .push(v["answer"]["text"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(by_question.len(), 48);
    assert!(by_question.values().all(|v| v.len() == 4));
    let differing = by_question
        .values()
        .filter(|v| v.iter().any(|t| t != &v[0]))
        .count();
    assert!(differing > 0, "at temperature 0.7 some samples must differ");

    // Each wrong sample is its own rejected item (issue 45 item 2), a plain answer with its
    // own sample index, its question's input item named once per sample.
    let rejected = verisample::dataset::writer::read_rejected_split(
        &out.join("data/OrandCar_rejected-*.parquet"),
    )
    .unwrap();
    let accepted_samples = s["accepted_samples"].as_u64().unwrap();
    let items: usize = rejected.iter().map(|r| r.qa.len()).sum();
    assert_eq!(items as u64, 4 * 48 - accepted_samples);
    assert!(
        rejected.iter().any(|r| r.qa.len() > 1),
        "a question with 2+ wrong samples"
    );
    for row in &rejected {
        let meta: serde_json::Value = serde_json::from_str(&row.clean_meta).unwrap();
        let index: Vec<u64> = serde_json::from_value(meta["sample_index"].clone()).unwrap();
        assert_eq!(index.len(), row.qa.len(), "{meta}");
        assert!(index.windows(2).all(|w| w[0] < w[1]) && index.iter().all(|&i| i < 4));
        assert_eq!(
            meta["cleaning"]["kept_from"],
            serde_json::json!(vec![0; row.qa.len()])
        );
        assert!(row.qa.iter().all(|e| e.question == row.qa[0].question));
        // Plain text, as in a greedy run: no JSON array of the samples.
        for e in &row.qa {
            assert!(
                serde_json::from_str::<Vec<String>>(&e.reason).is_err(),
                "{}",
                e.reason
            );
            assert!(!e.reason.is_empty());
        }
    }

    // The accepted split's rows name each item's sample.
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        card.contains("Rejection sampling: 4 samples per question"),
        "{card}"
    );
}

/// Issue 45 item 3: `--distinct-samples on` writes, of each question's accepted samples, only
/// the first (by sample index) of each distinct (reasoning, answer) pair — exactly the run
/// without it filtered so —, and the summary counts the distinct pairs either way.
#[test]
fn distinct_samples_keeps_the_first_sample_of_each_pair() {
    use verisample::dataset::writer::read_accepted_split;
    let dir = tempfile::tempdir().unwrap();
    let (all, distinct) = (dir.path().join("all"), dir.path().join("distinct"));
    let summary = |o: std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let s_all = summary(check(run(&all, "2", &["--json"], &[]), "run"));
    let s_distinct = summary(check(
        run(&distinct, "2", &["--json", "--distinct-samples", "on"], &[]),
        "run --distinct-samples on",
    ));
    let pairs = s_all["sampling"]["distinct_accepted"].as_u64().unwrap();
    let accepted = s_all["sampling"]["accepted_samples"].as_u64().unwrap();
    assert!(
        pairs < accepted,
        "some accepted samples repeat a pair: {pairs} of {accepted}"
    );
    assert_eq!(
        s_distinct["sampling"], s_all["sampling"],
        "the same samples, counted alike"
    );
    // (row, sample, think, answer) of every think entry, in split order.
    let entries = |out: &Path| -> Vec<(u64, u64, String, String)> {
        let rows = read_accepted_split(&out.join("data/OrandCar_RS_think-*.parquet")).unwrap();
        rows.iter()
            .flat_map(|r| {
                let meta: serde_json::Value = serde_json::from_str(&r.clean_meta).unwrap();
                let row = meta["row_index"].as_u64().unwrap();
                let index: Vec<u64> = serde_json::from_value(meta["sample_index"].clone()).unwrap();
                r.qa.iter()
                    .zip(index)
                    .map(move |(e, s)| (row, s, e.think.clone().unwrap(), e.answer.clone()))
            })
            .collect()
    };
    let mut seen = std::collections::BTreeSet::new();
    let want: Vec<_> = entries(&all)
        .into_iter()
        .filter(|(row, _, think, answer)| seen.insert((*row, think.clone(), answer.clone())))
        .collect();
    let got = entries(&distinct);
    assert_eq!(got, want);
    assert_eq!(got.len() as u64, pairs, "one think entry per distinct pair");
    let verify = bin().arg("verify").arg(&distinct).output().unwrap();
    check(verify, "verify --distinct-samples on");
}

#[test]
fn sampling_settings_that_cannot_work_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec!["--samples", "4", "--temperature", "0"],
            "--temperature",
        ),
        (vec!["--top-p", "0.9"], "--top-p"),
        (vec!["--samples", "0"], "--samples"),
        // NaN and infinity are refused, not read as "not given".
        (
            vec!["--samples", "2", "--temperature", "NaN"],
            "--temperature NaN",
        ),
        (vec!["--temperature", "inf"], "--temperature inf"),
        (vec!["--repetition-penalty", "NaN"], "--repetition-penalty"),
        (vec!["--kv-cache-gib", "inf"], "--kv-cache-gib"),
    ] {
        let out = bin()
            .current_dir(repo())
            .args(["run", "--out"])
            .arg(dir.path().join("o"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
