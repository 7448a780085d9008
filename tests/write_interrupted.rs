//! A write phase that fails between the first and the last split it publishes: `run` through
//! the real parquet reader, decisions and split writer, with the scripted model of
//! `pipeline_support` standing in for the VLM.
//!
//! Until the final `run.json` is written, OUT may mix the new run's split files with an
//! earlier run's: `run.json` says so (status `writing`, naming the files of both), `merge`
//! refuses such a folder, and a rerun replays the journal (generating nothing) and writes
//! what a fresh run writes.

mod dataset_util;
mod pipeline_support;

use std::collections::BTreeMap;
use std::path::Path;

use dataset_util::{write_input, InputSpec};
use pipeline_support::{
    assert_same_outputs, deterministic_outputs, model_files, png, settings, ScriptedModel,
};
use verisample::merge::{prepare_merge, MergeError, MergeOptions};
use verisample::pipeline::{
    prepare as prepare_run, run, Backends, ParquetSink, ParquetSource, PipelineError, RunControl,
    RunReport, StandardDecisions,
};
use verisample::settings::{fingerprint, Settings};
use verisample::shard::Shard;

/// A row whose question the scripted model answers with `n`, the reference: accepted.
fn spec(seed: u8, n: u32) -> InputSpec {
    let question = format!("What is written in the image? [say:{n}]");
    InputSpec::new(png(seed), &[(question.as_str(), n.to_string().as_str())])
}

fn settings_for(data: &Path, out: &Path, limit: Option<usize>) -> Settings {
    let mut s = settings(out, Shard::WHOLE);
    s.data = data.to_path_buf();
    s.limit = limit;
    s
}

/// Run `s`; returns the report and the generations the model made.
fn run_with(s: &Settings) -> Result<(RunReport, usize), PipelineError> {
    let prepared = prepare_run(s, fingerprint(s.canonical(), model_files(), Vec::new()))?;
    let mut model = ScriptedModel::new();
    let report = run(
        prepared,
        Backends {
            source: &ParquetSource::new(&s.data),
            generator: &mut model,
            decisions: &StandardDecisions::default(),
            sink: &mut ParquetSink::new(&s.out),
        },
        &RunControl::default(),
    )?;
    Ok((report, model.completed))
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap()
}

/// What a reader of OUT sees: the split files, the JSONL files and the card.
fn outputs(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = deterministic_outputs(out);
    files.insert(
        "README.md".into(),
        std::fs::read(out.join("README.md")).unwrap(),
    );
    files
}

fn rows_of(path: &Path) -> u64 {
    verisample::dataset::card::shard_row_count(path).unwrap()
}

#[test]
fn a_write_phase_failing_between_two_splits_leaves_no_complete_run_json_and_a_rerun_repairs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    write_input(&ds.join("train.parquet"), &[spec(1, 11), spec(2, 12)], 10);
    let out = tmp.path().join("out");

    // A first run of one row: two splits (think, nothink) of one row each, complete.
    let (first, _) = run_with(&settings_for(&ds, &out, Some(1))).expect("first run");
    assert_eq!(first.status, "complete");
    let files: Vec<(String, String)> = first
        .stats
        .split_files
        .iter()
        .map(|(split, names)| (split.clone(), names[0].clone()))
        .collect();
    // By name, nothink comes first; the writer publishes think first.
    let [(nothink, nothink_file), (think, think_file)] = &files[..] else {
        panic!("two splits expected: {files:?}");
    };
    assert!(think.ends_with("_RS_think") && nothink.ends_with("_RS_nothink"));
    let data = out.join("data");
    assert_eq!(rows_of(&data.join(think_file)), 1);

    // The think split is published first, then the nothink split, whose earlier file can no
    // longer be removed (a folder of that name stands for a disk that fails mid-way).
    std::fs::remove_file(data.join(nothink_file)).unwrap();
    std::fs::create_dir(data.join(nothink_file)).unwrap();
    std::fs::write(data.join(nothink_file).join("x"), b"x").unwrap();
    let all = settings_for(&ds, &out, None);
    let err = run_with(&all).expect_err("the nothink split cannot be published");
    assert!(matches!(err, PipelineError::Sink(_)), "{err}");

    // OUT now mixes the runs: the new think split (two rows) beside the old nothink one; the
    // run.json says the outputs were being replaced, and names the files of both runs.
    assert_eq!(
        rows_of(&data.join(think_file)),
        2,
        "the think split is the new run's"
    );
    let marker = run_json(&out);
    assert_eq!(marker["status"], "writing", "{marker:#}");
    assert_eq!(
        marker["stats"]["split_files"],
        serde_json::json!({ think: [think_file], nothink: [nothink_file] })
    );
    // Nothing that trusts a finished run trusts it: merge refuses it (exit 2 at the CLI).
    let merge = prepare_merge(&MergeOptions {
        shards: vec![out.clone()],
        out: tmp.path().join("merged"),
        data: None,
        force: false,
        restart: false,
        progress: None,
        quiet: true,
    });
    assert!(
        matches!(&merge, Err(MergeError::Unfinished(p)) if p == &out),
        "{:?}",
        merge.err()
    );

    // Nor does verify, which would compare the mixed splits against the new counts.
    let verify = dataset_util::bin()
        .arg("verify")
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert_eq!(verify.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unfinished run (run.json status `writing`"),
        "{stderr}"
    );

    // inspect shows the folder, with a note that it mixes two runs.
    let inspect = dataset_util::bin()
        .arg("inspect")
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&inspect.stderr);
    assert!(stderr.contains("run.json status `writing`"), "{stderr}");

    // Once the disk works again, the same command finishes the run from its journal.
    std::fs::remove_dir_all(data.join(nothink_file)).unwrap();
    let (rerun, generated) = run_with(&all).expect("rerun");
    assert_eq!(generated, 0, "the rerun replays the journal");
    assert_eq!(rerun.status, "complete");
    assert_eq!(run_json(&out)["status"], "complete");

    // Byte for byte what a fresh run writes.
    let fresh_out = tmp.path().join("fresh");
    let (fresh, _) = run_with(&settings_for(&ds, &fresh_out, None)).expect("fresh run");
    assert_eq!(rerun.stats.split_files, fresh.stats.split_files);
    assert_same_outputs(&outputs(&out), &outputs(&fresh_out));
    assert_eq!(rows_of(&data.join(nothink_file)), 2);
}
