//! The product [`RowSource`] and [`SplitSink`]: the streaming parquet reader and the split
//! writers of [`crate::dataset`], plus the dataset card with the run's statistics.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use arrow::datatypes::Fields;

use super::backend::{BackendError, RowSource, SplitRow, SplitSink};
use crate::dataset::card::{
    config_name, output_configs, output_split_files, pattern_strays, render_card, scan_output_dir,
    CardConfig,
};
use crate::dataset::carry::carried_schema;
use crate::dataset::layout::ReadOptions;
use crate::dataset::reader::{resolve_inputs, InputReader};
use crate::dataset::shards::{ShardOptions, ShardSummary};
use crate::dataset::writer::{split_schema_carrying, SplitWriter};
use crate::dataset::DatasetError;
use crate::out_files::SPLITS_DIR;
use crate::record::{AcceptedQa, InputRow, RejectedQa, RowError, SplitKind};
use crate::report::card::CardText;

/// The input dataset as a parquet file, folder or glob, read with [`InputReader`] (a fresh
/// reader per pass, so both passes see the same order).
#[derive(Debug, Clone)]
pub struct ParquetSource {
    /// The input spec (file, folder or glob).
    pub spec: String,
    /// Column flags and `--images-root`.
    pub read: ReadOptions,
    /// Each row carries the input's other columns into the splits
    /// ([`crate::dataset::carry`]; `run --input-columns keep`, the default); `false` leaves
    /// them out.
    pub carry: bool,
}

impl ParquetSource {
    /// A source for `path`, read as contract §2 says (columns detected, images inside the folder).
    pub fn new(path: &Path) -> ParquetSource {
        ParquetSource::with_options(path, ReadOptions::default())
    }

    /// A source for `path` read with `read` (the run's column flags and `--images-root`).
    pub fn with_options(path: &Path, read: ReadOptions) -> ParquetSource {
        ParquetSource {
            spec: path.to_string_lossy().into_owned(),
            read,
            carry: true,
        }
    }
}

impl RowSource for ParquetSource {
    fn rows(
        &self,
    ) -> Result<Box<dyn Iterator<Item = Result<InputRow, RowError>> + '_>, BackendError> {
        let files = resolve_inputs(&self.spec)?;
        // The same schema for both passes: the files' footers decide it (`run` refused an
        // input whose columns cannot be carried before anything loaded).
        let carried = match self.carry {
            true => carried_schema(&files.files, &self.read.columns)?,
            false => None,
        };
        Ok(Box::new(
            InputReader::from_files(files, &self.read)?.carrying(carried),
        ))
    }

    fn len_hint(&self) -> Option<u64> {
        let files = resolve_inputs(&self.spec).ok()?;
        let mut n = 0u64;
        for f in files.files {
            let file = std::fs::File::open(&f).ok()?;
            // A corrupt footer that panics the decoder counts as no rows here; the reader
            // reports the file.
            let rows = crate::dataset::isolate::isolate(|| {
                parquet::file::reader::SerializedFileReader::new(file).map(|r| {
                    parquet::file::reader::FileReader::metadata(&r)
                        .file_metadata()
                        .num_rows()
                })
            })
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
            n += u64::try_from(rows).unwrap_or(0);
        }
        Some(n)
    }
}

/// Writes the splits as sharded parquet under `OUT/data/` (staged until [`SplitSink::finish`])
/// and the dataset card `OUT/README.md` with the run's statistics.
#[derive(Debug)]
pub struct ParquetSink {
    out: PathBuf,
    opts: ShardOptions,
    accepted: BTreeMap<(String, SplitKind), SplitWriter<AcceptedQa>>,
    rejected: BTreeMap<String, SplitWriter<RejectedQa>>,
    published: BTreeMap<String, Vec<String>>,
    /// The input's columns the rows written carry (every row of a run carries the same),
    /// for the card's features; `None` before the first row.
    carried: Option<Fields>,
}

impl ParquetSink {
    /// A sink writing under `out` with the default shard options.
    pub fn new(out: &Path) -> ParquetSink {
        ParquetSink {
            out: out.to_path_buf(),
            opts: ShardOptions::default(),
            accepted: BTreeMap::new(),
            rejected: BTreeMap::new(),
            published: BTreeMap::new(),
            carried: None,
        }
    }

