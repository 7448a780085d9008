//! GLM-4.1V's own parts on the glm4v fixture.
//!
//! The learned position table resampled to each image's patch grid
//! ([`verisample_models::vision_glm::bicubic_positions`]) against what transformers' `grid_sample`
//! (bicubic, `align_corners=False`, border padding, f32) gives on the glm4v fixture's four real
//! images (`pos_embed_i` of its goldens): within a few f32 roundings. Bit for bit it is not:
//! torch's vectorised CPU kernel (AVX-512 here) rounds differently from its own scalar formula,
//! which ours follows operation for operation (about 40 % of the values differ in the last bits;
//! measured: max |Δ| 6e-8 on values of order 0.1–1).

mod common;

use candle_core::{DType, Device};
use common::*;
use verisample_models::vision_glm::bicubic_positions;
use verisample_models::{AnswerFormat, PromptBuilder};

#[test]
fn resampled_positions_are_torchs_grid_sample_within_rounding() {
    let g = Goldens::load("glm4v");
    let weights = candle_core::safetensors::load(
        fixture_dir("glm4v").join("model.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let table = &weights["model.visual.embeddings.position_embedding.weight"];
    let (n, hidden) = table.dims2().unwrap();
    let side = (n as f64).sqrt() as usize;
    assert_eq!(
        (side * side, hidden),
        (64, 32),
        "the fixture's 8×8 table of 32"
    );
    let values: Vec<f32> = table
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let merge = 2;
    let mut grids = Vec::new();
    for i in 0..g.n() {
        let grid = g.grid(i);
        // Patches in the processor's order: merge blocks row-major, patches row-major inside.
        let mut coords = Vec::new();
        for bh in 0..grid[1] / merge {
            for bw in 0..grid[2] / merge {
                for mh in 0..merge {
                    for mw in 0..merge {
                        coords.push((0, bh * merge + mh, bw * merge + mw));
                    }
                }
            }
        }
        let got: Vec<f32> =
            bicubic_positions(&values, side, hidden, &coords, &[grid], &Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
        let want = g.f32s("pos_embed", i);
        let differing = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let d = max_abs(&got, &want);
        println!(
            "image {i}: grid {grid:?}, max |Δ| {d:.3e}, {differing}/{} values differ in bits",
            want.len()
        );
        // A wrong tap, weight or coordinate is off by 1e-3 or more; rounding by 1e-7 at most.
        assert!(d <= 2e-7, "image {i}: resampled positions max |Δ| {d}");
        grids.push(grid);
    }
    // The grids are not the table's 8×8: every image is resampled, none sampled as is.
    assert!(
        grids.iter().all(|g| g[1] != side || g[2] != side),
        "{grids:?}"
    );
}

/// GLM's answer tags and box markers are added tokens its tokenizer does not mark special:
/// the decode the engine does (special tokens skipped) keeps them, so the verifier finds the
/// box ([`AnswerFormat::GlmBox`]), while the turn's special tokens go.
#[test]
fn decoding_keeps_the_answer_tags_and_box_markers() {
    let dir = fixture_dir("glm4v");
    let prompts = PromptBuilder::from_dir(&dir, 1217, None).unwrap();
    let id = |t: &str| {
        prompts
            .token_id(t)
            .unwrap_or_else(|| panic!("{t} not in the vocabulary"))
    };
    let mut ids = prompts.encode_text("reads").unwrap();
    ids.extend([id("<answer>"), id("<|begin_of_box|>")]);
    ids.extend(prompts.encode_text("3601").unwrap());
    ids.extend([id("<|end_of_box|>"), id("</answer>"), id("<|user|>")]);
    let text = prompts.decode(&ids, true).unwrap();
    assert_eq!(
        text,
        "reads<answer><|begin_of_box|>3601<|end_of_box|></answer>"
    );
    assert_eq!(AnswerFormat::GlmBox.answer_of(&text), "3601");
}

/// A `preprocessor_config.json` that cuts patches of another size than the tower embeds (or
/// merges them by another factor) is refused when the processor is read, naming both fields;
/// it would otherwise fail at the first image with a shape error.
#[test]
fn a_processor_that_does_not_fit_the_tower_is_refused_at_load() {
    let src = fixture_dir("glm4v");
    let config = verisample_models::ModelConfig::from_dir(&src).unwrap();
    assert!(verisample_models::Preprocessor::from_dir(&src, &config).is_ok());
    for (key, value, field) in [
        ("merge_size", 3, "vision_config.spatial_merge_size is 2"),
        ("patch_size", 16, "vision_config.patch_size is 14"),
        (
            "temporal_patch_size",
            1,
            "vision_config.temporal_patch_size is 2",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("preprocessor_config.json");
        let mut pre: serde_json::Value =
            serde_json::from_slice(&std::fs::read(src.join("preprocessor_config.json")).unwrap())
                .unwrap();
        pre[key] = value.into();
        std::fs::write(&path, pre.to_string()).unwrap();
        let err = verisample_models::Preprocessor::from_dir(tmp.path(), &config)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{key} {value}")) && err.contains(field),
            "{err}"
        );
        assert!(err.contains("preprocessor_config.json"), "{err}");
    }
}

/// An `mrope_section` that does not fit the rotated part of a head names what the rotated part
/// comes from (`partial_rotary_factor`), and says when the section is transformers' default.
#[test]
fn a_rotary_section_that_does_not_fit_names_partial_rotary_factor() {
    let text = std::fs::read_to_string(fixture_dir("glm4v").join("config.json")).unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
    cfg["text_config"]["rope_parameters"]["partial_rotary_factor"] = 1.0.into();
    let err = verisample_models::ModelConfig::from_json(&cfg.to_string())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("head_dim 16 · partial_rotary_factor 1") && err.contains("[2, 1, 1]"),
        "{err}"
    );
    cfg["text_config"]["rope_parameters"]
        .as_object_mut()
        .unwrap()
        .remove("mrope_section");
    let err = verisample_models::ModelConfig::from_json(&cfg.to_string())
        .unwrap_err()
        .to_string();
    assert!(err.contains("transformers' default [8, 12, 12]"), "{err}");
}
