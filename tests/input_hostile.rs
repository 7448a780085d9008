//! Inputs that try to escape, lie or repeat, and the debris of a crash. `run`
//! through the real parquet reader, decisions and split writer, with the scripted model of
//! `pipeline_support` standing in for the VLM.
//!
//! - links: a link out of the dataset folder is not read (an error naming it), a loop or a
//!   second path to the same file reads it once (items 1, 2); `prepare --images` keeps to the
//!   images folder too;
//! - a stored `image_sha256` that is not the hash of the bytes is a cleaning drop (item 3);
//! - the same image, question and reference again is dropped as a duplicate naming the kept
//!   row, unless `--dedup off` (item 4);
//! - temporary files of a killed run are removed on the rerun (item 5);
//! - without a readable journal, an earlier run with other settings is refused (item 6).

mod dataset_util;
mod pipeline_support;

use std::path::{Path, PathBuf};

use dataset_util::{write_input, InputSpec};
use pipeline_support::{model_files, png, settings, ScriptedModel};
use verisample::dataset::reader::InputReader;
use verisample::pipeline::outputs::{CleaningLine, ErrorLine};
use verisample::pipeline::{
    prepare as prepare_run, run, Backends, ParquetSink, ParquetSource, PipelineError, RunControl,
    RunReport, StandardDecisions,
};
use verisample::settings::{fingerprint, Settings};
use verisample::shard::Shard;

/// A question the scripted model answers with `n` and whose reference is `n`.
fn q(n: u32) -> (String, String) {
    (
        format!("What is written in the image? [say:{n}]"),
        n.to_string(),
    )
}

fn spec(seed: u8, qa: &[(String, String)]) -> InputSpec {
    let pairs: Vec<(&str, &str)> = qa.iter().map(|(q, a)| (q.as_str(), a.as_str())).collect();
    InputSpec::new(png(seed), &pairs)
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

fn lines<T: serde::de::DeserializeOwned>(path: PathBuf) -> Vec<T> {
    std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[cfg(unix)]
#[test]
fn links_out_of_the_folder_are_refused_and_loops_read_each_file_once() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(ds.join("data")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    write_input(
        &ds.join("data/train.parquet"),
        &[spec(1, &[q(11)]), spec(2, &[q(12)])],
        10,
    );
    write_input(&outside.join("secret.parquet"), &[spec(3, &[q(13)])], 10);
    symlink(&ds, ds.join("loop")).unwrap();
    symlink("..", ds.join("data/up")).unwrap();
    symlink(&outside, ds.join("ext")).unwrap();
    symlink(outside.join("secret.parquet"), ds.join("data/leak.parquet")).unwrap();
    symlink(ds.join("data/train.parquet"), ds.join("again.parquet")).unwrap();

    let started = std::time::Instant::now();
    let files = verisample::dataset::reader::resolve_inputs(&ds.to_string_lossy()).unwrap();
    assert!(
        started.elapsed().as_secs() < 5,
        "scan took {:?}",
        started.elapsed()
    );
    assert_eq!(files.files, vec![ds.join("data/train.parquet")]);
    let refused: Vec<PathBuf> = files.refused.iter().map(|r| r.link.clone()).collect();
    assert_eq!(refused, vec![ds.join("data/leak.parquet"), ds.join("ext")]);

    let out = tmp.path().join("out");
    let report = run_with(&settings_for(&ds, &out)).expect("run");
    assert_eq!(report.stats.input_items, 2, "{:?}", report.stats);
    assert_eq!(report.stats.accepted, 2);
    let errors: Vec<ErrorLine> = lines(out.join("errors.jsonl"));
    let named: Vec<&str> = errors.iter().map(|e| e.file.as_str()).collect();
    assert_eq!(
        named,
        vec![
            ds.join("data/leak.parquet").to_str().unwrap(),
            ds.join("ext").to_str().unwrap()
        ]
    );
    assert!(errors
        .iter()
        .all(|e| e.field == "file" && e.message.contains("outside")));
    let shown =
        verisample::dataset::inspect::inspect(&ds.to_string_lossy(), 0, &|_| Ok((1, 1))).unwrap();
    assert!(shown.text.contains("1 parquet file(s)"), "{}", shown.text);
    assert_eq!(shown.text.matches("NOT READ").count(), 2, "{}", shown.text);
    let stream: Vec<_> = InputReader::open(&ds.to_string_lossy()).unwrap().collect();
    assert_eq!(
        stream.iter().filter(|r| r.is_ok()).count(),
        2,
        "each row once"
    );

    // A file given by name that is a link out of its folder is refused as well.
    let named_link = verisample::dataset::reader::resolve_inputs(
        &ds.join("data/leak.parquet").to_string_lossy(),
    );
    assert!(named_link
        .unwrap_err()
        .to_string()
        .contains("outside its folder"));
}

#[cfg(unix)]
#[test]
fn prepare_images_refuses_a_link_out_of_the_images_folder() {
    use verisample::dataset::prepare::{prepare, PrepareOptions, PrepareSource};
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::write(images.join("a.png"), png(1)).unwrap();
    std::fs::write(tmp.path().join("secret.png"), png(2)).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("secret.png"), images.join("b.png")).unwrap();
    let labels = tmp.path().join("labels.jsonl");
    let run_prepare = |lines: &str| {
        std::fs::write(&labels, lines).unwrap();
        prepare(
            &PrepareOptions {
                source: PrepareSource::Labels {
                    labels: labels.clone(),
                    images: images.clone(),
                    question: "q".into(),
                    split_filter: None,
                },
                family: None,
                out: tmp.path().join("prepared"),
                split: "train".into(),
                shard: Default::default(),
                images_root: None,
            },
            &|_, qa, _| Ok(vec![None; qa.len()]),
        )
    };
    let e =
        run_prepare("{\"file\":\"a.png\",\"label\":\"1\"}\n{\"file\":\"b.png\",\"label\":\"2\"}\n")
            .unwrap_err();
    assert!(e.to_string().contains("escapes"), "{e}");
    // A missing file outside says the same as an existing one: nothing about what exists.
    let missing = run_prepare("{\"file\":\"../nothing.png\",\"label\":\"1\"}\n").unwrap_err();
    let existing = run_prepare("{\"file\":\"../secret.png\",\"label\":\"1\"}\n").unwrap_err();
    assert!(missing.to_string().contains("escapes"), "{missing}");
    assert!(existing.to_string().contains("escapes"), "{existing}");
}

#[test]
fn a_wrong_image_sha256_is_a_cleaning_drop_not_a_rewrite() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    let mut liar = spec(2, &[q(21), q(22)]);
    liar.sha = Some(verisample::dataset::writer::sha256_hex(&png(3)));
    let mut upper = spec(4, &[q(41)]);
    upper.sha = upper.sha.map(|s| s.to_uppercase());
    let mut absent = spec(5, &[q(51)]);
    absent.sha = None;
    write_input(
        &ds.join("train.parquet"),
        &[spec(1, &[q(11)]), liar, upper, absent],
        10,
    );
    let out = tmp.path().join("out");
    let report = run_with(&settings_for(&ds, &out)).expect("run");
    assert_eq!(report.stats.accepted, 3, "{:?}", report.stats);
    assert_eq!(
        report.stats.cleaning_drops.get("image_sha256_mismatch"),
        Some(&2)
    );
    let cleaning: Vec<CleaningLine> = lines(out.join("cleaning.jsonl"));
    let dropped: Vec<(usize, u32, &str)> = cleaning
        .iter()
        .map(|c| (c.row, c.qa, c.reason.as_str()))
        .collect();
    assert_eq!(
        dropped,
        vec![
            (1, 0, "image_sha256_mismatch"),
            (1, 1, "image_sha256_mismatch")
        ]
    );
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run_json["stats"]["cleaning_drops"]["image_sha256_mismatch"],
        2
    );
}

