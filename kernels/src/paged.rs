//! `paged_attention`: ragged causal attention of a flattened batch of queries over the paged
//! KV cache, with grouped-query attention (GQA).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::linear::Isa;
use crate::segment::{exp_nonpositive, LANES};
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
/// (f32/f16/bf16; query and cache must share it). Parallel over tokens × heads with rayon.
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
    fn run<T: Element>(&self, q: &[T], k: &[T], v: &[T]) -> Vec<T> {
        let (hd, nh) = (self.head_dim, self.n_heads);
        let mut out = vec![T::from_f32(0.0); self.tokens.len() * nh * hd];
        let isa = Isa::detected();
        out.par_chunks_mut(hd).enumerate().for_each_init(
            || RowScratch {
                qf: vec![0f32; hd],
                scores: Vec::new(),
                acc: vec![0f32; hd],
            },
            |scratch, (row, o)| {
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Avx2Fma {
                    // SAFETY: AVX2 and FMA were detected at run time.
                    return unsafe { self.attend_row_avx2(row, (q, k, v), scratch, o) };
                }
                self.attend_row(row, (q, k, v), scratch, o)
            },
        );
        out
    }

    /// [`PagedOp::attend_row`] compiled for AVX2 + FMA (8-lane dot products, softmax and
    /// weighted sum).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_row_avx2<T: Element>(
        &self,
        row: usize,
        qkv: (&[T], &[T], &[T]),
        scratch: &mut RowScratch,
        o: &mut [T],
    ) {
        self.attend_row(row, qkv, scratch, o)
    }

    /// Output row `row` (token `row / n_heads`, head `row % n_heads`): attention of its query
    /// over keys `0..=pos` of its sequence. Dot products and the denominator are sums in
    /// [`LANES`] partial sums (then added in order), so that they vectorize; the same code
    /// runs on both instruction sets, so both give the same bits.
    #[inline(always)]
    fn attend_row<T: Element>(
        &self,
        row: usize,
        (q, k, v): (&[T], &[T], &[T]),
        RowScratch { qf, scores, acc }: &mut RowScratch,
        o: &mut [T],
    ) {
        let (hd, nh) = (self.head_dim, self.n_heads);
        let group = nh / self.kv_heads;
        let (tok, h) = (row / nh, row % nh);
        let (seq, pos) = self.tokens[tok];
        let table = &self.block_tables[seq];
        let kvh = h / group;
        let qrow = &q[row * hd..(row + 1) * hd];
        for (dst, &x) in qf.iter_mut().zip(qrow) {
            *dst = x.to_f32() * self.scale;
        }
        let offset = |p: usize| {
            let slot = table[p / self.block_size] as usize * self.block_size + p % self.block_size;
            (slot * self.kv_heads + kvh) * hd
        };
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for p in 0..=pos {
            let off = offset(p);
            let s = lane_dot(&k[off..off + hd], qf);
            max = max.max(s);
            scores.push(s);
        }
        let mut lanes = [0f32; LANES];
        let mut chunks = scores.chunks_exact_mut(LANES);
        for c in &mut chunks {
            for (sum, s) in lanes.iter_mut().zip(c) {
                *s = exp_nonpositive(*s - max);
                *sum += *s;
            }
        }
        let mut denom = 0f32;
        for s in chunks.into_remainder() {
            *s = exp_nonpositive(*s - max);
            denom += *s;
        }
        let denom = lanes.iter().fold(denom, |a, &x| a + x);
        acc.iter_mut().for_each(|a| *a = 0.0);
        for (p, &w) in scores.iter().enumerate() {
            let off = offset(p);
            for (a, &vx) in acc.iter_mut().zip(&v[off..off + hd]) {
                *a += w * vx.to_f32();
            }
        }
        for (dst, &a) in o.iter_mut().zip(acc.iter()) {
            *dst = T::from_f32(a / denom);
        }
    }
}

/// Per-worker scratch of [`PagedOp::run`]: the scaled f32 query, the scores of one row and
/// its f32 accumulator.
struct RowScratch {
    qf: Vec<f32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
}

/// `Σ a[i] · b[i]` in [`LANES`] partial sums, then added in order.
#[inline(always)]
fn lane_dot<T: Element>(a: &[T], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let mut sum = 0f32;
    for (&x, &y) in ac.remainder().iter().zip(bc.remainder()) {
        sum += x.to_f32() * y;
    }
    for (x, y) in ac.zip(bc) {
        for ((l, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x.to_f32() * y;
        }
    }
    lanes.iter().fold(sum, |a, &x| a + x)
}

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
