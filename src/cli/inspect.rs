//! `verisample inspect`: show schema, row count and the first rows of a dataset.

use clap::Args;

use super::usage;

/// Show schema, row count and the first rows of an input or output dataset.
#[derive(Debug, Args)]
#[command(
    long_about = "Show what a dataset holds: per split, the Arrow schema, whether the `huggingface` \
feature metadata is present, the row count, and the first rows (image size in bytes, decoded \
width x height, SHA-256 check, qa entries).\n\nPATH is a parquet file, a folder (an input \
dataset or an output directory) or a quoted glob.",
    after_help = "Example:\n  verisample inspect verisample-out --rows 2"
)]
pub struct InspectArgs {
    /// Parquet file, dataset folder, output directory or glob.
    pub path: String,
    /// Rows to show per split.
    #[arg(long, default_value_t = 3)]
    pub rows: usize,
}

/// Print what the dataset at `a.path` holds.
///
/// Errors: an unusable path (usage), unreadable parquet files (after printing the rest).
pub(super) fn run(a: InspectArgs) -> anyhow::Result<()> {
    let found = crate::dataset::inspect::inspect(&a.path, a.rows).map_err(|e| match e {
        crate::dataset::DatasetError::Invalid(m) => usage(m),
        other => anyhow::Error::new(other),
    })?;
    print!("{}", found.text);
    match found.unreadable.as_slice() {
        [] => Ok(()),
        bad => anyhow::bail!(
            "{} parquet file(s) unreadable, first {} (details above)",
            bad.len(),
            bad[0].display()
        ),
    }
}
