//! `verisample run`: its flags ([`RunArgs`]: the settings' [`RunOptions`] and `--json`),
//! then settings → fingerprint → journal check → model → run. Errors are
//! `anyhow` here (the CLI edge); [`super::exit_code`] maps them to the process status.
//!
//! Order matters: flags and the config file are validated first (milliseconds), then the
//! model files are hashed and the journal in OUT is checked against the fingerprint (a
//! changed setting or model is refused before any weight is loaded), then the model loads.

use anyhow::Context as _;
use clap::Args;

use crate::engine::vl::{load_engine, VlInputs};
use crate::engine::{EngineConfig, KvBudget, VisionMemory};
use crate::pipeline::{
    install_ctrlc, prepare_with, run, Backends, EngineGenerator, Generator, ParquetSink,
    ParquetSource, PipelineError, Prepared, RunControl, RunReport, StandardDecisions,
};
use crate::settings::{
    fingerprint, hash_input_files, hash_model_files, DeviceSpec, RunOptions, Settings,
};
use verisample_models::PixelBounds;
use verisample_models::VlModel;

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

/// Default KV cache size on Metal when `--kv-cache-gib` is not given (its free memory is not
/// measured).
pub const DEFAULT_METAL_KV_CACHE_GIB: f64 = 4.0;

/// Default share of a CUDA device's free memory (after the weights) for the KV cache pool
/// when `--kv-cache-gib` is not given; the rest is headroom for activations (vLLM's
/// `gpu_memory_utilization` plays the same role, as a share of the total).
pub const DEFAULT_CUDA_KV_FRACTION: f64 = 0.8;

/// The engine settings of a run.
pub fn engine_config(settings: &Settings) -> EngineConfig {
    let defaults = EngineConfig::default();
    let kv_budget = match (settings.kv_cache_gib, settings.device) {
        (Some(g), _) => KvBudget::Gib(g),
        (None, DeviceSpec::Cpu) => defaults.kv_budget,
        (None, DeviceSpec::Cuda(_)) => KvBudget::FreeFraction(DEFAULT_CUDA_KV_FRACTION),
        (None, DeviceSpec::Metal) => KvBudget::Gib(DEFAULT_METAL_KV_CACHE_GIB),
    };
    EngineConfig {
        kv_budget,
        max_batch: settings.max_batch,
        auto_max_batch: settings.max_batch_auto,
        max_batch_tokens: settings.max_batch_tokens,
        max_new_tokens: settings.max_new_tokens,
        repetition_penalty: Some(settings.decoding.repetition_penalty),
        generation_config: settings.decoding.generation_config,
        vision_memory: settings
            .vision_memory_gib
            .map_or(defaults.vision_memory, VisionMemory::Gib),
        ..defaults
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
    let model_files = hash_model_files(&settings.model.dir)
        .with_context(|| format!("hashing model files in {}", settings.model.dir.display()))?;
    let input_files = hash_input_files(&settings.data)?;
    let mut fingerprint = fingerprint(settings.canonical(), model_files, input_files);
    fingerprint.model = Some(settings.model.spec.clone());
    fingerprint.data_spec = Some(crate::settings::data_spec(&settings.data));
    let control = RunControl::from_env();
    // A start that fails leaves nothing behind that would block the corrected command, and
    // a `--restart` discards the earlier output only once the model has loaded.
    let (prepared, mut generator) =
        prepare_with(&settings, fingerprint, || start_engine(&settings, &control))?;
    let report = run_parquet(prepared, &settings, &mut generator, &control)?;
    print_summary(&report, &settings.out, settings.quiet, json, None);
    if settings.max_batch_auto && !settings.quiet && !json {
        println!(
            "{}",
            auto_batch_line(generator.engine().config().max_batch, &settings)
        );
    }
    Ok(report)
}

/// Run `prepared` with `generator` over the parquet input of `settings` into its OUT, with
/// the standard decisions and `settings`' verifiers (shared by `run` and `merge`).
///
/// Errors: [`PipelineError`] from the run.
pub(super) fn run_parquet(
    prepared: Prepared,
    settings: &Settings,
    generator: &mut dyn Generator,
    control: &RunControl,
) -> Result<RunReport, PipelineError> {
    // Decided here, where `run` and `merge` both read (a merge's settings come from run.json,
    // which does not record the flag).
    let read = crate::dataset::layout::ReadOptions {
        skip_family_column: settings.family.is_some(),
        ..settings.read.clone()
    };
    let source = ParquetSource::with_options(&settings.data, read);
    let mut sink = ParquetSink::new(&settings.out);
    let decisions = StandardDecisions {
        verifiers: settings.verifier_registry(),
        ..StandardDecisions::default()
    };
    run(
        prepared,
        Backends {
            source: &source,
            generator,
            decisions: &decisions,
            sink: &mut sink,
        },
        control,
    )
}

/// Install the stop handler, open the device and load the model (the steps after the
/// journal check that can still fail before the first generation).
///
/// Errors: the handler, the device, the model, the chat template.
fn start_engine(
    settings: &Settings,
    control: &RunControl,
) -> anyhow::Result<EngineGenerator<VlModel, VlInputs>> {
    install_ctrlc(control).context("installing the Ctrl-C handler")?;
    let device = settings.device.open().context("opening the device")?;
    let mut engine = load_engine(
        &settings.model.dir,
        settings.dtype.to_dtype(),
        &device,
        engine_config(settings),
        Some(settings.think),
        PixelBounds {
            min_pixels: settings.min_pixels,
            max_pixels: settings.max_pixels,
        },
    )
    .with_context(|| format!("loading the model from {}", settings.model.dir.display()))?;
    engine.set_stop_flag(control.stop.clone());
    if settings.max_batch_auto {
        tracing::info!("{}", auto_batch_line(engine.config().max_batch, settings));
    }
    EngineGenerator::new(engine).context("rendering the chat template")
}

/// The sentence naming the batch the engine picked from its KV pool (a GPU run without
/// `--max-batch`), logged at start and ending the summary.
fn auto_batch_line(max_batch: usize, settings: &Settings) -> String {
    format!(
        "max batch {max_batch}: picked from the KV cache pool (sequences of {} new + {} prompt \
         tokens that fit, {}..={}); set --max-batch to choose",
        settings.max_new_tokens,
        crate::engine::config::AUTO_PROMPT_TOKENS,
        crate::engine::config::AUTO_MIN_BATCH,
        settings.max_batch
    )
}

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
