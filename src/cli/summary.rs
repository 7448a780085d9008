//! The end-of-run summary of `run` and `merge` on stdout.

use crate::pipeline::RunReport;

/// Print the end-of-run summary on stdout: one JSON object with `json`, else the text
/// summary, or with `quiet` only the line naming where the splits are (none without splits).
/// With `quiet` (JSON or not), input that could not be used is also a warning on stderr,
/// since no text summary says so. `merged`: the number of shard folders of a merge.
pub(super) fn print_summary(
    report: &RunReport,
    out: &std::path::Path,
    quiet: bool,
    json: bool,
    merged: Option<usize>,
) {
    let summary = crate::report::summary::Summary::new(&report.stats, out);
    let summary = match merged {
        Some(shards) => summary.of_merge(shards),
        None => summary,
    };
    if quiet {
        if let Some(warning) = summary.losses_warning() {
            tracing::warn!("{warning}");
        }
    }
    if json {
        println!("{}", summary.json());
    } else if !quiet {
        print!("{}", summary.text());
    } else if !report.stats.split_rows.is_empty() {
        println!("{}", summary.where_line());
    }
}
