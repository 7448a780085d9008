//! Qwen3.5-MoE (`qwen3_5_moe`; transformers `models/qwen3_5_moe/configuration_qwen3_5_moe.py`):
//! Qwen3.5 with a sparse mixture-of-experts block in every decoder layer.

use crate::config::qwen3_5::qwen3_5_decoder;
use crate::config::vision::qwen3_vl_tower;
use crate::config::{Defaults, Fallback::*, Fields, SparseRule, Table};

use crate::chat::{AnswerFormat, THINK_OPEN};
use crate::processor::ResizeRule;

use super::{qwen3_5, qwen3_vl, Family};

/// `Qwen3_5MoeTextConfig`'s defaults where they differ from `Qwen3_5TextConfig`'s, and its MoE
/// fields: 256 experts, top-8, inner 512, a shared expert of 512.
const MOE_TEXT: Table = &[
    ("hidden_size", Int(2048)),
    ("num_hidden_layers", Int(40)),
    ("num_key_value_heads", Int(2)),
    ("num_experts", Int(256)),
    ("num_experts_per_tok", Int(8)),
    ("moe_intermediate_size", Int(512)),
    ("shared_expert_intermediate_size", Int(512)),
];

/// The family.
pub(super) static FAMILY: Family = Family {
    model_type: "qwen3_5_moe",
    name: "Qwen3.5-MoE",
    defaults: Defaults {
        top: &[qwen3_5::TOKEN_IDS],
        text: &[MOE_TEXT, qwen3_5::TEXT],
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
            let mut text = qwen3_5_decoder(f)?;
            text.moe = Some(
                f.text
                    .moe
                    .resolve(SparseRule::EveryLayerWithSharedExpert, text.num_layers)?,
            );
            Ok(text)
        };
        super::qwen_vl(f, text, |v| qwen3_vl_tower(v, false))
    },
};
