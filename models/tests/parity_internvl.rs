//! InternVL parity with transformers on the tiny fixture (`tests/fixtures/internvl/`, made by
//! `scripts/make_fixtures.py --family internvl`): the GotOcr2 tiles of the real JPEGs bit for
//! bit, the prompt with `<img>` + `<IMG_CONTEXT>`×n + `</img>`, InternViT + pixel shuffle +
//! projector features, prefill logits and greedy tokens on the plain-RoPE Qwen3 decoder, and
//! batch invariance of a ragged batch. f32 on CPU.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use verisample_models::{
    ChatMessage, ModelConfig, Preprocessor, PromptBuilder, RenderOptions, VisionInputs, VlModel,
};

const FAMILY: &str = "internvl";

fn config() -> ModelConfig {
    ModelConfig::from_dir(&fixture_dir(FAMILY)).unwrap()
}

/// The config resolves to a plain-RoPE Qwen3 decoder (one position row) and InternViT with
/// the fixture's sizes.
#[test]
fn config_resolves_to_internvit_and_a_plain_rope_decoder() {
    let c = config();
    assert_eq!(c.family().model_type, "internvl");
    let t = c.text();
    assert_eq!(t.position_rows, 1);
    assert_eq!(t.mrope_section, [t.rotary_dim / 2, 0, 0]);
    assert!(t.qk_norm, "text_config.model_type qwen3 has q/k norm");
    let verisample_models::VisionConfig::InternVit(v) = c.vision() else {
        panic!("{:?}", c.vision())
    };
    assert_eq!((v.image_size, v.patch_size, v.shuffle), (112, 14, 2));
    assert_eq!(v.tokens_per_tile(), 16);
    assert_eq!(v.out_hidden_size, t.hidden_size);
}

/// Decode + tiles + resize + normalise of the real JPEGs: bit-exact with transformers'
/// Pillow processor; then the prompt ids, and the whole path to greedy tokens.
#[test]
fn real_jpegs_tiles_prompt_and_greedy_tokens() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let g = Goldens::load(FAMILY);
    let dir = fixture_dir(FAMILY);
    let cfg = config();
    let proc = Preprocessor::from_dir(&dir, &cfg).unwrap();
    let prompts =
        PromptBuilder::from_dir(&dir, cfg.image_token_id(), cfg.family().image_wrap).unwrap();
    let question = g.meta["question"].as_str().unwrap();
    let model = load_model(FAMILY);
    for i in 0..g.n() {
        let path = data.join(g.meta["images"][i].as_str().unwrap());
        let out = proc.preprocess(&std::fs::read(&path).unwrap()).unwrap();
        let tiles = g.t("pixel_values", i).dim(0).unwrap();
        assert_eq!(out.grid_thw, [tiles, 8, 8], "tiles of image {i}");
        assert_eq!(
            g.ids("num_patches", i),
            vec![tiles as u32],
            "num_patches of image {i}"
        );
        let want = internvl_pixels(&model, &g, i)
            .pixel_values
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let differing = out
            .pixel_values
            .iter()
            .zip(&want)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(out.pixel_values.len(), want.len());
        assert_eq!(
            differing,
            0,
            "image {i}: max |Δ| {}",
            max_abs(&out.pixel_values, &want)
        );
        let ids = prompts
            .encode(
                &[ChatMessage::user_image_question(question)],
                RenderOptions {
                    add_generation_prompt: true,
                    enable_thinking: Some(true),
                },
                &[proc.num_image_tokens(out.grid_thw)],
            )
            .unwrap();
        assert_eq!(ids, g.ids("input_ids", i), "prompt ids of sequence {i}");
        let n = out.pixel_values.len() / out.patch_dim;
        let images = model
            .encode_images(&VisionInputs {
                pixel_values: Tensor::from_vec(out.pixel_values, (n, out.patch_dim), &Device::Cpu)
                    .unwrap(),
                grid_thw: vec![out.grid_thw],
            })
            .unwrap();
        let pos: Vec<u32> = (0..ids.len() as u32).collect();
        let seq = SeqInput {
            positions: [pos.clone(), pos.clone(), pos],
            ids,
            rope_delta: 0,
            images,
        };
        let run = run_greedy(&model, &mut fresh_cache(&model), &[seq], 24, 0);
        assert_eq!(
            run.tokens[0],
            g.ids("greedy", i),
            "greedy tokens of image {i}"
        );
    }
}

