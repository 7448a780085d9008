//! Shards and merge with test doubles (scripted model, in-memory input, JSON-lines writer):
//! shards partition the input exactly, their merge equals the unsharded run byte for byte
//! (images a shard's engine refused included), a changed input or a merge into (or inside) a
//! shard folder is refused, and the shards' errors do not count against a merge's
//! `--max-errors`. With the real parquet reader and writer: tests/pipeline_parquet.rs.

mod pipeline_support;

use pipeline_support::*;
use verisample::merge::{prepare_merge, JournalOnly, MergeError, MergeOptions};
use verisample::pipeline::{run, Backends, PipelineError, RunControl, StandardDecisions};
use verisample::settings::hash_input_files;
use verisample::shard::Shard;

#[test]
fn shards_partition_exactly_and_merge_equals_unsharded() {
    // The engine refuses two images for its vision memory budget (a decision of the shards'
    // engine, which the merge does not load: it repeats the shards' refusals).
    let model = || {
        let mut m = ScriptedModel::new();
        m.refused_images = [0, 4].into();
        m
    };
    let whole = tempfile::tempdir().unwrap();
    let whole_report = run_with(
        &settings(whole.path(), Shard::WHOLE),
        &mut model(),
        &RunControl::default(),
    )
    .expect("run");
    assert_eq!(
        whole_report.stats.errors_by_field.get("image.bytes"),
        Some(&4)
    );
    // The in-memory rows stand for this file: the shards record its hash, the merge reads it.
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("mixed.parquet"), b"the mixed rows").unwrap();
    let input_files = hash_input_files(data.path()).unwrap();
    let n = 3;
    let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut rows = 0;
    let mut accepted = 0;
    let mut all_positions = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let r = run_hashing(
            &settings(d.path(), Shard { index: i, count: n }),
            &mut model(),
            &RunControl::default(),
            input_files.clone(),
        )
        .expect("shard run");
        rows += r.stats.input_rows;
        accepted += r.stats.accepted;
        let p = positions_in(d.path());
        assert!(
            p.iter().all(|x| x % n as u64 == i as u64),
            "shard {i}: {p:?}"
        );
        all_positions.extend(p);
    }
    all_positions.sort_unstable();
    assert_eq!(
        all_positions,
        positions_in(whole.path()),
        "shards cover each position once"
    );
    assert_eq!(
        (rows, accepted),
        (whole_report.stats.input_rows, whole_report.stats.accepted)
    );

    let merged = tempfile::tempdir().unwrap();
    let args = MergeOptions {
        shards: vec![
            dirs[2].path().into(),
            dirs[0].path().into(),
            dirs[1].path().into(),
        ],
        out: merged.path().into(),
        data: Some(data.path().into()),
        force: false,
        restart: false,
        progress: None,
        quiet: true,
    };
    let plan = prepare_merge(&args).expect("merge plan");
    let imported = plan.prepared.replayed();
    let source = MemSource(mixed_rows());
    let mut sink = JsonlSink::new(merged.path());
    assert_eq!(plan.refused_images.len(), 4, "{:?}", plan.refused_images);
    let mut engine = JournalOnly {
        engine_version: plan.engine_version.clone(),
        refused_images: plan.refused_images.clone(),
    };
    let report = run(
        plan.prepared,
        Backends {
            source: &source,
            generator: &mut engine,
            decisions: &StandardDecisions::default(),
            sink: &mut sink,
        },
        &RunControl::default(),
    )
    .expect("merge run");
    assert_eq!(report.stats.accepted, whole_report.stats.accepted);
    assert_eq!(report.stats.calibration, whole_report.stats.calibration);
    assert_same_outputs(
        &deterministic_outputs(whole.path()),
        &deterministic_outputs(merged.path()),
    );
    // An input that is not, byte for byte, the shards' is refused, naming what differs, and
    // nothing is written.
    let changed = tempfile::tempdir().unwrap();
    std::fs::write(changed.path().join("mixed.parquet"), b"other rows").unwrap();
    std::fs::write(changed.path().join("more.parquet"), b"more rows").unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let over_changed = MergeOptions {
        data: Some(changed.path().into()),
        out: fresh.path().into(),
        ..args.clone()
    };
    let err = prepare_merge(&over_changed).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, MergeError::InputChanged { .. }), "{message}");
    assert!(
        message.contains("mixed.parquet changed content, more.parquet was added"),
        "{message}"
    );
    assert_eq!(
        verisample::cli::error_exit_code(&anyhow::Error::new(err)),
        1
    );
    assert_eq!(std::fs::read_dir(fresh.path()).unwrap().count(), 0);
    // A shard whose journal is damaged (one byte flipped mid-file) is refused by name: its
    // generations after the damage would be missing.
    let damaged = tempfile::tempdir().unwrap();
    for f in ["run.json", "journal.bin"] {
        std::fs::copy(dirs[1].path().join(f), damaged.path().join(f)).unwrap();
    }
    let journal = damaged.path().join("journal.bin");
    let mut bytes = std::fs::read(&journal).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&journal, bytes).unwrap();
    let over_damaged = MergeOptions {
        shards: vec![
            dirs[0].path().into(),
            damaged.path().into(),
            dirs[2].path().into(),
        ],
        out: fresh.path().into(),
        ..args.clone()
    };
    let err = prepare_merge(&over_damaged).unwrap_err();
    assert_eq!(std::fs::read_dir(fresh.path()).unwrap().count(), 0);
    assert!(
        matches!(&err, MergeError::DamagedJournal { path, torn_bytes } if *path == journal && *torn_bytes > 0),
        "{err}"
    );
    // The same merge again resumes; the output of another run is not replaced unless --restart.
    let again = prepare_merge(&args).expect("the same merge again");
    assert_eq!(again.prepared.replayed(), imported);
    drop(again);
    let other = tempfile::tempdir().unwrap();
    let mut other_settings = settings(other.path(), Shard::WHOLE);
    other_settings.max_new_tokens = 32;
    run_with(
        &other_settings,
        &mut ScriptedModel::new(),
        &RunControl::default(),
    )
    .expect("another run");
    let over_other = MergeOptions {
        out: other.path().into(),
        ..args.clone()
    };
    match prepare_merge(&over_other).unwrap_err() {
        MergeError::Pipeline(e @ PipelineError::FingerprintMismatch { .. }) => {
            assert!(e.to_string().contains("--restart"), "{e}")
        }
        other => panic!("{other}"),
    }
    let replaced = MergeOptions {
        restart: true,
        ..over_other
    };
    // Only the shards' generations: the other run's journal is gone.
    let restarted = prepare_merge(&replaced).expect("restart");
    assert_eq!(restarted.prepared.replayed(), imported);

    let missing = MergeOptions {
        shards: vec![dirs[0].path().into(), dirs[2].path().into()],
        ..args.clone()
    };
    let err = prepare_merge(&missing).unwrap_err();
    assert!(
        matches!(&err, MergeError::Coverage(m) if m == "missing 1/3"),
        "{err}"
    );
    // Shards that do not cover the input are a usage error.
    assert_eq!(
        verisample::cli::error_exit_code(&anyhow::Error::new(err)),
        2
    );
    let twice = MergeOptions {
        shards: vec![
            dirs[0].path().into(),
            dirs[1].path().into(),
            dirs[1].path().into(),
        ],
        ..args.clone()
    };
    assert!(matches!(
        prepare_merge(&twice).unwrap_err(),
        MergeError::Coverage(_)
    ));
    // A user's own non-empty folder is not overwritten by a merge unless --force.
    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(foreign.path().join("README.md"), "my notes").unwrap();
    let into_foreign = MergeOptions {
        out: foreign.path().into(),
        ..args.clone()
    };
    match prepare_merge(&into_foreign).unwrap_err() {
        MergeError::Out(e) => assert!(e.to_string().contains("README.md"), "{e}"),
        other => panic!("{other}"),
    }
    let forced = MergeOptions {
        force: true,
        ..into_foreign
    };
    assert!(prepare_merge(&forced).is_ok());
    // Nor may the merged output sit inside the input dataset folder.
    let inside = MergeOptions {
        out: data.path().join("merged"),
        ..args
    };
    match prepare_merge(&inside).unwrap_err() {
        MergeError::Out(e) => assert!(e.to_string().contains("inside the input"), "{e}"),
        other => panic!("{other}"),
    }
}

