//! `verisample run --think-budget N` with the real binary, the bundled tiny model (it reasons
//! "digits: …" inside `<think>`) and the bundled sample (48 rows): the items whose reasoning
//! the budget ended say so in `generations.jsonl`, `clean_meta` and the card; the splits are
//! the same bytes at any `--max-batch` and after a run resumed from a `--limit`; a resume with
//! another budget is refused as a change, and a budget with `--think off` is a usage error.
//! The engine's side (tokens, a budget never reached): tests/think_budget.rs.

mod shared_data;
use shared_data::repo;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use verisample::dataset::writer::{read_split, split_files};
use verisample::record::RejectedQa;

const BIN: &str = env!("CARGO_BIN_EXE_verisample");

fn run(out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(repo().join("assets/sample/data"))
        .arg("--out")
        .arg(out)
        .args([
            "--device",
            "cpu",
            "--max-new-tokens",
            "48",
            "--judge",
            "off",
        ])
        .args(extra)
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The splits and the JSON-lines files of `out`.
fn stable_files(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(out.join("data")).unwrap().flatten() {
        let name = format!("data/{}", e.file_name().to_string_lossy());
        files.insert(name, std::fs::read(e.path()).unwrap());
    }
    for f in ["errors.jsonl", "cleaning.jsonl", "generations.jsonl"] {
        files.insert(f.into(), std::fs::read(out.join(f)).unwrap());
    }
    files
}

#[test]
fn budget_hits_are_recorded_and_the_bytes_hold_at_any_batch_and_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    let first = ok(
        run(&one, &["--think-budget", "2", "--max-batch", "1"]),
        "batch 1",
    );
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.contains("thinking budget 2 tokens: it ended the reasoning of 48 of 48 answers"),
        "{stdout}"
    );
    // 2 + the early-stopping text's tokens reach --max-new-tokens 48: said at start.
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(stderr.contains("leave no room for an answer"), "{stderr}");
    // Every answer's reasoning is longer than 2 tokens: each was cut, and says so.
    let lines = std::fs::read_to_string(one.join("generations.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 48);
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["answer"]["think_budget_hit"], true, "{l}");
        let text = v["answer"]["text"].as_str().unwrap();
        assert!(
            text.contains("Considering the limited time by the user") && text.contains("</think>"),
            "{text}"
        );
    }
    let mut entries = 0;
    for f in split_files(&one, "OrandCar_rejected").unwrap() {
        for r in read_split::<RejectedQa>(&f).unwrap() {
            let meta: serde_json::Value = serde_json::from_str(&r.clean_meta).unwrap();
            assert_eq!(meta["think_budget"], 2);
            assert_eq!(
                meta["think_budget_hit"],
                serde_json::json!(vec![true; r.qa.len()])
            );
            entries += r.qa.len();
        }
    }
    assert_eq!(entries, 48, "the cut reasoning leaves wrong answers");
    let run_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(one.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run_json["stats"]["think_budget"],
        serde_json::json!({"budget": 2, "hit": 48, "answers": 48})
    );
    let card = std::fs::read_to_string(one.join("README.md")).unwrap();
    assert!(
        card.contains("Thinking budget: 2 tokens. It ended the reasoning of 48 of 48 answers"),
        "{card}"
    );

    // `verify` holds clean_meta's flags to generations.jsonl's, entry by entry.
    let verify = |out: &Path| Command::new(BIN).arg("verify").arg(out).output().unwrap();
    ok(verify(&one), "verify");
    let edited = tmp.path().join("edited");
    copy_dir(&one, &edited);
    let g = edited.join("generations.jsonl");
    let text = std::fs::read_to_string(&g).unwrap();
    std::fs::write(&g, text.replacen("\"think_budget_hit\":true", "\"x\":0", 1)).unwrap();
    let refused = verify(&edited);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stdout).into_owned()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("clean_meta think_budget_hit says true but generations.jsonl's"),
        "{said}"
    );

    let wide = tmp.path().join("wide");
    ok(
        run(&wide, &["--think-budget", "2", "--max-batch", "64"]),
        "batch 64",
    );
    assert_eq!(stable_files(&one), stable_files(&wide), "batch 1 vs 64");

    let resumed = tmp.path().join("resumed");
    ok(
        run(&resumed, &["--think-budget", "2", "--limit", "10"]),
        "limit 10",
    );
    ok(run(&resumed, &["--think-budget", "2"]), "resume");
    assert_eq!(stable_files(&one), stable_files(&resumed), "resumed");

    // Another budget is another output: the resume is refused, naming the setting.
    let changed = run(&resumed, &["--think-budget", "3"]);
    assert_eq!(changed.status.code(), Some(1), "{changed:?}");
    let err = String::from_utf8_lossy(&changed.stderr);
    assert!(err.contains("--think-budget changed: 2 → 3"), "{err}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

#[test]
fn a_budget_without_thinking_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        &tmp.path().join("o"),
        &["--think-budget", "4", "--think", "off"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("think-budget") && err.contains("--think on"),
        "{err}"
    );
    assert!(!tmp.path().join("o").exists());
}
