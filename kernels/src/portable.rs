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
//! cache positions are masked out. The padded work is bounded: the step is cut into groups of
//! consecutive sequences (a long prefill chunk into runs of its queries, each a sequence of its
//! own whose context ends at its last query's causal limit) holding at most
//! [`PORTABLE_STEP_POSITIONS`] padded query × context positions each, so the f32 scores of one
//! group take at most `n_heads · PORTABLE_STEP_POSITIONS · 4` bytes, whatever the batch.
//!
//! The cache write ([`CacheWrite`]) scatters whole blocks (every slot of a block written in
//! this step, as a prefill writes them) as one row of the pool viewed `[num_blocks, block_size ·
//! row]`, so candle's scatter runs `block_size · row` threads and loops over blocks instead of
//! `row` threads looping over every token; the remaining slots (decode tokens, the partial
//! blocks at a prefill's ends) are scattered one slot per row.

use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor};

use crate::cache::check_cache_write;
use crate::{validate_step, KernelError, PagedAttentionParams};

/// Additive mask value for cache positions a query may not see: `exp(x - max)` underflows to
/// exactly 0 in f32, and unlike `-inf` it cannot turn a fully masked row into NaN.
const MASKED: f64 = -1e30;

/// Padded query × context positions one group of a portable attention step may hold: 2²⁰ (the
/// group's f32 scores: 4 MiB per query head). A single query row over a longer context forms a
/// group of its own.
pub const PORTABLE_STEP_POSITIONS: usize = 1 << 20;

/// One step's cache write on the portable path, prepared once per step.
#[derive(Debug)]
pub struct CacheWrite {
    slot_mapping: Vec<u32>,
    /// Rows of the step written slot by slot, and their slots (`[n]` u32 each); `None` when
    /// none.
    by_slot: Option<(Tensor, Tensor)>,
    /// Rows of the step that fill whole blocks, `block_size` consecutive rows per block, and
    /// the blocks (`[n_blocks · block_size]` and `[n_blocks]` u32); `None` when none.
    by_block: Option<(Tensor, Tensor)>,
    /// The scatter indices broadcast to the pool's row width, built at the first write:
    /// `(row, slot-level [n, row], block-level [n_blocks, block_size · row])`.
    index: OnceLock<(usize, Option<Tensor>, Option<Tensor>)>,
    block_size: usize,
}

impl CacheWrite {
    /// Plans the write of `slot_mapping` (`[total_tokens]`, slot = `block * block_size +
    /// offset`) into pools of `block_size`-token blocks on `device`.
    ///
    /// Errors: candle errors for the uploads.
    pub fn new(
        slot_mapping: &[u32],
        block_size: usize,
        device: &Device,
    ) -> Result<Self, KernelError> {
        let bs = block_size as u32;
        let (mut slot_rows, mut slots, mut block_rows, mut blocks) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut i = 0;
        while i < slot_mapping.len() {
            let s = slot_mapping[i];
            let whole = bs > 1
                && s.is_multiple_of(bs)
                && slot_mapping.len() - i >= block_size
                && slot_mapping[i..i + block_size]
                    .iter()
                    .zip(s..)
                    .all(|(&a, b)| a == b);
            if whole {
                block_rows.extend(i as u32..(i + block_size) as u32);
                blocks.push(s / bs);
                i += block_size;
            } else {
                slot_rows.push(i as u32);
                slots.push(s);
                i += 1;
            }
        }
        let up = |rows: Vec<u32>, ids: Vec<u32>| -> Result<Option<(Tensor, Tensor)>, KernelError> {
            Ok(if ids.is_empty() {
                None
            } else {
                Some((Tensor::new(rows, device)?, Tensor::new(ids, device)?))
            })
        };
        Ok(Self {
            slot_mapping: slot_mapping.to_vec(),
            by_slot: up(slot_rows, slots)?,
            by_block: up(block_rows, blocks)?,
            index: OnceLock::new(),
            block_size,
        })
    }

    /// Rows of the step that fill whole blocks (what goes through the block-level scatter).
    pub fn rows_in_whole_blocks(&self) -> usize {
        self.by_block
            .as_ref()
            .map_or(0, |(r, _)| r.dims1().unwrap_or(0))
    }

