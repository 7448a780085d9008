//! The decoder stacks the families share, resolved from [`TextFields`] into [`TextSpec`]: the
//! Qwen2 decoder (Qwen2-VL, Qwen2.5-VL) and the Qwen3 decoder (Qwen3-VL, Qwen3-VL-MoE); the
//! hybrid Qwen3.5 decoder is in `qwen3_5.rs`.

use serde_json::Value;

use super::fields::Fields;
use super::rope::{RopeParameters, MROPE_TYPES};
use super::{ConfigError, LayerKind, RotaryLayout, TextSpec};
use crate::rope_index::MROPE_ROWS;

/// How a decoder's rotary pairs take their positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions {
    /// M-RoPE: three rows (temporal, height, width) split by `mrope_section` (the Qwen-VL
    /// families).
    MRope,
    /// Plain 1-D RoPE: one row, every pair on it (the decoder as its text-only model runs it:
    /// InternVL's `qwen2` / `qwen3` decoders).
    Plain,
}

/// The Qwen2 decoder (transformers `Qwen2VLTextModel`): bias on q/k/v, no q/k norm, every
/// head fully rotated, `head_dim = hidden_size / num_attention_heads`; rotary base
/// `rope_parameters.rope_theta`, else the decoder's or the top level's `rope_theta` (the flat
/// layout keeps it there), else 1e6.
///
/// Errors: [`ConfigError::Invalid`] for a missing or mis-summed `mrope_section` (M-RoPE),
/// another rope kind, or heads that do not divide.
pub fn qwen2_decoder(f: &Fields, positions: Positions) -> Result<TextSpec, ConfigError> {
    let t = &f.text;
    let rope = t.rope_parameters.clone().unwrap_or_default();
    let head_dim = t
        .hidden_size
        .checked_div(t.num_attention_heads)
        .unwrap_or(0);
    let theta = rope
        .rope_theta
        .or(t.rope_theta)
        .or(f.top_rope_theta)
        .unwrap_or(1_000_000.0);
    let spec = TextSpec {
        mrope_section: layout(&rope, head_dim, positions)?,
        position_rows: rows(positions),
        ..dense(f, head_dim, theta)
    };
    check_heads(&spec)?;
    Ok(spec)
}

/// The Qwen3 decoder (transformers `Qwen3VLTextModel`): RMSNorm on q and k per head, bias on
/// q/k/v/o by `attention_bias`, an explicit `head_dim`, M-RoPE interleaved when the rotary
/// block says so; rotary base 5e5 unless stated.
///
/// Errors: as [`qwen2_decoder`].
pub fn qwen3_decoder(f: &Fields, positions: Positions) -> Result<TextSpec, ConfigError> {
    let t = &f.text;
    let head_dim = t.head_dim.unwrap_or(0);
    let rope = t.rope_parameters.clone().unwrap_or_default();
    let theta = rope.rope_theta.or(t.rope_theta).unwrap_or(500000.0);
    let spec = TextSpec {
        mrope_section: layout(&rope, head_dim, positions)?,
        position_rows: rows(positions),
        mrope_interleaved: positions == Positions::MRope && rope.mrope_interleaved.unwrap_or(false),
        qkv_bias: t.attention_bias.unwrap_or(false),
        o_bias: t.attention_bias.unwrap_or(false),
        qk_norm: true,
        ..dense(f, head_dim, theta)
    };
    check_heads(&spec)?;
    Ok(spec)
}

/// The GLM-4 decoder of GLM-4.1V (transformers `Glm4vTextModel`): bias on q/k/v, none on
/// `o_proj`, no q/k norm, `head_dim = hidden_size / num_attention_heads`, the leading
/// `int(head_dim · partial_rotary_factor)` dimensions of a head rotated in adjacent pairs
/// (`rotate_half_llm`) with M-RoPE in contiguous `mrope_section` chunks (default `[8, 12,
/// 12]`, `Glm4vTextRotaryEmbedding`), RMSNorm after attention and after the MLP
/// (`post_self_attn_layernorm`, `post_mlp_layernorm`), a fused `gate_up_proj`; rotary base
/// `rope_parameters.rope_theta`, else the decoder's `rope_theta`, else 10000
/// (`default_theta`); `partial_rotary_factor` from the rotary block, else the decoder's, else 1.
///
/// Errors: as [`qwen2_decoder`].
pub fn glm4_decoder(f: &Fields) -> Result<TextSpec, ConfigError> {
    let t = &f.text;
    let mut rope = t.rope_parameters.clone().unwrap_or_default();
    let stated = rope.mrope_section.is_some();
    if !stated {
        rope.mrope_section = Some(vec![8, 12, 12]);
    }
    let head_dim = t
        .hidden_size
        .checked_div(t.num_attention_heads)
        .unwrap_or(0);
    let factor = rope
        .partial_rotary_factor
        .or(t.partial_rotary_factor)
        .unwrap_or(1.0);
    // transformers: int(head_dim * partial_rotary_factor)
    let rotary_dim = (head_dim as f64 * factor) as usize;
    if rotary_dim == 0 || rotary_dim > head_dim || !rotary_dim.is_multiple_of(2) {
        return Err(ConfigError::Invalid(format!(
            "partial_rotary_factor {factor} gives {rotary_dim} rotated dimensions of a head of \
             {head_dim}; they must be even and at most the head"
        )));
    }
    let theta = rope.rope_theta.or(t.rope_theta).unwrap_or(10_000.0);
    let spec = TextSpec {
        mrope_section: section(&rope, rotary_dim).map_err(|e| {
            ConfigError::Invalid(format!(
                "{e} (rotary_dim = head_dim {head_dim} · partial_rotary_factor {factor}{})",
                match stated {
                    true => "",
                    false => "; mrope_section not stated: transformers' default [8, 12, 12]",
                }
            ))
        })?,
        rotary_layout: RotaryLayout::Pairs,
        sandwich_norms: true,
        fused_gate_up: true,
        rotary_dim,
        ..dense(f, head_dim, theta)
    };
    check_heads(&spec)?;
    Ok(spec)
}

