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
//! accumulation); tasks (head × segment × query block) run in parallel with rayon.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::{require_cpu, KernelError};

const NAME: &str = "segment_attention";

/// Queries per block of the native kernel (rows of one task's score tile).
pub const BLOCK_Q: usize = 128;
/// Keys per block of the native kernel (columns of one task's score tile).
pub const BLOCK_K: usize = 512;

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
/// `heads × head_dim` in storage dtype `dtype` with `threads` rayon workers: the f32 copies of
/// `q`, `k`, `v` when they are not f32, the head-major f32 output and its `[n, heads,
/// head_dim]` reordering (all linear in `n`), and one score tile, accumulator and row
/// statistics per worker (independent of `n`). There is no term in `n²`.
pub fn segment_attention_scratch_bytes(
    n: usize,
    heads: usize,
    head_dim: usize,
    dtype: DType,
    threads: usize,
) -> usize {
    let rows = n * heads * head_dim;
    let converted = if dtype == DType::F32 { 0 } else { 3 * rows * 4 };
    // Head-major f32 output, its reordering, and the cast back when the dtype is not f32.
    let outputs = 2 * rows * 4 + rows * dtype.size_in_bytes() * usize::from(dtype != DType::F32);
    let per_worker = (BLOCK_Q * BLOCK_K + BLOCK_Q * head_dim + 2 * BLOCK_Q) * 4;
    converted + outputs + threads.max(1) * per_worker
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
    };
    // The op returns head-major `[heads, n, hd]`: every task owns a contiguous output range.
    let out = f32c(q)?.apply_op3_no_bwd(&f32c(k)?, &f32c(v)?, &op)?;
    Ok(out.transpose(0, 1)?.contiguous()?.to_dtype(q.dtype())?)
}

struct SegmentOp<'a> {
    segments: &'a [(usize, usize)],
    heads: usize,
    head_dim: usize,
    scale: f32,
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

/// Per-worker scratch: score tile, accumulator, running max and denominator.
struct Scratch {
    s: Vec<f32>,
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

impl SegmentOp<'_> {
    /// Tasks in head-major output order (head, then row).
    fn tasks(&self) -> Vec<Task> {
        let mut tasks = Vec::new();
        for head in 0..self.heads {
            for &(start, len) in self.segments {
                let end = start + len;
                tasks.extend((start..end).step_by(BLOCK_Q).map(|q0| Task {
                    head,
                    q0,
                    q1: (q0 + BLOCK_Q).min(end),
                    seg_start: start,
                    seg_end: end,
                }));
            }
        }
        tasks
    }

    fn run(&self, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
        let hd = self.head_dim;
        let n: usize = self.segments.iter().map(|s| s.1).sum();
        let mut out = vec![0f32; self.heads * n * hd];
        let tasks = self.tasks();
        let mut chunks = Vec::with_capacity(tasks.len());
        let mut rest = out.as_mut_slice();
        for t in &tasks {
            let (chunk, tail) = rest.split_at_mut((t.q1 - t.q0) * hd);
            chunks.push(chunk);
            rest = tail;
        }
        tasks.into_par_iter().zip(chunks).for_each_init(
            || Scratch {
                s: vec![0f32; BLOCK_Q * BLOCK_K],
                acc: vec![0f32; BLOCK_Q * hd],
                m: vec![0f32; BLOCK_Q],
                l: vec![0f32; BLOCK_Q],
            },
            |scratch, (task, o)| self.task(task, q, k, v, scratch, o),
        );
        out
    }

    /// Runs one task into `o` (`[q1 - q0, head_dim]`, head-major output rows).
    fn task(&self, t: Task, q: &[f32], k: &[f32], v: &[f32], sc: &mut Scratch, o: &mut [f32]) {
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
            for (dst, &a) in o[r * hd..(r + 1) * hd]
                .iter_mut()
                .zip(&acc[r * hd..(r + 1) * hd])
            {
                *dst = a * inv;
            }
        }
    }
}

/// The online-softmax step for one score tile `s` `[rows, cols]` (rows = `m.len()`): per row,
/// the new running maximum `m`, `s ← exp(s - m)`, the denominator `l ← l · e^(m_old - m) +
/// Σ s` and the accumulator row `acc ← acc · e^(m_old - m)` (`hd` wide). On x86-64 with AVX2
/// and FMA (detected once, as for [`crate::PackedLinear`]) the same code is compiled for 8-lane
/// vectors; the lane-wise maximum and sum (8 partial sums, then added in order) make both
/// paths give the same bits.
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
    online_softmax_body(s, cols, m, l, acc, hd)
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
    online_softmax_body(s, cols, m, l, acc, hd)
}

/// Lanes of the partial maxima and sums in [`online_softmax`] (one AVX2 vector).
pub(crate) const LANES: usize = 8;

#[inline(always)]
fn online_softmax_body(
    s: &mut [f32],
    cols: usize,
    m: &mut [f32],
    l: &mut [f32],
    acc: &mut [f32],
    hd: usize,
) {
    for (r, srow) in s.chunks_exact_mut(cols).enumerate().take(m.len()) {
        let mut lane_max = [f32::NEG_INFINITY; LANES];
        let mut chunks = srow.chunks_exact(LANES);
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
        l[r] = l[r] * correction + exp_shifted_sum(srow, new_max);
        m[r] = new_max;
        acc[r * hd..(r + 1) * hd]
            .iter_mut()
            .for_each(|a| *a *= correction);
    }
}

/// `s ← exp(s - max)` in place (`max` at least every element), returning `Σ s` summed in
/// [`LANES`] partial sums (the tail's sum first, then the lanes in order): an order fixed by
/// the length alone, which vectorizes. Shared by the vision and the paged attention's softmax.
#[inline(always)]
pub(crate) fn exp_shifted_sum(s: &mut [f32], max: f32) -> f32 {
    let mut lane_sum = [0f32; LANES];
    let mut chunks = s.chunks_exact_mut(LANES);
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
/// `f32::exp` on that range.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(-87.0);
    // Truncation of a value <= 0.5 toward zero rounds x·log2(e) to a nearest integer.
    let k = (x * std::f32::consts::LOG2_E - 0.5) as i32;
    let kf = k as f32;
    let r = x - kf * 0.693_359_4 + kf * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p * r + c;
    }
    let er = p * r * r + r + 1.0;
    er * f32::from_bits(((k + 127) as u32) << 23)
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
        let shape = Shape::from((self.heads, n, self.head_dim));
        let (a, b, c) = (l1.start_offset(), l2.start_offset(), l3.start_offset());
        match (s1, s2, s3) {
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
                Ok((CpuStorage::F32(self.run(&q[a..], &k[b..], &v[c..])), shape))
            }
            (q, _, _) => candle_core::bail!("{NAME}: expects f32 storage, got {:?}", q.dtype()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exp_nonpositive;

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
        assert!(exp_nonpositive(-1e30) > 0.0 && exp_nonpositive(-1e30) < 1e-37);
    }
}
