//! Unit tests of the row reader: pages across row groups and splits, what a page reads,
//! filters and search, images by row, folders that are no output.

use super::*;
use crate::dataset::shards::ShardOptions;
use crate::dataset::writer::{sha256_hex, QaRecord, SplitWriter};
use crate::record::{AcceptedQa, ImageRef, OutputRow, RejectedQa};

/// Fake image bytes of row `i` (a PNG signature, then the row).
pub(in crate::view) fn image(i: usize) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend(format!("row {i}").bytes());
    b
}

fn row<Q>(i: usize, qa: Vec<Q>) -> OutputRow<Q> {
    let bytes = image(i);
    OutputRow {
        image_sha256: sha256_hex(&bytes),
        image: ImageRef {
            bytes: Some(bytes),
            path: Some(format!("img_{i}.png")),
        },
        qa,
        clean_meta: format!("{{\"row_index\":{i}}}"),
        carried: None,
    }
}

fn write<Q: QaRecord>(out: &Path, kind: SplitKind, rows: Vec<OutputRow<Q>>) {
    let opts = ShardOptions {
        rows_per_group: 10,
        ..ShardOptions::default()
    };
    let mut w = SplitWriter::<Q>::create(out, "Fam", kind, opts).unwrap();
    for r in rows {
        w.write_row(r).unwrap();
    }
    w.finish(|_| true).unwrap();
}

/// An output of family `Fam`: 35 think rows (row groups of 10: 10, 10, 10, 5) whose
/// every third row was accepted by the judge, and 12 rejected rows, even ones
/// `wrong_answer`, odd ones `judge_unsure`.
pub(in crate::view) fn output() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let accepted = |i: usize| AcceptedQa {
        question: format!("q{i}"),
        answer: format!("a{i}"),
        org_answer: format!("a{i}"),
        vlm_answer: format!("a{i}"),
        think: Some(format!("thinking about <b>{i}</b>")),
        accepted_by: if i.is_multiple_of(3) {
            "judge"
        } else {
            "verifier:alnum:whole"
        }
        .into(),
        judge_verdict: i.is_multiple_of(3).then(|| "CORRECT".into()),
        judge_raw: None,
    };
    write(
        tmp.path(),
        SplitKind::Think,
        (0..35).map(|i| row(i, vec![accepted(i)])).collect(),
    );
    let rejected = |i: usize| RejectedQa {
        question: format!("q{i}"),
        answer: "11850".into(),
        wrong_vlm: format!("w{i}"),
        reason: if i.is_multiple_of(2) {
            "wrong_answer"
        } else {
            "judge_unsure"
        }
        .into(),
        judge_verdict: Some(
            if i.is_multiple_of(2) {
                "WRONG"
            } else {
                "UNSURE"
            }
            .into(),
        ),
        judge_raw: Some("<think>x</think>WRONG".into()),
    };
    write(
        tmp.path(),
        SplitKind::Rejected,
        (100..112).map(|i| row(i, vec![rejected(i)])).collect(),
    );
    tmp
}

fn rows_of(page: &RowsPage) -> Vec<(String, u64)> {
    page.rows.iter().map(|r| (r.split.clone(), r.row)).collect()
}

#[test]
fn splits_come_from_the_footers_in_family_then_kind_order() {
    let out = output();
    let rows = OutputRows::open(out.path()).unwrap();
    let splits: Vec<(String, &str, u64)> = rows
        .splits()
        .into_iter()
        .map(|s| (s.name, s.kind, s.rows))
        .collect();
    assert_eq!(
        splits,
        [
            ("Fam_RS_think".to_string(), "think", 35),
            ("Fam_rejected".to_string(), "rejected", 12)
        ]
    );
}

