//! `config.json` of the Qwen-VL families, and the resolved architecture switches the model
//! code is built from ([`TextSpec`], [`VisionSpec`]).
//!
//! Two layouts are accepted for every family:
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
//! Field names are exactly those of the Hugging Face files ([`fields`]). What differs by
//! family — its defaults, and which decoder and vision tower its fields resolve to — is in
//! `crate::families`; the decoders ([`text`], [`qwen3_5`]) and vision towers ([`vision`]) the
//! families share are here.

pub mod fields;
pub mod moe;
pub mod qwen3_5;
mod rope;
pub mod text;
pub mod vision;

pub use fields::{Defaults, Fallback, Fields, Table, TextFields, VisionFields, VisionTokenIds};
pub use moe::{MoeFields, MoeSpec, SparseRule};
pub use qwen3_5::{DEFAULT_MROPE_SECTION, DEFAULT_PARTIAL_ROTARY_FACTOR};
pub use rope::RopeParameters;

/// Errors reading a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The JSON is malformed.
    #[error("config: {0}")]
    Json(#[from] serde_json::Error),
    /// A field is missing or has the wrong type.
    #[error("`{field}`: {source}")]
    Field {
        /// Where it is, from the top of the file (`text_config.hidden_size`).
        field: String,
        /// What is wrong with it.
        source: serde_json::Error,
    },
    /// `model_type` names an architecture this crate does not implement.
    #[error("unsupported model_type `{found}`; supported: {}", supported.join(", "))]
    Unsupported {
        /// The `model_type` found in the file.
        found: String,
        /// The `model_type`s this crate implements (`crate::families::FAMILIES`).
        supported: Vec<&'static str>,
    },
    /// The values are inconsistent (e.g. `mrope_section` not summing to `rotary_dim / 2`).
    #[error("config: {0}")]
    Invalid(String),
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
    /// M-RoPE pairs per axis (t, h, w); sums to `rotary_dim / 2`. A decoder with plain 1-D
    /// RoPE has every pair on the first axis: `[rotary_dim / 2, 0, 0]`.
    pub mrope_section: [usize; 3],
    /// Rows of position ids a token carries: 3 for M-RoPE
    /// ([`crate::rope_index::MROPE_ROWS`]: temporal, height, width), 1 for plain RoPE.
    pub position_rows: usize,
    /// Leading dimensions of each head that are rotated (`head_dim` but in Qwen3.5:
    /// `int(head_dim · partial_rotary_factor)`); the rest pass through.
    pub rotary_dim: usize,
    /// Qwen3-VL interleaved M-RoPE layout.
    pub mrope_interleaved: bool,
    /// How the rotated dimensions of a head pair up ([`RotaryLayout`]).
    pub rotary_layout: RotaryLayout,
    /// GLM-4's extra norms: RMSNorm on the attention output (`post_self_attn_layernorm`) and
    /// on the MLP output (`post_mlp_layernorm`) before each residual add.
    pub sandwich_norms: bool,
    /// The MLP's gate and up projections are one tensor, `mlp.gate_up_proj` `[2 · inter,
    /// hidden]` (gate rows first; GLM-4), not `gate_proj` and `up_proj`.
    pub fused_gate_up: bool,
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

/// How the `rotary_dim` rotated dimensions of a head pair up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotaryLayout {
    /// Dimension `i` with `i + rotary_dim / 2` (transformers `rotate_half`: the Qwen families).
    Half,
    /// Dimension `2i` with `2i + 1` (transformers `rotate_half_llm`, GLM-4). Loaded as
    /// [`Self::Half`]: the rotated rows of `q_proj` and `k_proj` are reordered (even rows,
    /// then odd rows, per head), which leaves every attention score unchanged.
    Pairs,
}

/// The vision tower a family's `config.json` resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum VisionConfig {
    /// The Qwen-VL patch towers with their patch mergers (`crate::vision`).
    Qwen(VisionSpec),
    /// InternViT over fixed-size tiles, pixel shuffle and the MLP projector
    /// (`crate::intern_vit`).
    InternVit(InternVitSpec),
}

impl VisionConfig {
    /// The Qwen-VL tower's spec, if this is one.
    pub fn qwen(&self) -> Option<&VisionSpec> {
        match self {
            Self::Qwen(s) => Some(s),
            Self::InternVit(_) => None,
        }
    }

    /// Width of one row of `pixel_values` (one patch): `C·T·P·P` for the Qwen towers, `C·P·P`
    /// for InternViT.
    pub fn patch_dim(&self) -> usize {
        match self {
            Self::Qwen(s) => s.in_channels * s.temporal_patch_size * s.patch_size.pow(2),
            Self::InternVit(s) => s.in_channels * s.patch_size.pow(2),
        }
    }
}

