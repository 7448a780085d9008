//! The vision towers the families share, resolved from [`VisionFields`] into [`VisionSpec`]
//! (transformers `Qwen2VisionTransformerPretrainedModel`,
//! `Qwen2_5_VisionTransformerPretrainedModel`, `Qwen3VLVisionModel`).

use super::fields::VisionFields;
use super::{MergerNames, MlpNames, VisionNorm, VisionSpec};

/// Qwen2-VL's tower: LayerNorm blocks `embed_dim` wide, a QuickGELU `fc1/fc2` MLP of
/// `int(embed_dim · mlp_ratio)`, full attention, merger output `hidden_size`.
pub fn qwen2_vl_tower(v: &VisionFields) -> VisionSpec {
    let width = v.embed_dim.unwrap_or(v.hidden_size);
    VisionSpec {
        hidden_size: width,
        // transformers: int(embed_dim * mlp_ratio)
        intermediate_size: (width as f64 * v.mlp_ratio.unwrap_or(4.0)) as usize,
        out_hidden_size: v.hidden_size,
        ..common(
            v,
            VisionNorm::LayerNorm,
            MlpNames::Fc,
            MergerNames::LnQ,
            false,
        )
    }
}

/// Qwen2.5-VL's tower: RMSNorm blocks, a gated MLP, window attention of `window_size` pixels
/// except in `fullatt_block_indexes`.
pub fn qwen2_5_vl_tower(v: &VisionFields) -> VisionSpec {
    VisionSpec {
        window_size: v.window_size.unwrap_or(0),
        fullatt_block_indexes: v.fullatt_block_indexes.clone().unwrap_or_default(),
        ..common(
            v,
            VisionNorm::RmsNorm,
            MlpNames::Gated,
            MergerNames::LnQ,
            false,
        )
    }
}

/// Qwen3-VL's tower: a patch-embedding bias, learned position embeddings interpolated to the
/// grid, a `linear_fc1/fc2` MLP, DeepStack mergers on `deepstack_visual_indexes` when
/// `deepstack` (Qwen3.5 runs the tower without them).
pub fn qwen3_vl_tower(v: &VisionFields, deepstack: bool) -> VisionSpec {
    VisionSpec {
        num_position_embeddings: v.num_position_embeddings.unwrap_or(0),
        deepstack_visual_indexes: match deepstack {
            true => v.deepstack_visual_indexes.clone().unwrap_or_default(),
            false => Vec::new(),
        },
        ..common(
            v,
            VisionNorm::LayerNorm,
            MlpNames::LinearFc,
            MergerNames::LinearFc,
            true,
        )
    }
}

/// A tower with these switches (norm, MLP and merger tensor names, patch-embedding bias) and
/// the fields every tower reads the same way; no window attention, no learned positions, no
/// DeepStack.
fn common(
    v: &VisionFields,
    norm: VisionNorm,
    mlp: MlpNames,
    merger: MergerNames,
    patch_bias: bool,
) -> VisionSpec {
    VisionSpec {
        norm,
        mlp,
        merger,
        patch_bias,
        depth: v.depth,
        hidden_size: v.hidden_size,
        num_heads: v.num_heads,
        intermediate_size: v.intermediate_size.unwrap_or(0),
        hidden_act: v.hidden_act.clone(),
        out_hidden_size: v.out_hidden_size.unwrap_or(v.hidden_size),
        in_channels: v.in_channels,
        patch_size: v.patch_size,
        temporal_patch_size: v.temporal_patch_size,
        spatial_merge_size: v.spatial_merge_size,
        rope_theta: v.rope_theta(),
        window_size: 0,
        fullatt_block_indexes: Vec::new(),
        num_position_embeddings: 0,
        deepstack_visual_indexes: Vec::new(),
        qkv_bias: true,
        block_bias: true,
        norm_eps: 1e-6,
        glm: None,
    }
}
