//! `config.json` of Qwen2-VL, Qwen2.5-VL and Qwen3-VL checkpoints, and the resolved
//! architecture switches the model code is built from.
//!
//! Two layouts are accepted for every family:
//! - the flat one of the published Qwen2-VL / Qwen2.5-VL checkpoints: text fields at top level,
//!   `rope_theta` at top level, `rope_scaling: {type: "mrope", mrope_section}`;
//! - the nested one transformers 5 writes: `text_config` / `vision_config`, `rope_parameters`
//!   holding `rope_theta` + `mrope_section` (+ `mrope_interleaved` for Qwen3-VL).
//!
//! Field names are exactly those of the Hugging Face files; defaults are transformers' own
//! (`configuration_qwen2_vl.py`, `configuration_qwen2_5_vl.py`, `configuration_qwen3_vl.py`).

use serde::Deserialize;
use serde_json::{Map, Value};

/// Errors reading a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The JSON is malformed or a field has the wrong type.
    #[error("config: {0}")]
    Json(#[from] serde_json::Error),
    /// `model_type` names an architecture this crate does not implement.
    #[error("unsupported model_type `{found}`; supported: {}", SUPPORTED_MODEL_TYPES.join(", "))]
    Unsupported {
        /// The `model_type` found in the file.
        found: String,
    },
    /// The values are inconsistent (e.g. `mrope_section` not summing to `head_dim / 2`).
    #[error("config: {0}")]
    Invalid(String),
}

/// The `model_type` values this crate implements.
pub const SUPPORTED_MODEL_TYPES: [&str; 3] = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"];

/// Model family, the switch every architectural difference hangs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Qwen2-VL: LayerNorm + QuickGELU vision blocks, full attention, Qwen2 decoder.
    Qwen2Vl,
    /// Qwen2.5-VL: RMSNorm + SwiGLU vision blocks, window attention, Qwen2 decoder.
    Qwen25Vl,
    /// Qwen3-VL: learned interpolated position embeddings, DeepStack, Qwen3 decoder.
    Qwen3Vl,
}

/// `rope_parameters` (transformers 5) or `rope_scaling` (published flat configs).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RopeParameters {
    /// Rotary base; may instead sit at the top level as `rope_theta`.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Rotary pairs per M-RoPE axis (temporal, height, width); sums to `head_dim / 2`.
    #[serde(default)]
    pub mrope_section: Option<Vec<usize>>,
    /// Qwen3-VL: axes interleaved over the frequency pairs instead of contiguous chunks.
    #[serde(default)]
    pub mrope_interleaved: Option<bool>,
    /// `"default"`/`"mrope"` (both mean plain M-RoPE here).
    #[serde(default, alias = "type")]
    pub rope_type: Option<String>,
}

fn d_silu() -> String {
    "silu".into()
}
fn d_3() -> usize {
    3
}
fn d_2() -> usize {
    2
}

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

/// Vision config of Qwen2-VL (`Qwen2VLVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen2VlVisionConfig {
    /// Vision blocks.
    #[serde(default = "d_depth32")]
    pub depth: usize,
    /// Width of the vision blocks.
    #[serde(default = "d_1280")]
    pub embed_dim: usize,
    /// Output width of the merger (= text hidden size).
    #[serde(default = "d_3584")]
    pub hidden_size: usize,
    /// MLP activation (`quick_gelu`).
    #[serde(default = "d_quick_gelu")]
    pub hidden_act: String,
    /// MLP inner size = `embed_dim * mlp_ratio`.
    #[serde(default = "d_4f")]
    pub mlp_ratio: f64,
    /// Attention heads.
    #[serde(default = "d_16")]
    pub num_heads: usize,
    /// Image channels (`in_chans` in the published files).
    #[serde(default = "d_3", alias = "in_chans")]
    pub in_channels: usize,
    /// Spatial patch size in pixels.
    #[serde(default = "d_14")]
    pub patch_size: usize,
    /// Patches merged per side by the merger.
    #[serde(default = "d_2")]
    pub spatial_merge_size: usize,
    /// Frames per temporal patch.
    #[serde(default = "d_2")]
    pub temporal_patch_size: usize,
    /// Rotary parameters of the 2D vision RoPE (theta 10000).
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

