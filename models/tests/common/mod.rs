//! Shared helpers of the model parity tests: fixture paths, goldens, a tiny block allocator
//! building `BatchMeta`, and a greedy loop over `VlModel::forward`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use verisample_models::{
    decode_position, BatchMeta, ImageEmbeds, KvCache, StepInput, VisionInputs, VlModel,
};

/// `models/tests/fixtures/<family>`.
pub fn fixture_dir(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(family)
}

/// The shared data directory (`VERISAMPLE_SHARED_DATA`, else `<repo>/../../shared/data`, else
/// `<repo>/../shared/data`), or `None` when absent.
pub fn shared_data() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("VERISAMPLE_SHARED_DATA") {
        let p = PathBuf::from(p);
        return p.is_dir().then_some(p);
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    [repo.join("../../shared/data"), repo.join("../shared/data")]
        .into_iter()
        .find(|p| p.is_dir())
}

/// The skip helpers of the root crate's tests (`skip` fails under CI and is counted by
/// `.ci/run`); its own data lookup is not used here (this crate sits one level deeper).
#[path = "../../../tests/shared_data/mod.rs"]
mod root_shared_data;
pub use root_shared_data::skip;

/// [`shared_data`], or `None` after [`skip`] (a panic under CI). Catches: a CI run without
/// `../shared/data` passing by skipping the preprocessing parity.
pub fn require_shared_data() -> Option<PathBuf> {
    let found = shared_data();
    if found.is_none() {
        skip("no ../shared/data");
    }
    found
}

/// Golden tensors of a family (`goldens.safetensors`) and its metadata (`goldens.json`).
pub struct Goldens {
    pub tensors: HashMap<String, Tensor>,
    pub meta: serde_json::Value,
}

impl Goldens {
    pub fn load(family: &str) -> Self {
        let dir = fixture_dir(family);
        let tensors =
            candle_core::safetensors::load(dir.join("goldens.safetensors"), &Device::Cpu).unwrap();
        let meta =
            serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap())
                .unwrap();
        Self { tensors, meta }
    }
    pub fn n(&self) -> usize {
        self.meta["images"].as_array().unwrap().len()
    }
    pub fn t(&self, name: &str, i: usize) -> &Tensor {
        &self.tensors[&format!("{name}_{i}")]
    }
    pub fn ids(&self, name: &str, i: usize) -> Vec<u32> {
        self.t(name, i)
            .to_vec1::<i64>()
            .unwrap()
            .into_iter()
            .map(|v| v as u32)
            .collect()
    }
    pub fn f32s(&self, name: &str, i: usize) -> Vec<f32> {
        self.t(name, i)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    }
    pub fn grid(&self, i: usize) -> [usize; 3] {
        let g = self.t("grid_thw", i).to_vec2::<i64>().unwrap();
        [g[0][0] as usize, g[0][1] as usize, g[0][2] as usize]
    }
    pub fn positions(&self, i: usize) -> [Vec<u32>; 3] {
        let p = self.t("position_ids", i).to_vec2::<i64>().unwrap();
        let row = |r: usize| p[r].iter().map(|&v| v as u32).collect();
        [row(0), row(1), row(2)]
    }
    pub fn rope_delta(&self, i: usize) -> i64 {
        self.t("rope_delta", i).to_vec1::<i64>().unwrap()[0]
    }
}

/// One sequence to run: prompt ids, M-RoPE positions, delta, and its image embeddings.
pub struct SeqInput {
    pub ids: Vec<u32>,
    pub positions: [Vec<u32>; 3],
    pub rope_delta: i64,
    pub images: ImageEmbeds,
}

/// Output of [`run_greedy`]: per sequence the prefill logits (last row), the logits of each
/// decode step, and the greedy tokens.
pub struct Run {
    pub prefill_logits: Vec<Vec<f32>>,
    pub decode_logits: Vec<Vec<Vec<f32>>>,
    pub tokens: Vec<Vec<u32>>,
}

