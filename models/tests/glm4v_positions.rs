//! GLM-4.1V's learned position table resampled to each image's patch grid
//! ([`verisample_models::vision_glm::bicubic_positions`]) against what transformers' `grid_sample`
//! (bicubic, `align_corners=False`, border padding, f32) gives on the glm4v fixture's four real
//! images (`pos_embed_i` of its goldens): within a few f32 roundings. Bit for bit it is not:
//! torch's vectorised CPU kernel (AVX-512 here) rounds differently from its own scalar formula,
//! which ours follows operation for operation (about 40 % of the values differ in the last bits;
//! measured: max |Δ| 6e-8 on values of order 0.1–1).

mod common;

use candle_core::{DType, Device};
use common::*;
use verisample_models::vision_glm::bicubic_positions;

#[test]
fn resampled_positions_are_torchs_grid_sample_within_rounding() {
    let g = Goldens::load("glm4v");
    let weights = candle_core::safetensors::load(
        fixture_dir("glm4v").join("model.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let table = &weights["model.visual.embeddings.position_embedding.weight"];
    let (n, hidden) = table.dims2().unwrap();
    let side = (n as f64).sqrt() as usize;
    assert_eq!(
        (side * side, hidden),
        (64, 32),
        "the fixture's 8×8 table of 32"
    );
    let values: Vec<f32> = table
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let merge = 2;
    let mut grids = Vec::new();
    for i in 0..g.n() {
        let grid = g.grid(i);
        // Patches in the processor's order: merge blocks row-major, patches row-major inside.
        let mut coords = Vec::new();
        for bh in 0..grid[1] / merge {
            for bw in 0..grid[2] / merge {
                for mh in 0..merge {
                    for mw in 0..merge {
                        coords.push((0, bh * merge + mh, bw * merge + mw));
                    }
                }
            }
        }
        let got: Vec<f32> =
            bicubic_positions(&values, side, hidden, &coords, &[grid], &Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
        let want = g.f32s("pos_embed", i);
        let differing = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let d = max_abs(&got, &want);
        println!(
            "image {i}: grid {grid:?}, max |Δ| {d:.3e}, {differing}/{} values differ in bits",
            want.len()
        );
        // A wrong tap, weight or coordinate is off by 1e-3 or more; rounding by 1e-7 at most.
        assert!(d <= 2e-7, "image {i}: resampled positions max |Δ| {d}");
        grids.push(grid);
    }
    // The grids are not the table's 8×8: every image is resampled, none sampled as is.
    assert!(
        grids.iter().all(|g| g[1] != side || g[2] != side),
        "{grids:?}"
    );
}
