//! GLM-4.1V's additions to the vision tower of [`crate::vision`] ([`crate::config::GlmVision`]):
//! the learned position table resampled bicubically to each image's patch grid, and the head
//! after the blocks (`post_layernorm`, the `merge × merge` `downsample` convolution, the SwiGLU
//! merger).
//!
//! Reference: transformers `models/glm4v/modeling_glm4v.py` (`Glm4vVisionEmbeddings`,
//! `Glm4vVisionModel.forward`, `Glm4vVisionPatchMerger`); the resampling is torch's
//! `grid_sample(mode="bicubic", align_corners=False, padding_mode="border")` CPU kernel
//! (`aten/src/ATen/native/cpu/GridSamplerKernel.cpp`), its f32 formula followed operation for
//! operation; torch's vectorised build of it rounds some values differently in the last bits
//! (max |Δ| 6e-8 on the fixture, `models/tests/glm4v.rs`).

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use verisample_kernels::AttentionPath;

use crate::config::{GlmVision, MlpNames, VisionSpec};
use crate::layers::{linear, Act, Mlp, Norm, Proj, RmsNorm};

/// The cubic convolution weights of the 4 taps around a sample at fraction `t` of a cell
/// (Keys' kernel with `A = -0.75`, torch's `get_cubic_coefficients` in its order of
/// operations).
fn cubic_coefficients(t: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// The learned position table `[side², hidden]` (f32, row-major `side × side`) resampled to
/// the patches at `coords` (`(image, row, col)` in processor order) of images with grids
/// `grids`: per patch the table sampled at `((col + 0.5) / w · 2 − 1, (row + 0.5) / h · 2 − 1)`
/// bicubically with border padding, as `Glm4vVisionEmbeddings` does with `grid_sample`.
/// Returns `[coords.len(), hidden]` f32.
///
/// Errors: a candle error when `table` is not `side² × hidden`.
pub fn bicubic_positions(
    table: &[f32],
    side: usize,
    hidden: usize,
    coords: &[(usize, usize, usize)],
    grids: &[[usize; 3]],
    device: &Device,
) -> Result<Tensor> {
    if table.len() != side * side * hidden || side == 0 {
        candle_core::bail!(
            "position table of {} values is not {side}² × {hidden}",
            table.len()
        );
    }
    let scale = side as f32 / 2.0;
    let max = (side - 1) as f32;
    // torch `ComputeLocation::unnormalize` (align_corners=False): (x + 1) · size/2 − 0.5.
    let unnormalize =
        |i: usize, size: usize| ((i as f32 + 0.5) / size as f32 * 2.0 - 1.0 + 1.0) * scale - 0.5;
    let tap = |base: f32, k: f32| (base + k).clamp(0.0, max) as usize;
    let mut out = vec![0f32; coords.len() * hidden];
    let mut rows = [[0f32; 4]; 4];
    for (p, &(img, r, c)) in coords.iter().enumerate() {
        let g = grids[img];
        let (x, y) = (unnormalize(c, g[2]), unnormalize(r, g[1]));
        let (ix, iy) = (x.floor(), y.floor());
        let (cx, cy) = (cubic_coefficients(x - ix), cubic_coefficients(y - iy));
        let cols = [-1.0, 0.0, 1.0, 2.0].map(|k| tap(ix, k));
        let lines = [-1.0, 0.0, 1.0, 2.0].map(|k| tap(iy, k));
        let dst = &mut out[p * hidden..(p + 1) * hidden];
        for (d, v) in dst.iter_mut().enumerate() {
            for (i, &line) in lines.iter().enumerate() {
                for (j, &col) in cols.iter().enumerate() {
                    rows[i][j] = table[(line * side + col) * hidden + d];
                }
            }
            let interp =
                rows.map(|row| cx[0] * row[0] + cx[1] * row[1] + cx[2] * row[2] + cx[3] * row[3]);
            *v = cy[0] * interp[0] + cy[1] * interp[1] + cy[2] * interp[2] + cy[3] * interp[3];
        }
    }
    Tensor::from_vec(out, (coords.len(), hidden), device)
}

/// GLM-4.1V's head after the blocks: `post_layernorm`, the `downsample` convolution over each
/// `merge × merge` block of patches (a matmul: stride = kernel), then the merger.
pub struct GlmHead {
    post_norm: RmsNorm,
    /// `downsample` weight `[out_hidden, hidden, merge, merge]` flattened to
    /// `[out_hidden, hidden · merge²]`, with its bias.
    downsample: Proj,
    proj: Proj,
    norm: Norm,
    mlp: Mlp,
    merge2: usize,
}

impl GlmHead {
    /// Loads `post_layernorm`, `downsample` and `merger.*` from `vb` at the tower's prefix.
    ///
    /// Errors: a candle error naming a missing or mis-shaped tensor, or an unknown
    /// `hidden_act`.
    pub fn new(
        spec: &VisionSpec,
        glm: GlmVision,
        vb: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        let (hid, out, m) = (
            spec.hidden_size,
            spec.out_hidden_size,
            spec.spatial_merge_size,
        );
        let w = vb
            .get((out, hid, m, m), "downsample.weight")?
            .reshape((out, hid * m * m))?;
        let b = vb.get(out, "downsample.bias")?;
        let merger = vb.pp("merger");
        Ok(Self {
            post_norm: RmsNorm::new(hid, spec.norm_eps, vb.pp("post_layernorm"))?,
            downsample: Proj::from_parts(vec![(w, Some(b))], path)?,
            proj: linear(out, out, false, merger.pp("proj"), path)?,
            // nn.LayerNorm(dim): eps 1e-5.
            norm: Norm::new(false, out, 1e-5, merger.pp("post_projection_norm"))?,
            mlp: Mlp::new(
                out,
                glm.merger_intermediate_size,
                MlpNames::Gated,
                false,
                Act::from_name(&spec.hidden_act)?,
                merger,
                path,
            )?,
            merge2: m * m,
        })
    }

    /// `[n_patches, hidden]` in merge-block order → `[n_patches / merge², out_hidden]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.post_norm.forward(x)?;
        let (n, hid) = x.dims2()?;
        let blocks = n / self.merge2;
        // [blocks, merge², hid] → [blocks, hid, merge²]: the convolution's (channel, kh, kw).
        let x = x
            .reshape((blocks, self.merge2, hid))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((blocks, hid * self.merge2))?;
        let x = self.proj.forward(&self.downsample.forward(&x)?)?;
        self.mlp.forward(&self.norm.forward(&x)?.gelu_erf()?)
    }
}