    /// `configs` with the schema of the splits this sink wrote: each kind's own columns and
    /// the input's columns its rows carry.
    fn carrying(&self, mut configs: Vec<CardConfig>) -> Vec<CardConfig> {
        let Some(carried) = &self.carried else {
            return configs;
        };
        for c in &mut configs {
            if let Some(kind) = SplitKind::ALL
                .into_iter()
                .find(|k| config_name(*k) == c.name)
            {
                c.schema = split_schema_carrying(kind, carried);
            }
        }
        configs
    }

    /// Record the file names of a finished split.
    fn publish(&mut self, summary: ShardSummary) {
        let names = summary
            .files
            .iter()
            .filter_map(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        self.published.insert(summary.split, names);
    }
}

impl SplitSink for ParquetSink {
    fn write(&mut self, family: &str, kind: SplitKind, row: SplitRow) -> Result<(), BackendError> {
        let carried = match &row {
            SplitRow::Accepted(r) => r.carried.as_ref(),
            SplitRow::Rejected(r) => r.carried.as_ref(),
        };
        let carried = carried.map_or_else(Fields::empty, |b| b.schema().fields().clone());
        self.carried.get_or_insert_with(|| carried.clone());
        let (out, opts) = (self.out.clone(), self.opts);
        fn create<Q: crate::dataset::writer::QaRecord>(
            (out, opts, carried): (&Path, ShardOptions, &Fields),
            family: &str,
            kind: SplitKind,
        ) -> Result<SplitWriter<Q>, DatasetError> {
            SplitWriter::create_carrying(out, family, kind, opts, carried.clone())
        }
        let how = (out.as_path(), opts, &carried);
        match row {
            SplitRow::Accepted(r) => {
                let key = (family.to_string(), kind);
                if !self.accepted.contains_key(&key) {
                    let w = create(how, family, kind)?;
                    self.accepted.insert(key.clone(), w);
                }
                if let Some(w) = self.accepted.get_mut(&key) {
                    w.write_row(r)?;
                }
            }
            SplitRow::Rejected(r) => {
                if !self.rejected.contains_key(family) {
                    let w = create(how, family, SplitKind::Rejected)?;
                    self.rejected.insert(family.to_string(), w);
                }
                if let Some(w) = self.rejected.get_mut(family) {
                    w.write_row(r)?;
                }
            }
        }
        Ok(())
    }

    fn seal(&mut self) -> Result<BTreeMap<String, Vec<String>>, BackendError> {
        let mut names = BTreeMap::new();
        for ((family, kind), w) in &mut self.accepted {
            names.insert(kind.split_name(family), w.seal()?);
        }
        for (family, w) in &mut self.rejected {
            names.insert(SplitKind::Rejected.split_name(family), w.seal()?);
        }
        Ok(names)
    }

    fn finish(&mut self, card: &CardText) -> Result<(), BackendError> {
        // The `writing` run.json this run wrote before replacing anything: it names the
        // earlier run's split files and this run's (`EarlierSplits::with_new`), so both count
        // as verisample's own here.
        let earlier = EarlierSplits::read(&self.out);
        let mut families: Vec<String> = self.rejected.keys().cloned().collect();
        for ((family, kind), w) in std::mem::take(&mut self.accepted) {
            let split = kind.split_name(&family);
            families.push(family);
            let summary = w.finish(|f| earlier.wrote(&split, f, false))?;
            self.publish(summary);
        }
        for (family, w) in std::mem::take(&mut self.rejected) {
            let split = SplitKind::Rejected.split_name(&family);
            let summary = w.finish(|f| earlier.wrote(&split, f, false))?;
            self.publish(summary);
        }
        families.sort();
        families.dedup();
        let written: BTreeSet<String> = self.published.keys().cloned().collect();
        let splits = if self.out.join(SPLITS_DIR).is_dir() {
            remove_earlier_splits(&self.out, &earlier, &written, false)?;
            scan_output_dir(&self.out)?
        } else {
            Vec::new()
        };
        for split in &splits {
            for f in pattern_strays(&self.out, &split.name)? {
                tracing::warn!(
                    "{} is not a shard of split {} but matches the card's data/{}-* pattern: \
                     load_dataset reads it as part of that split (and fails on a file that is \
                     not parquet of the split's columns); move it out of data/",
                    f.display(),
                    split.name,
                    split.name
                );
            }
        }
        let readme = self.out.join(crate::out_files::CARD_FILE);
        if splits.is_empty() {
            // No split: no dataset to describe (`datasets` loads none), so no card; one of an
            // earlier run in this folder would describe data that is gone.
            return match std::fs::remove_file(&readme) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(DatasetError::io(&readme, e).into())
                }
                _ => Ok(()),
            };
        }
        let configs = self.carrying(output_configs(&splits));
        let title = if families.is_empty() {
            "verisample output".to_string()
        } else {
            format!("verisample output: {}", families.join(", "))
        };
        let text = format!(
            "{}\n{}",
            render_card(&configs, &title, &card.hub_yaml)?,
            card.body
        );
        crate::atomic::write_atomic(readme, text.as_bytes())?;
        Ok(())
    }

    fn published(&self) -> BTreeMap<String, Vec<String>> {
        self.published.clone()
    }
}

