//! The portable path ([`PortableStep`], candle tensor ops) against the native CPU kernels on
//! the same metadata: cache writes bitwise equal, attention within 1e-5 in f32 (within the
//! storage dtype's rounding in f16/bf16), over ragged steps mixing a fresh prefill, a prefill
//! chunk after cached tokens, and decodes, with GQA and scattered block tables.

use candle_core::{DType, Device, Tensor};
use verisample_kernels::max_abs_diff;
use verisample_kernels::{
    paged_attention, reshape_and_cache, AttentionPath, CacheWrite, KernelError,
    PagedAttentionParams, PagedStep, PortableStep, PORTABLE_KV_BLOCK, PORTABLE_QUERY_TILE,
    PORTABLE_TILES_PER_CALL,
};

/// Deterministic pseudo-random floats in [-2, 2) (64-bit LCG, Knuth's constants).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 2.0)
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

const BS: usize = 4;
const NUM_BLOCKS: usize = 40;
const KVH: usize = 2;
const NH: usize = 6;
const HD: usize = 8;

/// A ragged step: (query_len, context_len) per sequence; block tables taken from a scattered
/// permutation of the pool.
fn step(shape: &[(usize, usize)]) -> (Vec<usize>, Vec<usize>, Vec<Vec<u32>>, Vec<u32>) {
    let mut ids: Vec<u32> = (0..NUM_BLOCKS as u32)
        .map(|i| (i * 7 + 3) % NUM_BLOCKS as u32)
        .collect();
    let mut tables = Vec::new();
    let mut slots = Vec::new();
    for &(q, c) in shape {
        let table: Vec<u32> = ids.drain(..c.div_ceil(BS)).collect();
        for p in c - q..c {
            slots.push(table[p / BS] * BS as u32 + (p % BS) as u32);
        }
        tables.push(table);
    }
    let ql = shape.iter().map(|s| s.0).collect();
    let cl = shape.iter().map(|s| s.1).collect();
    (ql, cl, tables, slots)
}

