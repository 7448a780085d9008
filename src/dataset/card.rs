//! The dataset card `<out>/README.md` and the run record `<out>/run.json`.
//!
//! The card's YAML front matter is what the Hub and `datasets.load_dataset(<dir>, <config>)`
//! read: `configs` maps each config to its splits' `data_files`, and `dataset_info` gives
//! per config the features (the `datasets.Features._to_yaml_list` layout, identical in
//! datasets 3.6 and 5.2), each split's `num_bytes`/`num_examples`, `download_size` and
//! `dataset_size`. The three kinds of split have different `qa` structs, so each kind is its
//! own config (`RS_think`, `RS_nothink`, `rejected`) holding that kind's split of every family.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use arrow::array::Array;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::features::{dtype_label, features_yaml, yaml_scalar};
use super::shards::{arrow_nbytes, ShardSummary};
use super::writer::split_schema;
use super::DatasetError;
use crate::atomic::write_atomic;
use crate::record::SplitKind;

/// One split as the card describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardSplit {
    /// Split name (`OrandCar_RS_think`).
    pub name: String,
    /// Rows.
    pub num_examples: u64,
    /// Arrow size of the data in bytes.
    pub num_bytes: u64,
    /// Parquet bytes on disk.
    pub download_bytes: u64,
}

impl From<&ShardSummary> for CardSplit {
    fn from(s: &ShardSummary) -> Self {
        Self {
            name: s.split.clone(),
            num_examples: s.num_rows,
            num_bytes: s.num_bytes,
            download_bytes: s.file_bytes,
        }
    }
}

/// A group of splits sharing one schema.
#[derive(Debug, Clone, PartialEq)]
pub struct CardConfig {
    /// Config name (`RS_think`).
    pub name: String,
    /// The Arrow schema of every split in the config.
    pub schema: SchemaRef,
    /// The splits, in card order.
    pub splits: Vec<CardSplit>,
}

/// The config name of a split kind.
pub fn config_name(kind: SplitKind) -> &'static str {
    match kind {
        SplitKind::Think => "RS_think",
        SplitKind::NoThink => "RS_nothink",
        SplitKind::Rejected => "rejected",
    }
}

/// The split kind named by a split's suffix (`OrandCar_RS_think` → `Think`), if any.
pub fn kind_of_split(name: &str) -> Option<SplitKind> {
    if name.ends_with("_RS_think") {
        Some(SplitKind::Think)
    } else if name.ends_with("_RS_nothink") {
        Some(SplitKind::NoThink)
    } else if name.ends_with("_rejected") {
        Some(SplitKind::Rejected)
    } else {
        None
    }
}

/// Group output split summaries into the three configs (kinds without splits are left out),
/// splits sorted by name so the card does not depend on write order.
pub fn output_configs(splits: &[CardSplit]) -> Vec<CardConfig> {
    let mut by_kind: BTreeMap<SplitKind, Vec<CardSplit>> = BTreeMap::new();
    for s in splits {
        if let Some(kind) = kind_of_split(&s.name) {
            by_kind.entry(kind).or_default().push(s.clone());
        }
    }
    by_kind
        .into_iter()
        .map(|(kind, mut splits)| {
            splits.sort_by(|a, b| a.name.cmp(&b.name));
            CardConfig {
                name: config_name(kind).to_string(),
                schema: split_schema(kind),
                splits,
            }
        })
        .collect()
}

