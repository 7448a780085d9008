//! InternVL (`internvl`; transformers `models/internvl/configuration_internvl.py`, the `-hf`
//! checkpoints of InternVL3 and InternVL3.5): InternViT over the tiles of the GotOcr2
//! processor, a pixel shuffle and the MLP projector (`crate::intern_vit`), on a Qwen2 or
//! Qwen3 decoder with plain 1-D RoPE (the decoder named by `text_config.model_type`).

use serde::Deserialize;
use serde_json::Value;

use crate::config::text::{qwen2_decoder, qwen3_decoder, Positions::Plain};
use crate::config::{
    ConfigError, Defaults, Fallback::*, Fields, InternVitSpec, Table, VisionConfig, VisionNorm,
};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::{Family, Resolved, QWEN_STOP_TOKENS};

/// `InternVLConfig`'s defaults. Not its `tie_word_embeddings = True`: transformers'
/// conversion script leaves it at that default in the published `-hf` files, and transformers
/// does not tie when the checkpoint holds its own `lm_head` (the 8B and larger do); so the
/// file's own value decides, else `text_config`'s, else the decoder's default (untied).
const TOP: Table = &[
    ("image_token_id", Int(151667)),
    ("downsample_ratio", Float(0.5)),
    ("projector_hidden_act", Text("gelu")),
    ("vision_feature_select_strategy", Text("default")),
];

/// The defaults `Qwen2Config` and `Qwen3Config` share (InternVL's `text_config` is one of
/// them, `qwen2` when the file names none), and Qwen3's `head_dim` (Qwen2 derives its own).
const TEXT: Table = &[
    ("vocab_size", Int(151936)),
    ("hidden_size", Int(4096)),
    ("intermediate_size", Int(22016)),
    ("num_hidden_layers", Int(32)),
    ("num_attention_heads", Int(32)),
    ("head_dim", Int(128)),
    ("hidden_act", Text("silu")),
    ("rms_norm_eps", Float(1e-6)),
];

/// `InternVLVisionConfig`'s defaults (InternViT-300M).
const VISION: Table = &[
    ("hidden_size", Int(1024)),
    ("num_hidden_layers", Int(24)),
    ("num_attention_heads", Int(16)),
    ("attention_bias", Bool(false)),
    ("use_qk_norm", Bool(false)),
    ("intermediate_size", Int(4096)),
    ("hidden_act", Text("gelu")),
    ("norm_type", Text("layer_norm")),
    ("layer_norm_eps", Float(1e-6)),
    ("image_size", Int(448)),
    ("patch_size", Int(14)),
    ("num_channels", Int(3)),
    ("use_absolute_position_embeddings", Bool(true)),
    ("use_mean_pooling", Bool(true)),
];

/// A size given as one side or as `[height, width]` (transformers writes either).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum Side {
    One(usize),
    Two([usize; 2]),
}

impl Side {
    /// The side of a square; `what` names the field in the error.
    fn square(self, what: &str) -> Result<usize, ConfigError> {
        match self {
            Self::One(s) => Ok(s),
            Self::Two([h, w]) if h == w => Ok(h),
            Self::Two(hw) => Err(ConfigError::Invalid(format!(
                "vision_config.{what} {hw:?} is not square; only square tiles are implemented"
            ))),
        }
    }
}

/// `InternVLConfig`'s own top-level fields.
#[derive(Debug, Deserialize)]
struct TopFields {
    image_token_id: u32,
    downsample_ratio: f64,
    projector_hidden_act: String,
    /// Absent: the class default, -1.
    #[serde(default)]
    vision_feature_layer: Option<Value>,
    vision_feature_select_strategy: String,
}

/// `InternVLVisionConfig`'s fields.
#[derive(Debug, Deserialize)]
struct VisionFields {
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    attention_bias: bool,
    use_qk_norm: bool,
    intermediate_size: usize,
    hidden_act: String,
    norm_type: String,
    layer_norm_eps: f64,
    image_size: Side,
    patch_size: Side,
    num_channels: usize,
    use_absolute_position_embeddings: bool,
    use_mean_pooling: bool,
}

