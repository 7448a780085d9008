//! Qwen3-VL (`qwen3_vl`; transformers `models/qwen3_vl/configuration_qwen3_vl.py`): the Qwen3
//! decoder and Qwen3-VL's vision tower with DeepStack.

use crate::config::text::{qwen3_decoder, Positions::MRope};
use crate::config::vision::qwen3_vl_tower;
use crate::config::{Defaults, Fallback::*, Fields, Table};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::{qwen2_vl, Family};

/// `Qwen3VLTextConfig`'s defaults.
pub(super) const TEXT: Table = &[
    ("vocab_size", Int(151936)),
    ("hidden_size", Int(4096)),
    ("intermediate_size", Int(22016)),
    ("num_hidden_layers", Int(32)),
    ("num_attention_heads", Int(32)),
    ("head_dim", Int(128)),
    ("hidden_act", Text("silu")),
    ("rms_norm_eps", Float(1e-6)),
];

/// `Qwen3VLVisionConfig`'s defaults (also the vision config of Qwen3.5).
pub(super) const VISION: Table = &[
    ("depth", Int(27)),
    ("hidden_size", Int(1152)),
    ("hidden_act", Text("gelu_pytorch_tanh")),
    ("intermediate_size", Int(4304)),
    ("num_heads", Int(16)),
    ("in_channels", Int(3)),
    ("patch_size", Int(16)),
    ("spatial_merge_size", Int(2)),
    ("temporal_patch_size", Int(2)),
    ("out_hidden_size", Int(3584)),
    ("num_position_embeddings", Int(2304)),
    ("deepstack_visual_indexes", Ints(&[8, 16, 24])),
];

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "qwen3_vl",
    name: "Qwen3-VL",
    defaults: Defaults {
        top: &[qwen2_vl::QWEN_TOKEN_IDS],
        text: &[TEXT],
        vision: &[VISION],
    },
    stop_tokens: super::QWEN_STOP_TOKENS,
    think_open: THINK_OPEN,
    think_budget_stop: super::QWEN_THINK_BUDGET_STOP,
    image_wrap: None,
    resize: ResizeRule::Qwen,
    answer: AnswerFormat::AfterThink,
    resolve: |f: &Fields| {
        super::qwen_vl(f, |f| qwen3_decoder(f, MRope), |v| qwen3_vl_tower(v, true))
    },
};
