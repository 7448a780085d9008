//! Qwen2.5-VL (`qwen2_5_vl`; transformers `models/qwen2_5_vl/configuration_qwen2_5_vl.py`):
//! the Qwen2 decoder and Qwen2.5-VL's windowed vision tower.

use crate::config::text::{qwen2_decoder, Positions::MRope};
use crate::config::vision::qwen2_5_vl_tower;
use crate::config::{Defaults, Fallback::*, Fields, Table};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::{qwen2_vl, Family};

/// `Qwen2_5_VLVisionConfig`'s defaults.
const VISION: Table = &[
    ("depth", Int(32)),
    ("hidden_size", Int(3584)),
    ("hidden_act", Text("silu")),
    ("intermediate_size", Int(3420)),
    ("num_heads", Int(16)),
    ("in_channels", Int(3)),
    ("patch_size", Int(14)),
    ("spatial_merge_size", Int(2)),
    ("temporal_patch_size", Int(2)),
    ("window_size", Int(112)),
    ("out_hidden_size", Int(3584)),
    ("fullatt_block_indexes", Ints(&[7, 15, 23, 31])),
];

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "qwen2_5_vl",
    name: "Qwen2.5-VL",
    defaults: Defaults {
        top: &[qwen2_vl::QWEN_TOKEN_IDS],
        text: &[qwen2_vl::TEXT],
        vision: &[VISION],
    },
    stop_tokens: super::QWEN_STOP_TOKENS,
    think_open: THINK_OPEN,
    think_budget_stop: super::QWEN_THINK_BUDGET_STOP,
    image_wrap: None,
    resize: ResizeRule::Qwen,
    answer: AnswerFormat::AfterThink,
    resolve: |f: &Fields| super::qwen_vl(f, |f| qwen2_decoder(f, MRope), qwen2_5_vl_tower),
};
