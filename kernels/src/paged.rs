//! `paged_attention`: ragged causal attention of a flattened batch of queries over the paged
//! KV cache, with grouped-query attention (GQA).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use crate::linear::Isa;
use crate::segment::exp_shifted_sum;
use crate::{require_cpu, validate_step, Element, KernelError};

const NAME: &str = "paged_attention";

/// Batch metadata for [`paged_attention`] (the fields of `verisample_models::batch::BatchMeta`
/// the kernel needs).
#[derive(Debug, Clone, Copy)]
pub struct PagedAttentionParams<'a> {
    /// New tokens per sequence in this step; they sum to `total_tokens`.
    pub query_lens: &'a [usize],
    /// Tokens in the cache per sequence after this step (past + new), `>= query_lens[i]`.
    pub context_lens: &'a [usize],
    /// Cache blocks of each sequence, in order; must cover `context_lens[i]` tokens.
    pub block_tables: &'a [Vec<u32>],
    /// Softmax scale, usually `head_dim^-0.5`.
    pub scale: f32,
}

/// Attention of `query` `[total_tokens, n_heads, head_dim]` over `key_cache`/`value_cache`
/// `[num_blocks, block_size, n_kv_heads, head_dim]` (already holding this step's keys/values,
/// see [`crate::reshape_and_cache`]); returns `[total_tokens, n_heads, head_dim]` in the query
/// dtype.
///
/// Query `j` of sequence `s` attends to cache positions `0..=context_lens[s] - query_lens[s] + j`.
/// Head `h` reads KV head `h / (n_heads / n_kv_heads)` (GQA). Softmax is the numerically stable
/// one (max subtracted); products and sums accumulate in f32 whatever the storage dtype
/// (f32/f16/bf16; query and cache must share it). Parallel over tokens × KV heads with rayon
/// (the query heads of a GQA group together).
///
/// Errors: [`KernelError::Invalid`] for inconsistent shapes/metadata (lengths, a block table
/// too short, a block id out of range, `n_heads % n_kv_heads != 0`);
/// [`KernelError::UnsupportedDevice`] off the CPU.
pub fn paged_attention(
    query: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    params: &PagedAttentionParams<'_>,
) -> Result<Tensor, KernelError> {
    for t in [query, key_cache, value_cache] {
        require_cpu(NAME, t)?;
    }
    let invalid = |msg: String| KernelError::Invalid { kernel: NAME, msg };
    let (total, n_heads, hd) = query.dims3()?;
    let (num_blocks, block_size, kvh, hd_c) = key_cache.dims4()?;
    if value_cache.dims() != key_cache.dims() {
        return Err(invalid(format!(
            "value cache {:?} differs from key cache {:?}",
            value_cache.dims(),
            key_cache.dims()
        )));
    }
    if hd != hd_c || kvh == 0 || n_heads % kvh != 0 {
        return Err(invalid(format!(
            "query {:?} incompatible with cache {:?}",
            query.dims(),
            key_cache.dims()
        )));
    }
    let tokens = validate_step(NAME, params, total, block_size, num_blocks)?;
    let op = PagedOp {
        tokens,
        block_tables: params.block_tables,
        block_size,
        n_heads,
        kv_heads: kvh,
        head_dim: hd,
        scale: params.scale,
    };
    let out = query.contiguous()?.apply_op3_no_bwd(
        &key_cache.contiguous()?,
        &value_cache.contiguous()?,
        &op,
    )?;
    Ok(out)
}

struct PagedOp<'a> {
    tokens: Vec<(usize, usize)>,
    block_tables: &'a [Vec<u32>],
    block_size: usize,
    n_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f32,
}

