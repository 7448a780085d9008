//! The portable path end to end (`run --kernels portable` on the CPU: the candle ops every GPU
//! run takes — row-tiled matmuls, fixed-shape attention — on the bundled default model and
//! sample, its first 24 rows): the splits are the same bytes at `--max-batch` 1, 7 and 64 and
//! at one or two threads, greedy and with `--samples 4` (rejection sampling, where a flipped
//! logit changes a draw); and a resume after `kill -9` writes them again.

#[path = "dataset_util/mod.rs"]
mod dataset_util;

use std::path::Path;

use dataset_util::{bin, check, output_hashes, repo};

/// `verisample run --kernels portable` into `out` with `threads` rayon threads, `--max-batch
/// batch` and `extra`; the test kill hook set when `kill_at` is.
fn run(
    out: &Path,
    threads: &str,
    batch: &str,
    extra: &[&str],
    kill_at: Option<&str>,
) -> std::process::Output {
    let mut cmd = bin();
    cmd.current_dir(repo())
        .env("RAYON_NUM_THREADS", threads)
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .args([
            "run",
            "-q",
            "--kernels",
            "portable",
            "--max-new-tokens",
            "48",
            // The first 24 rows: at one sequence per step the portable path pays every padded
            // row in arithmetic on the CPU (BENCHMARKS.md); 24 rows hold accepts and rejects.
            "--limit",
            "24",
        ])
        .args(["--max-batch", batch, "--out"])
        .arg(out)
        .args(extra);
    if let Some(at) = kill_at {
        cmd.env("VERISAMPLE_TEST_KILL_AT", at);
    }
    cmd.output().unwrap()
}

fn same_bytes_at_every_batch(extra: &[&str], what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("ref");
    check(run(&reference, "2", "64", extra, None), what);
    let want = output_hashes(&reference);
    assert!(want.keys().any(|k| k.contains("RS_think")), "{want:?}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reference.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        json["settings"]["kernels"], "portable",
        "run.json records the path"
    );
    for (name, threads, batch) in [("b1", "2", "1"), ("b7", "1", "7")] {
        let out = dir.path().join(name);
        check(run(&out, threads, batch, extra, None), name);
        assert_eq!(
            output_hashes(&out),
            want,
            "{what}: --max-batch {batch}, {threads} thread(s)"
        );
    }
    let killed = dir.path().join("killed");
    let first = run(&killed, "2", "7", extra, Some("generation:20"));
    assert!(
        !first.status.success(),
        "the hook should have killed the run"
    );
    check(run(&killed, "2", "7", extra, None), "resume");
    assert_eq!(
        output_hashes(&killed),
        want,
        "{what}: after kill -9 and resume"
    );
}

#[test]
fn greedy_splits_are_the_same_bytes_at_any_batch_on_the_portable_path() {
    same_bytes_at_every_batch(&[], "greedy");
}

#[test]
fn sampled_splits_are_the_same_bytes_at_any_batch_on_the_portable_path() {
    same_bytes_at_every_batch(&["--samples", "4", "--temperature", "0.7"], "--samples 4");
}
