//! `run` with test doubles (scripted model, in-memory input, JSON-lines writer): routing and
//! accounting, order independence, resume after interruption (byte-identical), refusal of
//! changed settings (shards and merge: tests/pipeline_shards.rs). The same properties with
//! the real model and the real parquet writer are checked at integration by
//! tests/pipeline_e2e.rs.

mod pipeline_support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sha2::Digest;

use pipeline_support::*;
use verisample::pipeline::{
    prepare, run, Backends, ItemKey, JournalEntry, JournalOutcome, Pass, PipelineError, RunControl,
    RunReport, StandardDecisions,
};
use verisample::settings::{fingerprint, Settings};
use verisample::shard::Shard;

#[test]
fn full_run_routes_every_item_and_accounts_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_job(dir.path(), Shard::WHOLE);
    let s = &report.stats;
    // 35 rows, and one file whose rows cannot be counted (not one row).
    assert_eq!(
        (
            s.input_rows,
            s.unread_files,
            s.accepted,
            s.rejected,
            s.errors
        ),
        (35, 1, 26, 18, 8)
    );
    assert_eq!(s.cleaning_drops.get("provenance_mismatch"), Some(&3));
    assert_eq!(s.cleaning_drops.get("off_task"), Some(&1));
    // The off-task line says where the question differs from OrandCar's task question: the
    // scripted question "What is written in the image? [say:5]" shares its first 30
    // characters.
    let off_task: Vec<serde_json::Value> = lines(&dir.path().join("cleaning.jsonl"))
        .into_iter()
        .filter(|l| l["reason"] == "off_task")
        .collect();
    let task = verisample::family::ORAND_CAR_QUESTION;
    assert_eq!(
        off_task[0]["detail"].as_str().unwrap(),
        format!(
            "the question is not OrandCar's task question {task:?}: character 31 is '[' where \
             'A' is expected"
        )
    );
    let reasons: Vec<(&str, u64)> = s
        .reject_reasons
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("judge_numbers_disagree", 3),
            ("no_answer", 3),
            ("truncated", 3),
            ("unusable_reference", 3),
            ("wrong_answer", 6)
        ]
    );
    assert_eq!(s.split_items.get("TestSet_RS_think"), Some(&25));
    assert_eq!(s.split_items.get("TestSet_RS_nothink"), Some(&25));
    assert_eq!(s.split_items.get("TestSet_rejected"), Some(&18));
    assert_eq!(s.split_items.get("OrandCar_RS_think"), Some(&1));
    assert_eq!(s.split_items.get("OrandCar_rejected"), None);
    assert_eq!(
        (
            s.judge.judged,
            s.judge.overturns,
            s.judge.number_guard_blocks
        ),
        (15, 3, 3)
    );
    assert_eq!(s.judge.verdicts.get("WRONG"), Some(&6));
    assert_eq!(s.judge.verdicts.get("CORRECT"), Some(&6));
    assert_eq!(s.judge.verdicts.get("UNSURE"), Some(&3));
    let cal = s.calibration.expect("calibration");
    assert_eq!((cal.agreed, cal.total), (3, 3));
    assert_eq!(s.accepted_by.get("verifier:alnum:first_line"), Some(&3));
    assert_eq!(s.errors_by_field.get("generation"), Some(&3));
    assert_eq!(s.errors_by_field.get("image.bytes"), Some(&2));
    assert_eq!(s.throughput.generated_items, TOTAL_GENERATIONS as u64);

    // Rows of each split are in input order; entries carry the right texts.
    let rejected = lines(&dir.path().join("data/TestSet_rejected.jsonl"));
    let positions: Vec<u64> = rejected
        .iter()
        .map(|r| {
            let meta: serde_json::Value =
                serde_json::from_str(r["clean_meta"].as_str().unwrap()).unwrap();
            meta["position"].as_u64().unwrap()
        })
        .collect();
    let mut sorted = positions.clone();
    sorted.sort_unstable();
    assert_eq!(positions, sorted);
    let ll = rejected
        .iter()
        .flat_map(|r| r["qa"].as_array().unwrap().iter())
        .find(|q| q["wrong_vlm"] == "ll.850")
        .expect("ll.850 row");
    assert_eq!(
        (ll["answer"].as_str(), ll["reason"].as_str()),
        (Some("11850"), Some("wrong_answer"))
    );
    assert_eq!(ll["judge_verdict"], "WRONG");
    let think = lines(&dir.path().join("data/TestSet_RS_think.jsonl"));
    let judged = think
        .iter()
        .flat_map(|r| r["qa"].as_array().unwrap().iter())
        .find(|q| q["accepted_by"] == "judge")
        .expect("judge accept");
    assert_eq!(
        (judged["answer"].as_str(), judged["org_answer"].as_str()),
        (Some("it says 12"), Some("12"))
    );
    assert_eq!(judged["think"], "reading");

    // errors.jsonl names file, row and field of every problem.
    let errors = lines(&dir.path().join("errors.jsonl"));
    let fields: BTreeSet<&str> = errors
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from(["file", "generation", "image.bytes", "qa[0].question"])
    );
    let file_error = errors.iter().find(|e| e["field"] == "file").unwrap();
    assert_eq!(file_error["file"], "data/train-00001.parquet");
    assert!(file_error["row"].is_null());
    // generations.jsonl: one line per generated question, both passes where judged.
    let gens = lines(&dir.path().join("generations.jsonl"));
    assert_eq!(gens.len(), 47);
    assert_eq!(gens.iter().filter(|g| !g["judge"].is_null()).count(), 18);
    assert!(gens.iter().all(
        |g| g["answer"]["prompt_tokens"].as_u64().is_some() || !g["answer"]["error"].is_null()
    ));
    // run.json and the card statistics.
    let run_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["status"], "complete");
    assert_eq!(run_json["engine_version"], "scripted-test-model 1");
    assert!(run_json["model_weights"]["model.safetensors"].is_string());
    let card = std::fs::read_to_string(dir.path().join("README.md")).unwrap();
    assert!(card.contains("| `judge_numbers_disagree` | 3 |"), "{card}");
    assert!(card.contains("3/3 verifier accepts"), "{card}");
    // The judged items are shown: the three overturned, the three refused by the number guard
    // (`~12` judged the same as `13`), none disagreeing in calibration (3/3 agreed).
    let table = |title: &str| -> Vec<String> {
        let Some(start) = card.find(title) else {
            return Vec::new();
        };
        card[start..]
            .lines()
            .skip(4)
            .take_while(|l| l.starts_with("| "))
            .map(String::from)
            .collect()
    };
    let overturned = table("Overturned (verifier reject");
    let refused = table("Refused by the number guard:");
    assert_eq!((overturned.len(), refused.len()), (3, 3), "{card}");
    assert!(
        refused
            .iter()
            .all(|r| r.ends_with("| `13` | `~12` | `CORRECT` |")),
        "{refused:?}"
    );
    assert!(
        overturned.iter().all(|r| r.ends_with("| `CORRECT` |")),
        "{overturned:?}"
    );
    assert!(table("Calibration disagreements").is_empty(), "{card}");
    let chart = std::fs::read_to_string(dir.path().join("chart.svg")).expect("chart svg");
    assert!(chart.contains(">judge_numbers_disagree<"), "{chart}");
}

