//! What a newcomer meets with the real `verisample run` binary, the
//! bundled tiny model and the bundled sample — output folders that never lose a user's
//! files, refusals that say what to do in one sentence, and the summary on stdout.

mod shared_data;
use shared_data::repo;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_verisample");

/// `verisample run` of the bundled model on the bundled sample into `out`, with `extra` flags.
fn run(out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(repo().join("assets/sample/data"))
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--max-new-tokens", "64"])
        .args(extra)
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstderr:\n{}",
        out.status,
        text(&out.stderr)
    );
    out
}

/// The `error: …` line of a failed command.
fn error_line(out: &Output) -> String {
    text(&out.stderr)
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default()
        .to_string()
}

fn has_hash(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_hexdigit())
        .any(|w| w.len() == 64)
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap()
}

#[test]
fn summary_goes_to_stdout_headline_first_and_the_output_folder_is_left_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let first = ok(run(&out, &[]), "run");
    let stdout = text(&first.stdout);
    let stats = &run_json(&out)["stats"];
    let (accepted, items) = (
        stats["accepted"].as_u64().unwrap(),
        stats["input_items"].as_u64().unwrap(),
    );
    let percent = 100.0 * accepted as f64 / items as f64;
    let headline = stdout.lines().next().unwrap_or_default();
    assert!(
        headline.starts_with(&format!(
            "accepted {accepted} of {items} questions ({percent:.1} %): "
        )),
        "{stdout}"
    );
    assert!(headline.contains("by the verifier") && headline.contains("by the judge"));
    assert!(
        stdout.contains(&format!("rejected {}", stats["rejected"])),
        "{stdout}"
    );
    assert!(stdout.contains("items/s"), "{stdout}");
    assert!(!stdout.contains("resumed:"), "{stdout}");
    assert!(
        stdout.ends_with(&format!("run report {}\n", out.join("run.json").display())),
        "{stdout}"
    );
    // Not a terminal and no --progress: no JSON lines among the logs, no summary there.
    let stderr = text(&first.stderr);
    assert!(!stderr.contains("\"phase\""), "{stderr}");
    assert!(!stderr.contains("accepted "), "{stderr}");
    assert!(
        !out.join(".verisample.lock").exists(),
        "a clean finish removes its lock file"
    );

    // A rerun replays everything and says so; --progress jsonl puts progress on stderr.
    let again = ok(run(&out, &["--progress", "jsonl"]), "rerun");
    let stdout = text(&again.stdout);
    let replayed = run_json(&out)["replayed_results"].as_u64().unwrap();
    assert!(
        stdout.contains(&format!(
            "resumed: {replayed} of {replayed} generations replayed from the journal"
        )),
        "{stdout}"
    );
    assert!(text(&again.stderr).contains("\"phase\":\"write\""));

    // -q: the one line naming where the splits are.
    let quiet = ok(run(&out, &["-q"]), "quiet rerun");
    assert_eq!(
        text(&quiet.stdout),
        format!(
            "splits in {}, dataset card {}, run report {}\n",
            out.join("data").display(),
            out.join("README.md").display(),
            out.join("run.json").display()
        )
    );

    // --json: one JSON object with the same counts as run.json.
    let json = ok(run(&out, &["--json"]), "json rerun");
    let stdout = text(&json.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["accepted"].as_u64(), Some(accepted));
    assert_eq!(v["questions"].as_u64(), Some(items));
    assert_eq!(
        v["accepted_by_verifier"].as_u64().unwrap() + v["accepted_by_judge"].as_u64().unwrap(),
        accepted
    );

    // A rerun with another setting: one sentence naming it in words, hashes only with -v.
    let refused = run(&out, &["--think", "off"]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        error_line(&refused),
        format!(
            "error: {} holds the output of a different run (--think changed: on → off); rerun with --restart to replace that output, or choose another --out",
            out.display()
        )
    );
    assert!(
        !has_hash(&text(&refused.stderr)),
        "{}",
        text(&refused.stderr)
    );
    let verbose = run(&out, &["--think", "off", "-v"]);
    assert_eq!(verbose.status.code(), Some(1));
    assert!(
        has_hash(&text(&verbose.stderr)),
        "{}",
        text(&verbose.stderr)
    );
}