#[test]
fn merge_into_one_of_the_shard_folders_is_refused_and_keeps_its_journal() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for (i, d) in dirs.iter().enumerate() {
        run_job(d.path(), Shard { index: i, count: 2 });
    }
    let journal = dirs[1].path().join("journal.bin");
    let before = std::fs::read(&journal).unwrap();
    let args = MergeOptions {
        shards: vec![dirs[0].path().into(), dirs[1].path().into()],
        // Same folder, spelled differently.
        out: dirs[1].path().join("."),
        data: None,
        force: false,
        restart: false,
        progress: None,
        quiet: true,
    };
    let err = prepare_merge(&args).unwrap_err();
    assert!(matches!(err, MergeError::OutIsShard(_)), "{err}");
    let code = verisample::cli::error_exit_code(&anyhow::Error::new(err));
    assert_eq!(code, 2);
    assert_eq!(std::fs::read(&journal).unwrap(), before);
    // Nor inside one: its split folder (which the merge would fill with the merged splits), or
    // a folder not made yet below it.
    let splits = dirs[0].path().join("data");
    let split_files = std::fs::read_dir(&splits).unwrap().count();
    assert!(split_files > 0);
    for out in [splits.clone(), dirs[1].path().join("merged/deeper")] {
        let inside = MergeOptions {
            out: out.clone(),
            ..args.clone()
        };
        let err = prepare_merge(&inside).unwrap_err();
        assert!(matches!(err, MergeError::OutIsShard(_)), "{out:?}: {err}");
        assert!(err.to_string().contains("inside one"), "{err}");
        let code = verisample::cli::error_exit_code(&anyhow::Error::new(err));
        assert_eq!(code, 2);
    }
    assert_eq!(std::fs::read_dir(&splits).unwrap().count(), split_files);
    assert!(!dirs[1].path().join("merged").exists());
    assert_eq!(std::fs::read(&journal).unwrap(), before);
}

