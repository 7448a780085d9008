//! Vision-tower configs of the three families and their resolution into [`VisionSpec`].

use serde::Deserialize;

use super::rope::RopeParameters;
use super::{d_2, d_3, d_silu, Architecture, VisionSpec};

/// Vision config of Qwen2-VL (`Qwen2VLVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen2VlVisionConfig {
    /// Vision blocks.
    #[serde(default = "d_depth32")]
    pub depth: usize,
    /// Width of the vision blocks.
    #[serde(default = "d_1280")]
    pub embed_dim: usize,
    /// Output width of the merger (= text hidden size).
    #[serde(default = "d_3584")]
    pub hidden_size: usize,
    /// MLP activation (`quick_gelu`).
    #[serde(default = "d_quick_gelu")]
    pub hidden_act: String,
    /// MLP inner size = `embed_dim * mlp_ratio`.
    #[serde(default = "d_4f")]
    pub mlp_ratio: f64,
    /// Attention heads.
    #[serde(default = "d_16")]
    pub num_heads: usize,
    /// Image channels (`in_chans` in the published files).
    #[serde(default = "d_3", alias = "in_chans")]
    pub in_channels: usize,
    /// Spatial patch size in pixels.
    #[serde(default = "d_14")]
    pub patch_size: usize,
    /// Patches merged per side by the merger.
    #[serde(default = "d_2")]
    pub spatial_merge_size: usize,
    /// Frames per temporal patch.
    #[serde(default = "d_2")]
    pub temporal_patch_size: usize,
    /// Rotary parameters of the 2D vision RoPE (theta 10000).
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

/// Vision config of Qwen2.5-VL (`Qwen2_5_VLVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen25VlVisionConfig {
    /// Vision blocks.
    #[serde(default = "d_depth32")]
    pub depth: usize,
    /// Width of the vision blocks.
    #[serde(default = "d_3584")]
    pub hidden_size: usize,
    /// MLP activation (`silu`, gated).
    #[serde(default = "d_silu")]
    pub hidden_act: String,
    /// MLP inner size.
    #[serde(default = "d_3420")]
    pub intermediate_size: usize,
    /// Attention heads.
    #[serde(default = "d_16")]
    pub num_heads: usize,
    /// Image channels.
    #[serde(default = "d_3", alias = "in_chans")]
    pub in_channels: usize,
    /// Spatial patch size.
    #[serde(default = "d_14")]
    pub patch_size: usize,
    /// Merge size.
    #[serde(default = "d_2")]
    pub spatial_merge_size: usize,
    /// Temporal patch size.
    #[serde(default = "d_2")]
    pub temporal_patch_size: usize,
    /// Attention window side in pixels.
    #[serde(default = "d_112")]
    pub window_size: usize,
    /// Merger output width (= text hidden size).
    #[serde(default = "d_3584")]
    pub out_hidden_size: usize,
    /// Blocks with full (not windowed) attention.
    #[serde(default = "d_fullatt")]
    pub fullatt_block_indexes: Vec<usize>,
    /// Rotary parameters of the 2D vision RoPE.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

/// Vision config of Qwen3-VL (`Qwen3VLVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3VlVisionConfig {
    /// Vision blocks.
    #[serde(default = "d_depth27")]
    pub depth: usize,
    /// Width of the vision blocks.
    #[serde(default = "d_1152")]
    pub hidden_size: usize,
    /// MLP activation (`gelu_pytorch_tanh`).
    #[serde(default = "d_gelu_tanh")]
    pub hidden_act: String,
    /// MLP inner size.
    #[serde(default = "d_4304")]
    pub intermediate_size: usize,
    /// Attention heads.
    #[serde(default = "d_16")]
    pub num_heads: usize,
    /// Image channels.
    #[serde(default = "d_3")]
    pub in_channels: usize,
    /// Spatial patch size (16).
    #[serde(default = "d_16")]
    pub patch_size: usize,
    /// Merge size.
    #[serde(default = "d_2")]
    pub spatial_merge_size: usize,
    /// Temporal patch size.
    #[serde(default = "d_2")]
    pub temporal_patch_size: usize,
    /// Merger output width (= text hidden size).
    #[serde(default = "d_3584")]
    pub out_hidden_size: usize,
    /// Learned position embeddings (a square grid of `sqrt(n)` per side).
    #[serde(default = "d_2304")]
    pub num_position_embeddings: usize,
    /// Vision blocks whose output feeds a DeepStack merger, injected into decoder layers 0, 1, ….
    #[serde(default = "d_deepstack")]
    pub deepstack_visual_indexes: Vec<usize>,
    /// Rotary parameters of the 2D vision RoPE.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

