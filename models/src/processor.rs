//! The Qwen-VL image processor: decode → RGB → `smart_resize` → Pillow bicubic → rescale →
//! normalise → temporal duplication → patchify into `pixel_values` + `grid_thw`.
//!
//! Reference: transformers `Qwen2VLImageProcessorPil` (the slow processor, `use_fast=False`),
//! used unchanged by Qwen2.5-VL and Qwen3-VL; the families differ only in
//! `preprocessor_config.json` values (patch size 16 and mean/std 0.5 for Qwen3-VL).

use std::path::Path;

use candle_core::{Device, Tensor};
use serde::Deserialize;

use crate::decode::{DecodeError, RgbImage};
use crate::image_limits::ImageLimits;
use crate::resample::resize_bicubic;

/// Errors of the image processor.
#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    /// The bytes did not decode: not an image, beyond the [`ImageLimits`], or a JPEG libjpeg
    /// refuses.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// `smart_resize` rejects aspect ratios above 200 (as transformers does) or empty images.
    #[error("absolute aspect ratio must be smaller than 200, got a {width}x{height} image (width x height)")]
    AspectRatio {
        /// Image height.
        height: usize,
        /// Image width.
        width: usize,
    },
    /// Pixel bounds that leave no valid size: a bound of 0, or `min_pixels > max_pixels`
    /// once the overrides are applied over the checkpoint's values.
    #[error("pixel bounds: min_pixels {min_pixels} and max_pixels {max_pixels} (both must be at least 1, min at most max)")]
    PixelBounds {
        /// Resolved `min_pixels`.
        min_pixels: usize,
        /// Resolved `max_pixels`.
        max_pixels: usize,
    },
    /// `preprocessor_config.json` could not be read or parsed.
    #[error("preprocessor config {path}: {msg}")]
    Config {
        /// File path.
        path: String,
        /// Cause.
        msg: String,
    },
    /// An [`RgbImage`] whose buffer does not hold `height * width * 3` bytes.
    #[error("RGB buffer of {len} bytes does not match {height}x{width}x3")]
    BadBuffer {
        /// Buffer length.
        len: usize,
        /// Declared height.
        height: usize,
        /// Declared width.
        width: usize,
    },
    /// `--min-pixels` / `--max-pixels` given for a processor that cuts images into fixed
    /// tiles (InternVL), which has no pixel bounds to override.
    #[error("--min-pixels / --max-pixels do not apply to this model: its image processor cuts images into fixed-size tiles")]
    NoPixelBounds,
    /// Tensor construction failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// `size` of a transformers-5 `preprocessor_config.json`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SizeConfig {
    /// Minimum pixel count (`min_pixels`).
    #[serde(default)]
    pub shortest_edge: Option<usize>,
    /// Maximum pixel count (`max_pixels`).
    #[serde(default)]
    pub longest_edge: Option<usize>,
}

/// `preprocessor_config.json`; field names as in the Hugging Face file, defaults of
/// `Qwen2VLImageProcessorPil`.
#[derive(Debug, Clone, Deserialize)]
pub struct PreprocessorConfig {
    /// Minimum pixels (published Qwen2-VL/2.5-VL layout); overrides `size.shortest_edge`.
    #[serde(default)]
    pub min_pixels: Option<usize>,
    /// Maximum pixels; overrides `size.longest_edge`.
    #[serde(default)]
    pub max_pixels: Option<usize>,
    /// transformers-5 / Qwen3-VL layout of the pixel bounds.
    #[serde(default)]
    pub size: Option<SizeConfig>,
    /// Spatial patch size.
    #[serde(default = "d_patch")]
    pub patch_size: usize,
    /// Frames per temporal patch (a still image is repeated this many times).
    #[serde(default = "d_two")]
    pub temporal_patch_size: usize,
    /// Patches merged per side.
    #[serde(default = "d_two")]
    pub merge_size: usize,
    /// Per-channel mean (OpenAI CLIP by default).
    #[serde(default = "d_mean")]
    pub image_mean: Vec<f32>,
    /// Per-channel std (OpenAI CLIP by default).
    #[serde(default = "d_std")]
    pub image_std: Vec<f32>,
    /// Rescale factor applied to 0–255 values.
    #[serde(default = "d_rescale")]
    pub rescale_factor: f64,
}

