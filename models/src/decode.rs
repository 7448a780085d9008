//! Encoded image bytes → the 8-bit RGB pixels transformers sees for a dataset row.
//!
//! The reference is a row decoded by `datasets`' `Image` feature (`PIL.Image.open`, `load()`,
//! `PIL.ImageOps.exif_transpose` when the EXIF Orientation tag is present; datasets 5.2) and
//! converted by transformers' image processor (`convert("RGB")`; transformers 5.24):
//! - JPEG is decoded by libjpeg-turbo's own decoder (through MozJPEG, which keeps it
//!   unchanged) with libjpeg's defaults, as Pillow 13 does with its bundled libjpeg-turbo
//!   3.2: accurate integer IDCT (`JDCT_ISLOW`), fancy upsampling, YCbCr → RGB in libjpeg's
//!   fixed point. Grayscale is replicated to RGB; a 4-component (CMYK or YCCK) file is read as
//!   Adobe-inverted CMYK (Pillow's `CMYK;I`) and converted with Pillow's `cmyk2rgb`.
//! - Every other format goes through the `image` crate, converted like Pillow's
//!   `convert("RGB")` (alpha dropped, not composited; 16-bit samples cut to 8 bits).
//! - The EXIF orientation (2–8) is then applied as `exif_transpose` does, for every format.

use std::io::Cursor;

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};

use crate::image_limits::{ImageLimits, TooLarge};

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

/// Why encoded bytes did not decode to an [`RgbImage`].
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not a decodable image.
    #[error("image decode: {0}")]
    Image(#[from] image::ImageError),
    /// The image exceeds the [`ImageLimits`] (decompression-bomb guard, checked on the header).
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// libjpeg refused the JPEG (its message).
    #[error("JPEG decode: {0}")]
    Jpeg(String),
}

/// Decodes `bytes` to RGB as described in the module docs, refusing anything beyond `limits`
/// before the pixels are decoded.
///
/// Errors: [`DecodeError::TooLarge`] beyond `limits`; [`DecodeError::Image`] for bytes the
/// `image` crate cannot read; [`DecodeError::Jpeg`] for a JPEG libjpeg refuses.
pub fn decode_rgb(bytes: &[u8], limits: &ImageLimits) -> Result<RgbImage, DecodeError> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(image::ImageError::IoError)?;
    // Our check on the header first (its message names the size), the decoder's own after.
    reader.no_limits();
    let format = reader.format();
    let mut decoder = reader.into_decoder()?;
    let (width, height) = decoder.dimensions();
    limits.check(width, height)?;
    decoder.set_limits(limits.decoder_limits())?;
    let orientation = decoder.orientation()?;
    let rgb = if format == Some(ImageFormat::Jpeg) {
        decode_jpeg(bytes)?
    } else {
        to_rgb_like_pil(DynamicImage::from_decoder(decoder)?)
    };
    Ok(orient(rgb, orientation))
}

/// libjpeg-turbo's decode of a JPEG with libjpeg's defaults (the mozjpeg crate reports
/// libjpeg's fatal errors by unwinding, caught here).
fn decode_jpeg(bytes: &[u8]) -> Result<RgbImage, DecodeError> {
    let run = || -> std::io::Result<RgbImage> {
        let jpeg = mozjpeg::Decompress::new_mem(bytes)?;
        let (width, height) = jpeg.size();
        let data = match jpeg.image()? {
            mozjpeg::decompress::Format::RGB(mut d) => {
                let px: Vec<[u8; 3]> = d.read_scanlines()?;
                d.finish()?;
                px.into_iter().flatten().collect()
            }
            mozjpeg::decompress::Format::Gray(mut d) => {
                let px: Vec<u8> = d.read_scanlines()?;
                d.finish()?;
                px.into_iter().flat_map(|v| [v; 3]).collect()
            }
            mozjpeg::decompress::Format::CMYK(mut d) => {
                let px: Vec<[u8; 4]> = d.read_scanlines()?;
                d.finish()?;
                px.into_iter().flat_map(inverted_cmyk_to_rgb).collect()
            }
        };
        Ok(RgbImage {
            height,
            width,
            data,
        })
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(img)) => Ok(img),
        Ok(Err(e)) => Err(DecodeError::Jpeg(e.to_string())),
        Err(payload) => Err(DecodeError::Jpeg(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "libjpeg error".into()),
        )),
    }
}

/// Pillow's `CMYK;I` unpacking (Adobe files store CMYK inverted) followed by its `cmyk2rgb`:
/// `nk = 255 - k`, each channel `nk - round(c · nk / 255)` with Pillow's `MULDIV255`.
fn inverted_cmyk_to_rgb(px: [u8; 4]) -> [u8; 3] {
    let [c, m, y, k] = px.map(|v| 255 - u32::from(v));
    let nk = 255 - k;
    let muldiv255 = |a: u32| {
        let t = a * nk + 128;
        ((t >> 8) + t) >> 8
    };
    // nk >= muldiv255(x) for x <= 255, so no clipping is needed.
    [c, m, y].map(|v| (nk - muldiv255(v)) as u8)
}

/// Pillow `convert("RGB")` semantics on a decoded image: gray is replicated, alpha is
/// dropped (not composited), 16-bit RGB keeps the high byte, 16-bit gray is clipped to 255
/// (Pillow's `I;16 → L`).
pub(crate) fn to_rgb_like_pil(img: DynamicImage) -> RgbImage {
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

/// Applies an EXIF orientation like Pillow's `exif_transpose`.
fn orient(img: RgbImage, orientation: Orientation) -> RgbImage {
    if orientation == Orientation::NoTransforms {
        return img;
    }
    let buf = image::RgbImage::from_raw(img.width as u32, img.height as u32, img.data)
        .expect("RgbImage holds width x height x 3 bytes");
    let mut dynamic = DynamicImage::ImageRgb8(buf);
    dynamic.apply_orientation(orientation);
    to_rgb_like_pil(dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn cmyk_matches_pillow_cmyk2rgb() {
        // Stored (inverted) CMYK -> RGB, from Pillow 13: Image.frombytes("CMYK", (1, 1),
        // bytes(255 - v for v in px)).convert("RGB").
        let cases = [
            ([255, 255, 255, 255], [255, 255, 255]),
            ([0, 0, 0, 0], [0, 0, 0]),
            ([155, 55, 205, 235], [143, 51, 189]),
            ([255, 0, 128, 128], [128, 0, 64]),
        ];
        for (stored, rgb) in cases {
            assert_eq!(inverted_cmyk_to_rgb(stored), rgb, "{stored:?}");
        }
    }

    #[test]
    fn a_broken_jpeg_is_an_error_not_a_panic() {
        let err = decode_jpeg(&[0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x02, 0xFF, 0xD9]).unwrap_err();
        assert!(matches!(err, DecodeError::Jpeg(_)), "{err}");
    }
}
