//! `config.json` of Qwen2-VL, Qwen2.5-VL and Qwen3-VL checkpoints, and the resolved
//! architecture switches the model code is built from.
//!
//! Two layouts are accepted for every architecture:
//! - the flat one of the published Qwen2-VL / Qwen2.5-VL checkpoints: text fields at top level,
//!   `rope_theta` at top level, `rope_scaling: {type: "mrope", mrope_section}`;
//! - the nested one transformers 5 writes: `text_config` / `vision_config`, `rope_parameters`
//!   holding `rope_theta` + `mrope_section` (+ `mrope_interleaved` for Qwen3-VL).
//!
//! The rotary block may be spelt `rope_scaling` or `rope_parameters` (or both, merged), its
//! kind `type` or `rope_type` (or both: `"mrope"` = `"default"`), with `mrope_section` in
//! either block and `rope_theta` inside it or next to it, at the top level of a flat file or
//! in `text_config`. Two spellings of one setting that disagree (two different
//! `mrope_section`s) are an error naming both; unknown keys are accepted and ignored.
//!
//! Field names are exactly those of the Hugging Face files; defaults are transformers' own
//! (`configuration_qwen2_vl.py`, `configuration_qwen2_5_vl.py`, `configuration_qwen3_vl.py`,
//! `configuration_qwen3_5.py`).

mod moe;
mod qwen3_5;
mod rope;
mod text;
mod vision;

use serde::Deserialize;
use serde_json::{Map, Value};

pub use moe::{MoeFields, MoeSpec};
pub use qwen3_5::{
    Qwen35MoeTextConfig, Qwen35TextConfig, DEFAULT_MROPE_SECTION, DEFAULT_PARTIAL_ROTARY_FACTOR,
};
pub use rope::RopeParameters;
pub use text::{Qwen2VlTextConfig, Qwen3VlMoeTextConfig, Qwen3VlTextConfig};
pub use vision::{Qwen25VlVisionConfig, Qwen2VlVisionConfig, Qwen3VlVisionConfig};

use qwen3_5::{qwen3_5_moe_text, qwen3_5_text, TOKEN_ID_DEFAULTS};
use rope::normalize;
use text::{qwen2_text, qwen3_text, qwen3_vl_moe_text};

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
    /// The values are inconsistent (e.g. `mrope_section` not summing to `rotary_dim / 2`).
    #[error("config: {0}")]
    Invalid(String),
}

/// The `model_type` values this crate implements.
pub const SUPPORTED_MODEL_TYPES: [&str; 6] = [
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_5",
    "qwen3_vl_moe",
    "qwen3_5_moe",
];

/// Model architecture (the `model_type` of `config.json`), the switch every architectural
/// difference hangs on. The mixture-of-experts variants share their dense family's
/// architecture (`qwen3_vl_moe` is [`Self::Qwen3Vl`], `qwen3_5_moe` [`Self::Qwen35`]): their
/// vision tower and attention are the same; the sparse MLP is [`TextSpec::moe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Qwen2-VL: LayerNorm + QuickGELU vision blocks, full attention, Qwen2 decoder.
    Qwen2Vl,
    /// Qwen2.5-VL: RMSNorm + SwiGLU vision blocks, window attention, Qwen2 decoder.
    Qwen25Vl,
    /// Qwen3-VL: learned interpolated position embeddings, DeepStack, Qwen3 decoder.
    Qwen3Vl,
    /// Qwen3.5 (and Qwen3.6): Qwen3-VL's vision tower without DeepStack; hybrid decoder of
    /// Gated DeltaNet and gated full-attention layers.
    Qwen35,
}

/// What a decoder layer mixes tokens with, and so what the engine caches for it
/// (transformers `layer_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Softmax attention over the paged KV cache (`full_attention`).
    FullAttention,
    /// Gated DeltaNet (`linear_attention`): a fixed-size recurrent state per sequence (conv
    /// state + delta-rule state), no KV cache.
    LinearAttention,
}

/// Sizes of the Gated DeltaNet layers (Qwen3.5 `linear_*` fields,
/// `Qwen3_5GatedDeltaNet` in transformers' `modeling_qwen3_5.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearAttentionSpec {
    /// Depthwise causal conv1d kernel size (`linear_conv_kernel_dim`, 4).
    pub conv_kernel: usize,
    /// Query/key heads (`linear_num_key_heads`).
    pub num_key_heads: usize,
    /// Value heads (`linear_num_value_heads`), a multiple of the key heads; each key head
    /// serves `num_value_heads / num_key_heads` consecutive value heads.
    pub num_value_heads: usize,
    /// Query/key head dimension (`linear_key_head_dim`).
    pub key_head_dim: usize,
    /// Value head dimension (`linear_value_head_dim`).
    pub value_head_dim: usize,
}

