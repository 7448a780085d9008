//! State-transition tests of the scheduler: admission, block accounting, chunked prefill,
//! preemption order, prefix sharing.

use super::*;
use crate::engine::sequence::SeenTokens;

fn seq(arrival: u64, tokens: Vec<u32>) -> Sequence {
    let n = tokens.len();
    Sequence {
        arrival,
        id: 100 + arrival,
        prompt_positions: vec![(0..n as u32).collect(); 3],
        next_position: n as u32,
        seen: SeenTokens::of(&tokens),
        tokens,
        prompt_len: n,
        images: vec![],
        max_new_tokens: 100,
        stop_token_ids: vec![],
        block_table: vec![],
        num_computed: 0,
        in_prefill: false,
        hashes: vec![],
        preemptions: 0,
        cached_tokens: 0,
        prefilled_think: false,
        think: None,
        sampling: None,
        taken: std::time::Instant::now(),
        first_token: None,
    }
}

fn distinct(arrival: u64, len: usize) -> Sequence {
    seq(
        arrival,
        (0..len as u32).map(|t| t + 1000 * arrival as u32).collect(),
    )
}

fn sched(
    num_blocks: usize,
    block_size: usize,
    max_batch: usize,
    max_tokens: usize,
    caching: bool,
) -> Scheduler {
    Scheduler::new(
        SchedulerConfig {
            max_batch,
            max_batch_tokens: max_tokens,
            watermark_blocks: 0,
        },
        BlockManager::new(num_blocks, block_size, caching),
    )
}

/// Run the planned step as if the model sampled `token` for every sampling sequence.
fn run(s: &mut Scheduler, token: u32) -> Schedule {
    let plan = s.schedule().expect("work to do");
    s.commit(&plan);
    for sc in &plan.seqs {
        if sc.sample {
            s.append_generated(sc.seq, token, None);
        }
    }
    plan
}

fn spans(plan: &Schedule) -> Vec<(u64, usize, usize, bool)> {
    plan.seqs
        .iter()
        .map(|s| (s.seq, s.start, s.end, s.sample))
        .collect()
}

#[test]
fn admits_up_to_max_batch_then_decodes_everyone() {
    let mut s = sched(16, 4, 2, 1000, false);
    s.add(distinct(0, 5));
    s.add(distinct(1, 3));
    s.add(distinct(2, 4));
    let p = run(&mut s, 7);
    assert_eq!(p.kind, StepKind::Prefill);
    assert_eq!(spans(&p), vec![(0, 0, 5, true), (1, 0, 3, true)]);
    assert_eq!(s.seq(0).unwrap().block_table, vec![0, 1]);
    assert_eq!(s.seq(1).unwrap().block_table, vec![2]);
    assert_eq!(s.waiting().collect::<Vec<_>>(), vec![2]);
    let d = run(&mut s, 8);
    assert_eq!(d.kind, StepKind::Decode);
    // Seq 0 has 6 tokens (5 computed), seq 1 has 4 (3 computed): both fit their blocks.
    assert_eq!(spans(&d), vec![(0, 5, 6, true), (1, 3, 4, true)]);
    assert_eq!(s.blocks().num_free(), 13);
    // Seq 1 now computes token 4: needs a second block.
    let d = run(&mut s, 9);
    assert_eq!(spans(&d), vec![(0, 6, 7, true), (1, 4, 5, true)]);
    assert_eq!(s.seq(1).unwrap().block_table, vec![2, 3]);
    // Finishing seq 0 frees its blocks and seq 2 is admitted in the next step.
    s.finish(0).unwrap();
    assert_eq!(s.blocks().num_free(), 14);
    let p = run(&mut s, 1);
    assert_eq!(spans(&p), vec![(2, 0, 4, true)]);
    // The lowest block already touched: seq 0's first, not the never-used block 4.
    assert_eq!(s.seq(2).unwrap().block_table, vec![0]);
    assert_eq!(s.running(), &[1, 2]);
}

#[test]
fn token_budget_chunks_a_long_prompt_and_caps_admission() {
    let mut s = sched(16, 4, 8, 6, false);
    s.add(distinct(0, 10));
    s.add(distinct(1, 2));
    let p = run(&mut s, 5);
    assert_eq!(
        spans(&p),
        vec![(0, 0, 6, false)],
        "budget 6 is used up by the first chunk"
    );
    assert_eq!(
        s.seq(0).unwrap().tokens.len(),
        10,
        "no token sampled mid-prompt"
    );
    let p = run(&mut s, 5);
    assert_eq!(p.kind, StepKind::Prefill);
    assert_eq!(spans(&p), vec![(0, 6, 10, true), (1, 0, 2, true)]);
    let d = run(&mut s, 5);
    assert_eq!(spans(&d), vec![(0, 10, 11, true), (1, 2, 3, true)]);
}

