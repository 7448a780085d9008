//! The language model: Qwen2 decoder (Qwen2-VL, Qwen2.5-VL), Qwen3 decoder (Qwen3-VL, q/k
//! RMSNorm, interleaved M-RoPE) or Qwen3.5's hybrid decoder, over a flattened ragged batch,
//! the paged KV cache and (Qwen3.5) the per-sequence recurrent state slots.
//!
//! Reference: transformers `Qwen2VLTextModel` / `Qwen3VLTextModel` / `Qwen3_5TextModel` (and
//! their MoE variants `Qwen3VLMoeTextModel` / `Qwen3_5MoeTextModel`). Every layer is
//! `x + mixer(norm(x))` then `x + mlp(norm(x))`, the MLP dense or, in the MoE families' sparse
//! layers, a mixture of experts ([`crate::moe`]); the mixer is attention, or for
//! Qwen3.5's `linear_attention` layers Gated DeltaNet ([`crate::gated_delta_net`]). Qwen3.5's
//! attention is gated (`q_proj` yields query and gate per head; output × `sigmoid(gate)`) and
//! rotates only the leading `rotary_dim` of each head; its norms are zero-centred
//! (`x̂·(1+w)` in f32). M-RoPE: rotary pair `i` of a head takes its position from axis `t`, `h`
//! or `w` — contiguous chunks of `mrope_section` (Qwen2) or interleaved `t h w t h w …` for the
//! first `3·section[1..]` pairs (Qwen3, Qwen3.5).

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, VarBuilder};
use verisample_kernels::{AttentionPath, PagedAttentionParams, PagedStep};

use crate::batch::{attention_layers, BatchMeta, KvCache};
use crate::config::{LayerKind, MlpNames, RotaryLayout, TextSpec};
use crate::gated_delta_net::{reset_new_sequences, GatedDeltaNet};
use crate::layers::{apply_rotary, cos_sin, inv_freq, linear, Act, Mlp, Proj, RmsNorm};
use crate::moe::SparseMoe;

/// Softmax attention over the paged KV cache (`self_attn.*`).
struct Attention {
    /// `[q | k | v]` fused; with an output gate, `q` is `[query | gate]` per head (transformers
    /// `q_proj` viewed as `[.., heads, 2 · head_dim]` and chunked).
    qkv: Proj,
    o: Proj,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    /// Qwen3.5: the output is multiplied by `sigmoid(gate)` before `o_proj`.
    gated: bool,
}

/// What a decoder layer mixes tokens with.
enum Mixer {
    /// Attention over the paged KV cache.
    Attention(Attention),
    /// Gated DeltaNet over a recurrent state slot per sequence (Qwen3.5).
    DeltaNet(GatedDeltaNet),
}

/// A decoder layer's feed-forward block.
enum FeedForward {
    /// The dense gated MLP (`mlp.{gate,up,down}_proj`).
    Dense(Mlp),
    /// A sparse mixture of experts (`TextSpec::moe`, this layer among its sparse ones).
    Sparse(SparseMoe),
}

struct Layer {
    input_norm: RmsNorm,
    post_norm: RmsNorm,
    /// GLM-4: on the mixer's output before the residual add (`post_self_attn_layernorm`).
    mixed_norm: Option<RmsNorm>,
    /// GLM-4: on the MLP's output before the residual add (`post_mlp_layernorm`).
    ff_norm: Option<RmsNorm>,
    mixer: Mixer,
    mlp: FeedForward,
}

/// The input embedding `[vocab, hidden]`.
enum TokenEmbedding {
    /// Its own table.
    Table(Embedding),
    /// Tied to a packed (CPU) LM head and read out of its panels in this dtype, so the
    /// largest matrix of a small model is held once, not twice.
    LmHead(DType),
}

/// The decoder with its embeddings and LM head.
pub struct TextModel {
    spec: TextSpec,
    embed: TokenEmbedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Proj,
    /// Inverse frequencies of the rotated part of a head (`rotary_dim / 2`).
    inv_freq: Vec<f32>,
    /// Axis (0 = t, 1 = h, 2 = w) of each rotary pair.
    pair_axis: Vec<usize>,
    /// Implementation of the paged-attention ops.
    attention: AttentionPath,
}