/// InternViT + pixel shuffle + projector on transformers' pixel values match its image
/// features; prefill logits within 1e-4 and the 24 greedy tokens equal.
#[test]
fn features_logits_and_greedy_tokens_match_transformers() {
    let g = Goldens::load(FAMILY);
    let model = load_model(FAMILY);
    for i in 0..g.n() {
        let seq = internvl_reference_seq(&model, &g, i);
        let got: Vec<f32> = seq.images.embeds.flatten_all().unwrap().to_vec1().unwrap();
        let d = max_abs(&got, &g.f32s("image_features", i));
        println!("internvl seq {i}: image features max |Δ| {d:.3e}");
        assert!(d <= 1e-4, "image features of sequence {i}: max |Δ| {d}");
        let run = run_greedy(&model, &mut fresh_cache(&model), &[seq], 24, 0);
        let d = max_abs(&run.prefill_logits[0], &g.f32s("logits", i));
        println!("internvl seq {i}: prefill logits max |Δ| {d:.3e}");
        assert!(d <= 1e-4, "sequence {i}: prefill logits max |Δ| {d}");
        assert_eq!(
            run.tokens[0],
            g.ids("greedy", i),
            "greedy tokens of sequence {i}"
        );
    }
}

/// The four sequences prefilled and decoded as one ragged batch, their images encoded in one
/// call, give bitwise the logits and tokens each has alone.
#[test]
fn a_ragged_batch_is_bitwise_each_sequence_alone() {
    let g = Goldens::load(FAMILY);
    let model = load_model(FAMILY);
    let seqs: Vec<SeqInput> = (0..g.n())
        .map(|i| internvl_reference_seq(&model, &g, i))
        .collect();
    let alone: Vec<Run> = seqs
        .iter()
        .map(|s| {
            let one = SeqInput {
                ids: s.ids.clone(),
                positions: s.positions.clone(),
                rope_delta: 0,
                images: s.images.clone(),
            };
            run_greedy(&model, &mut fresh_cache(&model), &[one], 8, 0)
        })
        .collect();
    let pv = Tensor::cat(
        &(0..g.n())
            .map(|i| internvl_pixels(&model, &g, i).pixel_values)
            .collect::<Vec<_>>(),
        0,
    )
    .unwrap();
    let grids = (0..g.n())
        .map(|i| [g.t("pixel_values", i).dim(0).unwrap(), 8, 8])
        .collect();
    let joint = model
        .encode_images(&VisionInputs {
            pixel_values: pv,
            grid_thw: grids,
        })
        .unwrap();
    let mut start = 0;
    let batched: Vec<SeqInput> = seqs
        .iter()
        .map(|s| {
            let n = s.images.embeds.dim(0).unwrap();
            let images = joint.narrow(start, n).unwrap();
            start += n;
            SeqInput {
                ids: s.ids.clone(),
                positions: s.positions.clone(),
                rope_delta: 0,
                images,
            }
        })
        .collect();
    let batch = run_greedy(&model, &mut fresh_cache(&model), &batched, 8, 0);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (i, one) in alone.iter().enumerate() {
        assert_eq!(
            bits(&batch.prefill_logits[i]),
            bits(&one.prefill_logits[0]),
            "prefill logits of sequence {i}"
        );
        assert_eq!(batch.tokens[i], one.tokens[0], "tokens of sequence {i}");
    }
}

/// The same images as PNG files (lossless, made here from the decoded JPEGs) give the same
/// tiles as their JPEGs, so transformers' pixel values: the PNG decode path of the tile
/// processor.
#[test]
fn real_images_as_png_give_the_same_tiles() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let g = Goldens::load(FAMILY);
    let proc = Preprocessor::from_dir(&fixture_dir(FAMILY), &config()).unwrap();
    for i in 0..g.n() {
        let path = data.join(g.meta["images"][i].as_str().unwrap());
        let rgb = proc.decode(&std::fs::read(&path).unwrap()).unwrap();
        let img = image::RgbImage::from_raw(rgb.width as u32, rgb.height as u32, rgb.data.clone())
            .unwrap();
        let mut png = std::io::Cursor::new(Vec::new());
        img.write_to(&mut png, image::ImageFormat::Png).unwrap();
        let png = png.into_inner();
        assert!(png.starts_with(b"\x89PNG"), "image {i} is a PNG");
        let from_png = proc.preprocess(&png).unwrap();
        let want = g.f32s("pixel_values", i).len();
        assert_eq!(from_png.pixel_values.len(), want, "image {i}");
        assert_eq!(
            from_png,
            proc.preprocess_rgb(&rgb).unwrap(),
            "image {i}: PNG tiles vs the JPEG's"
        );
    }
}

