//! The engine's behaviour end to end, with the arithmetic mock model of `common::mock`: every
//! generated token is checked against the mock's direct (cache-free, batch-free) reference.

mod common;

use std::collections::BTreeMap;

use common::mock::{image, reference, reference_rows, MockModel, MockProcessor};
use verisample::engine::{
    Completion, Engine, EngineConfig, EngineError, FinishReason, ImageInput, KvBudget, Request,
};

const MAX_NEW: usize = 24;
const JUDGE: &str =
    "You are a strict judge. Compare the candidate with the reference; never solve it yourself.";

fn cfg(max_batch: usize, blocks: usize, prefix_caching: bool) -> EngineConfig {
    EngineConfig {
        block_size: 4,
        kv_budget: KvBudget::Blocks(blocks),
        max_batch,
        max_batch_tokens: 64,
        max_new_tokens: MAX_NEW,
        prefix_caching,
        ..Default::default()
    }
}

/// `c` with inputs prepared on the engine thread: the schedule, and so the counters of
/// `stats()`, do not depend on the input threads' timing.
fn inline(c: EngineConfig) -> EngineConfig {
    EngineConfig {
        inline_inputs: true,
        ..c
    }
}

fn engine(c: EngineConfig) -> Engine<MockModel, MockProcessor> {
    Engine::new(MockModel::default(), MockProcessor::default(), c).expect("engine")
}

fn req(id: u64, system: Option<&str>, image: Option<ImageInput>, text: &str) -> Request {
    Request {
        id,
        system: system.map(str::to_string),
        image,
        text: text.to_string(),
        max_new_tokens: None,
        ..Default::default()
    }
}

/// 24 items: 8 judge-style text-only requests sharing a system prompt, 16 image questions
/// over 6 images (two questions each, some rows duplicated).
fn items(id0: u64) -> Vec<Request> {
    let mut out = vec![];
    for i in 0..8u64 {
        let text = format!(
            "Question {i}: is {} the same as {}?",
            1000 + i * 37,
            1000 + i * 41
        );
        out.push(req(id0 + i, Some(JUDGE), None, &text));
    }
    let questions = [
        "What is written in the image?",
        "Read the amount, digits only.",
    ];
    for i in 0..16u64 {
        let img = image((i % 6) as u8, 5 + (i % 6) as usize * 3);
        out.push(req(
            id0 + 8 + i,
            None,
            Some(img),
            questions[(i / 6 % 2) as usize],
        ));
    }
    out
}

fn run(e: &mut Engine<MockModel, MockProcessor>, reqs: Vec<Request>) -> BTreeMap<u64, Completion> {
    let mut got = BTreeMap::new();
    e.generate(reqs, |c| {
        assert!(got.insert(c.id, c).is_none(), "one completion per id");
        Ok(())
    })
    .expect("generate");
    got
}

fn assert_matches_reference(reqs: &[Request], got: &BTreeMap<u64, Completion>) {
    assert_eq!(got.len(), reqs.len());
    for r in reqs {
        let c = &got[&r.id];
        let (want, reason) = reference(r, r.max_new_tokens.unwrap_or(MAX_NEW));
        assert_eq!(c.token_ids, want, "request {}", r.id);
        assert_eq!(c.finish_reason, reason, "request {}", r.id);
        assert_eq!(c.generated_tokens, want.len());
    }
}

/// A fixed permutation: odd positions reversed, then even ones.
fn shuffled(mut v: Vec<Request>) -> Vec<Request> {
    let mut odd: Vec<Request> = vec![];
    let mut even = vec![];
    for (i, r) in v.drain(..).enumerate() {
        if i % 2 == 1 {
            odd.push(r)
        } else {
            even.push(r)
        }
    }
    odd.reverse();
    odd.extend(even);
    odd
}