/// Loads the attention mixer of a layer (`self_attn.*` under `a`), its projections for `path`.
fn attention(spec: &TextSpec, a: VarBuilder, path: AttentionPath) -> Result<Attention> {
    let (h, hd) = (spec.hidden_size, spec.head_dim);
    let q_width = spec.num_heads * hd * if spec.attn_output_gate { 2 } else { 1 };
    let norm = |name: &str| {
        spec.qk_norm
            .then(|| RmsNorm::load(hd, spec.rms_norm_eps, spec.zero_centered_norm, a.pp(name)))
            .transpose()
    };
    // The rows of q and k in the order the rotation reads them (GLM's adjacent pairs as halves).
    let order = |heads: usize| {
        (spec.rotary_layout == RotaryLayout::Pairs)
            .then(|| pairs_as_halves(heads, hd, spec.rotary_dim))
    };
    let part = |name: &str, out: usize, order: Option<Vec<u32>>| -> Result<_> {
        let vb = a.pp(name);
        let w = vb.get((out, h), "weight")?;
        let b = spec.qkv_bias.then(|| vb.get(out, "bias")).transpose()?;
        let Some(order) = order else {
            return Ok((w, b));
        };
        let idx = Tensor::new(order.as_slice(), w.device())?;
        let b = b.map(|b| b.index_select(&idx, 0)).transpose()?;
        Ok((w.index_select(&idx, 0)?, b))
    };
    let kv = spec.num_kv_heads * hd;
    let qkv = Proj::from_parts(
        vec![
            part("q_proj", q_width, order(spec.num_heads))?,
            part("k_proj", kv, order(spec.num_kv_heads))?,
            part("v_proj", kv, None)?,
        ],
        path,
    )?;
    Ok(Attention {
        qkv,
        o: linear(spec.num_heads * hd, h, spec.o_bias, a.pp("o_proj"), path)?,
        q_norm: norm("q_norm")?,
        k_norm: norm("k_norm")?,
        gated: spec.attn_output_gate,
    })
}

/// The row order that turns a projection whose heads rotate in adjacent pairs `(2i, 2i + 1)`
/// into one rotating in halves `(i, i + rotary_dim / 2)`: per head of `head_dim`, the even
/// rows of the rotated part, then its odd rows, then the rows that pass through. The same
/// order on `q` and `k` leaves every score `q · k` unchanged, so [`apply_rotary`] serves both
/// layouts ([`RotaryLayout::Pairs`]).
fn pairs_as_halves(heads: usize, head_dim: usize, rotary_dim: usize) -> Vec<u32> {
    (0..heads)
        .flat_map(|h| {
            let base = h * head_dim;
            (0..rotary_dim)
                .step_by(2)
                .chain((1..rotary_dim).step_by(2))
                .chain(rotary_dim..head_dim)
                .map(move |d| (base + d) as u32)
        })
        .collect()
}