/// The output split shards under `OUT/data/`: split name → its files, for every file named
/// `<Family>_<RS_think|RS_nothink|rejected>-NNNNN-of-NNNNN.parquet`. Other files are not
/// listed.
///
/// Errors: the folder cannot be listed.
pub fn output_split_files(out_dir: &Path) -> Result<BTreeMap<String, Vec<PathBuf>>, DatasetError> {
    let data = out_dir.join(crate::out_files::SPLITS_DIR);
    let rd = std::fs::read_dir(&data).map_err(|e| DatasetError::io(&data, e))?;
    let mut by_split: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in rd {
        let entry = entry.map_err(|e| DatasetError::io(&data, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(split) = super::shards::split_of_shard(&name) {
            if kind_of_split(split).is_some() {
                by_split
                    .entry(split.to_string())
                    .or_default()
                    .push(entry.path());
            }
        }
    }
    Ok(by_split)
}

/// The files under `<out_dir>/data/` that the card's `data/<split>-*` pattern for `split`
/// matches although they are not shards of it (`<split>-mine.parquet`,
/// `<split>-00000-of-00001.parquet.bak`): `load_dataset` reads them as part of the split.
/// Folders are left out (`datasets` resolves the pattern to files only), sorted by name.
///
/// Errors: the folder cannot be listed (a missing folder gives an empty list).
pub fn pattern_strays(out_dir: &Path, split: &str) -> Result<Vec<PathBuf>, DatasetError> {
    let data = out_dir.join(crate::out_files::SPLITS_DIR);
    let rd = match std::fs::read_dir(&data) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(DatasetError::io(&data, e)),
    };
    let prefix = format!("{split}-");
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| DatasetError::io(&data, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix)
            && !super::shards::is_shard_of(&name, split)
            && !entry.path().is_dir()
        {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The row count of a shard file, from its parquet footer.
///
/// Errors: the file cannot be opened, or has no readable parquet footer.
pub fn shard_row_count(f: &Path) -> Result<u64, DatasetError> {
    let file = std::fs::File::open(f).map_err(|e| DatasetError::io(f, e))?;
    let meta = DatasetError::isolated(f, || {
        parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&file)
            .map_err(|e| DatasetError::parquet(f, e))
    })?;
    Ok(u64::try_from(meta.file_metadata().num_rows()).unwrap_or(0))
}

/// Describe every output split found in `<out_dir>/data/` (names ending in `_RS_think`,
/// `_RS_nothink`, `_rejected`), reading row counts and sizes from the files. Used to rebuild
/// the card after a merge.
///
/// Errors: the folder cannot be listed or a shard cannot be read.
pub fn scan_output_dir(out_dir: &Path) -> Result<Vec<CardSplit>, DatasetError> {
    let by_split = output_split_files(out_dir)?;
    let mut out = Vec::new();
    for (split, files) in by_split {
        let mut s = CardSplit {
            name: split,
            num_examples: 0,
            num_bytes: 0,
            download_bytes: 0,
        };
        for f in files {
            s.download_bytes += std::fs::metadata(&f)
                .map_err(|e| DatasetError::io(&f, e))?
                .len();
            let (rows, bytes) = DatasetError::isolated(&f, || count_rows_and_bytes(&f))?;
            s.num_examples += rows;
            s.num_bytes += bytes;
        }
        out.push(s);
    }
    Ok(out)
}

/// The row count and the in-memory Arrow size of one shard file.
///
/// Errors: the file cannot be opened or decoded.
fn count_rows_and_bytes(f: &Path) -> Result<(u64, u64), DatasetError> {
    let file = std::fs::File::open(f).map_err(|e| DatasetError::io(f, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| DatasetError::parquet(f, e))?
        .build()
        .map_err(|e| DatasetError::parquet(f, e))?;
    let (mut rows, mut bytes) = (0u64, 0u64);
    for batch in reader {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        bytes += batch
            .columns()
            .iter()
            .map(|c| arrow_nbytes(&c.to_data()))
            .sum::<u64>();
    }
    Ok((rows, bytes))
}

/// Render the card's head: YAML front matter (`hub_yaml`, the Hub metadata lines, then
/// `configs` and `dataset_info`), the title, the split table and the schema of each config.
///
/// Errors: a schema without a `datasets` feature.
pub fn render_card(
    configs: &[CardConfig],
    title: &str,
    hub_yaml: &str,
) -> Result<String, DatasetError> {
    let mut y = format!("---\n{hub_yaml}configs:\n");
    for (i, c) in configs.iter().enumerate() {
        let _ = writeln!(y, "- config_name: {}", yaml_scalar(&c.name));
        if i == 0 {
            y.push_str("  default: true\n");
        }
        y.push_str("  data_files:\n");
        for s in &c.splits {
            let _ = writeln!(y, "  - split: {}", yaml_scalar(&s.name));
            let _ = writeln!(
                y,
                "    path: {}",
                yaml_scalar(&format!("data/{}-*", s.name))
            );
        }
    }
    y.push_str("dataset_info:\n");
    for c in configs {
        let _ = writeln!(y, "- config_name: {}", yaml_scalar(&c.name));
        y.push_str("  features:\n");
        y.push_str(&features_yaml(&c.schema, 2)?);
        y.push_str("  splits:\n");
        for s in &c.splits {
            let _ = writeln!(
                y,
                "  - name: {}\n    num_bytes: {}\n    num_examples: {}",
                yaml_scalar(&s.name),
                s.num_bytes,
                s.num_examples
            );
        }
        let _ = writeln!(
            y,
            "  download_size: {}",
            c.splits.iter().map(|s| s.download_bytes).sum::<u64>()
        );
        let _ = writeln!(
            y,
            "  dataset_size: {}",
            c.splits.iter().map(|s| s.num_bytes).sum::<u64>()
        );
    }
    y.push_str("---\n\n");
    let _ = writeln!(y, "# {title}\n");
    y.push_str(
        "Visual-QA training data written by verisample: a vision-language model answered every \
question, and a string verifier checked each answer against the reference (how, and whether a \
judge took a second look at the rejects, is below). Each family is a split of each config:",
    );
    for c in configs {
        let what = match c.name.as_str() {
            "RS_think" => "the accepted answers with the model's reasoning",
            "RS_nothink" => "the accepted answers without the reasoning",
            "rejected" => "the rejected answers beside the reference",
            _ => "",
        };
        let _ = write!(y, " `{}`, {what};", c.name);
    }
    y.pop();
    y.push_str(".\n\n");
    y.push_str("| config | split | rows |\n| --- | --- | --- |\n");
    for c in configs {
        for s in &c.splits {
            let _ = writeln!(y, "| {} | {} | {} |", c.name, s.name, s.num_examples);
        }
    }
    y.push_str("\nLoad with `datasets.load_dataset(\"<this folder>\", \"<config>\")`; run settings are in `run.json`.\n\n");
    y.push_str(&schema_markdown(configs));
    Ok(y)
}

/// What a top-level split column holds.
fn column_meaning(name: &str) -> &'static str {
    match name {
        "image" => "the original image file, bytes unchanged (`path`: its file name)",
        "qa" => "the questions of this image that landed in this split (see What the fields hold)",
        "clean_meta" => "JSON object: where the row came from and the cleaning that admitted it",
        "image_sha256" => "hex SHA-256 of `image.bytes`",
        _ => "carried unchanged from the input dataset's column of this name (`--input-columns drop` leaves such columns out)",
    }
}

/// The `## Schema` section: the top-level columns with their type and meaning (once when
/// every config has the same, else per config), then each config's `qa` fields.
fn schema_markdown(configs: &[CardConfig]) -> String {
    let mut s = String::from("## Schema\n\n");
    let columns = |c: &CardConfig| -> Vec<(String, String)> {
        c.schema
            .fields()
            .iter()
            .filter(|f| f.name() != "qa")
            .map(|f| (f.name().clone(), dtype_label(f.data_type())))
            .collect()
    };
    let shared = configs.windows(2).all(|w| columns(&w[0]) == columns(&w[1]));
    for (i, c) in configs.iter().enumerate() {
        if i == 0 || !shared {
            if !shared {
                let _ = writeln!(s, "`{}`:\n", c.name);
            }
            s.push_str("| column | type | meaning |\n| --- | --- | --- |\n");
            for f in c.schema.fields() {
                let _ = writeln!(
                    s,
                    "| `{}` | `{}` | {} |",
                    f.name(),
                    dtype_label(f.data_type()),
                    column_meaning(f.name())
                );
            }
            s.push('\n');
        }
    }
    for c in configs {
        if let Ok(qa) = c.schema.field_with_name("qa") {
            if let arrow::datatypes::DataType::List(item) = qa.data_type() {
                if let arrow::datatypes::DataType::Struct(fields) = item.data_type() {
                    let names: Vec<String> =
                        fields.iter().map(|f| format!("`{}`", f.name())).collect();
                    let _ = writeln!(s, "- `qa` fields of `{}`: {}.", c.name, names.join(", "));
                }
            }
        }
    }
    s.push('\n');
    s
}

/// Write the card to `<out_dir>/README.md` atomically.
///
/// Errors: as [`render_card`], or the write fails.
pub fn write_card(
    out_dir: &Path,
    configs: &[CardConfig],
    title: &str,
    hub_yaml: &str,
) -> Result<PathBuf, DatasetError> {
    Ok(write_atomic(
        out_dir.join(crate::out_files::CARD_FILE),
        render_card(configs, title, hub_yaml)?.as_bytes(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(name: &str, n: u64) -> CardSplit {
        CardSplit {
            name: name.into(),
            num_examples: n,
            num_bytes: n * 10,
            download_bytes: n * 7,
        }
    }

    #[test]
    fn kinds_from_suffix() {
        for (name, kind) in [
            ("OrandCar_RS_think", Some(SplitKind::Think)),
            ("OrandCar_RS_nothink", Some(SplitKind::NoThink)),
            ("OrandCar_rejected", Some(SplitKind::Rejected)),
            ("train", None),
        ] {
            assert_eq!(kind_of_split(name), kind, "{name}");
        }
    }

    #[test]
    fn card_groups_by_kind_and_sums_sizes() {
        let configs = output_configs(&[
            split("B_RS_think", 2),
            split("A_rejected", 1),
            split("A_RS_think", 3),
            split("train", 9),
        ]);
        let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["RS_think", "rejected"]);
        assert_eq!(
            configs[0]
                .splits
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["A_RS_think", "B_RS_think"]
        );
        let card = render_card(&configs, "t", "license: \"mit\"\n").unwrap();
        assert!(card.starts_with("---\nlicense: \"mit\"\nconfigs:\n- config_name: RS_think\n  default: true\n  data_files:\n  - split: A_RS_think\n    path: data/A_RS_think-*\n"), "{card}");
        assert!(
            card.contains("  - name: A_RS_think\n    num_bytes: 30\n    num_examples: 3\n"),
            "{card}"
        );
        assert!(
            card.contains("  download_size: 35\n  dataset_size: 50\n"),
            "{card}"
        );
        assert!(card.contains("- config_name: rejected\n  features:\n  - name: image\n    dtype: image\n  - name: qa\n    list:\n    - name: question\n"), "{card}");
        assert!(!card.contains("split: train\n") && !card.contains("name: train\n"));
        assert_eq!(card.matches("\n---\n").count(), 1);
    }
}
