//! The portable path: `reshape_and_cache` and `paged_attention` made only of candle tensor ops,
//! so they run on every candle device (CUDA, Metal, CPU).
//!
//! The step's metadata (slot indices, per-sequence gathers, causal positions) is uploaded once
//! per step as a few `u32` tensors ([`PortableStep::new`]) and reused by every layer.
//!
//! Attention pads the step's sequences to `[num_seqs, max_query_len]` queries over
//! `[num_seqs, max_context_len]` cache positions gathered through the block tables, applies the
//! causal rule of `verisample_models::batch` as an additive mask, and computes scores, softmax
//! and the weighted sum in f32 whatever the storage dtype (as the CPU kernel accumulates).
//! Padded query rows attend to position 0 (always valid) and are dropped at the end; padded
//! cache positions are masked out. Scores take `num_seqs · n_heads · max_query_len ·
//! max_context_len` f32 values: the scheduler's chunked prefill bounds the query side.

use candle_core::{DType, Device, Tensor};

use crate::{validate_step, KernelError, PagedAttentionParams};

/// Additive mask value for cache positions a query may not see: `exp(x - max)` underflows to
/// exactly 0 in f32, and unlike `-inf` it cannot turn a fully masked row into NaN.
const MASKED: f64 = -1e30;

/// Device-side metadata of one step for the portable path, built once per step.
#[derive(Debug)]
pub struct PortableStep {
    /// `[total_tokens, row]` u32: every element of row `i` is `slot_mapping[i]` (the index
    /// tensor `scatter_set` wants; `row = n_kv_heads * head_dim`). Built lazily per row width.
    slots: Tensor,
    /// `[num_seqs * max_q]` u32: the flattened query row of each padded query (0 for padding).
    q_gather: Tensor,
    /// `[num_seqs * max_c]` u32: the cache slot of each padded context position (slot of
    /// position 0 for padding; masked out).
    kv_slots: Tensor,
    /// `[num_seqs, max_q, max_c]` f32: 0 where the query may attend, [`MASKED`] elsewhere.
    bias: Tensor,
    /// `[total_tokens]` u32: the padded row `s * max_q + j` of each real query row.
    out_index: Tensor,
    num_seqs: usize,
    max_q: usize,
    max_c: usize,
    total: usize,
}

impl PortableStep {
    /// Uploads the step's metadata to `device`: `params` as for [`crate::paged_attention`],
    /// `slot_mapping` as for [`crate::reshape_and_cache`], for a pool of `num_blocks` blocks of
    /// `block_size` tokens.
    ///
    /// Errors: [`KernelError::Invalid`] for inconsistent metadata (the checks of the CPU
    /// kernels); candle errors for the uploads.
    pub fn new(
        params: &PagedAttentionParams<'_>,
        slot_mapping: &[u32],
        block_size: usize,
        num_blocks: usize,
        device: &Device,
    ) -> Result<Self, KernelError> {
        let total = slot_mapping.len();
        validate_step("paged_attention", params, total, block_size, num_blocks)?;
        let num_slots = (num_blocks * block_size) as u32;
        if let Some(bad) = slot_mapping.iter().find(|&&s| s >= num_slots) {
            return Err(KernelError::Invalid {
                kernel: "reshape_and_cache",
                msg: format!("slot {bad} outside the pool of {num_slots} slots"),
            });
        }
        let num_seqs = params.query_lens.len();
        let max_q = params.query_lens.iter().copied().max().unwrap_or(0).max(1);
        let max_c = params
            .context_lens
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(1);
        let mut q_gather = vec![0u32; num_seqs * max_q];
        let mut kv_slots = vec![0u32; num_seqs * max_c];
        let mut bias = vec![MASKED as f32; num_seqs * max_q * max_c];
        let mut out_index = Vec::with_capacity(total);
        let mut row = 0u32;
        for s in 0..num_seqs {
            let (q, c) = (params.query_lens[s], params.context_lens[s]);
            let table = &params.block_tables[s];
            let slot =
                |p: usize| table[p / block_size] * block_size as u32 + (p % block_size) as u32;
            for p in 0..max_c {
                // Padding repeats position 0, which every sequence has (c >= 1 when q >= 1).
                kv_slots[s * max_c + p] = if p < c { slot(p) } else { slot(0) };
            }
            for j in 0..max_q {
                let padded = s * max_q + j;
                // A padded query sees position 0 only, so its softmax row stays finite.
                let last = if j < q { c - q + j } else { 0 };
                if j < q {
                    q_gather[padded] = row;
                    out_index.push(padded as u32);
                    row += 1;
                }
                bias[padded * max_c..padded * max_c + last + 1].fill(0.0);
            }
        }
        let up = |v: &[u32]| Tensor::new(v, device);
        Ok(Self {
            slots: Tensor::new(slot_mapping, device)?,
            q_gather: up(&q_gather)?,
            kv_slots: up(&kv_slots)?,
            bias: Tensor::from_vec(bias, (num_seqs, max_q, max_c), device)?,
            out_index: up(&out_index)?,
            num_seqs,
            max_q,
            max_c,
            total,
        })
    }

