//! Size-bounded, row-group-bounded parquet shards of one split:
//! `<dir>/<split>-00000-of-0000N.parquet`, written atomically and deterministically.
//!
//! Layout rules (what `datasets` and the Hub expect):
//! - shard names `<split>-<i:05>-of-<n:05>.parquet` (the `push_to_hub` convention);
//! - row groups of at most [`ShardOptions::rows_per_group`] rows (≤ 100 image rows, so a
//!   reader never holds more than 100 images of one column chunk);
//! - a new shard starts once the current one holds ≥ [`ShardOptions::max_shard_bytes`]
//!   (a shard can exceed the bound by at most one row group);
//! - parquet key-value metadata `huggingface` = `{"info": {"features": …}}`, `created_by`
//!   fixed to [`CREATED_BY`], no timestamps: the same rows give the same bytes.
//!
//! Each shard is written to a hidden temporary file, fsynced, and only renamed to its final
//! name in [`ShardedWriter::finish`], when the shard count is known. Older shards of the same
//! split are removed then, so a split never mixes two runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayData, RecordBatch};
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::{features, DatasetError};
use crate::atomic::{rename_durable, AtomicFile};

/// The parquet `created_by` string: fixed, so files are reproducible byte for byte.
pub const CREATED_BY: &str = concat!("verisample version ", env!("CARGO_PKG_VERSION"));

/// Most rows in one row group (the bound for image rows).
pub const MAX_ROWS_PER_GROUP: usize = 100;

/// Default shard size bound in bytes (256 MiB; the Hub's own default is 500 MB).
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 256 * 1024 * 1024;

/// How shards are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardOptions {
    /// Start a new shard once the current one has this many bytes on disk.
    pub max_shard_bytes: u64,
    /// Rows per row group, 1..=[`MAX_ROWS_PER_GROUP`].
    pub rows_per_group: usize,
}

impl Default for ShardOptions {
    fn default() -> Self {
        Self {
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            rows_per_group: MAX_ROWS_PER_GROUP,
        }
    }
}

/// What [`ShardedWriter::finish`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSummary {
    /// Split name.
    pub split: String,
    /// Final shard paths, in order.
    pub files: Vec<PathBuf>,
    /// Rows written.
    pub num_rows: u64,
    /// Size of the data as Arrow buffers (what `datasets` reports as a split's `num_bytes`).
    pub num_bytes: u64,
    /// Bytes on disk of all shards (the card's `download_size`).
    pub file_bytes: u64,
}

/// The final name of shard `index` of `count` of `split`.
pub fn shard_file_name(split: &str, index: usize, count: usize) -> String {
    format!("{split}-{index:05}-of-{count:05}.parquet")
}

/// Whether `name` is a final shard name of `split` (`<split>-ddddd-of-ddddd.parquet`).
pub fn is_shard_of(name: &str, split: &str) -> bool {
    let Some(rest) = name.strip_prefix(split).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    // Compared as bytes: a name of the right length can hold multi-byte characters, and
    // slicing `rest` at a byte inside one panics.
    let b = rest.as_bytes();
    b.len() == "00000-of-00000.parquet".len()
        && b[..5].iter().all(u8::is_ascii_digit)
        && &b[5..9] == b"-of-"
        && b[9..14].iter().all(u8::is_ascii_digit)
        && &b[14..] == b".parquet"
}

/// The split of a shard file name (`train-00000-of-00002.parquet` → `train`): everything
/// before its last 23 bytes, when the name is a shard of that split ([`is_shard_of`]); `None`
/// for any other name (non-ASCII names included: no slicing inside a character).
pub fn split_of_shard(name: &str) -> Option<&str> {
    let split = name.get(..name.len().checked_sub(23)?)?;
    is_shard_of(name, split).then_some(split)
}

