//! Qwen3.5 configs as transformers 5.24 saves them (`scripts/make_qwen3_5_configs.py`) resolve
//! to the hybrid decoder's switches, in the nested and the flat layout (the MoE variant:
//! `configs_moe.rs`).

use std::path::PathBuf;

use serde_json::{json, Value};
use verisample_models::config::{
    ConfigError, Fields, LayerKind, LinearAttentionSpec, MergerNames, MlpNames, VisionNorm,
    VisionTokenIds,
};
use verisample_models::ModelConfig;

fn read(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen3_5_configs")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn parse(v: &Value) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_json(&v.to_string())
}

/// The class defaults of `Qwen3_5Config()`: 3 Gated DeltaNet layers then 1 full-attention layer,
/// 8 times; a quarter of each 256-wide head rotated; no `mrope_section` in the file, so the
/// rotary embedding's own default `[11, 11, 10]`.
#[test]
fn default_config_as_transformers_saves_it() {
    let c = parse(&read("default.config.json")).unwrap();
    assert_eq!(c.family().model_type, "qwen3_5");
    let t = c.text().clone();
    assert_eq!(
        (
            t.vocab_size,
            t.hidden_size,
            t.intermediate_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.head_dim
        ),
        (248320, 4096, 12288, 32, 16, 4, 256)
    );
    assert_eq!(t.rotary_dim, 64);
    assert_eq!(t.mrope_section, [11, 11, 10]);
    assert!(t.mrope_interleaved && t.qk_norm && t.attn_output_gate && t.zero_centered_norm);
    assert!(!t.qkv_bias && !t.o_bias && !t.tie_word_embeddings);
    assert_eq!(t.rope_theta, 10000.0);
    assert_eq!(t.max_position_embeddings, Some(32768));
    let full: Vec<usize> = (0..32)
        .filter(|&i| t.layer_types[i] == LayerKind::FullAttention)
        .collect();
    assert_eq!(full, vec![3, 7, 11, 15, 19, 23, 27, 31]);
    assert_eq!(t.layer_types.len(), 32);
    let lin = t.linear_attention.unwrap();
    assert_eq!(
        lin,
        LinearAttentionSpec {
            conv_kernel: 4,
            num_key_heads: 16,
            num_value_heads: 32,
            key_head_dim: 128,
            value_head_dim: 128,
        }
    );
    assert_eq!(
        (lin.key_dim(), lin.value_dim(), lin.conv_dim()),
        (2048, 4096, 8192)
    );
    assert_eq!(lin.conv_state_elems(), 8192 * 3);
    assert_eq!(lin.recurrent_state_elems(), 32 * 128 * 128);
    let v = c.vision().qwen().unwrap();
    // Qwen3-VL's tower: LayerNorm, `linear_fc1/fc2` MLP and merger, a patch-embedding bias.
    assert_eq!(
        (v.norm, v.mlp, v.merger, v.patch_bias),
        (
            VisionNorm::LayerNorm,
            MlpNames::LinearFc,
            MergerNames::LinearFc,
            true
        )
    );
    assert!(v.deepstack_visual_indexes.is_empty());
    assert_eq!(
        (
            v.depth,
            v.hidden_size,
            v.intermediate_size,
            v.out_hidden_size
        ),
        (27, 1152, 4304, 3584)
    );
    assert_eq!((v.patch_size, v.num_position_embeddings), (16, 2304));
    // The file's token ids, as the family's fields read them.
    let ids: VisionTokenIds = Fields::parse(read("default.config.json"), &c.family().defaults)
        .unwrap()
        .top_as()
        .unwrap();
    assert_eq!(c.image_token_id(), ids.image_token_id);
    assert_eq!(
        (
            ids.image_token_id,
            ids.video_token_id,
            ids.vision_start_token_id,
            ids.vision_end_token_id
        ),
        (248056, 248057, 248053, 248054)
    );
}

/// Small sizes given the old way (`full_attention_interval`, `partial_rotary_factor` as a
/// keyword): fewer key heads than value heads, half of each head rotated.
#[test]
fn tiny_config_with_fewer_key_heads_than_value_heads() {
    let c = parse(&read("tiny.config.json")).unwrap();
    let t = c.text().clone();
    use LayerKind::{FullAttention as F, LinearAttention as L};
    assert_eq!(t.layer_types, vec![L, F, L, F, L, F]);
    assert_eq!((t.head_dim, t.rotary_dim), (32, 16));
    assert_eq!(t.mrope_section, [4, 2, 2]);
    assert_eq!(t.rope_theta, 5000.0);
    assert_eq!(t.rms_norm_eps, 1e-5);
    assert_eq!(t.eos_token_ids, vec![7, 9]);
    // The top-level flag wins over the text config's (transformers ties on the outer config).
    assert!(t.tie_word_embeddings);
    let lin = t.linear_attention.unwrap();
    assert_eq!((lin.num_key_heads, lin.num_value_heads), (2, 6));
    assert_eq!(lin.conv_dim(), 2 * 2 * 8 + 6 * 12);
    assert_eq!(lin.conv_state_elems(), 104 * 3);
    assert_eq!(lin.recurrent_state_elems(), 6 * 8 * 12);
}

/// The flat layout: text fields at the top level, `partial_rotary_factor` next to the rotary
/// block, token ids left out (the class defaults apply).
#[test]
fn flat_layout_resolves_like_the_nested_one() {
    for name in ["default.config.json", "tiny.config.json"] {
        let nested = read(name);
        let expected = parse(&nested).unwrap().text().clone();
        let mut flat = nested.clone();
        let top = flat.as_object_mut().unwrap();
        let Some(Value::Object(mut text)) = top.remove("text_config") else {
            panic!("{name}: no text_config")
        };
        for key in [
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
        ] {
            top.remove(key);
        }
        text.remove("model_type");
        text.remove("tie_word_embeddings");
        let factor = text["rope_parameters"]
            .as_object_mut()
            .unwrap()
            .remove("partial_rotary_factor")
            .unwrap();
        text.insert("partial_rotary_factor".into(), factor);
        for (k, v) in text {
            top.insert(k, v);
        }
        let c = parse(&flat).unwrap();
        assert_eq!(c.text().clone(), expected, "{name}");
        assert_eq!(c.image_token_id(), 248056, "{name}");
    }
}

#[test]
fn inconsistent_hybrid_settings_are_errors_naming_the_setting() {
    let base = read("tiny.config.json");
    let cases: [(&str, Value, &str); 4] = [
        (
            "layer_types",
            json!(["linear_attention", "full_attention"]),
            "layer_types has 2 entries",
        ),
        (
            "layer_types",
            json!([
                "linear_attention",
                "sliding_attention",
                "linear_attention",
                "full_attention",
                "linear_attention",
                "full_attention"
            ]),
            "layer_types[1] = `sliding_attention`",
        ),
        ("linear_num_value_heads", json!(5), "multiple of key heads"),
        ("partial_rotary_factor", json!(0.25), "disagree"),
    ];
    for (key, value, needle) in cases {
        let mut v = base.clone();
        v["text_config"][key] = value;
        let err = parse(&v).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid(_)), "{key}: {err}");
        assert!(err.to_string().contains(needle), "{key}: {err}");
    }
    // `mrope_section` must cover the rotated part only: 8 pairs here, not head_dim / 2 = 16.
    let mut v = base.clone();
    v["text_config"]["rope_parameters"]["mrope_section"] = json!([8, 4, 4]);
    let err = parse(&v).unwrap_err();
    assert!(err.to_string().contains("rotary_dim/2 = 8"), "{err}");
}
