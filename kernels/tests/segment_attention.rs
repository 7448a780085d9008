//! The vision towers' segment attention ([`segment_attention`], blockwise with an online
//! softmax, and [`segment_attention_portable`], query chunks of candle ops) against the direct
//! computation in f64: every row attends to its own segment only. Sizes cover ragged query
//! and key blocks, one-row and empty segments, many small windows, and a segment long enough
//! for the portable path to chunk its queries.

use candle_core::{DType, Device, Tensor};
use verisample_kernels::max_abs_diff;
use verisample_kernels::{
    portable_chunk_rows, segment_attention, segment_attention_portable,
    segment_attention_scratch_bytes, AttentionPath, KernelError, SegmentAttentionParams, BLOCK_K,
    BLOCK_Q, PORTABLE_SCORE_ELEMENTS,
};

/// Deterministic pseudo-random floats in [-2, 2) (64-bit LCG, Knuth's constants).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 2.0)
}

/// Direct attention in f64: `softmax(scale · q kᵀ) v` per segment and head, `[n, heads, hd]`.
fn direct(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    segs: &[(usize, usize)],
    heads: usize,
    hd: usize,
    scale: f64,
) -> Vec<f32> {
    let mut out = vec![0f32; q.len()];
    let at = |r: usize, h: usize| (r * heads + h) * hd;
    for &(start, len) in segs {
        for h in 0..heads {
            for i in start..start + len {
                let scores: Vec<f64> = (start..start + len)
                    .map(|j| {
                        (0..hd)
                            .map(|d| q[at(i, h) + d] as f64 * k[at(j, h) + d] as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let denom: f64 = w.iter().sum();
                for d in 0..hd {
                    let o: f64 = (0..len)
                        .map(|j| w[j] * v[at(start + j, h) + d] as f64)
                        .sum();
                    out[at(i, h) + d] = (o / denom) as f32;
                }
            }
        }
    }
    out
}

fn segments(lens: &[usize]) -> Vec<(usize, usize)> {
    let mut start = 0;
    lens.iter()
        .map(|&l| {
            start += l;
            (start - l, l)
        })
        .collect()
}

/// Runs both paths on `lens` segments in `dtype` and returns their largest deviation from
/// the direct computation on the same (dtype-rounded) inputs.
fn deviation(lens: &[usize], heads: usize, hd: usize, dtype: DType) -> (f32, f32) {
    let n: usize = lens.iter().sum();
    let segs = segments(lens);
    let make = |seed| {
        Tensor::from_vec(lcg(seed, n * heads * hd), (n, heads, hd), &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let (q, k, v) = (make(1), make(2), make(3));
    let host = |t: &Tensor| -> Vec<f32> {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let scale = 1.0 / (hd as f64).sqrt();
    let want = direct(&host(&q), &host(&k), &host(&v), &segs, heads, hd, scale);
    let params = SegmentAttentionParams {
        segments: &segs,
        scale: scale as f32,
    };
    let native = segment_attention(&q, &k, &v, &params).unwrap();
    let portable = segment_attention_portable(&q, &k, &v, &params).unwrap();
    for t in [&native, &portable] {
        assert_eq!(t.dims(), &[n, heads, hd]);
        assert_eq!(t.dtype(), dtype);
    }
    (
        max_abs_diff(&host(&native), &want),
        max_abs_diff(&host(&portable), &want),
    )
}

#[test]
fn full_attention_matches_direct_f32() {
    // Images of 300, 1, 0 and 1100 patches: ragged query blocks and key blocks.
    const { assert!(1100 > 2 * BLOCK_K && 300 % BLOCK_Q != 0) };
    let (native, portable) = deviation(&[300, 1, 0, 1100], 3, 16, DType::F32);
    assert!(native <= 1e-5, "native max |Δ| {native}");
    assert!(portable <= 1e-5, "portable max |Δ| {portable}");
}

#[test]
fn window_attention_matches_direct_f32() {
    // Qwen2.5-VL windows: 64 patches each, with partial windows at the borders.
    let lens = [64, 64, 32, 64, 16, 8, 64, 64, 40];
    let (native, portable) = deviation(&lens, 4, 80, DType::F32);
    assert!(native <= 1e-5, "native max |Δ| {native}");
    assert!(portable <= 1e-5, "portable max |Δ| {portable}");
}

#[test]
fn portable_chunks_long_segments_and_matches_direct() {
    let (heads, len) = (2, 3000);
    let chunk = portable_chunk_rows(len, heads);
    assert_eq!(chunk, PORTABLE_SCORE_ELEMENTS / (heads * len));
    assert!(chunk < len, "the segment must be split into query chunks");
    assert_eq!(portable_chunk_rows(10, 2), 10);
    assert_eq!(portable_chunk_rows(1 << 24, 4), 1);
    let (native, portable) = deviation(&[len], heads, 8, DType::F32);
    assert!(native <= 1e-5, "native max |Δ| {native}");
    assert!(portable <= 1e-5, "portable max |Δ| {portable}");
}

#[test]
fn half_precision_accumulates_in_f32() {
    // Inputs rounded to the dtype; the only further error is the output's rounding.
    for (dtype, tol) in [(DType::BF16, 2e-2), (DType::F16, 3e-3)] {
        let (native, portable) = deviation(&[130, 290], 2, 32, dtype);
        assert!(native <= tol, "{dtype:?} native max |Δ| {native}");
        assert!(portable <= tol, "{dtype:?} portable max |Δ| {portable}");
    }
}

#[test]
fn both_paths_agree_through_the_dispatch() {
    let segs = segments(&[70, 200]);
    let t = |seed| Tensor::from_vec(lcg(seed, 270 * 2 * 8), (270, 2, 8), &Device::Cpu).unwrap();
    let (q, k, v) = (t(4), t(5), t(6));
    let params = SegmentAttentionParams {
        segments: &segs,
        scale: 0.3,
    };
    let a = AttentionPath::Native
        .segment_attention(&q, &k, &v, &params)
        .unwrap();
    let b = AttentionPath::Portable
        .segment_attention(&q, &k, &v, &params)
        .unwrap();
    let d = (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(d <= 1e-5, "native vs portable max |Δ| {d}");
}

/// A narrowed view (its storage runs past its rows) is attended over its own rows only, the
/// same bits as a contiguous copy of them.
#[test]
fn a_narrowed_view_is_its_own_rows() {
    let segs = segments(&[40, 33]);
    let big = |seed| Tensor::from_vec(lcg(seed, 300 * 2 * 80), (300, 2, 80), &Device::Cpu).unwrap();
    let (q, k, v) = (big(7), big(8), big(9));
    let view = |t: &Tensor| t.narrow(0, 0, 73).unwrap();
    let params = SegmentAttentionParams {
        segments: &segs,
        scale: 0.11,
    };
    let narrowed = segment_attention(&view(&q), &view(&k), &view(&v), &params).unwrap();
    let copy = |t: &Tensor| view(t).copy().unwrap();
    let copied = segment_attention(&copy(&q), &copy(&k), &copy(&v), &params).unwrap();
    assert_eq!(narrowed.dims(), [73, 2, 80]);
    let (a, b): (Vec<f32>, Vec<f32>) = (
        narrowed.flatten_all().unwrap().to_vec1().unwrap(),
        copied.flatten_all().unwrap().to_vec1().unwrap(),
    );
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}

/// A segment's rows are bitwise the same whether it is attended alone or among other
/// segments (images batched in one vision-encoder forward), on both paths, f32 and bf16.
/// Catches: a blocking, a chunking or a reduction order that depends on the rows around a
/// segment (which would make tokens depend on which images share an encoder forward).
#[test]
fn a_segment_alone_is_bitwise_its_rows_among_others() {
    let lens = [5, BLOCK_Q + 3, 1, 2 * BLOCK_K + 7, 17];
    let n: usize = lens.iter().sum();
    let (heads, hd) = (3, 36);
    let segs = segments(&lens);
    for dtype in [DType::F32, DType::BF16] {
        let make = |seed| {
            Tensor::from_vec(lcg(seed, n * heads * hd), (n, heads, hd), &Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let (q, k, v) = (make(4), make(5), make(6));
        let bits = |t: &Tensor| -> Vec<u32> {
            let v: Vec<f32> = t
                .to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            v.into_iter().map(f32::to_bits).collect()
        };
        type Path =
            fn(&Tensor, &Tensor, &Tensor, &SegmentAttentionParams) -> Result<Tensor, KernelError>;
        let paths: [(&str, Path); 2] = [
            ("native", segment_attention),
            ("portable", segment_attention_portable),
        ];
        for (name, path) in paths {
            let params = SegmentAttentionParams {
                segments: &segs,
                scale: 0.17,
            };
            let together = path(&q, &k, &v, &params).unwrap();
            for &(start, len) in &segs {
                let alone_segs = [(0, len)];
                let part = |t: &Tensor| t.narrow(0, start, len).unwrap().copy().unwrap();
                let alone = path(
                    &part(&q),
                    &part(&k),
                    &part(&v),
                    &SegmentAttentionParams {
                        segments: &alone_segs,
                        scale: 0.17,
                    },
                )
                .unwrap();
                assert_eq!(
                    bits(&alone),
                    bits(&together.narrow(0, start, len).unwrap()),
                    "{name}, {dtype:?}, segment at {start} of {len} rows"
                );
            }
        }
    }
}

#[test]
fn segments_must_tile_the_rows() {
    let t = Tensor::zeros((10, 1, 4), DType::F32, &Device::Cpu).unwrap();
    for (segs, msg) in [
        (vec![(0, 4), (5, 5)], "segment 1 starts at 5, expected 4"),
        (
            vec![(0, 4), (4, 5)],
            "segments cover 9 rows but there are 10",
        ),
    ] {
        for path in [AttentionPath::Native, AttentionPath::Portable] {
            let params = SegmentAttentionParams {
                segments: &segs,
                scale: 1.0,
            };
            match path.segment_attention(&t, &t, &t, &params) {
                Err(KernelError::Invalid { msg: m, .. }) => assert_eq!(m, msg, "{path:?}"),
                other => panic!("{path:?}: expected Invalid, got {other:?}"),
            }
        }
    }
}

#[test]
fn scratch_is_linear_in_patches() {
    // Qwen2-VL-2B's vision widths (16 heads of 80) on a 3000x3000 image: 214x214 patches.
    let (n, heads, hd) = (214 * 214, 16, 80);
    let rows = n * heads * hd;
    let gemm_worker = (BLOCK_Q * BLOCK_K + BLOCK_Q * hd + 2 * BLOCK_Q) * 4;
    let f32_bytes = segment_attention_scratch_bytes(n, heads, hd, DType::F32, 2);
    // The output, the AVX-512 kernel's packed keys (whole strips of 32) and values (80 is
    // five vectors of 16: no padding), and two workers' tiles (the gemm kernel's are larger).
    let packed = heads * (n.div_ceil(32) * 32 * hd + n * hd) * 4;
    assert_eq!(f32_bytes, rows * 4 + packed + 2 * gemm_worker);
    // About 0.7 GB, against 134 GB for one [heads, n, n] f32 score matrix.
    assert!(f32_bytes < 750_000_000, "{f32_bytes}");
    assert!(f32_bytes * 150 < heads * n * n * 4);
    // bf16: f32 copies of q, k, v plus the cast-back output.
    let bf16_bytes = segment_attention_scratch_bytes(n, heads, hd, DType::BF16, 2);
    assert_eq!(bf16_bytes, f32_bytes + 3 * rows * 4 + rows * 2);
    // A head width off the vectors' 16 lanes: the values are packed 16 wide per head.
    let narrow = segment_attention_scratch_bytes(n, heads, 8, DType::F32, 0);
    assert!(narrow >= n * heads * (8 + 16) * 4, "{narrow}");
    // Doubling the patches (a multiple of 32) doubles the n-dependent part exactly.
    let m = 32 * 1000;
    let at = |p| segment_attention_scratch_bytes(p, heads, hd, DType::F32, 2) - 2 * gemm_worker;
    assert_eq!(at(2 * m), 2 * at(m));
}
