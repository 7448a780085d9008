//! Qwen3.5 and Qwen3.6 (`qwen3_5`; transformers `models/qwen3_5/configuration_qwen3_5.py`):
//! the hybrid Gated DeltaNet / gated attention decoder and Qwen3-VL's vision tower without
//! DeepStack.

use crate::config::qwen3_5::qwen3_5_decoder;
use crate::config::vision::qwen3_vl_tower;
use crate::config::{Defaults, Fallback::*, Fields, Table};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::{qwen3_vl, Family};

/// `Qwen3_5Config`'s token ids.
pub(super) const TOKEN_IDS: Table = &[
    ("image_token_id", Int(248056)),
    ("video_token_id", Int(248057)),
    ("vision_start_token_id", Int(248053)),
    ("vision_end_token_id", Int(248054)),
];

/// `Qwen3_5TextConfig`'s defaults.
pub(super) const TEXT: Table = &[
    ("vocab_size", Int(248320)),
    ("hidden_size", Int(4096)),
    ("intermediate_size", Int(12288)),
    ("num_hidden_layers", Int(32)),
    ("num_attention_heads", Int(16)),
    ("num_key_value_heads", Int(4)),
    ("head_dim", Int(256)),
    ("hidden_act", Text("silu")),
    ("rms_norm_eps", Float(1e-6)),
    ("max_position_embeddings", Int(32768)),
    ("linear_conv_kernel_dim", Int(4)),
    ("linear_key_head_dim", Int(128)),
    ("linear_value_head_dim", Int(128)),
    ("linear_num_key_heads", Int(16)),
    ("linear_num_value_heads", Int(32)),
    ("full_attention_interval", Int(4)),
];

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "qwen3_5",
    name: "Qwen3.5 / Qwen3.6",
    defaults: Defaults {
        top: &[TOKEN_IDS],
        text: &[TEXT],
        vision: &[qwen3_vl::VISION],
    },
    stop_tokens: super::QWEN_STOP_TOKENS,
    think_open: THINK_OPEN,
    think_budget_stop: super::QWEN_THINK_BUDGET_STOP,
    image_wrap: None,
    resize: ResizeRule::Qwen,
    answer: AnswerFormat::AfterThink,
    resolve: |f: &Fields| super::qwen_vl(f, qwen3_5_decoder, |v| qwen3_vl_tower(v, false)),
};