impl LinearAttentionSpec {
    /// Width of the query (and of the key) projection: `num_key_heads · key_head_dim`.
    pub fn key_dim(&self) -> usize {
        self.num_key_heads * self.key_head_dim
    }

    /// Width of the value projection: `num_value_heads · value_head_dim`.
    pub fn value_dim(&self) -> usize {
        self.num_value_heads * self.value_head_dim
    }

    /// Channels of the causal conv1d (`2 · key_dim + value_dim`: q, k, v fused).
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// f32 elements of one sequence's conv state: the last `conv_kernel - 1` inputs of every
    /// channel, `[conv_dim, conv_kernel - 1]`.
    pub fn conv_state_elems(&self) -> usize {
        self.conv_dim() * (self.conv_kernel - 1)
    }

    /// f32 elements of one sequence's delta-rule state `[num_value_heads, key_head_dim,
    /// value_head_dim]`.
    pub fn recurrent_state_elems(&self) -> usize {
        self.num_value_heads * self.key_head_dim * self.value_head_dim
    }
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

/// An architecture's top-level file: sub-configs, token ids, and the rest of the top level (the text
/// fields of the flat layout).
#[derive(Debug, Clone, Deserialize)]
pub struct ArchitectureConfig<T, V> {
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
    Qwen2Vl(ArchitectureConfig<Qwen2VlTextConfig, Qwen2VlVisionConfig>),
    /// `qwen2_5_vl`.
    #[serde(rename = "qwen2_5_vl")]
    Qwen25Vl(ArchitectureConfig<Qwen2VlTextConfig, Qwen25VlVisionConfig>),
    /// `qwen3_vl`.
    #[serde(rename = "qwen3_vl")]
    Qwen3Vl(ArchitectureConfig<Qwen3VlTextConfig, Qwen3VlVisionConfig>),
    /// `qwen3_5` (the vision config is Qwen3-VL's; DeepStack is dropped in [`Self::vision`]).
    #[serde(rename = "qwen3_5")]
    Qwen35(ArchitectureConfig<Qwen35TextConfig, Qwen3VlVisionConfig>),
    /// `qwen3_vl_moe`: Qwen3-VL with sparse MoE decoder layers.
    #[serde(rename = "qwen3_vl_moe")]
    Qwen3VlMoe(ArchitectureConfig<Qwen3VlMoeTextConfig, Qwen3VlVisionConfig>),
    /// `qwen3_5_moe`: Qwen3.5 with sparse MoE decoder layers (shared expert).
    #[serde(rename = "qwen3_5_moe")]
    Qwen35Moe(ArchitectureConfig<Qwen35MoeTextConfig, Qwen3VlVisionConfig>),
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
    /// M-RoPE pairs per axis (t, h, w); sums to `rotary_dim / 2`.
    pub mrope_section: [usize; 3],
    /// Leading dimensions of each head that are rotated (`head_dim` but in Qwen3.5:
    /// `int(head_dim · partial_rotary_factor)`); the rest pass through.
    pub rotary_dim: usize,
    /// Qwen3-VL interleaved M-RoPE layout.
    pub mrope_interleaved: bool,
    /// Bias on q/k/v (Qwen2: yes; Qwen3: `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on o_proj (Qwen3 `attention_bias`).
    pub o_bias: bool,
    /// RMSNorm on q and k per head (Qwen3).
    pub qk_norm: bool,
    /// Qwen3.5 gated attention: `q_proj` yields query and gate per head, the attention output
    /// is multiplied by `sigmoid(gate)` before `o_proj`.
    pub attn_output_gate: bool,
    /// Qwen3.5 zero-centred RMSNorm: `x̂ · (1 + w)` in f32 (weights stored as offsets from 1).
    pub zero_centered_norm: bool,
    /// Mixer of each decoder layer (`num_layers` entries; all full attention but in Qwen3.5).
    pub layer_types: Vec<LayerKind>,
    /// Gated DeltaNet sizes, when any layer is [`LayerKind::LinearAttention`].
    pub linear_attention: Option<LinearAttentionSpec>,
    /// `lm_head` shares `embed_tokens`.
    pub tie_word_embeddings: bool,
    /// MLP activation name.
    pub hidden_act: String,
    /// End-of-sequence ids, in file order.
    pub eos_token_ids: Vec<u32>,
    /// The model's context in tokens (`max_position_embeddings`), when the config gives it.
    pub max_position_embeddings: Option<usize>,
    /// Sparse mixture-of-experts blocks (Qwen3-VL-MoE, Qwen3.5-MoE): which layers route
    /// their tokens to experts instead of the dense MLP; `None` for the dense families.
    pub moe: Option<MoeSpec>,
}

/// Resolved vision-tower switches and sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionSpec {
    /// Architecture (selects norm, MLP, attention windows, position embeddings, DeepStack).
    pub architecture: Architecture,
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

impl ModelConfig {
    /// Parses a `config.json` text (either layout, every spelling of the rotary block listed
    /// in the module docs).
    ///
    /// Errors: [`ConfigError::Unsupported`] listing [`SUPPORTED_MODEL_TYPES`] for another
    /// `model_type`; [`ConfigError::Json`] for malformed JSON or wrong field types;
    /// [`ConfigError::Invalid`] naming both places when two spellings of one setting disagree.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let mut value: Value = serde_json::from_str(text)?;
        normalize(&mut value)?;
        let found = value
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("<missing>")
            .to_string();
        if !SUPPORTED_MODEL_TYPES.contains(&found.as_str()) {
            return Err(ConfigError::Unsupported { found });
        }
        let defaults = moe::dense_defaults(&found);
        if let Value::Object(top) = &mut value {
            // The nested text config, or the top level of a flat file.
            let text = if top.get("text_config").is_some_and(Value::is_object) {
                top.get_mut("text_config").and_then(Value::as_object_mut)
            } else {
                Some(&mut *top)
            };
            if let Some(text) = text {
                for (key, v) in defaults {
                    text.entry(*key).or_insert(Value::from(*v));
                }
            }
        }
        if found == "qwen3_5" || found == "qwen3_5_moe" {
            if let Value::Object(top) = &mut value {
                for (key, id) in TOKEN_ID_DEFAULTS {
                    top.entry(key).or_insert(Value::from(id));
                }
            }
        }
        Ok(serde_json::from_value(value)?)
    }