/// The engine carries a model's position rows without knowing them: a 1-D RoPE model (one
/// row of consecutive ids) runs through the same scheduler, batches and cache as M-RoPE's
/// three rows, matches its own reference at every batch size, and differs from the 3-row
/// model's tokens (the rows reach the model). A prepared input with the wrong number of rows
/// fails alone.
#[test]
fn a_one_row_position_model_runs_through_the_same_engine() {
    let one_row = |max_batch| {
        let mut model = MockModel::default();
        model.rows = 1;
        let mut processor = MockProcessor::default();
        processor.rows = 1;
        Engine::new(model, processor, cfg(max_batch, 512, true)).expect("engine")
    };
    let mut first = None;
    for max_batch in [1, 5, 24] {
        let got = run(&mut one_row(max_batch), items(0));
        for r in items(0) {
            let (want, reason) = reference_rows(&r, MAX_NEW, 1);
            assert_eq!(got[&r.id].token_ids, want, "request {}", r.id);
            assert_eq!(got[&r.id].finish_reason, reason, "request {}", r.id);
        }
        let toks: BTreeMap<u64, Vec<u32>> =
            got.into_iter().map(|(k, c)| (k, c.token_ids)).collect();
        match &first {
            None => first = Some(toks),
            Some(f) => assert_eq!(f, &toks, "max_batch {max_batch}"),
        }
    }
    let three = run(&mut engine(cfg(24, 512, true)), items(0));
    let differ = three
        .iter()
        .filter(|(id, c)| first.as_ref().unwrap()[id] != c.token_ids)
        .count();
    assert!(
        differ > 0,
        "one and three position rows gave the same tokens"
    );
    // A processor that prepares three rows for a one-row model: refused per request.
    let mut model = MockModel::default();
    model.rows = 1;
    let mut e = Engine::new(model, MockProcessor::default(), cfg(4, 512, true)).expect("engine");
    let got = run(&mut e, items(0)[..2].to_vec());
    for c in got.values() {
        assert_eq!(c.finish_reason, FinishReason::Error);
        assert!(
            c.error.as_deref().unwrap_or("").contains("takes 1 rows"),
            "{:?}",
            c.error
        );
    }
}

#[test]
fn same_tokens_for_any_batch_size_and_input_order() {
    let mut first: Option<BTreeMap<u64, Vec<u32>>> = None;
    for (max_batch, shuffle) in [(1, false), (5, false), (24, false), (5, true), (24, true)] {
        let reqs = items(0);
        let mut e = engine(cfg(max_batch, 512, true));
        let got = run(
            &mut e,
            if shuffle {
                shuffled(items(0))
            } else {
                items(0)
            },
        );
        assert_matches_reference(&reqs, &got);
        assert!(
            e.model()
                .max_seqs_in_step
                .load(std::sync::atomic::Ordering::Relaxed)
                <= max_batch
        );
        assert_eq!(e.num_free_blocks(), 512, "everything released");
        let toks: BTreeMap<u64, Vec<u32>> =
            got.into_iter().map(|(k, c)| (k, c.token_ids)).collect();
        match &first {
            None => first = Some(toks),
            Some(f) => assert_eq!(f, &toks, "max_batch {max_batch}, shuffled {shuffle}"),
        }
    }
    assert_eq!(engine(cfg(1, 64, true)).config().max_batch, 1);
}

#[test]
fn duplicate_image_prompt_rows_share_vision_and_prefix() {
    let dup = || req(0, None, Some(image(9, 14)), "What is written in the image?");
    let mut reqs = vec![];
    for i in 0..6 {
        let mut r = dup();
        r.id = i;
        r.max_new_tokens = Some(40);
        reqs.push(r);
    }
    for i in 6..10u64 {
        reqs.push(req(
            i,
            None,
            Some(image(20, 9)),
            &format!("Question number {i}"),
        ));
    }
    let (dup_ref, _) = reference(&reqs[0], 40);
    assert!(
        dup_ref.len() >= 20,
        "the duplicated rows stay alive long enough to overlap"
    );
    let mut e = engine(cfg(16, 512, true));
    let got = run(&mut e, reqs.clone());
    assert_matches_reference(&reqs, &got);
    assert_eq!(
        e.model()
            .images_encoded
            .load(std::sync::atomic::Ordering::Relaxed),
        2,
        "one vision forward per distinct image"
    );
    let prompt = got[&0].prompt_tokens;
    assert_eq!(got[&0].cached_prompt_tokens, 0);
    for i in 1..6 {
        assert_eq!(
            got[&i].cached_prompt_tokens,
            (prompt - 1) / 4 * 4,
            "row {i}"
        );
    }
}

