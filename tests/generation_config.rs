//! Greedy decoding honours the checkpoint's `generation_config.json` exactly as
//! transformers' `generate(do_sample=False)` does.
//!
//! Each fixture of tests/fixtures/generation_config (made by
//! `python scripts/make_generation_fixtures.py`) names a checkpoint of this repository and a
//! `generation_config.json` (the published Qwen2-VL / Qwen2.5-VL / Qwen3-VL settings, and two
//! held-out checkpoints with settings of their own), with transformers' greedy tokens for the
//! 48 images of the bundled sample. The test assembles that checkpoint in a temporary folder and
//! requires our engine's tokens to be identical for every image at `--max-batch 1` and `64`;
//! with `--generation-config off` they must equal transformers' tokens without the settings.

mod shared_data;
use shared_data::repo;

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use verisample::dataset::reader::InputReader;
use verisample::engine::generation::GenerationConfig;
use verisample::engine::vl::load_engine;
use verisample::engine::{EngineConfig, EngineStats, ImageInput, KvBudget, Request};

const REGENERATE: &str = "python scripts/make_generation_fixtures.py";

#[derive(Debug, Deserialize)]
struct Meta {
    base: String,
    base_model_sha256: String,
    generation_config: serde_json::Value,
    max_new_tokens: usize,
    n: usize,
    changed_by_settings: usize,
}

#[derive(Debug, Deserialize)]
struct Item {
    file: String,
    prompt_ids_len: usize,
    generated_ids: Vec<u32>,
    plain_ids: Vec<u32>,
}

#[derive(Debug, Deserialize)]
struct Fixture {
    meta: Meta,
    items: Vec<Item>,
}

fn load(case: &str) -> Fixture {
    let path = repo().join(format!("tests/fixtures/generation_config/{case}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `{REGENERATE}`", path.display()));
    let f: Fixture = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(f.meta.n, f.items.len(), "{case}: header n");
    let weights = std::fs::read(repo().join(&f.meta.base).join("model.safetensors"))
        .unwrap_or_else(|e| panic!("{}: {e}", f.meta.base));
    assert_eq!(
        f.meta.base_model_sha256,
        hex::encode(Sha256::digest(&weights)),
        "{case} was made for another {}: run `{REGENERATE}`",
        f.meta.base
    );
    f
}

/// The fixture's checkpoint: the base folder's files and the case's `generation_config.json`.
fn checkpoint(f: &Fixture) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = repo().join(&f.meta.base);
    for entry in std::fs::read_dir(&base).expect("base checkpoint") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let wanted = [".json", ".safetensors", ".jinja", ".txt"]
            .iter()
            .any(|ext| name.ends_with(ext));
        if wanted && name != "generation_config.json" {
            std::fs::copy(&path, dir.path().join(name)).expect("copy");
        }
    }
    std::fs::write(
        dir.path().join("generation_config.json"),
        serde_json::to_string_pretty(&f.meta.generation_config).expect("json"),
    )
    .expect("write generation_config.json");
    dir
}

/// The bundled sample's images by file name, with each row's first question.
fn sample() -> BTreeMap<String, (Vec<u8>, String)> {
    InputReader::open(
        repo()
            .join("assets/sample/data")
            .to_str()
            .expect("utf-8 path"),
    )
    .expect("assets/sample/data")
    .map(|r| {
        let r = r.unwrap_or_else(|e| panic!("{e:?}"));
        let question = r.qa.first().map(|q| q.question.clone()).unwrap_or_default();
        (
            r.image.path.clone().unwrap_or_default(),
            (r.image.bytes.clone().unwrap_or_default(), question),
        )
    })
    .collect()
}

/// An engine setting for `f`: `max_batch` sequences at once, a pool of 4096 blocks.
fn config(f: &Fixture, max_batch: usize) -> EngineConfig {
    EngineConfig {
        kv_budget: KvBudget::Blocks(4096),
        max_batch,
        max_new_tokens: f.meta.max_new_tokens,
        ..Default::default()
    }
}

/// Generated ids and prompt length per item from an engine on `dir` with `cfg`, honouring its
/// `generation_config.json` when `use_file` (`--generation-config`), each item requested
/// `copies` times in a row (every copy must give the same tokens), and the engine's statistics.
fn generate(
    dir: &Path,
    f: &Fixture,
    cfg: EngineConfig,
    use_file: bool,
    copies: usize,
) -> (Vec<(Vec<u32>, usize)>, EngineStats) {
    let generation = GenerationConfig::resolve(dir, use_file, None).expect("generation_config");
    let mut engine = load_engine(
        dir,
        DType::F32,
        (&Device::Cpu, verisample_models::AttentionPath::Native),
        cfg,
        &generation,
        Default::default(),
    )
    .expect("load checkpoint");
    let images = sample();
    let requests: Vec<Request> = f
        .items
        .iter()
        .enumerate()
        .flat_map(|(i, it)| {
            let (bytes, question) = images
                .get(&it.file)
                .unwrap_or_else(|| panic!("{} not in the sample", it.file));
            (0..copies).map(move |k| Request {
                enable_thinking: Some(true),
                id: (i * copies + k) as u64,
                system: None,
                image: Some(ImageInput::new(bytes.clone())),
                text: question.clone(),
                max_new_tokens: None,
                ..Default::default()
            })
        })
        .collect();
    let mut got: Vec<Option<(Vec<u32>, usize)>> = vec![None; f.items.len()];
    engine
        .generate(requests, |c| {
            assert!(c.error.is_none(), "{c:?}");
            let slot = &mut got[c.id as usize / copies];
            let out = (c.token_ids, c.prompt_tokens);
            match slot {
                Some(first) => assert_eq!(*first, out, "copies of item {}", c.id as usize / copies),
                None => *slot = Some(out),
            }
            Ok(())
        })
        .expect("generate");
    let got = got
        .into_iter()
        .map(|g| g.expect("every item completes"))
        .collect();
    (got, engine.stats().clone())
}

