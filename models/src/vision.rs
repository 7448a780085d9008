//! Vision towers of Qwen2-VL, Qwen2.5-VL and Qwen3-VL, each followed by its patch merger.
//!
//! One implementation; the families differ by switches of [`VisionSpec`]:
//! - Qwen2-VL: LayerNorm blocks, `fc1/fc2` QuickGELU MLP, full attention per image;
//! - Qwen2.5-VL: RMSNorm blocks, gated SiLU MLP, window attention except in
//!   `fullatt_block_indexes` (patches permuted into windows, un-permuted after the merger);
//! - Qwen3-VL: patch-embedding bias, learned position embeddings bilinearly interpolated to the
//!   grid, `linear_fc1/fc2` tanh-GELU MLP, DeepStack mergers on `deepstack_visual_indexes`.
//!
//! Attention never crosses images: segments are images (or windows inside an image).
//! Reference: transformers `modeling_qwen2_vl.py`, `modeling_qwen2_5_vl.py`,
//! `modeling_qwen3_vl.py`, `vision_utils.py`.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use verisample_kernels::{AttentionPath, SegmentAttentionParams};

use crate::config::{MlpNames, VisionNorm, VisionSpec};
use crate::layers::{
    apply_rotary, cos_sin, inv_freq, linear, weighted_sum, Act, Mlp, Norm, Proj, RmsNorm,
};
use crate::vision_glm::{bicubic_positions, table_values, GlmHead};

/// Output of the vision tower for a batch of images.
#[derive(Debug, Clone)]
pub struct ImageEmbeds {
    /// Merged image tokens `[Σ t·h·w/merge², out_hidden]`, images in input order.
    pub embeds: Tensor,
    /// Qwen3-VL DeepStack features, one `[Σ tokens, out_hidden]` per decoder layer 0, 1, …
    /// (empty for the other families).
    pub deepstack: Vec<Tensor>,
}

impl ImageEmbeds {
    /// Rows `start..start + len` of the embeddings and of every DeepStack feature (for a prefill
    /// chunk that holds only part of the image tokens).
    pub fn narrow(&self, start: usize, len: usize) -> Result<Self> {
        Ok(Self {
            embeds: self.embeds.narrow(0, start, len)?,
            deepstack: self
                .deepstack
                .iter()
                .map(|d| d.narrow(0, start, len))
                .collect::<Result<_>>()?,
        })
    }

    /// Concatenates the embeddings of several batches (images in the given order).
    pub fn cat(parts: &[&ImageEmbeds]) -> Result<Self> {
        let embeds = Tensor::cat(
            &parts.iter().map(|p| p.embeds.clone()).collect::<Vec<_>>(),
            0,
        )?;
        let n = parts.first().map(|p| p.deepstack.len()).unwrap_or(0);
        let deepstack = (0..n)
            .map(|i| {
                Tensor::cat(
                    &parts
                        .iter()
                        .map(|p| p.deepstack[i].clone())
                        .collect::<Vec<_>>(),
                    0,
                )
            })
            .collect::<Result<_>>()?;
        Ok(Self { embeds, deepstack })
    }
}

struct Block {
    norm1: Norm,
    norm2: Norm,
    qkv: Proj,
    proj: Proj,
    mlp: Mlp,
}

struct Merger {
    norm: Norm,
    postshuffle: bool,
    fc1: Proj,
    fc2: Proj,
    merged: usize,
}

impl Merger {
    fn new(
        spec: &VisionSpec,
        postshuffle: bool,
        vb: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        let merged = spec.hidden_size * spec.spatial_merge_size * spec.spatial_merge_size;
        let (norm_name, fc1, fc2) = spec.merger.names();
        let norm_dim = if postshuffle {
            merged
        } else {
            spec.hidden_size
        };
        Ok(Self {
            norm: Norm::new(
                spec.norm == VisionNorm::RmsNorm,
                norm_dim,
                1e-6,
                vb.pp(norm_name),
            )?,
            postshuffle,
            fc1: linear(merged, merged, true, vb.pp(fc1), path)?,
            fc2: linear(merged, spec.out_hidden_size, true, vb.pp(fc2), path)?,
            merged,
        })
    }