/// Split name → shard file names, as `run.json` records them (`stats.split_files`).
pub(super) type SplitFiles = BTreeMap<String, Vec<String>>;

/// What the `run.json` in OUT records of the split shards an earlier run wrote under
/// `OUT/data/`: only these may be replaced or removed by a later run.
#[derive(Debug)]
pub(super) enum EarlierSplits {
    /// No readable `run.json`.
    Unknown,
    /// Split name → the shard file names the run wrote (`stats.split_files`), or `None` for
    /// a split it counts rows of (`stats.split_rows`) without naming its files, as a
    /// `run.json` of a version before `split_files` does: every shard of that split is its.
    Recorded(BTreeMap<String, Option<BTreeSet<String>>>),
}

impl EarlierSplits {
    /// Read `out/run.json`.
    pub(super) fn read(out: &Path) -> EarlierSplits {
        let Some(view) = crate::run_json::RunJsonView::read(out) else {
            return EarlierSplits::Unknown;
        };
        let stats = view.stats;
        let mut recorded: BTreeMap<String, Option<BTreeSet<String>>> = stats
            .split_rows
            .into_iter()
            .flatten()
            .map(|(split, _)| (split, None))
            .collect();
        for (split, names) in stats.split_files.into_iter().flatten() {
            recorded.insert(split, Some(names.into_iter().collect()));
        }
        EarlierSplits::Recorded(recorded)
    }

    /// What a `run.json` written before the first file of a run's splits is published must
    /// record (`stats.split_files`, with status `writing`): the names of every shard file
    /// either run may leave in `out/data/` should the publishing stop midway — those the
    /// earlier run recorded (for a split it names no files of, every shard of that split now
    /// on disk) and `new`, those this run publishes. A rerun then replaces or removes them all.
    pub(super) fn with_new(&self, out: &Path, new: &BTreeMap<String, Vec<String>>) -> SplitFiles {
        let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        if let EarlierSplits::Recorded(splits) = self {
            for (split, names) in splits {
                let names = match names {
                    Some(names) => names.clone(),
                    // A folder that cannot be listed holds no shard to record.
                    None => crate::dataset::writer::split_files(out, split)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|f| f.file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                        .collect(),
                };
                files.entry(split.clone()).or_default().extend(names);
            }
        }
        for (split, names) in new {
            files
                .entry(split.clone())
                .or_default()
                .extend(names.iter().cloned());
        }
        files
            .into_iter()
            .map(|(split, names)| (split, names.into_iter().collect()))
            .collect()
    }

    /// Whether the earlier run wrote `file`, a shard of `split`. `restart` (discarding the
    /// earlier output): with no readable `run.json` every shard counts as the earlier run's,
    /// as the refusal of such a folder ([`super::PipelineError::UncheckedEarlierRun`]) says
    /// `--restart` discards them.
    fn wrote(&self, split: &str, file: &Path, restart: bool) -> bool {
        match self {
            EarlierSplits::Unknown => restart,
            EarlierSplits::Recorded(splits) => match splits.get(split) {
                None => false,
                Some(None) => true,
                Some(Some(names)) => file
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| names.contains(n)),
            },
        }
    }
}

