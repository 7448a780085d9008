//! The vision tower at real image sizes: the Qwen2-VL fixture tower (2 heads of 32) on a
//! synthetic 3000×3000 image (214×214 = 45,796 patches), whose `[heads, patches, patches]`
//! f32 score matrix alone would take 16.8 GB. The attention's own allocation is the one
//! `segment_attention_scratch_bytes` computes (linear in the patches); the tower's output on
//! a smaller image equals the direct computation (the portable path, one query chunk).

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use verisample_kernels::segment_attention_scratch_bytes;
use verisample_models::{AttentionPath, VisionInputs, VlModel};

/// Synthetic normalised pixels `[h·w, C·T·P·P]` of a one-frame grid (a smooth ramp plus a
/// deterministic ripple, values in [-1.5, 1.5]).
fn pixels(grid: [usize; 3], row: usize) -> Tensor {
    let n = grid[0] * grid[1] * grid[2];
    let data: Vec<f32> = (0..n * row)
        .map(|i| ((i % 9973) as f32 / 9973.0 - 0.5) * 2.0 + 0.5 * ((i as f32) * 0.37).sin())
        .collect();
    Tensor::from_vec(data, (n, row), &Device::Cpu).unwrap()
}

fn model() -> VlModel {
    load_model("qwen2_vl")
}

fn row_width(model: &VlModel) -> usize {
    let s = model.vision_spec().qwen().unwrap();
    s.in_channels * s.temporal_patch_size * s.patch_size * s.patch_size
}

#[test]
fn tower_matches_direct_attention() {
    let m = model();
    let grid = [1, 40, 60];
    let inputs = VisionInputs {
        pixel_values: pixels(grid, row_width(&m)),
        grid_thw: vec![grid],
    };
    let native = m.encode_images(&inputs).unwrap().embeds;
    let direct = load_model_on("qwen2_vl", DType::F32, AttentionPath::Portable)
        .encode_images(&inputs)
        .unwrap()
        .embeds;
    assert_eq!(
        native.dims(),
        &[600, m.vision_spec().qwen().unwrap().out_hidden_size]
    );
    let d = (native - direct)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(d <= 1e-5, "native vs direct max |Δ| {d}");
}

#[test]
fn tower_runs_a_3000x3000_image_in_linear_attention_memory() {
    let m = model();
    let spec = m.vision_spec().qwen().unwrap().clone();
    // 3000 px → 2996 (multiple of patch·merge = 28) → 214 patches per side.
    let side = 3000 / 28 * 2;
    let grid = [1, side, side];
    let n = side * side;
    let (heads, hd) = (spec.num_heads, spec.hidden_size / spec.num_heads);
    let bytes =
        segment_attention_scratch_bytes(n, heads, hd, DType::F32, rayon::current_num_threads());
    let quadratic = heads * n * n * 4;
    println!("{n} patches: attention scratch {bytes} B; one score matrix would take {quadratic} B");
    assert_eq!(n, 45_796);
    assert!(bytes < 64 << 20, "attention scratch {bytes} B");
    assert!(bytes * 500 < quadratic);
    let out = m
        .encode_images(&VisionInputs {
            pixel_values: pixels(grid, row_width(&m)),
            grid_thw: vec![grid],
        })
        .unwrap()
        .embeds;
    assert_eq!(out.dims(), &[n / 4, spec.out_hidden_size]);
    let finite = out
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .all(|x| x.is_finite());
    assert!(finite, "non-finite image embeddings");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(hwm) = status.lines().find(|l| l.starts_with("VmHWM")) {
        println!("peak RSS of the test process: {hwm}");
    }
}
