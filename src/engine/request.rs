//! What goes into the engine (a [`Request`]), what the input pipeline makes of it (a
//! [`PreparedInput`]) and what comes out (a [`Completion`]).

use std::sync::Arc;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use verisample_models::{ImageGrid, RgbImage};

/// An image attached to a request, encoded or already decoded, with the SHA-256 of its
/// encoded file. Either way it is decoded once: [`ImageContent::Encoded`] by the input
/// processor (on its worker threads), [`ImageContent::Decoded`] by whoever built it (the
/// pipeline's input check, `src/pipeline/input_check.rs`, within the one `ImageLimits`).
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// SHA-256 of the encoded file. Keys the vision-embedding cache (one vision forward per
    /// distinct image) and the prefix cache.
    pub sha256: [u8; 32],
    /// The image.
    pub content: ImageContent,
}

/// The pixels of an [`ImageInput`]; shared, so that several questions about one image copy
/// neither the file nor its pixels.
#[derive(Debug, Clone)]
pub enum ImageContent {
    /// The encoded file (PNG, JPEG, …), unchanged: the input processor decodes it.
    Encoded(Arc<[u8]>),
    /// The file decoded to 8-bit RGB (`verisample_models::decode_rgb`): the input processor
    /// resizes these pixels as they are.
    Decoded(Arc<RgbImage>),
}

impl ImageContent {
    /// Bytes of decoded pixels held (`height · width · 3`), 0 for an encoded file.
    pub fn pixel_bytes(&self) -> usize {
        match self {
            ImageContent::Encoded(_) => 0,
            ImageContent::Decoded(rgb) => rgb.data.len(),
        }
    }
}

impl ImageInput {
    /// Wrap encoded image bytes, hashing them (the processor decodes them).
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Self {
        let bytes = bytes.into();
        let sha256 = Sha256::digest(&bytes).into();
        Self {
            sha256,
            content: ImageContent::Encoded(bytes),
        }
    }

    /// An image decoded already, `sha256` the SHA-256 of its encoded file.
    pub fn decoded(rgb: Arc<RgbImage>, sha256: [u8; 32]) -> Self {
        Self {
            sha256,
            content: ImageContent::Decoded(rgb),
        }
    }

    /// The encoded file, `None` for a decoded image.
    pub fn encoded(&self) -> Option<&[u8]> {
        match &self.content {
            ImageContent::Encoded(bytes) => Some(bytes),
            ImageContent::Decoded(_) => None,
        }
    }
}

/// One generation request: a chat turn, text-only (the judge) or about one image, with its
/// own generation options (`None` / empty: the engine's).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Caller's id, returned in the [`Completion`].
    pub id: u64,
    /// Optional system message (e.g. the judge instruction).
    pub system: Option<String>,
    /// Optional image, placed before the text in the user turn.
    pub image: Option<ImageInput>,
    /// User text, byte-identical to what the model receives inside the chat template.
    pub text: String,
    /// Per-request generation limit; `None` takes the engine's `max_new_tokens`.
    pub max_new_tokens: Option<usize>,
    /// The chat template's thinking mode (`enable_thinking`) for this request; `None` leaves
    /// it to the template.
    pub enable_thinking: Option<bool>,
    /// Sample at a temperature from this stream ([`super::sampling`]); `None`: greedy.
    pub sampling: Option<super::sampling::SampleStream>,
    /// Token ids that end this request besides the model's end-of-sequence ids: generated, one
    /// is kept as the last token and the request finishes with `FinishReason::Stop`.
    pub stop_token_ids: Vec<u32>,
    /// End the reasoning after this many tokens with the family's early-stopping text
    /// ([`super::think_budget`]); `None`: no budget. A processor without
    /// [`super::InputProcessor::think_tokens`] fails the request.
    pub think_budget: Option<usize>,
}

/// One image of a prepared prompt: preprocessed pixels and where its placeholder tokens are.
#[derive(Debug, Clone)]
pub struct PreparedImage {
    /// SHA-256 of the encoded image.
    pub sha256: [u8; 32],
    /// Patches `[n_patches, channels · temporal_patch · patch · patch]`, f32, on the host.
    pub pixel_values: Tensor,
    /// What the vision tower needs beside the pixels (the patch grid), carried to
    /// [`super::EngineModel::encode_images`] unread.
    pub grid: ImageGrid,
    /// Index of its first image-pad token in `PreparedInput::token_ids`.
    pub start: usize,
    /// Number of image-pad tokens (`t · h · w / merge²`), equal to the vision encoder's
    /// output rows for this image.
    pub num_tokens: usize,
}