/// Remove the split shards under `OUT/data/` that an earlier run in this folder wrote
/// (`earlier`: the files its `run.json` records — read from the `writing` run.json, which
/// names the earlier run's files with this run's) and
/// whose split is not in `keep` (another family, or a split this run left empty): they would
/// otherwise stay in the card's configs and be loaded with this run's data. Any other file
/// named like a shard was not written by verisample: it stays and is named in a warning,
/// since the card and `load_dataset` read it as part of this dataset. `restart` (called before `--restart`
/// discards `run.json`): no warning, and with no readable `run.json` every split-named file
/// counts as the earlier run's. Files not named like shards are not touched; without
/// `OUT/data/` there is nothing to do.
///
/// Errors: listing the folder or removing a file.
pub(super) fn remove_earlier_splits(
    out: &Path,
    earlier: &EarlierSplits,
    keep: &BTreeSet<String>,
    restart: bool,
) -> Result<(), BackendError> {
    if !out.join(SPLITS_DIR).is_dir() {
        return Ok(());
    }
    for (split, files) in output_split_files(out)? {
        if keep.contains(&split) {
            continue;
        }
        for f in files {
            if earlier.wrote(&split, &f, restart) {
                tracing::info!("removing {} (split {split} of an earlier run)", f.display());
                std::fs::remove_file(&f).map_err(|e| DatasetError::io(&f, e))?;
            } else if !restart {
                tracing::warn!(
                    "keeping {}: verisample did not write it, but its split-like name makes it \
                     part of this dataset (split {split} in the card and in load_dataset); \
                     move it out of data/ if it does not belong there",
                    f.display()
                );
            }
        }
    }
    Ok(())
}

/// Refuse, before any work, an OUT whose `data/` holds a file or folder named like a split
/// shard that the run would keep ([`EarlierSplits`]: no earlier run here wrote it) and that
/// is not a readable parquet file: the card's statistics (and `load_dataset`) read every
/// shard of a split, so it would fail the run only after all its generations. `restart`: as
/// in [`remove_earlier_splits`].
///
/// Errors: [`super::PipelineError::UnusableSplitFile`] naming the first such path.
pub(super) fn check_kept_split_files(
    out: &Path,
    restart: bool,
) -> Result<(), super::PipelineError> {
    if !out.join(SPLITS_DIR).is_dir() {
        return Ok(());
    }
    let unusable = |path: &Path, problem: String| super::PipelineError::UnusableSplitFile {
        path: path.to_path_buf(),
        problem,
    };
    let by_split =
        output_split_files(out).map_err(|e| unusable(&out.join(SPLITS_DIR), e.to_string()))?;
    let earlier = EarlierSplits::read(out);
    for (split, files) in by_split {
        for f in files.iter().filter(|f| !earlier.wrote(&split, f, restart)) {
            if !f.is_file() {
                return Err(unusable(f, "is not a file".into()));
            }
            let cause = match crate::dataset::card::shard_row_count(f) {
                Ok(_) => continue,
                Err(DatasetError::Parquet { source, .. }) => source.to_string(),
                Err(DatasetError::Io { source, .. }) => source.to_string(),
                Err(DatasetError::Corrupt { message, .. }) => message,
                Err(e) => e.to_string(),
            };
            return Err(unusable(
                f,
                format!("is not a readable parquet file ({cause})"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_recorded_while_writing_are_both_runs_shards() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        std::fs::create_dir_all(out.join("data")).unwrap();
        for f in [
            "A-00000-of-00002.parquet",
            "A-00001-of-00002.parquet",
            "A.txt",
        ] {
            std::fs::write(out.join("data").join(f), b"x").unwrap();
        }
        // An earlier run.json naming the files of split B, and split A only by its rows (as a
        // version before `split_files`: every shard of A on disk is its).
        let earlier = serde_json::json!({"stats": {
            "split_rows": {"A": 1, "B": 2},
            "split_files": {"B": ["B-00000-of-00002.parquet", "B-00001-of-00002.parquet"]},
        }});
        std::fs::write(out.join("run.json"), earlier.to_string()).unwrap();
        let new = BTreeMap::from([
            (
                "B".to_string(),
                vec!["B-00000-of-00001.parquet".to_string()],
            ),
            (
                "C".to_string(),
                vec!["C-00000-of-00001.parquet".to_string()],
            ),
        ]);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            EarlierSplits::read(out).with_new(out, &new),
            BTreeMap::from([
                (
                    "A".to_string(),
                    names(&["A-00000-of-00002.parquet", "A-00001-of-00002.parquet"])
                ),
                (
                    "B".to_string(),
                    names(&[
                        "B-00000-of-00001.parquet",
                        "B-00000-of-00002.parquet",
                        "B-00001-of-00002.parquet"
                    ])
                ),
                ("C".to_string(), names(&["C-00000-of-00001.parquet"])),
            ])
        );
        // No readable run.json: only this run's files are known.
        std::fs::remove_file(out.join("run.json")).unwrap();
        assert_eq!(EarlierSplits::read(out).with_new(out, &new), new);
    }
}
