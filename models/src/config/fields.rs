//! The fields of a `config.json` as every family writes them, after the family's defaults are
//! filled in: one set of typed fields for the decoder ([`TextFields`]), one for the vision
//! tower ([`VisionFields`]), the special token ids ([`VisionTokenIds`]). A family resolves them
//! into the specs the model is built from (`crate::families`).
//!
//! The class defaults of the keys a file may omit have one mechanism: [`Fallback`] tables of
//! a family (its transformers configuration classes' defaults), written into the file's own
//! object before the typed parse ([`Fields::parse`]); a key the file states is never
//! overwritten. The only serde defaults here are "absent" (`None`), the same for every family.
//! What transformers computes in code rather than declares on the class stays in the resolvers
//! as it does there: the rotary base when no block gives one, Qwen3.5's
//! `partial_rotary_factor` and `mrope_section` fallbacks.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::moe::MoeFields;
use super::rope::{normalize, RopeParameters};
use super::ConfigError;

/// A transformers class default of one `config.json` key, as a family declares it.
#[derive(Debug, Clone, Copy)]
pub enum Fallback {
    /// An integer (sizes, counts, token ids).
    Int(u64),
    /// A float (epsilons, ratios).
    Float(f64),
    /// A string (activation names).
    Text(&'static str),
    /// A list of integers (layer indexes).
    Ints(&'static [u64]),
    /// A switch.
    Bool(bool),
}

impl Fallback {
    fn to_json(self) -> Value {
        match self {
            Self::Int(v) => Value::from(v),
            Self::Float(v) => Value::from(v),
            Self::Text(v) => Value::from(v),
            Self::Ints(v) => Value::from(v.to_vec()),
            Self::Bool(v) => Value::from(v),
        }
    }
}

/// One configuration class's defaults: `(key, value)`.
pub type Table = &'static [(&'static str, Fallback)];

/// A family's defaults for the keys a saved `config.json` may omit: `top` for the top level
/// (token ids), `text` for the decoder's fields (in `text_config`, or at the top level of a
/// flat file), `vision` for `vision_config`. Each is a list of tables, the first holding a key
/// wins: a subclass's table before its base class's (`Qwen3VLMoeTextConfig`'s own defaults
/// before `Qwen3VLTextConfig`'s).
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    /// Top-level keys.
    pub top: &'static [Table],
    /// Decoder keys.
    pub text: &'static [Table],
    /// Vision-tower keys.
    pub vision: &'static [Table],
}

/// Special token ids of the image placeholder (top level of `config.json`; a family's
/// [`Defaults::top`] supplies those a file omits).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VisionTokenIds {
    /// The image placeholder (`<|image_pad|>`), one per merged image token.
    pub image_token_id: u32,
    /// The video placeholder (`<|video_pad|>`).
    pub video_token_id: u32,
    /// The token opening an image (`<|vision_start|>`).
    pub vision_start_token_id: u32,
    /// The token closing an image (`<|vision_end|>`).
    pub vision_end_token_id: u32,
}