    /// Writes `key`/`value` `[total_tokens, n_kv_heads, head_dim]` into the pools
    /// `[num_blocks, block_size, n_kv_heads, head_dim]` at this step's slots, in place (an
    /// in-place `scatter_set` on the flattened pool: every clone of the pool sees the write).
    ///
    /// Errors: [`KernelError::Invalid`] when shapes disagree or a pool is not contiguous.
    pub fn write_cache(
        &self,
        key: &Tensor,
        value: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
    ) -> Result<(), KernelError> {
        let invalid = |msg: String| KernelError::Invalid {
            kernel: "reshape_and_cache",
            msg,
        };
        let (num_blocks, block_size, kvh, hd) = key_cache.dims4()?;
        if value_cache.dims() != key_cache.dims() {
            return Err(invalid(format!(
                "value cache {:?} differs from key cache {:?}",
                value_cache.dims(),
                key_cache.dims()
            )));
        }
        if !key_cache.is_contiguous() || !value_cache.is_contiguous() {
            return Err(invalid("cache tensors must be contiguous".into()));
        }
        let row = kvh * hd;
        let index = self
            .slots
            .reshape((self.total, 1))?
            .broadcast_as((self.total, row))?
            .contiguous()?;
        for (name, new, pool) in [("key", key, key_cache), ("value", value, value_cache)] {
            let (n, h, d) = new.dims3()?;
            if n != self.total || h != kvh || d != hd {
                return Err(invalid(format!(
                    "{name} {:?} does not match slots {} x cache heads {kvh} x head_dim {hd}",
                    new.dims(),
                    self.total
                )));
            }
            let src = new
                .to_dtype(pool.dtype())?
                .reshape((n, row))?
                .contiguous()?;
            pool.reshape((num_blocks * block_size, row))?
                .scatter_set(&index, &src, 0)?;
        }
        Ok(())
    }

    /// Attention of `query` `[total_tokens, n_heads, head_dim]` over the pools (already holding
    /// this step's keys/values); returns `[total_tokens, n_heads, head_dim]` in the query dtype.
    /// Same rule, GQA mapping and scale as [`crate::paged_attention`].
    ///
    /// Errors: [`KernelError::Invalid`] when the query does not match the step or the pools.
    pub fn attend(
        &self,
        query: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
        scale: f32,
    ) -> Result<Tensor, KernelError> {
        let (total, nh, hd) = query.dims3()?;
        let (num_blocks, block_size, kvh, hd_c) = key_cache.dims4()?;
        if total != self.total || hd != hd_c || kvh == 0 || nh % kvh != 0 {
            return Err(KernelError::Invalid {
                kernel: "paged_attention",
                msg: format!(
                    "query {:?} incompatible with cache {:?} and a step of {} tokens",
                    query.dims(),
                    key_cache.dims(),
                    self.total
                ),
            });
        }
        let (b, mq, mc, group) = (self.num_seqs, self.max_q, self.max_c, nh / kvh);
        // [b * max_q, nh, hd] -> [b, kvh, group, max_q, hd] -> [b * kvh, group * max_q, hd]
        let q = (query.to_dtype(DType::F32)? * scale as f64)?
            .index_select(&self.q_gather, 0)?
            .reshape((b, mq, kvh, group, hd))?
            .permute((0, 2, 3, 1, 4))?
            .contiguous()?
            .reshape((b * kvh, group * mq, hd))?;
        let gather = |pool: &Tensor| -> Result<Tensor, KernelError> {
            Ok(pool
                .reshape((num_blocks * block_size, kvh, hd))?
                .index_select(&self.kv_slots, 0)?
                .to_dtype(DType::F32)?
                .reshape((b, mc, kvh, hd))?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b * kvh, mc, hd))?)
        };
        let (k, v) = (gather(key_cache)?, gather(value_cache)?);
        let scores = q
            .matmul(&k.t()?)?
            .reshape((b, kvh, group, mq, mc))?
            .broadcast_add(&self.bias.reshape((b, 1, 1, mq, mc))?)?;
        let probs =
            candle_nn::ops::softmax_last_dim(&scores)?.reshape((b * kvh, group * mq, mc))?;
        let out = probs
            .matmul(&v)?
            .reshape((b, kvh, group, mq, hd))?
            .permute((0, 3, 1, 2, 4))?
            .contiguous()?
            .reshape((b * mq, nh, hd))?
            .index_select(&self.out_index, 0)?
            .to_dtype(query.dtype())?;
        Ok(out)
    }
}

