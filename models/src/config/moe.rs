//! Sparse mixture-of-experts fields of the Qwen3-VL-MoE and Qwen3.5-MoE text configs
//! (transformers 5.24 `configuration_qwen3_vl_moe.py`, `configuration_qwen3_5_moe.py`) and
//! their resolution into [`MoeSpec`]: which decoder layers route their tokens to experts.

use serde::Deserialize;

use super::ConfigError;

/// The MoE fields of a text config, as written in `config.json` (absent ones take the
/// family's transformers default in [`MoeFields::resolve`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MoeFields {
    /// Routed experts per sparse layer (`num_experts`, alias `num_local_experts`).
    #[serde(default, alias = "num_local_experts")]
    pub num_experts: Option<usize>,
    /// Experts each token is routed to (`num_experts_per_tok`).
    #[serde(default)]
    pub num_experts_per_tok: Option<usize>,
    /// Inner size of one routed expert's gated MLP (`moe_intermediate_size`).
    #[serde(default)]
    pub moe_intermediate_size: Option<usize>,
    /// Inner size of the shared expert (Qwen3.5-MoE `shared_expert_intermediate_size`).
    #[serde(default)]
    pub shared_expert_intermediate_size: Option<usize>,
    /// Qwen3-VL-MoE: layer `i` is sparse when `(i + 1) % decoder_sparse_step == 0`.
    #[serde(default)]
    pub decoder_sparse_step: Option<usize>,
    /// Qwen3-VL-MoE: layers kept dense (a plain MLP of `intermediate_size`).
    #[serde(default)]
    pub mlp_only_layers: Option<Vec<usize>>,
}

/// The MoE families' defaults and layer rule.
#[derive(Debug, Clone, Copy)]
pub(super) enum MoeFamily {
    /// `Qwen3VLMoeTextConfig`: 60 experts, top-4, inner 1408, no shared expert; sparse
    /// layers by `mlp_only_layers` / `decoder_sparse_step` (`Qwen3VLMoeTextDecoderLayer`).
    Qwen3VlMoe,
    /// `Qwen3_5MoeTextConfig`: 256 experts, top-8, inner 512, shared expert of 512 with a
    /// sigmoid gate; every layer sparse (`Qwen3_5MoeDecoderLayer`).
    Qwen35Moe,
}

/// Dense text fields whose transformers default differs between an MoE family and its dense
/// one (`Qwen3VLMoeTextConfig` vs `Qwen3VLTextConfig`, `Qwen3_5MoeTextConfig` vs
/// `Qwen3_5TextConfig`, transformers 5.24), by `model_type`: [`super::ModelConfig::from_json`]
/// writes them into a text config that lacks them (transformers saves only the fields that
/// differ from the class defaults), so the shared dense parsers see the MoE class's values.
pub(super) fn dense_defaults(model_type: &str) -> &'static [(&'static str, u64)] {
    match model_type {
        "qwen3_vl_moe" => &[
            ("hidden_size", 2048),
            ("intermediate_size", 5632),
            ("num_hidden_layers", 24),
            ("num_attention_heads", 16),
        ],
        "qwen3_5_moe" => &[
            ("hidden_size", 2048),
            ("num_hidden_layers", 40),
            ("num_key_value_heads", 2),
        ],
        _ => &[],
    }
}

/// Resolved sparse-MoE block (transformers `*SparseMoeBlock`): softmax router in f32, top-k
/// in `torch.topk`'s order, the k weights renormalised to sum to 1 (both families always
/// renormalise in 5.24), experts `down(silu(gate(x)) · up(x))`, plus a shared expert scaled
/// by `sigmoid(shared_expert_gate(x))` when present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeSpec {
    /// Routed experts.
    pub num_experts: usize,
    /// Experts per token (`num_experts_per_tok`), `1..=num_experts`.
    pub top_k: usize,
    /// Inner size of a routed expert.
    pub expert_intermediate_size: usize,
    /// Inner size of the shared expert, when the family has one.
    pub shared_expert_intermediate_size: Option<usize>,
    /// Per decoder layer: `true` = sparse MoE block, `false` = dense MLP.
    pub sparse_layers: Vec<bool>,
}

impl MoeFields {
    /// Resolves the fields for a decoder of `num_layers` layers.
    ///
    /// Errors: [`ConfigError::Invalid`] for zero experts, a `num_experts_per_tok` outside
    /// `1..=num_experts`, a zero inner size or a zero `decoder_sparse_step`.
    pub(super) fn resolve(
        &self,
        family: MoeFamily,
        num_layers: usize,
    ) -> Result<MoeSpec, ConfigError> {
        let (experts, top_k, inner) = match family {
            MoeFamily::Qwen3VlMoe => (60, 4, 1408),
            MoeFamily::Qwen35Moe => (256, 8, 512),
        };
        let num_experts = self.num_experts.unwrap_or(experts);
        let top_k = self.num_experts_per_tok.unwrap_or(top_k);
        let inner = self.moe_intermediate_size.unwrap_or(inner);
        if num_experts == 0 || top_k == 0 || top_k > num_experts || inner == 0 {
            return Err(ConfigError::Invalid(format!(
                "moe: num_experts_per_tok {top_k} of num_experts {num_experts} (must be 1..=num_experts), \
                 moe_intermediate_size {inner} (must be > 0)"
            )));
        }
        let (shared, sparse_layers) = match family {
            MoeFamily::Qwen3VlMoe => {
                let step = self.decoder_sparse_step.unwrap_or(1);
                if step == 0 {
                    return Err(ConfigError::Invalid("moe: decoder_sparse_step 0".into()));
                }
                let dense = self.mlp_only_layers.clone().unwrap_or_default();
                let sparse = (0..num_layers)
                    .map(|i| !dense.contains(&i) && (i + 1) % step == 0)
                    .collect();
                (None, sparse)
            }
            MoeFamily::Qwen35Moe => {
                let shared = self.shared_expert_intermediate_size.unwrap_or(512);
                if shared == 0 {
                    return Err(ConfigError::Invalid(
                        "moe: shared_expert_intermediate_size 0".into(),
                    ));
                }
                (Some(shared), vec![true; num_layers])
            }
        };
        Ok(MoeSpec {
            num_experts,
            top_k,
            expert_intermediate_size: inner,
            shared_expert_intermediate_size: shared,
            sparse_layers,
        })
    }
}
