//! `run --limit N` with test doubles (scripted model, in-memory input, JSON-lines writer): a
//! limited run takes the first N rows of its shard and writes what an unlimited run over an
//! input of just those rows writes (duplicates marked across shards included); a later run
//! without the limit, or with a larger one, resumes, generating only the rest, and writes
//! what a fresh run does; a merge of a shard that left rows out is refused. The real binary:
//! tests/run_limit_cli.rs.

mod pipeline_support;

use pipeline_support::*;
use verisample::merge::{prepare_merge, MergeError, MergeOptions};
use verisample::pipeline::{
    prepare, run, Backends, PipelineError, RunControl, RunReport, StandardDecisions,
};
use verisample::record::{InputRow, RowError};
use verisample::report::RowLimit;
use verisample::settings::{fingerprint, hash_input_files, Settings};
use verisample::shard::Shard;

type Rows = Vec<Result<InputRow, RowError>>;

/// Run `s` over `rows` with a fresh scripted model; returns the report and the number of
/// generations the model made.
fn run_rows(s: &Settings, rows: Rows) -> Result<(RunReport, usize), PipelineError> {
    let prepared = prepare(s, fingerprint(s.canonical(), model_files(), Vec::new()))?;
    let mut model = ScriptedModel::new();
    let report = run(
        prepared,
        Backends {
            source: &MemSource(rows),
            generator: &mut model,
            decisions: &StandardDecisions::default(),
            sink: &mut JsonlSink::new(&s.out),
        },
        &RunControl::default(),
    )?;
    Ok((report, model.completed))
}

fn limited(out: &std::path::Path, shard: Shard, limit: Option<usize>) -> Settings {
    Settings {
        limit,
        ..settings(out, shard)
    }
}

/// Rows whose images and questions repeat (seed = image): duplicates of one another within
/// and across shards, among readable rows of every kind of the mixed input.
fn rows_with_repeats() -> Rows {
    let f = "data/train-00000.parquet";
    let seeds = [1u8, 2, 1, 3, 2, 1, 4, 3, 5, 1, 2, 6];
    seeds
        .iter()
        .enumerate()
        .map(|(i, &seed)| {
            let n = 100 + u32::from(seed);
            row(
                f,
                i,
                seed,
                vec![
                    qa(&n.to_string(), &n.to_string()),
                    qa("wrong", &(n + 1).to_string()),
                ],
            )
        })
        .collect()
}

/// The stream length after which `shard` has had `n` elements (the prefix a limited run reads).
fn prefix_len(shard: Shard, n: usize) -> usize {
    (0..)
        .filter(|&p| shard.contains(p as u64))
        .nth(n - 1)
        .unwrap()
        + 1
}

#[test]
fn a_limited_run_writes_what_an_unlimited_run_over_its_first_rows_writes() {
    let third = |index| Shard { index, count: 3 };
    for (rows, shard, limit) in [
        (mixed_rows(), Shard::WHOLE, 1),
        (mixed_rows(), Shard::WHOLE, 3),
        (mixed_rows(), Shard::WHOLE, 30),
        (mixed_rows(), third(1), 4),
        (rows_with_repeats(), Shard::WHOLE, 7),
        (rows_with_repeats(), third(0), 3),
        (rows_with_repeats(), third(2), 2),
    ] {
        let what = format!("{shard} --limit {limit}");
        let a = tempfile::tempdir().unwrap();
        let (report, generated) =
            run_rows(&limited(a.path(), shard, Some(limit)), rows.clone()).expect(&what);
        let prefix = rows[..prefix_len(shard, limit)].to_vec();
        let b = tempfile::tempdir().unwrap();
        let (whole, generated_whole) = run_rows(&settings(b.path(), shard), prefix).expect(&what);
        assert_same_outputs(
            &deterministic_outputs(b.path()),
            &deterministic_outputs(a.path()),
        );
        // Rows past the limit were not generated for.
        assert_eq!(generated, generated_whole, "{what}");
        let positions = positions_in(a.path());
        let last = *positions.last().unwrap();
        assert_eq!(last as usize, prefix_len(shard, limit) - 1, "{what}");
        assert_eq!(
            positions.iter().filter(|&&p| shard.contains(p)).count(),
            limit,
            "{what}: {positions:?}"
        );
        // The rows of the shard after the first N are left out, and not counted as errors
        // or rows not read.
        // (The in-memory input's footers count one row per element; an unreadable file among
        // the first 30 counts none.)
        let in_shard = (0..rows.len() as u64)
            .filter(|&p| shard.contains(p))
            .count() as u64;
        let unread_files = whole.stats.unread_files;
        assert_eq!(
            report.stats.input_rows,
            limit as u64 - unread_files,
            "{what}"
        );
        assert_eq!(report.stats.input_rows, whole.stats.input_rows, "{what}");
        assert_eq!(
            report.stats.limit,
            Some(RowLimit {
                limit: limit as u64,
                left_out_rows: in_shard - limit as u64 + unread_files,
            }),
            "{what}"
        );
        assert_eq!(
            (report.stats.errors, report.stats.unread_rows),
            (whole.stats.errors, whole.stats.unread_rows),
            "{what}"
        );
        assert_eq!(whole.stats.limit, None);
        let run_json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(a.path().join("run.json")).unwrap()).unwrap();
        assert_eq!(run_json["settings"]["limit"], limit, "{what}");
        assert_eq!(
            run_json["stats"]["limit"]["left_out_rows"],
            in_shard - limit as u64 + unread_files
        );
    }
    // The repeats are marked as in the whole input: position 2 repeats position 0 of another
    // shard, and the shard's own run names it.
    let dir = tempfile::tempdir().unwrap();
    run_rows(&limited(dir.path(), third(2), Some(1)), rows_with_repeats()).unwrap();
    let cleaning = lines(&dir.path().join("cleaning.jsonl"));
    assert_eq!(cleaning.len(), 2, "{cleaning:?}");
    assert_eq!(cleaning[0]["reason"], "duplicate");
    assert_eq!(cleaning[0]["duplicate_of"]["position"], 0);
}

