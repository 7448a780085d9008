//! Input checks that turn bad input into reported errors instead of crashes: images that
//! do not decode (corrupt, truncated, zero-size, unsupported format, decompression bombs)
//! and questions or references that are missing or blank.

use std::io::Cursor;

use verisample_models::{ImageLimits, RgbImage};

use crate::record::{QaItem, SourceColumns};

/// A problem with one field of an input row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldProblem {
    /// The field (`image.bytes`, `qa`, `qa[2].question`, …).
    pub field: String,
    /// Human-readable message.
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> FieldProblem {
    FieldProblem {
        field: field.into(),
        message: message.into(),
    }
}

/// Check that `bytes` is an image of a supported format that decodes completely within the
/// pipeline's one [`ImageLimits`] (the image processor's own), and that `admit` accepts its
/// header size `(width, height)` before it is decoded (the engine's check,
/// [`super::Generator::check_image`]: the shapes the model's image processor takes — the
/// Qwen-VL `smart_resize` refuses an aspect ratio over 200, InternVL's tiles take any —, then
/// its vision memory budget). Returns the image decoded, as the model's processor
/// decodes it ([`verisample_models::decode_rgb`]: `[height, width, 3]` 8-bit RGB), which the
/// answer requests carry to the processor so that it is not decoded again.
///
/// Errors: a [`FieldProblem`] on `image.bytes` saying what is wrong (`admit`'s message as is).
pub fn check_image(
    bytes: Option<&[u8]>,
    admit: impl Fn(u32, u32) -> Result<(), String>,
) -> Result<RgbImage, FieldProblem> {
    const FIELD: &str = "image.bytes";
    let bytes = match bytes {
        None => return Err(problem(FIELD, "no image bytes")),
        Some([]) => return Err(problem(FIELD, "image is empty (0 bytes)")),
        Some(b) => b,
    };
    let reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| problem(FIELD, format!("cannot read image header: {e}")))?;
    if reader.format().is_none() {
        return Err(problem(FIELD, "unsupported or unrecognised image format"));
    }
    if reader.format() == Some(image::ImageFormat::Jpeg) && !jpeg_has_end(bytes) {
        return Err(problem(FIELD, TRUNCATED_JPEG));
    }
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| problem(FIELD, format!("cannot read image header: {e}")))?;
    if w == 0 || h == 0 {
        return Err(problem(FIELD, format!("image has zero size ({w}x{h})")));
    }
    let limits = ImageLimits::default();
    limits
        .check(w, h)
        .map_err(|e| problem(FIELD, e.to_string()))?;
    admit(w, h).map_err(|m| problem(FIELD, m))?;
    verisample_models::decode_rgb(bytes, &limits)
        .map_err(|e| problem(FIELD, format!("image does not decode: {e}")))
}

/// The message for a JPEG cut short (the `image` crate would decode it, filling the rest,
/// and Pillow then refuses the written split with "image file is truncated").
pub const TRUNCATED_JPEG: &str = "truncated JPEG: no end-of-image marker";

/// Whether the JPEG `bytes` has an End-Of-Image marker (`FF D9`) after its last
/// Start-Of-Scan marker (`FF DA`), or anywhere when it has no scan. Entropy-coded data
/// stuffs every `FF` byte as `FF 00` (ITU-T T.81 §F.1.2.3), so these byte pairs are markers.
pub fn jpeg_has_end(bytes: &[u8]) -> bool {
    let last_sos = bytes
        .windows(2)
        .rposition(|w| w == [0xFF, 0xDA])
        .map_or(0, |i| i + 2);
    bytes[last_sos..].windows(2).any(|w| w == [0xFF, 0xD9])
}