#[test]
fn outputs_do_not_depend_on_completion_order() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    run_job(a.path(), Shard::WHOLE);
    let mut in_order = ScriptedModel::new();
    in_order.max_batch = 1; // batches of one: completion order = request order
    run_with(
        &settings(b.path(), Shard::WHOLE),
        &mut in_order,
        &RunControl::default(),
    )
    .unwrap();
    assert_same_outputs(
        &deterministic_outputs(a.path()),
        &deterministic_outputs(b.path()),
    );
}

#[test]
fn resume_after_interruption_is_byte_identical() {
    let reference = tempfile::tempdir().unwrap();
    run_job(reference.path(), Shard::WHOLE);
    let want = deterministic_outputs(reference.path());
    // Stop points: inside the first chunk of answers, near the end of answers, in the judge
    // pass. The last case also leaves a torn record at the end of the journal.
    for (stop_after, torn) in [(0usize, false), (7, false), (44, false), (52, true)] {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), Shard::WHOLE);
        let control = RunControl::default();
        let mut model = ScriptedModel::new();
        model.stop_after = Some((stop_after, control.stop.clone()));
        let err = run_with(&s, &mut model, &control).unwrap_err();
        assert!(matches!(err, PipelineError::Interrupted), "{err}");
        assert_eq!(err.exit_code(), 130);
        assert!(!dir.path().join("run.json").exists());
        assert!(
            !dir.path().join("data").exists(),
            "no split published before the end"
        );
        let journal = dir.path().join("journal.bin");
        if torn {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&journal)
                .unwrap();
            f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, b'{', b'"'])
                .unwrap();
        }
        let mut resumed = ScriptedModel::new();
        let report = run_with(&s, &mut resumed, &RunControl::default()).expect("resume");
        // The interrupted run journaled every completion up to the stop and the rest of
        // that engine step (a batch of the scripted model); the resume generates the rest.
        let journaled = report.replayed_results;
        assert!(
            journaled > stop_after && journaled <= stop_after + 5,
            "stop {stop_after}: {journaled}"
        );
        assert_eq!(resumed.completed, TOTAL_GENERATIONS - journaled);
        assert_eq!(report.torn_journal_bytes, if torn { 10 } else { 0 });
        assert_same_outputs(&want, &deterministic_outputs(dir.path()));
    }
}

