//! JPEG decoded pixel-exact with Pillow, the decoder transformers sees through
//! `datasets` (libjpeg-turbo 3.2 bundled with Pillow 13, EXIF orientation applied).
//! References: `tests/fixtures/jpeg/` made by `scripts/make_jpeg_references.py` (width,
//! height and SHA-256 of Pillow's RGB per file).

mod shared_data;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use verisample_models::{decode_rgb, ImageLimits};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jpeg")
}

/// `(file, width, height, sha256 prefix)` rows of a reference table.
fn table(name: &str) -> Vec<(String, usize, usize, String)> {
    std::fs::read_to_string(fixtures().join(name))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_string(),
            )
        })
        .collect()
}

/// Files whose decode differs from the table (empty when all match).
fn mismatches(dir: &Path, rows: &[(String, usize, usize, String)]) -> Vec<String> {
    rows.iter()
        .filter_map(|(file, w, h, sha)| {
            let bytes = std::fs::read(dir.join(file)).unwrap();
            let got = match decode_rgb(&bytes, &ImageLimits::default()) {
                Ok(rgb) => (
                    rgb.width,
                    rgb.height,
                    hex::encode(Sha256::digest(&rgb.data)),
                ),
                Err(e) => return Some(format!("{file}: {e}")),
            };
            (got.0 != *w || got.1 != *h || !got.2.starts_with(sha.as_str())).then(|| {
                format!(
                    "{file}: got {}x{}, want {w}x{h} (or other pixels)",
                    got.0, got.1
                )
            })
        })
        .collect()
}

#[test]
fn generated_jpeg_variants_decode_like_pillow() {
    let rows = table("expected.tsv");
    // Subsampling 4:4:4/4:2:2/4:2:0/4:4:0/4:1:1, progressive, restarts, gray, CMYK, RGB,
    // odd sizes, qualities 5..100, EXIF orientations 1..8.
    assert_eq!(rows.len(), 31);
    let bad = mismatches(&fixtures(), &rows);
    assert!(
        bad.is_empty(),
        "{} of {} differ:\n{}",
        bad.len(),
        rows.len(),
        bad.join("\n")
    );
}

#[test]
fn every_orand_image_decodes_like_pillow() {
    let Some(data) = shared_data::require_shared_data() else {
        return;
    };
    let rows = table("orand.tsv");
    assert_eq!(rows.len(), 1158);
    let bad = mismatches(&data.join("orand-car-a"), &rows);
    assert!(
        bad.is_empty(),
        "{} of {} differ:\n{}",
        bad.len(),
        rows.len(),
        bad.join("\n")
    );
}

#[test]
fn exif_orientation_is_applied_like_exif_transpose() {
    // Orientation 6 (rotate 90° clockwise to display): the 37x29 file becomes 29x37, and its
    // top-left pixel is the stored bottom-left one.
    let stored = decode_rgb(
        &std::fs::read(fixtures().join("exif_orientation_1.jpg")).unwrap(),
        &ImageLimits::default(),
    )
    .unwrap();
    let turned = decode_rgb(
        &std::fs::read(fixtures().join("exif_orientation_6.jpg")).unwrap(),
        &ImageLimits::default(),
    )
    .unwrap();
    assert_eq!((turned.width, turned.height), (stored.height, stored.width));
    let bottom_left = (stored.height - 1) * stored.width * 3;
    assert_eq!(turned.data[..3], stored.data[bottom_left..bottom_left + 3]);
}
