//! Output splits: writer → our reader round trip, layout, metadata and determinism.

mod dataset_util;

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema};
use parquet::file::reader::{FileReader, SerializedFileReader};
use verisample::dataset::card::{output_configs, scan_output_dir, write_card, CardSplit};
use verisample::dataset::shards::{ShardOptions, CREATED_BY};
use verisample::dataset::writer::{
    read_accepted_split, read_rejected_split, split_files, SplitWriter,
};
use verisample::record::{AcceptedQa, OutputRow, RejectedQa, SplitKind};

use dataset_util::{accepted_rows, rejected_rows};

fn write<Q: verisample::dataset::writer::QaRecord>(
    out: &Path,
    kind: SplitKind,
    rows: Vec<OutputRow<Q>>,
    opts: ShardOptions,
) -> verisample::dataset::shards::ShardSummary {
    let mut w = SplitWriter::<Q>::create(out, "OrandCar", kind, opts).unwrap();
    for r in rows {
        w.write_row(r).unwrap();
    }
    w.finish(|_| true).unwrap()
}

fn glob(out: &Path, split: &str) -> std::path::PathBuf {
    out.join(format!("data/{split}-*.parquet"))
}

#[test]
fn think_nothink_rejected_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let acc = accepted_rows(7);
    let rej = rejected_rows(5);
    let s_think = write(out, SplitKind::Think, acc.clone(), ShardOptions::default());
    let s_no = write(
        out,
        SplitKind::NoThink,
        acc.clone(),
        ShardOptions::default(),
    );
    let s_rej = write(
        out,
        SplitKind::Rejected,
        rej.clone(),
        ShardOptions::default(),
    );
    assert_eq!((s_think.num_rows, s_no.num_rows, s_rej.num_rows), (7, 7, 5));
    assert_eq!(
        s_think.files,
        vec![out.join("data/OrandCar_RS_think-00000-of-00001.parquet")]
    );

    assert_eq!(
        read_accepted_split(&glob(out, "OrandCar_RS_think")).unwrap(),
        acc
    );
    // The nothink split drops `think`: it reads back as None everywhere.
    let mut no_think = acc.clone();
    no_think
        .iter_mut()
        .flat_map(|r| r.qa.iter_mut())
        .for_each(|q| q.think = None);
    assert_eq!(
        read_accepted_split(&glob(out, "OrandCar_RS_nothink")).unwrap(),
        no_think
    );
    assert_eq!(
        read_rejected_split(&glob(out, "OrandCar_rejected")).unwrap(),
        rej
    );

    // The nothink file has no `think` field at all; the think file has it.
    let qa_names = |file: &Path| -> Vec<String> {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(file).unwrap(),
        )
        .unwrap();
        match r.schema().field_with_name("qa").unwrap().data_type() {
            DataType::List(item) => match item.data_type() {
                DataType::Struct(f) => f.iter().map(|f| f.name().clone()).collect(),
                other => panic!("{other}"),
            },
            other => panic!("{other}"),
        }
    };
    assert!(!qa_names(&s_no.files[0]).contains(&"think".to_string()));
    assert!(qa_names(&s_think.files[0]).contains(&"think".to_string()));
}

/// The `qa` fields of a think split, in column order (contract §7).
const THINK_QA_FIELDS: [&str; 8] = [
    "question",
    "answer",
    "org_answer",
    "vlm_answer",
    "think",
    "accepted_by",
    "judge_verdict",
    "judge_raw",
];

/// `datasets.Features({"image": Image(), "qa": List({name: Value("string") for name in
/// THINK_QA_FIELDS}), "clean_meta": Value("string"), "image_sha256": Value("string")}).to_dict()`
/// with datasets 5.2.0, printed by `json.dumps(..., separators=(",", ":"))`.
const DATASETS_THINK_FEATURES: &str = r#"{"image":{"_type":"Image"},"qa":{"feature":{"question":{"dtype":"string","_type":"Value"},"answer":{"dtype":"string","_type":"Value"},"org_answer":{"dtype":"string","_type":"Value"},"vlm_answer":{"dtype":"string","_type":"Value"},"think":{"dtype":"string","_type":"Value"},"accepted_by":{"dtype":"string","_type":"Value"},"judge_verdict":{"dtype":"string","_type":"Value"},"judge_raw":{"dtype":"string","_type":"Value"}},"_type":"List"},"clean_meta":{"dtype":"string","_type":"Value"},"image_sha256":{"dtype":"string","_type":"Value"}}"#;