    /// The architecture of this config (its `model_type`).
    pub fn architecture(&self) -> Architecture {
        match self {
            Self::Qwen2Vl(_) => Architecture::Qwen2Vl,
            Self::Qwen25Vl(_) => Architecture::Qwen25Vl,
            Self::Qwen3Vl(_) | Self::Qwen3VlMoe(_) => Architecture::Qwen3Vl,
            Self::Qwen35(_) | Self::Qwen35Moe(_) => Architecture::Qwen35,
        }
    }

    /// The vision special token ids.
    pub fn token_ids(&self) -> &VisionTokenIds {
        match self {
            Self::Qwen2Vl(c) => &c.token_ids,
            Self::Qwen25Vl(c) => &c.token_ids,
            Self::Qwen3Vl(c) => &c.token_ids,
            Self::Qwen35(c) => &c.token_ids,
            Self::Qwen3VlMoe(c) => &c.token_ids,
            Self::Qwen35Moe(c) => &c.token_ids,
        }
    }

    /// Resolved decoder spec.
    ///
    /// Errors: [`ConfigError::Invalid`] when `mrope_section` is missing (Qwen3.5 defaults it)
    /// or does not sum to `rotary_dim / 2`, heads do not divide the hidden size, or (Qwen3.5)
    /// `layer_types` / the linear-attention sizes are inconsistent.
    pub fn text(&self) -> Result<TextSpec, ConfigError> {
        match self {
            Self::Qwen2Vl(c) => qwen2_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings),
            Self::Qwen25Vl(c) => qwen2_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings),
            Self::Qwen3Vl(c) => qwen3_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings),
            Self::Qwen35(c) => qwen3_5_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings),
            Self::Qwen3VlMoe(c) => {
                qwen3_vl_moe_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings)
            }
            Self::Qwen35Moe(c) => {
                qwen3_5_moe_text(c.text_config.clone(), &c.rest, c.tie_word_embeddings)
            }
        }
    }

    /// Resolved vision spec.
    pub fn vision(&self) -> VisionSpec {
        match self {
            Self::Qwen2Vl(c) => c.vision_config.spec(),
            Self::Qwen25Vl(c) => c.vision_config.spec(),
            Self::Qwen3Vl(c) => c.vision_config.spec(),
            Self::Qwen3VlMoe(c) => c.vision_config.spec(),
            Self::Qwen35(ArchitectureConfig { vision_config, .. })
            | Self::Qwen35Moe(ArchitectureConfig { vision_config, .. }) => VisionSpec {
                architecture: Architecture::Qwen35,
                deepstack_visual_indexes: Vec::new(),
                ..vision_config.spec()
            },
        }
    }
}