#[test]
fn a_resumed_run_says_how_much_came_from_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // Killed with the input spelt as its parent folder, resumed (`run`) as `assets/sample/data`:
    // the same files, so the same run.
    let killed = Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(format!("{}/./sample/", repo().join("assets").display()))
        .arg("--out")
        .arg(&out)
        .args(["--device", "cpu", "--max-new-tokens", "64"])
        .env("VERISAMPLE_TEST_KILL_AT", "generation:5")
        .output()
        .unwrap();
    assert!(!killed.status.success());
    let resumed = ok(run(&out, &[]), "resume");
    let t = &run_json(&out)["stats"]["throughput"];
    let (replayed, generated) = (
        t["replayed_items"].as_u64().unwrap(),
        t["generated_items"].as_u64().unwrap(),
    );
    assert!(replayed >= 5 && generated > 0, "{t}");
    assert!(
        text(&resumed.stdout).contains(&format!(
            "resumed: {replayed} of {} generations replayed from the journal",
            replayed + generated
        )),
        "{}",
        text(&resumed.stdout)
    );
    assert!(!out.join(".verisample.lock").exists());
}

#[test]
fn a_users_own_folder_is_never_overwritten_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("README.md"), "my notes").unwrap();
    std::fs::write(mine.join("run.json"), "{\"mine\": true}").unwrap();
    let refused = run(&mine, &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let line = error_line(&refused);
    assert!(
        line.contains("(README.md, run.json)") && line.contains("--force"),
        "{line}"
    );
    // The refusal and `--force`'s help name every file a run writes, not only three.
    let help = text(
        &Command::new(BIN)
            .args(["run", "--help"])
            .output()
            .unwrap()
            .stdout,
    );
    for name in [
        "errors.jsonl",
        "cleaning.jsonl",
        "generations.jsonl",
        "chart.svg",
        "journal.bin",
        ".verisample.lock",
        "data/",
    ] {
        assert!(line.contains(name), "{name} not in: {line}");
        assert!(help.contains(name), "{name} not in run --help:\n{help}");
    }
    assert_eq!(
        std::fs::read_to_string(mine.join("README.md")).unwrap(),
        "my notes"
    );
    assert_eq!(
        std::fs::read_dir(&mine).unwrap().count(),
        2,
        "nothing added"
    );
    ok(run(&mine, &["--force", "-q"]), "run with --force");
    assert!(std::fs::read_to_string(mine.join("README.md"))
        .unwrap()
        .contains("OrandCar"));
}

#[test]
fn bad_output_folders_are_settings_errors_before_the_model_loads() {
    let tmp = tempfile::tempdir().unwrap();
    // The input inside the output: the next run would re-ingest its own splits.
    let x = tmp.path().join("x");
    let data = x.join("data");
    std::fs::create_dir_all(&data).unwrap();
    for f in std::fs::read_dir(repo().join("assets/sample/data")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), data.join(f.file_name())).unwrap();
    }
    let inside = Command::new(BIN)
        .arg("run")
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&x)
        .args(["--device", "cpu", "--force"])
        .output()
        .unwrap();
    assert_eq!(inside.status.code(), Some(2));
    assert!(
        error_line(&inside).contains("holds the input dataset folder"),
        "{}",
        error_line(&inside)
    );
    // --out is a file, or lies under one.
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    for (out, want) in [
        (file.clone(), "exists and is not a folder"),
        (file.join("out"), "is a file"),
    ] {
        let r = run(&out, &[]);
        assert_eq!(r.status.code(), Some(2), "{out:?}");
        assert!(error_line(&r).contains(want), "{}", error_line(&r));
    }
    // A read-only folder (meaningless as root, who writes anyway).
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), "").is_err() {
        let r = run(&ro.join("out"), &[]);
        assert_eq!(r.status.code(), Some(2));
        assert!(
            error_line(&r).contains("is not writable"),
            "{}",
            error_line(&r)
        );
    } else {
        println!("note: running as root, the read-only check is skipped");
    }
}

#[test]
fn a_run_into_a_folder_another_live_run_holds_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Held as the running process holds it: the OS lock on `OUT/.verisample.lock`.
    let lock = std::fs::File::create(out.join(".verisample.lock")).unwrap();
    lock.try_lock().unwrap();
    let busy = run(&out, &[]);
    assert_eq!(busy.status.code(), Some(2), "{}", text(&busy.stderr));
    assert_eq!(
        error_line(&busy),
        format!(
            "error: another verisample process is running in {} (it holds {}); wait for it to finish or use another --out",
            out.display(),
            out.join(".verisample.lock").display()
        )
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [".verisample.lock"], "the refused run wrote in OUT");
}