#[test]
fn rerun_of_finished_run_generates_nothing_and_rewrites_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    run_job(dir.path(), Shard::WHOLE);
    let first = deterministic_outputs(dir.path());
    let mut model = ScriptedModel::new();
    let report = run_with(
        &settings(dir.path(), Shard::WHOLE),
        &mut model,
        &RunControl::default(),
    )
    .unwrap();
    assert_eq!(
        (model.completed, report.replayed_results),
        (0, TOTAL_GENERATIONS)
    );
    assert_same_outputs(&first, &deterministic_outputs(dir.path()));
}

#[test]
fn changed_settings_or_model_are_refused_unless_restart() {
    let dir = tempfile::tempdir().unwrap();
    run_job(dir.path(), Shard::WHOLE);
    let mut s = settings(dir.path(), Shard::WHOLE);
    s.think = false;
    let err = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap_err();
    match &err {
        PipelineError::FingerprintMismatch { changed, .. } => {
            assert_eq!(changed, &vec!["--think changed: on → off".to_string()])
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("--restart"), "{err}");
    let s = settings(dir.path(), Shard::WHOLE);
    let mut other_weights = model_files();
    other_weights.insert("model.safetensors".into(), "cd".repeat(32));
    match prepare(
        &s,
        fingerprint(s.canonical(), other_weights.clone(), Vec::new()),
    )
    .unwrap_err()
    {
        PipelineError::FingerprintMismatch { changed, .. } => {
            assert_eq!(
                changed,
                vec!["the model's files changed (model.safetensors)".to_string()]
            )
        }
        other => panic!("{other}"),
    }
    // Scheduling knobs are not part of the fingerprint.
    let mut bigger = settings(dir.path(), Shard::WHOLE);
    bigger.max_batch = 99;
    let p = prepare(
        &bigger,
        fingerprint(bigger.canonical(), model_files(), Vec::new()),
    )
    .unwrap();
    // Accepted as the same run: every generation of the first run is replayed, under the new
    // batch size. Catches: a knob change that silently restarts (replays nothing).
    assert_eq!(
        (p.replayed(), p.settings.max_batch),
        (TOTAL_GENERATIONS, 99)
    );
    drop(p);
    let mut restart = settings(dir.path(), Shard::WHOLE);
    restart.restart = true;
    let p = prepare(
        &restart,
        fingerprint(restart.canonical(), other_weights, Vec::new()),
    )
    .unwrap();
    assert_eq!(p.replayed(), 0);
    assert!(!dir.path().join("run.json").exists());
}

#[test]
fn max_errors_aborts_the_run_after_writing_errors_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), Shard::WHOLE);
    s.max_errors = Some(4);
    let err = run_with(&s, &mut ScriptedModel::new(), &RunControl::default()).unwrap_err();
    assert!(
        matches!(err, PipelineError::TooManyErrors { count: 5, max: 4 }),
        "{err}"
    );
    // The message points at errors.jsonl: it is there, with the errors seen before the abort.
    assert!(err.to_string().contains("errors.jsonl"), "{err}");
    let errors = lines(&dir.path().join("errors.jsonl"));
    assert_eq!(errors.len(), 5, "{errors:?}");
    let positions: Vec<u64> = errors
        .iter()
        .map(|e| e["position"].as_u64().unwrap())
        .collect();
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted);
    s.max_errors = Some(8);
    s.restart = true;
    // The input's 8 errors are within `--max-errors 8`: the run completes and counts them all.
    let report = run_with(&s, &mut ScriptedModel::new(), &RunControl::default()).unwrap();
    assert_eq!(report.stats.errors, 8);
    // Rerunning the finished output, even with `--max-errors 0`, finds no new error: the 8 its
    // errors.jsonl lists do not count again, and the rerun completes with the same files.
    let finished = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let errors_before = finished("errors.jsonl");
    s.restart = false;
    s.max_errors = Some(0);
    let rerun = run_with(&s, &mut ScriptedModel::new(), &RunControl::default()).unwrap();
    assert_eq!(rerun.stats.errors, 8);
    assert_eq!(finished("errors.jsonl"), errors_before);
    // An error that list lacks is new, and counts.
    let listed = String::from_utf8(errors_before).unwrap();
    let (all_but_last, _) = listed.trim_end().rsplit_once('\n').unwrap();
    std::fs::write(dir.path().join("errors.jsonl"), format!("{all_but_last}\n")).unwrap();
    let err = run_with(&s, &mut ScriptedModel::new(), &RunControl::default()).unwrap_err();
    assert!(
        matches!(err, PipelineError::TooManyErrors { count: 1, max: 0 }),
        "{err}"
    );
}

