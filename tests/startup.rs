//! A start's cost: a rerun over a finished output with nothing left loads no model and writes
//! the same bytes; the hash cache answers for unchanged files (nothing read), `--verify-weights`
//! reads every file; every hashing step reports its bytes on stderr.

#[path = "dataset_util/mod.rs"]
mod dataset_util;

use std::collections::BTreeMap;
use std::path::Path;

use dataset_util::{bin, check, repo};

/// sha256 of every output file but those holding timings (`run.json`, `chart.svg`).
fn outputs(out: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![out.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(out)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if !["run.json", "chart.svg"].contains(&rel.as_str()) && !rel.starts_with(".") {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(rel, verisample::dataset::writer::sha256_hex(&bytes));
            }
        }
    }
    files
}

/// The `--progress jsonl` lines of `stderr` that end a start step: step → bytes read.
fn bytes_read(stderr: &str) -> BTreeMap<String, u64> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "end")
        .map(|v| {
            (
                v["phase"].as_str().unwrap().to_string(),
                v["done"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `verisample run` on the bundled sample into `out` with the hash cache in `cache` (empty:
/// none); its stderr.
fn run(out: &Path, cache: impl AsRef<std::ffi::OsStr>, extra: &[&str]) -> String {
    let output = bin()
        .current_dir(repo())
        .env("VERISAMPLE_CACHE_DIR", cache)
        .args([
            "run",
            "--progress",
            "jsonl",
            "--max-new-tokens",
            "32",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    String::from_utf8(check(output, "run").stderr).unwrap()
}

#[test]
fn a_rerun_with_nothing_left_loads_no_model_and_reads_no_unchanged_file() {
    let dir = tempfile::tempdir().unwrap();
    let (out, cache) = (dir.path().join("out"), dir.path().join("cache"));
    let first = run(&out, &cache, &[]);
    assert!(first.contains("KV cache pool allocated"), "{first}");
    let model_bytes: u64 = std::fs::read_dir(repo().join("assets/model"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.to_string_lossy();
            [".safetensors", ".json", ".jinja", ".txt"]
                .iter()
                .any(|x| n.ends_with(x))
        })
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    // The bundled files are older than the racy window: the first start hashes and caches them.
    assert_eq!(bytes_read(&first)["hash model files"], model_bytes);
    let want = outputs(&out);

    let rerun = run(&out, &cache, &[]);
    assert!(!rerun.contains("KV cache pool allocated"), "{rerun}");
    assert!(!rerun.contains("load the model"), "{rerun}");
    assert!(rerun.contains("finished run of this job"), "{rerun}");
    let read = bytes_read(&rerun);
    assert_eq!(
        (read["hash model files"], read["hash input files"]),
        (0, 0),
        "{rerun}"
    );
    assert_eq!(
        outputs(&out),
        want,
        "a rerun without the model changed the outputs"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "complete");

    // --verify-weights reads every file again, and still needs no model.
    let verified = run(&out, &cache, &["--verify-weights"]);
    assert_eq!(bytes_read(&verified)["hash model files"], model_bytes);
    assert!(!verified.contains("KV cache pool allocated"), "{verified}");
    assert_eq!(outputs(&out), want);

    // An empty cache folder setting: no cache, every file read.
    let uncached = run(&out, "", &[]);
    assert_eq!(bytes_read(&uncached)["hash model files"], model_bytes);
}

#[test]
fn a_rerun_after_a_limited_run_loads_the_model_for_the_rows_left() {
    let dir = tempfile::tempdir().unwrap();
    let (out, cache) = (dir.path().join("out"), dir.path().join("cache"));
    run(&out, &cache, &["--limit", "2"]);
    let rest = run(&out, &cache, &[]);
    assert!(rest.contains("KV cache pool allocated"), "{rest}");
    assert!(!rest.contains("finished run of this job"), "{rest}");
}
