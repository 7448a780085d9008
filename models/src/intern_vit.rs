//! InternVL's vision side: InternViT over fixed-size tiles, the pixel shuffle and the MLP
//! projector, producing one row of image embeddings per `<IMG_CONTEXT>` token.
//!
//! Per tile (`image_size²` pixels, `(image_size / patch)²` patches): a patch embedding (the
//! Conv2d with stride = kernel as one matmul per patch), a CLS token in front, the learned
//! position table added; pre-norm layers whose attention and MLP outputs are scaled per
//! channel (`lambda_1`, `lambda_2`, layer scale) before their residual adds; attention stays
//! inside the tile. The CLS row is dropped, each `s × s` block of patches is concatenated
//! into one row (`pixel_shuffle`, `s = 1 / downsample_ratio`), and LayerNorm → linear → act →
//! linear maps it to the decoder's width.
//!
//! Reference: transformers `models/internvl/modeling_internvl.py` (`InternVLVisionModel`,
//! `InternVLModel.get_image_features`, `pixel_shuffle`, `InternVLMultiModalProjector`).

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use verisample_kernels::{AttentionPath, SegmentAttentionParams};

use crate::config::{InternVitSpec, MlpNames, VisionNorm};
use crate::layers::{fused_linear, linear, Act, Mlp, Norm, Proj, RmsNorm};
use crate::vision::ImageEmbeds;

/// `nn.LayerNorm`'s default epsilon, which the projector's norm keeps.
const PROJECTOR_NORM_EPS: f64 = 1e-5;
/// `InternVLVisionRMSNorm`'s default epsilon, which the q/k norms keep.
const QK_NORM_EPS: f64 = 1e-6;

struct Layer {
    norm_before: Norm,
    norm_after: Norm,
    /// `[q | k | v]`.
    qkv: Proj,
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    out: Proj,
    /// Layer scale of the attention and MLP outputs, `[hidden]` each.
    lambda: (Tensor, Tensor),
    mlp: Mlp,
}

/// InternViT with its pixel shuffle and projector.
pub struct InternVit {
    spec: InternVitSpec,
    /// The patch Conv2d as a projection: weight `[hidden, C·P·P]`.
    patch_embed: Proj,
    /// `[1, hidden]`.
    cls: Tensor,
    /// `[1 + patches, hidden]`.
    positions: Option<Tensor>,
    layers: Vec<Layer>,
    final_norm: Option<Norm>,
    projector_norm: Norm,
    projector_1: Proj,
    projector_act: Act,
    projector_2: Proj,
    dtype: DType,
    attention: AttentionPath,
}

