//! `segment_attention`: bidirectional attention restricted to segments (the vision towers:
//! one segment per image, or per window for Qwen2.5-VL's window attention), computed
//! blockwise with an online softmax so that no `[heads, patches, patches]` matrix exists.
//!
//! Algorithm: FlashAttention's forward pass (Dao et al. 2022, "FlashAttention: Fast and
//! Memory-Efficient Exact Attention with IO-Awareness", Algorithm 1) on the CPU. For one head
//! and one block of `block_q` queries of a segment, the keys of that segment are visited in
//! blocks of `block_k`: scores `S = scale · Q Kᵀ` (`[block_q, block_k]`, f32), running row
//! maximum `m` and denominator `l`, and the accumulator `O ← O · exp(m_old - m_new) +
//! exp(S - m_new) V`; the output is `O / l`. Products use the `gemm` crate (f32 in, f32
//! accumulation); tasks (head × segment × query block) run in parallel with rayon. On x86-64
//! CPUs with AVX-512 the products are register-tiled micro-kernels over keys packed once per
//! call instead (`tiled.rs`): the same algorithm, about twice the arithmetic rate.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::{require_cpu, KernelError};

#[cfg(target_arch = "x86_64")]
mod tiled;

const NAME: &str = "segment_attention";

/// Queries per block of the native kernel (rows of one task's score tile).
pub const BLOCK_Q: usize = 128;
/// Keys per block of the native kernel (columns of one task's score tile).
pub const BLOCK_K: usize = 512;

/// Queries per task of the AVX-512 kernel (rows of its score tile).
const TILE_Q: usize = 128;
/// Keys per block of the AVX-512 kernel's online softmax.
const TILE_K: usize = 256;
/// Keys per packed strip of `Kᵀ` in the AVX-512 kernel: two 16-lane vectors.
const STRIP: usize = 32;
/// Row stride of the AVX-512 kernel's score tile: a block spans at most `TILE_K / STRIP + 1`
/// strips (it starts at the strip holding its first key).
const LDS: usize = TILE_K + STRIP;
/// f32 lanes of one AVX-512 vector: the packed values and the accumulator are `head_dim`
/// rounded up to a multiple of it.
const TILED_LANES: usize = 16;

/// Segment metadata for [`segment_attention`] and [`crate::segment_attention_portable`].
#[derive(Debug, Clone, Copy)]
pub struct SegmentAttentionParams<'a> {
    /// `(start, len)` row ranges, consecutive and covering all rows in order; a row attends to
    /// every row of its own segment and to no other (`cu_seqlens` in transformers).
    pub segments: &'a [(usize, usize)],
    /// Softmax scale, usually `head_dim^-0.5`.
    pub scale: f32,
}

/// Checks that `segments` tile `0..n` in order.
///
/// Errors: [`KernelError::Invalid`] naming `kernel` at the first gap, overlap or overrun.
pub(crate) fn validate_segments(
    kernel: &'static str,
    segments: &[(usize, usize)],
    n: usize,
) -> Result<(), KernelError> {
    let mut next = 0;
    for (i, &(start, len)) in segments.iter().enumerate() {
        if start != next {
            return Err(KernelError::Invalid {
                kernel,
                msg: format!("segment {i} starts at {start}, expected {next}"),
            });
        }
        next = start + len;
    }
    if next != n {
        return Err(KernelError::Invalid {
            kernel,
            msg: format!("segments cover {next} rows but there are {n}"),
        });
    }
    Ok(())
}

/// Bytes the native [`segment_attention`] allocates beyond its inputs for `n` rows of
/// `heads × head_dim` in storage dtype `dtype` with `threads` rayon workers, whichever of its
/// two kernels runs (the larger of the two): the f32 copies of `q`, `k`, `v` when they are not
/// f32, the f32 output and its cast back when the dtype is not f32; for the AVX-512 kernel the
/// keys and values packed per head (`Kᵀ` in strips of 32 keys, values `head_dim` rounded up to
/// 16 wide) — all linear in `n` — and per worker one score tile, accumulator, query tile and
/// row statistics (independent of `n`). There is no term in `n²`.
pub fn segment_attention_scratch_bytes(
    n: usize,
    heads: usize,
    head_dim: usize,
    dtype: DType,
    threads: usize,
) -> usize {
    let rows = n * heads * head_dim;
    let converted = if dtype == DType::F32 { 0 } else { 3 * rows * 4 };
    // The f32 output, and the cast back when the dtype is not f32.
    let outputs = rows * 4 + rows * dtype.size_in_bytes() * usize::from(dtype != DType::F32);
    let gemm_worker = (BLOCK_Q * BLOCK_K + BLOCK_Q * head_dim + 2 * BLOCK_Q) * 4;
    let hdp = head_dim.next_multiple_of(TILED_LANES);
    let packed = heads * (n.div_ceil(STRIP) * STRIP * head_dim + n * hdp) * 4;
    let tiled_worker = (TILE_Q * (LDS + head_dim + hdp) + 2 * TILE_Q) * 4;
    let per_worker = gemm_worker.max(tiled_worker);
    converted + outputs + packed + threads.max(1) * per_worker
}

