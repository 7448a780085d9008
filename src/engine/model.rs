//! What the engine needs from a model: a step forward over a flattened ragged batch with the
//! paged KV cache, a batched vision encoder, and an input processor (chat template,
//! tokenizer, image preprocessing) that runs on worker threads.
//!
//! The models crate's architectures implement these traits; tests drive the engine with a
//! small arithmetic model through the same traits.

use candle_core::{DType, Device, Tensor};
use verisample_models::batch::{BatchMeta, KvCache, StateLayout};
use verisample_models::{ChatError, ImageEmbeds, ImageGrid, ProcessorError, RopeIndexError};

use super::request::{PreparedInput, Request};

/// What the model caches, for sizing and allocating the pools: KV blocks for its attention
/// layers and, for linear-attention layers, a fixed-size recurrent state per running sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    /// Decoder layers with a KV cache (attention layers).
    pub num_layers: usize,
    /// Key/value heads per layer (GQA).
    pub n_kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Cache dtype (the model's activation dtype).
    pub dtype: DType,
    /// Recurrent state of the linear-attention layers, one slot per running sequence (`None`:
    /// no such layers).
    pub states: Option<StateLayout>,
}

/// Vision embeddings of the image-placeholder rows of a flattened batch.
///
/// The rows are given explicitly rather than found by comparing `input_ids` with the image
/// token id: a generated token that happens to be the image-pad id (possible with random or
/// small models) is an ordinary text token and must keep its token embedding.
#[derive(Debug, Clone)]
pub struct StepImages {
    /// Embeddings (and DeepStack features) `[rows.len(), hidden]`, on the model's device.
    pub embeds: ImageEmbeds,
    /// Index of each embedding's row in the flattened batch, ascending.
    pub rows: Vec<usize>,
}

/// A decoder (with its vision tower) the engine can step. `Sync`: the engine runs each forward
/// on a worker of rayon's global pool (`step.rs`, `on_compute_pool`).
pub trait EngineModel: Sync {
    /// The device the model's weights and the KV cache live on.
    fn device(&self) -> &Device;

    /// Layout of the KV cache this model reads and writes.
    fn kv_layout(&self) -> KvLayout;

    /// Rows of position ids per token the model takes ([`BatchMeta::positions`]
    /// `[rows, total_tokens]`): 3 for M-RoPE's `(t, h, w)`, 1 for 1-D RoPE.
    fn position_rows(&self) -> usize;

    /// Longest prompt in tokens the model accepts (`max_position_embeddings` of its text
    /// config); `None` when unknown (no limit is checked then).
    fn max_context(&self) -> Option<usize> {
        None
    }

    /// Vision encoder over a batch of images: `pixel_values` `[sum n_patches, patch_dim]`
    /// (images concatenated in order, on the model's device) and each image's
    /// [`ImageGrid`] as its processor prepared it.
    /// Returns the merged embeddings `[sum num_tokens, hidden]` (and DeepStack features),
    /// images in order.
    ///
    /// Errors: candle errors (shape, device, out of memory).
    fn encode_images(
        &self,
        pixel_values: &Tensor,
        grids: &[ImageGrid],
    ) -> candle_core::Result<ImageEmbeds>;

    /// Bytes one vision-encoder pass over `patches` patches (one image or a batch) needs
    /// beyond the weights, its input pixel values included: an estimate the engine holds to
    /// [`super::EngineConfig::vision_memory`]. Default: `None`, unknown (nothing is refused).
    fn vision_pass_bytes(&self, _patches: usize) -> Option<u64> {
        None
    }

    /// Token ids a model cannot take back as text once generated (a model that finds its
    /// image rows by token id rather than by [`StepImages::rows`]): a sequence that generates
    /// one ends with `FinishReason::Error`. Default: none (the models crate's `VlModel` takes
    /// the rows it is given, so a generated placeholder is text, as in transformers).
    fn placeholder_token_ids(&self) -> Vec<u32> {
        Vec::new()
    }

