//! What the engine hands a model for one step: a flattened ragged batch and the paged KV cache.
//!
//! The tokens of every scheduled sequence are concatenated into one `[total_tokens]` row
//! (no padding), as in vLLM's varlen layout. Causality rule used by the attention: query `j`
//! of a sequence with `q` new tokens and context length `c` sits at cache position
//! `c - q + j` and attends to cache positions `0..=c - q + j`. That one rule covers prefill,
//! chunked prefill, prefix-cache hits and decode.

use candle_core::{DType, Device, Result, Tensor};

/// Per-step batch metadata built by the engine's scheduler.
#[derive(Debug, Clone)]
pub struct BatchMeta {
    /// M-RoPE position ids `[3, total_tokens]`, dtype `u32` (rows: temporal, height, width), on
    /// the host: the model builds the step's rotary tables from them on the host and uploads
    /// them once. Text tokens have the same id in all three rows.
    pub positions: Tensor,
    /// New tokens per sequence in this step (a prefill chunk, or 1 for decode).
    pub query_lens: Vec<usize>,
    /// Tokens in the cache per sequence *after* this step (past + new).
    pub context_lens: Vec<usize>,
    /// Block table per sequence: the cache blocks holding its tokens, in order.
    pub block_tables: Vec<Vec<u32>>,
    /// Cache slot of each new token, `block * block_size + offset`; length `total_tokens`.
    pub slot_mapping: Vec<u32>,
    /// Rows of the flattened batch to project to logits (usually each sequence's last token).
    pub logits_indices: Vec<usize>,
}

impl BatchMeta {
    /// Total number of new tokens in the step (`sum(query_lens)`).
    pub fn total_tokens(&self) -> usize {
        self.query_lens.iter().sum()
    }
}

/// The paged KV cache of one model: one preallocated pool per layer, owned by the engine.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// Per layer `(key_cache, value_cache)`, each `[num_blocks, block_size, n_kv_heads, head_dim]`.
    pub layers: Vec<(Tensor, Tensor)>,
    /// Tokens per block.
    pub block_size: usize,
}

impl KvCache {
    /// Allocate a zeroed cache of `num_blocks` blocks of `block_size` tokens for
    /// `num_layers` layers with `n_kv_heads` heads of `head_dim`.
    ///
    /// Errors: candle allocation errors (out of memory on the device).
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        n_kv_heads: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let shape = (num_blocks, block_size, n_kv_heads, head_dim);
        let layers = (0..num_layers)
            .map(|_| {
                Ok((
                    Tensor::zeros(shape, dtype, device)?,
                    Tensor::zeros(shape, dtype, device)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers, block_size })
    }

    /// Bytes one block takes across all layers (keys and values), for sizing the pool from a
    /// memory budget.
    pub fn bytes_per_block(
        num_layers: usize,
        block_size: usize,
        n_kv_heads: usize,
        head_dim: usize,
        dtype: DType,
    ) -> usize {
        2 * num_layers * block_size * n_kv_heads * head_dim * dtype.size_in_bytes()
    }
}