    /// The scatter indices for pool rows of `row` elements.
    fn indices(&self, row: usize) -> Result<(Option<Tensor>, Option<Tensor>), KernelError> {
        // `[n]` ids → `[n, width]`, each row repeating its id (the index `scatter_set` takes).
        let spread = |part: &Option<(Tensor, Tensor)>, width: usize| -> candle_core::Result<_> {
            part.as_ref()
                .map(|(_, ids)| {
                    let n = ids.dims1()?;
                    ids.reshape((n, 1))?.broadcast_as((n, width))?.contiguous()
                })
                .transpose()
        };
        let build = || -> Result<(Option<Tensor>, Option<Tensor>), KernelError> {
            Ok((
                spread(&self.by_slot, row)?,
                spread(&self.by_block, self.block_size * row)?,
            ))
        };
        match self.index.get() {
            Some((r, slot, block)) if *r == row => Ok((slot.clone(), block.clone())),
            Some(_) => build(),
            None => {
                let (slot, block) = build()?;
                let _ = self.index.set((row, slot.clone(), block.clone()));
                Ok((slot, block))
            }
        }
    }

    /// Writes `key`/`value` `[total_tokens, n_kv_heads, head_dim]` into the pools
    /// `[num_blocks, block_size, n_kv_heads, head_dim]`, in place (in-place `scatter_set` on
    /// views of the pool: every clone of the pool sees the write).
    ///
    /// Errors: [`KernelError::Invalid`] as [`crate::reshape_and_cache`] checks.
    pub fn write(
        &self,
        key: &Tensor,
        value: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
    ) -> Result<(), KernelError> {
        let (num_blocks, block_size, kvh, hd) =
            check_cache_write(key, value, key_cache, value_cache, &self.slot_mapping)?;
        if block_size != self.block_size {
            return Err(KernelError::Invalid {
                kernel: "reshape_and_cache",
                msg: format!(
                    "pool blocks of {block_size} tokens, the step was planned for {}",
                    self.block_size
                ),
            });
        }
        let row = kvh * hd;
        let (slot_index, block_index) = self.indices(row)?;
        for (new, pool) in [(key, key_cache), (value, value_cache)] {
            let n = new.dim(0)?;
            let src = new.to_dtype(pool.dtype())?.reshape((n, row))?;
            if let (Some((rows, _)), Some(index)) = (&self.by_slot, &slot_index) {
                let part = src.index_select(rows, 0)?.contiguous()?;
                pool.reshape((num_blocks * block_size, row))?
                    .scatter_set(index, &part, 0)?;
            }
            if let (Some((rows, blocks)), Some(index)) = (&self.by_block, &block_index) {
                let part = src
                    .index_select(rows, 0)?
                    .reshape((blocks.dims1()?, block_size * row))?
                    .contiguous()?;
                pool.reshape((num_blocks, block_size * row))?
                    .scatter_set(index, &part, 0)?;
            }
        }
        Ok(())
    }
}

/// One group of a portable attention step: consecutive (virtual) sequences, padded together.
#[derive(Debug)]
struct Group {
    /// `[seqs * max_q]` u32: the flattened query row of each padded query (0 for padding).
    q_gather: Tensor,
    /// `[seqs * max_c]` u32: the cache slot of each padded context position (slot of position
    /// 0 for padding; masked out).
    kv_slots: Tensor,
    /// `[seqs, max_q, max_c]` f32: 0 where the query may attend, [`MASKED`] elsewhere.
    bias: Tensor,
    /// `[rows]` u32: the padded row `s * max_q + j` of each real query row, in step order.
    out_index: Tensor,
    seqs: usize,
    max_q: usize,
    max_c: usize,
}

/// A sequence (or a run of a long prefill chunk's queries) of a portable step: its first query
/// row in the step, its query count, its context length after its last query, its sequence.
#[derive(Debug, Clone, Copy)]
struct Unit {
    first_row: usize,
    q: usize,
    c: usize,
    seq: usize,
}

/// Cuts the step into units of at most [`PORTABLE_STEP_POSITIONS`] positions (a single query
/// row may exceed it) and packs consecutive units into groups within that bound.
fn plan_groups(params: &PagedAttentionParams<'_>) -> Vec<Vec<Unit>> {
    let mut units = Vec::new();
    let mut row = 0;
    for (seq, (&q, &c)) in params
        .query_lens
        .iter()
        .zip(params.context_lens)
        .enumerate()
    {
        let chunk = (PORTABLE_STEP_POSITIONS / c.max(1)).clamp(1, q.max(1));
        let mut j0 = 0;
        while j0 < q {
            let j1 = (j0 + chunk).min(q);
            units.push(Unit {
                first_row: row + j0,
                q: j1 - j0,
                c: c - q + j1,
                seq,
            });
            j0 = j1;
        }
        row += q;
    }
    let mut groups: Vec<Vec<Unit>> = Vec::new();
    let (mut mq, mut mc) = (0, 0);
    for u in units {
        let fits = groups
            .last()
            .is_some_and(|g| (g.len() + 1) * mq.max(u.q) * mc.max(u.c) <= PORTABLE_STEP_POSITIONS);
        if fits {
            mq = mq.max(u.q);
            mc = mc.max(u.c);
            groups.last_mut().expect("fits implies a group").push(u);
        } else {
            (mq, mc) = (u.q, u.c);
            groups.push(vec![u]);
        }
    }
    groups
}

