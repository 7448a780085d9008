//! `bench`: it runs what `run` runs, reports every metric of docs/bench.md with the warm-up
//! left out, keeps its JSON keys, and refuses the images `run` refuses.

mod dataset_util;

use std::collections::BTreeSet;

use dataset_util::{bin, check, png};
use serde_json::Value;

/// The dotted keys of every number, string, bool or null under `v` (`ttft_s.p50`).
fn keys(prefix: &str, v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                keys(&key, child, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

fn key_set(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    keys("", v, &mut out);
    out
}

/// The metrics of one pass, as docs/bench.md lists them: a renamed or dropped key breaks the
/// scripts that read `bench --json` and `run.json`.
const PASS_KEYS: &[&str] = &[
    "wall_s",
    "requests",
    "failed_requests",
    "images",
    "requests_per_s",
    "images_per_s",
    "prompt_tokens",
    "generated_tokens",
    "prompt_tokens_per_s",
    "generated_tokens_per_s",
    "vision_s",
    "vision_images",
    "prefill_s",
    "decode_s",
    "prefill_computed_tokens",
    "model_prefill_tokens_per_s",
    "model_decode_tokens_per_s",
    "preemptions",
    "prefix_cache_hit_tokens",
    "prefix_cache_hit_rate",
    "peak_rss_bytes",
    "device_memory_used_bytes",
];
const LATENCY_KEYS: &[&str] = &["count", "mean", "p50", "p90", "p99", "max"];

fn expected_pass_keys() -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = PASS_KEYS.iter().map(|k| k.to_string()).collect();
    for dist in ["ttft_s", "latency_s", "tpot_s"] {
        for k in LATENCY_KEYS {
            keys.insert(format!("{dist}.{k}"));
        }
    }
    keys
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number: {v}"))
}

/// `bench --repeat 3` over the first 6 rows of the bundled sample: three passes of exactly the
/// 6 requests (the 2 warm-up ones not counted), each request's tokens those `run` generated for
/// the same rows, every metric present under its documented key with consistent values, and
/// `run.json`'s `engine_metrics` the same record.
#[test]
fn bench_measures_what_run_runs_with_every_metric() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let common = ["--limit", "6", "--max-new-tokens", "48"];
    check(
        bin()
            .args(["-q", "run", "--judge", "off", "--out"])
            .arg(&out)
            .args(common)
            .output()
            .unwrap(),
        "run",
    );
    let bench = check(
        bin()
            .args(["-q", "bench", "--repeat", "3", "--warmup", "2", "--json"])
            .args(common)
            .output()
            .unwrap(),
        "bench",
    );
    let report: Value = serde_json::from_slice(&bench.stdout).unwrap();
    let top: BTreeSet<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        top,
        BTreeSet::from([
            "engine",
            "input",
            "items",
            "passes",
            "requests",
            "settings",
            "skipped",
            "spread",
            "warmup_requests",
        ])
    );
    assert_eq!(report["warmup_requests"], 2);
    assert_eq!(report["requests"], 6);
    assert_eq!(report["settings"]["max_new_tokens"], 48);
    assert_eq!(report["engine"]["max_batch"], 64, "run's CPU default");

    // Each request's tokens are run's answer for that row.
    let generations: Vec<Value> = std::fs::read_to_string(out.join("generations.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), 6);
    for (i, item) in items.iter().enumerate() {
        let g = generations
            .iter()
            .find(|g| g["position"] == i && g["qa"] == 0)
            .unwrap_or_else(|| panic!("run has no answer for row {i}"));
        assert_eq!(item["token_ids"], g["answer"]["token_ids"], "row {i}");
        assert_eq!(
            item["prompt_tokens"], g["answer"]["prompt_tokens"],
            "row {i}"
        );
        assert!(
            item["label"]
                .as_str()
                .unwrap()
                .ends_with(&format!("row {i} qa 0")),
            "{item}"
        );
    }
    let generated: u64 = items
        .iter()
        .map(|i| i["token_ids"].as_array().unwrap().len() as u64)
        .sum();
    let prompt: u64 = items
        .iter()
        .map(|i| i["prompt_tokens"].as_u64().unwrap())
        .sum();

    let passes = report["passes"].as_array().unwrap();
    assert_eq!(passes.len(), 3);
    for p in passes {
        assert_eq!(key_set(p), expected_pass_keys(), "the pass's keys");
        // Warm-up excluded: every count is of the 6 measured requests.
        assert_eq!(p["requests"], 6);
        assert_eq!(p["images"], 6);
        assert_eq!(p["failed_requests"], 0);
        assert_eq!(p["ttft_s"]["count"], 6);
        assert_eq!(p["latency_s"]["count"], 6);
        assert_eq!(p["generated_tokens"].as_u64(), Some(generated));
        assert_eq!(p["prompt_tokens"].as_u64(), Some(prompt));
        assert_eq!(
            p["prefix_cache_hit_tokens"], 0,
            "each pass starts with an empty cache"
        );
        let wall = f(p, "wall_s");
        assert!(wall > 0.0);
        assert!((f(p, "requests_per_s") - 6.0 / wall).abs() < 1e-6 * f(p, "requests_per_s"));
        assert!(
            (f(p, "generated_tokens_per_s") - generated as f64 / wall).abs()
                < 1e-6 * f(p, "generated_tokens_per_s")
        );
        let (ttft, lat) = (&p["ttft_s"], &p["latency_s"]);
        assert!(
            f(ttft, "p50") > 0.0 && f(ttft, "p50") <= f(lat, "p50") + 1e-9,
            "{p}"
        );
        for d in [ttft, lat] {
            assert!(
                f(d, "p50") <= f(d, "p90") && f(d, "p90") <= f(d, "p99"),
                "{d}"
            );
            assert!(
                f(d, "p99") <= f(d, "max") && f(d, "max") <= wall + 1e-3,
                "{d}"
            );
        }
        assert!(p["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
        assert!(p["device_memory_used_bytes"].is_null(), "on the CPU");
    }
    // The spread covers every number of a pass, over the three.
    let spread = report["spread"].as_object().unwrap();
    let numbers: BTreeSet<String> = expected_pass_keys()
        .into_iter()
        .filter(|k| k != "device_memory_used_bytes")
        .collect();
    assert_eq!(spread.keys().cloned().collect::<BTreeSet<_>>(), numbers);
    let rps: Vec<f64> = passes.iter().map(|p| f(p, "requests_per_s")).collect();
    let s = &spread["requests_per_s"];
    assert!((f(s, "mean") - rps.iter().sum::<f64>() / 3.0).abs() < 1e-9 * f(s, "mean"));
    assert_eq!(
        f(s, "min"),
        rps.iter().copied().fold(f64::INFINITY, f64::min)
    );

    // run.json keeps the same record over its generate calls.
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    let m = &run_json["engine_metrics"];
    assert_eq!(
        key_set(m),
        expected_pass_keys(),
        "run.json's engine_metrics"
    );
    assert_eq!(m["requests"], 6);
    assert_eq!(m["generated_tokens"].as_u64(), Some(generated));
    assert_eq!(m["latency_s"]["count"], 6);

    // A rerun with nothing left to generate measured nothing: null, not a record of zeros.
    check(
        bin()
            .args(["-q", "run", "--judge", "off", "--out"])
            .arg(&out)
            .args(common)
            .output()
            .unwrap(),
        "rerun",
    );
    let rerun: Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert!(
        rerun["engine_metrics"].is_null(),
        "{}",
        rerun["engine_metrics"]
    );
}

/// A `--data` folder without parquet is a usage error (exit 2), as in `run`, and a failed
/// bench prints nothing on stdout.
#[test]
fn bench_refuses_a_data_folder_without_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.png"), png(40, 20, 1)).unwrap();
    let out = bin()
        .args(["bench", "--data"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data"));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A JPEG cut before its end marker, which `run` refuses as truncated.
fn truncated_jpeg() -> Vec<u8> {
    let img = image::RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8 * 6, y as u8 * 8, 90]));
    let mut bytes = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 90)
        .encode_image(&img)
        .unwrap();
    bytes.truncate(bytes.len() - 40);
    bytes
}

/// Images `run` refuses (a broken PNG, a truncated JPEG, a file that cannot be read) are left out of a folder bench and
/// named with their field; the good image is measured. With nothing left, bench fails.
#[test]
fn bench_leaves_out_the_images_run_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.png"), png(60, 20, 3)).unwrap();
    std::fs::write(tmp.path().join("b.png"), b"\x89PNG not really").unwrap();
    std::fs::write(tmp.path().join("c.jpg"), truncated_jpeg()).unwrap();
    std::os::unix::fs::symlink("/nonexistent/verisample.png", tmp.path().join("d.png")).unwrap();
    // No --model: the bundled model, found like `run` finds it, from any working folder.
    let out = check(
        bin()
            .current_dir(tmp.path())
            .args(["bench", "--images", ".", "--max-new-tokens", "8", "--json"])
            .output()
            .unwrap(),
        "bench",
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"], 1);
    assert_eq!(report["items"][0]["label"], "a.png");
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert!(
        skipped[0].starts_with("b.png: image.bytes: "),
        "{skipped:?}"
    );
    assert!(
        skipped[1].starts_with("c.jpg: image.bytes: ") && skipped[1].contains("truncated"),
        "{skipped:?}"
    );
    assert!(
        skipped[2].starts_with("d.png: image.bytes: cannot read the file"),
        "a dangling link: {skipped:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("left out, as run refuses it: c.jpg"), "{err}");

    std::fs::remove_file(tmp.path().join("a.png")).unwrap();
    let out = bin()
        .current_dir(tmp.path())
        .args(["bench", "--images", "."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no request to run: all 3 input row(s) refused, first b.png"),
        "{err}"
    );
}

/// The report of `bench -q --json --max-new-tokens 4` with `args`, which must succeed.
fn bench_json(args: &[&str]) -> Value {
    let out = check(
        bin()
            .args(["-q", "bench", "--json", "--max-new-tokens", "4"])
            .args(args)
            .output()
            .unwrap(),
        "bench",
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The labels of a report's items, in order.
fn labels(report: &Value) -> Vec<String> {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap().to_string())
        .collect()
}

/// On a dataset, bench plans the rows as `run` does: a question repeated about the same image
/// runs once (`--dedup`, the default), a blank question is left out and named as `run` names
/// it in errors.jsonl, and with `--shard 1/2` only the shard's rows run.
#[test]
fn bench_plans_a_dataset_as_run_does() {
    use dataset_util::{write_input, InputSpec};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let rows = [
        InputSpec::new(
            png(60, 20, 1),
            &[("What?", "12"), ("What?", "12"), ("   ", "7")],
        ),
        InputSpec::new(png(60, 20, 2), &[("What?", "34")]),
        InputSpec::new(png(60, 20, 3), &[("What?", "56")]),
    ];
    write_input(&data.join("in.parquet"), &rows, 3);
    let bench = |extra: &[&str]| -> Value {
        let data = data.to_str().unwrap();
        bench_json(&[&["--warmup", "0", "--data", data], extra].concat())
    };
    let all = bench(&[]);
    assert_eq!(
        labels(&all),
        [
            "in.parquet row 0 qa 0",
            "in.parquet row 1 qa 0",
            "in.parquet row 2 qa 0"
        ],
        "the repeat (qa 1) and the blank question (qa 2) do not run"
    );
    let skipped = all["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let s = skipped[0].as_str().unwrap();
    assert!(
        s.ends_with("row 0: qa[2].question: question is missing or blank"),
        "{s}"
    );
    assert_eq!(
        labels(&bench(&["--dedup", "off"])),
        [
            "in.parquet row 0 qa 0",
            "in.parquet row 0 qa 1",
            "in.parquet row 1 qa 0",
            "in.parquet row 2 qa 0"
        ]
    );
    assert_eq!(
        labels(&bench(&["--shard", "1/2"])),
        ["in.parquet row 1 qa 0"]
    );
}

/// `--shard` applies to a folder of images as to rows (file-name positions); a blank
/// `--question` and a dataset-only flag with `--images` are usage errors.
#[test]
fn bench_on_a_folder_takes_its_shard_and_refuses_what_does_not_apply() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, name) in ["a.png", "b.png", "c.png", "d.png"].iter().enumerate() {
        std::fs::write(tmp.path().join(name), png(40, 20, i as u8)).unwrap();
    }
    let images = tmp.path().to_str().unwrap();
    let report = bench_json(&["--shard", "1/2", "--images", images]);
    assert_eq!(labels(&report), ["b.png", "d.png"]);
    for extra in [&["--question", "  "][..], &["--image-column", "img"][..]] {
        let out = bin()
            .args(["bench", "--images"])
            .arg(tmp.path())
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&extra[0][2..]), "{extra:?}: {err}");
    }
}