/// A checkpoint saved by transformers 5's processor has no `preprocessor_config.json`: the
/// image processor's settings are read from `processor_config.json`'s `image_processor`, the
/// same tiles as from the flat file.
#[test]
fn the_processor_settings_nested_in_processor_config_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture_dir(FAMILY);
    std::fs::copy(
        src.join("processor_config.json"),
        dir.path().join("processor_config.json"),
    )
    .unwrap();
    let nested = match Preprocessor::from_dir(dir.path(), &config()).unwrap() {
        Preprocessor::Tiles(t) => t,
        other => panic!("{other:?}"),
    };
    let flat = match Preprocessor::from_dir(&src, &config()).unwrap() {
        Preprocessor::Tiles(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (nested.tile, nested.max_tiles, nested.mean, nested.std),
        (112, 6, flat.mean, flat.std)
    );
    assert_eq!((flat.tile, flat.max_tiles), (112, 6));
    // Neither file: the error names the flat one.
    let empty = tempfile::tempdir().unwrap();
    let err = Preprocessor::from_dir(empty.path(), &config()).unwrap_err();
    assert!(
        err.to_string().contains("preprocessor_config.json"),
        "{err}"
    );
}

/// The `-hf` conversion leaves `InternVLConfig`'s `tie_word_embeddings` at its class default
/// while the checkpoint holds its own `lm_head` (the untied 8B and larger): the head the
/// checkpoint has is used, as transformers 5 does, whatever the config says; and a file
/// without the key is untied (the decoder's default).
#[test]
fn the_checkpoints_own_head_is_used_even_when_the_config_says_tied() {
    let g = Goldens::load(FAMILY);
    let src = fixture_dir(FAMILY);
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["tie_word_embeddings"] = true.into();
    cfg["text_config"]["tie_word_embeddings"] = true.into();
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    let model = VlModel::load(dir.path(), candle_core::DType::F32, &Device::Cpu).unwrap();
    assert!(model.text_spec().tie_word_embeddings);
    let run = run_greedy(
        &model,
        &mut fresh_cache(&model),
        &[internvl_reference_seq(&model, &g, 0)],
        24,
        0,
    );
    assert_eq!(run.tokens[0], g.ids("greedy", 0));
    // No key at either level: untied.
    cfg.as_object_mut().unwrap().remove("tie_word_embeddings");
    cfg["text_config"]
        .as_object_mut()
        .unwrap()
        .remove("tie_word_embeddings");
    let c = ModelConfig::from_json(&cfg.to_string()).unwrap();
    assert!(!c.text().tie_word_embeddings);
}

/// Tiles of another size than the tower's `image_size`, or an `image_seq_length` other than
/// the tower's tokens per tile, are refused when the processor is read, naming the file.
#[test]
fn a_processor_that_does_not_fit_the_tower_is_refused() {
    let src = fixture_dir(FAMILY);
    let copy = |edit: &dyn Fn(&str, serde_json::Value) -> serde_json::Value| {
        let dir = tempfile::tempdir().unwrap();
        for name in ["preprocessor_config.json", "processor_config.json"] {
            let v =
                serde_json::from_str(&std::fs::read_to_string(src.join(name)).unwrap()).unwrap();
            std::fs::write(dir.path().join(name), edit(name, v).to_string()).unwrap();
        }
        dir
    };
    let bigger = copy(&|name, mut v| {
        if name == "preprocessor_config.json" {
            v["size"] = serde_json::json!({"height": 224, "width": 224});
        }
        v
    });
    let err = Preprocessor::from_dir(bigger.path(), &config())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("preprocessor_config.json") && err.contains("vision_config.image_size is 112"),
        "{err}"
    );
    let more = copy(&|name, mut v| {
        if name == "processor_config.json" {
            v["image_seq_length"] = 64.into();
        }
        v
    });
    let err = Preprocessor::from_dir(more.path(), &config())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("processor_config.json") && err.contains("image_seq_length Some(64)"),
        "{err}"
    );
    for (key, value, says) in [
        (
            "size",
            serde_json::json!({"height": 0, "width": 0}),
            "square tile",
        ),
        (
            "image_std",
            serde_json::json!([0.0, 0.0, 0.0]),
            "must be positive",
        ),
    ] {
        let bad = copy(&|name, mut v| {
            if name == "preprocessor_config.json" {
                v[key] = value.clone();
            }
            v
        });
        let err = Preprocessor::from_dir(bad.path(), &config())
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{key}: {err}");
    }
}

/// Tiles take any aspect ratio (transformers' GotOcr2 has no 200:1 rule, unlike Qwen-VL's
/// `smart_resize`): a 2×600 image becomes a grid of tiles and its thumbnail.
#[test]
fn a_very_wide_image_is_tiled() {
    let proc = Preprocessor::from_dir(&fixture_dir(FAMILY), &config()).unwrap();
    let wide = verisample_models::RgbImage {
        width: 600,
        height: 2,
        data: vec![128; 600 * 2 * 3],
    };
    let out = proc.preprocess_rgb(&wide).unwrap();
    // 300:1 → the widest grid of at most 6 tiles, 6×1, plus the thumbnail.
    assert_eq!(out.grid_thw, [7, 8, 8]);
    assert_eq!(proc.image_patches(600, 2, None), Some(7 * 64));
    assert_eq!(proc.pixel_bounds(), None);
}
