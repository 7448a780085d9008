//! The portable path: `reshape_and_cache` and `paged_attention` made only of candle tensor ops,
//! so they run on every candle device (CUDA, Metal, CPU).
//!
//! The step's metadata (slot indices, per-sequence gathers, causal positions) is uploaded once
//! per step as a few `u32` tensors ([`PortableStep::new`]) and reused by every layer.
//!
//! Attention is batch-invariant by construction: every query row goes through the same
//! sequence of fixed-shape operations whatever else is in the step, so its output is bitwise
//! the same alone, beside 63 other sequences, in a prefill chunk cut anywhere, or recomputed
//! after a preemption. The design is FlashAttention's (Dao et al., 2022) made of candle ops,
//! with the fixed split size of "Defeating Nondeterminism in LLM Inference" (Thinking Machines
//! Lab, 2025):
//! - a sequence's queries are cut into tiles of [`PORTABLE_QUERY_TILE`] (4) positions aligned
//!   to its absolute positions; a tile never mixes sequences;
//! - the cache is read in blocks of [`PORTABLE_KV_BLOCK`] positions from position 0, with an
//!   online softmax in f32 (running maximum, denominator and weighted sum, rescaled block by
//!   block in increasing order);
//! - tiles run [`PORTABLE_TILES_PER_CALL`] at a time (padded), so every batched matmul has one
//!   shape per model (`[64 · kv_heads, 4 · group, head_dim] × [.., head_dim, 256]` and
//!   `[.., 4 · group, 256] × [.., 256, head_dim]`) and every max and sum reduces 256 values.
//!
//! A row's own blocks are `0..=position / 256`; a call runs as many blocks as its longest tile,
//! and a block wholly past a row's position is masked (score −10³⁰): it changes its running
//! maximum by nothing, its denominator by `+0` and its weighted sum by `±0`, exactly (the one
//! exception: an output element that is exactly zero may carry either sign). The causal rule
//! is an additive mask computed on the device from the queries' positions.
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

/// Query positions per tile of the portable attention: 4. A tile's rows are rows of the same
/// fixed-shape matmuls and reductions, so which rows share a tile changes no row's bits; tiles
/// are aligned to a sequence's absolute positions (`[4·a, 4·a + 4)`) so that a chunk cut
/// anywhere adds at most one partial tile and a tile's rows have their last block in common.
///
/// Why 4: a decode row computes a whole tile (its 3 neighbours are padding), while a prefill's
/// rows share each gathered block of keys and values across the tile. 16 made decode attention
/// 16× the useful arithmetic (in f32, on a GPU's CUDA cores: more than the step's weight reads
/// at a 7B model's 2k-token contexts); 1 would make a prefill gather every block once per row
/// (for a 2,000-token prompt of a 7B model, about 8 GB per layer). 4 bounds both: 4× on decode,
/// a quarter of the per-row gathers on prefill. Measured on the CPU: BENCHMARKS.md.
pub const PORTABLE_QUERY_TILE: usize = 4;

/// Cache positions per block of the portable attention's online softmax: 256 (a multiple of
/// [`PORTABLE_QUERY_TILE`], so every row of a tile has its last visible block in common): the
/// fixed split size; a row's reduction order is fixed by its position alone.
pub const PORTABLE_KV_BLOCK: usize = 256;

/// Query tiles per batched call of the portable attention: 64, every call padded to it, so the
/// batched matmuls always have the batch count `64 · n_kv_heads` (a GEMM library's choice of
/// algorithm reads the batch count too). 64 tiles hold a decode step of 64 sequences in one
/// call per block.
pub const PORTABLE_TILES_PER_CALL: usize = 64;

// Shorthands of the three shapes in the code below.
const TILE: usize = PORTABLE_QUERY_TILE;
const KV: usize = PORTABLE_KV_BLOCK;
const TILES: usize = PORTABLE_TILES_PER_CALL;

