//! The names of what a run writes in its output folder (OUT), declared once: every writer,
//! reader and check of OUT (the pipeline, `merge`, `verify`, `inspect`, the output-folder
//! checks, the input walk that skips run outputs) names a file through these. A leaf: it
//! imports nothing of the crate.

/// The split files' folder: `data/<Family>_<RS_think|RS_nothink|rejected>-NNNNN-of-NNNNN.parquet`.
pub const SPLITS_DIR: &str = "data";
/// The dataset card (`load_dataset` reads its configs), written last by a run.
pub const CARD_FILE: &str = "README.md";
/// The run report: settings, fingerprint, statistics, throughput, peak memory
/// (`crate::run_json`).
pub const RUN_FILE: &str = "run.json";
/// The journal of completed generations (kept after success; `crate::journal`).
pub const JOURNAL_FILE: &str = "journal.bin";
/// Held (advisory OS lock) by the process running in OUT; empty, never removed.
pub const LOCK_FILE: &str = ".verisample.lock";
/// One line per input problem: unreadable rows, bad images, blank fields, failed generations.
pub const ERRORS_FILE: &str = "errors.jsonl";
/// One line per `qa` entry dropped by cleaning, with its reason.
pub const CLEANING_FILE: &str = "cleaning.jsonl";
/// One line per question that was generated for: raw text, token ids, prompt length and
/// finish reason of the answer pass and (when it ran) the judge pass.
pub const GENERATIONS_FILE: &str = "generations.jsonl";
/// The card's figures (SVG, text included).
pub const CHART_FILE: &str = "chart.svg";
/// The folder of the card's example images (`examples/<split>-<k>.<ext>`).
pub const EXAMPLES_DIR: &str = "examples";

/// Everything a run writes in OUT, as the output-folder refusal lists it.
pub const WRITTEN_IN_OUT: &str = "README.md, data/<split>-*.parquet, run.json, errors.jsonl, \
     cleaning.jsonl, generations.jsonl, chart.svg, examples/, journal.bin and .verisample.lock";

/// The files that mark a folder as a verisample run's output: its report and its journal.
pub const RUN_OUTPUT_MARKERS: [&str; 2] = [RUN_FILE, JOURNAL_FILE];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_every_file_a_run_writes() {
        for name in [
            CARD_FILE,
            RUN_FILE,
            JOURNAL_FILE,
            LOCK_FILE,
            ERRORS_FILE,
            CLEANING_FILE,
            GENERATIONS_FILE,
            CHART_FILE,
        ] {
            assert!(WRITTEN_IN_OUT.contains(name), "{name}");
        }
        assert!(WRITTEN_IN_OUT.contains(&format!("{SPLITS_DIR}/")));
    }
}