fn compare(dtype: DType, tol: f32) {
    let dev = Device::Cpu;
    // Fresh prefill, a chunk after 9 cached tokens, two decodes (one at a block boundary).
    let shape = [(7, 7), (5, 14), (1, 9), (1, 12)];
    let (ql, cl, tables, slots) = step(&shape);
    let total: usize = ql.iter().sum();
    let rand = |seed, dims: &[usize]| {
        Tensor::from_vec(lcg(seed, dims.iter().product()), dims, &dev)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    // The cache already holds earlier tokens everywhere (random), then this step's are written.
    let pool = [NUM_BLOCKS, BS, KVH, HD];
    let (kc_n, vc_n) = (rand(1, &pool), rand(2, &pool));
    let (kc_p, vc_p) = (kc_n.copy().unwrap(), vc_n.copy().unwrap());
    let (k, v, q) = (
        rand(3, &[total, KVH, HD]),
        rand(4, &[total, KVH, HD]),
        rand(5, &[total, NH, HD]),
    );
    let params = PagedAttentionParams {
        query_lens: &ql,
        context_lens: &cl,
        block_tables: &tables,
        scale: 1.0 / (HD as f32).sqrt(),
    };
    // The fresh prefill fills block 0 (positions 0..4): written as one whole block, the rest
    // slot by slot.
    let plan = CacheWrite::new(&slots, BS, &dev).unwrap();
    assert_eq!(plan.rows_in_whole_blocks(), BS);
    reshape_and_cache(&k, &v, &kc_n, &vc_n, &slots).unwrap();
    let native = paged_attention(&q, &kc_n, &vc_n, &params).unwrap();
    let portable = PagedStep::new(
        AttentionPath::Portable,
        params,
        &slots,
        BS,
        NUM_BLOCKS,
        &dev,
    )
    .unwrap();
    portable.write_cache(&k, &v, &kc_p, &vc_p).unwrap();
    assert_eq!(
        flat(&kc_p),
        flat(&kc_n),
        "{dtype:?}: key cache after the write"
    );
    assert_eq!(
        flat(&vc_p),
        flat(&vc_n),
        "{dtype:?}: value cache after the write"
    );
    let out = portable.attend(&q, &kc_p, &vc_p).unwrap();
    assert_eq!(out.dims(), &[total, NH, HD]);
    assert_eq!(out.dtype(), dtype);
    let d = max_abs_diff(&flat(&out), &flat(&native));
    println!("{dtype:?}: portable vs native max |Δ| {d:.3e}");
    assert!(
        d <= tol,
        "{dtype:?}: portable vs native max |Δ| {d} > {tol}"
    );
    // Causality: a query sees no later position. Poison the cache past each sequence's
    // context (outside every table's live range) and the output must not change.
    let (kc_x, vc_x) = (kc_p.copy().unwrap(), vc_p.copy().unwrap());
    let live: std::collections::BTreeSet<u32> = tables
        .iter()
        .zip(&cl)
        .flat_map(|(t, &c)| (0..c).map(move |p| t[p / BS] * BS as u32 + (p % BS) as u32))
        .collect();
    let poison: Vec<u32> = (0..(NUM_BLOCKS * BS) as u32)
        .filter(|s| !live.contains(s))
        .collect();
    let junk = Tensor::full(1e4f32, (poison.len(), KVH, HD), &dev).unwrap();
    reshape_and_cache(&junk, &junk, &kc_x, &vc_x, &poison).unwrap();
    let again = portable.attend(&q, &kc_x, &vc_x).unwrap();
    assert_eq!(
        flat(&again),
        flat(&out),
        "{dtype:?}: output depends on slots outside the context"
    );
}

#[test]
fn f32_matches_native_kernels() {
    compare(DType::F32, 1e-5);
}

#[test]
fn half_precision_matches_native_kernels() {
    // Both accumulate in f32; the outputs differ by the rounding of the final f16/bf16 store.
    compare(DType::F16, 1e-3);
    compare(DType::BF16, 8e-3);
}

#[test]
fn portable_step_checks_metadata() {
    let dev = Device::Cpu;
    let (ql, cl, mut tables, slots) = step(&[(3, 5)]);
    tables[0][1] = NUM_BLOCKS as u32 + 2;
    let params = PagedAttentionParams {
        query_lens: &ql,
        context_lens: &cl,
        block_tables: &tables,
        scale: 1.0,
    };
    match PortableStep::new(&params, &slots, BS, NUM_BLOCKS, &dev) {
        Err(KernelError::Invalid { msg, .. }) => {
            assert!(msg.contains("outside the pool of 40"), "{msg}")
        }
        other => panic!("expected a block-out-of-range error, got {other:?}"),
    }
    let bad_slot = [0u32, 1, (NUM_BLOCKS * BS) as u32];
    let (_, _, ok_tables, _) = step(&[(3, 5)]);
    let params = PagedAttentionParams {
        block_tables: &ok_tables,
        ..params
    };
    match PortableStep::new(&params, &bad_slot, BS, NUM_BLOCKS, &dev) {
        Err(KernelError::Invalid { msg, .. }) => assert!(msg.contains("slot 160"), "{msg}"),
        other => panic!("expected a slot-out-of-range error, got {other:?}"),
    }
    assert_eq!(AttentionPath::for_device(&dev), AttentionPath::Native);
}

/// A step of more query tiles than one batched call holds, over contexts of several blocks of
/// the online softmax: the output still matches the native kernels, and whole blocks of a long
/// prefill go through the block-level write. Catches: calls' outputs put back in the wrong rows,
/// a block's causal mask off by one, the rescaling between blocks wrong.
#[test]
fn a_large_step_runs_in_several_calls_and_blocks_and_still_matches() {
    let dev = Device::Cpu;
    let bs = 32;
    // A 1100-token prefill (1.2M positions alone), a decode, a chunk of 300 over 400 cached.
    let shape = [(1100usize, 1100usize), (1, 50), (300, 700)];
    let num_blocks: usize = shape.iter().map(|s| s.1.div_ceil(bs)).sum::<usize>() + 3;
    let mut ids: Vec<u32> = (0..num_blocks as u32).rev().collect();
    let (mut tables, mut slots) = (Vec::new(), Vec::new());
    for &(q, c) in &shape {
        let table: Vec<u32> = ids.drain(..c.div_ceil(bs)).collect();
        slots.extend((c - q..c).map(|p| table[p / bs] * bs as u32 + (p % bs) as u32));
        tables.push(table);
    }
    let (ql, cl): (Vec<usize>, Vec<usize>) = shape.iter().copied().unzip();
    let total: usize = ql.iter().sum();
    let rand = |seed, dims: &[usize]| {
        Tensor::from_vec(lcg(seed, dims.iter().product()), dims, &dev).unwrap()
    };
    let pool = [num_blocks, bs, KVH, HD];
    let (kc_n, vc_n) = (rand(1, &pool), rand(2, &pool));
    let (kc_p, vc_p) = (kc_n.copy().unwrap(), vc_n.copy().unwrap());
    let (k, v, q) = (
        rand(3, &[total, KVH, HD]),
        rand(4, &[total, KVH, HD]),
        rand(5, &[total, NH, HD]),
    );
    let params = PagedAttentionParams {
        query_lens: &ql,
        context_lens: &cl,
        block_tables: &tables,
        scale: 1.0 / (HD as f32).sqrt(),
    };
    reshape_and_cache(&k, &v, &kc_n, &vc_n, &slots).unwrap();
    let native = paged_attention(&q, &kc_n, &vc_n, &params).unwrap();
    let step = PortableStep::new(&params, &slots, bs, num_blocks, &dev).unwrap();
    // 275 + 1 + 75 query tiles of 4 over contexts of up to 5 blocks: 6 calls of 64 tiles.
    const { assert!(1100 / PORTABLE_QUERY_TILE > PORTABLE_TILES_PER_CALL) };
    const { assert!(1100 > 4 * PORTABLE_KV_BLOCK) };
    let tiles = 1100 / PORTABLE_QUERY_TILE + 1 + 300 / PORTABLE_QUERY_TILE;
    assert_eq!(step.num_calls(), tiles.div_ceil(PORTABLE_TILES_PER_CALL));
    // 1100 = 34 whole blocks + 12 tokens; positions 400..700 hold the whole blocks 13..=20
    // (416..672) and two partial ones.
    let plan = CacheWrite::new(&slots, bs, &dev).unwrap();
    assert_eq!(plan.rows_in_whole_blocks(), (34 + 8) * bs);
    step.write_cache(&k, &v, &kc_p, &vc_p).unwrap();
    assert_eq!(flat(&kc_p), flat(&kc_n), "key cache");
    assert_eq!(flat(&vc_p), flat(&vc_n), "value cache");
    let out = step
        .attend(&q, &kc_p, &vc_p, 1.0 / (HD as f32).sqrt())
        .unwrap();
    let d = max_abs_diff(&flat(&out), &flat(&native));
    assert!(d <= 1e-5, "grouped portable vs native max |Δ| {d}");
}
