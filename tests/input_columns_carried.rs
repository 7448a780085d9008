//! The input's own columns travel with each row into every split (issue 42 part 2), through
//! the real binary and the bundled model: an int64 id, a float, a bool, a string with nulls,
//! a list and a struct come out as columns of the same types after the split's own, each split
//! row holding its input row's values (joined back by id); a column one file lacks is null in
//! its rows; the card's features name the types; `verify` passes; `--input-columns drop`
//! leaves them out; a column named like a split column, or typed differently in two files, is
//! refused before the model loads, naming the file, the column and the flag; a rerun with the
//! flag changed is refused naming it; `prepare --labels` writes JSON numbers as numbers, which
//! `run` then carries as such.

#[path = "dataset_util/mod.rs"]
mod dataset_util;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray,
    RecordBatch, StringArray, StructArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use dataset_util::{bin, check, png, repo};
use verisample::dataset::writer::sha256_hex;

/// The rows of one input file: ids `first..first + n`, each row's values derived from its id.
struct Rows {
    first: i64,
    n: usize,
    /// Write the `tags` column (list of strings).
    tags: bool,
    /// The `id` column as strings instead of int64 (a file typed differently).
    id_as_text: bool,
    /// An extra column named `clean_meta`.
    clashing: bool,
}

impl Rows {
    fn new(first: i64, n: usize) -> Rows {
        Rows {
            first,
            n,
            tags: true,
            id_as_text: false,
            clashing: false,
        }
    }
}

/// What the input holds for id `id`: score, ok, note.
fn score(id: i64) -> f64 {
    id as f64 * 0.25 + 0.125
}
fn ok(id: i64) -> bool {
    id % 3 == 0
}
fn note(id: i64) -> Option<String> {
    (id % 2 == 0).then(|| format!("note {id} — ✓"))
}
fn tags(id: i64) -> Vec<String> {
    (0..id % 3).map(|k| format!("t{k}")).collect()
}

/// The image of id `id` (distinct bytes per id).
fn image(id: i64) -> Vec<u8> {
    png(20 + (id % 4) as u32, 12, id as u8)
}

/// Write `rows` as an input parquet file in contract §2's layout (`image`, `qa`) with the
/// columns to carry: `id`, `score`, `ok`, `note`, `tags` (unless left out) and `meta`
/// (struct{a: int32}).
fn write_input(path: &Path, rows: &Rows) {
    let ids: Vec<i64> = (rows.first..rows.first + rows.n as i64).collect();
    let image_fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let images: Vec<Vec<u8>> = ids.iter().map(|&id| image(id)).collect();
    let image: ArrayRef = Arc::new(StructArray::new(
        image_fields,
        vec![
            Arc::new(BinaryArray::from_iter_values(images.iter())),
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|id| format!("img{id}.png")),
            )),
        ],
        None,
    ));
    let qa_fields = Fields::from(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("answer", DataType::Utf8, true),
    ]);
    let values = StructArray::new(
        qa_fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|_| "What number is written?"),
            )),
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|id| id.to_string()),
            )),
        ],
        None,
    );
    let qa: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(qa_fields), true)),
        OffsetBuffer::from_lengths(ids.iter().map(|_| 1)),
        Arc::new(values),
        None,
    ));
    let id: ArrayRef = if rows.id_as_text {
        Arc::new(StringArray::from_iter_values(
            ids.iter().map(|i| i.to_string()),
        ))
    } else {
        Arc::new(Int64Array::from(ids.clone()))
    };
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        ("image", image),
        ("qa", qa),
        ("id", id),
        (
            "score",
            Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|&i| score(i)),
            )),
        ),
        (
            "ok",
            Arc::new(BooleanArray::from_iter(ids.iter().map(|&i| Some(ok(i))))),
        ),
        (
            "note",
            Arc::new(StringArray::from_iter(ids.iter().map(|&i| note(i)))),
        ),
    ];
    if rows.tags {
        let mut b = arrow::array::ListBuilder::new(arrow::array::StringBuilder::new());
        for &i in &ids {
            for t in tags(i) {
                b.values().append_value(t);
            }
            b.append(true);
        }
        columns.push(("tags", Arc::new(b.finish())));
    }
    let meta = StructArray::new(
        Fields::from(vec![Field::new("a", DataType::Int32, true)]),
        vec![Arc::new(Int32Array::from_iter_values(
            ids.iter().map(|&i| i as i32 * 10),
        ))],
        None,
    );
    columns.push(("meta", Arc::new(meta)));
    if rows.clashing {
        columns.push((
            "clean_meta",
            Arc::new(StringArray::from_iter_values(ids.iter().map(|_| "{}"))),
        ));
    }
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// `verisample run` of the bundled model over `data` into `out`, with `extra` flags.
fn run(data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .current_dir(repo())
        .args(["-q", "run", "--data"])
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// Every split file of `out` and its batches (one per file, concatenated).
fn splits(out: &Path) -> Vec<(String, RecordBatch)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&f).unwrap())
                .unwrap()
                .build()
                .unwrap();
            let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
            let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            (name, batch)
        })
        .collect()
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> &'a T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| {
            panic!(
                "column {name} is {}",
                batch.schema().field_with_name(name).unwrap().data_type()
            )
        })
}

