//! Qwen2-VL (`qwen2_vl`; transformers `models/qwen2_vl/configuration_qwen2_vl.py`): the Qwen2
//! decoder and Qwen2-VL's vision tower.

use crate::config::text::{qwen2_decoder, Positions::MRope};
use crate::config::vision::qwen2_vl_tower;
use crate::config::{Defaults, Fallback::*, Fields, Table};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::Family;

/// The Qwen image placeholder's token ids (`Qwen2VLConfig`'s class defaults, shared by
/// Qwen2.5-VL and Qwen3-VL).
pub(super) const QWEN_TOKEN_IDS: Table = &[
    ("image_token_id", Int(151655)),
    ("video_token_id", Int(151656)),
    ("vision_start_token_id", Int(151652)),
    ("vision_end_token_id", Int(151653)),
];

/// `Qwen2VLTextConfig`'s defaults (also Qwen2.5-VL's decoder).
pub(super) const TEXT: Table = &[
    ("vocab_size", Int(152064)),
    ("hidden_size", Int(8192)),
    ("intermediate_size", Int(29568)),
    ("num_hidden_layers", Int(80)),
    ("num_attention_heads", Int(64)),
    ("hidden_act", Text("silu")),
    ("rms_norm_eps", Float(1e-5)),
];

/// `Qwen2VLVisionConfig`'s defaults.
const VISION: Table = &[
    ("depth", Int(32)),
    ("embed_dim", Int(1280)),
    ("hidden_size", Int(3584)),
    ("hidden_act", Text("quick_gelu")),
    ("mlp_ratio", Float(4.0)),
    ("num_heads", Int(16)),
    ("in_channels", Int(3)),
    ("patch_size", Int(14)),
    ("spatial_merge_size", Int(2)),
    ("temporal_patch_size", Int(2)),
];

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "qwen2_vl",
    name: "Qwen2-VL",
    defaults: Defaults {
        top: &[QWEN_TOKEN_IDS],
        text: &[TEXT],
        vision: &[VISION],
    },
    stop_tokens: super::QWEN_STOP_TOKENS,
    think_open: THINK_OPEN,
    think_budget_stop: super::QWEN_THINK_BUDGET_STOP,
    image_wrap: None,
    resize: ResizeRule::Qwen,
    answer: AnswerFormat::AfterThink,
    resolve: |f: &Fields| super::qwen_vl(f, |f| qwen2_decoder(f, MRope), qwen2_vl_tower),
};