/// Vision config of Qwen2.5-VL (`Qwen2_5_VLVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen25VlVisionConfig {
    /// Vision blocks.
    #[serde(default = "d_depth32")]
    pub depth: usize,
    /// Width of the vision blocks.
    #[serde(default = "d_3584")]
    pub hidden_size: usize,
    /// MLP activation (`silu`, gated).
    #[serde(default = "d_silu")]
    pub hidden_act: String,
    /// MLP inner size.
    #[serde(default = "d_3420")]
    pub intermediate_size: usize,
    /// Attention heads.
    #[serde(default = "d_16")]
    pub num_heads: usize,
    /// Image channels.
    #[serde(default = "d_3", alias = "in_chans")]
    pub in_channels: usize,
    /// Spatial patch size.
    #[serde(default = "d_14")]
    pub patch_size: usize,
    /// Merge size.
    #[serde(default = "d_2")]
    pub spatial_merge_size: usize,
    /// Temporal patch size.
    #[serde(default = "d_2")]
    pub temporal_patch_size: usize,
    /// Attention window side in pixels.
    #[serde(default = "d_112")]
    pub window_size: usize,
    /// Merger output width (= text hidden size).
    #[serde(default = "d_3584")]
    pub out_hidden_size: usize,
    /// Blocks with full (not windowed) attention.
    #[serde(default = "d_fullatt")]
    pub fullatt_block_indexes: Vec<usize>,
    /// Rotary parameters of the 2D vision RoPE.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

/// Vision config of Qwen3-VL (`Qwen3VLVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3VlVisionConfig {
    /// Vision blocks.
    #[serde(default = "d_depth27")]
    pub depth: usize,
    /// Width of the vision blocks.
    #[serde(default = "d_1152")]
    pub hidden_size: usize,
    /// MLP activation (`gelu_pytorch_tanh`).
    #[serde(default = "d_gelu_tanh")]
    pub hidden_act: String,
    /// MLP inner size.
    #[serde(default = "d_4304")]
    pub intermediate_size: usize,
    /// Attention heads.
    #[serde(default = "d_16")]
    pub num_heads: usize,
    /// Image channels.
    #[serde(default = "d_3")]
    pub in_channels: usize,
    /// Spatial patch size (16).
    #[serde(default = "d_16")]
    pub patch_size: usize,
    /// Merge size.
    #[serde(default = "d_2")]
    pub spatial_merge_size: usize,
    /// Temporal patch size.
    #[serde(default = "d_2")]
    pub temporal_patch_size: usize,
    /// Merger output width (= text hidden size).
    #[serde(default = "d_3584")]
    pub out_hidden_size: usize,
    /// Learned position embeddings (a square grid of `sqrt(n)` per side).
    #[serde(default = "d_2304")]
    pub num_position_embeddings: usize,
    /// Vision blocks whose output feeds a DeepStack merger, injected into decoder layers 0, 1, ….
    #[serde(default = "d_deepstack")]
    pub deepstack_visual_indexes: Vec<usize>,
    /// Rotary parameters of the 2D vision RoPE.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

fn d_depth32() -> usize {
    32
}
fn d_depth27() -> usize {
    27
}
fn d_1280() -> usize {
    1280
}
fn d_1152() -> usize {
    1152
}
fn d_3584() -> usize {
    3584
}
fn d_3420() -> usize {
    3420
}
fn d_4304() -> usize {
    4304
}
fn d_2304() -> usize {
    2304
}
fn d_16() -> usize {
    16
}
fn d_14() -> usize {
    14
}
fn d_112() -> usize {
    112
}
fn d_4f() -> f64 {
    4.0
}
fn d_quick_gelu() -> String {
    "quick_gelu".into()
}
fn d_gelu_tanh() -> String {
    "gelu_pytorch_tanh".into()
}
fn d_fullatt() -> Vec<usize> {
    vec![7, 15, 23, 31]
}
fn d_deepstack() -> Vec<usize> {
    vec![8, 16, 24]
}