    /// `[n_patches, hidden] → [n_patches / merge², out_hidden]` (exact GELU between the linears).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)? * x.dim(1)? / self.merged;
        let x = if self.postshuffle {
            self.norm.forward(&x.reshape((n, self.merged))?)?
        } else {
            self.norm.forward(x)?.reshape((n, self.merged))?
        };
        self.fc2.forward(&self.fc1.forward(&x)?.gelu_erf()?)
    }
}

/// What turns the blocks' output into image tokens.
enum Head {
    /// The Qwen patch merger.
    Merger(Merger),
    /// GLM-4.1V's `post_layernorm`, `downsample` and merger.
    Glm(Box<GlmHead>),
}

/// A vision tower with its merger(s).
pub struct VisionTower {
    spec: VisionSpec,
    /// The Conv3d patch embedding as a projection: weight flattened to `[hidden, C·T·P·P]`
    /// (stride = kernel, so the convolution is one matmul per patch).
    patch_embed: Proj,
    pos_embed: Option<Tensor>,
    /// GLM-4.1V: `post_conv_layernorm`, and the position table as f32 values resampled
    /// bicubically per image ([`bicubic_positions`]).
    glm_stem: Option<(RmsNorm, Vec<f32>)>,
    blocks: Vec<Block>,
    merger: Head,
    deepstack: Vec<Merger>,
    inv_freq: Vec<f32>,
    dtype: DType,
    attention: AttentionPath,
}

