//! The models crate's [`VlModel`] (every family of `verisample_models::FAMILIES`) behind the
//! engine traits, and [`VlInputs`]: its chat template, tokenizer, image processor and position
//! index (M-RoPE, or plain 1-D positions) as the engine's input processor.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use verisample_models::batch::{attention_layers, BatchMeta, KvCache, StateLayout};
use verisample_models::{
    decode_position, get_rope_index, AnswerFormat, AttentionPath, ChatMessage, ImageGrid,
    PixelBounds, Preprocessor, PromptBuilder, RenderOptions, StepInput, VisionConfig, VisionInputs,
    VlModel,
};

use super::generation::{GenerationConfig, GenerationConfigError};
use super::model::{EngineModel, InputError, InputProcessor, KvLayout, StepImages};
use super::request::{ImageContent, PreparedImage, PreparedInput, Request};
use super::think_budget::ThinkTokens;
use super::{Engine, EngineConfig, EngineError};

/// Errors loading a checkpoint for the engine.
#[derive(Debug, thiserror::Error)]
pub enum VlLoadError {
    /// Weights or `config.json`.
    #[error(transparent)]
    Model(#[from] verisample_models::LoadError),
    /// `preprocessor_config.json`.
    #[error(transparent)]
    Processor(#[from] verisample_models::ProcessorError),
    /// Tokenizer or chat template.
    #[error(transparent)]
    Chat(#[from] verisample_models::ChatError),
    /// `generation_config.json` is invalid or asks for a setting not implemented.
    #[error(transparent)]
    GenerationConfig(#[from] GenerationConfigError),
    /// The engine could not start.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl EngineModel for VlModel {
    fn device(&self) -> &Device {
        VlModel::device(self)
    }

    fn kv_layout(&self) -> KvLayout {
        let spec = self.text_spec();
        KvLayout {
            num_layers: attention_layers(spec),
            n_kv_heads: spec.num_kv_heads,
            head_dim: spec.head_dim,
            dtype: self.dtype(),
            states: StateLayout::of(spec),
        }
    }

    fn max_context(&self) -> Option<usize> {
        self.text_spec().max_position_embeddings
    }

    fn position_rows(&self) -> usize {
        self.text_spec().position_rows
    }

    fn encode_images(
        &self,
        pixel_values: &Tensor,
        grids: &[ImageGrid],
    ) -> candle_core::Result<verisample_models::ImageEmbeds> {
        VlModel::encode_images(
            self,
            &VisionInputs {
                pixel_values: pixel_values.clone(),
                grid_thw: grids.iter().map(|g| g.thw).collect(),
            },
        )
    }

    /// [`verisample_models::vision_forward_bytes`] with the rayon pool's workers, plus the f32
    /// pixel values twice (the prepared image, held until encoded, and the batch's
    /// concatenation); `None` (unknown: nothing refused) for InternViT, whose estimate is not
    /// written yet.
    fn vision_pass_bytes(&self, patches: usize) -> Option<u64> {
        let VisionConfig::Qwen(spec) = self.vision_spec() else {
            return None;
        };
        let patch_dim = self.vision_spec().patch_dim();
        let forward = verisample_models::vision_forward_bytes(
            spec,
            patches,
            self.dtype(),
            rayon::current_num_threads(),
        );
        Some(forward + 2 * (patches * patch_dim * 4) as u64)
    }

    fn forward(
        &self,
        input_ids: &[u32],
        images: Option<&StepImages>,
        meta: &BatchMeta,
        cache: &mut KvCache,
    ) -> candle_core::Result<Tensor> {
        // The image rows are the engine's: a placeholder id the model generated stays text.
        let rows: Option<Vec<u32>> = images.map(|i| i.rows.iter().map(|&r| r as u32).collect());
        VlModel::forward(
            self,
            &StepInput {
                input_ids,
                images: images.map(|i| &i.embeds),
                image_rows: Some(rows.as_deref().unwrap_or(&[])),
            },
            meta,
            cache,
        )
    }
}

/// Prompt tokens decoded to learn whether a prompt ends with an open `<think>`: the tag and
/// the newline(s) a template puts after it.
const PREFILL_TAIL_TOKENS: usize = 4;

/// Chat template + tokenizer + image processor + position index of a checkpoint.
#[derive(Debug)]
pub struct VlInputs {
    images: Preprocessor,
    prompts: PromptBuilder,
    image_token_id: u32,
    /// Rows of position ids the decoder reads (3: M-RoPE; 1: plain RoPE).
    position_rows: usize,
    eos: Vec<u32>,
    /// The family's opening reasoning tag.
    think_open: &'static str,
    /// Where the family writes its final answer.
    answer: AnswerFormat,
    /// The reasoning tags and early-stopping text of a thinking budget, when the tokenizer
    /// has the closing tag as one token.
    think: Option<ThinkTokens>,
}

impl VlInputs {
    /// Load the tokenizer and chat template of the checkpoint in `dir` for `model` (its image
    /// token id) next to its image processor `images`; each request's thinking mode goes to the
    /// chat template as `enable_thinking` (contract §4 "reasoning enabled"; `None`: the
    /// template's own default). Generation ends on any of:
    /// `generation.eos_token_ids` (from `generation_config.json`), `config.json`'s
    /// `eos_token_id`, and the family's turn-ending tokens (`Family::stop_tokens`; Qwen:
    /// `<|im_end|>` and `<|endoftext|>`) when the tokenizer has them.
    ///
    /// Errors: [`VlLoadError`] naming the file at fault.
    pub fn from_dir(
        dir: &Path,
        model: &VlModel,
        images: Preprocessor,
        generation: &GenerationConfig,
    ) -> Result<Self, VlLoadError> {
        let image_token_id = model.image_token_id();
        let family = model.family();
        let prompts = PromptBuilder::from_dir(dir, image_token_id, family.image_wrap)?;
        let mut eos: Vec<u32> = family
            .stop_tokens
            .iter()
            .filter_map(|t| prompts.token_id(t))
            .collect();
        eos.extend(&generation.eos_token_ids);
        eos.extend(&model.text_spec().eos_token_ids);
        eos.sort_unstable();
        eos.dedup();
        let think = match prompts.token_id(verisample_models::chat::THINK_CLOSE) {
            Some(close) => {
                let stop = prompts.encode_text(family.think_budget_stop)?;
                stop.contains(&close).then(|| ThinkTokens {
                    open: prompts.token_id(family.think_open),
                    close,
                    stop,
                })
            }
            None => None,
        };
        Ok(Self {
            think,
            images,
            prompts,
            image_token_id,
            position_rows: model.text_spec().position_rows,
            eos,
            think_open: family.think_open,
            answer: family.answer,
        })
    }

    /// The tokenizer and chat template.
    pub fn prompts(&self) -> &PromptBuilder {
        &self.prompts
    }

    /// The image processor (the checkpoint's, with the run's pixel bounds applied).
    pub fn images(&self) -> &Preprocessor {
        &self.images
    }
}

impl VlInputs {
    /// The chat turn of `req`: its system message, then the user turn (the image first).
    fn messages(req: &Request) -> Vec<ChatMessage> {
        let mut messages = Vec::with_capacity(2);
        if let Some(s) = &req.system {
            messages.push(ChatMessage::text("system", s));
        }
        messages.push(match &req.image {
            Some(_) => ChatMessage::user_image_question(&req.text),
            None => ChatMessage::text("user", &req.text),
        });
        messages
    }

    /// The template switches of `req`: a generation prompt, its thinking mode.
    fn render_options(req: &Request) -> RenderOptions {
        RenderOptions {
            add_generation_prompt: true,
            enable_thinking: req.enable_thinking,
        }
    }

    /// Whether the prompt `ids` ends with an open `<think>` (whitespace after it aside): the
    /// template pre-filled it, so the generated text starts inside the reasoning.
    ///
    /// Errors: [`InputError::Decode`] from the tokenizer.
    fn ends_in_think(&self, ids: &[u32]) -> Result<bool, InputError> {
        let tail = &ids[ids.len().saturating_sub(PREFILL_TAIL_TOKENS)..];
        let text = self
            .prompts
            .decode(tail, false)
            .map_err(InputError::Decode)?;
        Ok(text.trim_end().ends_with(self.think_open))
    }
}

impl InputProcessor for VlInputs {
    fn prepare(&self, req: &Request) -> Result<PreparedInput, InputError> {
        let image = match &req.image {
            Some(img) => Some((
                img.sha256,
                match &img.content {
                    ImageContent::Encoded(bytes) => self.images.preprocess(bytes)?,
                    ImageContent::Decoded(rgb) => self.images.preprocess_rgb(rgb)?,
                },
            )),
            None => None,
        };
        let grids: Vec<[usize; 3]> = image.iter().map(|(_, p)| p.grid_thw).collect();
        let tokens: Vec<usize> = grids
            .iter()
            .map(|&g| self.images.num_image_tokens(g))
            .collect();
        let ids = self
            .prompts
            .encode(&Self::messages(req), Self::render_options(req), &tokens)
            .map_err(InputError::Prompt)?;
        let (positions, next_position) = match self.images.merge_size() {
            Some(merge) if self.position_rows == verisample_models::rope_index::MROPE_ROWS => {
                let rope = get_rope_index(&ids, &grids, self.image_token_id, merge)?;
                (
                    rope.positions.to_vec(),
                    decode_position(ids.len(), rope.rope_delta),
                )
            }
            _ => (vec![(0..ids.len() as u32).collect()], ids.len() as u32),
        };
        let mut images = Vec::new();
        if let Some((sha256, p)) = image {
            let start = ids
                .iter()
                .position(|&x| x == self.image_token_id)
                .ok_or(InputError::NoImagePad)?;
            let n_patches = p.pixel_values.len() / p.patch_dim.max(1);
            images.push(PreparedImage {
                sha256,
                pixel_values: Tensor::from_vec(
                    p.pixel_values,
                    (n_patches, p.patch_dim),
                    &Device::Cpu,
                )?,
                grid: ImageGrid { thw: p.grid_thw },
                start,
                num_tokens: self.images.num_image_tokens(p.grid_thw),
            });
        }
        let prefilled_think = self.ends_in_think(&ids)?;
        Ok(PreparedInput {
            prefilled_think,
            token_ids: ids,
            positions,
            next_position,
            images,
        })
    }

    fn render_prompt(&self, req: &Request) -> Result<String, InputError> {
        self.prompts
            .template()
            .render(&Self::messages(req), Self::render_options(req))
            .map_err(InputError::Prompt)
    }

    fn decode(&self, tokens: &[u32]) -> Result<String, InputError> {
        self.prompts
            .decode(tokens, true)
            .map_err(InputError::Decode)
    }

    /// `smart_resize` of `height × width` (factor `patch · merge`), or the tiles, in patches.
    fn image_patches(&self, width: u32, height: u32, max_pixels: Option<usize>) -> Option<usize> {
        self.images.image_patches(width, height, max_pixels)
    }

    fn pixel_bounds(&self) -> Option<(usize, usize)> {
        self.images.pixel_bounds()
    }

    fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }

    fn think_tokens(&self) -> Option<&ThinkTokens> {
        self.think.as_ref()
    }

    fn answer_format(&self) -> AnswerFormat {
        self.answer
    }
}

/// The engine [`load_engine`] returns: one model type and one input processor for every family
/// of the registry (`verisample_models::FAMILIES`), so its callers name no family.
pub type LoadedEngine = Engine<VlModel, VlInputs>;

/// Load a checkpoint directory into a ready engine: weights in `dtype` on `device` with attention
/// (and the projections and recurrent kernels) on `path` ([`VlModel::load_on_path`]), its
/// processor (with `pixels` over the checkpoint's pixel bounds), tokenizer and chat template,
/// and a KV cache pool sized by `cfg`. Greedy decoding follows `generation`, the checkpoint's
/// `generation_config.json` as resolved once by the caller ([`GenerationConfig::resolve`]): its
/// repetition penalty replaces `cfg.repetition_penalty`, its end-of-sequence ids join the
/// model's.
///
/// Errors: [`VlLoadError`]; a bad `cfg` or `pixels` before any weight is read.
pub fn load_engine(
    dir: &Path,
    dtype: DType,
    (device, path): (&Device, AttentionPath),
    mut cfg: EngineConfig,
    generation: &GenerationConfig,
    pixels: PixelBounds,
) -> Result<LoadedEngine, VlLoadError> {
    cfg.validate()?;
    // config.json first: what is wrong with it is named before any other file is read.
    let config = verisample_models::ModelConfig::from_dir(dir)?;
    let images = Preprocessor::from_dir(dir, &config)?.with_pixel_bounds(pixels)?;
    cfg.repetition_penalty = Some(generation.repetition_penalty);
    check_weights_fit(dir, dtype, device)?;
    let model = VlModel::load_config_on_path(dir, config, dtype, device, path)?;
    let inputs = VlInputs::from_dir(dir, &model, images, generation)?;
    Ok(Engine::new(model, inputs, cfg)?)
}

/// Bytes the checkpoint's weights take once converted to `dtype`, from the safetensors
/// headers (8-byte little-endian header length, then JSON `{name: {dtype, shape, …}}`).
///
/// Errors: [`VlLoadError::Model`] when a file or header cannot be read.
pub fn weights_bytes(dir: &Path, dtype: DType) -> Result<u64, VlLoadError> {
    use std::io::Read;
    let bad = |path: &Path, msg: String| {
        VlLoadError::Model(verisample_models::LoadError::Weights(format!(
            "{}: {msg}",
            path.display()
        )))
    };
    let mut total = 0u64;
    for path in verisample_models::model::safetensors_files(dir)? {
        let mut f = std::fs::File::open(&path).map_err(|e| bad(&path, e.to_string()))?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len)
            .map_err(|e| bad(&path, e.to_string()))?;
        let len = u64::from_le_bytes(len);
        if len > 100 << 20 {
            return Err(bad(&path, format!("safetensors header of {len} bytes")));
        }
        let mut header = vec![0u8; len as usize];
        f.read_exact(&mut header)
            .map_err(|e| bad(&path, e.to_string()))?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(&path, e.to_string()))?;
        for (name, info) in header.iter().filter(|(k, _)| *k != "__metadata__") {
            let shape = info
                .get("shape")
                .and_then(|s| s.as_array())
                .ok_or_else(|| bad(&path, format!("{name}: no shape")))?;
            let numel: u64 = shape.iter().map(|d| d.as_u64().unwrap_or(0)).product();
            total += numel * dtype.size_in_bytes() as u64;
        }
    }
    Ok(total)
}

/// Refuses a checkpoint whose weights (in `dtype`) exceed the free memory of `device`, before
/// anything is loaded (a setting error: exit 2). Devices whose memory cannot be measured pass.
///
/// Errors: [`VlLoadError::Engine`] with [`EngineError::Config`] naming both sizes.
pub fn check_weights_fit(dir: &Path, dtype: DType, device: &Device) -> Result<(), VlLoadError> {
    let Some((free, total)) = super::config::device_memory(device) else {
        return Ok(());
    };
    let need = weights_bytes(dir, dtype)?;
    if need > free {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        return Err(VlLoadError::Engine(EngineError::Config(format!(
            "the weights of {} take {:.2} GiB in {dtype:?} but {:?} has {:.2} GiB free of {:.2} GiB; \
             use a smaller --dtype, a smaller model or another device",
            dir.display(),
            gib(need),
            device.location(),
            gib(free),
            gib(total)
        ))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_bytes_of_the_default_model() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/model");
        let f32_bytes = weights_bytes(&dir, DType::F32).unwrap();
        // The bundled checkpoint is stored in f32: its weights are its file minus the header.
        let file = std::fs::metadata(dir.join("model.safetensors"))
            .unwrap()
            .len();
        assert!(
            f32_bytes < file && file - f32_bytes < 64 * 1024,
            "{f32_bytes} vs {file}"
        );
        assert_eq!(weights_bytes(&dir, DType::BF16).unwrap() * 2, f32_bytes);
    }
}
