//! `verisample inspect`: show schema, row count and the first rows of a dataset.

use std::path::Path;

use clap::Args;

use super::usage;

/// Show schema, row count and the first rows of an input or output dataset.
#[derive(Debug, Args)]
#[command(
    long_about = "Show what a dataset holds: per split, the Arrow schema, whether the `huggingface` \
feature metadata is present, the row count, and the first rows (image size in bytes, decoded \
width x height once the image passes run's own check, a full decode within its limits, else \
why run would refuse it; an image given only by path is read as run reads it, inside the dataset folder; SHA-256 check, qa entries). Every row group is decoded: one that fails \
is named with its rows, as run reports it, and the others are still read; a string that is not UTF-8 fails only its \
row, named with its field as run's errors.jsonl names it.\n\nPATH is a parquet file, a folder (an input \
dataset or an output directory) or a quoted glob.\n\nExit status: 1 when a file is unreadable, has a column \
run cannot read or lacks one it needs (qa without image, no qa and no question column), or a row group cannot be decoded; 2 when PATH does not exist or matches no parquet file; else 0. \
A row named NOT USABLE (a shown row's image, a string that is not UTF-8) leaves it 0: only the first --rows rows are checked, and run records such a \
row in errors.jsonl and goes on.",
    after_help = "Example:\n  verisample inspect verisample-out --rows 2"
)]
pub struct InspectArgs {
    /// Parquet file, dataset folder, output directory or glob.
    pub path: String,
    /// Rows to show per split.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rows: usize,
}

/// Print what the dataset at `a.path` holds.
///
/// Errors: an unusable path (usage), unreadable or not usable parquet files, row groups that
/// cannot be decoded (after printing the rest). A shown row whose image is NOT USABLE is no
/// error: only the rows shown are checked, and `run` reports such a row and goes on.
pub(super) fn run(a: InspectArgs) -> anyhow::Result<()> {
    let found = crate::dataset::inspect::inspect(&a.path, a.rows, &run_image_check).map_err(
        |e| match e {
            crate::dataset::DatasetError::Invalid(m) => usage(m),
            other => anyhow::Error::new(other),
        },
    )?;
    print!("{}", found.text);
    warn_if_unfinished(Path::new(&a.path));
    if let [first, ..] = found.unreadable.as_slice() {
        anyhow::bail!(
            "{} parquet file(s) unreadable or not usable, first {} (details above)",
            found.unreadable.len(),
            first.display()
        );
    }
    if let [(file, group), ..] = found.damaged.as_slice() {
        anyhow::bail!(
            "{} row group(s) cannot be decoded, first row group {group} of {} (details above); \
             run reports the rows of each as one errors.jsonl line and reads the rest",
            found.damaged.len(),
            file.display()
        );
    }
    Ok(())
}

/// A note on stderr when `path` is a run's OUT whose `run.json` says `writing`
/// ([`crate::pipeline::STATUS_WRITING`]): that run stopped while replacing its outputs, so the
/// splits shown may mix two runs' files (`verify` and `merge` refuse such an OUT).
fn warn_if_unfinished(path: &Path) {
    if crate::run_json::RunJsonView::read(path).is_some_and(|v| v.is_writing()) {
        eprintln!(
            "note: {} holds a run that stopped while replacing its outputs (run.json status \
             `writing`): the splits may mix two runs' files; rerun the same command to finish it",
            path.display()
        );
    }
}

/// `run`'s input check of an image ([`crate::pipeline::input_check::check_image`]: a full decode
/// within the pipeline's image limits; the model's own limits are not known here): its
/// `(width, height)`, or `field: message` as `errors.jsonl` would name it.
fn run_image_check(bytes: &[u8]) -> Result<(usize, usize), String> {
    crate::pipeline::input_check::check_image(Some(bytes), |_, _| Ok(()))
        .map(|rgb| (rgb.width, rgb.height))
        .map_err(|p| format!("{}: {}", p.field, p.message))
}
