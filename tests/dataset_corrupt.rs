//! A corrupt parquet file never ends the run. Byte flips, truncations and
//! insertions into a valid input file, from a fixed seed: reading never panics or hangs, a
//! decoder panic becomes an error of its file or row group (`decoder panicked: …`), and every
//! row of a row group the corruption did not touch still comes through unchanged. `inspect`
//! and the split reader of `verify`/`merge` survive the same files.

mod dataset_util;

use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::read_accepted_split;
use verisample::record::{InputRow, RowError};

use dataset_util::{png, write_input, InputSpec};

const ROWS: usize = 48;
const ROWS_PER_GROUP: usize = 12;
const CASES: usize = 3000;

fn read_all(path: &Path) -> Vec<Result<InputRow, RowError>> {
    InputReader::open(&path.to_string_lossy())
        .expect("open")
        .collect()
}

/// Byte range `[start, end)` of each row group's column chunks in `bytes` (a parquet file).
fn group_ranges(path: &Path) -> Vec<(usize, usize)> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    reader
        .metadata()
        .row_groups()
        .iter()
        .map(|g| {
            let ranges = g.columns().iter().map(|c| c.byte_range());
            let start = ranges.clone().map(|(s, _)| s).min().unwrap();
            let end = ranges.map(|(s, l)| s + l).max().unwrap();
            (start as usize, end as usize)
        })
        .collect()
}

/// The span of all row groups' pages.
fn pages(ranges: &[(usize, usize)]) -> (usize, usize) {
    (ranges[0].0, ranges[ranges.len() - 1].1)
}

enum Damage {
    Flip(Vec<usize>),
    Truncate,
    Insert,
}

/// One seeded corruption of `original`: flips (most of them inside the row groups' pages,
/// `pages`, where the decoders work), a truncation, or inserted bytes.
fn corrupt(rng: &mut TestRng, original: &[u8], pages: (usize, usize)) -> (Vec<u8>, Damage) {
    let mut bytes = original.to_vec();
    let at = |rng: &mut TestRng, n: usize| (rng.next_u64() % n as u64) as usize;
    match rng.next_u64() % 4 {
        0 | 1 => {
            let flips = 1 + at(rng, 4);
            let offsets: Vec<usize> = (0..flips)
                .map(|_| match at(rng, 8) {
                    0 => at(rng, bytes.len()),
                    _ => pages.0 + at(rng, pages.1 - pages.0),
                })
                .collect();
            for &o in &offsets {
                bytes[o] ^= 1 + (rng.next_u64() % 255) as u8;
            }
            (bytes, Damage::Flip(offsets))
        }
        2 => {
            bytes.truncate(at(rng, bytes.len()));
            (bytes, Damage::Truncate)
        }
        _ => {
            let o = at(rng, bytes.len());
            let n = 1 + at(rng, 16);
            let noise: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            bytes.splice(o..o, noise);
            (bytes, Damage::Insert)
        }
    }
}