/// Device-side metadata of one step for the portable path, built once per step.
#[derive(Debug)]
pub struct PortableStep {
    write: CacheWrite,
    groups: Vec<Group>,
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
        let mut groups = Vec::new();
        for units in plan_groups(params) {
            let seqs = units.len();
            let max_q = units.iter().map(|u| u.q).max().unwrap_or(0).max(1);
            let max_c = units.iter().map(|u| u.c).max().unwrap_or(0).max(1);
            let mut q_gather = vec![0u32; seqs * max_q];
            let mut kv_slots = vec![0u32; seqs * max_c];
            let mut bias = vec![MASKED as f32; seqs * max_q * max_c];
            let mut out_index = Vec::new();
            for (s, u) in units.iter().enumerate() {
                let table = &params.block_tables[u.seq];
                let slot =
                    |p: usize| table[p / block_size] * block_size as u32 + (p % block_size) as u32;
                for p in 0..max_c {
                    // Padding repeats position 0, which every sequence has (c >= 1 when q >= 1).
                    kv_slots[s * max_c + p] = if p < u.c { slot(p) } else { slot(0) };
                }
                for j in 0..max_q {
                    let padded = s * max_q + j;
                    // A padded query sees position 0 only, so its softmax row stays finite.
                    let last = if j < u.q { u.c - u.q + j } else { 0 };
                    if j < u.q {
                        q_gather[padded] = (u.first_row + j) as u32;
                        out_index.push(padded as u32);
                    }
                    bias[padded * max_c..padded * max_c + last + 1].fill(0.0);
                }
            }
            let up = |v: &[u32]| Tensor::new(v, device);
            groups.push(Group {
                q_gather: up(&q_gather)?,
                kv_slots: up(&kv_slots)?,
                bias: Tensor::from_vec(bias, (seqs, max_q, max_c), device)?,
                out_index: up(&out_index)?,
                seqs,
                max_q,
                max_c,
            });
        }
        Ok(Self {
            write: CacheWrite::new(slot_mapping, block_size, device)?,
            groups,
            total,
        })
    }

    /// Groups the step's attention is computed in (see [`PORTABLE_STEP_POSITIONS`]).
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// Writes `key`/`value` `[total_tokens, n_kv_heads, head_dim]` into the pools
    /// `[num_blocks, block_size, n_kv_heads, head_dim]` at this step's slots, in place
    /// ([`CacheWrite::write`]).
    ///
    /// Errors: [`KernelError::Invalid`] when shapes disagree or a pool is not contiguous.
    pub fn write_cache(
        &self,
        key: &Tensor,
        value: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
    ) -> Result<(), KernelError> {
        self.write.write(key, value, key_cache, value_cache)
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
        if total == 0 {
            return Ok(query.clone());
        }
        let group = nh / kvh;
        let scaled = (query.to_dtype(DType::F32)? * scale as f64)?;
        let mut outs = Vec::with_capacity(self.groups.len());
        for g in &self.groups {
            let (b, mq, mc) = (g.seqs, g.max_q, g.max_c);
            // [b * max_q, nh, hd] -> [b, kvh, group, max_q, hd] -> [b * kvh, group * max_q, hd]
            let q = scaled
                .index_select(&g.q_gather, 0)?
                .reshape((b, mq, kvh, group, hd))?
                .permute((0, 2, 3, 1, 4))?
                .contiguous()?
                .reshape((b * kvh, group * mq, hd))?;
            let gather = |pool: &Tensor| -> Result<Tensor, KernelError> {
                Ok(pool
                    .reshape((num_blocks * block_size, kvh, hd))?
                    .index_select(&g.kv_slots, 0)?
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
                .broadcast_add(&g.bias.reshape((b, 1, 1, mq, mc))?)?;
            let probs =
                candle_nn::ops::softmax_last_dim(&scores)?.reshape((b * kvh, group * mq, mc))?;
            outs.push(
                probs
                    .matmul(&v)?
                    .reshape((b, kvh, group, mq, hd))?
                    .permute((0, 3, 1, 2, 4))?
                    .contiguous()?
                    .reshape((b * mq, nh, hd))?
                    .index_select(&g.out_index, 0)?,
            );
        }
        let out = if outs.len() == 1 {
            outs.pop().expect("one group")
        } else {
            Tensor::cat(&outs, 0)?
        };
        Ok(out.to_dtype(query.dtype())?)
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
