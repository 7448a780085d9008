//! The op check of `doctor`: every candle op the portable path runs, on the device against
//! the same op on the CPU, in one dtype, over the shapes of the bundled model and with strided
//! (narrowed, transposed) inputs. A device backend whose kernel for one op or one dtype is
//! wrong shows up here by name, before it shows up as wrong tokens.

use candle_core::{DType, Device, Tensor, D};

use super::{dt, Check, DoctorError, Status};

/// One op: its name and what it computes from its inputs.
type Op = (&'static str, fn(&[Tensor]) -> candle_core::Result<Tensor>);

/// The ops, each applied to inputs `[a [77, 192], b [77, 192], w [576, 192], g [192], c [300,
/// 128], ids [40] u32 < 77]`.
const OPS: [Op; 20] = [
    ("matmul", |t| t[0].matmul(&t[2].t()?)),
    ("rms_norm", |t| candle_nn::ops::rms_norm(&t[0], &t[3], 1e-6)),
    ("layer_norm", |t| {
        let w = t[4].narrow(0, 0, 1)?.squeeze(0)?;
        let b = t[4].narrow(0, 1, 1)?.squeeze(0)?;
        candle_nn::ops::layer_norm(&t[4], &w, &b, 1e-6)
    }),
    ("softmax_last_dim", |t| {
        candle_nn::ops::softmax_last_dim(&t[0])
    }),
    ("silu", |t| t[0].silu()),
    ("gelu_erf", |t| t[0].gelu_erf()),
    ("sigmoid", |t| candle_nn::ops::sigmoid(&t[0])),
    ("exp", |t| (&t[0] * 0.25)?.exp()),
    ("mul/add/div", |t| {
        ((&t[0] * &t[1])? + &t[1])? / ((t[1].abs()? + 1.0)?)
    }),
    ("strided mul (narrowed columns)", |t| {
        t[0].narrow(1, 0, 96)? * t[0].narrow(1, 96, 96)?
    }),
    ("transpose + contiguous", |t| t[0].t()?.contiguous()),
    ("rope_thd", |t| {
        let x = t[0].reshape((1, 77, 3, 64))?;
        let cos = t[1].narrow(1, 0, 32)?.cos()?.contiguous()?;
        let sin = t[1].narrow(1, 0, 32)?.sin()?.contiguous()?;
        candle_nn::rotary_emb::rope_thd(&x, &cos, &sin)
    }),
    ("index_select", |t| t[0].index_select(&t[5], 0)),
    ("index_add", |t| {
        t[0].index_add(&t[5], &t[1].narrow(0, 0, 40)?, 0)
    }),
    ("gather", |t| {
        t[0].gather(&t[5].unsqueeze(0)?.repeat((77, 1))?, 1)
    }),
    ("cat", |t| Tensor::cat(&[&t[0], &t[1]], 1)),
    ("max_keepdim + sum_keepdim", |t| {
        t[0].max_keepdim(D::Minus1)? + t[1].sum_keepdim(D::Minus1)?
    }),
    ("where_cond + ge", |t| {
        t[0].ge(&t[1])?.where_cond(&t[0], &t[1])
    }),
    ("scatter_set", |t| {
        let dst = t[1].copy()?;
        let idx = t[5].unsqueeze(1)?.broadcast_as((40, 192))?.contiguous()?;
        dst.scatter_set(&idx, &t[0].narrow(0, 0, 40)?, 0)?;
        Ok(dst)
    }),
    ("to_dtype round trip", |t| {
        t[0].to_dtype(DType::F16)?.to_dtype(t[0].dtype())
    }),
];

/// Every op of [`OPS`] on `device` in `dtype` against the CPU on the same inputs: the largest
/// `|Δ|` relative to the largest CPU value, within 1e-5 in f32 and 2e-2 in f16/bf16 (the
/// storage rounding of either side), 1e-1 for the reductions in f16/bf16 (the CPU sums 192
/// values in the storage type, a GPU in f32). One check naming the ops outside their bound.
pub(super) fn op_accuracy(dtype: DType, device: &Device) -> Result<Check, DoctorError> {
    let cpu = Device::Cpu;
    let floats = |seed, dims: &[usize]| -> candle_core::Result<Tensor> {
        let n = dims.iter().product();
        Tensor::from_vec(verisample_kernels::lcg_uniform(seed, n, 2.0), dims, &cpu)?.to_dtype(dtype)
    };
    let ids: Vec<u32> = (0..40).map(|i| (i * 29 + 3) % 77).collect();
    let inputs = vec![
        floats(31, &[77, 192])?,
        floats(32, &[77, 192])?,
        floats(33, &[576, 192])?,
        floats(34, &[192])?,
        floats(35, &[300, 128])?,
        Tensor::new(ids.as_slice(), &cpu)?,
    ];
    let on_device = inputs
        .iter()
        .map(|t| t.to_device(device))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let bound = |name: &str| match dtype {
        DType::F32 => 1e-5,
        _ if name.contains("sum") => 1e-1,
        _ => 2e-2,
    };
    let flat = |t: Tensor| -> candle_core::Result<Vec<f32>> {
        t.to_device(&cpu)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()
    };
    let mut bad = Vec::new();
    for (name, op) in OPS {
        let outcome = op(&inputs).and_then(flat).and_then(|want| {
            let got = flat(op(&on_device)?)?;
            let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
            Ok(verisample_kernels::max_abs_diff(&got, &want) / scale)
        });
        match outcome {
            Ok(d) if d <= bound(name) => {}
            Ok(d) => bad.push(format!("{name}: relative max |Δ| {d:.1e}")),
            Err(e) => bad.push(format!("{name}: {e}")),
        }
    }
    Ok(Check {
        name: format!("ops vs cpu {}", dt(dtype)),
        status: Status::of(bad.is_empty()),
        detail: if bad.is_empty() {
            format!(
                "{} candle ops within {:.0e} (relative) of the cpu",
                OPS.len(),
                bound("")
            )
        } else {
            bad.join("; ")
        },
    })
}
