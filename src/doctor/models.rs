//! The model checks of `doctor`: batch invariance of whole models on each path
//! ([`verisample_models::probe`]) and the default model's greedy tokens on two paths.

use candle_core::{DType, Device};
use verisample_kernels::AttentionPath;
use verisample_models::{Preprocessor, VlModel};

use super::{check_dtype, dt, fail, invariance_check, Check, DoctorError, DoctorOptions, Status};
use crate::dataset::reader::InputReader;
use crate::engine::generation::GenerationConfig;
use crate::engine::vl::VlInputs;
use crate::engine::{Engine, EngineConfig, ImageInput, KvBudget, Request};

/// The default model and every fixture of `opts.invariance_models` loaded on `path` in
/// `dtype`: each one's probe sequences' logits and an image's embeddings bitwise the same alone,
/// in batches of 7, 16, 64 and 100, and chunked ([`verisample_models::probe`]). One check naming the
/// checkpoints; the first that differs or fails to run fails it.
pub(super) fn model_invariance(
    opts: &DoctorOptions,
    path: AttentionPath,
    dtype: DType,
    device: &Device,
) -> Check {
    let name = format!("batch invariance: models {} {}", path.name(), dt(dtype));
    let mut names = Vec::new();
    for dir in std::iter::once(&opts.model).chain(&opts.invariance_models) {
        let label = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
        let variations = VlModel::load_on_path(dir, dtype, device, path)
            .map_err(|e| e.to_string())
            .and_then(|m| {
                let mut v =
                    verisample_models::probe::forward_invariance(&m).map_err(|e| e.to_string())?;
                v.extend(
                    verisample_models::probe::vision_invariance(&m).map_err(|e| e.to_string())?,
                );
                Ok(v)
            });
        match variations {
            Ok(v) => {
                let check = invariance_check(name.clone(), &v);
                if check.status == Status::Fail {
                    return fail(name, format!("{label}: {}", check.detail));
                }
                names.push(label);
            }
            Err(e) => return fail(name, format!("{label}: failed to run: {e}")),
        }
    }
    Check {
        name,
        status: Status::Pass,
        detail: format!(
            "bitwise equal alone, in batches of 7/16/64/100, chunked, and an image among others: {}",
            names.join(", ")
        ),
    }
}

/// The default model on `device` (the path `run` takes there) in `dtype` against the CPU's
/// native kernels in the same dtype: the probe image's embeddings and the probe sequences'
/// logits ([`verisample_models::probe`]), largest `|Δ|` relative to the largest CPU value,
/// within 1e-3 in f32 and 5e-2 in bf16/f16 (two implementations rounding each layer's output
/// to 8 bits of mantissa). Where the tokens of two devices differ, this says whether the vision
/// tower or the decoder drifted, and by how much.
pub(super) fn model_vs_cpu(opts: &DoctorOptions, dtype: DType, device: &Device) -> Check {
    let name = format!("default model vs cpu native {} (vision, logits)", dt(dtype));
    let bound = if dtype == DType::F32 { 1e-3 } else { 5e-2 };
    let outputs = |device: &Device, path: AttentionPath| {
        let m =
            VlModel::load_on_path(&opts.model, dtype, device, path).map_err(|e| e.to_string())?;
        let vision = verisample_models::probe::probe_image_embeds(&m).map_err(|e| e.to_string())?;
        let logits = verisample_models::probe::probe_logits(&m).map_err(|e| e.to_string())?;
        Ok::<_, String>((vision, logits.concat()))
    };
    let both = outputs(device, AttentionPath::for_device(device))
        .and_then(|d| Ok((d, outputs(&Device::Cpu, AttentionPath::Native)?)));
    let ((dv, dl), (cv, cl)) = match both {
        Ok(b) => b,
        Err(e) => return fail(name, format!("failed to run: {e}")),
    };
    let rel = |a: &[f32], b: &[f32]| {
        let scale = b.iter().fold(1f32, |m, x| m.max(x.abs()));
        verisample_kernels::max_abs_diff(a, b) / scale
    };
    let (v, l) = (rel(&dv, &cv), rel(&dl, &cl));
    Check {
        name,
        status: Status::of(v <= bound && l <= bound),
        detail: format!(
            "relative max |Δ|: image embeddings {v:.1e}, logits {l:.1e} (bound {bound:.0e})"
        ),
    }
}

/// Items whose greedy tokens may differ between two end-to-end runs: one in
/// [`TOKEN_DIFF_PER`] (rounded down), e.g. 2 of the 78 ORAND-CAR-A `val` images, none of a
/// sample of fewer than 39. Two implementations round f32 (or bf16) differently — cuBLAS and
/// the packed CPU linear sum in other orders — and a near-tie between two tokens can flip;
/// more than this is a bug. The one tolerance of every token comparison (`doctor`,
/// `scripts/gpu-check.sh`).
pub const TOKEN_DIFF_PER: usize = 39;

