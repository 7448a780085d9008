//! Text config of Qwen3.5 (`Qwen3_5TextConfig`, transformers 5.24
//! `models/qwen3_5/configuration_qwen3_5.py`) and its resolution into [`TextSpec`]: the hybrid
//! decoder whose `layer_types` mix Gated DeltaNet (`linear_attention`) and gated full
//! attention (`full_attention`) layers, with partial rotary embeddings.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::moe::{MoeFamily, MoeFields};
use super::rope::RopeParameters;
use super::text::{check_heads, eos_ids, nested_or_flat, section};
use super::{d_silu, ConfigError, LayerKind, LinearAttentionSpec, TextSpec};

/// Text config of Qwen3.5 (`Qwen3_5TextConfig`); defaults are transformers' own.
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen35TextConfig {
    /// Vocabulary size.
    #[serde(default = "d_vocab")]
    pub vocab_size: usize,
    /// Hidden size.
    #[serde(default = "d_hidden")]
    pub hidden_size: usize,
    /// MLP inner size.
    #[serde(default = "d_inter")]
    pub intermediate_size: usize,
    /// Decoder layers.
    #[serde(default = "d_layers")]
    pub num_hidden_layers: usize,
    /// Query heads of the full-attention layers.
    #[serde(default = "d_heads")]
    pub num_attention_heads: usize,
    /// Key/value heads of the full-attention layers.
    #[serde(default = "d_kv_heads")]
    pub num_key_value_heads: usize,
    /// Head dimension of the full-attention layers.
    #[serde(default = "d_head_dim")]
    pub head_dim: usize,
    /// MLP activation (also the Gated DeltaNet conv activation).
    #[serde(default = "d_silu")]
    pub hidden_act: String,
    /// RMSNorm epsilon (every norm of the decoder, the gated one included).
    #[serde(default = "d_eps")]
    pub rms_norm_eps: f64,
    /// Bias on q/k/v/o of the full-attention layers.
    #[serde(default)]
    pub attention_bias: bool,
    /// Top-level rotary base (older files).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Fraction of `head_dim` that is rotated, when written next to the rotary block (older
    /// files; transformers moves it into `rope_parameters`).
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    /// `rope_parameters` or `rope_scaling`.
    #[serde(default, alias = "rope_scaling")]
    pub rope_parameters: Option<RopeParameters>,
    /// Tied embeddings, when stated in the text config.
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// Longest sequence the rotary embedding was trained for.
    #[serde(default = "d_max_pos")]
    pub max_position_embeddings: usize,
    /// Depthwise causal conv1d kernel size of the linear-attention layers.
    #[serde(default = "d_conv")]
    pub linear_conv_kernel_dim: usize,
    /// Key (and query) head dimension of the linear-attention layers.
    #[serde(default = "d_128")]
    pub linear_key_head_dim: usize,
    /// Value head dimension of the linear-attention layers.
    #[serde(default = "d_128")]
    pub linear_value_head_dim: usize,
    /// Key (and query) heads of the linear-attention layers.
    #[serde(default = "d_16")]
    pub linear_num_key_heads: usize,
    /// Value heads of the linear-attention layers (a multiple of the key heads).
    #[serde(default = "d_32")]
    pub linear_num_value_heads: usize,
    /// Mixer of each layer (`linear_attention` / `full_attention`; the legacy `mamba` /
    /// `attention` too); `None`: every `full_attention_interval`-th layer is full attention.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// Period of full-attention layers when `layer_types` is absent (transformers' default 4).
    #[serde(default = "d_interval")]
    pub full_attention_interval: usize,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<Value>,
}

fn d_vocab() -> usize {
    248320
}
fn d_hidden() -> usize {
    4096
}
fn d_inter() -> usize {
    12288
}
fn d_layers() -> usize {
    32
}
fn d_heads() -> usize {
    16
}
fn d_kv_heads() -> usize {
    4
}
fn d_head_dim() -> usize {
    256
}
fn d_eps() -> f64 {
    1e-6
}
fn d_max_pos() -> usize {
    32768
}
fn d_conv() -> usize {
    4
}
fn d_128() -> usize {
    128
}
fn d_16() -> usize {
    16
}
fn d_32() -> usize {
    32
}
fn d_interval() -> usize {
    4
}

/// transformers' `partial_rotary_factor` default for Qwen3.5 (`kwargs.setdefault(..., 0.25)`
/// in `Qwen3_5TextConfig.__post_init__`).
pub const DEFAULT_PARTIAL_ROTARY_FACTOR: f64 = 0.25;

