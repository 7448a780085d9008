//! The image processor of a checkpoint, chosen by its family's vision tower: the Qwen-VL
//! `smart_resize` patch processor ([`ImageProcessor`]) or InternVL's tile processor
//! ([`TileProcessor`]). What the engine asks of either: prepared pixels and their grid, the
//! image tokens a grid becomes, and the patches an image of a given size will cost.

use std::path::Path;

use crate::config::VisionConfig;
use crate::decode::RgbImage;
use crate::families::ModelConfig;
use crate::processor::{
    image_processor_config, ImageProcessor, PixelBounds, ProcessedImage, ProcessorError,
};
use crate::tiles::TileProcessor;

/// `image_seq_length` of `dir/processor_config.json`, when it states one, against the tower's
/// `tokens` per tile (the processor expands each tile to that many placeholders).
///
/// Errors: [`ProcessorError::Config`] naming the file when they differ or it is not JSON.
fn check_image_seq_length(dir: &Path, tokens: usize) -> Result<(), ProcessorError> {
    let path = dir.join("processor_config.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let err = |msg: String| ProcessorError::Config {
        path: path.display().to_string(),
        msg,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    match value.get("image_seq_length").map(serde_json::Value::as_u64) {
        None => Ok(()),
        Some(Some(n)) if n == tokens as u64 => Ok(()),
        Some(n) => Err(err(format!(
            "image_seq_length {n:?}, but config.json's tower makes {tokens} tokens a tile \
             ((image_size / patch_size · downsample_ratio)²)"
        ))),
    }
}

/// A checkpoint's image processor.
#[derive(Debug, Clone)]
pub enum Preprocessor {
    /// The Qwen-VL processor (`smart_resize` within pixel bounds, patches merged `merge²`).
    Qwen(ImageProcessor),
    /// InternVL's GotOcr2 tiles.
    Tiles(TileProcessor),
}

impl Preprocessor {
    /// Reads the image processor's settings of `dir`
    /// ([`crate::processor::image_processor_config`]) as the processor `config`'s vision
    /// tower takes. The tiles must be the tower's `image_size` (transformers would resample
    /// the position table to another size: not implemented), and a `processor_config.json`
    /// that states `image_seq_length` must state the tower's tokens per tile.
    ///
    /// Errors: [`ProcessorError::Config`] naming the file and what is wrong in it.
    pub fn from_dir(dir: &Path, config: &ModelConfig) -> Result<Self, ProcessorError> {
        Ok(match config.vision() {
            VisionConfig::Qwen(spec) => {
                let p = ImageProcessor::from_dir(dir)?.with_rule(config.family().resize);
                let sizes = [
                    ("patch_size", p.patch_size, "patch_size", spec.patch_size),
                    (
                        "merge_size",
                        p.merge_size,
                        "spatial_merge_size",
                        spec.spatial_merge_size,
                    ),
                    (
                        "temporal_patch_size",
                        p.temporal_patch_size,
                        "temporal_patch_size",
                        spec.temporal_patch_size,
                    ),
                ];
                if let Some((key, got, field, want)) = sizes.iter().find(|s| s.1 != s.3) {
                    return Err(ProcessorError::Config {
                        path: image_processor_config(dir)?.0.display().to_string(),
                        msg: format!(
                            "{key} {got}, but config.json's vision_config.{field} is {want}: \
                             the processor must cut the patches the tower embeds"
                        ),
                    });
                }
                Self::Qwen(p)
            }
            VisionConfig::InternVit(s) => {
                let tiles = TileProcessor::from_dir(dir, s.patch_size, s.tokens_per_tile())?;
                if tiles.tile != s.image_size {
                    return Err(ProcessorError::Config {
                        path: image_processor_config(dir)?.0.display().to_string(),
                        msg: format!(
                            "tiles of {} pixels, but config.json's vision_config.image_size is \
                             {}: resampling the position table to another tile size is not \
                             implemented",
                            tiles.tile, s.image_size
                        ),
                    });
                }
                check_image_seq_length(dir, s.tokens_per_tile())?;
                Self::Tiles(tiles)
            }
        })
    }

    /// Applies `bounds` over the checkpoint's pixel bounds (Qwen-VL only).
    ///
    /// Errors: [`ProcessorError::PixelBounds`] as [`ImageProcessor::with_pixel_bounds`];
    /// [`ProcessorError::NoPixelBounds`] when a bound is given for fixed tiles.
    pub fn with_pixel_bounds(self, bounds: PixelBounds) -> Result<Self, ProcessorError> {
        match self {
            Self::Qwen(p) => Ok(Self::Qwen(p.with_pixel_bounds(bounds)?)),
            Self::Tiles(_) if bounds != PixelBounds::default() => {
                Err(ProcessorError::NoPixelBounds)
            }
            tiles => Ok(tiles),
        }
    }

    /// Decodes encoded bytes within the processor's limits ([`ImageProcessor::decode`]).
    ///
    /// Errors: [`ProcessorError::Decode`].
    pub fn decode(&self, bytes: &[u8]) -> Result<RgbImage, ProcessorError> {
        let limits = match self {
            Self::Qwen(p) => &p.limits,
            Self::Tiles(p) => &p.limits,
        };
        Ok(crate::decode::decode_rgb(bytes, limits)?)
    }

    /// [`Self::decode`] then [`Self::preprocess_rgb`].
    ///
    /// Errors: as those.
    pub fn preprocess(&self, bytes: &[u8]) -> Result<ProcessedImage, ProcessorError> {
        self.preprocess_rgb(&self.decode(bytes)?)
    }

    /// Pixels and grid of one RGB image.
    ///
    /// Errors: as [`ImageProcessor::preprocess_rgb`] / [`TileProcessor::preprocess_rgb`].
    pub fn preprocess_rgb(&self, img: &RgbImage) -> Result<ProcessedImage, ProcessorError> {
        match self {
            Self::Qwen(p) => p.preprocess_rgb(img),
            Self::Tiles(p) => p.preprocess_rgb(img),
        }
    }

    /// Image tokens an image of this grid becomes.
    pub fn num_image_tokens(&self, grid_thw: [usize; 3]) -> usize {
        match self {
            Self::Qwen(p) => p.num_image_tokens(grid_thw),
            Self::Tiles(p) => p.num_image_tokens(grid_thw),
        }
    }

    /// Patches (rows of `pixel_values`) an image of `width × height` becomes, `max_pixels`
    /// replacing the checkpoint's bound (Qwen-VL); `None` when the size is refused.
    pub fn image_patches(
        &self,
        width: u32,
        height: u32,
        max_pixels: Option<usize>,
    ) -> Option<usize> {
        match self {
            Self::Qwen(p) => {
                let (h, w) = p
                    .target_size(height as usize, width as usize, max_pixels)
                    .ok()?;
                Some((h / p.patch_size) * (w / p.patch_size))
            }
            Self::Tiles(p) if width > 0 && height > 0 => {
                let side = p.tile / p.patch_size;
                Some(p.num_tiles(height as usize, width as usize) * side * side)
            }
            Self::Tiles(_) => None,
        }
    }

    /// `(min_pixels, max_pixels)` of the resize, when the processor has them (Qwen-VL).
    pub fn pixel_bounds(&self) -> Option<(usize, usize)> {
        match self {
            Self::Qwen(p) => Some((p.min_pixels, p.max_pixels)),
            Self::Tiles(_) => None,
        }
    }

    /// Patches merged per side into one image token, for the M-RoPE index (Qwen-VL).
    pub fn merge_size(&self) -> Option<usize> {
        match self {
            Self::Qwen(p) => Some(p.merge_size),
            Self::Tiles(_) => None,
        }
    }
}