/// The default model (or `opts.model`) on `opts.data`: greedy tokens of two paths compared
/// item by item, within [`TOKEN_DIFF_PER`]. On the CPU: native against portable and against
/// flash (the oracle), f32. On a GPU: the device's portable path against the CPU's native
/// kernels in f32, and, where the build has flash-attn, flash against portable on the device in
/// bf16 (the dtype flash-attn computes in).
pub(super) fn model_tokens(
    opts: &DoctorOptions,
    device: &Device,
) -> Result<Vec<Check>, DoctorError> {
    let requests = sample_requests(opts)?;
    let cpu = Device::Cpu;
    let run = |device: &Device, path: AttentionPath, dtype: DType| {
        generate(opts, device, path, dtype, requests.clone())
    };
    let mut checks = Vec::new();
    if device.is_cpu() {
        let native = run(&cpu, AttentionPath::Native, DType::F32)?;
        for path in [AttentionPath::Portable, AttentionPath::Flash] {
            let other = run(&cpu, path, DType::F32)?;
            checks.push(compare_tokens(
                format!("default model tokens {} vs cpu native", path.name()),
                &other,
                &native,
                opts,
                DType::F32,
            ));
        }
    } else {
        let portable = run(device, AttentionPath::Portable, DType::F32)?;
        let native = run(&cpu, AttentionPath::Native, DType::F32)?;
        checks.push(compare_tokens(
            "default model tokens portable vs cpu native".into(),
            &portable,
            &native,
            opts,
            DType::F32,
        ));
        if AttentionPath::Flash.available_on(device) {
            let dtype = check_dtype(AttentionPath::Flash, device);
            let flash = run(device, AttentionPath::Flash, dtype)?;
            let portable = run(device, AttentionPath::Portable, dtype)?;
            checks.push(compare_tokens(
                "default model tokens flash vs portable".into(),
                &flash,
                &portable,
                opts,
                dtype,
            ));
        }
    }
    Ok(checks)
}

/// The check of two runs' tokens within [`TOKEN_DIFF_PER`].
fn compare_tokens(
    name: String,
    a: &[Vec<u32>],
    b: &[Vec<u32>],
    opts: &DoctorOptions,
    dtype: DType,
) -> Check {
    let n = a.len();
    let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
    let allowed = n / TOKEN_DIFF_PER;
    Check {
        name,
        status: Status::of(n - same <= allowed),
        detail: format!(
            "{same}/{n} items token-identical ({}, {} new tokens; at most {allowed} may differ)",
            dt(dtype),
            opts.max_new_tokens
        ),
    }
}

fn sample_requests(opts: &DoctorOptions) -> Result<Vec<Request>, DoctorError> {
    let spec = opts.data.to_string_lossy();
    let reader = InputReader::open(&spec)
        .map_err(|e| DoctorError::Load(format!("{}: {e}", opts.data.display())))?;
    let mut requests = Vec::new();
    for row in reader {
        let row = row.map_err(|e| DoctorError::Load(format!("{}: {e:?}", opts.data.display())))?;
        let bytes = row.image.bytes.clone().unwrap_or_default();
        for qa in &row.qa {
            requests.push(Request {
                enable_thinking: Some(true),
                id: requests.len() as u64,
                system: None,
                image: Some(ImageInput::new(bytes.clone())),
                text: qa.question.clone(),
                max_new_tokens: None,
                ..Default::default()
            });
        }
    }
    if requests.is_empty() {
        return Err(DoctorError::Load(format!(
            "{}: no question",
            opts.data.display()
        )));
    }
    Ok(requests)
}

/// Greedy token ids per request (in id order) of the model at `opts.model` on `device` in
/// `dtype` with attention `path`.
fn generate(
    opts: &DoctorOptions,
    device: &Device,
    path: AttentionPath,
    dtype: DType,
    requests: Vec<Request>,
) -> Result<Vec<Vec<u32>>, DoctorError> {
    let load =
        |e: &dyn std::fmt::Display| DoctorError::Load(format!("{}: {e}", opts.model.display()));
    let model = VlModel::load_on_path(&opts.model, dtype, device, path).map_err(|e| load(&e))?;
    let images = Preprocessor::from_dir(&opts.model, model.config()).map_err(|e| load(&e))?;
    let generation = GenerationConfig::resolve(&opts.model, true, None).map_err(|e| load(&e))?;
    let inputs =
        VlInputs::from_dir(&opts.model, &model, images, &generation).map_err(|e| load(&e))?;
    // On a GPU the pool and the batch `run` takes there (most of the free memory, the batch
    // picked from it), so the tokens checked are those of a run; on the CPU a small pool.
    let (kv_budget, max_batch, auto_max_batch) = if device.is_cuda() {
        let fraction = crate::settings::DEFAULT_CUDA_KV_FRACTION;
        let cap = crate::settings::AUTO_MAX_BATCH_CAP;
        (KvBudget::FreeFraction(fraction), cap, true)
    } else {
        (KvBudget::Blocks(512), 16, false)
    };
    let cfg = EngineConfig {
        kv_budget,
        max_batch,
        auto_max_batch,
        max_new_tokens: opts.max_new_tokens,
        repetition_penalty: Some(generation.repetition_penalty),
        ..Default::default()
    };
    let mut engine = Engine::new(model, inputs, cfg).map_err(|e| load(&e))?;
    let mut out = vec![Vec::new(); requests.len()];
    engine
        .generate(requests, |c| {
            out[c.id as usize] = c.token_ids;
            Ok(())
        })
        .map_err(|e| load(&e))?;
    Ok(out)
}