/// The writer stores lists in the `[inner]` form that datasets 3.x also reads; datasets 4+
/// reads `[inner]` as `List(inner)`, i.e. `{"feature": inner, "_type": "List"}` (checked with
/// `Features.from_dict`). Rewrites the one form into the other, recursively.
fn as_datasets_reads_it(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Array(mut items) if items.len() == 1 => {
            serde_json::json!({"feature": as_datasets_reads_it(items.remove(0)), "_type": "List"})
        }
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, as_datasets_reads_it(v)))
                .collect(),
        ),
        other => other,
    }
}

#[test]
fn parquet_layout_and_metadata_match_datasets() {
    let dir = tempfile::tempdir().unwrap();
    let s = write(
        dir.path(),
        SplitKind::Think,
        accepted_rows(250),
        ShardOptions::default(),
    );
    let reader = SerializedFileReader::new(std::fs::File::open(&s.files[0]).unwrap()).unwrap();
    let meta = reader.metadata();
    let groups: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(groups, [100, 100, 50]);
    assert_eq!(meta.file_metadata().created_by(), Some(CREATED_BY));
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    let hf = kv
        .iter()
        .find(|k| k.key == "huggingface")
        .and_then(|k| k.value.clone())
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&hf).unwrap();
    // The features are what `datasets` itself describes for these columns. Catches: a wrong
    // feature type, a missing or extra field, an image column not typed `Image`.
    assert!(v["info"]["features"]["qa"].is_array(), "list form: {hf}");
    assert_eq!(
        as_datasets_reads_it(v["info"]["features"].clone()),
        serde_json::from_str::<serde_json::Value>(DATASETS_THINK_FEATURES).unwrap()
    );
    // datasets matches the metadata's struct against the Arrow struct field by field, in
    // order, and silently ignores the metadata on any difference: the `qa` fields must be
    // listed in the column order (the comparison above cannot see key order). Catches:
    // metadata written from a sorted map.
    let at = |name: &str| {
        hf.find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("no {name} in {hf}"))
    };
    let positions: Vec<usize> = THINK_QA_FIELDS.iter().map(|n| at(n)).collect();
    assert!(positions.is_sorted(), "qa fields out of column order: {hf}");
    // Arrow schema as stored: plain binary/string/list, image struct in bytes, path order.
    let arrow_schema = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&s.files[0]).unwrap(),
    )
    .unwrap()
    .schema()
    .clone();
    // The Arrow schema `Features.arrow_schema` gives for the features above (all nullable;
    // the list item is named `item`). Catches: a column type or order that datasets would
    // not match with its metadata (it then silently drops the `Image` feature).
    let utf8 = |n: &str| Field::new(n, DataType::Utf8, true);
    let image = DataType::Struct(Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        utf8("path"),
    ]));
    let item = DataType::Struct(THINK_QA_FIELDS.into_iter().map(utf8).collect());
    let want = Schema::new(vec![
        Field::new("image", image, true),
        Field::new(
            "qa",
            DataType::List(Arc::new(Field::new("item", item, true))),
            true,
        ),
        utf8("clean_meta"),
        utf8("image_sha256"),
    ]);
    assert_eq!(arrow_schema.fields(), want.fields());
    assert_eq!(arrow_schema.metadata().get("huggingface"), Some(&hf));
}

#[test]
fn same_rows_give_same_bytes() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let sa = write(
        a.path(),
        SplitKind::Rejected,
        rejected_rows(30),
        ShardOptions::default(),
    );
    let sb = write(
        b.path(),
        SplitKind::Rejected,
        rejected_rows(30),
        ShardOptions::default(),
    );
    assert_eq!(sa.files.len(), 1);
    assert_eq!(
        std::fs::read(&sa.files[0]).unwrap(),
        std::fs::read(&sb.files[0]).unwrap()
    );
    let rows_a = read_rejected_split(&sa.files[0]).unwrap();
    let mut other = rejected_rows(30);
    other[3].qa[0].wrong_vlm.push('x');
    let sc = write(
        b.path(),
        SplitKind::Rejected,
        other,
        ShardOptions::default(),
    );
    assert_ne!(
        std::fs::read(&sa.files[0]).unwrap(),
        std::fs::read(&sc.files[0]).unwrap()
    );
    assert_eq!(rows_a.len(), 30);
}

