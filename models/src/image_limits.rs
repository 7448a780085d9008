//! The one image-size limit of the whole pipeline: the input check that turns an oversized
//! row into an `errors.jsonl` entry and the image processor that decodes it for the model
//! apply the same [`ImageLimits`], so an image either passes both or is refused by the first
//! with the same message.

/// Decompression-bomb limits: checked on the header before decoding ([`ImageLimits::check`])
/// and enforced by the decoder itself ([`ImageLimits::decoder_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Largest accepted width and height in pixels.
    pub max_side: u32,
    /// Largest accepted `width × height` of the encoded image, before any resize (a
    /// decompression cap; `--max-pixels` is another thing: the resize bound of the model's
    /// processor).
    pub max_decoded_pixels: u64,
    /// Most bytes the decoder may allocate at once (`image::Limits::max_alloc`).
    pub max_alloc: u64,
}

/// Largest `max(width, height) / min(width, height)` the Qwen-VL image processors accept:
/// transformers' `smart_resize` (`models/qwen2_vl/image_processing_qwen2_vl.py`) raises
/// "absolute aspect ratio must be smaller than 200" above it, whatever the checkpoint.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// Whether a `width × height` image has both sides non-zero and an aspect ratio of at most
/// [`MAX_ASPECT_RATIO`]: the shapes `smart_resize` accepts. The input check applies it before
/// decoding, so `prepare`, `inspect` and `run` refuse such an image alike, up front.
pub fn aspect_ratio_ok(width: usize, height: usize) -> bool {
    width > 0
        && height > 0
        && width.max(height) as f64 / width.min(height) as f64 <= MAX_ASPECT_RATIO
}

/// Bytes per pixel of the widest layout the decoders produce (16-bit RGBA).
const WIDEST_PIXEL_BYTES: u64 = 8;

impl Default for ImageLimits {
    /// Side 16384; area 89,478,485 pixels, Pillow's `Image.MAX_IMAGE_PIXELS` ("a 0.25 GiB
    /// 3-byte RGB image", the threshold of its decompression-bomb warning); allocation 1 GiB,
    /// which holds the largest accepted image even as 16-bit RGBA (715.8 MB), so an image
    /// within the first two limits never fails on the third.
    fn default() -> Self {
        Self {
            max_side: 16_384,
            max_decoded_pixels: 89_478_485,
            max_alloc: 1 << 30,
        }
    }
}

/// An image larger than the [`ImageLimits`]; width first, as `width x height`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image too large ({width}x{height}); limits: side {max_side}, {max_decoded_pixels} pixels")]
pub struct TooLarge {
    /// Width from the header.
    pub width: u32,
    /// Height from the header.
    pub height: u32,
    /// [`ImageLimits::max_side`].
    pub max_side: u32,
    /// [`ImageLimits::max_decoded_pixels`].
    pub max_decoded_pixels: u64,
}

impl ImageLimits {
    /// Checks the header's size against the limits, including that the widest decoded
    /// layout fits [`Self::max_alloc`].
    ///
    /// Errors: [`TooLarge`] when a side, the area or the decoded size is over its limit.
    pub fn check(&self, width: u32, height: u32) -> Result<(), TooLarge> {
        let area = u64::from(width) * u64::from(height);
        if width > self.max_side
            || height > self.max_side
            || area > self.max_decoded_pixels
            || area * WIDEST_PIXEL_BYTES > self.max_alloc
        {
            return Err(TooLarge {
                width,
                height,
                max_side: self.max_side,
                max_decoded_pixels: self.max_decoded_pixels,
            });
        }
        Ok(())
    }

    /// The same limits as the `image` crate's decoder limits.
    pub fn decoder_limits(&self) -> image::Limits {
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(self.max_side);
        limits.max_image_height = Some(self.max_side);
        limits.max_alloc = Some(self.max_alloc);
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_table() {
        let l = ImageLimits::default();
        let cases = [
            ((16_384, 5_461), true), // 89,473,024 pixels: just under Pillow's limit
            ((16_384, 5_462), false),
            ((16_385, 1), false),
            ((1, 16_385), false),
            ((9_459, 9_459), true), // 89,472,681
            ((9_460, 9_459), false),
        ];
        for ((w, h), ok) in cases {
            assert_eq!(l.check(w, h).is_ok(), ok, "{w}x{h}");
        }
        let small_alloc = ImageLimits {
            max_alloc: 64 * 32 * 8 - 1,
            ..l
        };
        assert!(small_alloc.check(64, 32).is_err());
        assert!(small_alloc.check(63, 32).is_ok());
    }

    #[test]
    fn message_names_width_then_height() {
        let e = ImageLimits::default().check(16_384, 5_462).unwrap_err();
        assert_eq!(
            e.to_string(),
            "image too large (16384x5462); limits: side 16384, 89478485 pixels"
        );
    }
}
