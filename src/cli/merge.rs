//! `verisample merge`: the shards' journals of one job → one output, without a model.

use anyhow::Context as _;

use super::run::print_summary;
use crate::merge::{prepare_merge, JournalOnly, MergeArgs};
use crate::pipeline::{
    install_ctrlc, run, Backends, ParquetSink, ParquetSource, RunControl, RunReport,
    StandardDecisions,
};

/// `verisample merge`. `quiet` is the CLI's global `-q`.
///
/// Errors: the shards are not one complete job, the input is missing, the run fails.
pub fn merge_command(args: &MergeArgs, quiet: bool) -> anyhow::Result<RunReport> {
    let mut args = args.clone();
    args.quiet |= quiet;
    let plan = prepare_merge(&args)?;
    let control = RunControl::from_env();
    install_ctrlc(&control).context("installing the Ctrl-C handler")?;
    let source = ParquetSource::with_options(&plan.settings.data, plan.settings.read.clone());
    let mut sink = ParquetSink::new(&plan.settings.out);
    let mut generator = JournalOnly {
        engine_version: plan.engine_version.clone(),
    };
    let decisions = StandardDecisions {
        verifiers: plan.settings.verifier_registry(),
        ..StandardDecisions::default()
    };
    let report = run(
        plan.prepared,
        Backends {
            source: &source,
            generator: &mut generator,
            decisions: &decisions,
            sink: &mut sink,
        },
        &control,
    )?;
    print_summary(&report, &plan.settings.out, args.quiet, false);
    Ok(report)
}
