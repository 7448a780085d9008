//! Bench the engine on a folder of images and print one JSON report (see `verisample::bench`).
//! Used by `scripts/bench_vs_transformers.py`.
//!
//! ```text
//! cargo build --release --example bench
//! target/release/examples/bench --model DIR --images DIR [--num-images 32] [--max-batch 16]
//!     [--max-new-tokens 32] [--kv-cache-gib 1] [--no-prefix-caching]
//! ```

use std::path::PathBuf;

use anyhow::Context;
use candle_core::{DType, Device};
use clap::Parser;
use verisample::bench::{self, BenchOptions, ORAND_QUESTION};
use verisample::engine::vl::load_engine;
use verisample::engine::{EngineConfig, KvBudget};

#[derive(Parser)]
struct Args {
    /// Checkpoint directory (config.json, model.safetensors, tokenizer, processor).
    #[arg(long)]
    model: PathBuf,
    /// Folder of images.
    #[arg(long)]
    images: PathBuf,
    /// Images to run (0 = all).
    #[arg(long, default_value_t = 32)]
    num_images: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 16)]
    max_batch: usize,
    /// Generation limit per image.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// KV cache pool in GiB.
    #[arg(long, default_value_t = 1.0)]
    kv_cache_gib: f64,
    /// Turn prefix caching off.
    #[arg(long)]
    no_prefix_caching: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = Device::cuda_if_available(0)?;
    let cfg = EngineConfig {
        kv_budget: KvBudget::Gib(args.kv_cache_gib),
        max_batch: args.max_batch,
        max_new_tokens: args.max_new_tokens,
        prefix_caching: !args.no_prefix_caching,
        ..Default::default()
    };
    let mut engine = load_engine(&args.model, DType::F32, &device, cfg, Some(true))
        .with_context(|| format!("loading {}", args.model.display()))?;
    let opts = BenchOptions {
        images_dir: args.images,
        num_images: args.num_images,
        question: ORAND_QUESTION.to_string(),
        max_new_tokens: args.max_new_tokens,
    };
    let report = bench::run(&mut engine, &opts)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