/// The fields every decoder reads alike from [`TextFields`](super::TextFields), as a dense
/// decoder of full-attention layers with `head_dim`-wide heads rotated whole in halves about
/// base `rope_theta` (M-RoPE, `mrope_section` set by the caller) and the Qwen2 decoder's
/// switches (bias on q/k/v only, no q/k norm, no gate, plain RMSNorm); each decoder function
/// changes what is its own with struct update syntax.
pub(super) fn dense(f: &Fields, head_dim: usize, rope_theta: f64) -> TextSpec {
    let t = &f.text;
    TextSpec {
        vocab_size: t.vocab_size,
        hidden_size: t.hidden_size,
        intermediate_size: t.intermediate_size,
        num_layers: t.num_hidden_layers,
        num_heads: t.num_attention_heads,
        num_kv_heads: t.num_key_value_heads.unwrap_or(t.num_attention_heads),
        head_dim,
        rms_norm_eps: t.rms_norm_eps,
        rope_theta,
        mrope_section: [0; 3],
        position_rows: rows(Positions::MRope),
        mrope_interleaved: false,
        qkv_bias: true,
        o_bias: false,
        qk_norm: false,
        attn_output_gate: false,
        rotary_layout: RotaryLayout::Half,
        sandwich_norms: false,
        fused_gate_up: false,
        zero_centered_norm: false,
        rotary_dim: head_dim,
        layer_types: vec![LayerKind::FullAttention; t.num_hidden_layers],
        linear_attention: None,
        tie_word_embeddings: f
            .tie_word_embeddings
            .or(t.tie_word_embeddings)
            .unwrap_or(false),
        hidden_act: t.hidden_act.clone(),
        eos_token_ids: eos_ids(t.eos_token_id.as_ref()),
        max_position_embeddings: t.max_position_embeddings,
        moe: None,
    }
}

/// Rows of position ids for `positions`.
pub(super) fn rows(positions: Positions) -> usize {
    match positions {
        Positions::MRope => MROPE_ROWS,
        Positions::Plain => 1,
    }
}

/// The pairs per position row: [`section`] for M-RoPE; for plain RoPE every pair on the one
/// row, the rotary block of kind `default` (scaled kinds are not implemented).
fn layout(
    rope: &RopeParameters,
    rotary_dim: usize,
    positions: Positions,
) -> Result<[usize; 3], ConfigError> {
    match (positions, rope.rope_type.as_deref()) {
        (Positions::MRope, _) => section(rope, rotary_dim),
        (Positions::Plain, None | Some("default")) => Ok([rotary_dim / 2, 0, 0]),
        (Positions::Plain, Some(kind)) => Err(ConfigError::Invalid(format!(
            "text rope type `{kind}` is not implemented; supported: default"
        ))),
    }
}

/// `mrope_section` of the decoder's rotary block, which must be plain M-RoPE, summing to
/// `rotary_dim / 2` (the rotated part of a head: all of it but in Qwen3.5).
pub(super) fn section(rope: &RopeParameters, rotary_dim: usize) -> Result<[usize; 3], ConfigError> {
    if let Some(kind) = rope.rope_type.as_deref() {
        if !MROPE_TYPES.contains(&kind) {
            return Err(ConfigError::Invalid(format!(
                "text rope type `{kind}` is not implemented; supported: {}",
                MROPE_TYPES.join(", ")
            )));
        }
    }
    let s = rope
        .mrope_section
        .as_deref()
        .ok_or_else(|| ConfigError::Invalid("rope parameters lack `mrope_section`".into()))?;
    match s {
        [t, h, w] if t + h + w == rotary_dim / 2 => Ok([*t, *h, *w]),
        _ => Err(ConfigError::Invalid(format!(
            "mrope_section {s:?} must have 3 entries summing to rotary_dim/2 = {}",
            rotary_dim / 2
        ))),
    }
}

pub(super) fn check_heads(s: &TextSpec) -> Result<(), ConfigError> {
    if s.num_heads == 0
        || s.num_kv_heads == 0
        || !s.num_heads.is_multiple_of(s.num_kv_heads)
        || s.head_dim == 0
    {
        return Err(ConfigError::Invalid(format!(
            "{} heads / {} kv heads / head_dim {}",
            s.num_heads, s.num_kv_heads, s.head_dim
        )));
    }
    Ok(())
}

pub(super) fn eos_ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => Vec::new(),
    }
}
