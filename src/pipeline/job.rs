//! A whole job assembled from its resolved [`Settings`]: fingerprint → journal check → engine
//! → [`run`](super::run) over the parquet input into OUT with the standard decisions. `run`
//! comes here through [`run_job`], `merge` through [`run_parquet`] with its journal in place of
//! the engine; the CLI only parses, calls and maps errors to exit codes.
//!
//! Order matters: the model files are hashed and the journal in OUT is checked against the
//! fingerprint (a changed setting or model is refused before any weight is loaded), then the
//! model loads.

use anyhow::Context as _;

use super::{
    install_ctrlc, prepare_with, run, Backends, EngineGenerator, Generator, ParquetSink,
    ParquetSource, PipelineError, Prepared, RunControl, RunReport, StandardDecisions,
};
use crate::engine::vl::{load_engine, VlInputs};
use crate::engine::{EngineConfig, KvBudget, VisionMemory};
use crate::settings::{
    data_spec, fingerprint, hash_input_files, hash_model_files, DeviceSpec, Fingerprint, Settings,
};
use verisample_models::{PixelBounds, VlModel};

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
        vision_memory: settings
            .vision_memory_gib
            .map_or(defaults.vision_memory, VisionMemory::Gib),
        ..defaults
    }
}

/// What a finished [`run_job`] reports beyond the run itself.
#[derive(Debug)]
pub struct JobReport {
    /// The run's report (also written to OUT/run.json).
    pub report: RunReport,
    /// The engine's batch cap ([`EngineConfig::max_batch`]), as picked from its KV pool when
    /// `settings.max_batch_auto`.
    pub max_batch: usize,
}

/// The fingerprint of a run with `settings`: its canonical settings, the hashes of its model
/// and input files, the model and data as given.
///
/// Errors: a model or input file cannot be read.
pub fn job_fingerprint(settings: &Settings) -> anyhow::Result<Fingerprint> {
    let model_files = hash_model_files(&settings.model.dir)
        .with_context(|| format!("hashing model files in {}", settings.model.dir.display()))?;
    let input_files = hash_input_files(&settings.data)?;
    let mut fp = fingerprint(settings.canonical(), model_files, input_files);
    fp.model = Some(settings.model.spec.clone());
    fp.data_spec = Some(data_spec(&settings.data));
    Ok(fp)
}

/// Run the job `settings` describe, end to end: fingerprint, journal check (resume or
/// refuse), engine start, the run, `run.json`.
///
/// Errors: hashing, a refused resume ([`PipelineError`]), the device, the model, the run.
pub fn run_job(settings: &Settings) -> anyhow::Result<JobReport> {
    let fingerprint = job_fingerprint(settings)?;
    let control = RunControl::from_env();
    // A start that fails leaves nothing behind that would block the corrected command, and
    // a `--restart` discards the earlier output only once the model has loaded.
    let (prepared, mut generator) =
        prepare_with(settings, fingerprint, || start_engine(settings, &control))?;
    let report = run_parquet(prepared, settings, &mut generator, &control)?;
    Ok(JobReport {
        report,
        max_batch: generator.engine().config().max_batch,
    })
}

/// Run `prepared` with `generator` over the parquet input of `settings` into its OUT, with
/// the standard decisions and `settings`' verifiers (a run's engine, or a merge's journal).
///
/// Errors: [`PipelineError`] from the run.
pub fn run_parquet(
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
        &settings.decoding.generation(),
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
    Ok(EngineGenerator::new(engine))
}

/// The sentence naming the batch the engine picked from its KV pool (a GPU run without
/// `--max-batch`), logged at start and ending the summary.
pub fn auto_batch_line(max_batch: usize, settings: &Settings) -> String {
    format!(
        "max batch {max_batch}: picked from the KV cache pool (sequences of {} new + {} prompt \
         tokens that fit, {}..={}); set --max-batch to choose",
        settings.max_new_tokens,
        crate::engine::config::AUTO_PROMPT_TOKENS,
        crate::engine::config::AUTO_MIN_BATCH,
        settings.max_batch
    )
}
