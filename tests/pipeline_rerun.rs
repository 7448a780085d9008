//! Reruns into a finished output with the test doubles: settings that state a default
//! explicitly are the same run (it resumes, generating nothing), a real change is refused
//! naming it.

mod pipeline_support;

use pipeline_support::*;
use verisample::pipeline::{prepare, PipelineError, RunControl};
use verisample::settings::fingerprint;
use verisample::shard::Shard;

#[test]
fn a_default_verifier_stated_explicitly_resumes_and_another_one_is_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), Shard::WHOLE);
    run_job(dir.path(), Shard::WHOLE);
    // `alnum` is the default of every family and OrandCar's own: stating it changes nothing.
    s.verifiers = vec![
        "OrandCar=alnum".into(),
        "alnum".into(),
        "TestSet=alnum".into(),
    ];
    let mut model = ScriptedModel::new();
    let rerun = run_with(&s, &mut model, &RunControl::default()).expect("same run: resumes");
    assert_eq!(model.completed, 0, "nothing generated again");
    assert_eq!(rerun.replayed_results, TOTAL_GENERATIONS);
    // Another verifier for a family of the input is a change, named as such.
    s.verifiers = vec!["OrandCar=alnum".into(), "TestSet=exact".into()];
    let err = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap_err();
    match err {
        PipelineError::FingerprintMismatch { changed, .. } => {
            assert_eq!(changed, ["--verifier changed: none → TestSet=exact"]);
        }
        other => panic!("{other}"),
    }
}

/// A `--restart` removes the earlier run's dataset card with its splits, before any work: a
/// restart that stops early (here at `--max-errors`; a kill alike) leaves no card whose
/// configs name split files that are gone (`load_dataset` would fail on it).
#[test]
fn a_restart_that_stops_early_leaves_no_card_of_the_earlier_splits() {
    let dir = tempfile::tempdir().unwrap();
    run_job(dir.path(), Shard::WHOLE);
    let card = dir.path().join("README.md");
    std::fs::write(
        &card,
        "---\nconfigs:\n- config_name: OrandCar_RS_think\n---\n",
    )
    .unwrap();
    let mut s = settings(dir.path(), Shard::WHOLE);
    s.restart = true;
    s.max_errors = Some(4);
    let err = run_with(&s, &mut ScriptedModel::new(), &RunControl::default()).unwrap_err();
    assert!(matches!(err, PipelineError::TooManyErrors { .. }), "{err}");
    assert!(!card.exists(), "the earlier card outlived its splits");
    assert!(dir.path().join("errors.jsonl").exists());
}