/// The final shards of `split` in `dir`, sorted by name.
///
/// Errors: `dir` cannot be listed (a missing `dir` gives an empty list).
pub fn list_shards(dir: &Path, split: &str) -> Result<Vec<PathBuf>, DatasetError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(DatasetError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| DatasetError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_shard_of(&name, split) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The id of the process that staged the shard file named `name` (`.<split>-<i>.staged-<pid>`,
/// renamed to its final name only by [`ShardedWriter::finish`]); `None` for any other name.
/// A crash between staging and finishing leaves such a file behind.
pub fn staged_file_pid(name: &str) -> Option<u32> {
    let (_, pid) = name.rsplit_once(".staged-")?;
    if !name.starts_with('.') || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// The process that staged the file `name` as a shard of `split`: a staged shard
/// (`.<split>-<i>.staged-<pid>`, [`staged_file_pid`]) or the temporary file it is written as
/// until its shard is closed (`..<split>-<i>.staged-<pid>.tmp-<pid>-<n>`); `None` for any
/// other name (another split's included).
pub fn staged_shard_pid(name: &str, split: &str) -> Option<u32> {
    let of_split = |staged: &str| {
        let rest = staged
            .strip_prefix('.')?
            .strip_prefix(split)?
            .strip_prefix('-')?;
        let (index, _) = rest.split_once(".staged-")?;
        let pid = staged_file_pid(staged)?;
        (index.len() >= 5 && index.bytes().all(|b| b.is_ascii_digit())).then_some(pid)
    };
    of_split(name).or_else(|| {
        let (staged, _) = name.rsplit_once(".tmp-")?;
        let pid = crate::atomic::temp_file_pid(name)?;
        (of_split(staged.strip_prefix('.')?)? == pid).then_some(pid)
    })
}

/// Remove the files of `split` in `dir` that a writer killed before [`ShardedWriter::finish`]
/// staged ([`staged_shard_pid`]), where its process is known to be gone (Linux; elsewhere
/// nothing is removed, as no lock keeps a live writer of the same split out). Returns them.
///
/// Errors: `dir` cannot be listed or such a file cannot be removed.
fn remove_stale_staged(dir: &Path, split: &str) -> Result<Vec<PathBuf>, DatasetError> {
    let mut removed = Vec::new();
    if !crate::atomic::PROCESS_LIVENESS_KNOWN {
        return Ok(removed);
    }
    for entry in std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))? {
        let entry = entry.map_err(|e| DatasetError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = staged_shard_pid(&name, split) else {
            continue;
        };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && !crate::atomic::process_alive(pid) {
            let path = entry.path();
            tracing::info!("removing {} (staged by a killed writer)", path.display());
            std::fs::remove_file(&path).map_err(|e| DatasetError::io(&path, e))?;
            removed.push(path);
        }
    }
    removed.sort();
    Ok(removed)
}

/// Bytes of Arrow buffers behind `data` (values, offsets, validity, children).
pub fn arrow_nbytes(data: &ArrayData) -> u64 {
    let own: usize = data.buffers().iter().map(|b| b.len()).sum();
    let nulls = data.nulls().map_or(0, |n| n.buffer().len());
    let children: u64 = data.child_data().iter().map(arrow_nbytes).sum();
    (own + nulls) as u64 + children
}

/// Writes one split as a sequence of parquet shards. See the module docs.
pub struct ShardedWriter {
    dir: PathBuf,
    split: String,
    schema: SchemaRef,
    props: WriterProperties,
    opts: ShardOptions,
    current: Option<ArrowWriter<AtomicFile>>,
    staged: Vec<PathBuf>,
    num_rows: u64,
    num_bytes: u64,
}

impl ShardedWriter {
    /// Start writing `split` into `dir` (created if missing) with `schema`, removing the
    /// staged files of `split` that a killed writer left there (`remove_stale_staged`).
    ///
    /// `image.bytes` is stored uncompressed without dictionary or statistics (it is already
    /// compressed, and min/max of image bytes are useless); everything else is zstd level 3.
    ///
    /// Errors: invalid options, `dir` cannot be created, or `schema` has no `datasets` feature.
    pub fn create(
        dir: &Path,
        split: &str,
        schema: SchemaRef,
        opts: ShardOptions,
    ) -> Result<Self, DatasetError> {
        if opts.rows_per_group == 0 || opts.rows_per_group > MAX_ROWS_PER_GROUP {
            return Err(DatasetError::Invalid(format!(
                "rows_per_group must be 1..={MAX_ROWS_PER_GROUP}, got {}",
                opts.rows_per_group
            )));
        }
        if opts.max_shard_bytes == 0 {
            return Err(DatasetError::Invalid("max_shard_bytes must be > 0".into()));
        }
        if !is_valid_split_name(split) {
            return Err(DatasetError::Invalid(format!(
                "split name {split:?} does not match ^\\w+(\\.\\w+)*$"
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
        remove_stale_staged(dir, split)?;
        let hf = features::huggingface_metadata(&schema)?;
        let mut meta = schema.metadata().clone();
        meta.insert("huggingface".to_string(), hf.clone());
        let schema = Arc::new(schema.as_ref().clone().with_metadata(meta));
        let zstd = ZstdLevel::try_new(3).map_err(|e| DatasetError::Invalid(e.to_string()))?;
        let image_bytes = ColumnPath::from(vec!["image".to_string(), "bytes".to_string()]);
        let props = WriterProperties::builder()
            .set_created_by(CREATED_BY.to_string())
            .set_compression(Compression::ZSTD(zstd))
            .set_max_row_group_row_count(Some(opts.rows_per_group))
            .set_column_compression(image_bytes.clone(), Compression::UNCOMPRESSED)
            .set_column_dictionary_enabled(image_bytes.clone(), false)
            .set_column_statistics_enabled(image_bytes, EnabledStatistics::None)
            .set_key_value_metadata(Some(vec![KeyValue::new("huggingface".to_string(), hf)]))
            .build();
        Ok(Self {
            dir: dir.to_path_buf(),
            split: split.to_string(),
            schema,
            props,
            opts,
            current: None,
            staged: Vec::new(),
            num_rows: 0,
            num_bytes: 0,
        })
    }

    /// The schema written (with the `huggingface` metadata added).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows written so far.
    pub fn num_rows(&self) -> u64 {
        self.num_rows
    }

    /// Write `batch` as one or more complete row groups of ≤ `rows_per_group` rows.
    ///
    /// Errors: `batch` has a different schema (field types), or a write fails.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), DatasetError> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(DatasetError::Schema(format!(
                "batch schema {:?} differs from split schema {:?}",
                batch.schema().fields(),
                self.schema.fields()
            )));
        }
        let batch = batch.clone().with_schema(self.schema.clone())?;
        let mut start = 0;
        while start < batch.num_rows() {
            let len = self.opts.rows_per_group.min(batch.num_rows() - start);
            let chunk = batch.slice(start, len);
            self.num_bytes += chunk
                .columns()
                .iter()
                .map(|c| arrow_nbytes(&c.to_data()))
                .sum::<u64>();
            let dir = self.dir.clone();
            let writer = self.current_writer()?;
            writer
                .write(&chunk)
                .map_err(|e| DatasetError::parquet(&dir, e))?;
            writer.flush().map_err(|e| DatasetError::parquet(&dir, e))?;
            self.num_rows += len as u64;
            start += len;
            if self
                .current
                .as_ref()
                .is_some_and(|w| w.bytes_written() as u64 >= self.opts.max_shard_bytes)
            {
                self.close_current()?;
            }
        }
        Ok(())
    }

    fn current_writer(&mut self) -> Result<&mut ArrowWriter<AtomicFile>, DatasetError> {
        if self.current.is_none() {
            let staged = self.dir.join(format!(
                ".{}-{:05}.staged-{}",
                self.split,
                self.staged.len(),
                std::process::id()
            ));
            let file = AtomicFile::create(&staged)?;
            let w = ArrowWriter::try_new(file, self.schema.clone(), Some(self.props.clone()))
                .map_err(|e| DatasetError::parquet(&staged, e))?;
            self.current = Some(w);
        }
        self.current
            .as_mut()
            .ok_or_else(|| DatasetError::Invalid("no open shard".into()))
    }

    fn close_current(&mut self) -> Result<(), DatasetError> {
        if let Some(w) = self.current.take() {
            let file = w
                .into_inner()
                .map_err(|e| DatasetError::parquet(&self.dir, e))?;
            self.staged.push(file.commit()?);
        }
        Ok(())
    }

    /// Close the last shard (a split with no rows gets one empty shard) and return the final
    /// names the staged shards will have, in order; nothing is published yet. Calling it again
    /// (or writing nothing more and finishing) changes nothing.
    ///
    /// Errors: a write fails.
    pub fn seal(&mut self) -> Result<Vec<String>, DatasetError> {
        if self.staged.is_empty() && self.current.is_none() {
            self.current_writer()?;
        }
        self.close_current()?;
        let count = self.staged.len();
        Ok((0..count)
            .map(|i| shard_file_name(&self.split, i, count))
            .collect())
    }

    /// Close the last shard, remove every older shard of this split, and rename the new shards
    /// to their final names: [`ShardedWriter::finish_replacing`] with every older shard
    /// replaceable.
    ///
    /// Errors: a write, remove or rename fails.
    pub fn finish(self) -> Result<ShardSummary, DatasetError> {
        self.finish_replacing(|_| true)
    }

    /// Close the last shard, remove the older shards of this split that `replaceable` accepts
    /// (given each shard's path), and rename the new shards to their final names. An older
    /// shard it refuses stays and is named in a warning, since the card's `data/<split>-*`
    /// pattern loads it with this split (one with the name of a new shard is replaced, and
    /// named in a warning too). A split with no rows still gets one (empty) shard, so that the
    /// card's `data_files` pattern matches a file.
    ///
    /// Errors: a write, remove or rename fails.
    pub fn finish_replacing(
        mut self,
        replaceable: impl Fn(&Path) -> bool,
    ) -> Result<ShardSummary, DatasetError> {
        let new_names = self.seal()?;
        let count = new_names.len();
        for old in list_shards(&self.dir, &self.split)? {
            let overwritten = old
                .file_name()
                .is_some_and(|n| new_names.iter().any(|new| n == new.as_str()));
            if replaceable(&old) {
                std::fs::remove_file(&old).map_err(|e| DatasetError::io(&old, e))?;
            } else if overwritten {
                tracing::warn!(
                    "replacing {}: no earlier run in this folder wrote it, but this run writes \
                     a shard of split {} under that name",
                    old.display(),
                    self.split
                );
            } else {
                tracing::warn!(
                    "keeping {}: no earlier run in this folder wrote it, but its name makes it \
                     part of split {} (the card's data/{}-* pattern and load_dataset read it \
                     with this run's shards); move it out of data/ if it does not belong there",
                    old.display(),
                    self.split,
                    self.split
                );
            }
        }
        let staged = std::mem::take(&mut self.staged);
        let mut files = Vec::with_capacity(count);
        let mut file_bytes = 0;
        for (path, name) in staged.iter().zip(&new_names) {
            let dest = self.dir.join(name);
            rename_durable(path, &dest)?;
            file_bytes += std::fs::metadata(&dest)
                .map_err(|e| DatasetError::io(&dest, e))?
                .len();
            files.push(dest);
        }
        Ok(ShardSummary {
            split: self.split.clone(),
            files,
            num_rows: self.num_rows,
            num_bytes: self.num_bytes,
            file_bytes,
        })
    }
}

/// Whether `name` is a valid Hugging Face split name: `^\w+(\.\w+)*$` (ASCII word chars), of at
/// most [`crate::family::MAX_FAMILY_LEN`] characters so that its shard files can be created.
pub fn is_valid_split_name(name: &str) -> bool {
    (1..=crate::family::MAX_FAMILY_LEN).contains(&name.len())
        && name.split('.').all(|part| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

impl Drop for ShardedWriter {
    /// A writer dropped before [`ShardedWriter::finish`] (an error, a panic) removes the shards
    /// it staged, so only hidden temporary files of a crashed process can remain.
    fn drop(&mut self) {
        for path in self.staged.drain(..) {
            // Best effort: these files were never published under a shard name.
            let _ = std::fs::remove_file(path);
        }
    }
}

impl std::fmt::Debug for ShardedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedWriter")
            .field("dir", &self.dir)
            .field("split", &self.split)
            .field("shards", &self.staged.len())
            .field("num_rows", &self.num_rows)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names() {
        assert_eq!(
            shard_file_name("OrandCar_RS_think", 2, 11),
            "OrandCar_RS_think-00002-of-00011.parquet"
        );
        for (name, split, ok) in [
            ("train-00000-of-00001.parquet", "train", true),
            ("train-00000-of-00001.parquet", "trai", false),
            (
                "OrandCar_RS_think-00000-of-00001.parquet",
                "OrandCar_RS",
                false,
            ),
            ("train-0000-of-00001.parquet", "train", false),
            ("train-00000-of-00001.parquet.tmp", "train", false),
            (".train-00000.staged", "train", false),
            // Multi-byte characters where "-of-" or ".parquet" belong (slicing panicked).
            ("train-00000-öö0001.parquet", "train", false),
            ("train-00000-of-00001.parqué", "train", false),
        ] {
            assert_eq!(is_shard_of(name, split), ok, "{name} {split}");
        }
        assert_eq!(staged_file_pid(".train-00003.staged-812"), Some(812));
        assert_eq!(staged_file_pid(".train-00003.staged-812.tmp-812-0"), None);
        assert_eq!(staged_file_pid("train-00003.staged-812"), None);
    }

    #[test]
    fn dropped_writer_leaves_nothing() {
        use arrow::array::{ArrayRef, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let tiny = ShardOptions {
            max_shard_bytes: 1,
            rows_per_group: 1,
        };
        let mut w = ShardedWriter::create(dir.path(), "train", schema.clone(), tiny).unwrap();
        let col: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        w.write(&RecordBatch::try_new(schema, vec![col]).unwrap())
            .unwrap();
        assert_eq!(w.staged.len(), 3, "one staged shard per row group");
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// Catches: a rerun leaving the staged shards (closed, or still being written) of a
    /// killed writer in the folder, or removing files that are not its own: another split's,
    /// a live process's, or other hidden files.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_new_writer_removes_what_a_killed_writer_of_its_split_staged() {
        // A pid above the kernel's largest pid_max (2^22): no live process has it.
        let dead = 4_194_305 + std::process::id() % 1000;
        let live = std::process::id();
        let dir = tempfile::tempdir().unwrap();
        let stale = [
            format!(".train-00000.staged-{dead}"),
            format!("..train-00001.staged-{dead}.tmp-{dead}-3"),
        ];
        let kept = [
            format!(".train-00000.staged-{live}"),
            format!(".val-00000.staged-{dead}"),
            format!("..val-00000.staged-{dead}.tmp-{dead}-0"),
            format!(".train.x-00000.staged-{dead}"),
            format!(".train-00000.staged-{dead}.bak"),
            ".train-notes".to_string(),
        ];
        for name in stale.iter().chain(&kept) {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("s", arrow::datatypes::DataType::Utf8, true),
        ]));
        let w = ShardedWriter::create(dir.path(), "train", schema, ShardOptions::default());
        drop(w.unwrap());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = kept.to_vec();
        want.sort();
        assert_eq!(left, want);
        assert_eq!(
            staged_shard_pid(
                &format!("..train-00001.staged-{dead}.tmp-{live}-3"),
                "train"
            ),
            None,
            "a temporary file of another process than the one that staged it"
        );
    }

    #[test]
    fn split_names() {
        for (name, ok) in [
            ("OrandCar_RS_think", true),
            ("a.b", true),
            ("a.", false),
            ("", false),
            ("a-b", false),
            ("a b", false),
        ] {
            assert_eq!(is_valid_split_name(name), ok, "{name:?}");
        }
    }
}