impl InternVit {
    /// Loads the tower from `vision` (at `vision_tower`) and the projector from `projector`
    /// (at `multi_modal_projector`), projections and attention on `path`.
    ///
    /// Errors: a candle error naming any missing or mis-shaped tensor; an unsupported
    /// activation.
    pub fn new(
        spec: &InternVitSpec,
        vision: VarBuilder,
        projector: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        let (hid, p, c) = (spec.hidden_size, spec.patch_size, spec.in_channels);
        let e = vision.pp("embeddings");
        let pe = e.pp("patch_embeddings").pp("projection");
        let weight = pe
            .get((hid, c, p, p), "weight")?
            .reshape((hid, c * p * p))?;
        let bias = pe.get(hid, "bias")?;
        let patches = spec.patches_per_side().pow(2);
        let positions = spec
            .absolute_positions
            .then(|| {
                e.get((1, patches + 1, hid), "position_embeddings")?
                    .reshape((patches + 1, hid))
            })
            .transpose()?;
        let rms = spec.norm == VisionNorm::RmsNorm;
        let act = Act::from_name(&spec.hidden_act)?;
        let layers = (0..spec.num_layers)
            .map(|i| {
                let l = vision.pp("encoder").pp("layer").pp(i);
                let a = l.pp("attention");
                let qkv = fused_linear(
                    hid,
                    &[
                        (hid, a.pp("q_proj")),
                        (hid, a.pp("k_proj")),
                        (hid, a.pp("v_proj")),
                    ],
                    spec.attention_bias,
                    path,
                )?;
                let qk_norm = spec
                    .qk_norm
                    .then(|| -> Result<_> {
                        Ok((
                            RmsNorm::new(hid, QK_NORM_EPS, a.pp("q_norm"))?,
                            RmsNorm::new(hid, QK_NORM_EPS, a.pp("k_norm"))?,
                        ))
                    })
                    .transpose()?;
                Ok(Layer {
                    norm_before: Norm::new(rms, hid, spec.norm_eps, l.pp("layernorm_before"))?,
                    norm_after: Norm::new(rms, hid, spec.norm_eps, l.pp("layernorm_after"))?,
                    qkv,
                    qk_norm,
                    out: linear(hid, hid, true, a.pp("projection_layer"), path)?,
                    lambda: (l.get(hid, "lambda_1")?, l.get(hid, "lambda_2")?),
                    mlp: Mlp::new(
                        hid,
                        spec.intermediate_size,
                        MlpNames::Fc,
                        true,
                        act,
                        l.pp("mlp"),
                        path,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let final_norm = spec
            .final_norm
            .then(|| Norm::new(false, hid, spec.norm_eps, vision.pp("layernorm")))
            .transpose()?;
        let merged = hid * spec.shuffle * spec.shuffle;
        let out = spec.out_hidden_size;
        Ok(Self {
            spec: spec.clone(),
            dtype: weight.dtype(),
            patch_embed: Proj::from_parts(vec![(weight, Some(bias))], path)?,
            cls: e.get((1, 1, hid), "cls_token")?.reshape((1, hid))?,
            positions,
            layers,
            final_norm,
            projector_norm: Norm::new(
                false,
                merged,
                PROJECTOR_NORM_EPS,
                projector.pp("layer_norm"),
            )?,
            projector_1: linear(merged, out, true, projector.pp("linear_1"), path)?,
            projector_act: Act::from_name(&spec.projector_act)?,
            projector_2: linear(out, out, true, projector.pp("linear_2"), path)?,
            attention: path,
        })
    }

    /// Encodes `pixel_values` `[Σ tiles · patches, C·P·P]` (each tile's patches row-major, a
    /// patch flattened as `[C, P, P]`) of the images with grids `grid_thw` (`[tiles, side,
    /// side]`) into `[Σ tiles · tokens_per_tile, out_hidden]`, images and tiles in order.
    ///
    /// Errors: when the rows do not match the grids, or a grid's side is not the tile's.
    pub fn forward(&self, pixel_values: &Tensor, grid_thw: &[[usize; 3]]) -> Result<ImageEmbeds> {
        let side = self.spec.patches_per_side();
        let patches = side * side;
        let mut tiles = 0;
        for g in grid_thw {
            if g[1] != side || g[2] != side {
                candle_core::bail!("image grid {g:?} is not tiles of {side}×{side} patches");
            }
            tiles += g[0];
        }
        if pixel_values.dim(0)? != tiles * patches {
            candle_core::bail!(
                "pixel_values has {} rows but {tiles} tiles need {}",
                pixel_values.dim(0)?,
                tiles * patches
            );
        }
        let hid = self.spec.hidden_size;
        let x = self
            .patch_embed
            .forward(&pixel_values.to_dtype(self.dtype)?)?
            .reshape((tiles, patches, hid))?;
        let cls = self.cls.unsqueeze(0)?.broadcast_as((tiles, 1, hid))?;
        let mut x = Tensor::cat(&[&cls, &x], 1)?;
        if let Some(table) = &self.positions {
            x = x.broadcast_add(table)?;
        }
        let len = patches + 1;
        let mut x = x.reshape((tiles * len, hid))?;
        let segments: Vec<(usize, usize)> = (0..tiles).map(|t| (t * len, len)).collect();
        for layer in &self.layers {
            x = self.layer(layer, &x, &segments)?;
        }
        if let Some(norm) = &self.final_norm {
            x = norm.forward(&x)?;
        }
        // Drop each tile's CLS row, then the pixel shuffle.
        let x = x.reshape((tiles, len, hid))?.narrow(1, 1, patches)?;
        let x = x.contiguous()?.reshape((tiles * patches, hid))?;
        let s = self.spec.shuffle;
        let rows = shuffle_rows(tiles, side, s);
        let dev = x.device().clone();
        let x = x
            .index_select(&Tensor::new(rows.as_slice(), &dev)?, 0)?
            .reshape((rows.len() / (s * s), s * s * hid))?;
        let h = self
            .projector_1
            .forward(&self.projector_norm.forward(&x)?)?;
        let embeds = self.projector_2.forward(&self.projector_act.forward(&h)?)?;
        Ok(ImageEmbeds {
            embeds,
            deepstack: Vec::new(),
        })
    }

    /// One pre-norm layer with layer scale: `x + λ₁ · attn(norm(x))`, then
    /// `x + λ₂ · mlp(norm(x))`.
    fn layer(&self, l: &Layer, x: &Tensor, segments: &[(usize, usize)]) -> Result<Tensor> {
        let (n, hid) = x.dims2()?;
        let heads = self.spec.num_heads;
        let hd = hid / heads;
        let x = {
            let qkv = l.qkv.forward(&l.norm_before.forward(x)?)?;
            let (mut q, mut k) = (qkv.narrow(1, 0, hid)?, qkv.narrow(1, hid, hid)?);
            if let Some((qn, kn)) = &l.qk_norm {
                q = qn.forward(&q.contiguous()?)?;
                k = kn.forward(&k.contiguous()?)?;
            }
            let v = qkv.narrow(1, 2 * hid, hid)?;
            let shape = (n, heads, hd);
            let params = SegmentAttentionParams {
                segments,
                scale: 1.0 / (hd as f32).sqrt(),
            };
            let attn = self
                .attention
                .segment_attention(
                    &q.contiguous()?.reshape(shape)?,
                    &k.contiguous()?.reshape(shape)?,
                    &v.contiguous()?.reshape(shape)?,
                    &params,
                )?
                .reshape((n, hid))?;
            (x + l.out.forward(&attn)?.broadcast_mul(&l.lambda.0)?)?
        };
        let mlp = l.mlp.forward(&l.norm_after.forward(&x)?)?;
        x + mlp.broadcast_mul(&l.lambda.1)?
    }
}

/// Source rows of the pixel shuffle (transformers `InternVLModel.pixel_shuffle` with scale
/// `1/s`) over `tiles` grids of `side × side` patch rows: output token `(i, j)` of a tile
/// concatenates patches `(s·i + a, s·j + b)` for `a` then `b` in `0..s`; tokens row-major.
fn shuffle_rows(tiles: usize, side: usize, s: usize) -> Vec<u32> {
    let out = side / s;
    let mut rows = Vec::with_capacity(tiles * side * side);
    for t in 0..tiles {
        for i in 0..out {
            for j in 0..out {
                for a in 0..s {
                    for b in 0..s {
                        rows.push((t * side * side + (s * i + a) * side + s * j + b) as u32);
                    }
                }
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers' pixel_shuffle on a 4×4 grid of patch ids with scale 0.5: its view /
    /// permute / view / permute sequence puts patches (0,0) (0,1) (1,0) (1,1) in the first
    /// token, (0,2) (0,3) (1,2) (1,3) in the second (computed with torch).
    #[test]
    fn shuffle_matches_transformers() {
        let rows = shuffle_rows(1, 4, 2);
        assert_eq!(
            rows,
            vec![0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]
        );
        // The second tile starts after the first one's 16 patches.
        assert_eq!(shuffle_rows(2, 4, 2)[16..20], [16, 17, 20, 21]);
    }
}
