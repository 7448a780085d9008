//! Qwen3-VL-MoE and Qwen3.5-MoE configs resolve to the MoE switches transformers 5.24 reads
//! (`Qwen3VLMoeTextConfig`, `Qwen3_5MoeTextConfig`, their decoder layers' choice of
//! `*SparseMoeBlock` or dense MLP).

use serde_json::{json, Value};
use verisample_models::{supported_model_types, ConfigError, ModelConfig};

fn parse(v: &Value) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_json(&v.to_string())
}

fn vl_moe(text: Value) -> Value {
    json!({"model_type": "qwen3_vl_moe", "vision_config": {}, "text_config": text,
           "image_token_id": 1, "video_token_id": 2, "vision_start_token_id": 3, "vision_end_token_id": 4})
}

/// An empty text config takes the MoE classes' own defaults, dense fields included (the
/// dense family's differ): `Qwen3VLMoeTextConfig()` = 24 layers of 2048, 16 heads, MLP
/// 5632, 60 experts top-4 of 1408, every layer sparse; `Qwen3_5MoeTextConfig()` = 40 layers
/// of 2048, 2 KV heads, 256 experts top-8 of 512, shared expert 512.
#[test]
fn empty_text_configs_take_the_moe_class_defaults() {
    let c = parse(&vl_moe(
        json!({"rope_parameters": {"mrope_section": [24, 20, 20]}}),
    ))
    .unwrap();
    assert_eq!(c.family().model_type, "qwen3_vl_moe");
    let t = c.text().clone();
    assert_eq!(
        (
            t.hidden_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.intermediate_size
        ),
        (2048, 24, 16, 16, 5632)
    );
    let m = t.moe.unwrap();
    assert_eq!(
        (m.num_experts, m.top_k, m.expert_intermediate_size),
        (60, 4, 1408)
    );
    assert_eq!(m.shared_expert_intermediate_size, None);
    assert_eq!(m.sparse_layers, vec![true; 24]);

    let c = parse(&json!({"model_type": "qwen3_5_moe", "vision_config": {}, "text_config": {}}))
        .unwrap();
    assert_eq!(c.family().model_type, "qwen3_5_moe");
    let t = c.text().clone();
    assert_eq!((t.hidden_size, t.num_layers, t.num_kv_heads), (2048, 40, 2));
    let m = t.moe.unwrap();
    assert_eq!(
        (m.num_experts, m.top_k, m.expert_intermediate_size),
        (256, 8, 512)
    );
    assert_eq!(m.shared_expert_intermediate_size, Some(512));
    assert_eq!(m.sparse_layers, vec![true; 40]);
    assert_eq!(c.image_token_id(), 248056);
}

/// `Qwen3VLMoeTextDecoderLayer`: sparse when not in `mlp_only_layers` and `(i + 1) %
/// decoder_sparse_step == 0`; `num_local_experts` is an alias of `num_experts`.
#[test]
fn sparse_layers_follow_mlp_only_layers_and_the_sparse_step() {
    let c = parse(&vl_moe(json!({
        "num_hidden_layers": 6, "num_local_experts": 8, "num_experts_per_tok": 2,
        "decoder_sparse_step": 2, "mlp_only_layers": [3],
        "rope_parameters": {"mrope_section": [24, 20, 20]}})))
    .unwrap();
    let m = c.text().clone().moe.unwrap();
    assert_eq!(m.num_experts, 8);
    assert_eq!(
        m.sparse_layers,
        vec![false, true, false, false, false, true]
    );
}

/// Inconsistent MoE sizes are errors naming the field; an unknown MoE `model_type` lists the
/// supported ones, the two MoE families among them.
#[test]
fn bad_moe_settings_are_errors() {
    for (text, field) in [
        (
            json!({"num_experts": 4, "num_experts_per_tok": 5}),
            "num_experts_per_tok",
        ),
        (json!({"moe_intermediate_size": 0}), "moe_intermediate_size"),
        (json!({"decoder_sparse_step": 0}), "decoder_sparse_step"),
    ] {
        let mut text = text;
        text["rope_parameters"] = json!({"mrope_section": [24, 20, 20]});
        let err = parse(&vl_moe(text)).unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
    }
    let err = parse(&json!({"model_type": "qwen3_omni_moe"})).unwrap_err();
    assert!(matches!(err, ConfigError::Unsupported { .. }), "{err}");
    let msg = err.to_string();
    for t in supported_model_types() {
        assert!(msg.contains(t), "{msg} lacks {t}");
    }
    assert!(
        msg.contains("qwen3_vl_moe") && msg.contains("qwen3_5_moe"),
        "{msg}"
    );
}
