//! `inspect` says what `run` would do with each row: an image is described as decoded only
//! when it passes `run`'s own image check (a truncated JPEG, an image over the pixel limit
//! are named with `run`'s reason), and a damaged row group is named with its rows while the
//! file's other row groups are still read, as `run`'s reader does.

mod dataset_util;

use std::io::Cursor;
use std::path::Path;

use dataset_util::{bin, png, write_input, InputSpec};
use parquet::file::reader::{FileReader, SerializedFileReader};
use verisample::dataset::reader::InputReader;

fn jpeg(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 7]));
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
    out.into_inner()
}

/// Overwrite every column chunk of row group `g` of the parquet file at `path` with `0xFF`
/// bytes (the footer stays readable).
fn damage_row_group(path: &Path, g: usize) {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let ranges: Vec<(u64, u64)> = reader
        .metadata()
        .row_group(g)
        .columns()
        .iter()
        .map(|c| c.byte_range())
        .collect();
    let mut bytes = std::fs::read(path).unwrap();
    for (start, len) in ranges {
        bytes[start as usize..(start + len) as usize].fill(0xFF);
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn inspect_names_unusable_images_and_damaged_row_groups_as_run_would() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("in.parquet");
    let whole = jpeg(16, 8);
    let truncated = whole[..whole.len() - 2].to_vec();
    let qa = [("What is written?", "1")];
    // Row groups of two rows: [good, truncated JPEG], [over the side limit, good], [damaged].
    let rows = [
        InputSpec::new(png(3, 2, 1), &qa),
        InputSpec::new(truncated, &qa),
        InputSpec::new(png(16_385, 1, 2), &qa),
        InputSpec::new(png(4, 4, 3), &qa),
        InputSpec::new(png(5, 5, 4), &qa),
        InputSpec::new(png(6, 6, 5), &qa),
    ];
    write_input(&file, &rows, 2);
    damage_row_group(&file, 2);

    // The reader of `run`: the damaged row group is one error for rows 4..6, the rest reads.
    let read: Vec<_> = InputReader::open(&file.to_string_lossy())
        .unwrap()
        .collect();
    let errors: Vec<_> = read.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(read.len(), 5, "{read:?}");
    assert_eq!(
        errors.iter().map(|e| (e.row, e.rows)).collect::<Vec<_>>(),
        [(Some(4), Some(2))]
    );

    let out = bin()
        .arg("inspect")
        .arg(&file)
        .args(["--rows", "10"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("1 row group(s) cannot be decoded, first row group 2 of"),
        "{stderr}"
    );
    let row = |i: usize| {
        let start = stdout
            .find(&format!("  row {i} (in.parquet, row {i}):"))
            .unwrap_or_else(|| panic!("row {i} not shown:\n{stdout}"));
        let rest = &stdout[start..];
        let image = rest.lines().find(|l| l.trim_start().starts_with("image:"));
        image.unwrap_or_default().to_string()
    };
    assert!(row(0).contains("3x2 Png"), "{}", row(0));
    assert!(
        row(1).contains("Jpeg, NOT USABLE: image.bytes: truncated JPEG"),
        "{}",
        row(1)
    );
    assert!(
        row(2).contains("Png, NOT USABLE: image.bytes: image too large (16385x1)"),
        "{}",
        row(2)
    );
    assert!(row(3).contains("4x4 Png"), "{}", row(3));
    assert!(
        stdout.contains("rows 4..6 (row group 2): UNREADABLE"),
        "{stdout}"
    );
    assert!(!stdout.contains("  row 4 ("), "{stdout}");
    assert!(
        !stdout.contains("cannot decode rows"),
        "the file is not unreadable: {stdout}"
    );
}

/// The exit status reports files, not rows (README): a shown row whose image is NOT USABLE
/// leaves it 0, whether or not the row is among those shown. Catches: the status changing
/// with `--rows`, or a row `run` only reports in `errors.jsonl` failing `inspect`.
#[test]
fn a_row_not_usable_leaves_the_exit_status_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("in.parquet");
    let whole = jpeg(16, 8);
    let qa = [("What is written?", "1")];
    let rows = [
        InputSpec::new(png(3, 2, 1), &qa),
        InputSpec::new(whole[..whole.len() - 2].to_vec(), &qa),
    ];
    write_input(&file, &rows, 2);
    for (shown, not_usable) in [("2", true), ("1", false)] {
        let out = bin()
            .arg("inspect")
            .arg(&file)
            .args(["--rows", shown])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "--rows {shown}: {stdout}");
        assert_eq!(
            stdout.contains("Jpeg, NOT USABLE: image.bytes: truncated JPEG"),
            not_usable,
            "--rows {shown}: {stdout}"
        );
    }
}
