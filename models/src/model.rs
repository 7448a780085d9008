//! A loaded checkpoint of any family of the registry: its vision side + decoder, glued for a
//! batch engine.
//!
//! The model owns weights only: no KV cache, no per-call state. Each call takes the token ids
//! of one step, the image embeddings for the image-placeholder rows among them, the step's
//! [`BatchMeta`] and the engine's [`KvCache`].

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Result as CResult, Tensor};
use candle_nn::VarBuilder;
use verisample_kernels::AttentionPath;

use crate::batch::{BatchMeta, KvCache};
use crate::config::{TextSpec, VisionConfig};
use crate::families::{Family, ModelConfig};
use crate::intern_vit::InternVit;
use crate::load::LoadError;
use crate::processor::VisionInputs;
use crate::text::TextModel;
use crate::vision::{ImageEmbeds, VisionTower};

/// The vision side of a model, as its family's config resolves it.
enum Vision {
    /// A Qwen-VL patch tower with its merger(s).
    Qwen(VisionTower),
    /// InternViT, pixel shuffle and projector.
    InternVit(InternVit),
}

/// One step's inputs for [`VlModel::forward`].
#[derive(Debug, Clone, Copy)]
pub struct StepInput<'a> {
    /// Token ids of the step, `[total_tokens]`, sequences concatenated as in [`BatchMeta`].
    pub input_ids: &'a [u32],
    /// Embeddings for the image tokens of this step, in order; `None` if there are none.
    pub images: Option<&'a ImageEmbeds>,
    /// Rows of `input_ids` the embeddings of `images` go to, in order (the engine's: a
    /// placeholder id the model generated is text, as in transformers, where only a prompt's
    /// placeholders get image features); `None`: every `image_token_id` row, which must then
    /// be as many as the embeddings.
    pub image_rows: Option<&'a [u32]>,
}

/// A model of any family of the registry ([`crate::FAMILIES`]): its vision side and decoder.
pub struct VlModel {
    config: ModelConfig,
    text_spec: TextSpec,
    vision_spec: VisionConfig,
    vision: Vision,
    text: TextModel,
    device: Device,
    dtype: DType,
}

/// Safetensors files of a checkpoint: `model.safetensors`, or the shards named by
/// `model.safetensors.index.json` (`weight_map` values, deduplicated, sorted).
///
/// Errors: [`LoadError::Weights`] when neither exists; [`LoadError::Io`] for unreadable files.
pub fn safetensors_files(dir: &Path) -> std::result::Result<Vec<PathBuf>, LoadError> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => LoadError::Weights(format!(
            "{}: no model.safetensors or model.safetensors.index.json",
            dir.display()
        )),
        _ => LoadError::Io {
            path: index.clone(),
            source,
        },
    })?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| LoadError::Weights(format!("{}: {e}", index.display())))?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| LoadError::Weights(format!("{}: no weight_map", index.display())))?;
    let mut files: Vec<String> = map
        .values()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    files.sort();
    files.dedup();
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

impl VlModel {
    /// Loads `config.json` and the safetensors weights (converted to `dtype`: f32, bf16 or
    /// f16, one shard at a time with its pages released as it is read:
    /// [`crate::load::load_tensors`]) from a checkpoint directory onto `device`.
    ///
    /// Accepts the tensor layouts checkpoints are published in: transformers 5
    /// (`model.visual.*` or `model.vision_tower.*` + `model.multi_modal_projector.*`,
    /// `model.language_model.*`, `lm_head.weight`), the Qwen-VL releases (`visual.*`,
    /// `model.layers.*`), and the InternVL `-hf` releases (`vision_tower.*`,
    /// `multi_modal_projector.*`, `language_model.model.*`, `language_model.lm_head.weight`);
    /// no `lm_head` when embeddings are tied.
    ///
    /// Attention and the other kernels take the default path for `device`
    /// ([`AttentionPath::for_device`]; [`Self::load_on_path`] chooses).
    ///
    /// Errors: [`LoadError`] naming the file or the missing / mis-shaped tensor.
    pub fn load(dir: &Path, dtype: DType, device: &Device) -> std::result::Result<Self, LoadError> {
        Self::load_on_path(dir, dtype, device, AttentionPath::for_device(device))
    }

