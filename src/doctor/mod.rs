//! `doctor`: the self-check a user runs on a new machine, and our device check.
//!
//! On the chosen device it reports the device, its memory, the dtypes it computes in and the
//! path `run` takes there; runs the paged-attention ops of every attention path the device has
//! (native CPU kernels on the CPU, the portable candle-op path everywhere, flash-attn on CUDA in a
//! `flash-attn` build and its oracle on the CPU) on random ragged steps against an independent
//! direct reference in f32; checks batch invariance, bitwise, on every path in f32 and bf16:
//! attention rows alone, inside batches of 7 to 100 sequences, chunked and decoded
//! ([`verisample_kernels::probe`]), the linear layers' rows at 1 to 300 rows, and whole models —
//! the default model and the fixture of every family — forward and vision tower
//! ([`verisample_models::probe`]); and runs the default model (or `--model`) on the bundled
//! sample (or `--data`) on two paths, comparing the greedy tokens within one stated tolerance
//! ([`TOKEN_DIFF_PER`]). Every check passes or fails; a failure makes the command exit 1.
//!
//! Batch invariance is required of every path: the splits are promised to be the same bytes at
//! any batch, and the path that breaks it on a device is a bug there.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;
use verisample_kernels::probe::Variation;
use verisample_kernels::AttentionPath;

use crate::settings::DeviceSpec;

mod kernels;
mod models;
mod ops;

pub use models::TOKEN_DIFF_PER;

/// What `doctor` checks.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// The device under test.
    pub device: DeviceSpec,
    /// Checkpoint for the end-to-end check (the bundled default model by default).
    pub model: PathBuf,
    /// Dataset for the end-to-end check (the bundled sample by default).
    pub data: PathBuf,
    /// New tokens per image in the end-to-end check.
    pub max_new_tokens: usize,
    /// Checkpoints whose whole forward is checked for batch invariance besides `model`: the
    /// fixture of every family (`models/tests/fixtures/*` of the checkout), where found.
    pub invariance_models: Vec<PathBuf>,
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within its bound.
    Pass,
    /// Outside its bound: `doctor` exits 1.
    Fail,
}