/// Token ids shared by the three families (top level of `config.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct VisionTokenIds {
    /// `<|image_pad|>`.
    #[serde(default = "d_image_tok")]
    pub image_token_id: u32,
    /// `<|video_pad|>`.
    #[serde(default = "d_video_tok")]
    pub video_token_id: u32,
    /// `<|vision_start|>`.
    #[serde(default = "d_vstart_tok")]
    pub vision_start_token_id: u32,
    /// `<|vision_end|>`.
    #[serde(default = "d_vend_tok")]
    pub vision_end_token_id: u32,
}

fn d_image_tok() -> u32 {
    151655
}
fn d_video_tok() -> u32 {
    151656
}
fn d_vstart_tok() -> u32 {
    151652
}
fn d_vend_tok() -> u32 {
    151653
}

/// A family's top-level file: sub-configs, token ids, and the rest of the top level (the text
/// fields of the flat layout).
#[derive(Debug, Clone, Deserialize)]
pub struct FamilyConfig<T, V> {
    /// Nested text config (transformers 5); absent in the flat layout.
    pub text_config: Option<T>,
    /// Vision config.
    pub vision_config: V,
    /// Top-level tie flag.
    pub tie_word_embeddings: Option<bool>,
    /// Special token ids.
    #[serde(flatten)]
    pub token_ids: VisionTokenIds,
    /// Every other top-level field (the text fields of the flat layout).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `config.json`, keyed on `model_type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "model_type")]
pub enum ModelConfig {
    /// `qwen2_vl`.
    #[serde(rename = "qwen2_vl")]
    Qwen2Vl(FamilyConfig<Qwen2VlTextConfig, Qwen2VlVisionConfig>),
    /// `qwen2_5_vl`.
    #[serde(rename = "qwen2_5_vl")]
    Qwen25Vl(FamilyConfig<Qwen2VlTextConfig, Qwen25VlVisionConfig>),
    /// `qwen3_vl`.
    #[serde(rename = "qwen3_vl")]
    Qwen3Vl(FamilyConfig<Qwen3VlTextConfig, Qwen3VlVisionConfig>),
}

/// Resolved decoder switches and sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct TextSpec {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary base.
    pub rope_theta: f64,
    /// M-RoPE pairs per axis (t, h, w); sums to `head_dim / 2`.
    pub mrope_section: [usize; 3],
    /// Qwen3-VL interleaved M-RoPE layout.
    pub mrope_interleaved: bool,
    /// Bias on q/k/v (Qwen2: yes; Qwen3: `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on o_proj (Qwen3 `attention_bias`).
    pub o_bias: bool,
    /// RMSNorm on q and k per head (Qwen3).
    pub qk_norm: bool,
    /// `lm_head` shares `embed_tokens`.
    pub tie_word_embeddings: bool,
    /// MLP activation name.
    pub hidden_act: String,
    /// End-of-sequence ids, in file order.
    pub eos_token_ids: Vec<u32>,
    /// The model's context in tokens (`max_position_embeddings`), when the config gives it.
    pub max_position_embeddings: Option<usize>,
}

/// Resolved vision-tower switches and sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionSpec {
    /// Family (selects norm, MLP, attention windows, position embeddings, DeepStack).
    pub family: Family,
    /// Vision blocks.
    pub depth: usize,
    /// Block width.
    pub hidden_size: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// MLP activation name.
    pub hidden_act: String,
    /// Merger output width (= text hidden size).
    pub out_hidden_size: usize,
    /// Image channels.
    pub in_channels: usize,
    /// Spatial patch size.
    pub patch_size: usize,
    /// Temporal patch size.
    pub temporal_patch_size: usize,
    /// Merge size.
    pub spatial_merge_size: usize,
    /// Rotary base of the 2D vision RoPE.
    pub rope_theta: f64,
    /// Qwen2.5-VL window side in pixels (0 = no window attention).
    pub window_size: usize,
    /// Qwen2.5-VL blocks with full attention.
    pub fullatt_block_indexes: Vec<usize>,
    /// Qwen3-VL learned position embeddings (0 = none).
    pub num_position_embeddings: usize,
    /// Qwen3-VL DeepStack source blocks.
    pub deepstack_visual_indexes: Vec<usize>,
}