#[test]
fn the_inputs_columns_travel_with_every_row_typed_as_in_the_input() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Two files: the second lacks `tags`, so its rows carry a null there.
    write_input(&data.join("a.parquet"), &Rows::new(100, 5));
    let no_tags = Rows {
        tags: false,
        ..Rows::new(200, 4)
    };
    write_input(&data.join("b.parquet"), &no_tags);
    let out = tmp.path().join("out");
    check(run(&data, &out, &[]), "run");

    let list_of_strings = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
    let meta = DataType::Struct(Fields::from(vec![Field::new("a", DataType::Int32, true)]));
    let mut seen = std::collections::BTreeSet::new();
    let found = splits(&out);
    assert!(!found.is_empty());
    for (name, batch) in &found {
        let schema = batch.schema();
        let columns: Vec<(&str, &DataType)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type()))
            .skip(4)
            .collect();
        assert_eq!(
            columns,
            [
                ("id", &DataType::Int64),
                ("score", &DataType::Float64),
                ("ok", &DataType::Boolean),
                ("note", &DataType::Utf8),
                ("tags", &list_of_strings),
                ("meta", &meta),
            ],
            "{name}"
        );
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names[..4], ["image", "qa", "clean_meta", "image_sha256"]);
        // Each split row holds its own input row's values: joined back by id, the image is
        // that id's and every value the one the input has for it.
        let id = column::<Int64Array>(batch, "id");
        let sha = column::<StringArray>(batch, "image_sha256");
        let scores = column::<Float64Array>(batch, "score");
        let oks = column::<BooleanArray>(batch, "ok");
        let notes = column::<StringArray>(batch, "note");
        let tag_lists = column::<ListArray>(batch, "tags");
        let metas = column::<StructArray>(batch, "meta");
        let meta_a = metas
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        for r in 0..batch.num_rows() {
            let i = id.value(r);
            seen.insert(i);
            assert_eq!(
                sha.value(r),
                sha256_hex(&image(i)),
                "{name} row {r}: id {i}"
            );
            assert_eq!(scores.value(r), score(i), "{name} row {r}");
            assert_eq!(oks.value(r), ok(i), "{name} row {r}");
            assert_eq!(
                (!notes.is_null(r)).then(|| notes.value(r).to_string()),
                note(i),
                "{name} row {r}"
            );
            if i >= 200 {
                assert!(
                    tag_lists.is_null(r),
                    "{name} row {r}: b.parquet has no tags"
                );
            } else {
                let got = tag_lists.value(r);
                let got = got.as_any().downcast_ref::<StringArray>().unwrap();
                let got: Vec<&str> = (0..got.len()).map(|k| got.value(k)).collect();
                assert_eq!(got, tags(i), "{name} row {r}");
            }
            assert_eq!(meta_a.value(r), i as i32 * 10, "{name} row {r}");
        }
    }
    // Every input row is in a split (the model accepts or rejects each question).
    let want: std::collections::BTreeSet<i64> = (100..105).chain(200..204).collect();
    assert_eq!(seen, want);

    // The card's features name the carried types, so `datasets` loads them as such.
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    for feature in [
        "  - name: id\n    dtype: int64\n",
        "  - name: score\n    dtype: float64\n",
        "  - name: ok\n    dtype: bool\n",
        "  - name: tags\n    list: string\n",
        "  - name: meta\n    struct:\n    - name: a\n      dtype: int32\n",
    ] {
        assert!(card.contains(feature), "{feature:?} missing:\n{card}");
    }
    // `verify` checks the carried values against the input, and they are its.
    let v = bin().arg("verify").arg(&out).output().unwrap();
    let text = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(0), "{text}");

    // A rerun into the same folder with the flag changed is refused, naming it.
    let again = run(&data, &out, &["--input-columns", "drop"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--input-columns changed: keep → drop"),
        "{stderr}"
    );

    // `--input-columns drop`: only the split's own columns.
    let dropped = tmp.path().join("dropped");
    check(
        run(&data, &dropped, &["--input-columns", "drop"]),
        "run drop",
    );
    for (name, batch) in splits(&dropped) {
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            ["image", "qa", "clean_meta", "image_sha256"],
            "{name}"
        );
    }
    let run_json = std::fs::read_to_string(dropped.join("run.json")).unwrap();
    assert!(
        run_json.contains("\"input_columns\": \"drop\""),
        "{run_json}"
    );
}

