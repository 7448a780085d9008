//! The Qwen3.5 decoder (`Qwen3_5TextConfig`, transformers 5.24
//! `models/qwen3_5/configuration_qwen3_5.py`) resolved into [`TextSpec`]: the hybrid decoder
//! whose `layer_types` mix Gated DeltaNet (`linear_attention`) and gated full attention
//! (`full_attention`) layers, with partial rotary embeddings. Shared by `qwen3_5` and
//! `qwen3_5_moe`.

use super::fields::{Fields, TextFields};
use super::text::{check_heads, dense, section};
use super::{ConfigError, LayerKind, LinearAttentionSpec, TextSpec};

/// transformers' `partial_rotary_factor` default for Qwen3.5 (`kwargs.setdefault(..., 0.25)`
/// in `Qwen3_5TextConfig.__post_init__`).
pub const DEFAULT_PARTIAL_ROTARY_FACTOR: f64 = 0.25;

/// `mrope_section` of Qwen3.5 when the rotary block has none
/// (`Qwen3_5TextRotaryEmbedding`: `rope_parameters.get("mrope_section", [11, 11, 10])`).
pub const DEFAULT_MROPE_SECTION: [usize; 3] = [11, 11, 10];

/// The Qwen3.5 hybrid decoder (transformers `Qwen3_5TextModel`): Gated DeltaNet and gated
/// full-attention layers after `layer_types`, a quarter of each head rotated by default
/// (`partial_rotary_factor`), interleaved M-RoPE, zero-centred norms; rotary base 1e4 unless
/// stated.
///
/// Errors: [`ConfigError::Invalid`] naming the setting: two disagreeing
/// `partial_rotary_factor`s or one outside (0, 1], an odd rotary dimension, linear-attention
/// sizes that do not fit, `layer_types` of the wrong length or kind, a mis-summed
/// `mrope_section`.
pub fn qwen3_5_decoder(f: &Fields) -> Result<TextSpec, ConfigError> {
    let t = &f.text;
    let head_dim = t.head_dim.unwrap_or(0);
    let rope = t.rope_parameters.clone().unwrap_or_default();
    let factor = match (rope.partial_rotary_factor, t.partial_rotary_factor) {
        (Some(a), Some(b)) if a != b => {
            return Err(ConfigError::Invalid(format!(
                "`rope_parameters.partial_rotary_factor` = {a} and `partial_rotary_factor` = {b} disagree"
            )))
        }
        (a, b) => a.or(b).unwrap_or(DEFAULT_PARTIAL_ROTARY_FACTOR),
    };
    if factor.is_nan() || factor <= 0.0 || factor > 1.0 {
        return Err(ConfigError::Invalid(format!(
            "partial_rotary_factor {factor} must be in (0, 1]"
        )));
    }
    // transformers: `dim = int(head_dim * partial_rotary_factor)`.
    let rotary_dim = (head_dim as f64 * factor) as usize;
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
        return Err(ConfigError::Invalid(format!(
            "rotary dim {rotary_dim} (head_dim {} × partial_rotary_factor {factor}) must be even and > 0",
            head_dim
        )));
    }
    let mut rope_for_section = rope.clone();
    if rope_for_section.mrope_section.is_none() {
        rope_for_section.mrope_section = Some(DEFAULT_MROPE_SECTION.to_vec());
    }
    let layer_types = layer_kinds(t)?;
    let linear = LinearAttentionSpec {
        conv_kernel: t.linear_conv_kernel_dim.unwrap_or(0),
        num_key_heads: t.linear_num_key_heads.unwrap_or(0),
        num_value_heads: t.linear_num_value_heads.unwrap_or(0),
        key_head_dim: t.linear_key_head_dim.unwrap_or(0),
        value_head_dim: t.linear_value_head_dim.unwrap_or(0),
    };
    if linear.conv_kernel < 2
        || linear.num_key_heads == 0
        || linear.key_head_dim == 0
        || linear.value_head_dim == 0
        || linear.num_value_heads == 0
        || !linear.num_value_heads.is_multiple_of(linear.num_key_heads)
    {
        return Err(ConfigError::Invalid(format!(
            "linear attention: conv kernel {}, {} key heads of {}, {} value heads of {} \
             (value heads must be a multiple of key heads, kernel ≥ 2)",
            linear.conv_kernel,
            linear.num_key_heads,
            linear.key_head_dim,
            linear.num_value_heads,
            linear.value_head_dim
        )));
    }
    let theta = rope.rope_theta.or(t.rope_theta).unwrap_or(10000.0);
    let spec = TextSpec {
        mrope_section: section(&rope_for_section, rotary_dim)?,
        // Qwen3_5TextRotaryEmbedding.recomposition_frequencies always interleaves.
        mrope_interleaved: true,
        rotary_dim,
        qkv_bias: t.attention_bias.unwrap_or(false),
        o_bias: t.attention_bias.unwrap_or(false),
        qk_norm: true,
        attn_output_gate: true,
        zero_centered_norm: true,
        layer_types,
        linear_attention: Some(linear),
        ..dense(f, head_dim, theta)
    };
    check_heads(&spec)?;
    Ok(spec)
}

/// `layer_types` resolved as transformers does (`remap_legacy_layer_types`, or the
/// `full_attention_interval` pattern when absent).
fn layer_kinds(t: &TextFields) -> Result<Vec<LayerKind>, ConfigError> {
    let Some(names) = &t.layer_types else {
        let interval = t.full_attention_interval.unwrap_or(0);
        if interval == 0 {
            return Err(ConfigError::Invalid("full_attention_interval is 0".into()));
        }
        return Ok((0..t.num_hidden_layers)
            .map(|i| {
                if (i + 1) % interval == 0 {
                    LayerKind::FullAttention
                } else {
                    LayerKind::LinearAttention
                }
            })
            .collect());
    };
    if names.len() != t.num_hidden_layers {
        return Err(ConfigError::Invalid(format!(
            "layer_types has {} entries but num_hidden_layers is {}",
            names.len(),
            t.num_hidden_layers
        )));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, name)| match name.as_str() {
            "full_attention" | "attention" => Ok(LayerKind::FullAttention),
            "linear_attention" | "mamba" => Ok(LayerKind::LinearAttention),
            other => Err(ConfigError::Invalid(format!(
                "layer_types[{i}] = `{other}`; supported: full_attention, linear_attention"
            ))),
        })
        .collect()
}
