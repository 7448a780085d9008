//! The default model on the 78 ORAND-CAR-A `val` images through the engine three times: the
//! native CPU kernels, the portable attention path (candle tensor ops, what runs on Metal and
//! on CUDA in f32) and the flash path (on the CPU the flash-attn oracle, fed by the argument
//! code that feeds flash-attn on CUDA). Greedy tokens must be identical for every image and
//! equal transformers' (the committed reference
//! `tests/fixtures/default_model/val_reference.jsonl`).

mod shared_data;
use shared_data::{repo, require_shared_data};

use candle_core::{DType, Device};
use serde::Deserialize;
use verisample::engine::generation::GenerationConfig;
use verisample::engine::vl::VlInputs;
use verisample::engine::{Engine, EngineConfig, FinishReason, ImageInput, KvBudget, Request};
use verisample_models::{AttentionPath, Preprocessor, VlModel};

#[derive(Deserialize)]
struct ValRef {
    file: String,
    question: String,
    generated_ids: Vec<u32>,
}

/// Greedy ids per request of the default model with `path`.
fn generate(path: AttentionPath, requests: &[Request]) -> Vec<Vec<u32>> {
    let dir = repo().join("assets/model");
    let model = VlModel::load_on_path(&dir, DType::F32, &Device::Cpu, path).unwrap();
    assert_eq!(model.attention_path(), path);
    let images = Preprocessor::from_dir(&dir, model.config()).unwrap();
    let generation = GenerationConfig::resolve(&dir, true, None).unwrap();
    let inputs = VlInputs::from_dir(&dir, &model, images, &generation).unwrap();
    let cfg = EngineConfig {
        kv_budget: KvBudget::Blocks(1024),
        max_batch: 16,
        max_new_tokens: 64,
        repetition_penalty: Some(generation.repetition_penalty),
        ..Default::default()
    };
    let mut out = vec![Vec::new(); requests.len()];
    Engine::new(model, inputs, cfg)
        .unwrap()
        .generate(requests.to_vec(), |c| {
            assert_ne!(c.finish_reason, FinishReason::Error, "{:?}", c.error);
            out[c.id as usize] = c.token_ids;
            Ok(())
        })
        .unwrap();
    out
}

#[test]
fn val_images_portable_and_flash_paths_match_native_kernels_and_transformers() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let text =
        std::fs::read_to_string(repo().join("tests/fixtures/default_model/val_reference.jsonl"))
            .unwrap();
    // Line 1 is the header; one line per image after it.
    let refs: Vec<ValRef> = text
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(refs.len(), 78);
    let requests: Vec<Request> = refs
        .iter()
        .enumerate()
        .map(|(i, r)| Request {
            enable_thinking: Some(true),
            id: i as u64,
            system: None,
            image: Some(ImageInput::new(
                std::fs::read(data.join("orand-car-a").join(&r.file)).unwrap(),
            )),
            text: r.question.clone(),
            max_new_tokens: None,
            ..Default::default()
        })
        .collect();
    let native = generate(AttentionPath::Native, &requests);
    let portable = generate(AttentionPath::Portable, &requests);
    let flash = generate(AttentionPath::Flash, &requests);
    let mut same_as_reference = 0;
    for (i, r) in refs.iter().enumerate() {
        assert_eq!(
            portable[i], native[i],
            "{}: portable vs native tokens",
            r.file
        );
        assert_eq!(flash[i], native[i], "{}: flash vs native tokens", r.file);
        same_as_reference += usize::from(portable[i] == r.generated_ids);
    }
    println!(
        "portable and flash paths: 78/78 token-identical to native; {same_as_reference}/78 to transformers"
    );
    assert_eq!(
        same_as_reference, 78,
        "portable path vs transformers' tokens"
    );
}
