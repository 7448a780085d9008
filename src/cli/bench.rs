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
    after_help = "Example:\n  verisample bench --model assets/model --images ../shared/data/orand-car-a/val --max-batch 16"
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
    #[arg(long, default_value_t = 32)]
    pub num_images: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 16)]
    pub max_batch: usize,
    /// Generation limit per image.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// KV cache pool in GiB.
    #[arg(long, default_value_t = 1.0)]
    pub kv_cache_gib: f64,
    /// Turn prefix caching off.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Device: cpu, cuda:N or metal.
    #[arg(long, default_value = "cpu")]
    pub device: crate::settings::DeviceSpec,
    /// Weight dtype. [default: f32 on cpu, bf16 on a GPU]
    #[arg(long, value_enum)]
    pub dtype: Option<crate::settings::DTypeSpec>,
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
    use crate::engine::vl::load_engine;
    use crate::engine::{EngineConfig, KvBudget};

    let cfg = EngineConfig {
        kv_budget: KvBudget::Gib(a.kv_cache_gib),
        max_batch: a.max_batch,
        max_new_tokens: a.max_new_tokens,
        prefix_caching: !a.no_prefix_caching,
        ..Default::default()
    };
    cfg.validate().map_err(|e| UsageError(e.to_string()))?;
    a.device.check_built()?;
    let device = a.device.open().context("opening the device")?;
    let model = a
        .model
        .clone()
        .unwrap_or_else(crate::settings::default_model_dir);
    let dtype = a.dtype.unwrap_or(match a.device {
        crate::settings::DeviceSpec::Cpu => crate::settings::DTypeSpec::F32,
        _ => crate::settings::DTypeSpec::Bf16,
    });
    let mut engine = load_engine(
        &model,
        dtype.to_dtype(),
        &device,
        cfg,
        Some(true),
        Default::default(),
    )
    .with_context(|| format!("loading {}", model.display()))?;

    let all = bench::list_images(&a.images, 0)?.len();
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
