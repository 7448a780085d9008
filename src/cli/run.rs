//! `verisample run`: settings → fingerprint → journal check → model → run. Errors are
//! `anyhow` here (the CLI edge); [`super::exit_code`] maps them to the process status.
//!
//! Order matters: flags and the config file are validated first (milliseconds), then the
//! model files are hashed and the journal in OUT is checked against the fingerprint (a
//! changed setting or model is refused before any weight is loaded), then the model loads.

use anyhow::Context as _;

use crate::engine::vl::{load_engine, VlInputs};
use crate::engine::{EngineConfig, KvBudget, VisionMemory};
use crate::pipeline::{
    install_ctrlc, prepare_with, run, Backends, EngineGenerator, Generator, ParquetSink,
    ParquetSource, PipelineError, Prepared, RunControl, RunReport, StandardDecisions,
};
use crate::settings::{
    fingerprint, hash_input_files, hash_model_files, DeviceSpec, RunArgs, Settings,
};
use verisample_models::PixelBounds;
use verisample_models::VlModel;

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

/// `verisample run`. `quiet` is the CLI's global `-q` (it also silences progress).
///
/// Errors: settings, model lookup, a refused resume, model loading, the run itself.
pub fn run_command(args: &RunArgs, quiet: bool) -> anyhow::Result<RunReport> {
    let mut args = args.clone();
    args.quiet |= quiet;
    let settings = Settings::resolve(&args)?;
    let model_files = hash_model_files(&settings.model.dir)
        .with_context(|| format!("hashing model files in {}", settings.model.dir.display()))?;
    let input_files = hash_input_files(&settings.data)?;
    let mut fingerprint = fingerprint(settings.canonical(), model_files, input_files);
    fingerprint.model = Some(settings.model.spec.clone());
    let control = RunControl::from_env();
    // A start that fails leaves nothing behind that would block the corrected command, and
    // a `--restart` discards the earlier output only once the model has loaded.
    let (prepared, mut generator) =
        prepare_with(&settings, fingerprint, || start_engine(&settings, &control))?;
    let report = run_parquet(prepared, &settings, &mut generator, &control)?;
    print_summary(&report, &settings.out, args.quiet, args.json);
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
    let source = ParquetSource::with_options(&settings.data, settings.read.clone());
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
    EngineGenerator::new(engine).context("rendering the chat template")
}

/// Print the end-of-run summary on stdout: one JSON object with `json`, else the text
/// summary, or with `quiet` only the line naming where the splits are (none without splits).
pub(super) fn print_summary(report: &RunReport, out: &std::path::Path, quiet: bool, json: bool) {
    let summary = crate::report::summary::Summary::new(&report.stats, out);
    if json {
        println!("{}", summary.json());
    } else if !quiet {
        print!("{}", summary.text());
    } else if !report.stats.split_rows.is_empty() {
        println!("{}", summary.where_line());
    }
}