#[test]
fn prefix_caching_on_and_off_give_identical_tokens() {
    let mut reqs = items(0);
    reqs.extend(items(100)); // every prompt twice, under other ids
    let mut on = engine(inline(cfg(8, 512, true)));
    let got_on = run(&mut on, reqs.clone());
    let mut off = engine(inline(cfg(8, 512, false)));
    let got_off = run(&mut off, reqs.clone());
    assert_matches_reference(&reqs, &got_on);
    assert_matches_reference(&reqs, &got_off);
    assert!(on.stats().cached_prompt_tokens > 0);
    assert_eq!(off.stats().cached_prompt_tokens, 0);
    assert!(on.stats().prefill_tokens < off.stats().prefill_tokens);
}

#[test]
fn two_batches_of_different_sizes_in_a_row() {
    let mut e = engine(cfg(6, 256, true));
    let a: Vec<Request> = items(0).into_iter().take(7).collect();
    let b: Vec<Request> = items(50).into_iter().skip(4).take(13).collect();
    let got_a = run(&mut e, a.clone());
    assert_matches_reference(&a, &got_a);
    let got_b = run(&mut e, b.clone());
    assert_matches_reference(&b, &got_b);
    assert_eq!(e.num_free_blocks(), 256);
    assert_eq!(e.stats().completed, 20);
}

#[test]
fn a_small_pool_preempts_and_still_finishes_every_sequence_identically() {
    let reqs = items(0);
    // 40 blocks of 4 tokens: a judge prompt (~130 tokens) plus 24 new tokens needs up to 38
    // blocks, an image question up to 16: sequences must take turns.
    let mut e = engine(inline(cfg(24, 40, false)));
    let got = run(&mut e, reqs.clone());
    assert_matches_reference(&reqs, &got);
    assert!(e.stats().preemptions > 0, "the pool forced preemption");
    assert_eq!(e.num_free_blocks(), 40);
}

#[test]
fn per_item_errors_do_not_stop_the_run() {
    let long = "x".repeat(200);
    let reqs = vec![
        req(
            1,
            None,
            Some(ImageInput::new(b"BAD image".to_vec())),
            "What?",
        ),
        req(2, None, None, &long),
        req(3, None, Some(image(1, 8)), "What is written in the image?"),
        req(4, Some(JUDGE), None, "Is 12 equal to 12?"),
    ];
    let mut e = engine(cfg(4, 40, true));
    let got = run(&mut e, reqs.clone());
    assert_eq!(got[&1].finish_reason, FinishReason::Error);
    assert_eq!(got[&1].error.as_deref(), Some("undecodable image"));
    assert_eq!(got[&2].finish_reason, FinishReason::Error);
    assert_eq!(got[&2].prompt_tokens, 202);
    assert_eq!(
        got[&2].error.as_deref(),
        Some("prompt of 202 tokens needs 51 KV cache blocks; the pool has 40")
    );
    // Only the pool's limit may be lifted by a larger pool: the bad image may not.
    assert!(got[&2].exceeds_capacity && !got[&1].exceeds_capacity);
    assert_matches_reference(
        &reqs[2..],
        &got.into_iter().filter(|(k, _)| *k >= 3).collect(),
    );
    assert_eq!(e.stats().failed, 2);
}