#[test]
fn duplicates_are_sampled_once_and_dedup_off_keeps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    let other_question = (q(7).0.replace("image?", "picture?"), "7".to_string());
    write_input(
        &ds.join("train.parquet"),
        &[
            spec(1, &[q(7)]),
            spec(1, &[q(7), other_question.clone()]),
            spec(2, &[q(7)]),
            spec(1, &[q(7)]),
            spec(1, &[q(7)]),
        ],
        10,
    );
    let out = tmp.path().join("out");
    let report = run_with(&settings_for(&ds, &out)).expect("run");
    // Kept: row 0, the other question of row 1, and the other image (row 2).
    assert_eq!(report.stats.accepted, 3, "{:?}", report.stats);
    assert_eq!(report.stats.cleaning_drops.get("duplicate"), Some(&3));
    let cleaning: Vec<CleaningLine> = lines(out.join("cleaning.jsonl"));
    let dups: Vec<(usize, u32, usize, u32)> = cleaning
        .iter()
        .map(|c| {
            let kept = c.duplicate_of.as_ref().expect("names the kept row");
            assert_eq!(c.reason, "duplicate");
            assert!(kept.file.ends_with("train.parquet"));
            (c.row, c.qa, kept.row, kept.qa)
        })
        .collect();
    assert_eq!(dups, vec![(1, 0, 0, 0), (3, 0, 0, 0), (4, 0, 0, 0)]);
    // Each split row's `clean_meta.cleaning.kept_from` names exactly the input items it holds:
    // row 1 holds only its item 1 (item 0 went to cleaning as a duplicate) — issue 45 item 6.
    let nothink = verisample::dataset::writer::read_accepted_split(
        &out.join("data/TestSet_RS_nothink-*.parquet"),
    )
    .unwrap();
    let kept: Vec<(u64, serde_json::Value)> = nothink
        .iter()
        .map(|r| {
            let meta: serde_json::Value = serde_json::from_str(&r.clean_meta).unwrap();
            (
                meta["row_index"].as_u64().unwrap(),
                meta["cleaning"]["kept_from"].clone(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            (0, serde_json::json!([0])),
            (1, serde_json::json!([1])),
            (2, serde_json::json!([0]))
        ]
    );

    let mut keep_all = settings_for(&ds, &tmp.path().join("out-all"));
    keep_all.dedup = false;
    assert_ne!(
        fingerprint(keep_all.canonical(), model_files(), Vec::new()).sha256,
        fingerprint(
            settings_for(&ds, &out).canonical(),
            model_files(),
            Vec::new()
        )
        .sha256,
        "--dedup is part of the fingerprint"
    );
    let report = run_with(&keep_all).expect("run --dedup off");
    assert_eq!(report.stats.accepted, 6);
    assert!(report.stats.cleaning_drops.is_empty());
}

#[test]
fn the_rerun_removes_the_temporary_files_of_a_killed_run() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    write_input(&ds.join("train.parquet"), &[spec(1, &[q(11)])], 10);
    let clean = tmp.path().join("clean");
    run_with(&settings_for(&ds, &clean)).expect("run");
    let listing = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = ["", "data"]
            .iter()
            .flat_map(|sub| std::fs::read_dir(dir.join(sub)).unwrap())
            .map(|e| e.unwrap().path())
            .map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    // A pid above the kernel's pid_max: no live process has it.
    let dead = 4_194_305 + std::process::id() % 1000;
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join("data")).unwrap();
    let debris = [
        format!(".run.json.tmp-{dead}-3"),
        format!("data/..TestSet_RS_think-00000.staged-{dead}.tmp-{dead}-5"),
        format!("data/.TestSet_RS_think-00000.staged-{dead}"),
        format!(".chart.tmp-{dead}.png"),
    ];
    for d in &debris {
        std::fs::write(out.join(d), b"half").unwrap();
    }
    std::fs::write(out.join("data/notes.txt"), b"mine").unwrap();
    run_with(&settings_for(&ds, &out)).expect("rerun");
    let mut want = listing(&clean);
    want.push("data/notes.txt".into());
    want.sort();
    assert_eq!(
        listing(&out),
        want,
        "file for file, the user's own file kept"
    );
}