#[test]
fn prompts_larger_than_the_kv_cache_are_errors_then_generated_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    // The engine's pool is too small for the three `[long]` questions: errors, not answers.
    let mut small = ScriptedModel::new();
    small.small_kv_cache = true;
    let first = run_with(&s, &mut small, &RunControl::default()).unwrap();
    assert_eq!((first.stats.errors, first.stats.rejected), (8 + 3, 18 - 3));
    let kv_lines = lines(&dir.path().join("errors.jsonl"))
        .into_iter()
        .filter(|l| l.to_string().contains("KV cache blocks"))
        .count();
    assert_eq!(kv_lines, 3);
    // Rerun with room: only those three are generated, and the output is a full run's.
    let mut big = ScriptedModel::new();
    let resumed = run_with(&s, &mut big, &RunControl::default()).unwrap();
    assert_eq!(big.completed, 3);
    let whole = tempfile::tempdir().unwrap();
    let want = run_job(whole.path(), Shard::WHOLE);
    assert_eq!(
        (
            resumed.stats.accepted,
            resumed.stats.rejected,
            resumed.stats.errors
        ),
        (want.stats.accepted, want.stats.rejected, want.stats.errors)
    );
    assert_same_outputs(
        &deterministic_outputs(whole.path()),
        &deterministic_outputs(dir.path()),
    );
    // A resumed run replays them from then on.
    let mut again = ScriptedModel::new();
    run_with(&s, &mut again, &RunControl::default()).unwrap();
    assert_eq!(again.completed, 0);
}