/// `mrope_section` of Qwen3.5 when the rotary block has none
/// (`Qwen3_5TextRotaryEmbedding`: `rope_parameters.get("mrope_section", [11, 11, 10])`).
pub const DEFAULT_MROPE_SECTION: [usize; 3] = [11, 11, 10];

/// Top-level token ids of `Qwen3_5Config` (its class defaults), filled into a file that omits
/// them before the typed parse.
pub(super) const TOKEN_ID_DEFAULTS: [(&str, u32); 4] = [
    ("image_token_id", 248056),
    ("video_token_id", 248057),
    ("vision_start_token_id", 248053),
    ("vision_end_token_id", 248054),
];

/// Resolves a Qwen3.5 text config (nested `text_config`, or the flat top level `rest`).
/// Text config of Qwen3.5-MoE (`Qwen3_5MoeTextConfig`): Qwen3.5's fields plus the MoE ones
/// (`intermediate_size` is unused: every layer is sparse).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen35MoeTextConfig {
    /// The Qwen3.5 decoder fields.
    #[serde(flatten)]
    pub base: Qwen35TextConfig,
    /// `num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
    /// `shared_expert_intermediate_size`.
    #[serde(flatten)]
    pub moe: MoeFields,
}

pub(super) fn qwen3_5_moe_text(
    nested: Option<Qwen35MoeTextConfig>,
    rest: &Map<String, Value>,
    top_tie: Option<bool>,
) -> Result<TextSpec, ConfigError> {
    let t = nested_or_flat(nested, rest)?;
    let mut spec = qwen3_5_text(Some(t.base), rest, top_tie)?;
    spec.moe = Some(t.moe.resolve(MoeFamily::Qwen35Moe, spec.num_layers)?);
    Ok(spec)
}

pub(super) fn qwen3_5_text(
    nested: Option<Qwen35TextConfig>,
    rest: &Map<String, Value>,
    top_tie: Option<bool>,
) -> Result<TextSpec, ConfigError> {
    let t = nested_or_flat(nested, rest)?;
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
    let rotary_dim = (t.head_dim as f64 * factor) as usize;
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
        return Err(ConfigError::Invalid(format!(
            "rotary dim {rotary_dim} (head_dim {} × partial_rotary_factor {factor}) must be even and > 0",
            t.head_dim
        )));
    }
    let mut rope_for_section = rope.clone();
    if rope_for_section.mrope_section.is_none() {
        rope_for_section.mrope_section = Some(DEFAULT_MROPE_SECTION.to_vec());
    }
    let layer_types = layer_kinds(&t)?;
    let linear = LinearAttentionSpec {
        conv_kernel: t.linear_conv_kernel_dim,
        num_key_heads: t.linear_num_key_heads,
        num_value_heads: t.linear_num_value_heads,
        key_head_dim: t.linear_key_head_dim,
        value_head_dim: t.linear_value_head_dim,
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
    let spec = TextSpec {
        vocab_size: t.vocab_size,
        hidden_size: t.hidden_size,
        intermediate_size: t.intermediate_size,
        num_layers: t.num_hidden_layers,
        num_heads: t.num_attention_heads,
        num_kv_heads: t.num_key_value_heads,
        head_dim: t.head_dim,
        rms_norm_eps: t.rms_norm_eps,
        rope_theta: rope.rope_theta.or(t.rope_theta).unwrap_or(10000.0),
        mrope_section: section(&rope_for_section, rotary_dim)?,
        // Qwen3_5TextRotaryEmbedding.recomposition_frequencies always interleaves.
        mrope_interleaved: true,
        rotary_dim,
        qkv_bias: t.attention_bias,
        o_bias: t.attention_bias,
        qk_norm: true,
        attn_output_gate: true,
        zero_centered_norm: true,
        tie_word_embeddings: top_tie.or(t.tie_word_embeddings).unwrap_or(false),
        hidden_act: t.hidden_act,
        eos_token_ids: eos_ids(t.eos_token_id.as_ref()),
        max_position_embeddings: Some(t.max_position_embeddings),
        layer_types,
        linear_attention: Some(linear),
        moe: None,
    };
    check_heads(&spec)?;
    Ok(spec)
}

/// `layer_types` resolved as transformers does (`remap_legacy_layer_types`, or the
/// `full_attention_interval` pattern when absent).
fn layer_kinds(t: &Qwen35TextConfig) -> Result<Vec<LayerKind>, ConfigError> {
    let Some(names) = &t.layer_types else {
        if t.full_attention_interval == 0 {
            return Err(ConfigError::Invalid("full_attention_interval is 0".into()));
        }
        return Ok((0..t.num_hidden_layers)
            .map(|i| {
                if (i + 1) % t.full_attention_interval == 0 {
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