#[test]
fn a_limit_as_large_as_the_shard_takes_every_row_and_leaves_none_out() {
    let a = tempfile::tempdir().unwrap();
    let (report, _) = run_rows(&limited(a.path(), Shard::WHOLE, Some(1000)), mixed_rows()).unwrap();
    let b = tempfile::tempdir().unwrap();
    run_job(b.path(), Shard::WHOLE);
    assert_same_outputs(
        &deterministic_outputs(b.path()),
        &deterministic_outputs(a.path()),
    );
    assert_eq!(
        report.stats.limit,
        Some(RowLimit {
            limit: 1000,
            left_out_rows: 0
        })
    );
}

#[test]
fn the_limit_is_not_part_of_the_run_identity() {
    let dir = tempfile::tempdir().unwrap();
    let plain = settings(dir.path(), Shard::WHOLE);
    let with = limited(dir.path(), Shard::WHOLE, Some(3));
    assert_eq!(plain.canonical(), with.canonical());
}

#[test]
fn a_larger_limit_then_none_resume_and_write_what_fresh_runs_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut done = 0;
    for limit in [Some(3), Some(3), Some(12), None] {
        let what = format!("--limit {limit:?}");
        let (report, generated) =
            run_rows(&limited(dir.path(), Shard::WHOLE, limit), mixed_rows()).expect(&what);
        // Only what the earlier runs did not generate is generated.
        assert_eq!(report.replayed_results, done, "{what}");
        done += generated;
        let fresh = tempfile::tempdir().unwrap();
        let (_, fresh_generated) =
            run_rows(&limited(fresh.path(), Shard::WHOLE, limit), mixed_rows()).unwrap();
        assert_eq!(done, fresh_generated, "{what}");
        let mut want = deterministic_outputs(fresh.path());
        let mut got = deterministic_outputs(dir.path());
        for (out, files) in [(fresh.path(), &mut want), (dir.path(), &mut got)] {
            files.insert(
                "README.md".into(),
                std::fs::read(out.join("README.md")).unwrap(),
            );
        }
        assert_same_outputs(&want, &got);
    }
    // Three rows, then twelve, then the rest: every generation of the input once.
    assert_eq!(done, TOTAL_GENERATIONS);
    // The card of a limited run says so; the last one's (no limit) matched a fresh run's.
    let limited_out = tempfile::tempdir().unwrap();
    run_rows(
        &limited(limited_out.path(), Shard::WHOLE, Some(3)),
        mixed_rows(),
    )
    .unwrap();
    let card = std::fs::read_to_string(limited_out.path().join("README.md")).unwrap();
    assert!(
        card.contains("Input: 3 rows (the first 3 of 36: `--limit 3`), 4 questions."),
        "{card}"
    );
}

