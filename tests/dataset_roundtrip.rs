//! Output splits: writer → our reader round trip, layout, metadata and determinism.

mod dataset_util;

use std::path::Path;

use arrow::datatypes::DataType;
use parquet::file::reader::{FileReader, SerializedFileReader};
use verisample::dataset::card::{output_configs, scan_output_dir, write_card, CardSplit};
use verisample::dataset::features::huggingface_metadata;
use verisample::dataset::shards::{ShardOptions, CREATED_BY};
use verisample::dataset::writer::{
    read_accepted_split, read_rejected_split, split_files, split_schema, SplitWriter,
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
    w.finish().unwrap()
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
    assert_eq!(
        hf,
        huggingface_metadata(&split_schema(SplitKind::Think)).unwrap()
    );
    let v: serde_json::Value = serde_json::from_str(&hf).unwrap();
    assert_eq!(
        v["info"]["features"]["image"],
        serde_json::json!({"_type": "Image"})
    );
    assert!(v["info"]["features"]["qa"].is_array(), "list form: {hf}");
    assert_eq!(v["info"]["features"]["qa"][0]["think"]["dtype"], "string");
    // Arrow schema as stored: plain binary/string/list, image struct in bytes, path order.
    let arrow_schema = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&s.files[0]).unwrap(),
    )
    .unwrap()
    .schema()
    .clone();
    let want = split_schema(SplitKind::Think);
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
    let card = write_card(out, &output_configs(&from_writer), "OrandCar").unwrap();
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