fn d_depth32() -> usize {
    32
}
fn d_depth27() -> usize {
    27
}
fn d_1280() -> usize {
    1280
}
fn d_1152() -> usize {
    1152
}
fn d_3584() -> usize {
    3584
}
fn d_3420() -> usize {
    3420
}
fn d_4304() -> usize {
    4304
}
fn d_2304() -> usize {
    2304
}
fn d_16() -> usize {
    16
}
fn d_14() -> usize {
    14
}
fn d_112() -> usize {
    112
}
fn d_4f() -> f64 {
    4.0
}
fn d_quick_gelu() -> String {
    "quick_gelu".into()
}
fn d_gelu_tanh() -> String {
    "gelu_pytorch_tanh".into()
}
fn d_fullatt() -> Vec<usize> {
    vec![7, 15, 23, 31]
}
fn d_deepstack() -> Vec<usize> {
    vec![8, 16, 24]
}

/// Rotary base of the 2D vision RoPE: `rope_parameters.rope_theta`, else transformers' 10000.
fn theta(rope: &Option<RopeParameters>) -> f64 {
    rope.as_ref().and_then(|r| r.rope_theta).unwrap_or(10000.0)
}

impl Qwen2VlVisionConfig {
    /// Resolved vision spec (full attention, no learned positions, no DeepStack).
    pub fn spec(&self) -> VisionSpec {
        VisionSpec {
            architecture: Architecture::Qwen2Vl,
            depth: self.depth,
            hidden_size: self.embed_dim,
            num_heads: self.num_heads,
            // transformers: int(embed_dim * mlp_ratio)
            intermediate_size: (self.embed_dim as f64 * self.mlp_ratio) as usize,
            hidden_act: self.hidden_act.clone(),
            out_hidden_size: self.hidden_size,
            in_channels: self.in_channels,
            patch_size: self.patch_size,
            temporal_patch_size: self.temporal_patch_size,
            spatial_merge_size: self.spatial_merge_size,
            rope_theta: theta(&self.rope_parameters),
            window_size: 0,
            fullatt_block_indexes: Vec::new(),
            num_position_embeddings: 0,
            deepstack_visual_indexes: Vec::new(),
        }
    }
}

impl Qwen25VlVisionConfig {
    /// Resolved vision spec (window attention except in `fullatt_block_indexes`).
    pub fn spec(&self) -> VisionSpec {
        VisionSpec {
            architecture: Architecture::Qwen25Vl,
            depth: self.depth,
            hidden_size: self.hidden_size,
            num_heads: self.num_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act.clone(),
            out_hidden_size: self.out_hidden_size,
            in_channels: self.in_channels,
            patch_size: self.patch_size,
            temporal_patch_size: self.temporal_patch_size,
            spatial_merge_size: self.spatial_merge_size,
            rope_theta: theta(&self.rope_parameters),
            window_size: self.window_size,
            fullatt_block_indexes: self.fullatt_block_indexes.clone(),
            num_position_embeddings: 0,
            deepstack_visual_indexes: Vec::new(),
        }
    }
}

impl Qwen3VlVisionConfig {
    /// Resolved vision spec (learned interpolated positions, DeepStack taps).
    pub fn spec(&self) -> VisionSpec {
        VisionSpec {
            architecture: Architecture::Qwen3Vl,
            depth: self.depth,
            hidden_size: self.hidden_size,
            num_heads: self.num_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act.clone(),
            out_hidden_size: self.out_hidden_size,
            in_channels: self.in_channels,
            patch_size: self.patch_size,
            temporal_patch_size: self.temporal_patch_size,
            spatial_merge_size: self.spatial_merge_size,
            rope_theta: theta(&self.rope_parameters),
            window_size: 0,
            fullatt_block_indexes: Vec::new(),
            num_position_embeddings: self.num_position_embeddings,
            deepstack_visual_indexes: self.deepstack_visual_indexes.clone(),
        }
    }
}
