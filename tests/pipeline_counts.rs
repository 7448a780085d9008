//! What a run counts, with the test doubles (scripted model, in-memory input, JSON-lines
//! writer): duplicates are found within a family only, so a repeat in another family keeps
//! its row in that family's splits, and shards decide alike; the headline's "of M questions"
//! leaves out the questions of rows refused whole, as README says; a repeated judge prompt
//! is generated once.

mod pipeline_support;

use pipeline_support::*;
use verisample::pipeline::{RunControl, RunReport};
use verisample::record::{InputRow, RowError};
use verisample::settings::Settings;
use verisample::shard::Shard;

/// Run `rows` with the scripted model into `s.out`.
fn run_rows(s: &Settings, rows: &[Result<InputRow, RowError>]) -> RunReport {
    let mut model = ScriptedModel::new();
    run_rows_with(s, rows, &mut model, &RunControl::default()).unwrap()
}

/// A row of `family` about the image of `seed` asking the scripted model to say `7` (reference
/// `7`): the same image, question and reference whatever the family.
fn seven(index: usize, family: &str, seed: u8) -> Result<InputRow, RowError> {
    let mut r = row("f.parquet", index, seed, vec![qa("7", "7")]).unwrap();
    r.family = Some(family.into());
    Ok(r)
}

/// `(position, duplicate_of.position)` of each duplicate in `out`'s `cleaning.jsonl`.
fn duplicates(out: &std::path::Path) -> Vec<(u64, u64)> {
    let mut d: Vec<(u64, u64)> = lines(&out.join("cleaning.jsonl"))
        .iter()
        .filter(|l| l["reason"] == "duplicate")
        .map(|l| {
            (
                l["position"].as_u64().unwrap(),
                l["duplicate_of"]["position"].as_u64().unwrap(),
            )
        })
        .collect();
    d.sort_unstable();
    d
}

#[test]
fn a_repeat_in_another_family_keeps_its_row_and_shards_decide_alike() {
    // Positions 0 and 1: the same image, question and reference in families A and B; 2 and 3
    // repeat them within their family; 4 is another image.
    let rows = vec![
        seven(0, "A", 1),
        seven(1, "B", 1),
        seven(2, "A", 1),
        seven(3, "B", 1),
        seven(4, "A", 2),
    ];
    let whole = tempfile::tempdir().unwrap();
    let report = run_rows(&settings(whole.path(), Shard::WHOLE), &rows);
    assert_eq!(report.stats.split_items.get("A_RS_nothink"), Some(&2));
    assert_eq!(
        report.stats.split_items.get("B_RS_nothink"),
        Some(&1),
        "family B's split keeps its row: {:?}",
        report.stats.split_items
    );
    assert_eq!(report.stats.cleaning_drops.get("duplicate"), Some(&2));
    assert_eq!(duplicates(whole.path()), [(2, 0), (3, 1)]);
    // Each shard marks duplicates over the whole input: shard 1's position 3 repeats its own
    // position 1, shard 0's position 2 its own position 0; together they are the whole run's.
    let mut from_shards = Vec::new();
    for index in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        run_rows(&settings(dir.path(), Shard { index, count: 2 }), &rows);
        from_shards.extend(duplicates(dir.path()));
    }
    from_shards.sort_unstable();
    assert_eq!(from_shards, duplicates(whole.path()));
    // Shard 2/3 holds position 2 alone: its repeat of position 0 (shard 0's) is still found.
    let dir = tempfile::tempdir().unwrap();
    run_rows(&settings(dir.path(), Shard { index: 2, count: 3 }), &rows);
    assert_eq!(duplicates(dir.path()), [(2, 0)]);
}