/// Decoder fields (transformers' `*TextConfig` classes: every family's names, each read where
/// the family has it).
#[derive(Debug, Clone, Deserialize)]
pub struct TextFields {
    /// The decoder's own `model_type`, when the file nests a decoder of another kind
    /// (InternVL's `text_config`: `qwen2`, `qwen3`).
    #[serde(default)]
    pub model_type: Option<String>,
    /// Vocabulary size (rows of `embed_tokens` and `lm_head`).
    pub vocab_size: usize,
    /// Hidden size of the decoder.
    pub hidden_size: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA); `None` means `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head dimension, when the family states it (else `hidden_size / num_attention_heads`).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// MLP activation.
    pub hidden_act: String,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Bias on q/k/v/o (Qwen3 and later; Qwen2 always has q/k/v bias); absent or `null`: none.
    #[serde(default)]
    pub attention_bias: Option<bool>,
    /// Rotary base written next to the rotary block (older files).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Fraction of `head_dim` rotated, when written next to the rotary block.
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    /// The rotary block (`rope_parameters`; `rope_scaling` folded in by `normalize`).
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    /// Whether `lm_head` shares `embed_tokens`, when stated here.
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// Longest sequence the rotary embedding was trained for.
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<Value>,
    /// Gated DeltaNet: depthwise causal conv1d kernel size.
    #[serde(default)]
    pub linear_conv_kernel_dim: Option<usize>,
    /// Gated DeltaNet: key (and query) head dimension.
    #[serde(default)]
    pub linear_key_head_dim: Option<usize>,
    /// Gated DeltaNet: value head dimension.
    #[serde(default)]
    pub linear_value_head_dim: Option<usize>,
    /// Gated DeltaNet: key (and query) heads.
    #[serde(default)]
    pub linear_num_key_heads: Option<usize>,
    /// Gated DeltaNet: value heads.
    #[serde(default)]
    pub linear_num_value_heads: Option<usize>,
    /// Mixer of each layer (`linear_attention` / `full_attention`; legacy `mamba` /
    /// `attention`).
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// Period of full-attention layers when `layer_types` is absent.
    #[serde(default)]
    pub full_attention_interval: Option<usize>,
    /// Mixture-of-experts fields.
    #[serde(flatten)]
    pub moe: MoeFields,
}

/// Vision-tower fields (transformers' `*VisionConfig` classes).
#[derive(Debug, Clone, Deserialize)]
pub struct VisionFields {
    /// Vision blocks.
    pub depth: usize,
    /// Block width; in Qwen2-VL the merger's output width (its blocks are `embed_dim` wide).
    pub hidden_size: usize,
    /// Qwen2-VL: block width.
    #[serde(default)]
    pub embed_dim: Option<usize>,
    /// Merger output width (= text hidden size), when not `hidden_size` (Qwen2-VL).
    #[serde(default)]
    pub out_hidden_size: Option<usize>,
    /// MLP inner size, when stated (Qwen2-VL: `embed_dim · mlp_ratio`).
    #[serde(default)]
    pub intermediate_size: Option<usize>,
    /// Qwen2-VL: MLP inner size over block width.
    #[serde(default)]
    pub mlp_ratio: Option<f64>,
    /// MLP activation.
    pub hidden_act: String,
    /// Attention heads.
    pub num_heads: usize,
    /// Image channels (`in_chans` folded in by `normalize`).
    pub in_channels: usize,
    /// Spatial patch size in pixels.
    pub patch_size: usize,
    /// Patches merged per side by the merger.
    pub spatial_merge_size: usize,
    /// Frames per temporal patch.
    pub temporal_patch_size: usize,
    /// Qwen2.5-VL: attention window side in pixels.
    #[serde(default)]
    pub window_size: Option<usize>,
    /// Qwen2.5-VL: blocks with full (not windowed) attention.
    #[serde(default)]
    pub fullatt_block_indexes: Option<Vec<usize>>,
    /// Qwen3-VL: learned position embeddings (a square grid of `sqrt(n)` per side).
    #[serde(default)]
    pub num_position_embeddings: Option<usize>,
    /// Qwen3-VL: blocks whose output feeds a DeepStack merger.
    #[serde(default)]
    pub deepstack_visual_indexes: Option<Vec<usize>>,
    /// Rotary parameters of the 2D vision RoPE.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

impl VisionFields {
    /// Rotary base of the 2D vision RoPE: `rope_parameters.rope_theta`, else transformers'
    /// 10000 (`VisionRotaryEmbedding(dim, theta=10000.0)`).
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .unwrap_or(10000.0)
    }
}

/// Everything a family resolves: the decoder fields with its defaults applied (every family's
/// decoder is one of the shared stacks), the two top-level settings a flat file shares with its
/// decoder, and the top level and `vision_config` with its defaults applied, each parsed into
/// the family's own typed fields by the family ([`Self::top_as`], [`Self::vision_as`]: the
/// vision towers and their top-level keys differ in kind between families).
#[derive(Debug, Clone)]
pub struct Fields {
    /// Decoder fields (`text_config`, or the top level of a flat file).
    pub text: TextFields,
    /// Top-level `rope_theta` (the flat layout's rotary base).
    pub top_rope_theta: Option<f64>,
    /// Top-level `tie_word_embeddings` (wins over the decoder's own).
    pub tie_word_embeddings: Option<bool>,
    /// The top level, defaults filled in.
    top: Value,
    /// `vision_config`, defaults filled in.
    vision: Value,
}

#[derive(Deserialize)]
struct Top {
    vision_config: Map<String, Value>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    rope_theta: Option<f64>,
}

/// The typed parse of `value`, found at `scope` in the file (`""`: the top level); an error
/// names the field from the top of the file.
fn typed<T: DeserializeOwned>(value: Value, scope: &str) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let field = match (scope, inner.as_str()) {
            ("", ".") => "config.json".to_string(),
            (s, ".") => s.to_string(),
            ("", p) => p.to_string(),
            (s, p) => format!("{s}.{p}"),
        };
        ConfigError::Field {
            field,
            source: e.into_inner(),
        }
    })
}

/// Writes each default whose key `obj` lacks, the first table first (a key the file holds,
/// `null` included, is the file's: the typed parse decides).
fn fill(obj: &mut Map<String, Value>, tables: &[Table]) {
    for (key, v) in tables.iter().flat_map(|t| t.iter()) {
        obj.entry(*key).or_insert_with(|| v.to_json());
    }
}

impl Fields {
    /// Parses a `config.json` value: every spelling of the rotary block folded into one
    /// (`normalize`), `defaults` written where the file has no value, then the typed parse.
    ///
    /// Errors: [`ConfigError::Field`] naming a missing `vision_config` or a field of the wrong
    /// type; [`ConfigError::Invalid`] naming both places when two spellings of one setting
    /// disagree.
    pub fn parse(mut value: Value, defaults: &Defaults) -> Result<Self, ConfigError> {
        normalize(&mut value)?;
        let Value::Object(top) = &mut value else {
            return Err(ConfigError::Invalid("config.json is not an object".into()));
        };
        fill(top, defaults.top);
        // The nested text config, or the top level of a flat file.
        let (text, text_scope) = match top.get_mut("text_config") {
            Some(Value::Object(text)) => {
                fill(text, defaults.text);
                (Value::Object(text.clone()), "text_config")
            }
            None | Some(Value::Null) => {
                fill(top, defaults.text);
                (Value::Object(top.clone()), "")
            }
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "`text_config` = {other} is not an object"
                )))
            }
        };
        if let Some(Value::Object(vision)) = top.get_mut("vision_config") {
            fill(vision, defaults.vision);
        }
        let parsed: Top = typed(value.clone(), "")?;
        Ok(Self {
            text: typed(text, text_scope)?,
            top_rope_theta: parsed.rope_theta,
            tie_word_embeddings: parsed.tie_word_embeddings,
            top: value,
            vision: Value::Object(parsed.vision_config),
        })
    }

    /// The top level as a family's typed fields (its token ids, projector settings).
    ///
    /// Errors: [`ConfigError::Field`] naming a missing field or one of the wrong type.
    pub fn top_as<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        typed(self.top.clone(), "")
    }

    /// `vision_config` as a family's typed fields ([`VisionFields`] for the Qwen towers).
    ///
    /// Errors: [`ConfigError::Field`] naming a missing field or one of the wrong type.
    pub fn vision_as<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        typed(self.vision.clone(), "vision_config")
    }
}