#[test]
fn a_merge_of_a_shard_that_left_rows_out_is_refused_until_it_is_rerun_without_the_limit() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("mixed.parquet"), b"the mixed rows").unwrap();
    let input_files = hash_input_files(data.path()).unwrap();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let shard_run = |i: usize, limit: Option<usize>| {
        let s = limited(dirs[i].path(), Shard { index: i, count: 2 }, limit);
        run_hashing(
            &s,
            &mut ScriptedModel::new(),
            &RunControl::default(),
            input_files.clone(),
        )
        .expect("shard run")
    };
    // A limit past the shard's 18 rows leaves none out: that shard is complete.
    shard_run(0, Some(100));
    shard_run(1, Some(2));
    let merged = tempfile::tempdir().unwrap();
    let args = MergeOptions {
        shards: dirs.iter().map(|d| d.path().to_path_buf()).collect(),
        out: merged.path().into(),
        data: Some(data.path().into()),
        force: false,
        restart: false,
        progress: None,
        quiet: true,
    };
    let err = prepare_merge(&args).unwrap_err();
    assert!(
        matches!(
            err,
            MergeError::Limited {
                limit: 2,
                left_out: 16,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "{}: this shard ran with --limit 2 (the first 2 rows of shard 1/2; 16 rows left out)",
            dirs[1].path().display()
        )) && message.contains("rerun that shard's `verisample run` command without --limit"),
        "{message}"
    );
    assert!(!merged.path().join("journal.bin").exists());
    // Rerun without the limit: it resumes, and the merge goes through.
    let rerun = shard_run(1, None);
    assert_eq!(rerun.stats.limit, None);
    assert!(rerun.replayed_results > 0);
    let plan = prepare_merge(&args).expect("merge after the rerun");
    assert_eq!(plan.settings.limit, None);
}

#[test]
fn an_abort_after_a_limited_run_lists_the_errors_found_past_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = run_rows(&limited(dir.path(), Shard::WHOLE, Some(3)), mixed_rows()).unwrap();
    assert_eq!(first.stats.errors, 0);
    // Without the limit and with --max-errors 0, the first error past the three rows (the
    // corrupt image at position 24) aborts: errors.jsonl then lists it, though OUT holds a
    // finished run (whose errors.jsonl, of three rows, is no list of this input's errors).
    let s = Settings {
        max_errors: Some(0),
        ..settings(dir.path(), Shard::WHOLE)
    };
    let err = run_rows(&s, mixed_rows()).unwrap_err();
    assert!(
        matches!(err, PipelineError::TooManyErrors { count: 1, max: 0 }),
        "{err}"
    );
    let errors = lines(&dir.path().join("errors.jsonl"));
    let positions: Vec<u64> = errors
        .iter()
        .map(|e| e["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, vec![24], "{errors:?}");
    // The abort holds: the same command again finds the same first error and stops there
    // (the limited run's run.json does not make the aborted run's list count as recorded).
    for _ in 0..2 {
        let err = run_rows(&s, mixed_rows()).unwrap_err();
        assert!(
            matches!(err, PipelineError::TooManyErrors { count: 1, max: 0 }),
            "{err}"
        );
        let again: Vec<u64> = lines(&dir.path().join("errors.jsonl"))
            .iter()
            .map(|e| e["position"].as_u64().unwrap())
            .collect();
        assert_eq!(again, vec![24]);
    }
}

/// Under `--shard`, an unreadable row group is one stream element of many rows: whether the
/// limit left rows out is decided by the elements of the shard that follow it, not by the
/// footers' row count. Catches: a complete shard reported as leaving rows out (its merge
/// refused) and a shard that left an element out reported as complete.
#[test]
fn whether_a_limit_left_rows_out_follows_the_shard_s_elements() {
    // Element 0: a row group of 5 rows that cannot be read; then 5 readable rows.
    let f = "data/train-00000.parquet";
    let rows = || -> Rows {
        let mut v: Rows = vec![Err(RowError {
            file: f.into(),
            row: Some(0),
            rows: Some(5),
            field: "row_group".into(),
            message: "rows 0..5 (row group 0): corrupt".into(),
        })];
        v.extend((1..6).map(|i| {
            let n = (100 + i).to_string();
            row(f, i + 4, i as u8, vec![qa(&n, &n)])
        }));
        v
    };
    // Shard 0/2 holds elements 0, 2, 4 (3 elements, 7 rows by the footers).
    let check = |limit: usize, want_left_out: bool| {
        let dir = tempfile::tempdir().unwrap();
        let s = limited(dir.path(), "0/2".parse().unwrap(), Some(limit));
        let (report, _) = run_rows(&s, rows()).unwrap();
        let l = report.stats.limit.expect("limit recorded");
        assert_eq!(l.left_out_rows > 0, want_left_out, "--limit {limit}: {l:?}");
    };
    check(2, true);
    check(3, false);
    check(4, false);
}