/// Attention of `q`, `k`, `v` `[n, heads, head_dim]` (f32, f16 or bf16, all the same) within
/// `params.segments`; returns `[n, heads, head_dim]` in the input dtype. Scores, softmax and
/// the weighted sum are f32 whatever the storage dtype. Memory beyond the inputs:
/// [`segment_attention_scratch_bytes`] (linear in `n`).
///
/// Errors: [`KernelError::Invalid`] when shapes or dtypes disagree or the segments do not tile
/// the rows; [`KernelError::UnsupportedDevice`] off the CPU.
pub fn segment_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &SegmentAttentionParams<'_>,
) -> Result<Tensor, KernelError> {
    for t in [q, k, v] {
        require_cpu(NAME, t)?;
    }
    let (n, heads, hd) = q.dims3()?;
    if k.dims() != q.dims() || v.dims() != q.dims() {
        return Err(KernelError::Invalid {
            kernel: NAME,
            msg: format!(
                "q {:?}, k {:?}, v {:?} must have one shape",
                q.dims(),
                k.dims(),
                v.dims()
            ),
        });
    }
    if k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        return Err(KernelError::Invalid {
            kernel: NAME,
            msg: format!(
                "q {:?}, k {:?}, v {:?} must have one dtype",
                q.dtype(),
                k.dtype(),
                v.dtype()
            ),
        });
    }
    validate_segments(NAME, params.segments, n)?;
    let f32c =
        |t: &Tensor| -> Result<Tensor, KernelError> { Ok(t.to_dtype(DType::F32)?.contiguous()?) };
    let op = SegmentOp {
        segments: params.segments,
        heads,
        head_dim: hd,
        scale: params.scale,
        kernel: Kernel::detected(),
    };
    let out = f32c(q)?.apply_op3_no_bwd(&f32c(k)?, &f32c(v)?, &op)?;
    Ok(out.to_dtype(q.dtype())?)
}

/// Which products the native kernel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    /// `gemm` calls per tile (any CPU).
    Gemm,
    /// The AVX-512 micro-kernels of `tiled.rs`.
    #[cfg(target_arch = "x86_64")]
    Tiled,
}

impl Kernel {
    /// The AVX-512 kernel when the CPU has AVX-512F, `gemm` otherwise.
    fn detected() -> Self {
        #[cfg(target_arch = "x86_64")]
        if tiled::available() {
            return Self::Tiled;
        }
        Self::Gemm
    }
}

struct SegmentOp<'a> {
    segments: &'a [(usize, usize)],
    heads: usize,
    head_dim: usize,
    scale: f32,
    kernel: Kernel,
}

/// One task: head `head`, query rows `q0..q1` of the segment `seg_start..seg_end`.
#[derive(Clone, Copy)]
struct Task {
    head: usize,
    q0: usize,
    q1: usize,
    seg_start: usize,
    seg_end: usize,
}

/// The `[n, heads, head_dim]` output shared by the tasks, each of which writes its own rows
/// `(query, head)`.
#[derive(Clone, Copy)]
struct OutRows(*mut f32);

impl OutRows {
    /// The `len` floats from `start`.
    ///
    /// # Safety
    /// `start + len` within the buffer, which outlives `'a`; no other live reference to them.
    unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

// SAFETY: tasks write disjoint rows (see `Task`).
unsafe impl Send for OutRows {}
// SAFETY: as above.
unsafe impl Sync for OutRows {}

/// Per-worker scratch of the `gemm` kernel: score tile, accumulator, running max and
/// denominator.
struct Scratch {
    s: Vec<f32>,
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

impl SegmentOp<'_> {
    /// Tasks of `block` queries of one segment and one head, every output row in one task.
    fn tasks(&self, block: usize) -> Vec<Task> {
        let mut tasks = Vec::new();
        for head in 0..self.heads {
            for &(start, len) in self.segments {
                let end = start + len;
                tasks.extend((start..end).step_by(block).map(|q0| Task {
                    head,
                    q0,
                    q1: (q0 + block).min(end),
                    seg_start: start,
                    seg_end: end,
                }));
            }
        }
        tasks
    }