/// A prompt longer than the model's context fails alone before any prefill; the others run.
#[test]
fn a_prompt_longer_than_the_context_is_a_per_item_error() {
    let mut model = MockModel::default();
    model.context = Some(50);
    let mut e = Engine::new(model, MockProcessor::default(), cfg(4, 200, true)).expect("engine");
    let reqs = vec![
        req(1, None, None, &"x".repeat(100)),
        req(2, None, None, &"x".repeat(48)),
        req(3, None, Some(image(1, 8)), "What is written in the image?"),
    ];
    let got = run(&mut e, reqs.clone());
    assert_eq!(got[&1].finish_reason, FinishReason::Error);
    assert_eq!(got[&1].prompt_tokens, 102);
    assert_eq!(
        got[&1].error.as_deref(),
        Some("prompt of 102 tokens exceeds the model's context of 50")
    );
    // Exactly the context (48 characters + 2 tokens = 50) is still accepted.
    assert_ne!(got[&2].finish_reason, FinishReason::Error);
    assert_matches_reference(
        &reqs[1..],
        &got.into_iter().filter(|(k, _)| *k >= 2).collect(),
    );
    assert_eq!(e.stats().failed, 1);
}

#[test]
fn a_failing_callback_stops_generate_and_the_next_call_starts_clean() {
    let mut e = engine(cfg(4, 128, true));
    let mut seen = 0;
    let err = e
        .generate(items(0), |_| {
            seen += 1;
            if seen == 3 {
                return Err("journal full".into());
            }
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Callback(ref m) if m.to_string() == "journal full"),
        "{err}"
    );
    assert_eq!(seen, 3);
    assert_eq!(
        e.num_free_blocks(),
        128,
        "unfinished sequences were dropped"
    );
    let reqs = items(300);
    let got = run(&mut e, reqs.clone());
    assert_matches_reference(&reqs, &got);
}

#[test]
fn a_raised_stop_flag_stops_between_steps_mid_sequence_and_the_next_call_starts_clean() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut e = engine(cfg(4, 128, true));
    let flag = Arc::new(AtomicBool::new(false));
    e.set_stop_flag(flag.clone());
    let mut seen = 0;
    let err = e
        .generate(items(0), |_| {
            seen += 1;
            // Raise the flag from the first completion: sequences still decoding must not
            // run to their end.
            flag.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, EngineError::Stopped), "{err}");
    assert!(
        seen < items(0).len(),
        "stopped before every item finished, saw {seen}"
    );
    assert_eq!(
        e.num_free_blocks(),
        128,
        "unfinished sequences were dropped"
    );
    flag.store(false, Ordering::SeqCst);
    let reqs = items(300);
    let got = run(&mut e, reqs.clone());
    assert_matches_reference(&reqs, &got);
}

#[test]
fn max_new_tokens_truncates_and_text_is_decoded() {
    let mut r = req(7, None, Some(image(3, 11)), "What is written in the image?");
    r.max_new_tokens = Some(3);
    let (want, reason) = reference(&r, 3);
    assert!(
        reason == FinishReason::Length && want.len() == 3,
        "reference runs into the limit"
    );
    let mut e = engine(cfg(4, 64, true));
    let got = run(&mut e, vec![r]);
    let c = &got[&7];
    assert_eq!(c.finish_reason, FinishReason::Length);
    assert!(!c.exceeds_capacity, "cut by the request's own limit");
    assert_eq!(c.token_ids, want);
    let text: Vec<String> = want.iter().map(|t| t.to_string()).collect();
    assert_eq!(c.text, text.join(","));
}