#[test]
fn a_merge_is_not_stopped_by_the_sum_of_its_shards_errors() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("mixed.parquet"), b"the mixed rows").unwrap();
    let input_files = hash_input_files(data.path()).unwrap();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut errors = 0;
    for (index, d) in dirs.iter().enumerate() {
        let mut s = settings(d.path(), Shard { index, count: 2 });
        s.max_errors = Some(5);
        let shard = run_hashing(
            &s,
            &mut ScriptedModel::new(),
            &RunControl::default(),
            input_files.clone(),
        )
        .expect("each shard within its --max-errors 5");
        errors += shard.stats.errors;
    }
    assert!(errors > 5, "{errors}");
    let merged = tempfile::tempdir().unwrap();
    let plan = prepare_merge(&MergeOptions {
        shards: dirs.iter().map(|d| d.path().into()).collect(),
        out: merged.path().into(),
        data: Some(data.path().into()),
        force: false,
        restart: false,
        progress: None,
        quiet: true,
    })
    .expect("merge plan");
    let mut engine = JournalOnly {
        engine_version: plan.engine_version.clone(),
        refused_images: plan.refused_images.clone(),
    };
    let report = run(
        plan.prepared,
        Backends {
            source: &MemSource(mixed_rows()),
            generator: &mut engine,
            decisions: &StandardDecisions::default(),
            sink: &mut JsonlSink::new(merged.path()),
        },
        &RunControl::default(),
    )
    .expect("the merge finds no new error: the shards' are theirs");
    assert_eq!(report.stats.errors, errors);
}
