//! Mixture-of-experts weights in every layout people have them, against the MoE fixtures
//! (`scripts/make_fixtures.py`): the fused `[E, 2·inner, hidden]` / `[E, hidden, inner]`
//! expert stacks transformers 5.24 saves for Qwen3-VL-MoE, the same transposed (the
//! published Qwen3-VL-MoE checkpoints), and per-expert 2-D `gate_proj` / `up_proj` /
//! `down_proj` (published Qwen3.5-MoE and what transformers saves for it), sharded with an
//! index. Each layout rewritten from a fixture gives bitwise the fixture's prefill logits;
//! a missing or mis-shaped expert tensor is an error naming it.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, Tensor};
use common::*;
use verisample_models::{VisionInputs, VlModel};

const EXPERTS: usize = 4;
const INNER: usize = 48;

#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `experts.gate_up_proj` `[E, 2I, H]`, `experts.down_proj` `[E, H, I]`.
    Fused,
    /// The fused stacks transposed: `[E, H, 2I]`, `[E, I, H]`.
    FusedTransposed,
    /// `experts.{e}.{gate,up,down}_proj.weight`.
    PerExpert,
}

/// The fixture's tensors with every layer's experts as per-expert 2-D weights, keyed by the
/// layer's `mlp.experts` prefix: `(gate, up, down)` per expert.
fn split_experts(
    tensors: &mut HashMap<String, Tensor>,
) -> HashMap<String, Vec<(Tensor, Tensor, Tensor)>> {
    let mut out: HashMap<String, Vec<(Tensor, Tensor, Tensor)>> = HashMap::new();
    let fused: Vec<String> = tensors
        .keys()
        .filter(|k| k.ends_with("experts.gate_up_proj"))
        .cloned()
        .collect();
    for k in fused {
        let prefix = k.trim_end_matches(".gate_up_proj").to_string();
        let gu = tensors.remove(&k).unwrap();
        let down = tensors.remove(&format!("{prefix}.down_proj")).unwrap();
        let experts = (0..EXPERTS)
            .map(|e| {
                let g = gu.get(e).unwrap();
                (
                    g.narrow(0, 0, INNER).unwrap().contiguous().unwrap(),
                    g.narrow(0, INNER, INNER).unwrap().contiguous().unwrap(),
                    down.get(e).unwrap().contiguous().unwrap(),
                )
            })
            .collect();
        out.insert(prefix, experts);
    }
    let per: Vec<String> = tensors
        .keys()
        .filter(|k| k.ends_with("experts.0.gate_proj.weight"))
        .cloned()
        .collect();
    for k in per {
        let prefix = k.trim_end_matches(".0.gate_proj.weight").to_string();
        let mut take =
            |e: usize, n: &str| tensors.remove(&format!("{prefix}.{e}.{n}.weight")).unwrap();
        let experts = (0..EXPERTS)
            .map(|e| {
                (
                    take(e, "gate_proj"),
                    take(e, "up_proj"),
                    take(e, "down_proj"),
                )
            })
            .collect();
        out.insert(prefix, experts);
    }
    out
}

/// A copy of `family`'s fixture directory under the temp dir with its expert weights in
/// `layout`, written as two shards and `model.safetensors.index.json`.
fn rewrite(family: &str, layout: Layout) -> PathBuf {
    let src = fixture_dir(family);
    static N: AtomicUsize = AtomicUsize::new(0);
    let dst = std::env::temp_dir().join(format!(
        "verisample-moe-{family}-{layout:?}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dst).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let p = f.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name != "model.safetensors" && name != "goldens.safetensors" {
            std::fs::copy(&p, dst.join(name)).unwrap();
        }
    }
    let mut tensors =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    for (prefix, experts) in split_experts(&mut tensors) {
        match layout {
            Layout::Fused | Layout::FusedTransposed => {
                let gu: Vec<Tensor> = experts
                    .iter()
                    .map(|(g, u, _)| Tensor::cat(&[g, u], 0).unwrap())
                    .collect();
                let down: Vec<Tensor> = experts.iter().map(|(_, _, d)| d.clone()).collect();
                let (mut gu, mut down) = (
                    Tensor::stack(&gu, 0).unwrap(),
                    Tensor::stack(&down, 0).unwrap(),
                );
                if let Layout::FusedTransposed = layout {
                    gu = gu.transpose(1, 2).unwrap().contiguous().unwrap();
                    down = down.transpose(1, 2).unwrap().contiguous().unwrap();
                }
                tensors.insert(format!("{prefix}.gate_up_proj"), gu);
                tensors.insert(format!("{prefix}.down_proj"), down);
            }
            Layout::PerExpert => {
                for (e, (g, u, d)) in experts.into_iter().enumerate() {
                    tensors.insert(format!("{prefix}.{e}.gate_proj.weight"), g);
                    tensors.insert(format!("{prefix}.{e}.up_proj.weight"), u);
                    tensors.insert(format!("{prefix}.{e}.down_proj.weight"), d);
                }
            }
        }
    }
    write_sharded(&dst, tensors);
    dst
}