fn d_patch() -> usize {
    14
}
fn d_two() -> usize {
    2
}
/// OpenAI CLIP mean (transformers `OPENAI_CLIP_MEAN`), digits as in the source.
#[allow(clippy::excessive_precision)]
fn d_mean() -> Vec<f32> {
    vec![0.481_454_66, 0.457_827_5, 0.408_210_73]
}
/// OpenAI CLIP std (transformers `OPENAI_CLIP_STD`), digits as in the source.
#[allow(clippy::excessive_precision)]
fn d_std() -> Vec<f32> {
    vec![0.268_629_54, 0.261_302_58, 0.275_777_11]
}
fn d_rescale() -> f64 {
    1.0 / 255.0
}

/// Overrides of the checkpoint's pixel bounds (`--min-pixels` / `--max-pixels`), as
/// transformers' processor kwargs `min_pixels` / `max_pixels` override `size.shortest_edge` /
/// `size.longest_edge` of `preprocessor_config.json`; `None` keeps the checkpoint's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PixelBounds {
    /// Fewest pixels after resize.
    pub min_pixels: Option<usize>,
    /// Most pixels after resize.
    pub max_pixels: Option<usize>,
}

/// One preprocessed image.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedImage {
    /// `[n_patches, C·T·P·P]` row-major, `n_patches = grid_h · grid_w` (grid_t = 1).
    pub pixel_values: Vec<f32>,
    /// Patch grid `(t, h, w)`.
    pub grid_thw: [usize; 3],
    /// `C·T·P·P`.
    pub patch_dim: usize,
}

/// What the vision tower needs of one image beside its pixel values: for the Qwen-VL
/// processors, the patch grid `(t, h, w)` before spatial merging (`grid_thw`). The engine
/// carries it from the processor to the model without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGrid {
    /// Patch grid `(t, h, w)`.
    pub thw: [usize; 3],
}

/// The vision input of one model call: all images of the batch, concatenated.
#[derive(Debug, Clone)]
pub struct VisionInputs {
    /// `[n_patches_total, C·T·P·P]`, f32 (cast by the model to its dtype).
    pub pixel_values: Tensor,
    /// Grid `(t, h, w)` of each image, in order.
    pub grid_thw: Vec<[usize; 3]>,
}

impl VisionInputs {
    /// Concatenates processed images (in order) onto `device`.
    ///
    /// Errors: [`ProcessorError::Candle`] on allocation failure; an empty list gives a
    /// `[0, 0]` tensor.
    pub fn from_images(images: &[ProcessedImage], device: &Device) -> Result<Self, ProcessorError> {
        let dim = images.first().map(|i| i.patch_dim).unwrap_or(0);
        let data: Vec<f32> = images
            .iter()
            .flat_map(|i| i.pixel_values.iter().copied())
            .collect();
        let rows = data.len().checked_div(dim).unwrap_or(0);
        let pixel_values = Tensor::from_vec(data, (rows, dim), device)?;
        Ok(Self {
            pixel_values,
            grid_thw: images.iter().map(|i| i.grid_thw).collect(),
        })
    }
}

/// The image processor's settings of a checkpoint directory and the file they came from:
/// `preprocessor_config.json` (what transformers 4 saves and the published checkpoints
/// carry), else the `image_processor` object of `processor_config.json` (where transformers 5's
/// processor `save_pretrained` nests them).
///
/// Errors: [`ProcessorError::Config`] naming the file when neither holds them or one is not
/// JSON.
pub fn image_processor_config(
    dir: &Path,
) -> Result<(std::path::PathBuf, serde_json::Value), ProcessorError> {
    let flat = dir.join("preprocessor_config.json");
    let nested = dir.join("processor_config.json");
    let read = |path: &Path| -> Result<serde_json::Value, ProcessorError> {
        let err = |msg: String| ProcessorError::Config {
            path: path.display().to_string(),
            msg,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))
    };
    if flat.exists() || !nested.exists() {
        return Ok((flat.clone(), read(&flat)?));
    }
    match read(&nested)?.get("image_processor") {
        Some(v @ serde_json::Value::Object(_)) => Ok((nested, v.clone())),
        _ => Err(ProcessorError::Config {
            path: flat.display().to_string(),
            msg: format!(
                "missing, and {} has no `image_processor` object",
                nested.display()
            ),
        }),
    }
}

