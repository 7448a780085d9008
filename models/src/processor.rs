//! The Qwen-VL image processor: decode → RGB → `smart_resize` → Pillow bicubic → rescale →
//! normalise → temporal duplication → patchify into `pixel_values` + `grid_thw`.
//!
//! Reference: transformers `Qwen2VLImageProcessorPil` (the slow processor, `use_fast=False`),
//! used unchanged by Qwen2.5-VL and Qwen3-VL; the families differ only in
//! `preprocessor_config.json` values (patch size 16 and mean/std 0.5 for Qwen3-VL).

use std::io::Cursor;
use std::path::Path;

use candle_core::{Device, Tensor};
use image::{DynamicImage, ImageReader};
use serde::Deserialize;

use crate::resample::resize_bicubic;

/// Errors of the image processor.
#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    /// The bytes are not a decodable image.
    #[error("image decode: {0}")]
    Decode(#[from] image::ImageError),
    /// The image exceeds the configured [`ImageLimits`] (decompression-bomb guard).
    #[error("image {width}x{height} exceeds limits (max {max_width}x{max_height}, {max_decoded_bytes} decoded bytes)")]
    TooLarge {
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
        /// Configured maximum width.
        max_width: u32,
        /// Configured maximum height.
        max_height: u32,
        /// Configured maximum decoded size in bytes.
        max_decoded_bytes: u64,
    },
    /// `smart_resize` rejects aspect ratios above 200 (as transformers does) or empty images.
    #[error("absolute aspect ratio must be smaller than 200, got {height}x{width}")]
    AspectRatio {
        /// Image height.
        height: usize,
        /// Image width.
        width: usize,
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
    /// Tensor construction failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Decompression-bomb limits checked on the header before decoding and enforced by the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Maximum width in pixels.
    pub max_width: u32,
    /// Maximum height in pixels.
    pub max_height: u32,
    /// Maximum decoded size in bytes (width × height × bytes per pixel).
    pub max_decoded_bytes: u64,
}

impl Default for ImageLimits {
    /// 16384 × 16384 pixels and 512 MiB decoded (Pillow's `MAX_IMAGE_PIXELS` is ~89 Mpx; these
    /// bounds are looser on one side and hard on memory).
    fn default() -> Self {
        Self {
            max_width: 16384,
            max_height: 16384,
            max_decoded_bytes: 512 << 20,
        }
    }
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

/// An 8-bit RGB image `[height, width, 3]`, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
    /// Interleaved RGB bytes, `height * width * 3`.
    pub data: Vec<u8>,
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
    if height == 0 || width == 0 || height.max(width) as f64 / height.min(width) as f64 > 200.0 {
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
            std: three(&cfg.image_std, "image_std")?,
            rescale_factor: cfg.rescale_factor,
            limits: ImageLimits::default(),
        })
    }

    /// Reads `preprocessor_config.json` from a checkpoint directory.
    ///
    /// Errors: [`ProcessorError::Config`] when the file is missing or malformed.
    pub fn from_dir(dir: &Path) -> Result<Self, ProcessorError> {
        let path = dir.join("preprocessor_config.json");
        let err = |msg: String| ProcessorError::Config {
            path: path.display().to_string(),
            msg,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
        let cfg: PreprocessorConfig =
            serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        Self::new(&cfg).map_err(|e| err(e.to_string()))
    }

    /// Number of `<|image_pad|>` tokens an image of this grid becomes: `t·h·w / merge²`.
    pub fn num_image_tokens(&self, grid_thw: [usize; 3]) -> usize {
        grid_thw.iter().product::<usize>() / (self.merge_size * self.merge_size)
    }

    /// Decodes encoded bytes (PNG/JPEG/…) to 8-bit RGB like Pillow's `convert("RGB")`: gray is
    /// replicated, alpha is dropped (not composited), 16-bit RGB keeps the high byte, 16-bit
    /// gray is clipped to 255 (Pillow's `I;16 → L`).
    ///
    /// Errors: [`ProcessorError::TooLarge`] beyond [`ImageLimits`] (checked on the header),
    /// [`ProcessorError::Decode`] for undecodable bytes.
    pub fn decode(&self, bytes: &[u8]) -> Result<RgbImage, ProcessorError> {
        let l = self.limits;
        let (width, height) = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(image::ImageError::IoError)?
            .into_dimensions()?;
        // 16-bit RGBA is the widest layout the decoders produce: 8 bytes per pixel.
        if width > l.max_width
            || height > l.max_height
            || width as u64 * height as u64 * 8 > l.max_decoded_bytes
        {
            return Err(ProcessorError::TooLarge {
                width,
                height,
                max_width: l.max_width,
                max_height: l.max_height,
                max_decoded_bytes: l.max_decoded_bytes,
            });
        }
        let mut reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(image::ImageError::IoError)?;
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(l.max_width);
        limits.max_image_height = Some(l.max_height);
        limits.max_alloc = Some(l.max_decoded_bytes);
        reader.limits(limits);
        let img = reader.decode()?;
        Ok(to_rgb_like_pil(img))
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
        let (rh, rw) = smart_resize(
            img.height,
            img.width,
            p * m,
            self.min_pixels,
            self.max_pixels,
        )?;
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

/// Pillow `convert("RGB")` semantics on a decoded image.
fn to_rgb_like_pil(img: DynamicImage) -> RgbImage {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let data = match img {
        DynamicImage::ImageLuma16(g) => g
            .into_raw()
            .into_iter()
            .flat_map(|v| [v.min(255) as u8; 3])
            .collect(),
        DynamicImage::ImageLumaA16(g) => g
            .into_raw()
            .chunks_exact(2)
            .flat_map(|v| [v[0].min(255) as u8; 3])
            .collect(),
        DynamicImage::ImageRgb16(g) => g.into_raw().into_iter().map(|v| (v >> 8) as u8).collect(),
        DynamicImage::ImageRgba16(g) => g
            .into_raw()
            .chunks_exact(4)
            .flat_map(|v| [(v[0] >> 8) as u8, (v[1] >> 8) as u8, (v[2] >> 8) as u8])
            .collect(),
        other => other.to_rgb8().into_raw(),
    };
    RgbImage {
        height,
        width,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            max_width: 63,
            max_height: 1000,
            max_decoded_bytes: 1 << 30,
        };
        assert!(matches!(
            proc.decode(&png),
            Err(ProcessorError::TooLarge {
                width: 64,
                height: 32,
                ..
            })
        ));
        proc.limits = ImageLimits {
            max_width: 1000,
            max_height: 1000,
            max_decoded_bytes: 64 * 32 * 8 - 1,
        };
        assert!(matches!(
            proc.decode(&png),
            Err(ProcessorError::TooLarge { .. })
        ));
        proc.limits = ImageLimits::default();
        assert_eq!(proc.decode(&png).unwrap().data.len(), 64 * 32 * 3);
    }

    #[test]
    fn gray_and_rgba_convert_like_pil() {
        let gray =
            DynamicImage::ImageLuma8(image::GrayImage::from_raw(2, 1, vec![10, 200]).unwrap());
        assert_eq!(to_rgb_like_pil(gray).data, vec![10, 10, 10, 200, 200, 200]);
        let rgba =
            DynamicImage::ImageRgba8(image::RgbaImage::from_raw(1, 1, vec![1, 2, 3, 0]).unwrap());
        assert_eq!(to_rgb_like_pil(rgba).data, vec![1, 2, 3]);
        let g16 = DynamicImage::ImageLuma16(
            image::ImageBuffer::from_raw(2, 1, vec![100u16, 1000]).unwrap(),
        );
        assert_eq!(
            to_rgb_like_pil(g16).data,
            vec![100, 100, 100, 255, 255, 255]
        );
        let rgb16 = DynamicImage::ImageRgb16(
            image::ImageBuffer::from_raw(1, 1, vec![0x1234u16, 0xff00, 0x00ff]).unwrap(),
        );
        assert_eq!(to_rgb_like_pil(rgb16).data, vec![0x12, 0xff, 0x00]);
    }
}