impl Status {
    /// `Pass` when `ok`, else `Fail`.
    fn of(ok: bool) -> Self {
        if ok {
            Status::Pass
        } else {
            Status::Fail
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked, e.g. `paged_attention portable bf16`.
    pub name: String,
    /// The outcome.
    pub status: Status,
    /// The measured value and its bound, in words.
    pub detail: String,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// The device, e.g. `cuda:0`.
    pub device: String,
    /// Free and total memory in bytes where the device reports them.
    pub memory: Option<(u64, u64)>,
    /// Dtypes a matmul ran in on the device.
    pub dtypes: Vec<String>,
    /// The attention path `run` takes on this device ([`AttentionPath::for_device`]) and what
    /// it runs: e.g. `portable (candle matmul in row tiles, candle-op attention)`.
    pub run_path: String,
    /// Every check in order.
    pub checks: Vec<Check>,
}

impl DoctorReport {
    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }

    /// The report as aligned text lines.
    pub fn to_text(&self) -> String {
        let mem = match self.memory {
            Some((free, total)) => format!(
                "{:.1} GiB free of {:.1} GiB",
                free as f64 / GIB,
                total as f64 / GIB
            ),
            None => "not reported".into(),
        };
        let mut out = format!(
            "device {}: memory {mem}; dtypes {}\nrun takes the {} path here\n",
            self.device,
            self.dtypes.join(", "),
            self.run_path
        );
        for c in &self.checks {
            let status = match c.status {
                Status::Pass => "ok  ",
                Status::Fail => "FAIL",
            };
            out.push_str(&format!("{status} {:<44} {}\n", c.name, c.detail));
        }
        let fails = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .count();
        out.push_str(&match fails {
            0 => "doctor: all checks passed".to_string(),
            n => format!("doctor: {n} check(s) failed"),
        });
        out
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Errors that stop the doctor before its checks can be judged.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The device could not be opened or a tensor op failed outside a check.
    #[error("{0}")]
    Candle(#[from] candle_core::Error),
    /// The default model or sample could not be loaded.
    #[error("{0}")]
    Load(String),
}

/// Runs every check on `opts.device`.
///
/// Errors: [`DoctorError`] when the device cannot be opened or the model/sample not loaded;
/// a check that runs and misses its bound is a [`Status::Fail`] in the report, not an error.
pub fn run(opts: &DoctorOptions) -> Result<DoctorReport, DoctorError> {
    let device = opts.device.open()?;
    let mut checks = Vec::new();
    let mut dtypes = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let ok = Tensor::ones((4, 4), dtype, &device)
            .and_then(|t| t.matmul(&t))
            .and_then(|t| t.to_dtype(DType::F32))
            .and_then(|t| t.sum_all())
            .and_then(|t| t.to_scalar::<f32>());
        match ok {
            Ok(64.0) => dtypes.push(dtype),
            Ok(v) => checks.push(fail(
                format!("matmul {}", dt(dtype)),
                format!("4×4 ones squared sum to {v}, not 64"),
            )),
            Err(_) => {}
        }
    }
    let paths: Vec<AttentionPath> = [
        AttentionPath::Native,
        AttentionPath::Portable,
        AttentionPath::Flash,
    ]
    .into_iter()
    .filter(|p| p.available_on(&device))
    .collect();
    // The invariance and device-vs-CPU checks run in f32 and bf16 where the device has them;
    // each path in those it computes in.
    let checked: Vec<DType> = [DType::F32, DType::BF16]
        .into_iter()
        .filter(|d| dtypes.contains(d))
        .collect();
    let combos: Vec<(AttentionPath, DType)> = paths
        .iter()
        .flat_map(|&p| checked.iter().map(move |&d| (p, d)))
        .filter(|&(p, d)| path_computes(p, d, &device))
        .collect();
    for &dtype in &dtypes {
        checks.push(ops::op_accuracy(dtype, &device)?);
    }
    for &path in &paths {
        for &dtype in dtypes.iter().filter(|&&d| path_computes(path, d, &device)) {
            checks.extend(kernels::kernel_accuracy(path, dtype, &device)?);
        }
    }
    for &(path, dtype) in &combos {
        checks.push(kernels::attention_invariance(path, dtype, &device)?);
    }
    for &dtype in &checked {
        checks.extend(kernels::linear_invariance(dtype, &device)?);
    }
    for &(path, dtype) in &combos {
        checks.push(models::model_invariance(opts, path, dtype, &device));
    }
    if !device.is_cpu() {
        for &dtype in &checked {
            checks.push(models::model_vs_cpu(opts, dtype, &device));
        }
    }
    checks.extend(models::model_tokens(opts, &device)?);
    let run = AttentionPath::for_device(&device);
    Ok(DoctorReport {
        device: opts.device.to_string(),
        memory: crate::engine::config::device_memory(&device),
        dtypes: dtypes.iter().map(|&d| dt(d).to_string()).collect(),
        run_path: format!(
            "{} ({})",
            run.name(),
            if run.uses_cpu_kernels(&device) {
                "packed CPU linear, native attention"
            } else {
                "candle matmul in row tiles, candle-op attention"
            }
        ),
        checks,
    })
}

fn dt(d: DType) -> &'static str {
    d.as_str()
}

fn fail(name: String, detail: String) -> Check {
    Check {
        name,
        status: Status::Fail,
        detail,
    }
}

/// Whether `path` computes in `dtype` on `device`: flash-attn on a GPU takes bf16/f16 only
/// (its CPU oracle every dtype).
fn path_computes(path: AttentionPath, dtype: DType, device: &Device) -> bool {
    path != AttentionPath::Flash
        || device.is_cpu()
        || verisample_kernels::flash::supports_dtype(dtype)
}

/// The dtype a path's batch-invariance and end-to-end checks run in: f32, or bf16 where the
/// path does not compute in f32 (flash-attn on a GPU).
fn check_dtype(path: AttentionPath, device: &Device) -> DType {
    if path_computes(path, DType::F32, device) {
        DType::F32
    } else {
        DType::BF16
    }
}

/// A check that every variation of an invariance probe left its rows bitwise unchanged.
fn invariance_check(name: String, variations: &[Variation]) -> Check {
    let bad = verisample_kernels::probe::differing(variations);
    Check {
        name,
        status: Status::of(bad.is_empty()),
        detail: if bad.is_empty() {
            format!(
                "bitwise equal: {}",
                variations
                    .iter()
                    .map(|v| v.what.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            bad.iter()
                .map(|v| format!("{}: max |Δ| {:.1e}", v.what, v.max_abs_diff))
                .collect::<Vec<_>>()
                .join("; ")
        },
    }
}
