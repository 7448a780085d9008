//! `verisample doctor`: the device self-check.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

/// Check this machine's device: kernels against the CPU, batch invariance, the default model.
#[derive(Debug, Args)]
#[command(
    long_about = "Check this machine's device: report it, its memory and dtypes; run the \
paged-attention ops of every attention path it has on random inputs against the CPU kernels \
(max abs error per kernel and dtype); check batch invariance, bitwise, on every path in f32 \
and bf16 (attention rows alone, inside batches of 7 to 100 sequences, chunked and decoded; \
linear rows at 1 to 300 rows; the default model and each family's fixture, forward and vision \
tower); run the default model on the bundled sample on the device and on the CPU and compare \
the greedy tokens. Says which path `run` takes on the device. Exits 1 when a check fails.",
    after_help = "Examples:\n  verisample doctor\n  verisample doctor --device cuda:0 --json"
)]
pub struct DoctorArgs {
    /// Device: cpu, cuda:N or metal. [default: cuda:0 in a CUDA build, metal in a Metal build,
    /// else cpu]
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<crate::settings::DeviceSpec>,
    /// Checkpoint for the end-to-end check, of any family `run` takes (the help text lists
    /// them).
    #[arg(long, value_name = "DIR", help = format!(
        "Checkpoint for the end-to-end check, of any family `run` takes: {}. [default: the \
         bundled model, found as `run` finds it]",
        verisample_models::listing()
    ))]
    pub model: Option<PathBuf>,
    /// Dataset for the end-to-end check. [default: the bundled sample]
    #[arg(long, value_name = "INPUT")]
    pub data: Option<PathBuf>,
    /// New tokens per image in the end-to-end check.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_new_tokens: usize,
    /// A folder of checkpoints (one per subfolder) whose whole forward is checked for batch
    /// invariance besides the default model. [default: the checkout's
    /// `models/tests/fixtures`, a tiny checkpoint of every family, where found]
    #[arg(long, value_name = "DIR")]
    pub fixtures: Option<PathBuf>,
    /// Print one JSON report instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `verisample doctor`: run the device checks, print the report; a failed check is an error
/// (exit 1) after the report is printed.
///
/// Errors: a device this binary was not built for (usage), the device not opening, the
/// default model or sample not loading, a failed check.
pub(super) fn run(a: &DoctorArgs) -> anyhow::Result<()> {
    use crate::doctor::{self, DoctorOptions};
    use crate::settings::{bundled, DeviceSpec, DEFAULT_DATA};

    let device = a.device.unwrap_or_else(DeviceSpec::default_for_build);
    device.check_built()?;
    let opts = DoctorOptions {
        device,
        model: a
            .model
            .clone()
            .unwrap_or_else(crate::settings::default_model_dir),
        data: a.data.clone().unwrap_or_else(|| bundled(DEFAULT_DATA)),
        max_new_tokens: a.max_new_tokens,
        invariance_models: checkpoints_in(
            &a.fixtures
                .clone()
                .unwrap_or_else(|| bundled("models/tests/fixtures")),
        ),
    };
    let report = doctor::run(&opts).with_context(|| format!("doctor on {device}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.to_text());
    }
    if report.failed() {
        anyhow::bail!("doctor: a check failed on {device} (see the report above)");
    }
    Ok(())
}

/// The subfolders of `dir` that hold a `config.json`, sorted (none when `dir` is absent).
fn checkpoints_in(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("config.json").is_file() && p.join("model.safetensors").is_file())
        .collect();
    found.sort();
    found
}