#[test]
fn exhausted_pool_preempts_the_youngest_and_recomputes_it() {
    // 4 blocks of 2 tokens; two prompts of 3 tokens take 2 blocks each.
    let mut s = sched(4, 2, 4, 100, false);
    s.add(distinct(0, 3));
    s.add(distinct(1, 3));
    run(&mut s, 50);
    // Both have 4 tokens, 3 computed; decode computes token 3 which fits block 2 of each.
    run(&mut s, 51);
    assert_eq!(s.blocks().num_free(), 0);
    // Now both need a third block: seq 0 (oldest) takes one freed by preempting seq 1 (its
    // blocks 2 and 3; the lowest first).
    let d = run(&mut s, 52);
    assert_eq!(d.preempted, vec![1]);
    assert_eq!(spans(&d), vec![(0, 4, 5, true)]);
    assert_eq!(s.seq(0).unwrap().block_table, vec![0, 1, 2]);
    assert_eq!(s.waiting().collect::<Vec<_>>(), vec![1]);
    let s1 = s.seq(1).unwrap();
    assert_eq!(
        (s1.num_computed, s1.block_table.len(), s1.preemptions),
        (0, 0, 1)
    );
    assert_eq!(
        s1.tokens.len(),
        5,
        "generated tokens are kept for the recompute"
    );
    // Seq 0 finishes: seq 1 is readmitted and recomputes all 5 tokens, sampling the 6th.
    s.finish(0);
    let p = run(&mut s, 53);
    assert_eq!(spans(&p), vec![(1, 0, 5, true)]);
    assert_eq!(s.seq(1).unwrap().tokens[3..], [50, 51, 53]);
}

#[test]
fn a_lone_sequence_that_fills_the_pool_is_truncated_not_looped() {
    let mut s = sched(2, 2, 4, 100, false);
    s.add(distinct(0, 3));
    run(&mut s, 1); // 4 tokens, 3 computed
    run(&mut s, 1); // 5 tokens, 4 computed: both blocks full
    let d = s.schedule().unwrap();
    assert!(d.seqs.is_empty());
    assert_eq!(d.dropped.len(), 1);
    assert_eq!(
        (d.dropped[0].0.arrival, d.dropped[0].1),
        (0, Dropout::PoolFull)
    );
    assert_eq!(s.blocks().num_free(), 2);
    assert!(s.schedule().is_none());
}

#[test]
fn a_prompt_larger_than_the_pool_is_dropped_and_the_next_admitted() {
    let mut s = sched(2, 4, 4, 100, false);
    s.add(distinct(0, 9));
    s.add(distinct(1, 4));
    let p = s.schedule().unwrap();
    assert_eq!(p.dropped.len(), 1);
    assert_eq!(
        p.dropped[0].1,
        Dropout::PromptTooLong { needed: 3, pool: 2 }
    );
    assert_eq!(spans(&p), vec![(1, 0, 4, true)]);
}

#[test]
fn shared_prefix_is_reused_with_reference_counts() {
    let mut s = sched(16, 4, 8, 100, true);
    let prefix: Vec<u32> = (1..=8).collect();
    let with = |a: u64, tail: &[u32]| {
        let mut t = prefix.clone();
        t.extend_from_slice(tail);
        seq(a, t)
    };
    s.add(with(0, &[90, 91]));
    s.add(with(1, &[92]));
    // Seq 1's first block is being computed by seq 0 in this step: it waits one step.
    let p = run(&mut s, 3);
    assert_eq!(spans(&p), vec![(0, 0, 10, true)]);
    let p = run(&mut s, 3);
    assert_eq!(p.kind, StepKind::Prefill);
    assert_eq!(
        spans(&p),
        vec![(1, 8, 9, true)],
        "8 prompt tokens from the cache"
    );
    let (t0, t1) = (
        s.seq(0).unwrap().block_table.clone(),
        s.seq(1).unwrap().block_table.clone(),
    );
    assert_eq!(t0, vec![0, 1, 2]);
    assert_eq!(t1, vec![0, 1, 3]);
    assert_eq!(s.seq(1).unwrap().cached_tokens, 8);
    assert_eq!((s.blocks().ref_count(0), s.blocks().ref_count(1)), (2, 2));
    s.finish(0);
    assert_eq!(
        (
            s.blocks().ref_count(0),
            s.blocks().ref_count(1),
            s.blocks().ref_count(2)
        ),
        (1, 1, 0)
    );
    s.finish(1);
    assert_eq!(s.blocks().ref_count(0), 0);
    assert_eq!(s.blocks().num_free(), 16);
    // A third sequence with the same prefix still hits the (evictable) cached blocks.
    s.add(with(2, &[93, 94]));
    let p = run(&mut s, 3);
    assert_eq!(spans(&p), vec![(2, 8, 10, true)]);
    assert_eq!(s.seq(2).unwrap().block_table[..2], [0, 1]);
}

#[test]
fn a_fully_cached_prompt_still_computes_its_last_token() {
    let mut s = sched(8, 4, 8, 100, true);
    s.add(distinct(0, 8));
    run(&mut s, 1);
    s.finish(0);
    s.add(distinct(0, 8));
    let p = run(&mut s, 1);
    // Only block 0 may hit (the last block holds the token to recompute).
    assert_eq!(spans(&p), vec![(0, 4, 8, true)]);
}

#[test]
fn watermark_holds_back_blocks_only_while_others_run() {
    let mut s = Scheduler::new(
        SchedulerConfig {
            max_batch: 8,
            max_batch_tokens: 100,
            watermark_blocks: 2,
        },
        BlockManager::new(4, 4, false),
    );
    s.add(distinct(0, 8));
    s.add(distinct(1, 4));
    let p = run(&mut s, 1);
    // Seq 0 takes 2 blocks with nothing running; seq 1 would leave 1 < 2 free.
    assert_eq!(spans(&p), vec![(0, 0, 8, true)]);
    assert_eq!(s.num_waiting(), 1);
}