/// Check one `qa` entry: question and reference must be present and not blank (of several
/// references, at least one).
///
/// Errors: a [`FieldProblem`] on `qa[i].question` or `qa[i].answer`; for a flat-layout row
/// (`columns`, one item per row), on the input's own question or answer column (`query`,
/// `label`, …), the field the user's file has.
pub fn check_qa(
    index: usize,
    item: &QaItem,
    columns: Option<&SourceColumns>,
) -> Result<(), FieldProblem> {
    let field = |name: &str, flat: fn(&SourceColumns) -> &String| {
        columns.map_or_else(|| format!("qa[{index}].{name}"), |c| flat(c).clone())
    };
    if item.question.trim().is_empty() {
        return Err(problem(
            field("question", |c| &c.question),
            "question is missing or blank",
        ));
    }
    if crate::record::references_blank(&item.references()) {
        return Err(problem(
            field("answer", |c| &c.answer),
            crate::record::BLANK_REFERENCE,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_size(_: u32, _: u32) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn admit_refuses_by_header_size_before_decoding() {
        // Header only: decoding would fail, so a refusal by size proves the order.
        let header = png_header_only(4000, 3000);
        let refused = check_image(Some(&header), |w, h| {
            Err(format!("{w}x{h} needs more than the budget"))
        })
        .unwrap_err();
        assert_eq!(refused.field, "image.bytes");
        assert_eq!(refused.message, "4000x3000 needs more than the budget");
        let decoded = check_image(Some(&png(5, 4)), |w, h| {
            if (w, h) == (5, 4) {
                Ok(())
            } else {
                Err("wrong size".into())
            }
        });
        assert_eq!(decoded.map(|rgb| (rgb.width, rgb.height)), Ok((5, 4)));
    }

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(w, h, image::Rgb([10, 20, 30]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    /// A PNG header (signature + IHDR) claiming `w`x`h`, with no image data.
    fn png_header_only(w: u32, h: u32) -> Vec<u8> {
        let mut v = png(1, 1);
        // IHDR data starts at byte 16: width, height (big endian); fix the CRC after it.
        v[16..20].copy_from_slice(&w.to_be_bytes());
        v[20..24].copy_from_slice(&h.to_be_bytes());
        let crc = crc32fast::hash(&v[12..29]);
        v[29..33].copy_from_slice(&crc.to_be_bytes());
        v
    }

    #[test]
    fn image_check_table() {
        let good = png(3, 2);
        let truncated = good[..good.len() - 20].to_vec();
        let bomb = png_header_only(100_000, 100_000);
        let wide = png_header_only(20_000, 1);
        type Case = (
            &'static str,
            Option<Vec<u8>>,
            Result<(usize, usize), &'static str>,
        );
        let cases: Vec<Case> = vec![
            ("good", Some(good.clone()), Ok((3, 2))),
            ("missing", None, Err("no image bytes")),
            ("empty", Some(vec![]), Err("0 bytes")),
            (
                "text",
                Some(b"hello, not an image".to_vec()),
                Err("unsupported"),
            ),
            ("truncated", Some(truncated), Err("does not decode")),
            ("bomb", Some(bomb), Err("too large")),
            ("wide", Some(wide), Err("too large")),
            // No shape rule of its own: a 250:1 image is the model's to refuse (`admit`).
            ("ratio 250", Some(png(4, 1000)), Ok((4, 1000))),
        ];
        for (name, bytes, want) in cases {
            let got = check_image(bytes.as_deref(), any_size).map(|rgb| (rgb.width, rgb.height));
            match (got, want) {
                (Ok(d), Ok(w)) => assert_eq!(d, w, "{name}"),
                (Err(p), Err(w)) => {
                    assert_eq!(p.field, "image.bytes", "{name}");
                    assert!(p.message.contains(w), "{name}: {}", p.message);
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// One limit for the whole pipeline: a 16384x5461 image, just inside it,
    /// passes the input check and decodes in the image processor (which used to refuse it at
    /// a limit of its own); one row more is refused by both with the same message.
    #[test]
    fn input_check_and_processor_share_one_size_limit() {
        let processor =
            verisample_models::ImageProcessor::new(&serde_json::from_str("{}").unwrap()).unwrap();
        let mut inside = Cursor::new(Vec::new());
        image::GrayImage::new(16_384, 5_461)
            .write_to(&mut inside, image::ImageFormat::Png)
            .unwrap();
        let inside = inside.into_inner();
        let checked = check_image(Some(&inside), any_size).unwrap();
        assert_eq!((checked.width, checked.height), (16_384, 5_461));
        drop(checked);
        let rgb = processor.decode(&inside).unwrap();
        assert_eq!((rgb.width, rgb.height), (16_384, 5_461));
        let outside = png_header_only(16_384, 5_462);
        let refused = check_image(Some(&outside), any_size).unwrap_err();
        assert_eq!(refused.field, "image.bytes");
        assert_eq!(
            refused.message,
            "image too large (16384x5462); limits: side 16384, 89478485 pixels"
        );
        assert_eq!(
            processor.decode(&outside).unwrap_err().to_string(),
            refused.message
        );
    }

    #[test]
    fn jpeg_end_marker_table() {
        let cases: [(&[u8], bool); 5] = [
            (&[0xFF, 0xD8, 0xFF, 0xDA, 1, 2, 0xFF, 0xD9], true),
            (&[0xFF, 0xD8, 0xFF, 0xDA, 1, 2, 0xFF, 0xD9, 0, 0], true),
            (&[0xFF, 0xD8, 0xFF, 0xDA, 1, 2, 3], false),
            // An EOI before the last scan (an EXIF thumbnail's) does not count.
            (&[0xFF, 0xD8, 0xFF, 0xD9, 0xFF, 0xDA, 1, 0xFF, 0x00], false),
            (&[0xFF, 0xD8, 0xFF, 0xE0], false),
        ];
        for (bytes, want) in cases {
            assert_eq!(jpeg_has_end(bytes), want, "{bytes:?}");
        }
    }

    /// A real JPEG of the val split cut to 50 % and to 700 bytes is rejected as truncated;
    /// the intact file still passes.
    #[test]
    fn truncated_real_jpeg_is_rejected() {
        let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let data = [
            std::env::var_os("VERISAMPLE_SHARED_DATA").map(std::path::PathBuf::from),
            Some(repo.join("../../shared/data")),
            Some(repo.join("../shared/data")),
        ]
        .into_iter()
        .flatten()
        .find(|p| p.join("orand-car-a/val").is_dir());
        let Some(data) = data else {
            // Under CI nothing may skip (tests/shared_data has the same rule).
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
            assert!(!ci, "CI run without ../shared/data");
            println!("skipped: no ../shared/data");
            if let Some(log) = std::env::var_os("VERISAMPLE_SKIP_LOG") {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .and_then(|mut f| f.write_all(b"truncated_real_jpeg_is_rejected: no data\n"))
                    .expect("append to $VERISAMPLE_SKIP_LOG");
            }
            return;
        };
        let mut jpegs: Vec<_> = std::fs::read_dir(data.join("orand-car-a/val"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("jpg")))
            .collect();
        jpegs.sort();
        let bytes = std::fs::read(&jpegs[0]).unwrap();
        let rgb = check_image(Some(&bytes), any_size).unwrap();
        assert!(rgb.width > 0 && rgb.height > 0);
        assert_eq!(rgb.data.len(), rgb.width * rgb.height * 3);
        for cut in [bytes.len() / 2, 700] {
            let p = check_image(Some(&bytes[..cut]), any_size).unwrap_err();
            assert_eq!(p.field, "image.bytes");
            assert!(p.message.contains(TRUNCATED_JPEG), "{cut}: {}", p.message);
        }
    }

    #[test]
    fn qa_check_table() {
        let qa = |q: &str, a: &str| QaItem {
            question: q.into(),
            answer: a.into(),
            ..Default::default()
        };
        assert_eq!(check_qa(0, &qa("What?", "1"), None), Ok(()));
        assert_eq!(
            check_qa(2, &qa(" \n", "1"), None).unwrap_err().field,
            "qa[2].question"
        );
        assert_eq!(
            check_qa(1, &qa("What?", ""), None).unwrap_err().field,
            "qa[1].answer"
        );
        // A flat-layout row names the input's own columns.
        let flat = SourceColumns {
            image: "img".into(),
            question: "query".into(),
            answer: "label".into(),
        };
        assert_eq!(
            check_qa(0, &qa(" ", "1"), Some(&flat)).unwrap_err().field,
            "query"
        );
        assert_eq!(
            check_qa(0, &qa("What?", " "), Some(&flat))
                .unwrap_err()
                .field,
            "label"
        );
    }
}