/// `tensors` as two shards (by name order) with a weight-map index.
fn write_sharded(dir: &Path, tensors: HashMap<String, Tensor>) {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let half = names.len() / 2;
    let mut map = serde_json::Map::new();
    for (i, chunk) in [&names[..half], &names[half..]].iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        let part: HashMap<String, Tensor> = chunk
            .iter()
            .map(|n| ((*n).clone(), tensors[*n].clone()))
            .collect();
        candle_core::safetensors::save(&part, dir.join(&file)).unwrap();
        for n in chunk.iter() {
            map.insert((*n).clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
}

/// Prefill logits of the fixture's first golden sequence.
fn prefill_logits(model: &VlModel, family: &str) -> Vec<f32> {
    let g = Goldens::load(family);
    let seq = SeqInput {
        ids: g.ids("input_ids", 0),
        positions: g.positions(0),
        rope_delta: g.rope_delta(0),
        images: model
            .encode_images(&VisionInputs {
                pixel_values: g.t("pixel_values", 0).clone(),
                grid_thw: vec![g.grid(0)],
            })
            .unwrap(),
    };
    run_greedy(model, &mut fresh_cache(model), &[seq], 1, 0)
        .prefill_logits
        .remove(0)
}

fn every_layout_gives_the_fixtures_logits(family: &str) {
    let want = prefill_logits(&load_model(family), family);
    for layout in [Layout::Fused, Layout::FusedTransposed, Layout::PerExpert] {
        let dir = rewrite(family, layout);
        let model = VlModel::load(&dir, DType::F32, &Device::Cpu).unwrap();
        let got = prefill_logits(&model, family);
        assert_finite(&format!("{family} {layout:?}"), &got);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{family} {layout:?}: logits differ, max |Δ| {}",
            max_abs(&got, &want)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn qwen3_vl_moe_loads_every_expert_layout() {
    every_layout_gives_the_fixtures_logits("qwen3_vl_moe");
}

#[test]
fn qwen3_5_moe_loads_every_expert_layout() {
    every_layout_gives_the_fixtures_logits("qwen3_5_moe");
}

/// A fused expert stack of neither orientation and a missing per-expert tensor are errors
/// naming the tensor. Catches: a shape taken on trust (an `[E, H, 2I]` stack of the wrong
/// `inner` silently split), an error that does not say which tensor.
#[test]
fn bad_expert_tensors_are_named() {
    let dir = rewrite("qwen3_vl_moe", Layout::Fused);
    let name = "model.language_model.layers.2.mlp.experts.down_proj";
    let shard = |dir: &Path, name: &str| {
        let index: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join("model.safetensors.index.json")).unwrap(),
        )
        .unwrap();
        dir.join(index["weight_map"][name].as_str().unwrap())
    };
    let path = shard(&dir, name);
    let mut t = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let bad = t[name]
        .narrow(2, 0, INNER - 1)
        .unwrap()
        .contiguous()
        .unwrap();
    t.insert(name.to_string(), bad);
    candle_core::safetensors::save(&t, &path).unwrap();
    let err = VlModel::load(&dir, DType::F32, &Device::Cpu)
        .err()
        .expect("mis-shaped stack accepted")
        .to_string();
    assert!(err.contains(name) && err.contains("[4, 64, 47]"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = rewrite("qwen3_5_moe", Layout::PerExpert);
    let name = "model.language_model.layers.3.mlp.experts.2.up_proj.weight";
    let path = shard(&dir, name);
    let mut t = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    assert!(t.remove(name).is_some());
    candle_core::safetensors::save(&t, &path).unwrap();
    let err = VlModel::load(&dir, DType::F32, &Device::Cpu)
        .err()
        .expect("missing expert accepted")
        .to_string();
    assert!(err.contains(name), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
