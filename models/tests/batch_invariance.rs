//! Whole models are batch-invariant on every path: for each family's fixture, loaded on the
//! native, portable and flash (oracle) paths in f32 and bf16, two probe sequences' logits
//! (prefill and three decode steps) are bitwise the same alone, in batches of 7, 16, 64 and 100
//! sequences of other lengths and with the long prompt prefilled in two chunks; and an image's
//! embeddings are bitwise the same encoded alone and after three others
//! ([`verisample_models::probe`]). The portable path is what every GPU run takes, here through
//! the same candle ops on the CPU.

mod common;

use candle_core::DType;
use common::*;
use verisample_models::probe::{differing, forward_invariance, vision_invariance};
use verisample_models::AttentionPath;

fn invariant(family: &str) {
    for path in [
        AttentionPath::Native,
        AttentionPath::Portable,
        AttentionPath::Flash,
    ] {
        for dtype in [DType::F32, DType::BF16] {
            let model = load_model_on(family, dtype, path);
            let forward = forward_invariance(&model).unwrap();
            assert_eq!(forward.len(), 5, "4 batch sizes and a chunking");
            let bad = differing(&forward);
            assert!(
                bad.is_empty(),
                "{family} {} {dtype:?}: {bad:?}",
                path.name()
            );
            let vision = vision_invariance(&model).unwrap();
            let bad = differing(&vision);
            assert!(
                bad.is_empty(),
                "{family} {} {dtype:?} vision: {bad:?}",
                path.name()
            );
        }
    }
}

macro_rules! family_tests {
    ($m:ident, $name:literal) => {
        mod $m {
            #[test]
            fn logits_and_image_embeddings_are_bitwise_batch_invariant_on_every_path() {
                super::invariant($name)
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