impl TextModel {
    /// Loads the decoder from `vb` at the text prefix (`model` or `model.language_model`);
    /// `lm_head` from `head_vb` unless embeddings are tied and the checkpoint holds no
    /// `lm_head.weight` (transformers 5 does not tie a head the checkpoint has). `path` is the implementation of
    /// attention, and with it of the projections ([`crate::layers::Proj::from_parts`]) and the
    /// recurrent kernels. Each layer's mixer follows `spec.layer_types`: attention
    /// (`self_attn`) or Gated DeltaNet (`linear_attn`).
    ///
    /// Errors: a candle error naming any missing or mis-shaped tensor, or a linear-attention
    /// layer without `spec.linear_attention`.
    pub fn new(
        spec: &TextSpec,
        vb: VarBuilder,
        head_vb: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        let (h, eps, zc) = (spec.hidden_size, spec.rms_norm_eps, spec.zero_centered_norm);
        let embed = candle_nn::embedding(spec.vocab_size, h, vb.pp("embed_tokens"))?;
        let act = Act::from_name(&spec.hidden_act)?;
        let layers = spec
            .layer_types
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let l = vb.pp("layers").pp(i);
                let mixer = match (kind, &spec.linear_attention) {
                    (LayerKind::FullAttention, _) => {
                        Mixer::Attention(attention(spec, l.pp("self_attn"), path)?)
                    }
                    (LayerKind::LinearAttention, Some(lin)) => Mixer::DeltaNet(GatedDeltaNet::new(
                        lin,
                        h,
                        eps,
                        &spec.hidden_act,
                        l.pp("linear_attn"),
                        path,
                    )?),
                    (LayerKind::LinearAttention, None) => candle_core::bail!(
                        "layer {i} is linear attention but the config has no linear_* sizes"
                    ),
                };
                let mlp = match &spec.moe {
                    Some(moe) if moe.sparse_layers.get(i) == Some(&true) => {
                        FeedForward::Sparse(SparseMoe::new(moe, h, act, l.pp("mlp"), path)?)
                    }
                    _ => FeedForward::Dense(Mlp::new(
                        h,
                        spec.intermediate_size,
                        match spec.fused_gate_up {
                            true => MlpNames::GateUp,
                            false => MlpNames::Gated,
                        },
                        false,
                        act,
                        l.pp("mlp"),
                        path,
                    )?),
                };
                let sandwich = |name: &str| {
                    spec.sandwich_norms
                        .then(|| RmsNorm::load(h, eps, zc, l.pp(name)))
                        .transpose()
                };
                Ok(Layer {
                    input_norm: RmsNorm::load(h, eps, zc, l.pp("input_layernorm"))?,
                    post_norm: RmsNorm::load(h, eps, zc, l.pp("post_attention_layernorm"))?,
                    mixed_norm: sandwich("post_self_attn_layernorm")?,
                    ff_norm: sandwich("post_mlp_layernorm")?,
                    mixer,
                    mlp,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::load(h, eps, zc, vb.pp("norm"))?;
        let tied = spec.tie_word_embeddings && !head_vb.contains_tensor("lm_head.weight");
        let (embed, lm_head) = if tied {
            let dtype = embed.embeddings().dtype();
            let head = Proj::from_parts(vec![(embed.embeddings().clone(), None)], path)?;
            match head {
                // The table's storage is freed here: the packed head is its only copy.
                Proj::Packed(_) => (TokenEmbedding::LmHead(dtype), head),
                Proj::Portable(_) => (TokenEmbedding::Table(embed), head),
            }
        } else {
            let head = linear(h, spec.vocab_size, false, head_vb.pp("lm_head"), path)?;
            (TokenEmbedding::Table(embed), head)
        };
        Ok(Self {
            pair_axis: pair_axes(spec.mrope_section, spec.mrope_interleaved),
            inv_freq: inv_freq(spec.rotary_dim, spec.rope_theta),
            attention: path,
            spec: spec.clone(),
            embed,
            layers,
            norm,
            lm_head,
        })
    }

    /// The resolved spec.
    pub fn spec(&self) -> &TextSpec {
        &self.spec
    }

    /// The implementation of the paged-attention ops in use.
    pub fn attention_path(&self) -> AttentionPath {
        self.attention
    }

    /// Token embeddings `[n, hidden]` of `ids`, in the weights' dtype.
    ///
    /// Errors: an id outside the vocabulary.
    pub fn embed(&self, ids: &[u32], device: &Device) -> Result<Tensor> {
        match (&self.embed, &self.lm_head) {
            (TokenEmbedding::Table(table), _) => table.forward(&Tensor::new(ids, device)?),
            (TokenEmbedding::LmHead(dtype), Proj::Packed(head)) => {
                let rows = head.weight_rows(ids)?;
                Tensor::from_vec(rows, (ids.len(), self.spec.hidden_size), device)?.to_dtype(*dtype)
            }
            (TokenEmbedding::LmHead(_), Proj::Portable(_)) => {
                candle_core::bail!("a tied embedding needs the packed LM head")
            }
        }
    }

    /// Runs the decoder over `embeds` `[total_tokens, hidden]` (one step of a ragged batch),
    /// writing this step's K/V into `cache` at `meta.slot_mapping`, and returns the logits
    /// `[meta.logits_indices.len(), vocab]` (f32) of the asked rows only.
    ///
    /// `deepstack`: Qwen3-VL features added after decoder layer `i` (for `i < len`) to the rows
    /// `rows` (the image-token rows of this step).
    ///
    /// Errors: candle errors for inconsistent shapes/metadata, kernel errors (invalid metadata,
    /// the native path on a non-CPU device).
    pub fn forward(
        &self,
        embeds: &Tensor,
        meta: &BatchMeta,
        cache: &mut KvCache,
        deepstack: Option<(&Tensor, &[Tensor])>,
    ) -> Result<Tensor> {
        let dev = embeds.device().clone();
        let n = embeds.dim(0)?;
        if meta.total_tokens() != n
            || meta.slot_mapping.len() != n
            || meta.positions.dims() != [self.spec.position_rows, n]
        {
            candle_core::bail!(
                "batch meta does not match {n} tokens: query_lens sum {}, {} slots, positions {:?}",
                meta.total_tokens(),
                meta.slot_mapping.len(),
                meta.positions.dims()
            );
        }
        let n_attn = attention_layers(&self.spec);
        let n_linear = self.layers.len() - n_attn;
        if cache.layers.len() != n_attn || cache.states.len() != n_linear {
            candle_core::bail!(
                "cache has {} KV layers and {} recurrent-state layers, model has {n_attn} and {n_linear}",
                cache.layers.len(),
                cache.states.len()
            );
        }
        if n_linear > 0 {
            reset_new_sequences(&cache.states, meta)?;
        }
        let (cos, sin) = self.rotary(&meta.positions, n, &dev)?;
        let hd = self.spec.head_dim;
        let params = PagedAttentionParams {
            query_lens: &meta.query_lens,
            context_lens: &meta.context_lens,
            block_tables: &meta.block_tables,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let num_blocks = match cache.layers.first() {
            Some((kc, _)) => kc.dim(0)?,
            None => 0,
        };
        let step = PagedStep::new(
            self.attention,
            params,
            &meta.slot_mapping,
            cache.block_size,
            num_blocks,
            &dev,
        )?;
        let (mut kv, mut states) = (cache.layers.iter(), cache.states.iter());
        let mut x = embeds.clone();
        for (i, l) in self.layers.iter().enumerate() {
            let h = l.input_norm.forward(&x)?;
            let mixed = match &l.mixer {
                Mixer::Attention(a) => {
                    let Some((kc, vc)) = kv.next() else {
                        candle_core::bail!("no KV cache for layer {i}");
                    };
                    self.attend(a, &h, (&cos, &sin), &step, kc, vc)?
                }
                Mixer::DeltaNet(d) => {
                    let Some((conv, state)) = states.next() else {
                        candle_core::bail!("no recurrent state for layer {i}");
                    };
                    d.forward(&h, meta, (conv, state), self.attention)?
                }
            };
            let mixed = match &l.mixed_norm {
                Some(n) => n.forward(&mixed)?,
                None => mixed,
            };
            x = (x + mixed)?;
            let normed = l.post_norm.forward(&x)?;
            let ff = match &l.mlp {
                FeedForward::Dense(m) => m.forward(&normed)?,
                FeedForward::Sparse(m) => m.forward(&normed)?,
            };
            let ff = match &l.ff_norm {
                Some(n) => n.forward(&ff)?,
                None => ff,
            };
            x = (&x + ff)?;
            if let Some((rows, feats)) = deepstack {
                if let Some(f) = feats.get(i) {
                    x = x.index_add(rows, &f.to_dtype(x.dtype())?, 0)?;
                }
            }
        }
        let idx: Vec<u32> = meta.logits_indices.iter().map(|&i| i as u32).collect();
        if let Some(&bad) = meta.logits_indices.iter().find(|&&i| i >= n) {
            candle_core::bail!("logits index {bad} outside {n} rows");
        }
        let last = x.index_select(&Tensor::new(idx.as_slice(), &dev)?, 0)?;
        self.lm_head
            .forward(&self.norm.forward(&last)?)?
            .to_dtype(DType::F32)
    }

    /// One attention mixer over `h` `[n, hidden]`: q/k/v (+ gate), q/k norm, rotary on the
    /// leading `rotary_dim` of each head, this step's K/V written at the step's slots,
    /// paged attention, `sigmoid(gate)` when gated, `o_proj`.
    fn attend(
        &self,
        a: &Attention,
        h: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        step: &PagedStep<'_>,
        kc: &Tensor,
        vc: &Tensor,
    ) -> Result<Tensor> {
        let n = h.dim(0)?;
        let (nh, kvh, hd) = (
            self.spec.num_heads,
            self.spec.num_kv_heads,
            self.spec.head_dim,
        );
        let qkv = a.qkv.forward(h)?;
        let q_width = if a.gated { 2 * nh * hd } else { nh * hd };
        let (mut q, gate) = if a.gated {
            let qg = qkv.narrow(1, 0, q_width)?.reshape((n, nh, 2 * hd))?;
            (
                qg.narrow(2, 0, hd)?,
                Some(qg.narrow(2, hd, hd)?.reshape((n, nh * hd))?),
            )
        } else {
            (qkv.narrow(1, 0, q_width)?.reshape((n, nh, hd))?, None)
        };
        let mut k = qkv.narrow(1, q_width, kvh * hd)?.reshape((n, kvh, hd))?;
        let v = qkv
            .narrow(1, q_width + kvh * hd, kvh * hd)?
            .reshape((n, kvh, hd))?;
        if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
            q = qn.forward(&q)?;
            k = kn.forward(&k)?;
        }
        let q = apply_rotary(&q, cos, sin)?;
        let k = apply_rotary(&k, cos, sin)?;
        step.write_cache(&k, &v, kc, vc)?;
        let q = q.to_dtype(kc.dtype())?;
        let mut attn = step
            .attend(&q, kc, vc)?
            .to_dtype(h.dtype())?
            .reshape((n, nh * hd))?;
        if let Some(g) = gate {
            attn = (attn * candle_nn::ops::sigmoid(&g.contiguous()?)?)?;
        }
        a.o.forward(&attn)
    }

    /// Rotary `cos`/`sin` `[n, rotary_dim/2]` from positions `[position_rows, n]` (each pair
    /// on its M-RoPE axis; plain RoPE has every pair on the one row).
    fn rotary(&self, positions: &Tensor, n: usize, dev: &Device) -> Result<(Tensor, Tensor)> {
        let pos: Vec<Vec<u32>> = positions.to_dtype(DType::U32)?.to_vec2()?;
        let half = self.inv_freq.len();
        let angles: Vec<f32> = (0..n)
            .flat_map(|k| {
                let pos = &pos;
                self.inv_freq
                    .iter()
                    .zip(&self.pair_axis)
                    .map(move |(f, &axis)| pos[axis][k] as f32 * f)
            })
            .collect();
        cos_sin(&angles, n, half, dev)
    }
}

/// Axis of each rotary pair: contiguous sections (Qwen2-VL `mrope_section` split) or
/// interleaved (Qwen3-VL: pair `i` is `h` when `i % 3 == 1` and `i < 3·section[1]`, `w` when
/// `i % 3 == 2` and `i < 3·section[2]`, else `t`).
pub fn pair_axes(section: [usize; 3], interleaved: bool) -> Vec<usize> {
    let half: usize = section.iter().sum();
    (0..half)
        .map(|i| {
            if interleaved {
                match i % 3 {
                    1 if i < 3 * section[1] => 1,
                    2 if i < 3 * section[2] => 2,
                    _ => 0,
                }
            } else if i < section[0] {
                0
            } else if i < section[0] + section[1] {
                1
            } else {
                2
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pair_axes;

    #[test]
    fn mrope_axes() {
        assert_eq!(pair_axes([2, 3, 3], false), vec![0, 0, 1, 1, 1, 2, 2, 2]);
        // Qwen3-VL interleaved: t h w t h w t h (h/w limited to 3·section).
        assert_eq!(pair_axes([2, 3, 3], true), vec![0, 1, 2, 0, 1, 2, 0, 1]);
        assert_eq!(pair_axes([24, 20, 20], true)[57..64], [0, 1, 2, 0, 0, 0, 0]);
    }
}