#[test]
fn a_generation_that_fills_the_whole_pool_is_cut_and_marked_as_exceeding_capacity() {
    let mut r = req(8, None, None, "What is written in the image?");
    r.max_new_tokens = Some(200);
    // 10 blocks of 4 tokens: the 31-token prompt fits, the generation runs into the pool's
    // end.
    let mut e = engine(cfg(1, 10, false));
    let got = run(&mut e, vec![r.clone()]);
    let c = &got[&8];
    assert_eq!(c.finish_reason, FinishReason::Length, "{c:?}");
    assert!(c.exceeds_capacity);
    assert!(c.prompt_tokens + c.generated_tokens <= 10 * 4 + 1, "{c:?}");
    assert!(c.generated_tokens > 0, "{c:?}");
    // The same tokens as far as they go: a larger pool runs it further.
    let (want, _) = reference(&r, c.generated_tokens);
    assert_eq!(c.token_ids, want);
}

#[test]
fn a_request_stop_token_ends_only_that_request_with_stop() {
    let plain = req(8, None, Some(image(5, 13)), "What is written in the image?");
    let (want, _) = reference(&plain, MAX_NEW);
    // The second generated token (its first occurrence) becomes this request's stop id.
    let stop = want[1];
    let cut = want.iter().position(|&t| t == stop).unwrap();
    assert!(cut + 1 < want.len(), "the stop id cuts the reference short");
    let stopped = Request {
        id: 9,
        stop_token_ids: vec![stop],
        ..plain.clone()
    };
    let mut e = engine(cfg(4, 64, true));
    let got = run(&mut e, vec![plain.clone(), stopped]);
    assert_eq!(got[&9].finish_reason, FinishReason::Stop);
    assert_eq!(got[&9].token_ids, want[..=cut].to_vec());
    assert_eq!(
        got[&8].token_ids, want,
        "the other request ignores the stop id"
    );
}

#[test]
fn a_generated_image_placeholder_ends_only_that_sequence_with_an_error() {
    let hit = (0..500u64)
        .map(|i| req(i, None, None, &format!("Tell me about {i}")))
        .find(|r| reference(r, MAX_NEW).1 == FinishReason::Error)
        .expect("some prompt makes the mock generate the placeholder");
    let (want, _) = reference(&hit, MAX_NEW);
    let other = req(
        9999,
        None,
        Some(image(4, 10)),
        "What is written in the image?",
    );
    let mut e = engine(cfg(4, 128, true));
    let got = run(&mut e, vec![hit.clone(), other.clone()]);
    let c = &got[&hit.id];
    assert_eq!(c.finish_reason, FinishReason::Error);
    assert_eq!(c.token_ids, want);
    assert_eq!(
        c.error.as_deref(),
        Some("generated the image placeholder token 3")
    );
    assert_matches_reference(
        &[other],
        &got.into_iter().filter(|(k, _)| *k == 9999).collect(),
    );
}

/// Without a fixed batch (a GPU run without `--max-batch`) the engine picks one from its pool:
/// as many sequences of the generation budget plus a typical prompt as the pool holds, within
/// [16, cap], and reports it. Catches: the pick computed before the pool is sized, or ignored.
#[test]
fn auto_max_batch_is_picked_from_the_pool() {
    use verisample::engine::config::{auto_max_batch, AUTO_PROMPT_TOKENS};
    let auto = |blocks, cap| {
        let e = engine(EngineConfig {
            auto_max_batch: true,
            ..cfg(cap, blocks, true)
        });
        (
            e.config().max_batch,
            e.stats().max_batch,
            e.stats().max_batch_auto,
        )
    };
    // 40000 blocks of 4 tokens: 160000 / (24 + 1024) = 152 sequences.
    assert_eq!(160_000 / (MAX_NEW + AUTO_PROMPT_TOKENS), 152);
    assert_eq!(auto(40_000, 256), (152, 152, true));
    assert_eq!(auto(40_000, 100), (100, 100, true));
    assert_eq!(auto(100, 256), (16, 16, true));
    assert_eq!(auto_max_batch(160_000, MAX_NEW, 256), 152);
    let fixed = engine(cfg(7, 100, true));
    assert_eq!(
        (fixed.config().max_batch, fixed.stats().max_batch_auto),
        (7, false)
    );
}
