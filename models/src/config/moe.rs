//! Sparse mixture-of-experts fields of the Qwen3-VL-MoE and Qwen3.5-MoE text configs
//! (transformers 5.24 `configuration_qwen3_vl_moe.py`, `configuration_qwen3_5_moe.py`) and
//! their resolution into [`MoeSpec`]: which decoder layers route their tokens to experts.

use serde::Deserialize;

use super::ConfigError;

/// The MoE fields of a text config, as written in `config.json` with the family's
/// transformers defaults filled in (`Defaults::text`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MoeFields {
    /// Routed experts per sparse layer (`num_experts`; `num_local_experts` folded in by
    /// `normalize`).
    #[serde(default)]
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

/// Which decoder layers a family's MoE config makes sparse, and whether it adds a shared
/// expert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SparseRule {
    /// `Qwen3VLMoeTextDecoderLayer`: layer `i` is sparse when it is not in `mlp_only_layers`
    /// and `(i + 1) % decoder_sparse_step == 0`; no shared expert.
    SparseStep,
    /// `Qwen3_5MoeDecoderLayer`: every layer sparse, plus a shared expert of
    /// `shared_expert_intermediate_size` scaled by a sigmoid gate.
    EveryLayerWithSharedExpert,
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
    pub fn resolve(&self, rule: SparseRule, num_layers: usize) -> Result<MoeSpec, ConfigError> {
        let num_experts = self.num_experts.unwrap_or(0);
        let top_k = self.num_experts_per_tok.unwrap_or(0);
        let inner = self.moe_intermediate_size.unwrap_or(0);
        if num_experts == 0 || top_k == 0 || top_k > num_experts || inner == 0 {
            return Err(ConfigError::Invalid(format!(
                "moe: num_experts_per_tok {top_k} of num_experts {num_experts} (must be 1..=num_experts), \
                 moe_intermediate_size {inner} (must be > 0)"
            )));
        }
        let (shared, sparse_layers) = match rule {
            SparseRule::SparseStep => {
                let step = self.decoder_sparse_step.unwrap_or(0);
                if step == 0 {
                    return Err(ConfigError::Invalid("moe: decoder_sparse_step 0".into()));
                }
                let dense = self.mlp_only_layers.clone().unwrap_or_default();
                let sparse = (0..num_layers)
                    .map(|i| !dense.contains(&i) && (i + 1) % step == 0)
                    .collect();
                (None, sparse)
            }
            SparseRule::EveryLayerWithSharedExpert => {
                let shared = self.shared_expert_intermediate_size.unwrap_or(0);
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