/// The engine's default block size (a multiple of 32, as the flash path needs).
pub const BLOCK_SIZE: usize = 32;

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Prefills all `seqs` as one ragged batch (their blocks starting at `first_block`, taken in a
/// scattered order; sequence `s` in recurrent-state slot `s`), then decodes `steps` greedy
/// tokens for all of them together.
pub fn run_greedy(
    model: &VlModel,
    cache: &mut KvCache,
    seqs: &[SeqInput],
    steps: usize,
    first_block: usize,
) -> Run {
    let dev = model.device().clone();
    // Block tables: interleave blocks across sequences so tables are not contiguous.
    let need: Vec<usize> = seqs
        .iter()
        .map(|s| (s.ids.len() + steps).div_ceil(BLOCK_SIZE))
        .collect();
    let mut tables: Vec<Vec<u32>> = vec![Vec::new(); seqs.len()];
    let mut next = first_block as u32;
    for round in 0..need.iter().copied().max().unwrap_or(0) {
        for (s, &n) in need.iter().enumerate().rev() {
            if round < n {
                tables[s].push(next);
                next += 1;
            }
        }
    }
    let slot = |s: usize, p: usize| {
        tables[s][p / BLOCK_SIZE] * BLOCK_SIZE as u32 + (p % BLOCK_SIZE) as u32
    };
    // Prefill.
    let ids: Vec<u32> = seqs.iter().flat_map(|s| s.ids.iter().copied()).collect();
    let mut pos: [Vec<u32>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for s in seqs {
        for (dst, src) in pos.iter_mut().zip(&s.positions) {
            dst.extend(src);
        }
    }
    let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
    let mut logits_indices = Vec::new();
    let mut acc = 0;
    for &l in &lens {
        acc += l;
        logits_indices.push(acc - 1);
    }
    // A plain-RoPE decoder reads the first row only.
    let rows = model.text_spec().position_rows;
    let flat: Vec<u32> = pos[..rows].concat();
    let meta = BatchMeta {
        positions: Tensor::from_vec(flat, (rows, ids.len()), &dev).unwrap(),
        query_lens: lens.clone(),
        context_lens: lens.clone(),
        block_tables: tables.clone(),
        slot_mapping: seqs
            .iter()
            .enumerate()
            .flat_map(|(s, q)| (0..q.ids.len()).map(move |p| (s, p)))
            .map(|(s, p)| slot(s, p))
            .collect(),
        logits_indices,
        state_slots: (0..seqs.len() as u32).collect(),
    };
    let parts: Vec<&ImageEmbeds> = seqs.iter().map(|s| &s.images).collect();
    let images = ImageEmbeds::cat(&parts).unwrap();
    let logits = model
        .forward(
            &StepInput {
                input_ids: &ids,
                images: Some(&images),
                image_rows: None,
            },
            &meta,
            cache,
        )
        .unwrap();
    let prefill_logits: Vec<Vec<f32>> = logits.to_vec2().unwrap();
    let mut tokens: Vec<Vec<u32>> = prefill_logits.iter().map(|l| vec![argmax(l)]).collect();
    let mut decode_logits: Vec<Vec<Vec<f32>>> = vec![Vec::new(); seqs.len()];
    // Decode.
    for step in 1..steps {
        let ids: Vec<u32> = tokens.iter().map(|t| t[step - 1]).collect();
        let idx: Vec<usize> = lens.iter().map(|&l| l + step - 1).collect();
        let p: Vec<u32> = seqs
            .iter()
            .zip(&idx)
            .map(|(s, &i)| decode_position(i, s.rope_delta))
            .collect();
        let flat: Vec<u32> = vec![p; rows].concat();
        let meta = BatchMeta {
            positions: Tensor::from_vec(flat, (rows, seqs.len()), &dev).unwrap(),
            query_lens: vec![1; seqs.len()],
            context_lens: idx.iter().map(|i| i + 1).collect(),
            block_tables: tables.clone(),
            slot_mapping: idx.iter().enumerate().map(|(s, &i)| slot(s, i)).collect(),
            logits_indices: (0..seqs.len()).collect(),
            state_slots: (0..seqs.len() as u32).collect(),
        };
        let logits: Vec<Vec<f32>> = model
            .forward(
                &StepInput {
                    input_ids: &ids,
                    images: None,
                    image_rows: None,
                },
                &meta,
                cache,
            )
            .unwrap()
            .to_vec2()
            .unwrap();
        for ((t, l), all) in tokens.iter_mut().zip(logits).zip(&mut decode_logits) {
            t.push(argmax(&l));
            all.push(l);
        }
    }
    Run {
        prefill_logits,
        decode_logits,
        tokens,
    }
}

/// State slots of a fresh cache: one per sequence of the largest batch of the tests (64).
pub const STATE_SLOTS: usize = 64;

/// A fresh f32 CPU cache big enough for the fixtures.
pub fn fresh_cache(model: &VlModel) -> KvCache {
    model.new_kv_cache(64, BLOCK_SIZE, STATE_SLOTS).unwrap()
}

pub fn load_model(family: &str) -> VlModel {
    VlModel::load(&fixture_dir(family), DType::F32, &Device::Cpu).unwrap()
}

/// The fixture of `family` on the CPU in `dtype` with attention (and projections) on `path`.
pub fn load_model_on(
    family: &str,
    dtype: DType,
    path: verisample_models::AttentionPath,
) -> VlModel {
    VlModel::load_on_path(&fixture_dir(family), dtype, &Device::Cpu, path).unwrap()
}

/// Panics unless every value is finite: `f32::max` drops NaN, so a max-abs fold over NaN
/// output would report 0 and pass any tolerance. Catches: NaN or infinite logits.
pub fn assert_finite(what: &str, v: &[f32]) {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        panic!("{what}: value {i} of {} is {}", v.len(), v[i]);
    }
}

/// Largest |a − b| ([`verisample_kernels::max_abs_diff`], infinite on a NaN), after naming the
/// first non-finite value of either side.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    assert_finite("got", a);
    assert_finite("want", b);
    verisample_kernels::max_abs_diff(a, b)
}

