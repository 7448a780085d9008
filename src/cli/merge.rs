//! `verisample merge`: the shards' journals of one job → one output, without a model.

use std::path::PathBuf;

use clap::Args;

use super::summary::print_summary;
use crate::merge::{run_merge, MergeOptions};
use crate::pipeline::RunReport;
use crate::settings::ProgressMode;

/// Join the outputs of `run --shard I/N` into one dataset (same bytes as an unsharded run).
#[derive(Args, Debug, Clone, PartialEq)]
#[command(
    long_about = "Join the outputs of `verisample run --shard I/N` into the dataset an unsharded run \
would have written, byte for byte. Every shard 0/N … N-1/N must be given once and be a finished run \
of the same job (same model files, same settings except --shard). The input dataset is read again \
(no model is loaded): from the path recorded in the shards' run.json, or --data.",
    after_help = "Example:\n  verisample merge out-0 out-1 out-2 out-3 --out out"
)]
pub struct MergeArgs {
    /// Output folders of the shard runs (`run --shard I/N --out OUT_I`), in any order.
    #[arg(required = true, num_args = 1.., value_name = "SHARD_OUT")]
    pub shards: Vec<PathBuf>,
    /// Output folder of the merged dataset. An earlier merge of the same shards there is
    /// resumed; the output of any other run is refused unless `--restart`.
    #[arg(long, value_name = "OUT", default_value = crate::settings::DEFAULT_OUT)]
    pub out: PathBuf,
    /// Input dataset, when not at the path recorded in the shards' run.json.
    #[arg(long, value_name = "INPUT")]
    pub data: Option<PathBuf>,
    /// Write into an existing non-empty OUT that holds no earlier verisample output: its
    /// README.md, the split files in data/, run.json, errors.jsonl, cleaning.jsonl,
    /// generations.jsonl, chart.svg, journal.bin and .verisample.lock are overwritten.
    #[arg(long)]
    pub force: bool,
    /// Replace the output of another run (or merge) in OUT instead of refusing it.
    #[arg(long)]
    pub restart: bool,
    /// Progress on stderr: a bar, JSON lines or none; `-q` keeps only an explicit `jsonl`.
    /// [default: bar on a terminal, else none]
    #[arg(long, value_enum, value_name = "MODE")]
    pub progress: Option<ProgressMode>,
    /// Print the end-of-run summary as one JSON object instead of text (as `run --json`).
    #[arg(long)]
    pub json: bool,
}

impl MergeArgs {
    /// The merge's plain options, `quiet` from the CLI's global `-q`.
    fn options(self, quiet: bool) -> MergeOptions {
        let MergeArgs {
            shards,
            out,
            data,
            force,
            restart,
            progress,
            json: _,
        } = self;
        MergeOptions {
            shards,
            out,
            data,
            force,
            restart,
            progress,
            quiet,
        }
    }
}

/// `verisample merge`. `quiet` is the CLI's global `-q`.
///
/// Errors: the shards are not one complete job, the input is missing, the run fails.
pub fn merge_command(args: MergeArgs, quiet: bool) -> anyhow::Result<RunReport> {
    let json = args.json;
    let options = args.options(quiet);
    let (report, settings) = run_merge(&options)?;
    let shards = options.shards.len();
    print_summary(&report, &settings.out, options.quiet, json, Some(shards));
    Ok(report)
}
