//! `verisample merge`: the shards' journals of one job → one output, without a model.

use anyhow::Context as _;

use super::run::{print_summary, run_parquet};
use crate::merge::{prepare_merge, JournalOnly, MergeArgs};
use crate::pipeline::{install_ctrlc, RunControl, RunReport};

/// `verisample merge`. `quiet` is the CLI's global `-q`.
///
/// Errors: the shards are not one complete job, the input is missing, the run fails.
pub fn merge_command(args: &MergeArgs, quiet: bool) -> anyhow::Result<RunReport> {
    let mut args = args.clone();
    args.quiet |= quiet;
    let plan = prepare_merge(&args)?;
    let control = RunControl::from_env();
    install_ctrlc(&control).context("installing the Ctrl-C handler")?;
    let mut generator = JournalOnly {
        engine_version: plan.engine_version.clone(),
    };
    let report = run_parquet(plan.prepared, &plan.settings, &mut generator, &control)?;
    print_summary(&report, &plan.settings.out, args.quiet, false);
    Ok(report)
}