/// transformers' `pixel_values` `[tiles, C, S, S]` in our layout `[tiles · (S/P)², C·P·P]`
/// (each tile's patches row-major, a patch `[C, P, P]`).
fn patchified(pv: &Tensor, patch: usize) -> Tensor {
    let (tiles, c, s, _) = pv.dims4().unwrap();
    let side = s / patch;
    pv.reshape(vec![tiles, c, side, patch, side, patch])
        .unwrap()
        .permute(vec![0, 2, 4, 1, 3, 5])
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape((tiles * side * side, c * patch * patch))
        .unwrap()
}

/// InternVL sequence `i` of a fixture fed transformers' pixel values and prompt (plain
/// positions, the same on every row).
pub fn internvl_reference_seq(model: &VlModel, g: &Goldens, i: usize) -> SeqInput {
    let VisionInputs { pixel_values, .. } = internvl_pixels(model, g, i);
    let tiles = g.t("pixel_values", i).dim(0).unwrap();
    let side = pixel_values.dim(0).unwrap() / tiles;
    let side = (side as f64).sqrt() as usize;
    let images = model
        .encode_images(&VisionInputs {
            pixel_values,
            grid_thw: vec![[tiles, side, side]],
        })
        .unwrap();
    let ids = g.ids("input_ids", i);
    let pos: Vec<u32> = (0..ids.len() as u32).collect();
    SeqInput {
        positions: [pos.clone(), pos.clone(), pos],
        ids,
        rope_delta: 0,
        images,
    }
}

/// transformers' pixel values of InternVL sequence `i`, in our patch-row layout.
pub fn internvl_pixels(model: &VlModel, g: &Goldens, i: usize) -> VisionInputs {
    let patch = match model.vision_spec() {
        verisample_models::VisionConfig::InternVit(s) => s.patch_size,
        other => panic!("not InternViT: {other:?}"),
    };
    VisionInputs {
        pixel_values: patchified(g.t("pixel_values", i), patch),
        grid_thw: Vec::new(),
    }
}