/// The position table of a GLM-4.1V tower as f32 values for [`bicubic_positions`].
///
/// Errors: a candle error when the table cannot be read back.
pub fn table_values(table: &Tensor) -> Result<Vec<f32>> {
    table.to_dtype(DType::F32)?.flatten_all()?.to_vec1()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubic_weights_sum_to_one_and_interpolate_at_the_knots() {
        for t in [0.0f32, 0.25, 0.5, 0.75] {
            let c = cubic_coefficients(t);
            assert!((c.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{t}: {c:?}");
        }
        assert_eq!(cubic_coefficients(0.0), [0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn a_grid_the_size_of_the_table_samples_the_table_itself() {
        // 3×3 table of one channel; an image of 3×3 patches samples each cell's centre.
        let table: Vec<f32> = (0..9).map(|v| v as f32).collect();
        let coords: Vec<_> = (0..3)
            .flat_map(|r| (0..3).map(move |c| (0, r, c)))
            .collect();
        let t = bicubic_positions(&table, 3, 1, &coords, &[[1, 3, 3]], &Device::Cpu).unwrap();
        // Within f32 rounding of the normalised coordinates (torch's own arithmetic).
        let got = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (g, w) in got.iter().zip(&table) {
            assert!((g - w).abs() < 1e-5, "{got:?}");
        }
    }
}