/// A request after the input pipeline: chat template applied, tokenized, image preprocessed,
/// position ids computed.
#[derive(Debug, Clone)]
pub struct PreparedInput {
    /// Prompt token ids, image placeholders expanded.
    pub token_ids: Vec<u32>,
    /// Position ids of the prompt tokens, `[rows][token_ids.len()]`: as many rows as the
    /// model's rotary embedding has axes ([`super::EngineModel::position_rows`]: 3, `(t, h,
    /// w)`, for M-RoPE; 1 for 1-D RoPE). The engine only carries them to the model.
    pub positions: Vec<Vec<u32>>,
    /// Position id of the first generated token (M-RoPE: `max(positions) + 1`); generated
    /// token `k` sits at `next_position + k` in every row.
    pub next_position: u32,
    /// The prompt's images, in token order.
    pub images: Vec<PreparedImage>,
    /// The chat template ended the prompt with an open `<think>` (Qwen3 thinking templates
    /// pre-fill it, so the generated text starts inside the reasoning and holds only the
    /// closing tag).
    pub prefilled_think: bool,
}

/// Why generation of a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// An end-of-sequence token was generated (it is the last of `token_ids`).
    Stop,
    /// `max_new_tokens` were generated without an end-of-sequence token (or, rarely, the
    /// sequence grew to fill the whole KV cache pool): `finish_reason: length`, as in the
    /// pipeline's [`crate::route::FinishReason::Length`].
    Length,
    /// The request could not be run (bad image, prompt larger than the KV cache, a model that
    /// cannot take a generated image placeholder back as text generated one, …);
    /// `Completion::error` says why.
    Error,
}

/// The result of one request, handed to the caller as soon as it finishes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The request's id.
    pub id: u64,
    /// Generated token ids, including the final end-of-sequence token when `Stop`.
    pub token_ids: Vec<u32>,
    /// `token_ids` decoded, special tokens skipped.
    pub text: String,
    /// Prompt length in tokens (0 when the request failed before tokenization).
    pub prompt_tokens: usize,
    /// `token_ids.len()`.
    pub generated_tokens: usize,
    /// Prompt tokens served from the prefix cache at the last admission.
    pub cached_prompt_tokens: usize,
    /// Why generation ended.
    pub finish_reason: FinishReason,
    /// The error message when `finish_reason` is `Error`.
    pub error: Option<String>,
    /// The outcome came from this engine's resource limits, not from the request: a prompt
    /// larger than the whole KV cache pool (an error), or a generation whose context filled
    /// the whole pool (cut at `Length`). With a larger `--kv-cache-gib` it may run further.
    #[serde(default)]
    pub exceeds_capacity: bool,
    /// The prompt ended with an open `<think>` ([`PreparedInput::prefilled_think`]; false
    /// when the request failed before its prompt was rendered).
    #[serde(default)]
    pub prefilled_think: bool,
    /// The thinking budget was reached and the reasoning ended by the early-stopping text
    /// ([`Request::think_budget`]); absent from the serialized form when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub think_budget_hit: bool,
}

impl Completion {
    /// A failed request.
    pub fn failed(id: u64, prompt_tokens: usize, message: impl Into<String>) -> Self {
        Self {
            id,
            token_ids: vec![],
            text: String::new(),
            prompt_tokens,
            generated_tokens: 0,
            cached_prompt_tokens: 0,
            finish_reason: FinishReason::Error,
            error: Some(message.into()),
            exceeds_capacity: false,
            prefilled_think: false,
            think_budget_hit: false,
        }
    }

    /// A request this engine cannot run within its KV cache pool ([`Self::exceeds_capacity`]).
    pub fn exceeds_capacity(id: u64, prompt_tokens: usize, message: impl Into<String>) -> Self {
        Self {
            exceeds_capacity: true,
            ..Self::failed(id, prompt_tokens, message)
        }
    }
}
