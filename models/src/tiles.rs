//! The GotOcr2 image processor as InternVL runs it: decode → RGB → a grid of tiles chosen by
//! aspect ratio → Pillow bicubic resize of the whole image to the grid, cut into tiles, plus a
//! thumbnail of the whole image when there is more than one tile → rescale → normalise →
//! patchify each tile into `pixel_values` + `grid_thw` = `[tiles, side, side]`.
//!
//! Reference: transformers `GotOcr2ImageProcessorPil` (`use_fast=False`, Pillow bicubic) and
//! `get_optimal_tiled_canvas` (`models/got_ocr2/image_processing_got_ocr2.py`), called with
//! `crop_to_patches=True` as `InternVLProcessor` always passes it.

use std::path::Path;

use serde::Deserialize;

use crate::decode::RgbImage;
use crate::image_limits::ImageLimits;
use crate::processor::{image_processor_config, ProcessedImage, ProcessorError};
use crate::resample::resize_bicubic;

/// `size` of the GotOcr2 `preprocessor_config.json`: the tile in pixels.
#[derive(Debug, Clone, Copy, Deserialize)]
struct TileSize {
    height: usize,
    width: usize,
}

/// The GotOcr2 `preprocessor_config.json`; field names as in the file, defaults of
/// `GotOcr2ImageProcessorPil`.
#[derive(Debug, Clone, Deserialize)]
struct TileConfig {
    #[serde(default = "d_size")]
    size: TileSize,
    #[serde(default = "d_min")]
    min_patches: usize,
    #[serde(default = "d_max")]
    max_patches: usize,
    #[serde(default = "d_mean")]
    image_mean: Vec<f32>,
    #[serde(default = "d_std")]
    image_std: Vec<f32>,
    #[serde(default = "d_rescale")]
    rescale_factor: f64,
    /// Pillow's filter id; only bicubic (3) is implemented.
    #[serde(default = "d_resample")]
    resample: u32,
}

fn d_size() -> TileSize {
    TileSize {
        height: 384,
        width: 384,
    }
}
fn d_min() -> usize {
    1
}
fn d_max() -> usize {
    12
}
/// OpenAI CLIP mean (transformers `OPENAI_CLIP_MEAN`), the class default.
#[allow(clippy::excessive_precision)]
fn d_mean() -> Vec<f32> {
    vec![0.481_454_66, 0.457_827_5, 0.408_210_73]
}
/// OpenAI CLIP std (transformers `OPENAI_CLIP_STD`), the class default.
#[allow(clippy::excessive_precision)]
fn d_std() -> Vec<f32> {
    vec![0.268_629_54, 0.261_302_58, 0.275_777_11]
}
fn d_rescale() -> f64 {
    1.0 / 255.0
}
fn d_resample() -> u32 {
    3
}

/// The tile processor of a checkpoint.
#[derive(Debug, Clone)]
pub struct TileProcessor {
    /// Side of a tile in pixels (`size`; square).
    pub tile: usize,
    /// Side of a patch in pixels (the vision tower's `patch_size`).
    pub patch_size: usize,
    /// Fewest tiles of the grid (`min_patches`).
    pub min_tiles: usize,
    /// Most tiles of the grid (`max_patches`; the thumbnail comes on top).
    pub max_tiles: usize,
    /// Image tokens of one tile (the model's `(tile / patch / shuffle)²`).
    pub tokens_per_tile: usize,
    /// Per-channel mean.
    pub mean: [f32; 3],
    /// Per-channel std.
    pub std: [f32; 3],
    /// Rescale factor (1/255).
    pub rescale_factor: f64,
    /// Decoder limits.
    pub limits: ImageLimits,
}

/// The tile grid `(columns, rows)` for an image of `height × width` (transformers
/// `get_optimal_tiled_canvas`): among the grids of `min..=max` tiles, ordered by tile count
/// (stably, from columns-major enumeration), the one whose aspect ratio is closest to the
/// image's; on an exact tie the later grid wins while the image's area exceeds half the
/// grid's pixel area.
pub fn tile_grid(
    height: usize,
    width: usize,
    tile: usize,
    min: usize,
    max: usize,
) -> (usize, usize) {
    let mut grids: Vec<(usize, usize)> = (1..=max)
        .flat_map(|w| (1..=max).map(move |h| (w, h)))
        .filter(|(w, h)| (min..=max).contains(&(w * h)))
        .collect();
    grids.sort_by_key(|(w, h)| w * h);
    let aspect = width as f64 / height as f64;
    let area = (width * height) as f64;
    let mut best = (1, 1);
    let mut best_diff = f64::INFINITY;
    for (w, h) in grids {
        let diff = (aspect - w as f64 / h as f64).abs();
        if diff < best_diff {
            best_diff = diff;
            best = (w, h);
        } else if diff == best_diff && area > 0.5 * (tile * tile * w * h) as f64 {
            best = (w, h);
        }
    }
    best
}

