//! A family that writes its final answer in a marked place (GLM-4.1V: boxed inside
//! `<answer>`), through the whole pipeline with the test doubles: the verifier and the judge
//! see the box, the splits keep the whole text after the reasoning and name the format in
//! `clean_meta`, `generations.jsonl` records it, and `verify` recomputes every decision from
//! the splits alone.

mod pipeline_support;

use pipeline_support::*;
use verisample::pipeline::RunControl;
use verisample::record::{AcceptedQa, OutputRow, RejectedQa};
use verisample::shard::Shard;
use verisample::verify_output::{recheck_family, FamilySplits, RecheckSettings};

fn split<Q: serde::de::DeserializeOwned>(out: &std::path::Path, name: &str) -> Vec<OutputRow<Q>> {
    let path = out.join(format!("data/TestSet_{name}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_boxed_answer_is_verified_as_the_answer_and_verify_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let rows = vec![
        // The box holds the reference; the words around it name another number.
        row("f.parquet", 0, 1, vec![qa("glm:1432", "1432")]),
        // A wrong box: rejected, whatever the words around it say.
        row("f.parquet", 1, 2, vec![qa("glm:1482", "1432")]),
    ];
    let s = settings(dir.path(), Shard::WHOLE);
    let mut model = ScriptedModel::new();
    run_rows(&s, &rows, (&mut model, &RunControl::default()), Vec::new()).expect("run");

    let think: Vec<OutputRow<AcceptedQa>> = split(dir.path(), "RS_think");
    let nothink: Vec<OutputRow<AcceptedQa>> = split(dir.path(), "RS_nothink");
    let rejected: Vec<OutputRow<RejectedQa>> = split(dir.path(), "rejected");
    assert_eq!((think.len(), nothink.len(), rejected.len()), (1, 1, 1));
    let accepted = &think[0].qa[0];
    assert_eq!(accepted.answer, "1432");
    assert_eq!(accepted.accepted_by, "verifier:alnum:whole");
    assert_eq!(
        accepted.vlm_answer,
        "<answer>It might be 7, but it reads <|begin_of_box|>1432<|end_of_box|></answer>"
    );
    let wrong = &rejected[0].qa[0];
    assert_eq!(wrong.reason, "wrong_answer");
    assert!(wrong
        .wrong_vlm
        .contains("<|begin_of_box|>1482<|end_of_box|>"));
    // The judge was asked about the box, not the sentence around it.
    assert!(wrong.judge_raw.as_deref().unwrap().contains("WRONG"));
    for meta in [&think[0].clean_meta, &rejected[0].clean_meta] {
        let v: serde_json::Value = serde_json::from_str(meta).unwrap();
        assert_eq!(v["answer_format"], "glm_box", "{meta}");
    }
    let generations = lines(&dir.path().join("generations.jsonl"));
    assert_eq!(generations.len(), 2);
    for g in &generations {
        assert_eq!(g["answer"]["answer_format"], "glm_box", "{g}");
    }

    let splits = FamilySplits {
        family: "TestSet",
        think: &think,
        nothink: &nothink,
        rejected: &rejected,
    };
    let report = recheck_family(&splits, &RecheckSettings::default());
    assert!(report.is_clean(), "{}", report.to_human(0));

    // Without the format in clean_meta, verify reads the whole text and finds the accepted
    // entry's answer is not what the verifier makes of it.
    let mut plain = think.clone();
    plain[0].clean_meta = plain[0]
        .clean_meta
        .replace(r#""answer_format":"glm_box","#, "");
    let splits = FamilySplits {
        think: &plain,
        ..splits
    };
    assert!(!recheck_family(&splits, &RecheckSettings::default()).is_clean());
}
