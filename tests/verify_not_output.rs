//! `verisample verify OUT` on a folder with nothing to verify: a run that produced no splits
//! says so (exit 0: no decision can disagree), a folder that is not a verisample output says
//! that (exit 2), neither with an internal `read output directory …: No such file` error.

mod dataset_util;

use std::path::Path;
use std::process::Output;

use dataset_util::{bin, png};

fn verify(out: &Path) -> Output {
    bin().arg("verify").arg(out).output().unwrap()
}

/// Catches: `verify` of a run whose run.json says `no_split` failing with `error: read output
/// directory …/data: No such file or directory` (exit 1) instead of saying that the run
/// produced no splits (newcomer finding).
#[test]
fn a_run_that_produced_no_splits_has_nothing_to_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.png"), png(64, 32, 1)).unwrap();
    std::fs::write(
        src.join("labels.jsonl"),
        "{\"file\": \"a.png\", \"label\": \"11850\"}\n",
    )
    .unwrap();
    // OrandCar asks its own fixed question: `run` drops every item of another as off_task.
    let input = tmp.path().join("input");
    let prepared = bin()
        .args(["-q", "prepare", "--labels"])
        .arg(src.join("labels.jsonl"))
        .args(["--family", "OrandCar", "--question", "Who?", "--out"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(prepared.status.success(), "{prepared:?}");
    let out = tmp.path().join("out");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = bin()
        .args(["-q", "run", "--device", "cpu", "--model"])
        .arg(repo.join("assets/model"))
        .arg("--data")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "no_split");

    let st = verify(&out);
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "note: {}: this run produced no splits (run.json status `no_split`",
            out.display()
        )) && stderr.contains("there is no decision to verify"),
        "{stderr}"
    );
    assert!(!stderr.contains("No such file"), "{stderr}");
}

/// Catches: `verify` of an empty folder, or of an input dataset, failing with `error: read
/// output directory …/data: No such file or directory` (exit 1) or `no output splits found`
/// instead of saying that it is not a verisample output (a usage error, exit 2).
#[test]
fn a_folder_that_is_not_a_verisample_output_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    // A prepared input dataset: data/train-*.parquet, no run.json.
    let input = tmp.path().join("input");
    std::fs::create_dir_all(input.join("data")).unwrap();
    std::fs::write(input.join("data/train-00000-of-00001.parquet"), b"rows").unwrap();
    for folder in [&empty, &input] {
        let st = verify(folder);
        let stderr = String::from_utf8_lossy(&st.stderr);
        assert_eq!(st.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: {} is not a verisample output: it has no run.json and no output splits",
                folder.display()
            )),
            "{stderr}"
        );
    }
}

/// Catches: `verify` of a finished run whose split files were all deleted exiting 2 (a usage
/// error, "no output splits found") where deleting one split exits 1: run.json records the
/// splits, so each is a row count mismatch (newcomer finding).
#[test]
fn a_run_whose_splits_are_all_gone_is_a_row_count_mismatch() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = bin()
        .args(["-q", "run", "--device", "cpu", "--limit", "4", "--model"])
        .arg(repo.join("assets/model"))
        .arg("--data")
        .arg(repo.join("assets/sample/data"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let mut removed = 0;
    for f in std::fs::read_dir(out.join("data")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
        removed += 1;
    }
    assert!(removed > 0);
    let st = verify(&out);
    let stdout = String::from_utf8_lossy(&st.stdout);
    assert_eq!(
        st.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(
        stdout
            .lines()
            .filter(|l| l.starts_with("MISMATCH "))
            .count()
            >= 2,
        "{stdout}"
    );
}