#[test]
fn ctrl_c_flag_stops_before_reading_more() {
    let dir = tempfile::tempdir().unwrap();
    let control = RunControl {
        stop: Arc::new(AtomicBool::new(true)),
        ..RunControl::default()
    };
    let mut model = ScriptedModel::new();
    let err = run_with(&settings(dir.path(), Shard::WHOLE), &mut model, &control).unwrap_err();
    assert!(matches!(err, PipelineError::Interrupted));
    assert_eq!(model.calls, 0);
}

#[test]
fn changed_input_content_at_same_path_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let inputs = |b: &str| {
        vec![
            ("d/a.parquet".to_string(), "aa".repeat(32)),
            ("d/b.parquet".to_string(), b.repeat(32)),
        ]
    };
    let first = prepare(&s, fingerprint(s.canonical(), model_files(), inputs("bb"))).unwrap();
    drop(first);
    // One generation journaled: from now on the folder holds work a changed run would lose.
    let path = s.out.join(verisample::out_files::JOURNAL_FILE);
    let (mut journal, _) = verisample::journal::Journal::<JournalEntry>::open(&path).unwrap();
    journal
        .append(&JournalEntry::Generated {
            key: ItemKey::question(0, 0),
            pass: Pass::Answer,
            outcome: JournalOutcome::Failed("x".into()),
            exceeds_capacity: false,
            image_sha256: None,
        })
        .unwrap();
    drop(journal);
    // Same path, same content: accepted as the same run (its one generation is replayed).
    let same = prepare(&s, fingerprint(s.canonical(), model_files(), inputs("bb"))).unwrap();
    assert_eq!(same.replayed(), 1);
    drop(same);
    let err = prepare(&s, fingerprint(s.canonical(), model_files(), inputs("cc"))).unwrap_err();
    match &err {
        PipelineError::FingerprintMismatch { changed, .. } => assert_eq!(
            changed,
            &vec!["the input changed: d/b.parquet changed content".to_string()]
        ),
        other => panic!("{other}"),
    }
    let mut restart = settings(dir.path(), Shard::WHOLE);
    restart.restart = true;
    let fp = fingerprint(restart.canonical(), model_files(), inputs("cc"));
    assert_eq!(prepare(&restart, fp).unwrap().replayed(), 0);
}

#[test]
fn input_with_no_readable_row_is_an_error_after_writing_errors_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let unreadable = Err(verisample::record::RowError {
        file: "train-00000.parquet".into(),
        row: None,
        rows: None,
        field: "file".into(),
        message: "not a parquet file".into(),
    });
    let err = run_rows(&s, vec![unreadable]).unwrap_err();
    assert!(
        matches!(err, PipelineError::InputUnreadable { count: 1, .. }),
        "{err}"
    );
    assert_eq!(err.exit_code(), 1);
    assert!(
        err.to_string()
            .contains("train-00000.parquet: not a parquet file"),
        "{err}"
    );
    let errors = lines(&dir.path().join("errors.jsonl"));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["file"], "train-00000.parquet");
    assert!(!dir.path().join("run.json").exists());
}