    /// [`Self::load`] with the implementation of attention, and with it of the projections and
    /// the recurrent kernels, chosen: `path` (native: the CPU's own kernels, CPU only;
    /// portable: candle ops on any device, batch-invariant by construction; flash:
    /// FlashAttention-2 on CUDA in a `flash-attn` build, its oracle on the CPU).
    ///
    /// Errors: as [`Self::load`]; [`LoadError::Weights`] when `path` cannot run on `device` in
    /// this build.
    pub fn load_on_path(
        dir: &Path,
        dtype: DType,
        device: &Device,
        path: AttentionPath,
    ) -> std::result::Result<Self, LoadError> {
        Self::load_config_on_path(dir, ModelConfig::from_dir(dir)?, dtype, device, path)
    }

    /// [`Self::load_on_path`] with `dir/config.json` already read and resolved (`config`).
    ///
    /// Errors: as [`Self::load_on_path`].
    pub fn load_config_on_path(
        dir: &Path,
        config: ModelConfig,
        dtype: DType,
        device: &Device,
        path: AttentionPath,
    ) -> std::result::Result<Self, LoadError> {
        if !path.available_on(device) {
            return Err(LoadError::Weights(format!(
                "the {} attention path cannot run on {device:?} in this build",
                path.name()
            )));
        }
        if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) {
            return Err(LoadError::Weights(format!(
                "unsupported dtype {dtype:?} (f32, bf16, f16)"
            )));
        }
        let files = safetensors_files(dir)?;
        let tensors = crate::load::load_tensors(&files, dtype, device)?;
        let vb = VarBuilder::from_backend(
            Box::new(crate::load::TakeOnce::new(tensors)),
            dtype,
            device.clone(),
        );
        Self::from_var_builder(config, vb, dtype, device, path)
    }

    /// Builds the model from a parsed config and a `VarBuilder` at the checkpoint root, on
    /// attention `path` ([`Self::load_on_path`]).
    ///
    /// Errors: [`LoadError::Config`] for inconsistent configs, [`LoadError::Candle`] for weights.
    pub fn from_var_builder(
        config: ModelConfig,
        vb: VarBuilder,
        dtype: DType,
        device: &Device,
        path: AttentionPath,
    ) -> std::result::Result<Self, LoadError> {
        let text_spec = config.text().clone();
        let vision_spec = config.vision().clone();
        // (decoder, root of lm_head, root of the vision side)
        let (text_prefix, head_prefix, root) =
            if vb.contains_tensor("model.language_model.embed_tokens.weight") {
                ("model.language_model", "", "model")
            } else if vb.contains_tensor("language_model.model.embed_tokens.weight") {
                ("language_model.model", "language_model", "")
            } else {
                ("model", "", "")
            };
        let at = |name: &str| match root {
            "" => vb.pp(name),
            r => vb.pp(r).pp(name),
        };
        let vision = match &vision_spec {
            VisionConfig::Qwen(spec) => Vision::Qwen(VisionTower::new(spec, at("visual"), path)?),
            VisionConfig::InternVit(spec) => Vision::InternVit(InternVit::new(
                spec,
                at("vision_tower"),
                at("multi_modal_projector"),
                path,
            )?),
        };
        let head = match head_prefix {
            "" => vb.clone(),
            h => vb.pp(h),
        };
        let text = TextModel::new(&text_spec, vb.pp(text_prefix), head, path)?;
        Ok(Self {
            config,
            text_spec,
            vision_spec,
            vision,
            text,
            device: device.clone(),
            dtype,
        })
    }

    /// The parsed `config.json`.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The family (`model_type`).
    pub fn family(&self) -> &'static Family {
        self.config.family()
    }

    /// Resolved decoder spec (layers, KV heads, head_dim for sizing the [`KvCache`]).
    pub fn text_spec(&self) -> &TextSpec {
        &self.text_spec
    }

    /// Resolved vision tower.
    pub fn vision_spec(&self) -> &VisionConfig {
        &self.vision_spec
    }

    /// The image placeholder id (`<|image_pad|>`, `<IMG_CONTEXT>`).
    pub fn image_token_id(&self) -> u32 {
        self.config.image_token_id()
    }

    /// Device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The implementation of attention (and with it of the projections and the recurrent
    /// kernels) the model was loaded on ([`Self::load_on_path`]).
    pub fn attention_path(&self) -> AttentionPath {
        self.text.attention_path()
    }

    /// Weight dtype (use it for the [`KvCache`] too).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Allocates the caches of this model: KV pools of `num_blocks` × `block_size` tokens for
    /// its attention layers and `num_state_slots` recurrent-state slots (one per running
    /// sequence) for its linear-attention layers, if any ([`KvCache::for_spec`]).
    ///
    /// Errors: allocation failures.
    pub fn new_kv_cache(
        &self,
        num_blocks: usize,
        block_size: usize,
        num_state_slots: usize,
    ) -> CResult<KvCache> {
        KvCache::for_spec(
            &self.text_spec,
            num_blocks,
            block_size,
            num_state_slots,
            self.dtype,
            &self.device,
        )
    }

    /// Runs the vision side on a batch of images (attention stays inside each image, or
    /// each tile): one embedding row per image token, images in order.
    ///
    /// Errors: candle errors when `pixel_values` does not match `grid_thw`.
    pub fn encode_images(&self, inputs: &VisionInputs) -> CResult<ImageEmbeds> {
        let pixel_values = inputs.pixel_values.to_device(&self.device)?;
        match &self.vision {
            Vision::Qwen(tower) => tower.forward(&pixel_values, &inputs.grid_thw),
            Vision::InternVit(vit) => vit.forward(&pixel_values, &inputs.grid_thw),
        }
    }

    /// Token embeddings with image embeddings spliced in at the image rows:
    /// `[total_tokens, hidden]`, plus the image row indices (u32, for DeepStack).
    ///
    /// Errors: when the image rows differ in number from the embedding rows, or lie beyond
    /// the step.
    pub fn input_embeds(&self, input: &StepInput<'_>) -> CResult<(Tensor, Option<Tensor>)> {
        let text = self.text.embed(input.input_ids, &self.device)?;
        let image_tok = self.image_token_id();
        let rows: Vec<u32> = match input.image_rows {
            Some(rows) => rows.to_vec(),
            None => input
                .input_ids
                .iter()
                .enumerate()
                .filter(|(_, &t)| t == image_tok)
                .map(|(i, _)| i as u32)
                .collect(),
        };
        if rows.iter().any(|&r| r as usize >= input.input_ids.len()) {
            candle_core::bail!(
                "an image row beyond the step's {} tokens",
                input.input_ids.len()
            );
        }
        let have = input
            .images
            .map(|e| e.embeds.dim(0))
            .transpose()?
            .unwrap_or(0);
        if rows.len() != have {
            candle_core::bail!(
                "{} image tokens in the step but {have} image embeddings",
                rows.len()
            );
        }
        let Some(images) = input.images.filter(|_| !rows.is_empty()) else {
            return Ok((text, None));
        };
        // Gather from [text rows; image rows]: row r is text r or image k for the k-th pad.
        let n = input.input_ids.len();
        let mut gather: Vec<u32> = (0..n as u32).collect();
        for (k, &r) in rows.iter().enumerate() {
            gather[r as usize] = (n + k) as u32;
        }
        let all = Tensor::cat(&[text, images.embeds.to_dtype(self.dtype)?], 0)?;
        let embeds = all.index_select(&Tensor::new(gather.as_slice(), &self.device)?, 0)?;
        Ok((embeds, Some(Tensor::new(rows.as_slice(), &self.device)?)))
    }

    /// One engine step: embeds `input.input_ids` (splicing `input.images`), runs the decoder
    /// over the ragged batch described by `meta`, writes K/V into `cache`, and returns logits
    /// `[meta.logits_indices.len(), vocab]` (f32).
    ///
    /// Errors: candle/kernel errors for inconsistent inputs.
    pub fn forward(
        &self,
        input: &StepInput<'_>,
        meta: &BatchMeta,
        cache: &mut KvCache,
    ) -> CResult<Tensor> {
        let (embeds, rows) = self.input_embeds(input)?;
        let deepstack = match (&rows, input.images) {
            (Some(r), Some(img)) if !img.deepstack.is_empty() => {
                Some((r, img.deepstack.as_slice()))
            }
            _ => None,
        };
        self.text.forward(&embeds, meta, cache, deepstack)
    }

    /// Same as [`Self::forward`] from precomputed input embeddings `[total_tokens, hidden]`
    /// (DeepStack features, if any, added at `deepstack.0` rows).
    ///
    /// Errors: as [`Self::forward`].
    pub fn forward_embeds(
        &self,
        embeds: &Tensor,
        deepstack: Option<(&Tensor, &[Tensor])>,
        meta: &BatchMeta,
        cache: &mut KvCache,
    ) -> CResult<Tensor> {
        self.text.forward(embeds, meta, cache, deepstack)
    }
}