/// One batched call of a portable attention step: [`PORTABLE_TILES_PER_CALL`] query tiles
/// (real ones, then padding) over their first `blocks` blocks of [`PORTABLE_KV_BLOCK`]
/// positions.
#[derive(Debug)]
struct Call {
    /// `[tiles · TILE]` u32: the step row of each query of the call's tiles (0 for padding).
    q_rows: Tensor,
    /// `[blocks, tiles, TILE, KV_BLOCK]` f32: 0 where the query may see position `j·KV_BLOCK +
    /// i` of block `j`, [`MASKED`] elsewhere; built on the device once per step from the
    /// queries' positions (a padding query has position 0: it sees position 0 only, so its
    /// softmax stays finite; its output is dropped).
    bias: Tensor,
    /// `[blocks, tiles · KV_BLOCK]` u32: the cache slot of each position of each block (the
    /// slot of position 0 past the sequence's context; masked).
    kv_slots: Tensor,
    /// `[real rows]` u32: the padded row (`tile · TILE + offset`) of each real query.
    out_index: Tensor,
    blocks: usize,
}

/// A query tile: a sequence's rows at positions `[4·a, 4·a + 4)` that this step computes.
#[derive(Debug, Clone)]
struct Tile {
    seq: usize,
    /// `(step row, position)` of each of the tile's queries in this step.
    rows: Vec<(usize, usize)>,
    /// Blocks of [`PORTABLE_KV_BLOCK`] positions its rows see: `4·a / 256 + 1`.
    blocks: usize,
}

/// The step's query tiles, most blocks first (ties in step order): a call holds tiles of
/// similar context, so few of its blocks are masked for most of its tiles. Any grouping gives
/// the same bits (module docs).
fn plan_tiles(params: &PagedAttentionParams<'_>) -> Vec<Tile> {
    let mut tiles: Vec<Tile> = Vec::new();
    let mut row = 0;
    for (seq, (&q, &c)) in params
        .query_lens
        .iter()
        .zip(params.context_lens)
        .enumerate()
    {
        for p in c - q..c {
            let a = p / PORTABLE_QUERY_TILE;
            match tiles.last_mut() {
                Some(t) if t.seq == seq && t.rows[0].1 / PORTABLE_QUERY_TILE == a => {
                    t.rows.push((row, p))
                }
                _ => tiles.push(Tile {
                    seq,
                    rows: vec![(row, p)],
                    blocks: a * PORTABLE_QUERY_TILE / PORTABLE_KV_BLOCK + 1,
                }),
            }
            row += 1;
        }
    }
    tiles.sort_by_key(|t| std::cmp::Reverse(t.blocks));
    tiles
}

/// The additive causal mask of a call, `[blocks, tiles, TILE, KV_BLOCK]` f32: 0 where
/// position `j·KV_BLOCK + i` is at most the query's position (`q_pos` `[1, tiles, TILE, 1]`
/// f32, exact below 2²⁴), [`MASKED`] elsewhere.
fn causal_bias(q_pos: &Tensor, blocks: usize) -> candle_core::Result<Tensor> {
    let key_pos = Tensor::arange(0u32, (blocks * KV) as u32, q_pos.device())?
        .to_dtype(DType::F32)?
        .reshape((blocks, 1, 1, KV))?;
    (key_pos.broadcast_le(q_pos)?.to_dtype(DType::F32)? - 1.0)? * -MASKED
}