/// Target size `(height, width)` of the Qwen-VL resize (transformers `smart_resize`): both sides
/// multiples of `factor = patch_size · merge_size`, pixel count within `[min_pixels,
/// max_pixels]`, aspect ratio kept as closely as possible. Python's `round` (ties to even) is
/// reproduced.
///
/// Errors: [`ProcessorError::AspectRatio`] when `max/min > 200` or a side is 0.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize), ProcessorError> {
    if !crate::image_limits::aspect_ratio_ok(width, height) {
        return Err(ProcessorError::AspectRatio { height, width });
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

/// GLM-4.1V's resize (transformers `models/glm4v/image_processing_pil_glm4v.py`
/// `smart_resize` with `num_frames = temporal_factor = frames`): a side below `factor` first
/// scales the image up (`int(side · max(factor / h, factor / w))`), then as [`smart_resize`]
/// but the image counts as `frames` frames against the pixel bounds (`t_bar · h_bar · w_bar`,
/// and `frames · h · w` in the rescale).
///
/// Errors: [`ProcessorError::AspectRatio`] when `max/min > 200` or a side is 0.
pub fn glm_smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    frames: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize), ProcessorError> {
    if height == 0 || width == 0 {
        return Err(ProcessorError::AspectRatio { height, width });
    }
    let (mut h, mut w, f) = (height as f64, width as f64, factor as f64);
    if height < factor || width < factor {
        let scale = (f / h).max(f / w);
        h = (h * scale).trunc();
        w = (w * scale).trunc();
    }
    if h.max(w) / h.min(w) > 200.0 {
        return Err(ProcessorError::AspectRatio { height, width });
    }
    let t = frames as f64;
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    // t_bar = round(frames / temporal_factor) · temporal_factor = frames.
    if t * h_bar * w_bar > max_pixels as f64 {
        let beta = (t * h * w / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if t * h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (t * h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

/// Which `smart_resize` an [`ImageProcessor`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeRule {
    /// Qwen2-VL's [`smart_resize`] (the Qwen-VL families).
    Qwen,
    /// GLM-4.1V's [`glm_smart_resize`], the image counted as `temporal_patch_size` frames.
    Glm,
}

/// The image processor, configured from `preprocessor_config.json`.
#[derive(Debug, Clone)]
pub struct ImageProcessor {
    /// Minimum pixels after resize.
    pub min_pixels: usize,
    /// Maximum pixels after resize.
    pub max_pixels: usize,
    /// Spatial patch size.
    pub patch_size: usize,
    /// Temporal patch size.
    pub temporal_patch_size: usize,
    /// Merge size.
    pub merge_size: usize,
    /// Per-channel mean.
    pub mean: [f32; 3],
    /// Per-channel std.
    pub std: [f32; 3],
    /// Rescale factor (1/255).
    pub rescale_factor: f64,
    /// Decoder limits.
    pub limits: ImageLimits,
    /// The resize it runs (set by the family: [`Self::with_rule`]).
    pub rule: ResizeRule,
}

impl ImageProcessor {
    /// Builds the processor from a parsed config. Precedence as in transformers:
    /// `min_pixels`/`max_pixels` override `size.shortest_edge`/`size.longest_edge`; defaults
    /// 56·56 and 28·28·1280.
    ///
    /// Errors: [`ProcessorError::Config`] when mean/std do not have 3 entries.
    pub fn new(cfg: &PreprocessorConfig) -> Result<Self, ProcessorError> {
        let three = |v: &[f32], what: &str| -> Result<[f32; 3], ProcessorError> {
            <[f32; 3]>::try_from(v).map_err(|_| ProcessorError::Config {
                path: String::new(),
                msg: format!("{what} must have 3 entries, got {v:?}"),
            })
        };
        let size = cfg.size.clone().unwrap_or_default();
        let std = three(&cfg.image_std, "image_std")?;
        if std.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(ProcessorError::Config {
                path: String::new(),
                msg: format!("image_std {std:?} must be positive"),
            });
        }
        Ok(Self {
            min_pixels: cfg.min_pixels.or(size.shortest_edge).unwrap_or(56 * 56),
            max_pixels: cfg
                .max_pixels
                .or(size.longest_edge)
                .unwrap_or(28 * 28 * 1280),
            patch_size: cfg.patch_size,
            temporal_patch_size: cfg.temporal_patch_size,
            merge_size: cfg.merge_size,
            mean: three(&cfg.image_mean, "image_mean")?,
            std,
            rescale_factor: cfg.rescale_factor,
            limits: ImageLimits::default(),
            rule: ResizeRule::Qwen,
        })
    }

    /// Reads the image processor's settings of a checkpoint directory
    /// ([`image_processor_config`]).
    ///
    /// Errors: [`ProcessorError::Config`] when the file is missing or malformed.
    pub fn from_dir(dir: &Path) -> Result<Self, ProcessorError> {
        let (path, value) = image_processor_config(dir)?;
        let err = |msg: String| ProcessorError::Config {
            path: path.display().to_string(),
            msg,
        };
        let cfg: PreprocessorConfig =
            serde_json::from_value(value).map_err(|e| err(e.to_string()))?;
        Self::new(&cfg).map_err(|e| err(e.to_string()))
    }

    /// Applies `bounds` over the checkpoint's pixel bounds.
    ///
    /// Errors: [`ProcessorError::PixelBounds`] when a resolved bound is 0 or
    /// `min_pixels > max_pixels`.
    pub fn with_pixel_bounds(mut self, bounds: PixelBounds) -> Result<Self, ProcessorError> {
        self.min_pixels = bounds.min_pixels.unwrap_or(self.min_pixels);
        self.max_pixels = bounds.max_pixels.unwrap_or(self.max_pixels);
        if self.min_pixels == 0 || self.min_pixels > self.max_pixels {
            return Err(ProcessorError::PixelBounds {
                min_pixels: self.min_pixels,
                max_pixels: self.max_pixels,
            });
        }
        Ok(self)
    }

    /// The processor with the family's resize `rule`.
    pub fn with_rule(self, rule: ResizeRule) -> Self {
        Self { rule, ..self }
    }

    /// The size `(height, width)` an image of `height × width` is resized to, `max_pixels`
    /// replacing the processor's bound.
    ///
    /// Errors: [`ProcessorError::AspectRatio`] as the resize rule refuses the size.
    pub fn target_size(
        &self,
        height: usize,
        width: usize,
        max_pixels: Option<usize>,
    ) -> Result<(usize, usize), ProcessorError> {
        let (factor, max) = (
            self.patch_size * self.merge_size,
            max_pixels.unwrap_or(self.max_pixels),
        );
        match self.rule {
            ResizeRule::Qwen => smart_resize(height, width, factor, self.min_pixels, max),
            ResizeRule::Glm => glm_smart_resize(
                height,
                width,
                factor,
                self.temporal_patch_size,
                self.min_pixels,
                max,
            ),
        }
    }

    /// Number of `<|image_pad|>` tokens an image of this grid becomes: `t·h·w / merge²`.
    pub fn num_image_tokens(&self, grid_thw: [usize; 3]) -> usize {
        grid_thw.iter().product::<usize>() / (self.merge_size * self.merge_size)
    }

    /// Decodes encoded bytes (PNG/JPEG/…) to the 8-bit RGB transformers sees for a dataset
    /// row: [`crate::decode::decode_rgb`] within [`Self::limits`] (JPEG pixel-exact with
    /// Pillow's libjpeg-turbo, EXIF orientation applied).
    ///
    /// Errors: [`ProcessorError::Decode`]: [`DecodeError::TooLarge`] beyond [`Self::limits`]
    /// (checked on the header), the other variants for undecodable bytes.
    pub fn decode(&self, bytes: &[u8]) -> Result<RgbImage, ProcessorError> {
        Ok(crate::decode::decode_rgb(bytes, &self.limits)?)
    }

    /// Full pipeline on encoded bytes: [`Self::decode`] then [`Self::preprocess_rgb`].
    pub fn preprocess(&self, bytes: &[u8]) -> Result<ProcessedImage, ProcessorError> {
        self.preprocess_rgb(&self.decode(bytes)?)
    }

    /// `smart_resize` + Pillow bicubic + rescale + normalise + patchify of one RGB image.
    ///
    /// Patch order (transformers `patchify`): blocks of `merge × merge` patches row-major, each
    /// patch flattened as `[C, T, P, P]` with the frame repeated `T` times.
    ///
    /// Errors: [`ProcessorError::AspectRatio`] from `smart_resize`;
    /// [`ProcessorError::BadBuffer`] when `img.data` does not match its size.
    pub fn preprocess_rgb(&self, img: &RgbImage) -> Result<ProcessedImage, ProcessorError> {
        if img.data.len() != img.height * img.width * 3 {
            return Err(ProcessorError::BadBuffer {
                len: img.data.len(),
                height: img.height,
                width: img.width,
            });
        }
        let (p, m, t) = (self.patch_size, self.merge_size, self.temporal_patch_size);
        let (rh, rw) = self.target_size(img.height, img.width, None)?;
        let resized = if (rh, rw) == (img.height, img.width) {
            img.data.clone()
        } else {
            resize_bicubic(&img.data, img.height, img.width, 3, rh, rw)
        };
        // rescale in f64 then cast (transformers `rescale`), normalise in f32.
        let norm: Vec<f32> = resized
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let c = i % 3;
                let x = (v as f64 * self.rescale_factor) as f32;
                (x - self.mean[c]) / self.std[c]
            })
            .collect();
        let (gh, gw) = (rh / p, rw / p);
        let patch_dim = 3 * t * p * p;
        let mut out = Vec::with_capacity(gh * gw * patch_dim);
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                        for c in 0..3 {
                            for _ in 0..t {
                                for py in 0..p {
                                    let row = (y0 + py) * rw;
                                    out.extend((0..p).map(|px| norm[(row + x0 + px) * 3 + c]));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(ProcessedImage {
            pixel_values: out,
            grid_thw: [1, gh, gw],
            patch_dim,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image_limits::TooLarge;
    use std::io::Cursor;

    #[test]
    fn smart_resize_table() {
        // (h, w, factor, min, max) -> expected, computed with transformers' smart_resize.
        let cases = [
            ((40, 195, 28, 3136, 50176), (28, 196)),
            ((60, 119, 28, 3136, 50176), (56, 112)),
            ((48, 85, 28, 3136, 50176), (56, 84)),
            // 42/28 = 1.5 rounds to even (2), 70/28 = 2.5 rounds to 2.
            ((42, 70, 28, 0, 1 << 30), (56, 56)),
            // Above max_pixels: floor after scaling.
            ((1000, 2000, 28, 3136, 28 * 28 * 64), (140, 308)),
            // Below min_pixels: ceil after scaling.
            ((10, 20, 28, 3136, 1 << 30), (56, 84)),
            // Qwen3-VL factor 32.
            ((40, 195, 32, 4096, 65536), (32, 192)),
        ];
        for ((h, w, f, lo, hi), want) in cases {
            assert_eq!(smart_resize(h, w, f, lo, hi).unwrap(), want, "{h}x{w}");
        }
    }

    #[test]
    fn glm_resize_matches_transformers() {
        // transformers 5.25 `models/glm4v/image_processing_pil_glm4v.smart_resize(2, h, w,
        // factor=28, min_pixels, max_pixels)`: a side below 28 scales the image up first, and
        // the image counts twice against the bounds (published bounds 12544 / 9633792).
        let published = (12544, 9_633_792);
        let small = (112 * 112, 28 * 28 * 2 * 64);
        for ((h, w), (lo, hi), want) in [
            ((10, 500), published, (28, 1400)),
            ((300, 120), small, (308, 112)),
            ((1000, 2000), published, (1008, 1988)),
            ((1000, 2000), small, (140, 308)),
            ((27, 900), small, (28, 924)),
            ((3000, 4000), published, (1876, 2520)),
            ((3000, 4000), small, (168, 252)),
            ((56, 56), published, (84, 84)),
            ((128, 1000), small, (56, 616)),
        ] {
            assert_eq!(
                glm_smart_resize(h, w, 28, 2, lo, hi).unwrap(),
                want,
                "{h}x{w}"
            );
        }
        // Qwen's rule on the same image counts it once: another size.
        assert_eq!(
            smart_resize(1000, 2000, 28, 112 * 112, 28 * 28 * 2 * 64).unwrap(),
            (224, 448)
        );
        assert!(glm_smart_resize(1, 300, 28, 2, 1, 1 << 30).is_err());
    }

    #[test]
    fn aspect_ratio_over_200_is_an_error() {
        assert!(matches!(
            smart_resize(1, 201, 28, 0, 1 << 30),
            Err(ProcessorError::AspectRatio { .. })
        ));
        assert!(smart_resize(1, 200, 28, 0, 1 << 30).is_ok());
    }

    #[test]
    fn patch_order_follows_merge_blocks() {
        // 56x56 image, patch 14, merge 2 -> grid 4x4; encode (y, x) into the pixel so the order
        // of patches can be read back.
        let (h, w) = (56, 56);
        let data: Vec<u8> = (0..h * w)
            .flat_map(|i| [(i / w) as u8, (i % w) as u8, 0])
            .collect();
        let proc = ImageProcessor {
            min_pixels: 0,
            max_pixels: 1 << 30,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            mean: [0.0; 3],
            std: [1.0; 3],
            rescale_factor: 1.0,
            limits: ImageLimits::default(),
            rule: ResizeRule::Qwen,
        };
        let out = proc
            .preprocess_rgb(&RgbImage {
                height: h,
                width: w,
                data,
            })
            .unwrap();
        assert_eq!(out.grid_thw, [1, 4, 4]);
        assert_eq!(out.patch_dim, 3 * 2 * 14 * 14);
        // Patch k starts at pixel (y0, x0): order is block (0,0): (0,0) (0,14) (14,0) (14,14), then block (0,1).
        let starts: Vec<(f32, f32)> = (0..6)
            .map(|k| {
                (
                    out.pixel_values[k * out.patch_dim],
                    out.pixel_values[k * out.patch_dim + 2 * 14 * 14],
                )
            })
            .collect();
        assert_eq!(
            starts,
            vec![
                (0.0, 0.0),
                (0.0, 14.0),
                (14.0, 0.0),
                (14.0, 14.0),
                (0.0, 28.0),
                (0.0, 42.0)
            ]
        );
        // The temporal copy repeats the frame.
        let d = out.patch_dim;
        assert_eq!(out.pixel_values[..196], out.pixel_values[196..392]);
        assert_eq!(out.pixel_values.len(), 16 * d);
    }

    #[test]
    fn bomb_limits_are_checked_on_the_header() {
        let img = image::RgbImage::new(64, 32);
        let mut png = Vec::new();
        img.write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let mut proc = ImageProcessor::new(&serde_json::from_str("{}").unwrap()).unwrap();
        proc.limits = ImageLimits {
            max_side: 63,
            ..ImageLimits::default()
        };
        assert!(matches!(
            proc.decode(&png),
            Err(ProcessorError::Decode(DecodeError::TooLarge(TooLarge {
                width: 64,
                height: 32,
                ..
            })))
        ));
        proc.limits = ImageLimits {
            max_decoded_pixels: 64 * 32 - 1,
            ..ImageLimits::default()
        };
        assert!(matches!(
            proc.decode(&png),
            Err(ProcessorError::Decode(DecodeError::TooLarge(_)))
        ));
        proc.limits = ImageLimits::default();
        assert_eq!(proc.decode(&png).unwrap().data.len(), 64 * 32 * 3);
    }

    #[test]
    fn pixel_bounds_override_the_checkpoint_like_processor_kwargs() {
        let base = ImageProcessor::new(
            &serde_json::from_str(r#"{"size": {"shortest_edge": 3136, "longest_edge": 1003520}}"#)
                .unwrap(),
        )
        .unwrap();
        let only_max = base
            .clone()
            .with_pixel_bounds(PixelBounds {
                min_pixels: None,
                max_pixels: Some(65_536),
            })
            .unwrap();
        assert_eq!((only_max.min_pixels, only_max.max_pixels), (3136, 65_536));
        // A 1000x800 image lands under the new cap: 224x280 = 62720 pixels.
        let img = RgbImage {
            height: 800,
            width: 1000,
            data: vec![0; 800 * 1000 * 3],
        };
        assert_eq!(only_max.preprocess_rgb(&img).unwrap().grid_thw, [1, 16, 20]);
        assert_eq!(
            base.clone().preprocess_rgb(&img).unwrap().grid_thw,
            [1, 58, 72]
        );
        let err = base
            .with_pixel_bounds(PixelBounds {
                min_pixels: Some(2_000_000),
                max_pixels: None,
            })
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("min_pixels 2000000 and max_pixels 1003520"),
            "{err}"
        );
    }
}
