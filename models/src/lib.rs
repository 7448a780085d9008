//! VLM architectures on candle (the families of [`FAMILIES`]: Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
//! Qwen3.5 and their MoE variants, InternVL, GLM-4.1V), built for a batch engine.
//!
//! # Public API (what the engine calls)
//!
//! Load once:
//! - [`ModelConfig::from_dir`]`(dir)` → the family and its resolved specs.
//! - [`VlModel::load`]`(dir, dtype, &device)` → model (config, safetensors, vision + decoder);
//!   [`VlModel::new_kv_cache`] or [`KvCache::new`] with [`VlModel::text_spec`] sizes.
//! - [`Preprocessor::from_dir`]`(dir, &config)` → the family's image processor
//!   (`preprocessor_config.json`); [`ImageLimits`] guard.
//! - [`PromptBuilder::from_dir`]`(dir, config.image_token_id(), family.image_wrap)`.
//!
//! Per request:
//! - [`Preprocessor::preprocess`]`(bytes)` → [`ProcessedImage`] (`pixel_values`, `grid_thw`).
//! - [`PromptBuilder::encode`]`(&[ChatMessage], RenderOptions, &[image tokens])` → prompt ids
//!   with image placeholders expanded ([`Preprocessor::num_image_tokens`]).
//! - M-RoPE families: [`get_rope_index`]`(ids, grids, image_token_id, merge)` → [`RopeIndex`]
//!   (positions `[3][len]` and `rope_delta`), decode positions via [`decode_position`]; a plain
//!   RoPE decoder ([`TextSpec::position_rows`] 1) takes `0..len`.
//! - [`VlModel::encode_images`]`(&VisionInputs)` → [`ImageEmbeds`] (attention within each image
//!   or tile).
//!
//! Per step (prefill chunks and decodes mixed in one ragged batch):
//! - [`VlModel::forward`]`(&StepInput { input_ids, images, image_rows }, &BatchMeta, &mut
//!   KvCache)` → logits `[logits_indices.len(), vocab]` f32. The model keeps no per-call state.
//!
//! Modules: [`families`] (one file per `model_type`, the registry [`FAMILIES`], and
//! [`ModelConfig`]), [`config`] (config.json's fields and the decoders and vision towers the
//! families share), [`processor`] (Qwen-VL's, + Pillow bicubic in `resample`), [`tiles`]
//! (InternVL's GotOcr2 tiles), [`preprocessor`] (the two behind one type), [`chat`],
//! [`rope_index`], [`layers`] (shared norms/MLP/rotary/attention), [`vision`] (the Qwen-VL
//! towers, GLM-4.1V's with [`vision_glm`]), [`intern_vit`] (InternViT, pixel shuffle, projector), [`text`] (the decoder, a
//! mixer per layer), [`gated_delta_net`] (Qwen3.5's linear-attention mixer), [`model`],
//! [`batch`] (the engine interface types), [`probe`] (batch invariance of a whole model, for
//! `doctor` and the tests).

pub mod batch;
pub mod chat;
pub mod config;
pub mod decode;
pub mod families;
pub mod gated_delta_net;
pub mod image_limits;
pub mod intern_vit;
pub mod layers;
pub mod load;
pub mod model;
pub mod moe;
pub mod preprocessor;
pub mod probe;
pub mod processor;
mod resample;
pub mod rope_index;
pub mod text;
pub mod tiles;
pub mod vision;
pub mod vision_glm;

pub use batch::{BatchMeta, KvCache, StateLayout};
pub use chat::{
    AnswerFormat, ChatError, ChatMessage, ChatTemplate, Content, ContentPart, PromptBuilder,
    RenderOptions,
};
pub use config::{
    ConfigError, InternVitSpec, LayerKind, LinearAttentionSpec, MergerNames, MlpNames, MoeSpec,
    TextSpec, VisionConfig, VisionNorm, VisionSpec,
};
pub use decode::{decode_rgb, DecodeError, RgbImage};
pub use families::{listing, supported_model_types, Family, ModelConfig, FAMILIES};
pub use image_limits::{ImageLimits, TooLarge};
pub use load::LoadError;
pub use model::{StepInput, VlModel};
pub use preprocessor::Preprocessor;
pub use processor::{
    glm_smart_resize, smart_resize, ImageGrid, ImageProcessor, PixelBounds, ProcessedImage,
    ProcessorError, ResizeRule, VisionInputs,
};
pub use rope_index::{decode_position, get_rope_index, RopeIndex, RopeIndexError};
pub use tiles::{tile_grid, TileProcessor};
pub use verisample_kernels::AttentionPath;
pub use vision::{vision_forward_bytes, ImageEmbeds};
