//! `verisample bench`: engine throughput on a folder of images.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use super::UsageError;

/// Measure engine throughput on a folder of images.
#[derive(Debug, Args)]
#[command(
    long_about = "Measure the engine on a folder of images: the OrandCar question about each image, \
greedy, batched with continuous batching. Prints images/s, prefill and decode tokens/s and peak \
RSS as a table, or one JSON report (with every image's generated tokens) with --json. \
scripts/bench_vs_transformers.py runs it side by side with transformers.",
    after_help = "Example:\n  verisample bench --model ~/models/Qwen2-VL-2B-Instruct --images ~/data/val-images --max-batch 16"
)]
pub struct BenchArgs {
    /// Checkpoint directory (config.json, safetensors, tokenizer, chat template).
    /// [default: the bundled model, found as `run` finds it]
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Folder of images (`.jpg`, `.jpeg`, `.png`), taken in file-name order.
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    /// Images to run, the first by file name (0 = all); the default keeps a CPU run short.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub num_images: usize,
    /// Most sequences running at once. [default: as `run`: 64 on the CPU; on a GPU picked
    /// from the KV cache pool, at most 256]
    #[arg(long, value_name = "N")]
    pub max_batch: Option<usize>,
    /// Generation limit per image.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_new_tokens: usize,
    /// KV cache pool in GiB.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub kv_cache_gib: f64,
    /// Prefix caching on or off.
    #[arg(long, value_enum, value_name = "SWITCH", default_value = "on")]
    pub prefix_caching: crate::settings::Switch,
    /// cpu, cuda:N or metal. [default: as `run`: cuda:0 / metal when built with it, else cpu]
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<crate::settings::DeviceSpec>,
    /// Weight dtype. [default: f32 on cpu, bf16 on a GPU]
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub dtype: Option<crate::settings::DTypeSpec>,
    /// Implementation of attention, the projections and the recurrent layers, as `run`'s.
    /// [default: native on cpu, portable on a GPU]
    #[arg(long, value_enum, value_name = "KERNELS")]
    pub kernels: Option<crate::settings::KernelsSpec>,
    /// Print one JSON report instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `verisample bench`: load the model, run the OrandCar question over a folder of images
/// through the engine, print the throughput table (or the JSON report).
///
/// Errors: invalid settings (usage), model loading, unreadable images, engine errors.
pub(super) fn run(a: &BenchArgs) -> anyhow::Result<()> {
    use crate::bench::{self, BenchOptions};
    use crate::engine::generation::GenerationConfig;
    use crate::engine::vl::{load_engine, VlLoadError};
    use crate::engine::{EngineConfig, KvBudget};

    use crate::settings::{DeviceSpec, AUTO_MAX_BATCH_CAP, DEFAULT_MAX_BATCH};
    let spec = a.device.unwrap_or_else(DeviceSpec::default_for_build);
    // As `run`: a GPU without --max-batch lets the engine pick from its pool.
    let auto_max_batch = a.max_batch.is_none() && spec != DeviceSpec::Cpu;
    let cfg = EngineConfig {
        kv_budget: KvBudget::Gib(a.kv_cache_gib),
        max_batch: a.max_batch.unwrap_or(if auto_max_batch {
            AUTO_MAX_BATCH_CAP
        } else {
            DEFAULT_MAX_BATCH
        }),
        auto_max_batch,
        max_new_tokens: a.max_new_tokens,
        prefix_caching: a.prefix_caching.is_on(),
        ..Default::default()
    };
    cfg.validate().map_err(|e| UsageError(e.to_string()))?;
    spec.check_built()?;
    // The images before the model: a missing folder is a usage error found in milliseconds.
    let all = bench::list_images(&a.images, 0).map_err(|e| UsageError(format!("--images: {e}")))?;
    if all.is_empty() {
        return Err(UsageError(format!(
            "--images {}: no .jpg, .jpeg or .png file",
            a.images.display()
        ))
        .into());
    }
    let all = all.len();
    let device = spec.open().context("opening the device")?;
    let model = a
        .model
        .clone()
        .unwrap_or_else(crate::settings::default_model_dir);
    let dtype = a.dtype.unwrap_or(match spec {
        crate::settings::DeviceSpec::Cpu => crate::settings::DTypeSpec::F32,
        _ => crate::settings::DTypeSpec::Bf16,
    });
    // A generation_config.json the engine cannot honour is a load error (exit 2), as in `run`.
    let generation = GenerationConfig::resolve(&model, true, None)
        .map_err(VlLoadError::from)
        .with_context(|| format!("loading {}", model.display()))?;
    let kernels = a
        .kernels
        .unwrap_or(crate::settings::KernelsSpec::default_for(spec));
    let mut engine = load_engine(
        &model,
        dtype.to_dtype(),
        (&device, kernels.path()),
        cfg,
        &generation,
        Default::default(),
    )
    .with_context(|| format!("loading {}", model.display()))?;

    let taken = if a.num_images == 0 {
        all
    } else {
        a.num_images.min(all)
    };
    if taken < all {
        tracing::info!(
            "bench: {taken} of the {all} images in {} (the first by file name; --num-images {} keeps a run short, --num-images 0 takes all)",
            a.images.display(),
            a.num_images
        );
    } else {
        tracing::info!("bench: all {all} images in {}", a.images.display());
    }
    let opts = BenchOptions {
        images_dir: a.images.clone(),
        num_images: a.num_images,
        question: crate::family::ORAND_CAR_QUESTION.to_string(),
        max_new_tokens: a.max_new_tokens,
    };
    let report = bench::run(&mut engine, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.to_table());
    }
    Ok(())
}