/// Pairs of keys that name the same setting: the transformers 5 name first, the older name
/// it replaced second (`rope_scaling` → `rope_parameters` in transformers 5; `in_chans` →
/// `in_channels` in the Qwen2-VL vision config).
const LEGACY_KEYS: [(&str, &str); 2] = [
    ("rope_parameters", "rope_scaling"),
    ("in_channels", "in_chans"),
];

/// Files re-saved by transformers often carry both names of a renamed key (e.g. a flat
/// `rope_scaling` next to the new `rope_parameters`, `in_chans` next to `in_channels`), which
/// transformers reads fine. Fold the old name into the new one, at the top level and in
/// `text_config` / `vision_config`: objects are merged (new keys win), equal scalars
/// collapse.
///
/// Errors: [`ConfigError::Invalid`] when the two names hold different scalar values.
fn fold_legacy_keys(value: &mut Value) -> Result<(), ConfigError> {
    fn fold(obj: &mut serde_json::Map<String, Value>) -> Result<(), ConfigError> {
        for (new, old) in LEGACY_KEYS {
            let Some(old_value) = obj.remove(old) else {
                continue;
            };
            match obj.get_mut(new) {
                None => {
                    obj.insert(new.to_string(), old_value);
                }
                Some(Value::Object(current)) => {
                    if let Value::Object(legacy) = old_value {
                        for (k, v) in legacy {
                            current.entry(k).or_insert(v);
                        }
                    }
                }
                Some(current) if *current == old_value => {}
                Some(current) => {
                    return Err(ConfigError::Invalid(format!(
                        "`{new}` = {current} and `{old}` = {old_value} disagree"
                    )))
                }
            }
        }
        Ok(())
    }
    if let Value::Object(top) = value {
        fold(top)?;
        for nested in ["text_config", "vision_config"] {
            if let Some(Value::Object(obj)) = top.get_mut(nested) {
                fold(obj)?;
            }
        }
    }
    Ok(())
}