#[test]
fn seeded_corruption_never_panics_and_keeps_every_untouched_row() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.parquet");
    write_input(&good, &input_rows(), ROWS_PER_GROUP);
    let original = std::fs::read(&good).unwrap();
    let ranges = group_ranges(&good);
    assert_eq!(ranges.len(), ROWS / ROWS_PER_GROUP);
    let want: Vec<InputRow> = read_all(&good).into_iter().map(Result::unwrap).collect();
    assert_eq!(want.len(), ROWS);

    let bad = tmp.path().join("bad.parquet");
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[16; 32]);
    let (mut panics, mut checked_groups) = (0usize, 0usize);
    let started = std::time::Instant::now();
    for case in 0..CASES {
        let (bytes, damage) = corrupt(&mut rng, &original, pages(&ranges));
        std::fs::write(&bad, &bytes).unwrap();
        let got = read_all(&bad);
        let mut ok = vec![None; ROWS];
        for item in &got {
            match item {
                Ok(r) => {
                    assert!(r.row_index < ROWS, "case {case}: row {}", r.row_index);
                    assert!(ok[r.row_index].is_none(), "case {case}: row twice");
                    ok[r.row_index] = Some(r);
                }
                Err(e) => {
                    panics += usize::from(e.message.contains("decoder panicked"));
                    assert!(e.file.ends_with("bad.parquet"), "case {case}: {e:?}");
                }
            }
        }
        // Flips inside one row group's data: every other row group reads back unchanged.
        let Damage::Flip(offsets) = damage else {
            continue;
        };
        let hit: Vec<usize> = ranges
            .iter()
            .enumerate()
            .filter(|(_, (s, e))| offsets.iter().any(|o| (s..e).contains(&o)))
            .map(|(g, _)| g)
            .collect();
        let in_data = offsets
            .iter()
            .all(|o| ranges.iter().any(|(s, e)| (s..e).contains(&o)));
        if !in_data {
            continue;
        }
        for g in (0..ranges.len()).filter(|g| !hit.contains(g)) {
            checked_groups += 1;
            for i in g * ROWS_PER_GROUP..(g + 1) * ROWS_PER_GROUP {
                let row = ok[i].unwrap_or_else(|| panic!("case {case}: row {i} of group {g} lost"));
                assert_eq!(row.image.bytes, want[i].image.bytes, "case {case} row {i}");
                assert_eq!(row.qa, want[i].qa, "case {case} row {i}");
            }
        }
    }
    assert!(
        checked_groups > CASES / 4,
        "{checked_groups} untouched groups checked"
    );
    println!("{panics} decoder panics isolated, {checked_groups} untouched row groups checked");
    assert!(
        panics > 0,
        "the seed should reach a decoder panic (isolated into an error)"
    );
    assert!(
        started.elapsed().as_secs() < 120,
        "{CASES} cases took {:?}",
        started.elapsed()
    );
}

/// Rows whose strings repeat, so the writer dictionary-encodes them (the page type that
/// panicked).
fn input_rows() -> Vec<InputSpec> {
    (0..ROWS)
        .map(|i| {
            InputSpec::new(
                png(3, 2, (i % 5) as u8),
                &[("What is written in the image?", ["12", "345", "6"][i % 3])],
            )
        })
        .collect()
}

/// Write the seeded corruptions of the file `good` to `path` one after the other until
/// `broke` holds for one; `false` when none of [`CASES`] does.
fn first_corruption(good: &Path, path: &Path, broke: impl Fn(&Path) -> bool) -> bool {
    let original = std::fs::read(good).unwrap();
    let pages = pages(&group_ranges(good));
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[16; 32]);
    (0..CASES).any(|_| {
        let (bytes, _) = corrupt(&mut rng, &original, pages);
        std::fs::write(path, &bytes).unwrap();
        broke(path)
    })
}

#[test]
fn inspect_and_the_split_readers_of_verify_and_merge_survive_a_panicking_file() {
    use verisample::dataset::DatasetError;
    let tmp = tempfile::tempdir().unwrap();
    // An input file on which the decoder panics: `inspect` lists it as unreadable.
    let good = tmp.path().join("good.parquet");
    write_input(&good, &input_rows(), ROWS_PER_GROUP);
    let bad = tmp.path().join("bad.parquet");
    let input_panics = |p: &Path| {
        read_all(p).iter().any(|r| {
            r.as_ref()
                .is_err_and(|e| e.message.contains("decoder panicked"))
        })
    };
    assert!(first_corruption(&good, &bad, input_panics));
    let found =
        verisample::dataset::inspect::inspect(&bad.to_string_lossy(), ROWS, &|_| Ok((1, 1)))
            .unwrap();
    // The panic fails its row group (the reader's error names rows, not the file), or the
    // whole file when it is in the footer.
    let named = found.unreadable.contains(&bad) || found.damaged.iter().any(|(f, _)| f == &bad);
    assert!(named, "{}", found.text);
    let out = dataset_util::bin()
        .arg("inspect")
        .arg(&bad)
        .args(["--rows", &ROWS.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("decoder panicked"), "{stdout}");

    // The same bytes as an output split: the split reader of `verify` and the card scan of
    // `merge` report it as corrupt (both decode every row group).
    let run_out = tmp.path().join("out");
    std::fs::create_dir_all(run_out.join("data")).unwrap();
    let split = run_out.join("data/TestSet_RS_think-00000-of-00001.parquet");
    std::fs::copy(&bad, &split).unwrap();
    let err = read_accepted_split(&split).unwrap_err();
    assert!(matches!(err, DatasetError::Corrupt { .. }), "{err}");
    let card = verisample::dataset::card::scan_output_dir(&run_out).unwrap_err();
    assert!(card.to_string().contains("decoder panicked"), "{card}");
}