/// Items whose tokens differ from `want`, as readable lines.
fn mismatches(
    f: &Fixture,
    got: &[(Vec<u32>, usize)],
    want: impl Fn(&Item) -> &[u32],
) -> Vec<String> {
    f.items
        .iter()
        .zip(got)
        .filter(|(it, (ids, n))| ids.as_slice() != want(it) || *n != it.prompt_ids_len)
        .map(|(it, (ids, n))| {
            let first = ids.iter().zip(want(it)).take_while(|(a, b)| a == b).count();
            format!(
                "{}: prompt {n} vs {}; first difference at token {first}: ours {:?}, transformers {:?}",
                it.file,
                it.prompt_ids_len,
                &ids[first.min(ids.len())..],
                &want(it)[first.min(want(it).len())..]
            )
        })
        .collect()
}

fn check(case: &str) {
    let f = load(case);
    let dir = checkpoint(&f);
    for max_batch in [1, 64] {
        let (got, _) = generate(dir.path(), &f, config(&f, max_batch), true, 1);
        let bad = mismatches(&f, &got, |it| &it.generated_ids);
        assert!(
            bad.is_empty(),
            "{case}, --max-batch {max_batch}: {} of {} images differ from transformers:\n{}",
            bad.len(),
            f.items.len(),
            bad.join("\n")
        );
    }
    let (plain, _) = generate(dir.path(), &f, config(&f, 64), false, 1);
    let bad = mismatches(&f, &plain, |it| &it.plain_ids);
    assert!(
        bad.is_empty(),
        "{case}, --generation-config off: {} images differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
    let changed = f
        .items
        .iter()
        .filter(|it| it.generated_ids != it.plain_ids)
        .count();
    assert_eq!(changed, f.meta.changed_by_settings, "{case}: header count");
    println!(
        "{case}: {} images identical to transformers at --max-batch 1 and 64; the settings change {changed}",
        f.items.len()
    );
}

#[test]
fn qwen2_vl_published_settings_match_transformers() {
    check("qwen2_vl_published");
}

#[test]
fn qwen2_5_vl_published_settings_match_transformers() {
    check("qwen2_5_vl_published");
}

#[test]
fn qwen3_vl_published_settings_match_transformers() {
    check("qwen3_vl_published");
}

#[test]
fn held_out_default_model_with_its_own_settings_matches_transformers() {
    check("default_model_held_out");
}

#[test]
fn held_out_qwen3_vl_with_its_own_settings_matches_transformers() {
    check("qwen3_vl_held_out");
}

#[test]
fn prefix_cache_hits_and_preemption_do_not_change_the_seen_ids() {
    // Every image asked twice in a row: the second copy finds its prompt in the prefix cache
    // (its computed blocks are skipped, yet its prompt ids still count as seen); a pool of 48
    // blocks for 64 sequences preempts and recomputes sequences with generated tokens. Inputs
    // are prepared on the engine thread, so hits and preemptions do not depend on how fast the
    // input threads deliver on a loaded machine.
    let f = load("qwen2_vl_published");
    let dir = checkpoint(&f);
    let cfg = EngineConfig {
        kv_budget: KvBudget::Blocks(48),
        inline_inputs: true,
        ..config(&f, 64)
    };
    let (got, stats) = generate(dir.path(), &f, cfg, true, 2);
    assert!(stats.cached_prompt_tokens > 0, "{stats:?}");
    assert!(stats.preemptions > 0, "{stats:?}");
    let bad = mismatches(&f, &got, |it| &it.generated_ids);
    assert!(
        bad.is_empty(),
        "{} images differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_fixtures_exercise_the_penalty() {
    // A fixture set in which the settings never change a token would not test them.
    for case in [
        "qwen2_vl_published",
        "default_model_held_out",
        "qwen3_vl_held_out",
    ] {
        let f = load(case);
        assert!(
            f.meta.changed_by_settings > 0,
            "{case}: the generation settings change no image's tokens"
        );
    }
}

#[test]
fn an_unsupported_setting_is_refused_by_name() {
    let f = load("qwen2_vl_published");
    let dir = checkpoint(&f);
    std::fs::write(
        dir.path().join("generation_config.json"),
        r#"{"repetition_penalty": 1.05, "no_repeat_ngram_size": 3}"#,
    )
    .expect("write");
    let cfg = EngineConfig {
        kv_budget: KvBudget::Blocks(64),
        ..Default::default()
    };
    let err = match GenerationConfig::resolve(dir.path(), true, None) {
        Ok(_) => panic!("an active no_repeat_ngram_size must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("`no_repeat_ngram_size` = 3"), "{err}");
    // Off reads nothing of the file; the engine takes the resolved value it is given.
    for (use_file, penalty, expect) in [(false, None, 1.0), (false, Some(1.25), 1.25)] {
        let generation = GenerationConfig::resolve(dir.path(), use_file, penalty).expect("off");
        let engine = load_engine(
            dir.path(),
            DType::F32,
            (&Device::Cpu, verisample_models::AttentionPath::Native),
            cfg.clone(),
            &generation,
            Default::default(),
        )
        .expect("load");
        assert_eq!(engine.config().repetition_penalty, Some(expect));
    }
}
