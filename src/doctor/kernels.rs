//! The kernel checks of `doctor`: each attention path against the direct reference, and the
//! batch invariance of attention and of the linear layers ([`verisample_kernels::probe`]).

use candle_core::{DType, Device, Tensor};
use verisample_kernels::probe::{self, ProbeStep, PROBE_QUERY_ROW, PROBE_ROW};
use verisample_kernels::{max_abs_diff, AttentionPath, PackedLinear, TiledLinear};

use super::{dt, fail, invariance_check, Check, DoctorError, Status};

/// Deterministic pseudo-random floats in [-2, 2) (64-bit LCG, Knuth's constants).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 2.0)
}

/// Round `x` through `dtype` on the host, so the CPU reference sees what the device stores.
fn round(x: Vec<f32>, dtype: DType) -> candle_core::Result<Vec<f32>> {
    Tensor::new(x.as_slice(), &Device::Cpu)?
        .to_dtype(dtype)?
        .to_dtype(DType::F32)?
        .to_vec1()
}

/// Cache write and attention on `path` in `dtype` against an independent CPU reference in f32
/// ([`ProbeStep::reference`]) on the same (dtype-rounded) inputs: a fresh prefill, a chunk after
/// cached tokens, decodes.
pub(super) fn kernel_accuracy(
    path: AttentionPath,
    dtype: DType,
    device: &Device,
) -> Result<Vec<Check>, DoctorError> {
    let step = ProbeStep::new(&[(37, 37), (19, 83), (1, 130), (1, 16), (1, 17)]);
    let total = step.slots.len();
    let fill = round(lcg(1, step.pool_len()), dtype)?;
    let (k, v) = (
        round(lcg(2, total * PROBE_ROW), dtype)?,
        round(lcg(3, total * PROBE_ROW), dtype)?,
    );
    let q = round(lcg(4, total * PROBE_QUERY_ROW), dtype)?;
    let (kc_ref, out_ref) = step
        .reference(&fill, &k, &v, &q)
        .map_err(|e| DoctorError::Load(format!("reference attention: {e}")))?;
    let name = |op: &str| format!("{op} {} {}", path.name(), dt(dtype));
    let (kc, out) = match step.run(path, dtype, device, &fill, &k, &v, &q) {
        Ok(r) => r,
        Err(e) => {
            return Ok(vec![fail(
                name("paged attention"),
                format!("failed to run: {e}"),
            )])
        }
    };
    // The storage rounding of the output bounds what f16/bf16 can match.
    let tol = match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        _ => 8e-3,
    };
    let write = max_abs_diff(&kc, &kc_ref);
    let attn = max_abs_diff(&out, &out_ref);
    let judge = |d: f32, bound: f32| Status::of(d <= bound);
    Ok(vec![
        Check {
            name: name("reshape_and_cache"),
            status: judge(write, 0.0),
            detail: format!("max |Δ| {write:.1e} vs host loop (bound: exact)"),
        },
        Check {
            name: name("paged_attention"),
            status: judge(attn, tol),
            detail: format!("max |Δ| {attn:.1e} vs direct f32 reference (bound {tol:.0e})"),
        },
    ])
}

/// Attention rows on `path` in `dtype` bitwise the same alone, inside batches of 7 to 100
/// sequences, chunked and decoded ([`probe::attention_invariance`]).
pub(super) fn attention_invariance(
    path: AttentionPath,
    dtype: DType,
    device: &Device,
) -> Result<Check, DoctorError> {
    let name = format!("batch invariance: attention {} {}", path.name(), dt(dtype));
    Ok(match probe::attention_invariance(path, dtype, device) {
        Ok(v) => invariance_check(name, &v),
        Err(e) => fail(name, format!("failed to run: {e}")),
    })
}

/// Rows 0 and 1 of a 1024 → 1024 projection with bias in `dtype` bitwise the same at 1 to 300
/// rows ([`probe::rows_invariance`]): the tiled candle matmul (every device), and on the CPU
/// the packed linear.
pub(super) fn linear_invariance(dtype: DType, device: &Device) -> Result<Vec<Check>, DoctorError> {
    let (h, o) = (1024, 1024);
    let t = |seed, n, dims: &[usize]| -> candle_core::Result<Tensor> {
        Tensor::from_vec(lcg(seed, n), dims, device)?.to_dtype(dtype)
    };
    let (w, b) = (t(21, o * h, &[o, h])?, t(22, o, &[o])?);
    let x = t(23, 300 * h, &[300, h])?;
    let mut checks = Vec::new();
    let tiled = TiledLinear::new(w.clone(), Some(b.clone()));
    let name = |kind: &str| format!("batch invariance: linear {kind} {}", dt(dtype));
    checks.push(match probe::rows_invariance(&|x| tiled.forward(x), &x) {
        Ok(v) => invariance_check(name("tiled"), &v),
        Err(e) => fail(name("tiled"), format!("failed to run: {e}")),
    });
    if device.is_cpu() {
        let packed = PackedLinear::pack(&[(w, Some(b))])
            .map_err(|e| DoctorError::Load(format!("packing a linear: {e}")))?;
        checks.push(
            match probe::rows_invariance(&|x| Ok(packed.forward(x)?), &x) {
                Ok(v) => invariance_check(name("packed"), &v),
                Err(e) => fail(name("packed"), format!("failed to run: {e}")),
            },
        );
    }
    Ok(checks)
}