impl TileProcessor {
    /// Reads the image processor's settings of a checkpoint directory
    /// ([`crate::processor::image_processor_config`]), for a tower with `patch_size` and
    /// `tokens_per_tile`.
    ///
    /// Errors: [`ProcessorError::Config`] when the file is missing or malformed, the tile is
    /// not square or not a multiple of the patch, mean/std do not have 3 entries, or the
    /// filter is not bicubic.
    pub fn from_dir(
        dir: &Path,
        patch_size: usize,
        tokens_per_tile: usize,
    ) -> Result<Self, ProcessorError> {
        let (path, value) = image_processor_config(dir)?;
        let err = |msg: String| ProcessorError::Config {
            path: path.display().to_string(),
            msg,
        };
        let cfg: TileConfig = serde_json::from_value(value).map_err(|e| err(e.to_string()))?;
        let three = |v: &[f32], what: &str| {
            <[f32; 3]>::try_from(v)
                .map_err(|_| err(format!("{what} must have 3 entries, got {v:?}")))
        };
        let TileSize { height, width } = cfg.size;
        if height != width || height == 0 || patch_size == 0 || !height.is_multiple_of(patch_size) {
            return Err(err(format!(
                "size {height}x{width} must be a square tile, a multiple of the patch {patch_size}"
            )));
        }
        if cfg.resample != 3 {
            return Err(err(format!(
                "resample {} is not implemented; supported: 3 (bicubic)",
                cfg.resample
            )));
        }
        if cfg.min_patches == 0 || cfg.min_patches > cfg.max_patches {
            return Err(err(format!(
                "min_patches {} and max_patches {} leave no tile grid",
                cfg.min_patches, cfg.max_patches
            )));
        }
        let std = three(&cfg.image_std, "image_std")?;
        if std.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(err(format!("image_std {std:?} must be positive")));
        }
        Ok(Self {
            tile: height,
            patch_size,
            min_tiles: cfg.min_patches,
            max_tiles: cfg.max_patches,
            tokens_per_tile,
            mean: three(&cfg.image_mean, "image_mean")?,
            std,
            rescale_factor: cfg.rescale_factor,
            limits: ImageLimits::default(),
        })
    }

    /// Tiles an image of `height × width` becomes: the grid's, plus the thumbnail when the
    /// grid has more than one tile.
    pub fn num_tiles(&self, height: usize, width: usize) -> usize {
        let (c, r) = tile_grid(height, width, self.tile, self.min_tiles, self.max_tiles);
        match c * r {
            1 => 1,
            n => n + 1,
        }
    }

    /// Image tokens of an image with this grid: `tiles · tokens_per_tile`.
    pub fn num_image_tokens(&self, grid_thw: [usize; 3]) -> usize {
        grid_thw[0] * self.tokens_per_tile
    }

    /// Tiles + thumbnail, rescale, normalise and patchify one RGB image: `pixel_values`
    /// `[tiles · side², 3·P·P]`, tiles row-major then the thumbnail, each tile's patches
    /// row-major, a patch `[C, P, P]`; `grid_thw` `[tiles, side, side]`.
    ///
    /// Errors: [`ProcessorError::BadBuffer`] when `img.data` does not match its size;
    /// [`ProcessorError::AspectRatio`] for an empty image.
    pub fn preprocess_rgb(&self, img: &RgbImage) -> Result<ProcessedImage, ProcessorError> {
        if img.data.len() != img.height * img.width * 3 {
            return Err(ProcessorError::BadBuffer {
                len: img.data.len(),
                height: img.height,
                width: img.width,
            });
        }
        if img.height == 0 || img.width == 0 {
            return Err(ProcessorError::AspectRatio {
                height: img.height,
                width: img.width,
            });
        }
        let t = self.tile;
        let (cols, rows) = tile_grid(img.height, img.width, t, self.min_tiles, self.max_tiles);
        let resize = |h: usize, w: usize| {
            if (h, w) == (img.height, img.width) {
                img.data.clone()
            } else {
                resize_bicubic(&img.data, img.height, img.width, 3, h, w)
            }
        };
        let canvas = resize(rows * t, cols * t);
        let canvas_w = cols * t;
        let p = self.patch_size;
        let side = t / p;
        let patch_dim = 3 * p * p;
        let tiles = if cols * rows == 1 { 1 } else { cols * rows + 1 };
        let mut out = Vec::with_capacity(tiles * side * side * patch_dim);
        for k in 0..cols * rows {
            let (x0, y0) = ((k % cols) * t, (k / cols) * t);
            self.patchify(&canvas, canvas_w, (y0, x0), &mut out);
        }
        if cols * rows > 1 {
            self.patchify(&resize(t, t), t, (0, 0), &mut out);
        }
        Ok(ProcessedImage {
            pixel_values: out,
            grid_thw: [tiles, side, side],
            patch_dim,
        })
    }

    /// Appends the normalised patches of the tile at `(y0, x0)` of an RGB buffer `width`
    /// pixels wide: patches row-major, each `[C, P, P]`. Rescale in f64 then cast, normalise
    /// in f32 (transformers `rescale`, `normalize`).
    fn patchify(&self, rgb: &[u8], width: usize, (y0, x0): (usize, usize), out: &mut Vec<f32>) {
        let (p, side) = (self.patch_size, self.tile / self.patch_size);
        let value = |y: usize, x: usize, c: usize| {
            let v = rgb[(y * width + x) * 3 + c];
            let x = (v as f64 * self.rescale_factor) as f32;
            (x - self.mean[c]) / self.std[c]
        };
        for py in 0..side {
            for px in 0..side {
                for c in 0..3 {
                    for y in 0..p {
                        for x in 0..p {
                            out.push(value(y0 + py * p + y, x0 + px * p + x, c));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grids transformers' `get_optimal_tiled_canvas` chooses (tile 448, 1..=12 tiles),
    /// computed with transformers 5.24: a wide cheque, a square, a tall page, and the tie of
    /// 2:1 with 4:2 settled by area both ways.
    #[test]
    fn tile_grid_matches_transformers() {
        let cases = [
            ((40, 195), (5, 1)),
            ((448, 448), (1, 1)),
            ((1000, 300), (1, 3)),
            ((224, 448), (2, 1)),
            ((1000, 2000), (4, 2)),
        ];
        for ((h, w), want) in cases {
            assert_eq!(tile_grid(h, w, 448, 1, 12), want, "{h}x{w}");
        }
    }
}