#[test]
fn a_page_across_row_groups_reads_only_the_groups_it_shows() {
    let out = output();
    let rows = OutputRows::open(out.path()).unwrap();
    // The first page: rows 0..7 of the think split, from its first row group only.
    let q = RowQuery {
        per_page: 7,
        ..RowQuery::default()
    };
    let first = rows.page(&q).unwrap();
    assert_eq!(first.rows.len(), 7);
    assert_eq!((first.row_groups_read, first.rows_read), (1, 7));
    assert_eq!((first.total, first.more), (Some(47), true));
    // Rows 14..28 span row groups 1 and 2.
    let q = RowQuery {
        page: 1,
        per_page: 14,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    let want: Vec<(String, u64)> = (14..28).map(|i| ("Fam_RS_think".to_string(), i)).collect();
    assert_eq!(rows_of(&p), want);
    assert_eq!((p.row_groups_read, p.rows_read), (2, 14));
    let r = &p.rows[0];
    assert_eq!(r.qa[0]["question"].as_deref(), Some("q14"));
    assert_eq!(
        r.qa[0]["think"].as_deref(),
        Some("thinking about <b>14</b>")
    );
    assert_eq!(r.image_path.as_deref(), Some("img_14.png"));
    assert_eq!(r.clean_meta.as_deref(), Some("{\"row_index\":14}"));
    assert_eq!(
        r.image_sha256.as_deref(),
        Some(sha256_hex(&image(14)).as_str())
    );
    // Across the end of one split into the next: rows 30..34 of think, 0..5 of rejected.
    let q = RowQuery {
        page: 3,
        per_page: 10,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    let mut want: Vec<(String, u64)> = (30..35).map(|i| ("Fam_RS_think".into(), i)).collect();
    want.extend((0..5).map(|i| ("Fam_rejected".into(), i)));
    assert_eq!(rows_of(&p), want);
    assert_eq!(p.rows[5].qa[0]["question"].as_deref(), Some("q100"));
    assert_eq!(p.row_groups_read, 2);
    // Past the end: nothing, and the total.
    let q = RowQuery {
        page: 9,
        per_page: 10,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    assert_eq!(
        (p.rows.len(), p.total, p.more, p.row_groups_read),
        (0, Some(47), false, 0)
    );
}

#[test]
fn split_and_family_filters_count_from_the_footers() {
    let out = output();
    let rows = OutputRows::open(out.path()).unwrap();
    let q = RowQuery {
        split: Some("Fam_rejected".into()),
        page: 1,
        per_page: 5,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    let want: Vec<(String, u64)> = (5..10).map(|i| ("Fam_rejected".into(), i)).collect();
    assert_eq!(rows_of(&p), want);
    assert_eq!((p.total, p.more), (Some(12), true));
    let q = RowQuery {
        family: Some("Other".into()),
        ..RowQuery::default()
    };
    assert_eq!(rows.page(&q).unwrap().total, Some(0));
}

#[test]
fn entry_filters_and_text_scan_and_stop_once_the_page_is_full() {
    let out = output();
    let rows = OutputRows::open(out.path()).unwrap();
    // judge-accepted think rows: 0, 3, ..., 33 (12 of them); the rejected split is not
    // read (it has no accepted_by).
    let q = RowQuery {
        accepted_by: Some("judge".into()),
        per_page: 4,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    let want: Vec<(String, u64)> = [0, 3, 6, 9].map(|i| ("Fam_RS_think".into(), i)).to_vec();
    assert_eq!(rows_of(&p), want);
    assert_eq!((p.total, p.more), (None, true), "stopped early: no total");
    assert_eq!(p.row_groups_read, 2, "the 5th match (12) is in row group 1");
    let q = RowQuery {
        accepted_by: Some("judge".into()),
        page: 2,
        per_page: 5,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    let want: Vec<(String, u64)> = [30, 33].map(|i| ("Fam_RS_think".into(), i)).to_vec();
    assert_eq!(rows_of(&p), want);
    assert_eq!((p.total, p.more), (Some(12), false));
    assert_eq!(p.row_groups_read, 4, "only the think split");
    // Two entry filters hold on the same entry.
    let q = RowQuery {
        reason: Some("judge_unsure".into()),
        verdict: Some("UNSURE".into()),
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    assert_eq!(p.total, Some(6));
    assert!(p
        .rows
        .iter()
        .all(|r| r.row % 2 == 1 && r.split == "Fam_rejected"));
    let q = RowQuery {
        reason: Some("judge_unsure".into()),
        verdict: Some("WRONG".into()),
        ..RowQuery::default()
    };
    assert_eq!(rows.page(&q).unwrap().total, Some(0));
    // Text: case-insensitive, in any field.
    let q = RowQuery {
        text: Some("W105".into()),
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    assert_eq!(rows_of(&p), [("Fam_rejected".to_string(), 5)]);
    let q = RowQuery {
        text: Some("IMG_3.PNG".into()),
        split: Some("Fam_RS_think".into()),
        ..RowQuery::default()
    };
    assert_eq!(
        rows_of(&rows.page(&q).unwrap()),
        [("Fam_RS_think".to_string(), 3)]
    );
}

#[test]
fn an_image_is_addressed_by_split_and_row() {
    let out = output();
    let rows = OutputRows::open(out.path()).unwrap();
    assert_eq!(rows.image("Fam_RS_think", 27).unwrap(), Some(image(27)));
    assert_eq!(rows.image("Fam_rejected", 11).unwrap(), Some(image(111)));
    assert_eq!(rows.image("Fam_rejected", 12).unwrap(), None);
    assert_eq!(rows.image("../data/Fam_rejected", 0).unwrap(), None);
    assert_eq!(rows.image("Nope_RS_think", 0).unwrap(), None);
}

#[test]
fn a_folder_that_is_no_output_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let err = |p: &Path| match OutputRows::open(p) {
        Err(RowsError::NotOutput { why, .. }) => why,
        other => panic!("{other:?}"),
    };
    assert!(err(&tmp.path().join("missing")).contains("no such folder"));
    assert!(err(tmp.path()).contains("no data/ folder"));
    std::fs::create_dir(tmp.path().join("data")).unwrap();
    std::fs::write(tmp.path().join("data/notes.parquet"), b"x").unwrap();
    assert!(err(tmp.path()).contains("no split files"));
}

/// Split `Extra_rejected`: `Fam_rejected`'s rows with two more columns, as a run carrying
/// input columns writes them: `source_id` (row × 10) and `notes` (3,000 characters on row 2).
fn add_extra_split(out: &Path) {
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use std::sync::Arc;
    let data = out.join("data");
    let file = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("Fam_rejected-"))
        .unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let n = batch.num_rows();
    let mut columns: Vec<(String, ArrayRef)> = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| (f.name().clone(), Arc::clone(c)))
        .collect();
    columns.push((
        "source_id".into(),
        Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 10))),
    ));
    columns.push((
        "notes".into(),
        Arc::new(StringArray::from_iter_values((0..n).map(|i| {
            if i == 2 {
                "n".repeat(3000)
            } else {
                format!("note {i} <b>bold</b>")
            }
        }))),
    ));
    let extended = RecordBatch::try_from_iter(columns).unwrap();
    let out_file =
        std::fs::File::create(data.join("Extra_rejected-00000-of-00001.parquet")).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(out_file, extended.schema(), None).unwrap();
    w.write(&extended).unwrap();
    w.close().unwrap();
}

#[test]
fn other_columns_are_shown_by_name_and_searched() {
    let out = output();
    add_extra_split(out.path());
    let rows = OutputRows::open(out.path()).unwrap();
    let q = RowQuery {
        split: Some("Extra_rejected".into()),
        per_page: 3,
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    assert_eq!(p.total, Some(12));
    let extra = &p.rows[1].extra;
    assert_eq!(
        extra,
        &[
            ("source_id".to_string(), serde_json::json!(10)),
            ("notes".to_string(), serde_json::json!("note 1 <b>bold</b>")),
        ]
    );
    let long = p.rows[2].extra[1].1.as_str().unwrap();
    assert!(
        long.ends_with("… (3002 characters in all)"),
        "{}",
        &long[1990..]
    );
    assert_eq!(p.rows[1].qa[0]["question"].as_deref(), Some("q101"));
    let q = RowQuery {
        text: Some("NOTE 7 <B>".into()),
        ..RowQuery::default()
    };
    let p = rows.page(&q).unwrap();
    assert_eq!(rows_of(&p), [("Extra_rejected".to_string(), 7)]);
    assert_eq!(rows.image("Extra_rejected", 7).unwrap(), Some(image(107)));
}
