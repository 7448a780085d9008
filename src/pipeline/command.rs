//! The `run` and `merge` commands: settings → fingerprint → journal check → model → run.
//! Errors are `anyhow` here (the CLI edge); [`exit_code`] maps them to the process status.
//!
//! Order matters: flags and the config file are validated first (milliseconds), then the
//! model files are hashed and the journal in OUT is checked against the fingerprint (a
//! changed setting or model is refused before any weight is loaded), then the model loads.

use anyhow::Context as _;

use super::control::{install_ctrlc, RunControl};
use super::engine_io::EngineGenerator;
use super::{
    prepare_with, run, Backends, ParquetSink, ParquetSource, PipelineError, RunReport,
    StandardDecisions,
};
use crate::engine::vl::{load_engine, VlInputs, VlLoadError};
use crate::engine::{EngineConfig, EngineError, KvBudget, VisionMemory};
use crate::merge::{prepare_merge, JournalOnly, MergeArgs};
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
    let source = ParquetSource::with_options(&settings.data, settings.read.clone());
    let mut sink = ParquetSink::new(&settings.out);
    let decisions = StandardDecisions {
        verifiers: settings.verifier_registry(),
        ..StandardDecisions::default()
    };
    let report = run(
        prepared,
        Backends {
            source: &source,
            generator: &mut generator,
            decisions: &decisions,
            sink: &mut sink,
        },
        &control,
    )?;
    print_summary(&report, &settings.out, args.quiet, args.json);
    Ok(report)
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
fn print_summary(report: &RunReport, out: &std::path::Path, quiet: bool, json: bool) {
    let summary = crate::report::summary::Summary::new(&report.stats, out);
    if json {
        println!("{}", summary.json());
    } else if !quiet {
        print!("{}", summary.text());
    } else if !report.stats.split_rows.is_empty() {
        println!("{}", summary.where_line());
    }
}

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

/// The exit status for an error of [`run_command`] / [`merge_command`]: 130 after Ctrl-C
/// (143 after SIGTERM),
/// 2 for invalid settings (including an engine setting such as a `--kv-cache-gib` that does
/// not fit in memory, pixel bounds that leave no image size, and a merge `--out` that is a
/// shard folder or not writable), 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(p) = err.downcast_ref::<PipelineError>() {
        return u8::try_from(p.exit_code()).unwrap_or(1);
    }
    if err
        .downcast_ref::<crate::settings::SettingsError>()
        .is_some()
        || matches!(
            err.downcast_ref::<crate::merge::MergeError>(),
            Some(crate::merge::MergeError::OutIsShard(_) | crate::merge::MergeError::Out(_))
        )
        || matches!(
            err.downcast_ref::<VlLoadError>(),
            Some(
                VlLoadError::Engine(EngineError::Config(_))
                    | VlLoadError::Processor(verisample_models::ProcessorError::PixelBounds { .. })
            )
        )
    {
        return 2;
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_setting_errors_exit_2_through_context_other_load_errors_exit_1() {
        let kv = anyhow::Error::from(VlLoadError::Engine(EngineError::Config(
            "the KV cache of 900 GiB does not fit".into(),
        )))
        .context("loading the model from m");
        assert_eq!(exit_code(&kv), 2);
        let internal = anyhow::Error::from(VlLoadError::Engine(EngineError::Internal("x".into())))
            .context("loading the model from m");
        assert_eq!(exit_code(&internal), 1);
        let bounds = anyhow::Error::from(VlLoadError::Processor(
            verisample_models::ProcessorError::PixelBounds {
                min_pixels: 9408,
                max_pixels: 1,
            },
        ))
        .context("loading the model from m");
        assert_eq!(
            exit_code(&bounds),
            2,
            "--max-pixels below the checkpoint's min_pixels"
        );
        assert_eq!(exit_code(&anyhow::anyhow!("anything else")), 1);
    }
}