#[test]
fn a_failed_start_leaves_nothing_that_blocks_the_corrected_command() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let failed = run(&out, &["--kv-cache-gib", "100000"]);
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed.stderr));
    assert!(!out.exists(), "the failed start left {out:?} behind");
    // A bad model into an existing, empty folder: the folder stays, empty.
    std::fs::create_dir(&out).unwrap();
    let run_model = |model: &Path| {
        Command::new(BIN)
            .arg("run")
            .arg("--model")
            .arg(model)
            .arg("--data")
            .arg(repo().join("assets/sample/data"))
            .arg("--out")
            .arg(&out)
            .args(["--device", "cpu"])
            .output()
            .unwrap()
    };
    let model = tmp.path().join("broken");
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    let failed = run_model(&model);
    // A model folder that cannot be loaded is the `--model` argument's problem: exit 2.
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed.stderr));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    // So is every other file of it: a damaged tokenizer, named.
    let damaged = tmp.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for e in std::fs::read_dir(repo().join("assets/model")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, damaged.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(damaged.join("tokenizer.json"), "{").unwrap();
    let failed = run_model(&damaged);
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed.stderr));
    assert!(
        error_line(&failed).contains("tokenizer.json"),
        "{}",
        text(&failed.stderr)
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    ok(run(&out, &["-q"]), "the corrected command");
}

/// Every file under `dir` (relative path → bytes).
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                files.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    files
}

#[test]
fn a_restart_whose_model_does_not_load_keeps_the_earlier_output_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    ok(run(&out, &["-q"]), "first run");
    let before = tree(&out);
    assert!(
        before.contains_key(Path::new("run.json")) && before.len() > 4,
        "{before:?}"
    );
    let failed = run(&out, &["-q", "--restart", "--kv-cache-gib", "100000"]);
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed.stderr));
    assert_eq!(
        tree(&out),
        before,
        "a restart that failed at model load changed the earlier output"
    );
    // The earlier output is still this command's run: resumed whole, not refused as foreign.
    let resumed = ok(run(&out, &[]), "the same command again");
    assert_eq!(
        run_json(&out)["stats"]["throughput"]["generated_items"].as_u64(),
        Some(0),
        "{}",
        text(&resumed.stdout)
    );
    ok(run(&out, &["-q", "--restart"]), "the corrected restart");
}

#[test]
fn negative_numbers_get_the_settings_message_not_a_parser_puzzle() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    for (flag, want) in [
        (
            "--kv-cache-gib",
            "invalid --kv-cache-gib -1: must be a positive number of GiB",
        ),
        (
            "--repetition-penalty",
            "invalid --repetition-penalty -1: must be a positive number",
        ),
        ("--max-batch", "invalid value '-1' for '--max-batch <N>'"),
    ] {
        let r = run(&out, &[flag, "-1"]);
        assert_eq!(r.status.code(), Some(2), "{flag}: {}", text(&r.stderr));
        assert!(
            error_line(&r).starts_with(&format!("error: {want}")),
            "{flag}: {}",
            text(&r.stderr)
        );
    }
    assert!(!out.exists());
}

#[test]
fn an_input_of_which_nothing_reads_names_the_errors_file_and_leaves_no_card() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("train-00000-of-00001.parquet"), b"not parquet").unwrap();
    let out = tmp.path().join("out");
    let r = Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .args(["--device", "cpu"])
        .output()
        .unwrap();
    assert!(!r.status.success());
    let errors = out.join("errors.jsonl");
    assert!(
        error_line(&r).contains(&errors.display().to_string()),
        "{}",
        text(&r.stderr)
    );
    assert!(std::fs::read_to_string(&errors)
        .unwrap()
        .contains("train-00000-of-00001.parquet"));
    for gone in ["README.md", "chart.svg"] {
        assert!(
            !out.join(gone).exists(),
            "{gone} written for a run without a dataset"
        );
    }
}

