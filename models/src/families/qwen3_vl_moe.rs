//! Qwen3-VL-MoE (`qwen3_vl_moe`; transformers `models/qwen3_vl_moe/configuration_qwen3_vl_moe.py`):
//! Qwen3-VL with sparse mixture-of-experts decoder layers.

use crate::config::text::{qwen3_decoder, Positions::MRope};
use crate::config::vision::qwen3_vl_tower;
use crate::config::{Defaults, Fallback::*, Fields, SparseRule, Table};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::{qwen2_vl, qwen3_vl, Family};

/// `Qwen3VLMoeTextConfig`'s defaults where they differ from `Qwen3VLTextConfig`'s, and its MoE
/// fields: 60 experts, top-4, inner 1408, every layer sparse.
const MOE_TEXT: Table = &[
    ("hidden_size", Int(2048)),
    ("intermediate_size", Int(5632)),
    ("num_hidden_layers", Int(24)),
    ("num_attention_heads", Int(16)),
    ("num_experts", Int(60)),
    ("num_experts_per_tok", Int(4)),
    ("moe_intermediate_size", Int(1408)),
    ("decoder_sparse_step", Int(1)),
];

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "qwen3_vl_moe",
    name: "Qwen3-VL-MoE",
    defaults: Defaults {
        top: &[qwen2_vl::QWEN_TOKEN_IDS],
        text: &[MOE_TEXT, qwen3_vl::TEXT],
        vision: &[qwen3_vl::VISION],
    },
    stop_tokens: super::QWEN_STOP_TOKENS,
    think_open: THINK_OPEN,
    think_budget_stop: super::QWEN_THINK_BUDGET_STOP,
    image_wrap: None,
    resize: ResizeRule::Qwen,
    answer: AnswerFormat::AfterThink,
    resolve: |f: &Fields| {
        let text = |f: &Fields| {
            let mut text = qwen3_decoder(f, MRope)?;
            text.moe = Some(
                f.text
                    .moe
                    .resolve(SparseRule::SparseStep, text.num_layers)?,
            );
            Ok(text)
        };
        super::qwen_vl(f, text, |v| qwen3_vl_tower(v, true))
    },
};