#[test]
fn the_headline_counts_no_question_of_a_row_refused_whole() {
    let mut rows = vec![seven(0, "A", 1)];
    // One more question of a readable row: counted.
    if let Ok(r) = rows[0].as_mut() {
        r.qa.push(qa("8", "8"));
    }
    // Three questions about an image that does not decode.
    let mut corrupt = row(
        "f.parquet",
        1,
        2,
        vec![qa("1", "1"), qa("2", "2"), qa("3", "3")],
    )
    .unwrap();
    if let Some(b) = corrupt.image.bytes.as_mut() {
        b.truncate(b.len() / 2);
    }
    rows.push(Ok(corrupt));
    // Two questions of a row whose family cannot name a split.
    let mut bad_family = row("f.parquet", 2, 3, vec![qa("4", "4"), qa("5", "5")]).unwrap();
    bad_family.family = Some("Bad/../x".into());
    rows.push(Ok(bad_family));
    // A row that cannot be read at all.
    rows.push(Err(RowError {
        file: "f.parquet".into(),
        row: Some(3),
        rows: None,
        field: "qa".into(),
        message: "not a list".into(),
    }));
    let dir = tempfile::tempdir().unwrap();
    let report = run_rows(&settings(dir.path(), Shard::WHOLE), &rows);
    assert_eq!(report.stats.errors, 3);
    assert_eq!(report.stats.input_items, 2);
    let summary = verisample::report::summary::Summary::new(&report.stats, dir.path()).text();
    assert!(
        summary.starts_with("accepted 2 of 2 questions (100.0 %)"),
        "{summary}"
    );
}

/// Run `rows` with `model` into `s.out` under `control`.
fn run_rows_with(
    s: &Settings,
    rows: &[Result<InputRow, RowError>],
    model: &mut ScriptedModel,
    control: &RunControl,
) -> Result<RunReport, verisample::pipeline::PipelineError> {
    pipeline_support::run_rows(s, rows, (model, control), Vec::new())
}

/// Issue 45 item 4: the judge is greedy, so a repeated (question, reference, candidate) gets
/// one generation and every later item reuses its verdict; the outputs are those of a run that
/// judged each (the same verdict text everywhere), counted as reused, and a run stopped inside
/// the judge pass resumes to the same bytes.
#[test]
fn a_repeated_judge_prompt_is_generated_once_and_its_verdict_reused() {
    // Three images asked the same question, each answered 1234 against the reference 1235:
    // one judge prompt; a fourth image answered 99 against 98: a second.
    let mut rows: Vec<_> = (0..3)
        .map(|i| row("f.parquet", i, i as u8 + 1, vec![qa("1234", "1235")]))
        .collect();
    rows.push(row("f.parquet", 3, 9, vec![qa("99", "98")]));
    let whole = tempfile::tempdir().unwrap();
    let s = settings(whole.path(), Shard::WHOLE);
    let mut model = ScriptedModel::new();
    let report = run_rows_with(&s, &rows, &mut model, &RunControl::default()).unwrap();
    assert_eq!(
        model.completed,
        4 + 2,
        "4 answers, 2 distinct judge prompts"
    );
    assert_eq!(report.stats.judge.judged, 4);
    assert_eq!(report.stats.judge.reused, 2);
    assert_eq!(report.stats.reject_reasons.get("wrong_answer"), Some(&4));
    // Every judged item records the verdict text, the reused ones included.
    let judged: Vec<String> = lines(&whole.path().join("generations.jsonl"))
        .iter()
        .map(|l| l["judge"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(judged.len(), 4);
    assert!(judged.iter().all(|t| t.ends_with("WRONG")), "{judged:?}");
    let want = deterministic_outputs(whole.path());

    // Stopped after the answers and the first judge prompt's generation, then resumed: the
    // second prompt is generated, the first's verdict replayed and reused again.
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), Shard::WHOLE);
    let control = RunControl::default();
    let mut stopped = ScriptedModel::new();
    stopped.max_batch = 1;
    stopped.stop_after = Some((4, control.stop.clone()));
    assert!(run_rows_with(&s, &rows, &mut stopped, &control).is_err());
    let mut resumed = ScriptedModel::new();
    let report = run_rows_with(&s, &rows, &mut resumed, &RunControl::default()).unwrap();
    assert_eq!(resumed.completed, 1, "only the second judge prompt is left");
    assert_eq!(report.stats.judge.reused, 2);
    assert_same_outputs(&want, &deterministic_outputs(dir.path()));
}
