//! `verisample run`: its flags ([`RunArgs`]: the settings' [`RunOptions`] and `--json`),
//! resolved into [`Settings`] and handed to [`run_job`]. Errors are `anyhow` here (the CLI
//! edge); [`super::exit_code`] maps them to the process status.

use clap::Args;

use super::summary::print_summary;
use crate::pipeline::job::{auto_batch_line, run_job};
use crate::pipeline::RunReport;
use crate::settings::{RunOptions, Settings};

/// Sample, verify, judge and write the three splits per family.
///
/// The flags of `verisample run`: the settings ([`RunOptions`], which a TOML file can supply
/// too) and how to print the summary; see [`Settings::resolve`] for precedence and defaults.
#[derive(Args, Debug, Clone, Default, PartialEq)]
#[command(
    long_about = "Run the whole job: read the input dataset, check and clean it, prompt the model with its \
own chat template, decode greedily in batches, verify each answer, judge the rejected ones (and \
optionally calibrate the judge on accepted ones), and write OUT/data/<Family>_{RS_think,RS_nothink,rejected}-*.parquet, \
OUT/README.md, OUT/run.json, OUT/errors.jsonl, OUT/cleaning.jsonl and OUT/generations.jsonl.\n\n\
Settings come from flags, then --config FILE.toml (same keys as the long flags), then defaults. \
Finished work is journaled in OUT/journal.bin: rerunning the same command after a crash, kill or \
Ctrl-C (exit 130; SIGTERM 143) resumes and writes byte-identical splits, card and JSONL files \
(run.json and chart.svg hold timings); a changed setting or model is \
refused unless --restart.",
    after_help = "Examples:\n  verisample run --model Qwen/Qwen3-VL-2B-Thinking --data orand --out out --device cuda:0\n  \
verisample run --data orand --out out --limit 20   (a first try on 20 rows; the same command without --limit then does the rest)\n  \
verisample run --config job.toml --shard 0/4 --out out-0"
)]
pub struct RunArgs {
    /// Every setting (shared with the TOML job file).
    #[command(flatten)]
    pub options: RunOptions,
    /// Print the end-of-run summary as one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

impl From<RunArgs> for RunOptions {
    /// The settings of the flags, with `quiet` off (the caller sets it from the global `-q`).
    fn from(args: RunArgs) -> RunOptions {
        args.options
    }
}

/// `verisample run`. `quiet` is the CLI's global `-q` (it also silences the progress bar, not an
/// explicit `--progress jsonl`).
///
/// Errors: settings, model lookup, a refused resume, model loading, the run itself.
pub fn run_command(args: RunArgs, quiet: bool) -> anyhow::Result<RunReport> {
    let json = args.json;
    let options = RunOptions {
        quiet,
        ..RunOptions::from(args)
    };
    let settings = Settings::resolve(&options)?;
    if !settings.judge && settings.judge_calibrate > 0 {
        tracing::info!(
            "--judge off with --judge-calibrate {n}: the judge grades the first {n} verifier \
             accepts to measure its agreement, and rescues no reject",
            n = settings.judge_calibrate
        );
    }
    let job = run_job(&settings)?;
    print_summary(&job.report, &settings.out, settings.quiet, json, None);
    if let (Some(max_batch), true) = (job.max_batch, settings.max_batch_auto) {
        if !settings.quiet && !json {
            println!("{}", auto_batch_line(max_batch, &settings));
        }
    }
    Ok(job.report)
}