#[test]
fn unread_row_groups_count_their_rows_and_an_unreadable_file_counts_none() {
    use verisample::record::RowError;
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let f = "data/train-00000.parquet";
    let rows = vec![
        row(f, 0, 1, vec![qa("1", "1")]),
        Err(RowError {
            file: f.into(),
            row: Some(1),
            rows: Some(10),
            field: "file".into(),
            message: "cannot decode rows 1..11 (row group 1): bad page".into(),
        }),
        row(f, 11, 2, vec![qa("2", "2")]),
        Err(RowError {
            file: "data/train-00001.parquet".into(),
            row: None,
            rows: None,
            field: "file".into(),
            message: "not a parquet file".into(),
        }),
    ];
    let report = run_rows(&s, rows).expect("run");
    let st = &report.stats;
    assert_eq!(
        (
            st.input_rows,
            st.unread_rows,
            st.unread_files,
            st.input_items,
            st.errors
        ),
        (12, 10, 1, 2, 2)
    );
    let errors = lines(&dir.path().join("errors.jsonl"));
    assert_eq!(
        (errors[0]["row"].as_u64(), errors[0]["rows"].as_u64()),
        (Some(1), Some(10))
    );
    assert!(errors[0]["message"]
        .as_str()
        .unwrap()
        .contains("rows 1..11"));
    assert_eq!(errors[1]["file"], "data/train-00001.parquet");
    assert!(errors[1].get("rows").is_none(), "{}", errors[1]);
    let text = verisample::report::summary::Summary::new(st, dir.path()).text();
    assert!(
        text.contains(
            "not read: 10 rows (damaged row groups, or a column missing or of the wrong type; their questions are not counted, see errors.jsonl), 1 file(s) unreadable"
        ),
        "{text}"
    );
    let run_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["stats"]["unread_rows"], 10);
    assert_eq!(run_json["stats"]["unread_files"], 1);
    assert_eq!(run_json["stats"]["input_rows"], 12);
}

/// Two readable rows whose items all go to errors.jsonl (an empty image, a blank question).
fn rows_without_usable_items(
) -> Vec<Result<verisample::record::InputRow, verisample::record::RowError>> {
    let f = "data/train-00000.parquet";
    let mut empty = row(f, 0, 1, vec![qa("1", "1")]).expect("row");
    empty.image.bytes = Some(Vec::new());
    let blank_question = row(
        f,
        1,
        2,
        vec![verisample::record::QaItem {
            question: " ".into(),
            answer: "5".into(),
            ..Default::default()
        }],
    );
    vec![Ok(empty), blank_question]
}

fn run_rows(
    s: &Settings,
    rows: Vec<Result<verisample::record::InputRow, verisample::record::RowError>>,
) -> Result<RunReport, PipelineError> {
    let prepared = prepare(s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap();
    let source = MemSource(rows);
    let mut sink = JsonlSink::new(&s.out);
    run(
        prepared,
        Backends {
            source: &source,
            generator: &mut ScriptedModel::new(),
            decisions: &StandardDecisions::default(),
            sink: &mut sink,
        },
        &RunControl::default(),
    )
}

#[test]
fn a_run_in_which_no_item_reaches_a_split_fails_after_writing_its_logs() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let err = run_rows(&s, rows_without_usable_items()).unwrap_err();
    assert!(
        matches!(
            err,
            PipelineError::NoSplit {
                rows: 2,
                errors: 2,
                dropped: 0,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("errors.jsonl"), "{err}");
    assert_eq!(lines(&dir.path().join("errors.jsonl")).len(), 2);
    let run_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["stats"]["errors"], 2);
    assert_eq!(
        run_json["status"], "no_split",
        "a failed run is not `complete`"
    );

    // One shard of several may receive no usable row: that shard still succeeds.
    let shard_dir = tempfile::tempdir().unwrap();
    let s = settings(shard_dir.path(), Shard { index: 0, count: 2 });
    let report = run_rows(&s, rows_without_usable_items()).expect("an empty shard is fine");
    assert!(report.stats.split_rows.is_empty());
    assert_eq!(report.stats.errors, 1);
    assert_eq!(
        report.status, "complete",
        "merge takes an empty shard as done"
    );
}

#[test]
fn a_second_process_in_the_same_output_folder_is_refused_until_the_first_ends() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let fp = || fingerprint(s.canonical(), model_files(), Vec::new());
    let first = prepare(&s, fp()).expect("first run");
    // The OS lock is per open file description: a second open in this process contends
    // exactly like another process would.
    let err = prepare(&s, fp()).unwrap_err();
    assert!(matches!(err, PipelineError::Locked(_)), "{err}");
    assert!(err.to_string().contains(".verisample.lock"), "{err}");
    assert_eq!(err.exit_code(), 2, "found before anything runs");
    drop(first);
    assert!(
        !dir.path().join(".verisample.lock").exists(),
        "the lock file goes with the run that held it"
    );
    prepare(&s, fp()).expect("the lock is released with the first run");
}