    /// `[n, heads, head_dim]` attention output of `q`, `k`, `v` (`[n, heads, head_dim]`).
    fn run(&self, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
        let hd = self.head_dim;
        let mut out = vec![0f32; q.len()];
        let rows = OutRows(out.as_mut_ptr());
        match self.kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Tiled => {
                let tasks = self.tasks(TILE_Q);
                // SAFETY: `Kernel::Tiled` is chosen only where AVX-512F was detected; the
                // tasks cover every row once; `out` holds n · heads · hd floats.
                unsafe { tiled::run(tasks, (self.heads, hd, self.scale), q, k, v, rows) };
            }
            Kernel::Gemm => self.tasks(BLOCK_Q).into_par_iter().for_each_init(
                || Scratch {
                    s: vec![0f32; BLOCK_Q * BLOCK_K],
                    acc: vec![0f32; BLOCK_Q * hd],
                    m: vec![0f32; BLOCK_Q],
                    l: vec![0f32; BLOCK_Q],
                },
                |scratch, task| self.task(task, q, k, v, scratch, rows),
            ),
        }
        out
    }

    /// Runs one task of the `gemm` kernel into its rows of `out`.
    fn task(&self, t: Task, q: &[f32], k: &[f32], v: &[f32], sc: &mut Scratch, out: OutRows) {
        let (hd, row) = (self.head_dim, (self.heads * self.head_dim) as isize);
        let rows = t.q1 - t.q0;
        let at = |r: usize| (r * self.heads + t.head) * hd;
        let (m, l, acc) = (
            &mut sc.m[..rows],
            &mut sc.l[..rows],
            &mut sc.acc[..rows * hd],
        );
        m.fill(f32::NEG_INFINITY);
        l.fill(0.0);
        acc.fill(0.0);
        for k0 in (t.seg_start..t.seg_end).step_by(BLOCK_K) {
            let cols = (t.seg_end - k0).min(BLOCK_K);
            let s = &mut sc.s[..rows * cols];
            // S[rows, cols] = scale · Q[q0..q1] · K[k0..k0+cols]ᵀ; rows of q/k are `row` apart.
            // SAFETY: every index gemm reads is `at(r) + d` for r < n and d < hd, inside the
            // `[n, heads, hd]` buffers; `s` holds rows × cols elements with row stride cols.
            unsafe {
                gemm::gemm(
                    rows,
                    cols,
                    hd,
                    s.as_mut_ptr(),
                    1,
                    cols as isize,
                    false,
                    q.as_ptr().add(at(t.q0)),
                    1,
                    row,
                    k.as_ptr().add(at(k0)),
                    row,
                    1,
                    0.0,
                    self.scale,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            online_softmax(s, cols, m, l, acc, hd);
            // acc[rows, hd] += P[rows, cols] · V[k0..k0+cols].
            // SAFETY: as above; `acc` holds rows × hd elements with row stride hd.
            unsafe {
                gemm::gemm(
                    rows,
                    hd,
                    cols,
                    acc.as_mut_ptr(),
                    1,
                    hd as isize,
                    true,
                    s.as_ptr(),
                    1,
                    cols as isize,
                    v.as_ptr().add(at(k0)),
                    1,
                    row,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }
        for r in 0..rows {
            let inv = 1.0 / l[r];
            // SAFETY: row (q0 + r, head) belongs to this task alone; `out` holds n · heads · hd.
            let dst = unsafe { out.slice(at(t.q0 + r), hd) };
            for (o, &a) in dst.iter_mut().zip(&acc[r * hd..(r + 1) * hd]) {
                *o = a * inv;
            }
        }
    }
}

/// The online-softmax step for one score tile `s` `[rows, cols]` (rows = `m.len()`, row
/// stride `cols`): per row, the new running maximum `m`, `s ← exp(s - m)`, the denominator `l
/// ← l · e^(m_old - m) + Σ s` and the accumulator row `acc ← acc · e^(m_old - m)` (`hd`
/// wide). On x86-64 with AVX2 and FMA (detected once, as for [`crate::PackedLinear`]) the same
/// code is compiled for 8-lane vectors; the lane-wise maximum and sum (8 partial sums, then
/// added in order) make both paths give the same bits.
fn online_softmax(
    s: &mut [f32],
    cols: usize,
    m: &mut [f32],
    l: &mut [f32],
    acc: &mut [f32],
    hd: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::linear::Isa::detected() == crate::linear::Isa::Avx2Fma {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { online_softmax_avx2(s, cols, m, l, acc, hd) };
    }
    online_softmax_body::<LANES>(s, cols, cols, m, l, acc, hd)
}

/// [`online_softmax`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn online_softmax_avx2(
    s: &mut [f32],
    cols: usize,
    m: &mut [f32],
    l: &mut [f32],
    acc: &mut [f32],
    hd: usize,
) {
    online_softmax_body::<LANES>(s, cols, cols, m, l, acc, hd)
}

/// Lanes of the partial maxima and sums in [`online_softmax`] (one AVX2 vector).
pub(crate) const LANES: usize = 8;

/// [`online_softmax`]'s step for rows of `s` `lds` apart (columns `0..cols` of each) and
/// accumulator rows `ld_acc` apart (all `ld_acc` columns rescaled), with `L` lane-wise
/// partial maxima and sums (one vector of the caller's instruction set); inlined into each
/// caller's instruction set.
#[inline(always)]
fn online_softmax_body<const L: usize>(
    s: &mut [f32],
    lds: usize,
    cols: usize,
    m: &mut [f32],
    l: &mut [f32],
    acc: &mut [f32],
    ld_acc: usize,
) {
    for (r, srow) in s.chunks_mut(lds).enumerate().take(m.len()) {
        let srow = &mut srow[..cols];
        let mut lane_max = [f32::NEG_INFINITY; L];
        let mut chunks = srow.chunks_exact(L);
        for c in &mut chunks {
            for (mx, &x) in lane_max.iter_mut().zip(c) {
                *mx = if x > *mx { x } else { *mx };
            }
        }
        let block_max = chunks
            .remainder()
            .iter()
            .chain(&lane_max)
            .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a });
        let new_max = m[r].max(block_max);
        // std's exp: the first block has m = -inf, whose correction must be exactly 0.
        let correction = (m[r] - new_max).exp();
        l[r] = l[r] * correction + exp_shifted_sum_lanes::<L>(srow, new_max);
        m[r] = new_max;
        acc[r * ld_acc..(r + 1) * ld_acc]
            .iter_mut()
            .for_each(|a| *a *= correction);
    }
}

/// `s ← exp(s - max)` in place (`max` at least every element), returning `Σ s` summed in
/// [`LANES`] partial sums (the tail's sum first, then the lanes in order): an order fixed by
/// the length alone, which vectorizes. Shared by the vision and the paged attention's softmax.
#[inline(always)]
pub(crate) fn exp_shifted_sum(s: &mut [f32], max: f32) -> f32 {
    exp_shifted_sum_lanes::<LANES>(s, max)
}

/// [`exp_shifted_sum`] in `L` partial sums.
#[inline(always)]
fn exp_shifted_sum_lanes<const L: usize>(s: &mut [f32], max: f32) -> f32 {
    let mut lane_sum = [0f32; L];
    let mut chunks = s.chunks_exact_mut(L);
    for c in &mut chunks {
        for (sum, x) in lane_sum.iter_mut().zip(c) {
            *x = exp_nonpositive(*x - max);
            *sum += *x;
        }
    }
    let mut tail = 0f32;
    for x in chunks.into_remainder() {
        *x = exp_nonpositive(*x - max);
        tail += *x;
    }
    lane_sum.iter().fold(tail, |a, &x| a + x)
}

/// `e^x` for `x <= 0` (inputs below -87 give e^-87 ≈ 1.6e-38, not 0), branch-free so that the
/// softmax loop vectorizes: Cephes `expf` (range reduction `x = k ln 2 + r`, `|r| <= ln 2 / 2`,
/// degree-6 polynomial for `e^r`, then `2^k` through the exponent bits), within 2 ulp of
/// `f32::exp` on that range. No float-to-integer cast (Rust's saturating `as` is compiled to
/// one scalar conversion per lane with AVX-512): `k` is a truncation in f32, and `k + 127`
/// the low bits of the f32 `2²³ + k + 127` (exact: an integer below 2²⁴).
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(-87.0);
    // Truncation toward zero of x·log2(e) - 0.5 (<= -0.5) rounds x·log2(e) to a nearest
    // integer, in -126..=0.
    let kf = (x * std::f32::consts::LOG2_E - 0.5).trunc();
    let r = x - kf * 0.693_359_4 + kf * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p * r + c;
    }
    let er = p * r * r + r + 1.0;
    let biased = (kf + (8_388_608.0 + 127.0)).to_bits() - 0x4B00_0000;
    er * f32::from_bits(biased << 23)
}