impl ModelConfig {
    /// Parses a `config.json` text (either layout).
    ///
    /// Errors: [`ConfigError::Unsupported`] listing [`SUPPORTED_MODEL_TYPES`] for another
    /// `model_type`; [`ConfigError::Json`] for malformed JSON or wrong field types.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let mut value: Value = serde_json::from_str(text)?;
        fold_legacy_keys(&mut value)?;
        let found = value
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("<missing>");
        if !SUPPORTED_MODEL_TYPES.contains(&found) {
            return Err(ConfigError::Unsupported {
                found: found.to_string(),
            });
        }
        Ok(serde_json::from_value(value)?)
    }

    /// The family of this config.
    pub fn family(&self) -> Family {
        match self {
            Self::Qwen2Vl(_) => Family::Qwen2Vl,
            Self::Qwen25Vl(_) => Family::Qwen25Vl,
            Self::Qwen3Vl(_) => Family::Qwen3Vl,
        }
    }

    /// The vision special token ids.
    pub fn token_ids(&self) -> &VisionTokenIds {
        match self {
            Self::Qwen2Vl(c) => &c.token_ids,
            Self::Qwen25Vl(c) => &c.token_ids,
            Self::Qwen3Vl(c) => &c.token_ids,
        }
    }

    /// Resolved decoder spec.
    ///
    /// Errors: [`ConfigError::Invalid`] when `mrope_section` is missing or does not sum to
    /// `head_dim / 2`, or heads do not divide the hidden size.
    pub fn text(&self) -> Result<TextSpec, ConfigError> {
        match self {
            Self::Qwen2Vl(c) => qwen2_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings),
            Self::Qwen25Vl(c) => qwen2_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings),
            Self::Qwen3Vl(c) => {
                let t = match c.text_config.clone() {
                    Some(t) => t,
                    None => serde_json::from_value(Value::Object(c.rest.clone()))?,
                };
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
                    tie_word_embeddings: c
                        .tie_word_embeddings
                        .or(t.tie_word_embeddings)
                        .unwrap_or(false),
                    hidden_act: t.hidden_act,
                    eos_token_ids: eos_ids(t.eos_token_id.as_ref()),
                    max_position_embeddings: t.max_position_embeddings,
                };
                check_heads(&spec)?;
                Ok(spec)
            }
        }
    }

    /// Resolved vision spec.
    pub fn vision(&self) -> VisionSpec {
        let theta =
            |r: &Option<RopeParameters>| r.as_ref().and_then(|r| r.rope_theta).unwrap_or(10000.0);
        match self {
            Self::Qwen2Vl(c) => {
                let v = &c.vision_config;
                VisionSpec {
                    family: Family::Qwen2Vl,
                    depth: v.depth,
                    hidden_size: v.embed_dim,
                    num_heads: v.num_heads,
                    // transformers: int(embed_dim * mlp_ratio)
                    intermediate_size: (v.embed_dim as f64 * v.mlp_ratio) as usize,
                    hidden_act: v.hidden_act.clone(),
                    out_hidden_size: v.hidden_size,
                    in_channels: v.in_channels,
                    patch_size: v.patch_size,
                    temporal_patch_size: v.temporal_patch_size,
                    spatial_merge_size: v.spatial_merge_size,
                    rope_theta: theta(&v.rope_parameters),
                    window_size: 0,
                    fullatt_block_indexes: Vec::new(),
                    num_position_embeddings: 0,
                    deepstack_visual_indexes: Vec::new(),
                }
            }
            Self::Qwen25Vl(c) => {
                let v = &c.vision_config;
                VisionSpec {
                    family: Family::Qwen25Vl,
                    depth: v.depth,
                    hidden_size: v.hidden_size,
                    num_heads: v.num_heads,
                    intermediate_size: v.intermediate_size,
                    hidden_act: v.hidden_act.clone(),
                    out_hidden_size: v.out_hidden_size,
                    in_channels: v.in_channels,
                    patch_size: v.patch_size,
                    temporal_patch_size: v.temporal_patch_size,
                    spatial_merge_size: v.spatial_merge_size,
                    rope_theta: theta(&v.rope_parameters),
                    window_size: v.window_size,
                    fullatt_block_indexes: v.fullatt_block_indexes.clone(),
                    num_position_embeddings: 0,
                    deepstack_visual_indexes: Vec::new(),
                }
            }
            Self::Qwen3Vl(c) => {
                let v = &c.vision_config;
                VisionSpec {
                    family: Family::Qwen3Vl,
                    depth: v.depth,
                    hidden_size: v.hidden_size,
                    num_heads: v.num_heads,
                    intermediate_size: v.intermediate_size,
                    hidden_act: v.hidden_act.clone(),
                    out_hidden_size: v.out_hidden_size,
                    in_channels: v.in_channels,
                    patch_size: v.patch_size,
                    temporal_patch_size: v.temporal_patch_size,
                    spatial_merge_size: v.spatial_merge_size,
                    rope_theta: theta(&v.rope_parameters),
                    window_size: 0,
                    fullatt_block_indexes: Vec::new(),
                    num_position_embeddings: v.num_position_embeddings,
                    deepstack_visual_indexes: v.deepstack_visual_indexes.clone(),
                }
            }
        }
    }
}

fn qwen2_text(
    nested: Option<Qwen2VlTextConfig>,
    rest: &Map<String, Value>,
    top_tie: Option<bool>,
) -> Result<TextSpec, ConfigError> {
    let t = match nested {
        Some(t) => t,
        None => serde_json::from_value(Value::Object(rest.clone()))?,
    };
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
        tie_word_embeddings: top_tie.or(t.tie_word_embeddings).unwrap_or(false),
        hidden_act: t.hidden_act,
        eos_token_ids: eos_ids(t.eos_token_id.as_ref()),
        max_position_embeddings: t.max_position_embeddings,
    };
    check_heads(&spec)?;
    Ok(spec)
}

fn section(rope: &RopeParameters, head_dim: usize) -> Result<[usize; 3], ConfigError> {
    let s = rope
        .mrope_section
        .as_deref()
        .ok_or_else(|| ConfigError::Invalid("rope parameters lack `mrope_section`".into()))?;
    match s {
        [t, h, w] if t + h + w == head_dim / 2 => Ok([*t, *h, *w]),
        _ => Err(ConfigError::Invalid(format!(
            "mrope_section {s:?} must have 3 entries summing to head_dim/2 = {}",
            head_dim / 2
        ))),
    }
}

fn check_heads(s: &TextSpec) -> Result<(), ConfigError> {
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

fn eos_ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => Vec::new(),
    }
}
