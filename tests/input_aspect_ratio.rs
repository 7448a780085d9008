//! An image the model's processor refuses for its shape (an aspect ratio over 200, which
//! `smart_resize` rejects as transformers does) is an input error on `image.bytes`, found by
//! the up-front image check, not a failed generation. The real `run` binary with the bundled
//! tiny model on the CPU.

mod dataset_util;

use dataset_util::{bin, png, repo, write_input, InputSpec};

#[test]
fn an_image_with_an_aspect_ratio_over_200_is_an_image_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    let qa = [("What is written in the image?", "7")];
    write_input(
        &ds.join("train.parquet"),
        &[
            InputSpec::new(png(28, 28, 1), &qa),
            InputSpec::new(png(2010, 10, 2), &qa),
        ],
        10,
    );
    let out = tmp.path().join("out");
    let run_with = |extra: &[&str]| {
        bin()
            .arg("run")
            .arg("--model")
            .arg(repo().join("assets/model"))
            .arg("--data")
            .arg(&ds)
            .arg("--out")
            .arg(&out)
            .args(["--device", "cpu", "--max-new-tokens", "4", "-q"])
            .args(extra)
            .env_remove("VERISAMPLE_TEST_KILL_AT")
            .output()
            .unwrap()
    };
    let run = run_with(&[]);
    let errors = std::fs::read_to_string(out.join("errors.jsonl")).unwrap_or_else(|e| {
        panic!(
            "no errors.jsonl ({e}): {:?}\n{}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        )
    });
    let lines: Vec<serde_json::Value> = errors
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{errors}");
    let line = &lines[0];
    assert_eq!(line["row"], 1, "{line}");
    assert_eq!(line["field"], "image.bytes", "{line}");
    let message = line["message"].as_str().unwrap();
    assert!(
        message.contains("absolute aspect ratio must be smaller than 200, got a 2010x10 image"),
        "{message}"
    );
    // `-q` keeps a warning that input could not be used (no silent loss in a quiet pipeline).
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("1 input errors, 0 rows and 0 file(s) not read: see errors.jsonl"),
        "{stderr}"
    );
    // So does `-q --json` (the rerun replays the same outcome): stdout is the JSON alone.
    let json = run_with(&["--json"]);
    let stderr = String::from_utf8_lossy(&json.stderr);
    assert!(
        stderr.contains("1 input errors, 0 rows and 0 file(s) not read: see errors.jsonl"),
        "{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(summary["errors"], 1, "{summary}");
}