/// InternVL's vision side, resolved (transformers `InternVLVisionConfig` and the projector
/// settings of `InternVLConfig`, `models/internvl/configuration_internvl.py`).
#[derive(Debug, Clone, PartialEq)]
pub struct InternVitSpec {
    /// Encoder layers (`num_hidden_layers`).
    pub num_layers: usize,
    /// Width of the encoder.
    pub hidden_size: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// MLP activation name.
    pub hidden_act: String,
    /// Norm of the layers (`norm_type`: `layer_norm` or `rms_norm`).
    pub norm: VisionNorm,
    /// Epsilon of the layers' norms (`layer_norm_eps`).
    pub norm_eps: f64,
    /// RMSNorm over all heads' queries and keys before attention (`use_qk_norm`).
    pub qk_norm: bool,
    /// Bias on q/k/v (`attention_bias`).
    pub attention_bias: bool,
    /// Side of a tile in pixels (`image_size`; square).
    pub image_size: usize,
    /// Side of a patch in pixels (`patch_size`; square).
    pub patch_size: usize,
    /// Image channels.
    pub in_channels: usize,
    /// A learned position table `[1 + patches, hidden]` is added (`use_absolute_position_embeddings`).
    pub absolute_positions: bool,
    /// A final LayerNorm after the encoder (`use_mean_pooling` false).
    pub final_norm: bool,
    /// Patches merged per side by the pixel shuffle (`1 / downsample_ratio`).
    pub shuffle: usize,
    /// Projector activation (`projector_hidden_act`).
    pub projector_act: String,
    /// Projector output width (the decoder's hidden size).
    pub out_hidden_size: usize,
}

impl InternVitSpec {
    /// Patches per side of a tile.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size.max(1)
    }

    /// Image tokens one tile becomes: `(image_size / patch_size / shuffle)²`.
    pub fn tokens_per_tile(&self) -> usize {
        (self.patches_per_side() / self.shuffle.max(1)).pow(2)
    }
}

/// Resolved vision-tower switches and sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionSpec {
    /// Norm of the blocks and of the merger(s).
    pub norm: VisionNorm,
    /// Tensor names (and with them the kind) of the blocks' MLP: `fc1/fc2`, `linear_fc1/fc2`,
    /// or gated `gate_proj/up_proj/down_proj`.
    pub mlp: MlpNames,
    /// Tensor names of the patch merger(s).
    pub merger: MergerNames,
    /// The patch embedding has a bias (Qwen3-VL).
    pub patch_bias: bool,
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
    /// Learned position embeddings, a square table (0 = none): Qwen3-VL's `pos_embed`,
    /// GLM-4.1V's `embeddings.position_embedding` (see [`Self::glm`]).
    pub num_position_embeddings: usize,
    /// Bias on the blocks' `attn.qkv` (Qwen: yes; GLM-4.1V: `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the blocks' `attn.proj` and MLP linears (Qwen: yes; GLM-4.1V: no).
    pub block_bias: bool,
    /// Epsilon of the blocks' norms (Qwen: 1e-6; GLM-4.1V: `rms_norm_eps`).
    pub norm_eps: f64,
    /// GLM-4.1V's stem and head ([`GlmVision`]); `None` for the Qwen towers.
    pub glm: Option<GlmVision>,
    /// Qwen3-VL DeepStack source blocks.
    pub deepstack_visual_indexes: Vec<usize>,
}

/// GLM-4.1V's vision stem and head (transformers `Glm4vVisionModel`): RMSNorm after the
/// patch embedding (`post_conv_layernorm`), the learned position table resampled bicubically
/// to each image's grid (`Glm4vVisionEmbeddings`), RMSNorm after the blocks
/// (`post_layernorm`), a `merge × merge` convolution to `out_hidden_size` (`downsample`) and
/// the SwiGLU merger (`merger.proj`, `post_projection_norm`, GELU, `gate_proj`/`up_proj`/
/// `down_proj`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlmVision {
    /// Inner width of the merger's gated MLP (`vision_config.intermediate_size`; the blocks'
    /// MLPs are `out_hidden_size` wide).
    pub merger_intermediate_size: usize,
}

/// The norm of a vision tower's blocks and merger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisionNorm {
    /// LayerNorm with bias (Qwen2-VL, Qwen3-VL).
    LayerNorm,
    /// RMSNorm (Qwen2.5-VL).
    RmsNorm,
}

/// Tensor names of an MLP in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpNames {
    /// `gate_proj` / `up_proj` / `down_proj` (gated).
    Gated,
    /// `gate_up_proj` (gate rows, then up rows) / `down_proj` (gated; GLM-4).
    GateUp,
    /// `fc1` / `fc2` (Qwen2-VL vision).
    Fc,
    /// `linear_fc1` / `linear_fc2` (Qwen3-VL vision).
    LinearFc,
}

/// Tensor names of a patch merger: its norm and its two linears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergerNames {
    /// `ln_q`, `mlp.0`, `mlp.2` (Qwen2-VL, Qwen2.5-VL).
    LnQ,
    /// `norm`, `linear_fc1`, `linear_fc2` (Qwen3-VL, its DeepStack mergers too).
    LinearFc,
}

impl MergerNames {
    /// `(norm, first linear, second linear)`.
    pub fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::LnQ => ("ln_q", "mlp.0", "mlp.2"),
            Self::LinearFc => ("norm", "linear_fc1", "linear_fc2"),
        }
    }
}
