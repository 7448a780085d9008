//! GLM-4.1V (`glm4v`; transformers `models/glm4v/configuration_glm4v.py`, the
//! GLM-4.1V-9B-Thinking and GLM-4.6V-Flash checkpoints): the GLM-4 decoder
//! ([`glm4_decoder`]: M-RoPE on half of each head in adjacent pairs, extra norms after
//! attention and MLP) and GLM-4.1V's vision tower (the Qwen2.5-VL blocks without windows or
//! biases, with the stem and head of [`crate::config::GlmVision`]); images resized by
//! `Glm4vImageProcessor` ([`ResizeRule::Glm`]), written by the chat template as
//! `<|begin_of_image|><|image|><|end_of_image|>`.

use serde::Deserialize;

use crate::config::text::glm4_decoder;
use crate::config::{
    ConfigError, Defaults, Fallback::*, Fields, GlmVision, MergerNames, MlpNames, RopeParameters,
    Table, VisionConfig, VisionNorm, VisionSpec,
};
use crate::processor::ResizeRule;

use crate::chat::{AnswerFormat, THINK_CLOSE, THINK_OPEN};

use super::{Family, Resolved};

/// `Glm4vConfig`'s token ids.
const TOP: Table = &[
    ("image_token_id", Int(151343)),
    ("video_token_id", Int(151344)),
    ("image_start_token_id", Int(151339)),
    ("image_end_token_id", Int(151340)),
];

/// `Glm4vTextConfig`'s defaults.
const TEXT: Table = &[
    ("vocab_size", Int(151552)),
    ("hidden_size", Int(4096)),
    ("intermediate_size", Int(13696)),
    ("num_hidden_layers", Int(40)),
    ("num_attention_heads", Int(32)),
    ("num_key_value_heads", Int(2)),
    ("hidden_act", Text("silu")),
    ("max_position_embeddings", Int(32768)),
    ("rms_norm_eps", Float(1e-5)),
];

/// `Glm4vVisionConfig`'s defaults.
const VISION: Table = &[
    ("depth", Int(24)),
    ("hidden_size", Int(1536)),
    ("hidden_act", Text("silu")),
    ("attention_bias", Bool(false)),
    ("num_heads", Int(12)),
    ("in_channels", Int(3)),
    ("image_size", Int(336)),
    ("patch_size", Int(14)),
    ("rms_norm_eps", Float(1e-5)),
    ("spatial_merge_size", Int(2)),
    ("temporal_patch_size", Int(2)),
    ("out_hidden_size", Int(4096)),
    ("intermediate_size", Int(13696)),
];

/// `Glm4vConfig`'s own top-level field this crate reads.
#[derive(Debug, Deserialize)]
struct TopFields {
    image_token_id: u32,
}

/// `Glm4vVisionConfig`'s fields.
#[derive(Debug, Deserialize)]
struct VisionFields {
    depth: usize,
    hidden_size: usize,
    hidden_act: String,
    attention_bias: bool,
    num_heads: usize,
    in_channels: usize,
    image_size: usize,
    patch_size: usize,
    rms_norm_eps: f64,
    spatial_merge_size: usize,
    temporal_patch_size: usize,
    out_hidden_size: usize,
    intermediate_size: usize,
    #[serde(default)]
    rope_parameters: Option<RopeParameters>,
}

/// Resolves the GLM-4 decoder and GLM-4.1V's tower.
fn resolve(f: &Fields) -> Result<Resolved, ConfigError> {
    let top: TopFields = f.top_as()?;
    let v: VisionFields = f.vision_as()?;
    let text = glm4_decoder(f)?;
    if v.patch_size == 0 || !v.image_size.is_multiple_of(v.patch_size) {
        return Err(ConfigError::Invalid(format!(
            "vision_config.image_size {} is not a multiple of patch_size {}",
            v.image_size, v.patch_size
        )));
    }
    let side = v.image_size / v.patch_size;
    let spec = VisionSpec {
        norm: VisionNorm::RmsNorm,
        // Glm4VisionMlp: gate/up/down, `out_hidden_size` wide.
        mlp: MlpNames::Gated,
        merger: MergerNames::LnQ,
        patch_bias: true,
        depth: v.depth,
        hidden_size: v.hidden_size,
        num_heads: v.num_heads,
        intermediate_size: v.out_hidden_size,
        hidden_act: v.hidden_act,
        out_hidden_size: v.out_hidden_size,
        in_channels: v.in_channels,
        patch_size: v.patch_size,
        temporal_patch_size: v.temporal_patch_size,
        spatial_merge_size: v.spatial_merge_size,
        rope_theta: v
            .rope_parameters
            .and_then(|r| r.rope_theta)
            .unwrap_or(10000.0),
        window_size: 0,
        fullatt_block_indexes: Vec::new(),
        num_position_embeddings: side * side,
        deepstack_visual_indexes: Vec::new(),
        qkv_bias: v.attention_bias,
        block_bias: false,
        norm_eps: v.rms_norm_eps,
        glm: Some(GlmVision {
            merger_intermediate_size: v.intermediate_size,
        }),
    };
    if spec.num_heads == 0 || !spec.hidden_size.is_multiple_of(spec.num_heads) {
        return Err(ConfigError::Invalid(format!(
            "vision_config.hidden_size {} over num_heads {} must divide",
            spec.hidden_size, spec.num_heads
        )));
    }
    if spec.out_hidden_size != text.hidden_size {
        return Err(ConfigError::Invalid(format!(
            "vision_config.out_hidden_size {} differs from text_config.hidden_size {}",
            spec.out_hidden_size, text.hidden_size
        )));
    }
    Ok(Resolved {
        text,
        vision: VisionConfig::Qwen(spec),
        image_token_id: top.image_token_id,
    })
}

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "glm4v",
    name: "GLM-4.1V",
    defaults: Defaults {
        top: &[TOP],
        text: &[TEXT],
        vision: &[VISION],
    },
    // GLM-4.1V-9B-Thinking's generation_config.json: eos [151329, 151336, 151338].
    stop_tokens: &["<|endoftext|>", "<|user|>", "<|observation|>"],
    think_open: THINK_OPEN,
    // GLM documents no early-stopping text: the budget closes the reasoning with its tag and
    // the model writes its `<answer>` after it.
    think_budget_stop: THINK_CLOSE,
    image_wrap: None,
    resize: ResizeRule::Glm,
    answer: AnswerFormat::GlmBox,
    resolve,
};