#[test]
fn size_bounded_shards_and_stale_shards_removed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    // A 1-byte bound closes a shard after every row group: 25 rows / 10 per group = 3 shards.
    let tiny = ShardOptions {
        max_shard_bytes: 1,
        rows_per_group: 10,
    };
    let rows = accepted_rows(25);
    let s = write(out, SplitKind::Think, rows.clone(), tiny);
    let names: Vec<String> = s
        .files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "OrandCar_RS_think-00000-of-00003.parquet",
            "OrandCar_RS_think-00001-of-00003.parquet",
            "OrandCar_RS_think-00002-of-00003.parquet"
        ]
    );
    assert_eq!(read_accepted_split(&out.join("data")).unwrap(), rows);
    // Rewriting with one shard removes the three old ones; nothing temporary is left.
    let s2 = write(
        out,
        SplitKind::Think,
        rows[..4].to_vec(),
        ShardOptions::default(),
    );
    assert_eq!(split_files(out, "OrandCar_RS_think").unwrap(), s2.files);
    let all: Vec<String> = std::fs::read_dir(out.join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(all, ["OrandCar_RS_think-00000-of-00001.parquet"]);
}

#[test]
fn empty_split_still_has_a_readable_shard() {
    let dir = tempfile::tempdir().unwrap();
    let s = write::<RejectedQa>(
        dir.path(),
        SplitKind::Rejected,
        Vec::new(),
        ShardOptions::default(),
    );
    assert_eq!(s.num_rows, 0);
    assert_eq!(s.files.len(), 1);
    assert!(read_rejected_split(&s.files[0]).unwrap().is_empty());
}

#[test]
fn writer_refuses_inconsistent_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SplitWriter::<AcceptedQa>::create(
        dir.path(),
        "OrandCar",
        SplitKind::Think,
        ShardOptions::default(),
    )
    .unwrap();
    let mut bad_sha = accepted_rows(1).remove(0);
    bad_sha.image_sha256 = "00".repeat(32);
    assert!(w
        .write_row(bad_sha)
        .unwrap_err()
        .to_string()
        .contains("is not the hash"));
    let mut no_qa = accepted_rows(1).remove(0);
    no_qa.qa.clear();
    assert!(w
        .write_row(no_qa)
        .unwrap_err()
        .to_string()
        .contains("no qa entries"));
    let mut bad_meta = accepted_rows(1).remove(0);
    bad_meta.clean_meta = "policy=x".into();
    assert!(w
        .write_row(bad_meta)
        .unwrap_err()
        .to_string()
        .contains("clean_meta"));
    let mut no_bytes = accepted_rows(1).remove(0);
    no_bytes.image.bytes = None;
    assert!(w
        .write_row(no_bytes)
        .unwrap_err()
        .to_string()
        .contains("without image bytes"));
}

#[test]
fn card_describes_the_written_splits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let s1 = write(
        out,
        SplitKind::Think,
        accepted_rows(4),
        ShardOptions::default(),
    );
    let s2 = write(
        out,
        SplitKind::Rejected,
        rejected_rows(2),
        ShardOptions::default(),
    );
    let from_writer: Vec<CardSplit> = [&s1, &s2].into_iter().map(CardSplit::from).collect();
    // Scanning the folder (as merge does) finds the same numbers as the writer reported.
    let mut scanned = scan_output_dir(out).unwrap();
    scanned.sort_by(|a, b| a.name.cmp(&b.name));
    let mut expected = from_writer.clone();
    expected.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(scanned, expected);
    let card = write_card(out, &output_configs(&from_writer), "OrandCar", "").unwrap();
    let text = std::fs::read_to_string(card).unwrap();
    assert!(
        text.contains(&format!(
            "  - name: OrandCar_RS_think\n    num_bytes: {}\n    num_examples: 4\n",
            s1.num_bytes
        )),
        "{text}"
    );
    assert!(
        text.contains("    path: data/OrandCar_rejected-*\n"),
        "{text}"
    );
}
