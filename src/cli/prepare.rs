//! `verisample prepare`: build an input dataset (HF parquet) from images plus labels, a QA
//! JSONL or any parquet `run` reads.

use super::usage;
use crate::dataset::prepare::{prepare, ItemProblems};
use crate::dataset::DatasetError;
use crate::pipeline::input_check::{check_image, check_qa};
use crate::record::{QaItem, SourceColumns};
use crate::settings::prepare::check_split_free;
pub use crate::settings::prepare::{prepare_options, PrepareArgs};

/// `run`'s input check of one row (the pipeline's own: the image decodes within its limits,
/// the question and some reference of each `qa` item not blank), as `prepare` applies it:
/// an image problem leaves the row out, an item's problem only that item.
fn run_input_check(
    image: &[u8],
    qa: &[QaItem],
    columns: Option<&SourceColumns>,
) -> Result<ItemProblems, (String, String)> {
    check_image(Some(image), |_, _| Ok(())).map_err(|p| (p.field, p.message))?;
    Ok(qa
        .iter()
        .enumerate()
        .map(|(i, item)| {
            check_qa(i, item, columns)
                .err()
                .map(|p| (p.field, p.message))
        })
        .collect())
}

/// Run `prepare` and print the written shard files (stdout); each row left out by `run`'s
/// input check is named on stderr, then their count. Left-out rows do not change the exit
/// status (0), as rows reported in `run`'s `errors.jsonl` do not. Warnings and left-out rows
/// are printed with `-q` too, as `run`'s warnings are.
pub(super) fn run(a: PrepareArgs) -> anyhow::Result<()> {
    let force = a.force;
    let (opts, warnings) = prepare_options(a)?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let started = std::time::Instant::now();
    // Held for the whole prepare, as `run` holds its OUT: a second process writing into this
    // folder is refused (exit 2) instead of racing this one's shards.
    let lock = crate::pipeline::OutLock::take(&opts.out)?;
    let summary = check_split_free(&opts.out, &opts.split, force)
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            prepare(&opts, &run_input_check).map_err(|e| match e {
                DatasetError::Choice(m) => usage(m),
                other => anyhow::Error::new(other)
                    .context(format!("prepare into {}", opts.out.display())),
            })
        });
    lock.release();
    let summary = summary?;
    tracing::info!(
        rows = summary.shards.num_rows,
        qa = summary.qa_items,
        shards = summary.shards.files.len(),
        bytes = summary.shards.file_bytes,
        secs = started.elapsed().as_secs_f64(),
        "prepared"
    );
    for m in &summary.left_out {
        eprintln!("left out: {m}");
    }
    if !summary.left_out.is_empty() {
        eprintln!(
            "prepare: {} row(s) or question(s) left out (listed above: `run` would report them as errors or drop them), {} row(s) written",
            summary.left_out.len(),
            summary.shards.num_rows
        );
    }
    for clash in &summary.family_case_clashes {
        eprintln!(
            "warning: families {} differ only in case: `run` refuses this dataset (their split \
             files would collide on a case-insensitive file system); rename all but one in the \
             input, or pass `--family NAME` to `run` to put every row in one family",
            clash.join(", ")
        );
    }
    for f in &summary.shards.files {
        println!("{}", f.display());
    }
    Ok(())
}
