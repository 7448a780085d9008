//! Hugging Face parquet datasets in and out.
//!
//! - [`reader`]: stream an input dataset (contract §2) row group by row group as
//!   `Result<InputRow, RowError>`.
//! - [`writer`]: write the three output splits of contract §7 and read them back.
//! - [`card`]: the dataset card `README.md` and `run.json`.
//! - [`prepare`]: build the input layout from a folder of images plus JSONL labels.
//! - [`inspect`]: a human-readable summary of any of these datasets.
//! - [`features`], [`shards`], [`values`]: shared plumbing (HF feature metadata, sharded
//!   atomic parquet writing, Arrow value access).
//! - [`families`]: the families an input names, and pairs differing only in case.
//! - [`carry`]: the input's other columns each split row carries, with their Arrow types.
//! - [`layout`]: which columns hold the image, the question and the answer (contract §2 or flat).
//! - [`hub`]: a dataset of the local Hugging Face hub cache named by its id.
//! - [`scan`]: which files an input is, under the rules on links (inside the folder, once).
//! - [`isolate`]: a decoder panic on a corrupt file becomes an error for that file.

pub mod card;
pub mod carry;
pub mod families;
pub mod features;
pub mod hub;
pub mod inspect;
pub mod isolate;
pub mod layout;
pub mod prepare;
pub mod reader;
pub mod scan;
pub mod shards;
pub mod values;
pub mod writer;

use std::path::{Path, PathBuf};

/// A failure of a dataset operation as a whole (per-row problems of the input reader are
/// [`crate::record::RowError`]s instead).
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing parquet failed.
    #[error("{path}: parquet: {source}")]
    Parquet {
        /// The parquet file (or output directory).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// The decoders panicked on a file (corrupt beyond what they report as an error; see
    /// [`isolate`]).
    #[error("{path}: cannot decode (corrupt file): {message}")]
    Corrupt {
        /// The parquet file.
        path: PathBuf,
        /// The panic message.
        message: String,
    },
    /// Building Arrow arrays failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// An atomic write failed.
    #[error(transparent)]
    Atomic(#[from] crate::atomic::AtomicError),
    /// A value in a file cannot be decoded into the expected record.
    #[error("{file}: row {row}: field {field}: {message}")]
    Decode {
        /// The parquet file.
        file: String,
        /// 0-based row index in the file.
        row: usize,
        /// The field at fault (`qa[0].answer`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A schema is not what was expected, or has no `datasets` equivalent.
    #[error("schema: {0}")]
    Schema(String),
    /// An input path or option is not usable (no such file, glob matches nothing, …).
    #[error("{0}")]
    Invalid(String),
    /// The input needs an option to be read as asked (`--split` for a labels file of several
    /// splits, a column flag for an ambiguous layout): a usage error (exit 2).
    #[error("{0}")]
    Choice(String),
}

impl DatasetError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Run `f`, which decodes `path`, turning a decoder panic into [`DatasetError::Corrupt`].
    ///
    /// Errors: `f`'s own error, or the panic.
    pub fn isolated<T>(
        path: &Path,
        f: impl FnOnce() -> Result<T, DatasetError>,
    ) -> Result<T, DatasetError> {
        isolate::isolate(f).unwrap_or_else(|message| {
            Err(DatasetError::Corrupt {
                path: path.to_path_buf(),
                message,
            })
        })
    }

    /// A parquet error on `path`.
    pub fn parquet(path: &Path, source: parquet::errors::ParquetError) -> Self {
        Self::Parquet {
            path: path.to_path_buf(),
            source,
        }
    }
}