/// An image over the pipeline's one size limit is an `errors.jsonl` entry on
/// `image.bytes` naming its size as width x height, and the run goes on.
#[test]
fn an_oversized_image_is_reported_on_image_bytes_with_width_then_height() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let mut wide = std::io::Cursor::new(Vec::new());
    image::GrayImage::new(16_385, 2)
        .write_to(&mut wide, image::ImageFormat::Png)
        .unwrap();
    let mut rows = rows_without_usable_items();
    rows[0].as_mut().expect("row").image.bytes = Some(wide.into_inner());
    let err = run_rows(&s, rows).unwrap_err();
    assert!(
        matches!(err, PipelineError::NoSplit { errors: 2, .. }),
        "{err}"
    );
    let errors = lines(&dir.path().join("errors.jsonl"));
    let oversized = errors
        .iter()
        .find(|e| e["row"] == 0)
        .expect("row 0 is reported");
    assert_eq!(oversized["field"], "image.bytes");
    assert_eq!(
        oversized["message"],
        "image too large (16385x2); limits: side 16384, 89478485 pixels"
    );
}

#[test]
fn a_start_that_generated_nothing_does_not_block_the_corrected_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    // As a run killed (or failed) after its journal check, before its first generation.
    let first = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap();
    drop(first);
    assert!(dir.path().join("journal.bin").exists());
    let mut corrected = settings(dir.path(), Shard::WHOLE);
    corrected.think = false;
    let fp = fingerprint(corrected.canonical(), model_files(), Vec::new());
    let p = prepare(&corrected, fp).expect("nothing generated: nothing to refuse");
    drop(p);
    // A failed start gives back the folder it created, journal and lock included.
    let out = dir.path().join("fresh");
    let s = settings(&out, Shard::WHOLE);
    let p = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap();
    assert!(out.join("journal.bin").exists());
    p.abandon();
    assert!(!out.exists(), "the folder this start created is removed");
    // In a folder that existed, only the journal and the lock go.
    let p = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap();
    std::fs::write(out.join("notes.txt"), "kept").unwrap();
    p.abandon();
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("notes.txt")]);
}

#[test]
fn a_resume_answers_again_a_row_whose_image_changed() {
    // The OrandCar row is answered from the image (its question has no `[say:…]`): the
    // scripted model reads 1990 from the old image and 7777 from the new one.
    let new_image = png(151);
    let new_sha = hex::encode(sha2::Sha256::digest(&new_image));
    let changed_rows = || {
        let mut rows = mixed_rows();
        let last = rows.last_mut().unwrap().as_mut().unwrap();
        last.image.bytes = Some(new_image.clone());
        rows
    };
    let go = |out: &Path, rows: Vec<Result<verisample::record::InputRow, _>>| {
        let s = settings(out, Shard::WHOLE);
        let prepared = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap();
        let mut model = ScriptedModel::new();
        model.oracle.insert(new_sha.clone(), "7777".into());
        let report = run(
            prepared,
            Backends {
                source: &MemSource(rows),
                generator: &mut model,
                decisions: &StandardDecisions::default(),
                sink: &mut JsonlSink::new(out),
            },
            &RunControl::default(),
        )
        .expect("run");
        report.stats.throughput.generated_items
    };
    let resumed = tempfile::tempdir().unwrap();
    assert_eq!(go(resumed.path(), mixed_rows()), TOTAL_GENERATIONS as u64);
    // The same run again over the changed image (given by path, its file is not among the
    // input's hashes): only that row is generated again — its answer, and its judge pass
    // (7777 is not the reference 1990: a reject the judge now looks at).
    assert_eq!(go(resumed.path(), changed_rows()), 2);
    let fresh = tempfile::tempdir().unwrap();
    go(fresh.path(), changed_rows());
    assert_same_outputs(
        &deterministic_outputs(fresh.path()),
        &deterministic_outputs(resumed.path()),
    );
}