impl PagedOp<'_> {
    /// One rayon task per (token, KV head): the `group` query heads that share the KV head
    /// are computed together, so each key and value row is read once for all of them (GQA;
    /// the decode profile of issue 20). Per head the arithmetic is that of a head alone: scores
    /// by [`dot`], the softmax and the weighted sum of values in increasing position.
    fn run<T: Element>(&self, q: &[T], k: &[T], v: &[T]) -> Vec<T> {
        let (hd, nh, kv_heads) = (self.head_dim, self.n_heads, self.kv_heads);
        let group = nh / kv_heads;
        let width = group * hd;
        let mut out = vec![T::from_f32(0.0); self.tokens.len() * nh * hd];
        #[cfg(target_arch = "x86_64")]
        let isa = Isa::detected();
        out.par_chunks_mut(width).enumerate().for_each_init(
            || GroupScratch {
                qf: vec![0f32; width],
                scores: Vec::new(),
                acc: vec![0f32; width],
                denoms: vec![0f32; group],
            },
            |scratch, (row, o)| {
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Avx2Fma {
                    // SAFETY: AVX2 and FMA were detected at run time.
                    return unsafe { self.attend_group_avx2(row, (q, k, v), scratch, o) };
                }
                self.attend_group(row, (q, k, v), scratch, o)
            },
        );
        out
    }

    /// [`PagedOp::attend_group`] compiled for AVX2 + FMA (8-lane dot products, softmax and
    /// weighted sum).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_group_avx2<T: Element>(
        &self,
        row: usize,
        qkv: (&[T], &[T], &[T]),
        scratch: &mut GroupScratch,
        o: &mut [T],
    ) {
        self.attend_group(row, qkv, scratch, o)
    }

    /// Output rows of token `row / kv_heads` for the query heads that share KV head
    /// `row % kv_heads` (`o`: `group` heads side by side): attention of each over keys
    /// `0..=pos` of its sequence. Dot products ([`dot`]) and the softmax denominators are
    /// sums in fixed-order partial sums, so that they vectorize; the same code runs on both
    /// instruction sets, so both give the same bits, whatever the batch.
    #[inline(always)]
    fn attend_group<T: Element>(
        &self,
        row: usize,
        (q, k, v): (&[T], &[T], &[T]),
        GroupScratch {
            qf,
            scores,
            acc,
            denoms,
        }: &mut GroupScratch,
        o: &mut [T],
    ) {
        let (hd, kv_heads) = (self.head_dim, self.kv_heads);
        let width = qf.len();
        let (tok, kvh) = (row / kv_heads, row % kv_heads);
        let (seq, pos) = self.tokens[tok];
        let table = &self.block_tables[seq];
        for (dst, &x) in qf.iter_mut().zip(&q[row * width..(row + 1) * width]) {
            *dst = x.to_f32() * self.scale;
        }
        let offset = |p: usize| {
            let slot = table[p / self.block_size] as usize * self.block_size + p % self.block_size;
            (slot * kv_heads + kvh) * hd
        };
        // `scores` `[group][n]`: head `g`'s scores, then its softmax numerators, whose sum is
        // `denoms[g]`.
        let n = pos + 1;
        scores.clear();
        scores.resize(width / hd * n, 0.0);
        for p in 0..n {
            let off = offset(p);
            let key = &k[off..off + hd];
            for (g, qg) in qf.chunks_exact(hd).enumerate() {
                scores[g * n + p] = dot(key, qg);
            }
        }
        for (s, d) in scores.chunks_exact_mut(n).zip(denoms.iter_mut()) {
            let max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            *d = exp_shifted_sum(s, max);
        }
        acc.fill(0.0);
        for p in 0..n {
            let off = offset(p);
            let value = &v[off..off + hd];
            for (g, acc) in acc.chunks_exact_mut(hd).enumerate() {
                let w = scores[g * n + p];
                for (a, &vx) in acc.iter_mut().zip(value) {
                    *a += w * vx.to_f32();
                }
            }
        }
        let heads = o.chunks_exact_mut(hd).zip(acc.chunks_exact(hd));
        for ((o, acc), &d) in heads.zip(denoms.iter()) {
            for (dst, &a) in o.iter_mut().zip(acc) {
                *dst = T::from_f32(a / d);
            }
        }
    }
}

/// Per-worker scratch of [`PagedOp::run`]: the scaled f32 queries of one group of heads,
/// their scores `[group][n]`, f32 accumulators and softmax denominators.
struct GroupScratch {
    qf: Vec<f32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
    denoms: Vec<f32>,
}

/// `Σ_i k[i] · q[i]` in f32 over [`DOT_LANES`] interleaved partial sums (lane `l` adds the
/// products `i ≡ l mod DOT_LANES` in increasing `i`), summed pairwise at the end, then the
/// products of the tail in order: an order fixed by the length alone (so a query row's scores
/// do not depend on the batch), which the compiler keeps in SIMD registers — a sequential sum
/// is a chain of dependent adds, one per product (the decode profile of issue 20: 15 % of the
/// time in this loop at batch 16).
fn dot<T: Element>(k: &[T], q: &[f32]) -> f32 {
    let mut acc = [0f32; DOT_LANES];
    let (kc, qc) = (k.chunks_exact(DOT_LANES), q.chunks_exact(DOT_LANES));
    let tail = kc.remainder().iter().zip(qc.remainder());
    for (kc, qc) in kc.zip(qc) {
        for ((a, &kx), &qx) in acc.iter_mut().zip(kc).zip(qc) {
            *a += kx.to_f32() * qx;
        }
    }
    let [a, b, c, d, e, f, g, h] = acc;
    let mut s = ((a + e) + (c + g)) + ((b + f) + (d + h));
    for (&kx, &qx) in tail {
        s += kx.to_f32() * qx;
    }
    s
}

/// Partial sums of [`dot`]: one AVX vector of f32 (two SSE ones).
const DOT_LANES: usize = 8;

impl CustomOp3 for PagedOp<'_> {
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
        let shape = Shape::from((self.tokens.len(), self.n_heads, self.head_dim));
        let (a, b, c) = (l1.start_offset(), l2.start_offset(), l3.start_offset());
        let out = match (s1, s2, s3) {
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
                CpuStorage::F32(self.run(&q[a..], &k[b..], &v[c..]))
            }
            (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => {
                CpuStorage::F16(self.run(&q[a..], &k[b..], &v[c..]))
            }
            (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => {
                CpuStorage::BF16(self.run(&q[a..], &k[b..], &v[c..]))
            }
            (q, k, _) => candle_core::bail!(
                "{NAME}: unsupported dtypes query {:?} / cache {:?} (f32, f16, bf16; must match)",
                q.dtype(),
                k.dtype()
            ),
        };
        Ok((out, shape))
    }
}