#[test]
fn without_a_readable_journal_other_settings_are_refused_unless_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    write_input(&ds.join("train.parquet"), &[spec(1, &[q(11)])], 10);
    let out = tmp.path().join("out");
    let first = settings_for(&ds, &out);
    run_with(&first).expect("run");
    let split = out.join("data/TestSet_RS_think-00000-of-00001.parquet");
    let before = std::fs::read(&split).unwrap();
    let mut other = first.clone();
    other.think = false;
    for damage in ["missing", "corrupt header"] {
        let journal = out.join("journal.bin");
        if damage == "missing" {
            std::fs::remove_file(&journal).unwrap();
        } else {
            std::fs::write(&journal, b"\x10\0\0\0garbage-garbage-garbage").unwrap();
        }
        let err = run_with(&other).unwrap_err();
        assert!(
            matches!(&err, PipelineError::FingerprintMismatch { changed, .. } if changed.iter().any(|c| c.starts_with("--think changed"))),
            "{damage}: {err}"
        );
        assert_eq!(
            std::fs::read(&split).unwrap(),
            before,
            "{damage}: splits kept"
        );
    }
    // Without run.json either, the splits cannot be checked: refused too, and the refused
    // run leaves no journal behind (one would make the folder look like a run of ours).
    std::fs::remove_file(out.join("run.json")).unwrap();
    let err = run_with(&other).unwrap_err();
    assert!(
        matches!(err, PipelineError::UncheckedEarlierRun(_)),
        "{err}"
    );
    std::fs::remove_file(out.join("journal.bin")).unwrap();
    let err = run_with(&other).unwrap_err();
    assert!(
        matches!(err, PipelineError::UncheckedEarlierRun(_)),
        "{err}"
    );
    assert!(
        !out.join("journal.bin").exists(),
        "a refused run made a journal"
    );
    // The same settings resume; --restart replaces.
    let mut restart = other.clone();
    restart.restart = true;
    run_with(&restart).expect("restart");
    assert!(!out
        .join("data/TestSet_RS_think-00000-of-00001.parquet")
        .exists());
}

#[test]
fn errors_by_field_uses_the_field_names_of_errors_jsonl() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    let blank = (q(9).0, "  ".to_string());
    write_input(
        &ds.join("train.parquet"),
        &[spec(1, &[q(11), blank.clone()]), spec(2, &[blank])],
        10,
    );
    let out = tmp.path().join("out");
    let report = run_with(&settings_for(&ds, &out)).expect("run");
    let errors: Vec<ErrorLine> = lines(out.join("errors.jsonl"));
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, vec!["qa[1].answer", "qa[0].answer"]);
    let by_field: Vec<(&str, u64)> = report
        .stats
        .errors_by_field
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(by_field, vec![("qa[0].answer", 1), ("qa[1].answer", 1)]);
}