/// The decoder of `text_config.model_type` with plain RoPE; the rotary base transformers'
/// `RotaryEmbeddingConfigMixin` gives a file that states none, 10000.
fn decoder(f: &Fields) -> Result<crate::config::TextSpec, ConfigError> {
    let mut text = match f.text.model_type.as_deref() {
        None | Some("qwen2") => qwen2_decoder(f, Plain)?,
        Some("qwen3") => qwen3_decoder(f, Plain)?,
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "text_config.model_type `{other}` is not implemented for internvl; supported: \
                 qwen2, qwen3"
            )))
        }
    };
    let t = &f.text;
    text.rope_theta = t
        .rope_parameters
        .as_ref()
        .and_then(|r| r.rope_theta)
        .or(t.rope_theta)
        .unwrap_or(10000.0);
    Ok(text)
}

/// Resolves the decoder, InternViT and the projector.
fn resolve(f: &Fields) -> Result<Resolved, ConfigError> {
    let top: TopFields = f.top_as()?;
    let v: VisionFields = f.vision_as()?;
    let text = decoder(f)?;
    match &top.vision_feature_layer {
        None => {}
        Some(Value::Number(n)) if n.as_i64() == Some(-1) => {}
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "vision_feature_layer {other} is not implemented; supported: -1 (the last layer)"
            )))
        }
    }
    if top.vision_feature_select_strategy != "default" {
        return Err(ConfigError::Invalid(format!(
            "vision_feature_select_strategy `{}` is not implemented; supported: default",
            top.vision_feature_select_strategy
        )));
    }
    let shuffle = (1.0 / top.downsample_ratio).round();
    if !(shuffle >= 1.0 && (shuffle * top.downsample_ratio - 1.0).abs() < 1e-9) {
        return Err(ConfigError::Invalid(format!(
            "downsample_ratio {} is not 1/k for a whole k",
            top.downsample_ratio
        )));
    }
    let norm = match v.norm_type.as_str() {
        "layer_norm" => VisionNorm::LayerNorm,
        "rms_norm" => VisionNorm::RmsNorm,
        other => {
            return Err(ConfigError::Invalid(format!(
                "vision_config.norm_type `{other}`; supported: layer_norm, rms_norm"
            )))
        }
    };
    let spec = InternVitSpec {
        num_layers: v.num_hidden_layers,
        hidden_size: v.hidden_size,
        num_heads: v.num_attention_heads,
        intermediate_size: v.intermediate_size,
        hidden_act: v.hidden_act,
        norm,
        norm_eps: v.layer_norm_eps,
        qk_norm: v.use_qk_norm,
        attention_bias: v.attention_bias,
        image_size: v.image_size.square("image_size")?,
        patch_size: v.patch_size.square("patch_size")?,
        in_channels: v.num_channels,
        absolute_positions: v.use_absolute_position_embeddings,
        final_norm: !v.use_mean_pooling,
        shuffle: shuffle as usize,
        projector_act: top.projector_hidden_act,
        out_hidden_size: text.hidden_size,
    };
    let side = spec.patches_per_side();
    if spec.num_heads == 0
        || !spec.hidden_size.is_multiple_of(spec.num_heads)
        || spec.patch_size == 0
        || !spec.image_size.is_multiple_of(spec.patch_size)
        || !side.is_multiple_of(spec.shuffle)
    {
        return Err(ConfigError::Invalid(format!(
            "vision_config.hidden_size {} over num_attention_heads {}, image_size {} over \
             patch_size {}, {side} patches per side over 1 / downsample_ratio = {}: each must \
             divide",
            spec.hidden_size, spec.num_heads, spec.image_size, spec.patch_size, spec.shuffle
        )));
    }
    Ok(Resolved {
        text,
        vision: VisionConfig::InternVit(spec),
        image_token_id: top.image_token_id,
    })
}

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "internvl",
    name: "InternVL",
    defaults: Defaults {
        top: &[TOP],
        text: &[TEXT],
        vision: &[VISION],
    },
    stop_tokens: QWEN_STOP_TOKENS,
    think_open: THINK_OPEN,
    think_budget_stop: super::QWEN_THINK_BUDGET_STOP,
    image_wrap: Some(("<img>", "</img>")),
    resize: ResizeRule::Qwen,
    answer: AnswerFormat::AfterThink,
    resolve,
};
