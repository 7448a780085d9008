//! Text (decoder) configs of the three families and their resolution into [`TextSpec`].

use serde::Deserialize;
use serde_json::{Map, Value};

use super::moe::{MoeFamily, MoeFields};
use super::rope::{RopeParameters, MROPE_TYPES};
use super::{d_silu, ConfigError, LayerKind, TextSpec};

/// Text config of Qwen2-VL and Qwen2.5-VL (`Qwen2VLTextConfig` / `Qwen2_5_VLTextConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen2VlTextConfig {
    /// Vocabulary size (rows of `embed_tokens` and `lm_head`).
    #[serde(default = "d_vocab_qwen2")]
    pub vocab_size: usize,
    /// Hidden size of the decoder.
    #[serde(default = "d_hidden_qwen2")]
    pub hidden_size: usize,
    /// MLP inner size.
    #[serde(default = "d_inter_qwen2")]
    pub intermediate_size: usize,
    /// Decoder layers.
    #[serde(default = "d_layers_qwen2")]
    pub num_hidden_layers: usize,
    /// Query heads.
    #[serde(default = "d_heads_qwen2")]
    pub num_attention_heads: usize,
    /// Key/value heads (GQA); `None` means `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// MLP activation (`silu`).
    #[serde(default = "d_silu")]
    pub hidden_act: String,
    /// RMSNorm epsilon (transformers default 1e-5; the published checkpoints say 1e-6).
    #[serde(default = "d_eps_qwen2")]
    pub rms_norm_eps: f64,
    /// Top-level rotary base of the flat layout.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// `rope_parameters` (nested) or `rope_scaling` (flat).
    #[serde(default, alias = "rope_scaling")]
    pub rope_parameters: Option<RopeParameters>,
    /// Whether `lm_head` shares `embed_tokens` (flat layout: here; nested: top level).
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// Longest sequence the rotary embedding was trained for (`max_position_embeddings`).
    pub max_position_embeddings: Option<usize>,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<Value>,
}

fn d_vocab_qwen2() -> usize {
    152064
}
fn d_hidden_qwen2() -> usize {
    8192
}
fn d_inter_qwen2() -> usize {
    29568
}
fn d_layers_qwen2() -> usize {
    80
}
fn d_heads_qwen2() -> usize {
    64
}
fn d_eps_qwen2() -> f64 {
    1e-5
}

/// Text config of Qwen3-VL (`Qwen3VLTextConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3VlTextConfig {
    /// Vocabulary size.
    #[serde(default = "d_vocab_qwen3")]
    pub vocab_size: usize,
    /// Hidden size.
    #[serde(default = "d_hidden_qwen3")]
    pub hidden_size: usize,
    /// MLP inner size.
    #[serde(default = "d_inter_qwen3")]
    pub intermediate_size: usize,
    /// Decoder layers.
    #[serde(default = "d_layers_qwen3")]
    pub num_hidden_layers: usize,
    /// Query heads.
    #[serde(default = "d_heads_qwen3")]
    pub num_attention_heads: usize,
    /// Key/value heads; `None` means `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head dimension (explicit in Qwen3).
    #[serde(default = "d_head_dim_qwen3")]
    pub head_dim: usize,
    /// MLP activation.
    #[serde(default = "d_silu")]
    pub hidden_act: String,
    /// RMSNorm epsilon.
    #[serde(default = "d_eps_qwen3")]
    pub rms_norm_eps: f64,
    /// Bias on q/k/v/o projections.
    #[serde(default)]
    pub attention_bias: bool,
    /// Top-level rotary base (older files).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// `rope_parameters` or `rope_scaling`.
    #[serde(default, alias = "rope_scaling")]
    pub rope_parameters: Option<RopeParameters>,
    /// Tied embeddings, when stated in the text config.
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// Longest sequence the rotary embedding was trained for (`max_position_embeddings`).
    pub max_position_embeddings: Option<usize>,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<Value>,
}

fn d_vocab_qwen3() -> usize {
    151936
}
fn d_hidden_qwen3() -> usize {
    4096
}
fn d_inter_qwen3() -> usize {
    22016
}
fn d_layers_qwen3() -> usize {
    32
}
fn d_heads_qwen3() -> usize {
    32
}
fn d_head_dim_qwen3() -> usize {
    128
}
fn d_eps_qwen3() -> f64 {
    1e-6
}

/// Text config of Qwen3-VL-MoE (`Qwen3VLMoeTextConfig`): Qwen3-VL's fields plus the MoE ones.
/// The dense fields take Qwen3-VL's defaults (the published MoE files state them all).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3VlMoeTextConfig {
    /// The Qwen3-VL decoder fields.
    #[serde(flatten)]
    pub base: Qwen3VlTextConfig,
    /// `num_experts`, `num_experts_per_tok`, `moe_intermediate_size`, `mlp_only_layers`,
    /// `decoder_sparse_step`.
    #[serde(flatten)]
    pub moe: MoeFields,
}