impl CustomOp3 for SegmentOp<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let n = l1.shape().dims()[0];
        let shape = Shape::from((n, self.heads, self.head_dim));
        let (a, b, c) = (l1.start_offset(), l2.start_offset(), l3.start_offset());
        match (s1, s2, s3) {
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
                // The view's own elements only: a narrowed view's storage runs past them.
                let len = n * self.heads * self.head_dim;
                let (q, k, v) = (&q[a..a + len], &k[b..b + len], &v[c..c + len]);
                Ok((CpuStorage::F32(self.run(q, k, v)), shape))
            }
            (q, _, _) => candle_core::bail!("{NAME}: expects f32 storage, got {:?}", q.dtype()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct attention in f64 of `[n, heads, hd]` rows within `segs`.
    fn direct(
        (q, k, v): (&[f32], &[f32], &[f32]),
        segs: &[(usize, usize)],
        (heads, hd, scale): (usize, usize, f64),
    ) -> Vec<f32> {
        let mut out = vec![0f32; q.len()];
        let at = |r: usize, h: usize| (r * heads + h) * hd;
        for &(start, len) in segs {
            for h in 0..heads {
                for i in start..start + len {
                    let w: Vec<f64> = (start..start + len)
                        .map(|j| {
                            let dot: f64 = (0..hd)
                                .map(|d| q[at(i, h) + d] as f64 * k[at(j, h) + d] as f64)
                                .sum();
                            dot * scale
                        })
                        .collect();
                    let max = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = w.iter().map(|x| (x - max).exp()).collect();
                    let denom: f64 = w.iter().sum();
                    for d in 0..hd {
                        let o: f64 = w
                            .iter()
                            .enumerate()
                            .map(|(j, wj)| wj * v[at(start + j, h) + d] as f64)
                            .sum();
                        out[at(i, h) + d] = (o / denom) as f32;
                    }
                }
            }
        }
        out
    }

    /// Both kernels against the direct computation, whichever one the dispatch picks: head
    /// widths that are (80, Qwen2-VL's), are not (8, 40, 100) and exceed (100) five vectors
    /// of 16; segments that start inside a strip of 32 keys, span several key blocks of 256
    /// and leave ragged query tiles.
    #[test]
    fn both_kernels_match_direct() {
        let kernels = [
            Kernel::Gemm,
            #[cfg(target_arch = "x86_64")]
            Kernel::Tiled,
        ];
        let lens = [45, 1, 0, 600, 77];
        let mut start = 0;
        let segs: Vec<(usize, usize)> = lens
            .iter()
            .map(|&l| {
                start += l;
                (start - l, l)
            })
            .collect();
        let n: usize = lens.iter().sum();
        for (heads, hd) in [(2, 80), (3, 8), (1, 40), (1, 100)] {
            let make = |seed| crate::lcg_uniform(seed, n * heads * hd, 2.0);
            let (q, k, v) = (make(11), make(12), make(13));
            let scale = 1.0 / (hd as f64).sqrt();
            let want = direct((&q, &k, &v), &segs, (heads, hd, scale));
            for kernel in kernels {
                #[cfg(target_arch = "x86_64")]
                if kernel == Kernel::Tiled && !tiled::available() {
                    continue;
                }
                let op = SegmentOp {
                    segments: &segs,
                    heads,
                    head_dim: hd,
                    scale: scale as f32,
                    kernel,
                };
                let got = op.run(&q, &k, &v);
                let dev = crate::max_abs_diff(&got, &want);
                assert!(
                    dev <= 1e-5,
                    "{kernel:?} heads {heads} hd {hd}: max |Δ| {dev}"
                );
            }
        }
    }

    #[test]
    fn fast_exp_is_within_2_ulp() {
        for i in 0..=200_000 {
            let x = -(i as f32) * 87.0 / 200_000.0;
            let (got, want) = (exp_nonpositive(x), x.exp());
            assert!(
                (got - want).abs() <= 2.0 * f32::EPSILON * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        // Bitwise the integer-cast formulation (2^k from `k as i32`) it replaced.
        for i in 0..=100_000 {
            let x = -(i as f32) * 90.0 / 100_000.0;
            let y = x.max(-87.0);
            let k = (y * std::f32::consts::LOG2_E - 0.5) as i32;
            let scaled = exp_nonpositive(x) / f32::from_bits(((k + 127) as u32) << 23);
            let kf = k as f32;
            let r = y - kf * 0.693_359_4 + kf * 2.121_944_4e-4;
            let mut p = 1.987_569_1e-4f32;
            for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
                p = p * r + c;
            }
            assert_eq!(scaled.to_bits(), (p * r * r + r + 1.0).to_bits(), "x = {x}");
        }
        assert!(exp_nonpositive(-1e30) > 0.0 && exp_nonpositive(-1e30) < 1e-37);
    }
}
