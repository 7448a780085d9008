//! Published configs parse into the right shapes; the transformers-5 nested layout of the
//! fixtures parses too; unsupported model types are a clear error.

use std::path::PathBuf;

use verisample_models::config::{ConfigError, Family, ModelConfig};

fn read(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn qwen2_vl_2b_flat_layout() {
    let c = ModelConfig::from_json(&read("configs/Qwen2-VL-2B-Instruct.config.json")).unwrap();
    assert_eq!(c.family(), Family::Qwen2Vl);
    let t = c.text().unwrap();
    assert_eq!(
        (
            t.hidden_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.head_dim
        ),
        (1536, 28, 12, 2, 128)
    );
    assert_eq!((t.vocab_size, t.intermediate_size), (151936, 8960));
    assert_eq!(t.mrope_section, [16, 24, 24]);
    assert!(!t.mrope_interleaved && t.qkv_bias && !t.qk_norm);
    assert_eq!(t.rope_theta, 1_000_000.0);
    assert_eq!(t.rms_norm_eps, 1e-6);
    assert!(t.tie_word_embeddings);
    assert_eq!(t.eos_token_ids, vec![151645]);
    let v = c.vision();
    assert_eq!(
        (
            v.depth,
            v.hidden_size,
            v.num_heads,
            v.intermediate_size,
            v.out_hidden_size
        ),
        (32, 1280, 16, 5120, 1536)
    );
    assert_eq!(
        (
            v.patch_size,
            v.spatial_merge_size,
            v.temporal_patch_size,
            v.in_channels
        ),
        (14, 2, 2, 3)
    );
    assert_eq!(v.hidden_act, "quick_gelu");
    assert_eq!(c.token_ids().image_token_id, 151655);
}

#[test]
fn qwen2_5_vl_7b_flat_layout() {
    let c = ModelConfig::from_json(&read("configs/Qwen2.5-VL-7B-Instruct.config.json")).unwrap();
    assert_eq!(c.family(), Family::Qwen25Vl);
    let t = c.text().unwrap();
    assert_eq!(
        (
            t.hidden_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.head_dim
        ),
        (3584, 28, 28, 4, 128)
    );
    assert_eq!(t.max_position_embeddings, Some(128000));
    assert_eq!((t.vocab_size, t.intermediate_size), (152064, 18944));
    assert_eq!(t.mrope_section, [16, 24, 24]);
    assert!(!t.mrope_interleaved && t.qkv_bias && !t.qk_norm);
    assert_eq!(t.rope_theta, 1_000_000.0);
    assert!(!t.tie_word_embeddings);
    let v = c.vision();
    assert_eq!(
        (
            v.depth,
            v.hidden_size,
            v.intermediate_size,
            v.out_hidden_size
        ),
        (32, 1280, 3420, 3584)
    );
    assert_eq!(
        (v.window_size, v.fullatt_block_indexes.clone()),
        (112, vec![7, 15, 23, 31])
    );
    assert_eq!(v.hidden_act, "silu");
}

#[test]
fn qwen3_vl_8b_thinking_nested_layout() {
    let c = ModelConfig::from_json(&read("configs/Qwen3-VL-8B-Thinking.config.json")).unwrap();
    assert_eq!(c.family(), Family::Qwen3Vl);
    let t = c.text().unwrap();
    assert_eq!(
        (
            t.hidden_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.head_dim
        ),
        (4096, 36, 32, 8, 128)
    );
    assert_eq!(t.mrope_section, [24, 20, 20]);
    assert_eq!(t.max_position_embeddings, Some(262144));
    assert!(t.mrope_interleaved && t.qk_norm && !t.qkv_bias);
    assert_eq!(t.rope_theta, 5_000_000.0);
    assert_eq!((t.vocab_size, t.intermediate_size), (151936, 12288));
    assert!(!t.tie_word_embeddings);
    assert_eq!(t.eos_token_ids, vec![151645]);
    let v = c.vision();
    assert_eq!(
        (v.num_heads, v.spatial_merge_size, v.temporal_patch_size),
        (16, 2, 2)
    );
    assert_eq!(
        (
            v.depth,
            v.hidden_size,
            v.intermediate_size,
            v.out_hidden_size
        ),
        (27, 1152, 4304, 4096)
    );
    assert_eq!((v.patch_size, v.num_position_embeddings), (16, 2304));
    assert_eq!(v.deepstack_visual_indexes, vec![8, 16, 24]);
    assert_eq!(v.hidden_act, "gelu_pytorch_tanh");
}

#[test]
fn transformers5_nested_layout_of_the_fixture() {
    let c = ModelConfig::from_json(&read("qwen2_vl/config.json")).unwrap();
    let t = c.text().unwrap();
    assert_eq!(
        (
            t.hidden_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.head_dim
        ),
        (64, 2, 4, 2, 16)
    );
    assert_eq!(t.mrope_section, [2, 3, 3]);
    assert_eq!(c.vision().rope_theta, 10000.0);
    assert_eq!(c.vision().hidden_act, "quick_gelu");
}

#[test]
fn old_and_new_names_of_a_key_side_by_side_parse_like_transformers() {
    // Files re-saved by transformers 5 keep the flat `rope_scaling` next to the new
    // `rope_parameters`, and `in_chans` next to `in_channels` (the default checkpoint does).
    let mut v: serde_json::Value = serde_json::from_str(&read("qwen2_vl/config.json")).unwrap();
    v["rope_scaling"] = serde_json::json!({"type": "mrope", "mrope_section": [2, 3, 3]});
    v["vision_config"]["in_chans"] = serde_json::json!(3);
    v["vision_config"]["in_channels"] = serde_json::json!(3);
    let c = ModelConfig::from_json(&v.to_string()).unwrap();
    assert_eq!(c.text().unwrap().mrope_section, [2, 3, 3]);
    assert_eq!(c.vision().in_channels, 3);
    // The two names disagreeing is an error naming both.
    v["vision_config"]["in_chans"] = serde_json::json!(4);
    let err = ModelConfig::from_json(&v.to_string()).unwrap_err();
    assert!(matches!(err, ConfigError::Invalid(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("in_chans") && msg.contains("in_channels"),
        "{msg}"
    );
}

#[test]
fn unsupported_model_type_lists_supported_ones() {
    let err = ModelConfig::from_json(r#"{"model_type": "llava"}"#).unwrap_err();
    assert!(matches!(err, ConfigError::Unsupported { ref found } if found == "llava"));
    let msg = err.to_string();
    assert!(
        msg.contains("qwen2_vl") && msg.contains("qwen2_5_vl") && msg.contains("qwen3_vl"),
        "{msg}"
    );
}

#[test]
fn bad_mrope_section_is_an_error() {
    let mut v: serde_json::Value =
        serde_json::from_str(&read("configs/Qwen2-VL-2B-Instruct.config.json")).unwrap();
    v["rope_scaling"]["mrope_section"] = serde_json::json!([16, 24, 20]);
    let c = ModelConfig::from_json(&v.to_string()).unwrap();
    assert!(matches!(c.text(), Err(ConfigError::Invalid(_))));
}

#[test]
fn missing_tensor_is_an_error_naming_it() {
    use candle_core::{DType, Device, Tensor};
    let dir = std::env::temp_dir().join(format!("verisample-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), read("qwen2_vl/config.json")).unwrap();
    let only = std::collections::HashMap::from([(
        "lm_head.weight".to_string(),
        Tensor::zeros((1209, 64), DType::F32, &Device::Cpu).unwrap(),
    )]);
    candle_core::safetensors::save(&only, dir.join("model.safetensors")).unwrap();
    let err = match verisample_models::VlModel::load(&dir, DType::F32, &Device::Cpu) {
        Ok(_) => panic!("loaded without weights"),
        Err(e) => e.to_string(),
    };
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.contains("visual.patch_embed.proj.weight"), "{err}");
    // No weights at all.
    let empty = std::env::temp_dir().join(format!("verisample-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("config.json"), read("qwen2_vl/config.json")).unwrap();
    let err = verisample_models::VlModel::load(&empty, DType::F32, &Device::Cpu)
        .err()
        .map(|e| e.to_string());
    std::fs::remove_dir_all(&empty).unwrap();
    assert!(err.unwrap_or_default().contains("no model.safetensors"));
}
