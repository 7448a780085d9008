//! The portable path (candle tensor ops, what runs on CUDA and Metal: attention, the projections
//! in fixed row tiles, for Qwen3.5 also the recurrent kernels) against the native CPU kernels on
//! every fixture model: one ragged
//! batch of all four reference sequences, prefill then 24 greedy decode steps. Prefill logits
//! agree within 1e-5 (f32) and the greedy tokens are identical (and equal transformers').
//! The flash path (on the CPU: the flash-attn oracle, fed by the same argument-building code
//! as on CUDA) gives bitwise the native logits on every fixture.
//! Chunked prefill over a cached past is covered op by op in `kernels/tests/portable.rs`.

mod common;

use candle_core::DType;
use common::*;
use verisample_models::{AttentionPath, VisionConfig, VisionInputs, VlModel};

fn sequences(model: &VlModel, g: &Goldens) -> Vec<SeqInput> {
    if matches!(model.vision_spec(), VisionConfig::InternVit(_)) {
        return (0..g.n())
            .map(|i| internvl_reference_seq(model, g, i))
            .collect();
    }
    (0..g.n())
        .map(|i| SeqInput {
            ids: g.ids("input_ids", i),
            positions: g.positions(i),
            rope_delta: g.rope_delta(i),
            images: model
                .encode_images(&VisionInputs {
                    pixel_values: g.t("pixel_values", i).clone(),
                    grid_thw: vec![g.grid(i)],
                })
                .unwrap(),
        })
        .collect()
}

fn portable_matches_native(family: &str) {
    let g = Goldens::load(family);
    let model = load_model(family);
    assert_eq!(model.attention_path(), AttentionPath::Native, "CPU default");
    let seqs = sequences(&model, &g);
    let native = run_greedy(&model, &mut fresh_cache(&model), &seqs, 24, 5);
    let on_path = |path| {
        let model = load_model_on(family, DType::F32, path);
        assert_eq!(model.attention_path(), path);
        let seqs = sequences(&model, &g);
        run_greedy(&model, &mut fresh_cache(&model), &seqs, 24, 5)
    };
    let flash = on_path(AttentionPath::Flash);
    assert_eq!(
        flash.prefill_logits, native.prefill_logits,
        "{family}: flash prefill"
    );
    assert_eq!(
        flash.decode_logits, native.decode_logits,
        "{family}: flash decode"
    );
    assert_eq!(flash.tokens, native.tokens, "{family}: flash tokens");
    let portable = on_path(AttentionPath::Portable);
    for i in 0..g.n() {
        let d = max_abs(&portable.prefill_logits[i], &native.prefill_logits[i]);
        println!("{family} seq {i}: portable vs native prefill logits max |Δ| {d:.3e}");
        assert!(
            d <= 1e-5,
            "{family} seq {i}: portable vs native max |Δ| {d}"
        );
        assert_eq!(
            portable.tokens[i], native.tokens[i],
            "{family} seq {i}: tokens"
        );
        assert_eq!(
            portable.tokens[i],
            g.ids("greedy", i),
            "{family} seq {i}: tokens vs transformers"
        );
    }
}

macro_rules! family_tests {
    ($m:ident, $name:literal) => {
        mod $m {
            #[test]
            fn portable_path_matches_native_kernels() {
                super::portable_matches_native($name)
            }
        }
    };
}

family_tests!(qwen2_vl, "qwen2_vl");
family_tests!(qwen2_5_vl, "qwen2_5_vl");
family_tests!(qwen3_vl, "qwen3_vl");
family_tests!(qwen3_5, "qwen3_5");
family_tests!(qwen3_vl_moe, "qwen3_vl_moe");
family_tests!(qwen3_5_moe, "qwen3_5_moe");
family_tests!(internvl, "internvl");
family_tests!(glm4v, "glm4v");
