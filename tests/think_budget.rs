//! `--think-budget` in the engine, on the default model (`assets/model`, trained to reason
//! "digits: …" inside `<think>` then answer) and the real OrandCar val JPEGs: a reasoning cut
//! at the budget goes on with the family's early-stopping text, then the model answers;
//! budgets it never reaches change nothing; the tokens do not depend on the batch.

mod shared_data;

use std::collections::BTreeMap;
use std::path::PathBuf;

use candle_core::{DType, Device};
use verisample::engine::generation::GenerationConfig;
use verisample::engine::vl::{load_engine, LoadedEngine};
use verisample::engine::{Completion, EngineConfig, ImageInput, InputProcessor, KvBudget, Request};

const QUESTION: &str = "What is written in the image? Answer this question using the text in the image directly without any other context. Answer in short without any other content.";
const MAX_NEW: usize = 64;

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/model")
}

fn engine(max_batch: usize) -> LoadedEngine {
    let dir = model_dir();
    load_engine(
        &dir,
        DType::F32,
        (&Device::Cpu, verisample_models::AttentionPath::Native),
        EngineConfig {
            kv_budget: KvBudget::Blocks(512),
            max_batch,
            max_new_tokens: MAX_NEW,
            ..Default::default()
        },
        &GenerationConfig::resolve(&dir, true, None).expect("generation_config.json"),
        Default::default(),
    )
    .expect("load the default model")
}

/// The first 12 val JPEGs asked the OrandCar question in thinking mode, with `budget`.
fn requests(data: &std::path::Path, budget: Option<usize>) -> Vec<Request> {
    let mut names: Vec<_> = std::fs::read_dir(data.join("orand-car-a/val"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .into_iter()
        .take(12)
        .enumerate()
        .map(|(i, p)| Request {
            id: i as u64,
            image: Some(ImageInput::new(std::fs::read(p).unwrap())),
            text: QUESTION.into(),
            enable_thinking: Some(true),
            think_budget: budget,
            ..Default::default()
        })
        .collect()
}

fn run(e: &mut LoadedEngine, reqs: Vec<Request>) -> BTreeMap<u64, Completion> {
    let mut got = BTreeMap::new();
    e.generate(reqs, |c| {
        assert!(c.error.is_none(), "{c:?}");
        got.insert(c.id, c);
        Ok(())
    })
    .expect("generate");
    got
}

#[test]
fn a_budget_ends_the_reasoning_with_the_early_stopping_text() {
    let Some(data) = shared_data::require_shared_data() else {
        return;
    };
    let mut one = engine(1);
    let think = one
        .processor()
        .think_tokens()
        .expect("think tokens")
        .clone();
    let free = run(&mut one, requests(&data, None));
    // The model's own reasoning: it opens `<think>` itself (its template pre-fills nothing),
    // and reasons up to its first `</think>`.
    let open = think.open.expect("`<think>` is one token");
    let at = |c: &Completion, t: u32| c.token_ids.iter().position(|&x| x == t);
    let starts: BTreeMap<u64, usize> = free
        .iter()
        .map(|(id, c)| (*id, at(c, open).expect("opens") + 1))
        .collect();
    let lens: Vec<usize> = free
        .iter()
        .map(|(id, c)| at(c, think.close).expect("closes") - starts[id])
        .collect();
    let budget = 2;
    assert!(lens.iter().all(|&n| n > budget), "{lens:?}");
    assert!(free
        .values()
        .all(|c| !c.prefilled_think && !c.think_budget_hit));

    let cut = run(&mut one, requests(&data, Some(budget)));
    let batched = run(&mut engine(12), requests(&data, Some(budget)));
    for (id, c) in &cut {
        let own = &free[id].token_ids;
        let end = starts[id] + budget;
        assert!(c.think_budget_hit, "request {id}");
        assert_eq!(
            c.token_ids[..end],
            own[..end],
            "request {id}: reasoning kept"
        );
        assert_eq!(
            c.token_ids[end..end + think.stop.len()],
            think.stop[..],
            "request {id}: the early-stopping text follows"
        );
        assert!(
            c.token_ids.len() > end + think.stop.len(),
            "request {id}: the model answers after it: {:?}",
            c.text
        );
        assert!(
            c.text.contains("Considering the limited time by the user"),
            "{:?}",
            c.text
        );
        assert_eq!(
            batched[id].token_ids, c.token_ids,
            "request {id} at batch 12"
        );
        assert!(batched[id].think_budget_hit);
    }

    // A budget no reasoning reaches changes nothing.
    let roomy = run(
        &mut one,
        requests(&data, Some(lens.iter().max().unwrap() + 1)),
    );
    for (id, c) in &roomy {
        assert_eq!(c.token_ids, free[id].token_ids, "request {id}");
        assert!(!c.think_budget_hit);
    }
}