impl VisionTower {
    /// Loads the tower from `vb` positioned at the vision prefix (`visual` or `model.visual`);
    /// `path` is the implementation of its attention and of its projections
    /// ([`crate::layers::Proj::from_parts`]).
    ///
    /// Errors: a candle error naming any missing or mis-shaped tensor.
    pub fn new(spec: &VisionSpec, vb: VarBuilder, path: AttentionPath) -> Result<Self> {
        let (hid, p, t, c) = (
            spec.hidden_size,
            spec.patch_size,
            spec.temporal_patch_size,
            spec.in_channels,
        );
        let patch_w = vb
            .get((hid, c, t, p, p), "patch_embed.proj.weight")?
            .reshape((hid, c * t * p * p))?;
        let patch_b = spec
            .patch_bias
            .then(|| vb.get(hid, "patch_embed.proj.bias"))
            .transpose()?;
        let pos_embed = match (spec.num_position_embeddings, spec.glm) {
            (0, _) | (_, Some(_)) => None,
            (n, None) => Some(vb.get((n, hid), "pos_embed.weight")?),
        };
        let glm_stem = match spec.glm {
            Some(_) => {
                let n = spec.num_position_embeddings;
                let table = vb.get((n, hid), "embeddings.position_embedding.weight")?;
                Some((
                    RmsNorm::new(hid, spec.norm_eps, vb.pp("post_conv_layernorm"))?,
                    table_values(&table)?,
                ))
            }
            None => None,
        };
        let act = Act::from_name(&spec.hidden_act)?;
        let rms = spec.norm == VisionNorm::RmsNorm;
        let blocks = (0..spec.depth)
            .map(|i| {
                let b = vb.pp("blocks").pp(i);
                let eps = spec.norm_eps;
                Ok(Block {
                    norm1: Norm::new(rms, hid, eps, b.pp("norm1"))?,
                    norm2: Norm::new(rms, hid, eps, b.pp("norm2"))?,
                    qkv: linear(hid, 3 * hid, spec.qkv_bias, b.pp("attn").pp("qkv"), path)?,
                    proj: linear(hid, hid, spec.block_bias, b.pp("attn").pp("proj"), path)?,
                    mlp: Mlp::new(
                        hid,
                        spec.intermediate_size,
                        spec.mlp,
                        spec.block_bias,
                        act,
                        b.pp("mlp"),
                        path,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let merger = match spec.glm {
            Some(glm) => Head::Glm(Box::new(GlmHead::new(spec, glm, vb.clone(), path)?)),
            None => Head::Merger(Merger::new(spec, false, vb.pp("merger"), path)?),
        };
        let deepstack = (0..spec.deepstack_visual_indexes.len())
            .map(|i| Merger::new(spec, true, vb.pp("deepstack_merger_list").pp(i), path))
            .collect::<Result<Vec<_>>>()?;
        let head_dim = hid / spec.num_heads;
        Ok(Self {
            spec: spec.clone(),
            dtype: patch_w.dtype(),
            patch_embed: Proj::from_parts(vec![(patch_w, patch_b)], path)?,
            pos_embed,
            glm_stem,
            blocks,
            merger,
            deepstack,
            inv_freq: inv_freq(head_dim / 2, spec.rope_theta),
            attention: path,
        })
    }

    /// Encodes `pixel_values` `[Σ t·h·w, C·T·P·P]` of the images with grids `grid_thw` into
    /// merged tokens `[Σ t·h·w / merge², out_hidden]` (+ DeepStack features for Qwen3-VL).
    ///
    /// Errors: candle shape errors when `pixel_values` rows do not match the grids.
    pub fn forward(&self, pixel_values: &Tensor, grid_thw: &[[usize; 3]]) -> Result<ImageEmbeds> {
        let dev = pixel_values.device().clone();
        let m = self.spec.spatial_merge_size;
        let unit = m * m;
        let n: usize = grid_thw.iter().map(|g| g[0] * g[1] * g[2]).sum();
        if pixel_values.dim(0)? != n {
            candle_core::bail!(
                "pixel_values has {} rows but grid_thw {grid_thw:?} needs {n}",
                pixel_values.dim(0)?
            );
        }
        let mut x = self
            .patch_embed
            .forward(&pixel_values.to_dtype(self.dtype)?)?;
        let coords = patch_coords(grid_thw, m);
        if let Some(table) = &self.pos_embed {
            x = (x + self.interpolated_pos_embed(table, &coords, grid_thw, &dev)?)?;
        }
        if let Some((norm, table)) = &self.glm_stem {
            let side = (self.spec.num_position_embeddings as f64).sqrt() as usize;
            let hid = self.spec.hidden_size;
            let pos = bicubic_positions(table, side, hid, &coords, grid_thw, &dev)?;
            x = (norm.forward(&x)? + pos.to_dtype(self.dtype)?)?;
        }
        // 2D rotary: first half h·inv_freq, second half w·inv_freq.
        let q = self.inv_freq.len();
        let half = 2 * q;
        let mut angles = Vec::with_capacity(n * half);
        for &(_, r, c) in &coords {
            angles.extend(self.inv_freq.iter().map(|f| r as f32 * f));
            angles.extend(self.inv_freq.iter().map(|f| c as f32 * f));
        }
        let (mut cos, mut sin) = cos_sin(&angles, n, half, &dev)?;
        let image_segments = segments(grid_thw.iter().map(|g| g[0] * g[1] * g[2]));
        let (window_segments, window_perm) = if self.spec.window_size > 0 {
            let (order, lens) = window_index(
                grid_thw,
                m,
                self.spec.window_size / m / self.spec.patch_size,
            );
            let rows: Vec<u32> = order
                .iter()
                .flat_map(|&j| (0..unit).map(move |u| (j * unit + u) as u32))
                .collect();
            let idx = Tensor::new(rows.as_slice(), &dev)?;
            x = x.index_select(&idx, 0)?;
            cos = cos.index_select(&idx, 0)?;
            sin = sin.index_select(&idx, 0)?;
            (segments(lens.iter().map(|l| l * unit)), Some(order))
        } else {
            (image_segments.clone(), None)
        };
        let mut deepstack = Vec::new();
        for (i, blk) in self.blocks.iter().enumerate() {
            let segs = if window_perm.is_some() && !self.spec.fullatt_block_indexes.contains(&i) {
                &window_segments
            } else {
                &image_segments
            };
            x = self.block(blk, &x, &cos, &sin, segs)?;
            if let Some(k) = self
                .spec
                .deepstack_visual_indexes
                .iter()
                .position(|&d| d == i)
            {
                deepstack.push(self.deepstack[k].forward(&x)?);
            }
        }
        let mut embeds = match &self.merger {
            Head::Merger(m) => m.forward(&x)?,
            Head::Glm(g) => g.forward(&x)?,
        };
        if let Some(order) = window_perm {
            // argsort of the window order restores image order.
            let mut inverse = vec![0u32; order.len()];
            for (pos, &j) in order.iter().enumerate() {
                inverse[j] = pos as u32;
            }
            embeds = embeds.index_select(&Tensor::new(inverse.as_slice(), &dev)?, 0)?;
        }
        Ok(ImageEmbeds { embeds, deepstack })
    }

    fn block(
        &self,
        b: &Block,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        segs: &[(usize, usize)],
    ) -> Result<Tensor> {
        let (n, hid) = x.dims2()?;
        let heads = self.spec.num_heads;
        let hd = hid / heads;
        // q, k, v and the attention output are dropped before the MLP runs (the peak of
        // [`vision_forward_bytes`] counts them in the attention stage only).
        let x = {
            let qkv = b
                .qkv
                .forward(&b.norm1.forward(x)?)?
                .reshape((n, 3, heads, hd))?;
            let q = apply_rotary(&qkv.narrow(1, 0, 1)?.squeeze(1)?, cos, sin)?;
            let k = apply_rotary(&qkv.narrow(1, 1, 1)?.squeeze(1)?, cos, sin)?;
            let v = qkv.narrow(1, 2, 1)?.squeeze(1)?;
            let params = SegmentAttentionParams {
                segments: segs,
                scale: 1.0 / (hd as f32).sqrt(),
            };
            let attn = self
                .attention
                .segment_attention(&q, &k, &v, &params)?
                .reshape((n, hid))?;
            (x + b.proj.forward(&attn)?)?
        };
        &x + b.mlp.forward(&b.norm2.forward(&x)?)?
    }

    /// Bilinear (align_corners) interpolation of the square learned table to each patch
    /// (transformers `get_vision_interpolation_indices_and_weights`, border padding).
    fn interpolated_pos_embed(
        &self,
        table: &Tensor,
        coords: &[(usize, usize, usize)],
        grids: &[[usize; 3]],
        dev: &Device,
    ) -> Result<Tensor> {
        let side = (self.spec.num_position_embeddings as f64).sqrt() as usize;
        let taps = |i: usize, size: usize| -> [(usize, f32); 2] {
            let src = (i as f32 * (side - 1) as f32) / (size.max(2) - 1) as f32;
            let f = src.floor();
            let t0 = (f as usize).min(side - 1);
            let t1 = (f as usize + 1).min(side - 1);
            [
                (t0, (1.0 - (src - f)).max(0.0)),
                (t1, (1.0 - (src - f - 1.0).abs()).max(0.0)),
            ]
        };
        let mut idx = Vec::with_capacity(coords.len() * 4);
        let mut w = Vec::with_capacity(coords.len() * 4);
        for &(img, r, c) in coords {
            let g = grids[img];
            for (hi, hw) in taps(r, g[1]) {
                for (wi, ww) in taps(c, g[2]) {
                    idx.push((hi * side + wi) as u32);
                    w.push(hw * ww);
                }
            }
        }
        let n = coords.len();
        let rows = table
            .index_select(&Tensor::new(idx.as_slice(), dev)?, 0)?
            .reshape((n, 4, table.dim(1)?))?;
        let weights = Tensor::from_vec(w, (n, 4), dev)?.to_dtype(table.dtype())?;
        weighted_sum(&rows, &weights)
    }
}

/// Bytes one [`VisionTower::forward`] over `patches` patches allocates beyond the weights and
/// its `pixel_values` input, at its peak, for a tower of `spec` in `dtype` on the CPU with
/// `threads` rayon workers: an estimate from the buffers live at each stage, checked against
/// a counting allocator on the three fixture towers (`models/tests/vision_memory.rs`).
/// Every term is linear in `patches` (no `[heads, patches, patches]` matrix exists); the
/// estimate holds for any split of the patches into images.
///
/// Per patch, with `h = hidden_size`, `i = intermediate_size`, `d = head_dim`, `s` the bytes
/// of `dtype`:
/// - held through the forward: the patch coordinates (3 `usize`), the rotary angles and
///   their cos/sin tables (`3 · d/2` f32, twice with Qwen2.5-VL's window permutation), the
///   merged output and each DeepStack feature (`out_hidden / merge² · s`), and, when `dtype`
///   is not f32, the input cast to it (`C·T·P² · s`);
/// - the larger of two stages of a block: attention (the block input, `qkv`, rotated `q`
///   and `k`, their f32 rotary temporaries, the attention output: `8 · h · s`, plus the
///   kernel's own [`verisample_kernels::segment_attention_scratch_bytes`]) and MLP (input,
///   residual sum, norm, output: `4 · h · s`, plus 4 inner-width buffers, 5 when gated:
///   projections, bias sums, activation temporaries).
pub fn vision_forward_bytes(
    spec: &VisionSpec,
    patches: usize,
    dtype: DType,
    threads: usize,
) -> u64 {
    let (h, i, s) = (
        spec.hidden_size,
        spec.intermediate_size,
        dtype.size_in_bytes(),
    );
    let d = h / spec.num_heads.max(1);
    let merge2 = spec.spatial_merge_size.pow(2).max(1);
    let rotary_copies = if spec.window_size > 0 { 2 } else { 1 };
    let outputs = (1 + spec.deepstack_visual_indexes.len()) * spec.out_hidden_size * s / merge2;
    let patch_dim = spec.in_channels * spec.temporal_patch_size * spec.patch_size.pow(2);
    let cast_input = if dtype == DType::F32 {
        0
    } else {
        patch_dim * s
    };
    let held =
        3 * std::mem::size_of::<usize>() + rotary_copies * 3 * (d / 2) * 4 + outputs + cast_input;
    let scratch = verisample_kernels::segment_attention_scratch_bytes(
        patches,
        spec.num_heads,
        d,
        dtype,
        threads,
    );
    let attention = patches * 8 * h * s + scratch;
    let inner = if spec.mlp == MlpNames::Gated { 5 } else { 4 };
    let mlp = patches * (4 * h + inner * i) * s;
    (patches * held + attention.max(mlp)) as u64
}

/// `(image, row, col)` of every patch in processor order: merge blocks row-major, patches
/// row-major inside a block, frames one after another.
fn patch_coords(grids: &[[usize; 3]], m: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for (img, g) in grids.iter().enumerate() {
        for _ in 0..g[0] {
            for bh in 0..g[1] / m {
                for bw in 0..g[2] / m {
                    for mh in 0..m {
                        for mw in 0..m {
                            out.push((img, bh * m + mh, bw * m + mw));
                        }
                    }
                }
            }
        }
    }
    out
}

/// `(start, len)` ranges of consecutive segments of the given lengths.
fn segments(lens: impl Iterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut start = 0;
    lens.map(|l| {
        let s = (start, l);
        start += l;
        s
    })
    .collect()
}

/// Qwen2.5-VL window order of merged tokens (transformers `get_vision_window_index`): returns
/// the merged-token order (windows of `ws × ws` merged tokens, row-major windows, row-major
/// inside) and the merged tokens per non-empty window.
fn window_index(grids: &[[usize; 3]], m: usize, ws: usize) -> (Vec<usize>, Vec<usize>) {
    let ws = ws.max(1);
    let (mut order, mut lens, mut base) = (Vec::new(), Vec::new(), 0);
    for g in grids {
        let (gh, gw) = (g[1] / m, g[2] / m);
        for t in 0..g[0] {
            for wy in 0..gh.div_ceil(ws) {
                for wx in 0..gw.div_ceil(ws) {
                    let before = order.len();
                    for y in wy * ws..((wy + 1) * ws).min(gh) {
                        for x in wx * ws..((wx + 1) * ws).min(gw) {
                            order.push(base + t * gh * gw + y * gw + x);
                        }
                    }
                    lens.push(order.len() - before);
                }
            }
        }
        base += g[0] * gh * gw;
    }
    (order, lens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_coords_follow_merge_blocks() {
        let c = patch_coords(&[[1, 2, 4]], 2);
        let rc: Vec<(usize, usize)> = c.iter().map(|&(_, r, c)| (r, c)).collect();
        assert_eq!(
            rc,
            vec![
                (0, 0),
                (0, 1),
                (1, 0),
                (1, 1),
                (0, 2),
                (0, 3),
                (1, 2),
                (1, 3)
            ]
        );
    }

    #[test]
    fn window_index_matches_transformers() {
        // Merged grid 3x5 with windows of 2: transformers gives windows
        // [0,1,5,6] [2,3,7,8] [4,9] [10,11] [12,13] [14].
        let (order, lens) = window_index(&[[1, 6, 10]], 2, 2);
        assert_eq!(
            order,
            vec![0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14]
        );
        assert_eq!(lens, vec![4, 4, 2, 2, 2, 1]);
        // A second image is offset by the first one's token count.
        let (order, _) = window_index(&[[1, 2, 2], [1, 2, 4]], 2, 2);
        assert_eq!(order, vec![0, 1, 2]);
    }
}
