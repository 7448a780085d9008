//! What the engine hands a model for one step: a flattened ragged batch, the paged KV cache of
//! the attention layers and the per-sequence recurrent state of the linear-attention layers.
//!
//! The tokens of every scheduled sequence are concatenated into one `[total_tokens]` row
//! (no padding), as in vLLM's varlen layout. Causality rule used by the attention: query `j`
//! of a sequence with `q` new tokens and context length `c` sits at cache position
//! `c - q + j` and attends to cache positions `0..=c - q + j`. That one rule covers prefill,
//! chunked prefill, prefix-cache hits and decode.
//!
//! Linear-attention (Gated DeltaNet) layers keep no per-token cache but a fixed-size state per
//! sequence (conv state + delta-rule state), in the slot [`BatchMeta::state_slots`] names: a
//! step continues from what the slot holds, and a sequence whose step starts at position 0
//! (`context_len == query_len`) starts from zeros, so a reused slot needs no clearing.

use candle_core::{DType, Device, Result, Tensor};

use crate::config::{LayerKind, LinearAttentionSpec, TextSpec};

/// Per-step batch metadata built by the engine's scheduler.
#[derive(Debug, Clone)]
pub struct BatchMeta {
    /// Position ids `[rows, total_tokens]`, dtype `u32`, on the host: for M-RoPE
    /// ([`crate::rope_index::MROPE_ROWS`]) the rows are temporal, height and width, and a text
    /// token has the same id in all three. The model builds the step's rotary tables from them
    /// on the host and uploads them once.
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
    /// Recurrent-state slot of each sequence (index into the first dimension of
    /// [`KvCache::states`]), all distinct; may be empty for a model without linear-attention
    /// layers.
    pub state_slots: Vec<u32>,
}

impl BatchMeta {
    /// Total number of new tokens in the step (`sum(query_lens)`).
    pub fn total_tokens(&self) -> usize {
        self.query_lens.iter().sum()
    }
}

/// The caches of one model, owned by the engine: the paged KV pools of the full-attention
/// layers and the recurrent-state slots of the linear-attention layers.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// Per full-attention layer, in layer order, `(key_cache, value_cache)`, each
    /// `[num_blocks, block_size, n_kv_heads, head_dim]`.
    pub layers: Vec<(Tensor, Tensor)>,
    /// Per linear-attention layer, in layer order, `(conv_state, recurrent_state)`, f32:
    /// `[num_slots, conv_dim, conv_kernel - 1]` and `[num_slots, num_value_heads,
    /// key_head_dim, value_head_dim]` (see `LinearAttentionSpec`). Empty without such layers.
    pub states: Vec<(Tensor, Tensor)>,
    /// Tokens per block.
    pub block_size: usize,
}

impl KvCache {
    /// Allocate a zeroed cache of `num_blocks` blocks of `block_size` tokens for
    /// `num_layers` attention layers with `n_kv_heads` heads of `head_dim`, and no
    /// recurrent state.
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
        Ok(Self {
            layers,
            states: Vec::new(),
            block_size,
        })
    }

    /// Allocate the caches a decoder `spec` needs: KV pools of `num_blocks` × `block_size`
    /// tokens (`dtype`) for its full-attention layers, and `num_slots` zeroed f32 state slots
    /// for its linear-attention layers.
    ///
    /// Errors: candle allocation errors.
    pub fn for_spec(
        spec: &TextSpec,
        num_blocks: usize,
        block_size: usize,
        num_slots: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let mut cache = Self::new(
            attention_layers(spec),
            num_blocks,
            block_size,
            spec.num_kv_heads,
            spec.head_dim,
            dtype,
            device,
        )?;
        if let Some(states) = StateLayout::of(spec) {
            cache.states = states.allocate(num_slots, device)?;
        }
        Ok(cache)
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

/// Decoder layers of `spec` that attend over the KV cache ([`LayerKind::FullAttention`]).
pub fn attention_layers(spec: &TextSpec) -> usize {
    spec.layer_types
        .iter()
        .filter(|k| **k == LayerKind::FullAttention)
        .count()
}

/// What the linear-attention layers of a decoder keep per sequence: one state slot holds, for
/// each such layer, its conv state and its delta-rule state (f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLayout {
    /// Linear-attention layers.
    pub num_layers: usize,
    /// Their sizes.
    pub spec: LinearAttentionSpec,
}

impl StateLayout {
    /// The state layout of `spec`, or `None` when it has no linear-attention layer.
    pub fn of(spec: &TextSpec) -> Option<Self> {
        let num_layers = spec.layer_types.len() - attention_layers(spec);
        match (num_layers, spec.linear_attention) {
            (0, _) | (_, None) => None,
            (num_layers, Some(spec)) => Some(Self { num_layers, spec }),
        }
    }

    /// Bytes of one slot across all linear-attention layers (f32 conv state
    /// `[conv_dim, conv_kernel - 1]` + delta-rule state `[v_heads, k_dim, v_dim]` each).
    pub fn bytes_per_slot(&self) -> usize {
        4 * self.num_layers * (self.spec.conv_state_elems() + self.spec.recurrent_state_elems())
    }

    /// Zeroed pools of `num_slots` slots, one `(conv_state, state)` pair per layer, the
    /// layout of [`KvCache::states`].
    ///
    /// Errors: candle allocation errors.
    pub fn allocate(&self, num_slots: usize, device: &Device) -> Result<Vec<(Tensor, Tensor)>> {
        let l = &self.spec;
        (0..self.num_layers)
            .map(|_| {
                Ok((
                    Tensor::zeros(
                        (num_slots, l.conv_dim(), l.conv_kernel - 1),
                        DType::F32,
                        device,
                    )?,
                    Tensor::zeros(
                        (
                            num_slots,
                            l.num_value_heads,
                            l.key_head_dim,
                            l.value_head_dim,
                        ),
                        DType::F32,
                        device,
                    )?,
                ))
            })
            .collect()
    }
}