/// Score elements (f32) one query chunk of [`segment_attention_portable`] may hold: 2²⁴, 64 MiB.
pub const PORTABLE_SCORE_ELEMENTS: usize = 1 << 24;

/// Query rows per chunk of [`segment_attention_portable`] for a segment of `len` rows and
/// `heads` heads: as many as keep the `[heads, rows, len]` f32 scores within
/// [`PORTABLE_SCORE_ELEMENTS`], at least one.
pub fn portable_chunk_rows(len: usize, heads: usize) -> usize {
    (PORTABLE_SCORE_ELEMENTS / (heads * len).max(1)).clamp(1, len.max(1))
}

/// [`crate::segment_attention`] made of candle tensor ops (any device): per segment, query
/// chunks of [`portable_chunk_rows`] rows attend to the whole segment, with scores, softmax
/// and the weighted sum in f32. Memory beyond the inputs: the f32 copies of one segment's
/// `q`, `k`, `v` and one chunk's scores (at most [`PORTABLE_SCORE_ELEMENTS`] unless a single
/// row's scores exceed it), never `[heads, len, len]` for a long segment.
///
/// Errors: [`KernelError::Invalid`] when shapes disagree or the segments do not tile the rows.
pub fn segment_attention_portable(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &crate::SegmentAttentionParams<'_>,
) -> Result<Tensor, KernelError> {
    let (n, heads, _) = q.dims3()?;
    if k.dims() != q.dims() || v.dims() != q.dims() {
        return Err(KernelError::Invalid {
            kernel: "segment_attention",
            msg: format!(
                "q {:?}, k {:?}, v {:?} must have one shape",
                q.dims(),
                k.dims(),
                v.dims()
            ),
        });
    }
    crate::segment::validate_segments("segment_attention", params.segments, n)?;
    if n == 0 {
        return Ok(q.clone());
    }
    // [len, heads, hd] rows of one segment → [heads, len, hd] f32.
    let heads_first = |t: &Tensor, start: usize, len: usize| -> candle_core::Result<Tensor> {
        t.narrow(0, start, len)?
            .to_dtype(DType::F32)?
            .transpose(0, 1)?
            .contiguous()
    };
    let mut outs = Vec::new();
    for &(start, len) in params.segments.iter().filter(|s| s.1 > 0) {
        let ks = heads_first(k, start, len)?.t()?;
        let vs = heads_first(v, start, len)?;
        let chunk = portable_chunk_rows(len, heads);
        for c0 in (0..len).step_by(chunk) {
            let rows = chunk.min(len - c0);
            let qs = (heads_first(q, start + c0, rows)? * params.scale as f64)?;
            let probs = candle_nn::ops::softmax_last_dim(&qs.matmul(&ks)?)?;
            outs.push(probs.matmul(&vs)?.transpose(0, 1)?.to_dtype(q.dtype())?);
        }
    }
    Ok(Tensor::cat(&outs, 0)?.contiguous()?)
}
