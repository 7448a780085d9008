//! A rerun into an output folder that holds files it did not write: `run` through the real
//! parquet reader, decisions and split writer, with the scripted model of `pipeline_support`
//! standing in for the VLM.
//!
//! - only the shard files that `run.json` records (`stats.split_files`) are replaced; a user's
//!   other shard-numbered file of the same split stays;
//! - a split-named file or folder that the run would keep and that is not parquet is refused
//!   before any work (exit 2), not after every generation.

mod dataset_util;
mod pipeline_support;

use std::path::Path;

use dataset_util::{write_input, InputSpec};
use pipeline_support::{model_files, png, settings, ScriptedModel};
use verisample::pipeline::{
    prepare as prepare_run, run, Backends, ParquetSink, ParquetSource, PipelineError, RunControl,
    RunReport, StandardDecisions,
};
use verisample::settings::{fingerprint, Settings};
use verisample::shard::Shard;

/// A row whose question the scripted model answers with `n`, the reference.
fn spec(seed: u8, n: u32) -> InputSpec {
    let question = format!("What is written in the image? [say:{n}]");
    InputSpec::new(png(seed), &[(question.as_str(), n.to_string().as_str())])
}

fn settings_for(data: &Path, out: &Path) -> Settings {
    let mut s = settings(out, Shard::WHOLE);
    s.data = data.to_path_buf();
    s
}

fn run_with(s: &Settings) -> Result<RunReport, PipelineError> {
    let prepared = prepare_run(s, fingerprint(s.canonical(), model_files(), Vec::new()))?;
    run(
        prepared,
        Backends {
            source: &ParquetSource::new(&s.data),
            generator: &mut ScriptedModel::new(),
            decisions: &StandardDecisions::default(),
            sink: &mut ParquetSink::new(&s.out),
        },
        &RunControl::default(),
    )
}

/// A dataset of two rows, both accepted, and a first run of it into `out`; returns the
/// settings and the name of the first split written.
fn first_run(tmp: &Path) -> (Settings, String) {
    let ds = tmp.join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    write_input(&ds.join("train.parquet"), &[spec(1, 11), spec(2, 12)], 10);
    let s = settings_for(&ds, &tmp.join("out"));
    let report = run_with(&s).expect("first run");
    let split = report.stats.split_rows.keys().next().cloned();
    (s, split.expect("a split written"))
}

/// The files of `split` that `out/run.json` records.
fn recorded_files(out: &Path, split: &str) -> serde_json::Value {
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    report["stats"]["split_files"][split].clone()
}

#[test]
fn a_rerun_replaces_only_the_shards_run_json_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, split) = first_run(tmp.path());
    let data = s.out.join("data");
    let ours = format!("{split}-00000-of-00001.parquet");
    assert_eq!(
        recorded_files(&s.out, &split),
        serde_json::json!([&ours]),
        "run.json records the files written"
    );
    // The user's own shard of the same split, numbered as another cut of it.
    let theirs = data.join(format!("{split}-00003-of-00004.parquet"));
    std::fs::copy(data.join(&ours), &theirs).unwrap();

    let again = run_with(&s).expect("rerun");
    assert!(theirs.exists(), "the user's shard was removed");
    assert!(data.join(&ours).exists());
    assert_eq!(
        again.stats.split_files.get(&split),
        Some(&vec![ours.clone()]),
        "only this run's files are recorded"
    );

    // A run.json of a version that recorded only split names: every shard of the splits it
    // counts is its own, as before.
    let run_json = s.out.join("run.json");
    let mut report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&run_json).unwrap()).unwrap();
    report["stats"]
        .as_object_mut()
        .unwrap()
        .remove("split_files");
    std::fs::write(&run_json, serde_json::to_vec(&report).unwrap()).unwrap();
    run_with(&s).expect("rerun over an older run.json");
    assert!(
        !theirs.exists(),
        "an older run.json's split is the run's own"
    );
}

#[test]
fn a_split_named_file_that_is_not_parquet_is_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, split) = first_run(tmp.path());
    let data = s.out.join("data");
    let journal = std::fs::read(s.out.join("journal.bin")).unwrap();
    // A text file named like a shard of a split no run here wrote, and a folder named like
    // one of this run's split.
    let text = data.join("Mine_RS_think-00000-of-00001.parquet");
    std::fs::write(&text, "my notes\n").unwrap();
    let err = run_with(&s).expect_err("a non-parquet split file");
    assert!(
        matches!(&err, PipelineError::UnusableSplitFile { path, .. } if path == &text),
        "{err}"
    );
    assert_eq!(err.exit_code(), 2);
    assert!(err
        .to_string()
        .contains("Mine_RS_think-00000-of-00001.parquet"));
    assert_eq!(
        std::fs::read(s.out.join("journal.bin")).unwrap(),
        journal,
        "the refused run touched the journal"
    );
    std::fs::remove_file(&text).unwrap();

    let folder = data.join(format!("{split}-00001-of-00002.parquet"));
    std::fs::create_dir(&folder).unwrap();
    let mut restart = s.clone();
    restart.restart = true;
    let err = run_with(&restart).expect_err("a folder named like a shard");
    assert!(
        matches!(&err, PipelineError::UnusableSplitFile { path, problem } if path == &folder && problem == "is not a file"),
        "{err}"
    );
    assert!(
        data.join(format!("{split}-00000-of-00001.parquet"))
            .exists(),
        "a refused --restart discarded the earlier output"
    );
    std::fs::remove_dir(&folder).unwrap();
    run_with(&s).expect("the same run once the folder is gone");
}

/// The `run` binary with the bundled tiny model on the CPU, into `out`.
fn run_binary(data: &Path, out: &Path) -> std::process::Output {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    dataset_util::bin()
        .arg("run")
        .arg("--model")
        .arg(repo.join("assets/model"))
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--max-new-tokens", "4"])
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn the_files_a_rerun_keeps_in_a_split_are_named_in_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    write_input(&ds.join("train.parquet"), &[spec(1, 11), spec(2, 12)], 10);
    let out = tmp.path().join("out");
    let first = run_binary(&ds, &out);
    assert!(first.status.success(), "{first:?}");
    let data = out.join("data");
    let mut names: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let ours = names[0].clone();
    let split = ours.strip_suffix("-00000-of-00001.parquet").unwrap();
    // A shard numbered as another cut of the split, and two files the card's
    // `data/<split>-*` pattern matches without being shards.
    let theirs = format!("{split}-00003-of-00004.parquet");
    let mine = format!("{split}-mine.parquet");
    let backup = format!("{ours}.bak");
    for name in [&theirs, &mine, &backup] {
        std::fs::copy(data.join(&ours), data.join(name)).unwrap();
    }
    let again = run_binary(&ds, &out);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    for name in [&theirs, &mine, &backup] {
        assert!(data.join(name).exists(), "{name} was removed");
    }
    let warned = |needle: &str| {
        stderr
            .lines()
            .any(|l| l.contains(needle) && l.contains("WARN"))
    };
    assert!(
        warned(&format!("keeping {}", data.join(&theirs).display())),
        "{stderr}"
    );
    for name in [&mine, &backup] {
        assert!(
            warned(&format!(
                "{} is not a shard of split {split} but matches the card's data/{split}-* pattern",
                data.join(name).display()
            )),
            "{name}: {stderr}"
        );
    }
}