pub(super) fn qwen3_vl_moe_text(
    nested: Option<Qwen3VlMoeTextConfig>,
    rest: &Map<String, Value>,
    top_tie: Option<bool>,
) -> Result<TextSpec, ConfigError> {
    let t = nested_or_flat(nested, rest)?;
    let mut spec = qwen3_text(Some(t.base), rest, top_tie)?;
    spec.moe = Some(t.moe.resolve(MoeFamily::Qwen3VlMoe, spec.num_layers)?);
    Ok(spec)
}

pub(super) fn qwen2_text(
    nested: Option<Qwen2VlTextConfig>,
    rest: &Map<String, Value>,
    top_tie: Option<bool>,
) -> Result<TextSpec, ConfigError> {
    let t = nested_or_flat(nested, rest)?;
    // The flat layout keeps rope_theta at the top level and rope_scaling without it.
    let rope = t.rope_parameters.clone().unwrap_or_default();
    let top_theta = rest.get("rope_theta").and_then(Value::as_f64);
    let head_dim = t
        .hidden_size
        .checked_div(t.num_attention_heads)
        .unwrap_or(0);
    let spec = TextSpec {
        vocab_size: t.vocab_size,
        hidden_size: t.hidden_size,
        intermediate_size: t.intermediate_size,
        num_layers: t.num_hidden_layers,
        num_heads: t.num_attention_heads,
        num_kv_heads: t.num_key_value_heads.unwrap_or(t.num_attention_heads),
        head_dim,
        rms_norm_eps: t.rms_norm_eps,
        rope_theta: rope
            .rope_theta
            .or(t.rope_theta)
            .or(top_theta)
            .unwrap_or(1_000_000.0),
        mrope_section: section(&rope, head_dim)?,
        mrope_interleaved: false,
        qkv_bias: true,
        o_bias: false,
        qk_norm: false,
        attn_output_gate: false,
        zero_centered_norm: false,
        rotary_dim: head_dim,
        layer_types: vec![LayerKind::FullAttention; t.num_hidden_layers],
        linear_attention: None,
        tie_word_embeddings: top_tie.or(t.tie_word_embeddings).unwrap_or(false),
        hidden_act: t.hidden_act,
        eos_token_ids: eos_ids(t.eos_token_id.as_ref()),
        max_position_embeddings: t.max_position_embeddings,
        moe: None,
    };
    check_heads(&spec)?;
    Ok(spec)
}

pub(super) fn qwen3_text(
    nested: Option<Qwen3VlTextConfig>,
    rest: &Map<String, Value>,
    top_tie: Option<bool>,
) -> Result<TextSpec, ConfigError> {
    let t = nested_or_flat(nested, rest)?;
    let rope = t.rope_parameters.clone().unwrap_or_default();
    let spec = TextSpec {
        vocab_size: t.vocab_size,
        hidden_size: t.hidden_size,
        intermediate_size: t.intermediate_size,
        num_layers: t.num_hidden_layers,
        num_heads: t.num_attention_heads,
        num_kv_heads: t.num_key_value_heads.unwrap_or(t.num_attention_heads),
        head_dim: t.head_dim,
        rms_norm_eps: t.rms_norm_eps,
        rope_theta: rope.rope_theta.or(t.rope_theta).unwrap_or(500000.0),
        mrope_section: section(&rope, t.head_dim)?,
        mrope_interleaved: rope.mrope_interleaved.unwrap_or(false),
        qkv_bias: t.attention_bias,
        o_bias: t.attention_bias,
        qk_norm: true,
        attn_output_gate: false,
        zero_centered_norm: false,
        rotary_dim: t.head_dim,
        layer_types: vec![LayerKind::FullAttention; t.num_hidden_layers],
        linear_attention: None,
        tie_word_embeddings: top_tie.or(t.tie_word_embeddings).unwrap_or(false),
        hidden_act: t.hidden_act,
        eos_token_ids: eos_ids(t.eos_token_id.as_ref()),
        max_position_embeddings: t.max_position_embeddings,
        moe: None,
    };
    check_heads(&spec)?;
    Ok(spec)
}

/// The nested text config, or the flat layout's top-level fields read as one.
pub(super) fn nested_or_flat<T: serde::de::DeserializeOwned>(
    nested: Option<T>,
    rest: &Map<String, Value>,
) -> Result<T, ConfigError> {
    match nested {
        Some(t) => Ok(t),
        None => Ok(serde_json::from_value(Value::Object(rest.clone()))?),
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