#[test]
fn a_hub_id_not_in_the_cache_says_how_to_fetch_it_and_config_paths_take_tilde() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = Command::new(BIN)
        .args(["run", "--model", "Qwen/Not-Here-2B", "--device", "cpu"])
        .arg("--out")
        .arg(tmp.path().join("o"))
        .env("HF_HUB_CACHE", tmp.path().join("hub"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let line = error_line(&missing);
    assert!(
        line.contains("verisample never downloads")
            && line.contains("hf download Qwen/Not-Here-2B")
            && line.contains("--model Qwen/Not-Here-2B"),
        "{line}"
    );
    // `~/` in the config file is the home folder; `think = false` is a switch.
    let config = tmp.path().join("job.toml");
    std::fs::write(&config, "model = \"~/no-model\"\nthink = false\n").unwrap();
    let r = Command::new(BIN)
        .args(["run", "--device", "cpu", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    let line = error_line(&r);
    let expanded = tmp.path().join("no-model");
    assert!(
        line.contains(&format!("looked in: {}", expanded.display())),
        "{line}"
    );
}

#[test]
fn merge_from_another_folder_reads_the_file_the_shards_read_not_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let data = work.join("ds");
    std::fs::create_dir_all(&data).unwrap();
    let sample = repo().join("assets/sample/data/train-00000-of-00001.parquet");
    std::fs::copy(&sample, data.join("train.parquet")).unwrap();
    // A sibling the shards do not read: the merge must not read it either.
    std::fs::copy(&sample, data.join("test.parquet")).unwrap();
    let run_in = |dir: &Path, args: &[&str]| {
        Command::new(BIN)
            .current_dir(dir)
            .args(args)
            .args(["--progress", "none"])
            .env_remove("VERISAMPLE_TEST_KILL_AT")
            .output()
            .unwrap()
    };
    let model = repo().join("assets/model");
    for shard in ["0/2", "1/2"] {
        let out = format!("shard{}", &shard[..1]);
        let args = [
            "run",
            "--model",
            model.to_str().unwrap(),
            "--data",
            "ds/train.parquet",
            "--shard",
            shard,
            "--out",
            &out,
            "--device",
            "cpu",
            "--max-new-tokens",
            "64",
            "-q",
        ];
        ok(run_in(&work, &args), shard);
    }
    // Into an OUT another live process holds: refused before anything runs, exit 2 as `run`.
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    let lock = std::fs::File::create(busy.join(".verisample.lock")).unwrap();
    lock.try_lock().unwrap();
    let args = ["merge", "work/shard0", "work/shard1", "--out", "busy"];
    let refused = run_in(tmp.path(), &args);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(error_line(&refused).contains("another verisample process is running"));
    // From the parent folder, without --data: `ds/train.parquet` does not resolve there.
    let merged = ok(
        run_in(
            tmp.path(),
            &["merge", "work/shard0", "work/shard1", "--out", "merged"],
        ),
        "merge from another folder",
    );
    let report = run_json(&tmp.path().join("merged"));
    // Its generations came from the shards' journals: said so, not as a resume.
    let stdout = text(&merged.stdout);
    let taken = report["stats"]["throughput"]["replayed_items"]
        .as_u64()
        .unwrap();
    assert!(taken > 0, "{report}");
    assert!(
        stdout.contains(&format!("\nmerged: {taken} generations from 2 shards\n")),
        "{stdout}"
    );
    assert!(!stdout.contains("resumed"), "{stdout}");
    assert_eq!(
        report["fingerprint"]["input_files"][0][0].as_str(),
        Some("train.parquet"),
        "{}",
        text(&merged.stderr)
    );
    assert_eq!(
        report["fingerprint"]["input_files"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// The split files in `out/data/`, sorted by name.
fn data_files(out: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(out.join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_resume_keeps_a_users_split_named_file_and_a_restart_removes_only_its_own_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fa");
    ok(run(&out, &["--family", "Other", "-q"]), "first run");
    let ours = data_files(&out);
    assert!(
        !ours.is_empty() && ours.iter().all(|n| n.starts_with("Other_")),
        "{ours:?}"
    );
    // A file of the user's own, named like a split of a family this folder never held.
    let mine = out.join("data/Mine_RS_think-00000-of-00001.parquet");
    std::fs::copy(out.join("data").join(&ours[0]), &mine).unwrap();
    let resumed = ok(run(&out, &["--family", "Other"]), "same command again");
    assert!(mine.exists(), "the user's file was removed");
    let stderr = text(&resumed.stderr);
    assert!(
        stderr.contains("Mine_RS_think-00000-of-00001.parquet")
            && stderr.contains("did not write it")
            && !stderr.contains("split Mine_RS_think of an earlier run"),
        "{stderr}"
    );
    // A third run: the card now lists the user's file, which still is not ours to remove.
    ok(run(&out, &["--family", "Other", "-q"]), "third run");
    assert!(
        mine.exists(),
        "the user's file was removed by the third run"
    );
    // Another family with --restart: the earlier run's splits go, the user's file stays.
    ok(
        run(&out, &["--family", "Another", "--restart", "-q"]),
        "restart as another family",
    );
    let now = data_files(&out);
    assert!(!now.iter().any(|n| n.starts_with("Other_")), "{now:?}");
    assert!(now.iter().any(|n| n.starts_with("Another_")), "{now:?}");
    assert!(mine.exists(), "the user's file was removed by --restart");
}

#[test]
fn verify_with_a_split_file_deleted_does_not_say_ok() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    ok(run(&out, &["-q"]), "run");
    let files = data_files(&out);
    assert!(files.len() >= 2, "{files:?}");
    std::fs::remove_file(out.join("data").join(files.last().unwrap())).unwrap();
    let verified = Command::new(BIN).arg("verify").arg(&out).output().unwrap();
    assert_eq!(
        verified.status.code(),
        Some(1),
        "{}",
        text(&verified.stderr)
    );
    let stdout = text(&verified.stdout);
    assert!(
        stdout.contains("MISMATCH") && !stdout.contains("OK: every decision recomputes"),
        "{stdout}"
    );
    assert!(stdout.contains("MISMATCH line(s) above"), "{stdout}");
    // The final count names both kinds, as the report above lists them.
    let mismatches = stdout
        .lines()
        .filter(|l| l.starts_with("MISMATCH "))
        .count();
    assert!(
        error_line(&verified).ends_with(&format!(
            "decision disagreement(s) and {mismatches} MISMATCH line(s) (counts and split file contents against run.json, answers of generations.jsonl in no split)"
        )),
        "{}",
        text(&verified.stderr)
    );
}

#[test]
fn an_empty_shard_does_not_name_splits_or_a_card_it_did_not_write() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o-48");
    // The sample's 48 rows go to shards 0..47 of 49 (row i to shard i % 49): shard 48 is empty.
    let empty = ok(run(&out, &["--shard", "48/49"]), "empty shard");
    let stdout = text(&empty.stdout);
    assert!(
        stdout.contains("no split written") && !stdout.contains("dataset card o-48"),
        "{stdout}"
    );
    assert!(!out.join("README.md").exists());
    assert!(!out.join("data").exists() || data_files(&out).is_empty());
}

/// The stderr lines of `out` that are progress JSON objects (`{"phase": …}`).
fn progress_lines(out: &Output) -> Vec<usize> {
    text(&out.stderr)
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.get("phase").is_some())
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn quiet_keeps_an_explicit_jsonl_progress_stream_and_silences_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let asked = ok(
        Command::new(BIN)
            .arg("-q")
            .args(["run", "--progress", "jsonl"])
            .args(["--model", &repo().join("assets/model").to_string_lossy()])
            .args([
                "--data",
                &repo().join("assets/sample/data").to_string_lossy(),
            ])
            .args(["--out", &out.to_string_lossy()])
            .args(["--device", "cpu", "--max-new-tokens", "64"])
            .env_remove("RUST_LOG")
            .output()
            .unwrap(),
        "run -q --progress jsonl",
    );
    assert!(
        !progress_lines(&asked).is_empty(),
        "stderr:\n{}",
        text(&asked.stderr)
    );
    // stdout stays quiet: only where the splits are.
    assert_eq!(
        text(&asked.stdout).lines().count(),
        1,
        "{}",
        text(&asked.stdout)
    );
    let silent = ok(run(&out, &["-q"]), "rerun -q");
    assert!(
        progress_lines(&silent).is_empty(),
        "{}",
        text(&silent.stderr)
    );
}

#[test]
fn a_verifier_for_a_family_the_input_lacks_is_warned_about_before_generating() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let done = ok(
        run(&out, &["--verifier", "Orand=exact", "--progress", "jsonl"]),
        "run",
    );
    let stderr = text(&done.stderr);
    let warning = stderr
        .lines()
        .position(|l| l.contains("--verifier Orand=exact: no row of the input is of family Orand"))
        .unwrap_or_else(|| panic!("no warning:\n{stderr}"));
    let line = stderr.lines().nth(warning).unwrap();
    assert!(line.contains("its families: OrandCar"), "{line}");
    // Before the first progress line of the generate phase: nothing was generated yet.
    let first_progress = progress_lines(&done)[0];
    assert!(warning < first_progress, "{stderr}");
    assert_eq!(
        stderr.matches("--verifier Orand=exact").count(),
        1,
        "{stderr}"
    );
}