#[test]
fn columns_that_cannot_be_carried_are_refused_before_the_model_loads() {
    let tmp = tempfile::tempdir().unwrap();
    // A column named like a split column: refused naming the file, the column and the flag.
    let clash = tmp.path().join("clash");
    std::fs::create_dir_all(&clash).unwrap();
    let rows = Rows {
        clashing: true,
        ..Rows::new(1, 2)
    };
    write_input(&clash.join("x.parquet"), &rows);
    let out = tmp.path().join("out");
    let o = run(&clash, &out, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    for want in ["x.parquet", "`clean_meta`", "--input-columns drop"] {
        assert!(stderr.contains(want), "{want:?} missing: {stderr}");
    }
    assert!(!out.join("run.json").exists(), "nothing ran");
    // `inspect` says so too (its promise: what `run` would refuse and why).
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_verisample"))
        .arg("inspect")
        .arg(&clash)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("NOT USABLE as it is: run refuses the input:")
            && stdout.contains("`clean_meta`"),
        "{stdout}"
    );
    // Dropped, the same input runs.
    check(run(&clash, &out, &["--input-columns", "drop"]), "run drop");

    // `id` int64 in one file, string in the other: refused naming both files and the column.
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    write_input(&mixed.join("a.parquet"), &Rows::new(1, 2));
    let text_ids = Rows {
        id_as_text: true,
        ..Rows::new(10, 2)
    };
    write_input(&mixed.join("b.parquet"), &text_ids);
    let o = run(&mixed, &tmp.path().join("out2"), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    for want in [
        "`id` is Int64 in",
        "a.parquet but Utf8 in",
        "b.parquet",
        "--input-columns drop",
    ] {
        assert!(stderr.contains(want), "{want:?} missing: {stderr}");
    }
}

#[test]
fn prepare_writes_json_numbers_as_numbers_and_run_carries_them() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("val")).unwrap();
    let mut lines = String::new();
    for i in 0..3u8 {
        let file = format!("val/a_car_{i:06}.png");
        std::fs::write(src.join(&file), png(30 + u32::from(i), 12, i)).unwrap();
        // width/height integers, ratio a float, checked a bool, digits nested, `mixed` an
        // integer in one line and a string in another (a mixed column stays text).
        let mixed = if i == 1 {
            serde_json::json!("n/a")
        } else {
            serde_json::json!(i)
        };
        let line = serde_json::json!({
            "file": file, "split": "val", "label": format!("{}", 100 + u32::from(i)),
            "width": 30 + u32::from(i), "height": 12, "ratio": 2.5 + f64::from(i),
            "checked": i % 2 == 0, "digits": [{"digit": 1, "bbox": [2, 13, 25, 29]}],
            "mixed": mixed,
        });
        lines.push_str(&format!("{line}\n"));
    }
    std::fs::write(src.join("labels.jsonl"), lines).unwrap();
    let prepared = tmp.path().join("prepared");
    check(
        bin()
            .args(["-q", "prepare", "--labels"])
            .arg(src.join("labels.jsonl"))
            .args(["--family", "OrandCar", "--out"])
            .arg(&prepared)
            .output()
            .unwrap(),
        "prepare",
    );
    let want = [
        ("width", DataType::Int64),
        ("height", DataType::Int64),
        ("ratio", DataType::Float64),
        ("checked", DataType::Boolean),
        ("digits", DataType::Utf8),
        ("mixed", DataType::Utf8),
    ];
    let input = splits(&prepared);
    let (_, batch) = &input[0];
    for (name, dt) in &want {
        let got = batch
            .schema()
            .field_with_name(name)
            .unwrap()
            .data_type()
            .clone();
        assert_eq!(&got, dt, "prepared column {name}");
    }
    let widths = column::<Int64Array>(batch, "width");
    assert_eq!(widths.values(), &[30, 31, 32]);
    let mixed = column::<StringArray>(batch, "mixed");
    assert_eq!(
        (mixed.value(0), mixed.value(1), mixed.value(2)),
        ("0", "n/a", "2")
    );

    // `run` carries them with those types, each row its own width.
    let out = tmp.path().join("out");
    check(run(&prepared, &out, &[]), "run");
    let mut rows = 0;
    for (name, batch) in splits(&out) {
        for (column_name, dt) in &want {
            let got = batch
                .schema()
                .field_with_name(column_name)
                .unwrap()
                .data_type()
                .clone();
            assert_eq!(&got, dt, "{name}: carried column {column_name}");
        }
        let widths = column::<Int64Array>(&batch, "width");
        let files = column::<StringArray>(&batch, "file");
        for r in 0..batch.num_rows() {
            let i: i64 = files.value(r)[10..16].parse().unwrap();
            assert_eq!(widths.value(r), 30 + i, "{name} row {r}");
            rows += 1;
        }
    }
    assert!(rows >= 3, "every prepared row is in a split: {rows}");
}