/// Device-side metadata of one step for the portable path, built once per step.
#[derive(Debug)]
pub struct PortableStep {
    write: CacheWrite,
    calls: Vec<Call>,
    /// `[total_tokens]` u32: where each step row is in the calls' outputs, concatenated.
    order: Tensor,
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
        let tiles = plan_tiles(params);
        let mut calls = Vec::new();
        let mut order = vec![0u32; total];
        let mut done = 0u32;
        for chunk in tiles.chunks(TILES) {
            let blocks = chunk[0].blocks;
            let mut q_rows = vec![0u32; TILES * TILE];
            let mut q_pos = vec![0f32; TILES * TILE];
            let mut kv_slots = vec![0u32; blocks * TILES * KV];
            let mut out_index = Vec::new();
            for (u, tile) in chunk.iter().enumerate() {
                let table = &params.block_tables[tile.seq];
                let context = params.context_lens[tile.seq];
                let slot =
                    |p: usize| table[p / block_size] * block_size as u32 + (p % block_size) as u32;
                for &(row, p) in &tile.rows {
                    let padded = u * TILE + p % TILE;
                    q_rows[padded] = row as u32;
                    q_pos[padded] = p as f32;
                    out_index.push(padded as u32);
                    order[row] = done;
                    done += 1;
                }
                for j in 0..blocks {
                    for i in 0..KV {
                        let p = j * KV + i;
                        kv_slots[(j * TILES + u) * KV + i] =
                            if p < context { slot(p) } else { slot(0) };
                    }
                }
            }
            let n_out = out_index.len();
            calls.push(Call {
                q_rows: Tensor::from_vec(q_rows, TILES * TILE, device)?,
                bias: causal_bias(
                    &Tensor::from_vec(q_pos, (1, TILES, TILE, 1), device)?,
                    blocks,
                )?,
                kv_slots: Tensor::from_vec(kv_slots, (blocks, TILES * KV), device)?,
                out_index: Tensor::from_vec(out_index, n_out, device)?,
                blocks,
            });
        }
        Ok(Self {
            write: CacheWrite::new(slot_mapping, block_size, device)?,
            calls,
            order: Tensor::from_vec(order, total, device)?,
            total,
        })
    }

    /// Batched calls the step's attention is computed in (each of
    /// [`PORTABLE_TILES_PER_CALL`] query tiles).
    pub fn num_calls(&self) -> usize {
        self.calls.len()
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
        let batch = TILES * kvh;
        let scaled = (query.to_dtype(DType::F32)? * scale as f64)?;
        let keys = key_cache.reshape((num_blocks * block_size, kvh, hd))?;
        let values = value_cache.reshape((num_blocks * block_size, kvh, hd))?;
        // `[blocks · TILES · KV]` slots → `[TILES · kvh, KV, hd]` f32 of block `j`.
        let gather = |pool: &Tensor, slots: &Tensor| -> candle_core::Result<Tensor> {
            pool.index_select(slots, 0)?
                .to_dtype(DType::F32)?
                .reshape((TILES, KV, kvh, hd))?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((batch, KV, hd))
        };
        let mut outs = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            // [TILES · TILE, nh, hd] → [TILES, kvh, TILE, group, hd] → [TILES · kvh, TILE · group, hd]
            let q = scaled
                .index_select(&call.q_rows, 0)?
                .reshape((TILES, TILE, kvh, group, hd))?
                .permute((0, 2, 1, 3, 4))?
                .contiguous()?
                .reshape((batch, TILE * group, hd))?;
            let mut state: Option<(Tensor, Tensor, Tensor)> = None;
            for j in 0..call.blocks {
                let slots = call.kv_slots.get(j)?;
                let (k, v) = (gather(&keys, &slots)?, gather(&values, &slots)?);
                let scores = q
                    .matmul(&k.t()?)?
                    .reshape((TILES, kvh, TILE, group, KV))?
                    .broadcast_add(&call.bias.get(j)?.reshape((TILES, 1, TILE, 1, KV))?)?
                    .reshape((batch, TILE * group, KV))?;
                let block_max = scores.max_keepdim(2)?;
                state = Some(match state {
                    None => {
                        let p = scores.broadcast_sub(&block_max)?.exp()?;
                        (block_max, p.sum_keepdim(2)?, p.matmul(&v)?)
                    }
                    Some((max, sum, acc)) => {
                        let new_max = max.maximum(&block_max)?;
                        let alpha = (max - &new_max)?.exp()?;
                        let p = scores.broadcast_sub(&new_max)?.exp()?;
                        (
                            new_max,
                            ((sum * &alpha)? + p.sum_keepdim(2)?)?,
                            (acc.broadcast_mul(&alpha)? + p.matmul(&v)?)?,
                        )
                    }
                });
            }
            let (_, sum, acc) = state.expect("every call has at least one block");
            outs.push(
                acc.broadcast_div(&sum)?
                    .reshape((TILES, kvh, TILE, group, hd))?
                    .permute((0, 2, 1, 3, 4))?
                    .contiguous()?
                    .reshape((TILES * TILE, nh, hd))?
                    .index_select(&call.out_index, 0)?,
            );
        }
        let out = if outs.len() == 1 {
            outs.pop().expect("one call")
        } else {
            Tensor::cat(&outs, 0)?
        };
        Ok(out.index_select(&self.order, 0)?.to_dtype(query.dtype())?)
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
