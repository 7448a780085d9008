//! Published configs parse into the right shapes; the transformers-5 nested layout of the
//! fixtures parses too; unsupported model types are a clear error.

use std::path::PathBuf;

use verisample_models::{ConfigError, ModelConfig};

fn read(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn qwen2_vl_2b_flat_layout() {
    let c = ModelConfig::from_json(&read("configs/Qwen2-VL-2B-Instruct.config.json")).unwrap();
    assert_eq!(c.family().model_type, "qwen2_vl");
    let t = c.text().clone();
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
    let v = c.vision().qwen().unwrap();
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
    assert_eq!(c.image_token_id(), 151655);
}

#[test]
fn qwen2_5_vl_7b_flat_layout() {
    let c = ModelConfig::from_json(&read("configs/Qwen2.5-VL-7B-Instruct.config.json")).unwrap();
    assert_eq!(c.family().model_type, "qwen2_5_vl");
    let t = c.text().clone();
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
    let v = c.vision().qwen().unwrap();
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
    assert_eq!(c.family().model_type, "qwen3_vl");
    let t = c.text().clone();
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
    let v = c.vision().qwen().unwrap();
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
    let t = c.text().clone();
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
    assert_eq!(c.vision().qwen().unwrap().rope_theta, 10000.0);
    assert_eq!(c.vision().qwen().unwrap().hidden_act, "quick_gelu");
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
    assert_eq!(c.text().mrope_section, [2, 3, 3]);
    assert_eq!(c.vision().qwen().unwrap().in_channels, 3);
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
    assert!(matches!(err, ConfigError::Unsupported { ref found, .. } if found == "llava"));
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
    assert!(matches!(
        ModelConfig::from_json(&v.to_string()),
        Err(ConfigError::Invalid(_))
    ));
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

/// What every spelling of one published config must resolve to (values from the published
/// `config.json`; `vision` = depth, width, MLP size, merger output).
struct Expect {
    name: &'static str,
    model_type: &'static str,
    /// hidden, layers, heads, kv heads, head_dim, vocab, MLP size.
    text: [usize; 7],
    mrope_section: [usize; 3],
    rope_theta: f64,
    interleaved: bool,
    tie: bool,
    vision: [usize; 4],
}

const TABLE: [Expect; 5] = [
    Expect {
        name: "Qwen2-VL-2B-Instruct",
        model_type: "qwen2_vl",
        text: [1536, 28, 12, 2, 128, 151936, 8960],
        mrope_section: [16, 24, 24],
        rope_theta: 1e6,
        interleaved: false,
        tie: true,
        vision: [32, 1280, 5120, 1536],
    },
    Expect {
        name: "Qwen2.5-VL-3B-Instruct",
        model_type: "qwen2_5_vl",
        text: [2048, 36, 16, 2, 128, 151936, 11008],
        mrope_section: [16, 24, 24],
        rope_theta: 1e6,
        interleaved: false,
        tie: true,
        vision: [32, 1280, 3420, 2048],
    },
    Expect {
        name: "Qwen2.5-VL-7B-Instruct",
        model_type: "qwen2_5_vl",
        text: [3584, 28, 28, 4, 128, 152064, 18944],
        mrope_section: [16, 24, 24],
        rope_theta: 1e6,
        interleaved: false,
        tie: false,
        vision: [32, 1280, 3420, 3584],
    },
    Expect {
        name: "Qwen3-VL-4B-Instruct",
        model_type: "qwen3_vl",
        text: [2560, 36, 32, 8, 128, 151936, 9728],
        mrope_section: [24, 20, 20],
        rope_theta: 5e6,
        interleaved: true,
        tie: true,
        vision: [24, 1024, 4096, 2560],
    },
    Expect {
        name: "Qwen3-VL-8B-Thinking",
        model_type: "qwen3_vl",
        text: [4096, 36, 32, 8, 128, 151936, 12288],
        mrope_section: [24, 20, 20],
        rope_theta: 5e6,
        interleaved: true,
        tie: false,
        vision: [27, 1152, 4304, 4096],
    },
];

fn check(e: &Expect, label: &str, json: &serde_json::Value) {
    let c =
        ModelConfig::from_json(&json.to_string()).unwrap_or_else(|err| panic!("{label}: {err}"));
    assert_eq!(c.family().model_type, e.model_type, "{label}");
    let t = c.text();
    let got = [
        t.hidden_size,
        t.num_layers,
        t.num_heads,
        t.num_kv_heads,
        t.head_dim,
        t.vocab_size,
        t.intermediate_size,
    ];
    assert_eq!(got, e.text, "{label}");
    assert_eq!(t.mrope_section, e.mrope_section, "{label}");
    assert_eq!(t.rope_theta, e.rope_theta, "{label}");
    assert_eq!(t.mrope_interleaved, e.interleaved, "{label}");
    assert_eq!(t.tie_word_embeddings, e.tie, "{label}");
    assert_eq!(t.eos_token_ids, vec![151645], "{label}");
    let v = c.vision().qwen().unwrap();
    let got = [
        v.depth,
        v.hidden_size,
        v.intermediate_size,
        v.out_hidden_size,
    ];
    assert_eq!(got, e.vision, "{label}");
    assert_eq!((v.in_channels, v.rope_theta), (3, 10000.0), "{label}");
}

/// The object holding the text fields: `text_config`, or the top level of a flat file.
fn text_scope(v: &mut serde_json::Value) -> &mut serde_json::Map<String, serde_json::Value> {
    let top = v.as_object_mut().unwrap();
    if top.contains_key("text_config") {
        top.get_mut("text_config").unwrap().as_object_mut().unwrap()
    } else {
        top
    }
}

/// The other spellings of one file's rope block and text layout, each a transformation of
/// the file as published or re-saved.
fn spellings(v: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    let mut push = |label: &str, f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut w = v.clone();
        f(text_scope(&mut w));
        out.push((label.to_string(), w));
    };
    let rope_key = |t: &serde_json::Map<String, serde_json::Value>| {
        if t.contains_key("rope_parameters") {
            "rope_parameters"
        } else {
            "rope_scaling"
        }
    };
    push("block renamed", &|t| {
        let key = rope_key(t);
        let other = if key == "rope_parameters" {
            "rope_scaling"
        } else {
            "rope_parameters"
        };
        let block = t.remove(key).unwrap();
        t.insert(other.into(), block);
    });
    push("both kind keys", &|t| {
        let block = t.get_mut(rope_key(t)).unwrap().as_object_mut().unwrap();
        block.insert("type".into(), "mrope".into());
        block.insert("rope_type".into(), "default".into());
    });
    push("only the legacy kind key", &|t| {
        let block = t.get_mut(rope_key(t)).unwrap().as_object_mut().unwrap();
        block.remove("rope_type");
        block.insert("type".into(), "mrope".into());
    });
    push("theta inside the block", &|t| {
        let theta = t.remove("rope_theta");
        let block = t.get_mut(rope_key(t)).unwrap().as_object_mut().unwrap();
        if let Some(theta) = theta {
            block.insert("rope_theta".into(), theta);
        }
    });
    push("theta next to the block", &|t| {
        let block = t.get_mut(rope_key(t)).unwrap().as_object_mut().unwrap();
        if let Some(theta) = block.remove("rope_theta") {
            t.insert("rope_theta".into(), theta);
        }
    });
    push("both blocks, section in the old one", &|t| {
        let key = rope_key(t);
        let mut block = t.remove(key).unwrap();
        let section = block
            .as_object_mut()
            .unwrap()
            .remove("mrope_section")
            .unwrap();
        t.insert("rope_parameters".into(), block);
        t.insert(
            "rope_scaling".into(),
            serde_json::json!({"type": "mrope", "mrope_section": section}),
        );
    });
    // Flat <-> nested text config.
    let mut w = v.clone();
    let top = w.as_object_mut().unwrap();
    match top.remove("text_config") {
        Some(serde_json::Value::Object(text)) => {
            for (k, val) in text {
                top.entry(k).or_insert(val);
            }
            out.push(("text fields flattened".into(), w));
        }
        _ => {
            // What transformers keeps at the top level of a nested file.
            let keep = [
                "architectures",
                "model_type",
                "vision_config",
                "tie_word_embeddings",
                "image_token_id",
                "video_token_id",
                "vision_start_token_id",
                "vision_end_token_id",
            ];
            let text: serde_json::Map<_, _> = top
                .iter()
                .filter(|(k, _)| !keep.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            top.retain(|k, _| keep.contains(&k.as_str()));
            top.insert("text_config".into(), serde_json::Value::Object(text));
            out.push(("text fields nested".into(), w));
        }
    }
    out
}

#[test]
fn every_published_and_resaved_config_parses_in_every_spelling() {
    for e in &TABLE {
        for file in ["config.json", "resaved.config.json"] {
            let name = format!("configs/{}.{file}", e.name);
            let v: serde_json::Value = serde_json::from_str(&read(&name)).unwrap();
            check(e, &name, &v);
            for (label, w) in spellings(&v) {
                check(e, &format!("{name}, {label}"), &w);
            }
        }
    }
}

#[test]
fn resaved_files_carry_both_kind_keys_like_transformers_writes_them() {
    // The layout of the issue: `rope_parameters` with `rope_type` and the legacy `type`.
    let v: serde_json::Value =
        serde_json::from_str(&read("configs/Qwen2.5-VL-7B-Instruct.resaved.config.json")).unwrap();
    let rope = &v["text_config"]["rope_parameters"];
    assert_eq!(
        (&rope["rope_type"], &rope["type"]),
        (&serde_json::json!("default"), &serde_json::json!("mrope"))
    );
    assert_eq!(v["transformers_version"], "5.24.0");
}

#[test]
fn contradicting_spellings_are_an_error_naming_both() {
    let mut v: serde_json::Value =
        serde_json::from_str(&read("configs/Qwen2.5-VL-7B-Instruct.resaved.config.json")).unwrap();
    v["text_config"]["rope_scaling"] = serde_json::json!({"mrope_section": [16, 16, 32]});
    let msg = ModelConfig::from_json(&v.to_string())
        .unwrap_err()
        .to_string();
    for part in [
        "text_config.rope_parameters.mrope_section",
        "[16,24,24]",
        "text_config.rope_scaling.mrope_section",
        "[16,16,32]",
    ] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
}

#[test]
fn a_rope_kind_other_than_mrope_is_refused() {
    let mut v: serde_json::Value =
        serde_json::from_str(&read("configs/Qwen3-VL-8B-Thinking.resaved.config.json")).unwrap();
    v["text_config"]["rope_parameters"]["rope_type"] = serde_json::json!("yarn");
    let msg = ModelConfig::from_json(&v.to_string())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("yarn") && msg.contains("default"), "{msg}");
}

#[test]
fn a_checkpoint_with_the_resaved_rope_block_loads_with_the_same_specs() {
    use candle_core::{DType, Device};
    // The tiny Qwen2-VL checkpoint with its rotary block as transformers 5.24 re-saves a
    // published config: `rope_type` and the legacy `type` side by side.
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen2_vl");
    let dir = std::env::temp_dir().join(format!("verisample-resaved-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&read("qwen2_vl/config.json")).unwrap();
    v["text_config"]["rope_parameters"]["type"] = serde_json::json!("mrope");
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let resaved = verisample_models::VlModel::load(&dir, DType::F32, &Device::Cpu);
    std::fs::remove_dir_all(&dir).unwrap();
    let resaved = resaved.unwrap_or_else(|e| panic!("{e}"));
    let original = verisample_models::VlModel::load(&src, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(resaved.text_spec(), original.text_spec());
    assert_eq!(resaved.text_spec().mrope_section, [2, 3, 3]);
    assert_eq!(
        resaved.vision_spec().qwen().unwrap(),
        original.vision_spec().qwen().unwrap()
    );
}

/// Every family of the registry has its fixture checkpoint (made with transformers' own classes,
/// run by the parity, batch-invariance and engine tests), and every fixture is a family's.
#[test]
fn the_fixtures_are_the_registry() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut fixtures: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").is_file() && p.join("model.safetensors").is_file())
        .map(|p| {
            let config = std::fs::read_to_string(p.join("config.json")).unwrap();
            let family = ModelConfig::from_json(&config).unwrap().family();
            let dir = p.file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(
                family.model_type, dir,
                "fixture folder named for its model_type"
            );
            dir
        })
        .collect();
    fixtures.sort();
    let mut registry = verisample_models::supported_model_types();
    registry.sort();
    assert_eq!(fixtures, registry);
}

/// A key the file holds is the file's, `null` included: a family default fills only what is
/// absent (here Qwen3-VL's `head_dim` 128 would otherwise hide the `null`), and a `text_config`
/// that is not an object is an error, not a flat layout.
#[test]
fn a_stated_null_is_not_replaced_by_a_default() {
    let mut v: serde_json::Value =
        serde_json::from_str(&read("configs/Qwen3-VL-8B-Thinking.resaved.config.json")).unwrap();
    v["text_config"].as_object_mut().unwrap().remove("head_dim");
    assert_eq!(
        ModelConfig::from_json(&v.to_string())
            .unwrap()
            .text()
            .head_dim,
        128
    );
    v["text_config"]["head_dim"] = serde_json::Value::Null;
    assert!(matches!(
        ModelConfig::from_json(&v.to_string()),
        Err(ConfigError::Invalid(_))
    ));
    v["text_config"] = serde_json::json!("qwen3");
    let msg = ModelConfig::from_json(&v.to_string())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`text_config` = \"qwen3\" is not an object"),
        "{msg}"
    );
}
