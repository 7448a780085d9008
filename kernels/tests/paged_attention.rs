//! `reshape_and_cache` + `paged_attention` against a dense naive reference.

use candle_core::{DType, Device, Tensor};
use verisample_kernels::max_abs_diff;
use verisample_kernels::{paged_attention, reshape_and_cache, KernelError, PagedAttentionParams};

/// Deterministic pseudo-random floats in [-1, 1) (64-bit LCG, Knuth's constants).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 1.0)
}

struct Case {
    query_lens: Vec<usize>,
    context_lens: Vec<usize>,
    n_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
}

/// Dense causal attention of one sequence: q `[ql, nh, hd]`, k/v `[c, kvh, hd]`.
#[allow(clippy::too_many_arguments)]
fn naive(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    ql: usize,
    c: usize,
    nh: usize,
    kvh: usize,
    hd: usize,
) -> Vec<f32> {
    let mut out = vec![0f32; ql * nh * hd];
    let scale = 1.0 / (hd as f32).sqrt();
    for j in 0..ql {
        let pos = c - ql + j;
        for h in 0..nh {
            let g = h / (nh / kvh);
            let qr = &q[(j * nh + h) * hd..(j * nh + h + 1) * hd];
            let scores: Vec<f64> = (0..=pos)
                .map(|p| {
                    let kr = &k[(p * kvh + g) * hd..(p * kvh + g + 1) * hd];
                    qr.iter()
                        .zip(kr)
                        .map(|(a, b)| (*a as f64) * (*b as f64))
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = (0..=pos)
                    .map(|p| e[p] * v[(p * kvh + g) * hd + d] as f64)
                    .sum();
                out[(j * nh + h) * hd + d] = (acc / z) as f32;
            }
        }
    }
    out
}

/// A case written into paged pools: the step's queries `[total, nh, hd]` and the pools in the
/// storage dtype, the block tables, and the dense f64 reference output (as f32).
struct Prepared {
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    tables: Vec<Vec<u32>>,
    reference: Vec<f32>,
}

/// Writes the case's past and new keys/values into paged pools (block ids interleaved across
/// sequences, so block tables are not contiguous) and computes the dense reference.
fn prepare(case: &Case, dtype: DType) -> Prepared {
    let dev = Device::Cpu;
    let (nh, kvh, hd, bs) = (case.n_heads, case.kv_heads, case.head_dim, case.block_size);
    let blocks_per_seq: Vec<usize> = case.context_lens.iter().map(|c| c.div_ceil(bs)).collect();
    let num_blocks: usize = blocks_per_seq.iter().sum::<usize>() + 3;
    // Interleave block ids across sequences so tables are not contiguous.
    let mut ids: Vec<u32> = (0..num_blocks as u32).rev().collect();
    ids.rotate_left(2);
    let mut tables = Vec::new();
    let mut next = 0;
    for &nb in &blocks_per_seq {
        tables.push(ids[next..next + nb].to_vec());
        next += nb;
    }
    let kc = Tensor::zeros((num_blocks, bs, kvh, hd), dtype, &dev).unwrap();
    let vc = kc.zeros_like().unwrap();
    let slot = |s: usize, p: usize| tables[s][p / bs] * bs as u32 + (p % bs) as u32;
    let mut q_all = Vec::new();
    let mut reference = Vec::new();
    for (s, (&ql, &c)) in case.query_lens.iter().zip(&case.context_lens).enumerate() {
        let k = lcg(100 + s as u64, c * kvh * hd);
        let v = lcg(200 + s as u64, c * kvh * hd);
        let q = lcg(300 + s as u64, ql * nh * hd);
        // Round through the storage dtype so the reference sees the same inputs.
        let round = |x: Vec<f32>| -> Vec<f32> {
            Tensor::new(x.as_slice(), &dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        let (k, v, q) = (round(k), round(v), round(q));
        // Past tokens first (as an earlier step would have), then this step's tokens.
        for range in [0..c - ql, c - ql..c] {
            if range.is_empty() {
                continue;
            }
            let n = range.len();
            let kt = Tensor::from_slice(
                &k[range.start * kvh * hd..range.end * kvh * hd],
                (n, kvh, hd),
                &dev,
            )
            .unwrap();
            let vt = Tensor::from_slice(
                &v[range.start * kvh * hd..range.end * kvh * hd],
                (n, kvh, hd),
                &dev,
            )
            .unwrap();
            let slots: Vec<u32> = range.clone().map(|p| slot(s, p)).collect();
            reshape_and_cache(&kt, &vt, &kc, &vc, &slots).unwrap();
        }
        reference.extend(naive(&q, &k, &v, ql, c, nh, kvh, hd));
        q_all.extend(q);
    }
    let total: usize = case.query_lens.iter().sum();
    let q = Tensor::from_slice(&q_all, (total, nh, hd), &dev)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    Prepared {
        q,
        kc,
        vc,
        tables,
        reference,
    }
}

/// Runs the case through the paged kernels in `dtype`; returns (paged output, reference) in f32.
fn run(case: &Case, dtype: DType) -> (Vec<f32>, Vec<f32>) {
    let Prepared {
        q,
        kc,
        vc,
        tables,
        reference,
    } = prepare(case, dtype);
    let (total, nh, hd) = q.dims3().unwrap();
    let params = PagedAttentionParams {
        query_lens: &case.query_lens,
        context_lens: &case.context_lens,
        block_tables: &tables,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let out = paged_attention(&q, &kc, &vc, &params).unwrap();
    assert_eq!(out.dims(), &[total, nh, hd]);
    assert_eq!(out.dtype(), dtype);
    let out = out
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    (out, reference)
}

fn mixed_case() -> Case {
    // Prefill from scratch, chunked prefill on top of a prefix, two decodes, GQA 4:2.
    Case {
        query_lens: vec![7, 5, 1, 1],
        context_lens: vec![7, 13, 9, 1],
        n_heads: 4,
        kv_heads: 2,
        head_dim: 16,
        block_size: 4,
    }
}

#[test]
fn f32_matches_dense_reference() {
    for case in [
        mixed_case(),
        Case {
            query_lens: vec![33],
            context_lens: vec![33],
            n_heads: 2,
            kv_heads: 2,
            head_dim: 8,
            block_size: 16,
        },
        Case {
            query_lens: vec![1, 2, 3],
            context_lens: vec![40, 2, 17],
            n_heads: 6,
            kv_heads: 1,
            head_dim: 32,
            block_size: 8,
        },
    ] {
        let (out, reference) = run(&case, DType::F32);
        let d = max_abs_diff(&out, &reference);
        assert!(d <= 1e-5, "max |Δ| = {d}");
    }
}

#[test]
fn half_precision_accumulates_in_f32() {
    for (dtype, tol) in [(DType::F16, 2e-3), (DType::BF16, 1.6e-2)] {
        let (out, reference) = run(&mixed_case(), dtype);
        let d = max_abs_diff(&out, &reference);
        assert!(d <= tol, "{dtype:?}: max |Δ| = {d}");
    }
}

#[test]
fn first_query_of_a_fresh_prefill_returns_its_own_value() {
    // Position 0 attends to itself only: the output is exactly v[0].
    let case = Case {
        query_lens: vec![3],
        context_lens: vec![3],
        n_heads: 2,
        kv_heads: 1,
        head_dim: 4,
        block_size: 2,
    };
    let (out, _) = run(&case, DType::F32);
    let v = lcg(200, 3 * 4);
    assert_eq!(&out[0..4], &v[0..4]);
    assert_eq!(&out[4..8], &v[0..4]);
}

#[test]
fn bad_metadata_is_a_typed_error() {
    let dev = Device::Cpu;
    let kc = Tensor::zeros((2, 4, 1, 8), DType::F32, &dev).unwrap();
    let q = Tensor::zeros((3, 2, 8), DType::F32, &dev).unwrap();
    let tables = vec![vec![0u32]];
    // 5 tokens do not fit one block of 4.
    let params = PagedAttentionParams {
        query_lens: &[3],
        context_lens: &[5],
        block_tables: &tables,
        scale: 1.0,
    };
    assert!(matches!(
        paged_attention(&q, &kc, &kc, &params),
        Err(KernelError::Invalid { .. })
    ));
    // Slot 8 is outside 2 blocks x 4.
    let k = Tensor::zeros((1, 1, 8), DType::F32, &dev).unwrap();
    let vc = kc.zeros_like().unwrap();
    assert!(matches!(
        reshape_and_cache(&k, &k, &kc, &vc, &[8]),
        Err(KernelError::Invalid { .. })
    ));
}

/// Prefill chunks long enough to be tiled (more tokens than a tile of 16, more positions than
/// a key block of 64): a fresh 37-token prompt, a 70-token chunk starting at position 10 (its
/// tile of positions 58..74 straddles the key block boundary at 64: some of its queries end
/// before the last key block), a 20-token chunk starting at position 130, a 2-token chunk, and
/// two decodes; GQA 6:2, block size 16 with interleaved blocks.
fn chunked_prefill_case(head_dim: usize) -> Case {
    Case {
        query_lens: vec![37, 1, 70, 20, 2, 1],
        context_lens: vec![37, 90, 80, 150, 20, 1],
        n_heads: 6,
        kv_heads: 2,
        head_dim,
        block_size: 16,
    }
}

#[test]
fn tiled_prefill_chunks_match_dense_reference() {
    // head_dim 36: the dot products' tail past the last whole 8 lanes.
    for hd in [32, 36] {
        let (out, reference) = run(&chunked_prefill_case(hd), DType::F32);
        let d = max_abs_diff(&out, &reference);
        assert!(d <= 1e-5, "head_dim {hd}: max |Δ| = {d}");
        let (out, reference) = run(&chunked_prefill_case(hd), DType::BF16);
        let d = max_abs_diff(&out, &reference);
        assert!(d <= 1.6e-2, "head_dim {hd}, bf16: max |Δ| = {d}");
    }
}

/// `t` widened to f32 and flattened.
fn f32s(t: &candle_core::Tensor) -> Vec<f32> {
    let t = t.to_dtype(DType::F32).unwrap();
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// Batch invariance: every query of a step with tiled prefill chunks gives the same bits as
/// that query alone in a step of its own (one new token at its position: the decode path), so
/// a token's output does not depend on how the scheduler cut the prompt into chunks or what
/// else shares the step. Catches a tile that reorders a query's reduction (a GEMM over the
/// tile, an online softmax over key blocks).
#[test]
fn each_query_of_a_tiled_chunk_equals_the_query_alone_bitwise() {
    let cases = [32, 36].map(|hd| [DType::F32, DType::BF16].map(|d| (hd, d)));
    for (head_dim, dtype) in cases.into_iter().flatten() {
        let case = chunked_prefill_case(head_dim);
        let Prepared {
            q, kc, vc, tables, ..
        } = prepare(&case, dtype);
        let (_, nh, hd) = q.dims3().unwrap();
        let scale = 1.0 / (hd as f32).sqrt();
        let params = PagedAttentionParams {
            query_lens: &case.query_lens,
            context_lens: &case.context_lens,
            block_tables: &tables,
            scale,
        };
        let step = paged_attention(&q, &kc, &vc, &params).unwrap();
        let mut row = 0;
        for (s, (&ql, &c)) in case.query_lens.iter().zip(&case.context_lens).enumerate() {
            for j in 0..ql {
                let alone = PagedAttentionParams {
                    query_lens: &[1],
                    context_lens: &[c - ql + j + 1],
                    block_tables: std::slice::from_ref(&tables[s]),
                    scale,
                };
                let alone = paged_attention(&q.narrow(0, row, 1).unwrap(), &kc, &vc, &alone);
                let one = f32s(&alone.unwrap());
                let got = f32s(&step.narrow(0, row, 1).unwrap());
                assert_eq!(got.len(), nh * hd);
                let same = got
                    .iter()
                    .zip(&one)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{dtype:?}: sequence {s}, query {j} differs from its decode"
                );
                row += 1;
            }
        }
    }
}