    /// One step over a flattened batch: `input_ids` (`total_tokens` ids), the vision
    /// embeddings that replace the token embeddings of some rows (image placeholders), and the
    /// batch layout. Writes the new tokens' K/V into `cache` at `meta.slot_mapping` and
    /// returns logits `[meta.logits_indices.len(), vocab]`.
    ///
    /// Errors: candle errors.
    fn forward(
        &self,
        input_ids: &[u32],
        images: Option<&StepImages>,
        meta: &BatchMeta,
        cache: &mut KvCache,
    ) -> candle_core::Result<Tensor>;
}

/// Why an [`InputProcessor`] could not prepare a request or decode its tokens. Per request:
/// the request completes with `FinishReason::Error` and this error's message.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The image could not be decoded or preprocessed (format, size limits, aspect ratio).
    #[error("image: {0}")]
    Image(#[from] ProcessorError),
    /// The chat template or the tokenizer failed on the prompt.
    #[error("prompt: {0}")]
    Prompt(#[source] ChatError),
    /// The prompt's image-pad runs and the images' `grid_thw` disagree.
    #[error("M-RoPE index: {0}")]
    RopeIndex(#[from] RopeIndexError),
    /// The rendered prompt has an image but no image-pad token.
    #[error("no image-pad token in the prompt")]
    NoImagePad,
    /// The preprocessed pixels could not be put into a tensor.
    #[error("pixel values: {0}")]
    PixelValues(#[from] candle_core::Error),
    /// The tokenizer could not decode generated tokens.
    #[error("{0}")]
    Decode(#[source] ChatError),
    /// The processor panicked on this request (caught by the input pipeline).
    #[error("input processor panicked")]
    Panicked,
    /// The processor renders no text prompt (it has no chat template).
    #[error("this input processor has no chat template")]
    NoTemplate,
    /// A processor's own message, verbatim (processors outside the models crate, such as the
    /// tests' arithmetic model).
    #[error("{0}")]
    Other(String),
}

/// Chat template, tokenizer and image preprocessing of a model. Called from the input
/// pipeline's worker threads, hence `Send + Sync`.
pub trait InputProcessor: Send + Sync {
    /// Turn a request into prompt tokens, position ids (M-RoPE rows, or one plain row) and
    /// preprocessed images.
    ///
    /// Errors: [`InputError`] (undecodable image, template error, …); the request then
    /// completes with `FinishReason::Error`.
    fn prepare(&self, request: &Request) -> Result<PreparedInput, InputError>;

    /// The request's prompt as the chat template renders it (the request's thinking mode, the
    /// generation prompt appended), before tokenization and image-pad expansion: what
    /// [`InputProcessor::prepare`] tokenizes.
    ///
    /// Errors: [`InputError::Prompt`] from the template; default: [`InputError::NoTemplate`].
    fn render_prompt(&self, _request: &Request) -> Result<String, InputError> {
        Err(InputError::NoTemplate)
    }

    /// Decode generated tokens to text, special tokens skipped.
    ///
    /// Errors: [`InputError::Decode`], from the tokenizer.
    fn decode(&self, tokens: &[u32]) -> Result<String, InputError>;

    /// Patches the vision encoder gets for an image of `width × height` pixels, resized
    /// within the processor's pixel bounds or, when given, with at most `max_pixels` pixels.
    /// Default: `None` (no images, or a size the processor refuses: `prepare` then fails
    /// naming why).
    fn image_patches(
        &self,
        _width: u32,
        _height: u32,
        _max_pixels: Option<usize>,
    ) -> Option<usize> {
        None
    }

    /// The processor's `(min_pixels, max_pixels)` resize bounds. Default: `None` (no images).
    fn pixel_bounds(&self) -> Option<(usize, usize)> {
        None
    }

    /// Token ids that end generation (from `generation_config.json` `eos_token_id` and the
    /// family's turn-ending tokens in the tokenizer).
    fn eos_token_ids(&self) -> &[u32];

    /// The reasoning tags and early-stopping text a thinking budget uses
    /// ([`super::think_budget`]). Default: `None` (a request with a budget fails).
    fn think_tokens(&self) -> Option<&super::think_budget::ThinkTokens> {
        None
    }

    /// Where the model's family writes its final answer after the reasoning. Default: the
    /// text after the reasoning.
    fn answer_format(&self) -> verisample_models::AnswerFormat {
        verisample_models::AnswerFormat::AfterThink
    }
}
