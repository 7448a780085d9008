//! Batch invariance of a whole model, for `verisample doctor` (on the device under test) and the
//! tests (on the CPU): [`forward_invariance`] runs probe sequences through
//! [`VlModel::forward`] alone, inside batches of other sequences and chunked, and compares their
//! logits bitwise; [`vision_invariance`] does the same for an image in the vision tower.
//! Whatever path the model was loaded on ([`VlModel::load_on_path`]), this is the question its
//! users ask: do my tokens depend on what else was in the batch?

use candle_core::{Result, Tensor};
pub use verisample_kernels::probe::{differing, Variation};
use verisample_kernels::{lcg_uniform, max_abs_diff};

use crate::batch::{BatchMeta, KvCache};
use crate::config::VisionConfig;
use crate::model::{StepInput, VlModel};
use crate::processor::VisionInputs;

/// Tokens per cache block of the probes (the engine's default).
const BLOCK: usize = 32;
/// Prompt lengths of the probe sequences: a short one, and one past a 256-position block of
/// the portable attention.
const PROBES: [usize; 2] = [40, 300];
/// Decode steps after the prompt.
const DECODE: usize = 3;

/// `len` token ids in `0..vocab`, none of them the image-pad id (which needs an image).
fn token_ids(seed: u64, len: usize, vocab: usize, image_token: u32) -> Vec<u32> {
    lcg_uniform(seed, len, 0.5)
        .into_iter()
        .map(|u| {
            let id = (((u + 0.5) * vocab as f32) as usize).min(vocab - 1) as u32;
            if id == image_token {
                (id + 1) % vocab as u32
            } else {
                id
            }
        })
        .collect()
}

/// Sequences stepped together over one cache: blocks handed out in descending order as they
/// are needed (tables are scattered), sequence `s` in recurrent-state slot `s`.
struct Batch<'a> {
    model: &'a VlModel,
    cache: KvCache,
    tables: Vec<Vec<u32>>,
    lens: Vec<usize>,
    next_block: u32,
}

impl<'a> Batch<'a> {
    fn new(model: &'a VlModel, seqs: usize, tokens: usize) -> Result<Self> {
        let blocks = tokens.div_ceil(BLOCK) + 2 * seqs + 1;
        Ok(Self {
            model,
            cache: model.new_kv_cache(blocks, BLOCK, seqs)?,
            tables: vec![Vec::new(); seqs],
            lens: vec![0; seqs],
            next_block: blocks as u32,
        })
    }

    /// One step: `work[i] = (sequence, new token ids)`; returns the logits of each entry's
    /// last token (f32, host).
    fn step(&mut self, work: &[(usize, &[u32])]) -> Result<Vec<Vec<f32>>> {
        let (mut ids, mut positions, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        let (mut query_lens, mut context_lens, mut tables, mut logits_indices, mut state_slots) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &(s, new) in work {
            let start = self.lens[s];
            let end = start + new.len();
            while self.tables[s].len() * BLOCK < end {
                self.next_block -= 1;
                self.tables[s].push(self.next_block);
            }
            for p in start..end {
                slots.push(self.tables[s][p / BLOCK] * BLOCK as u32 + (p % BLOCK) as u32);
                positions.push(p as u32);
            }
            ids.extend_from_slice(new);
            logits_indices.push(ids.len() - 1);
            query_lens.push(new.len());
            context_lens.push(end);
            tables.push(self.tables[s].clone());
            state_slots.push(s as u32);
            self.lens[s] = end;
        }
        let n = ids.len();
        let meta = BatchMeta {
            // Text tokens: the same position on the t, h and w rows.
            positions: {
                let rows = self.model.text_spec().position_rows;
                Tensor::from_vec(positions.repeat(rows), (rows, n), &candle_core::Device::Cpu)?
            },
            query_lens,
            context_lens,
            block_tables: tables,
            slot_mapping: slots,
            logits_indices,
            state_slots,
        };
        let input = StepInput {
            input_ids: &ids,
            images: None,
            image_rows: None,
        };
        self.model
            .forward(&input, &meta, &mut self.cache)?
            .to_vec2()
    }
}

/// The probe runs of one model: `run(prompts, probes, chunks)` gives all logits of sequences
/// `0..probes` of `prompts`, prefilled (the first one in `chunks`, then its rest) and decoded
/// together (each sequence's decode tokens seeded by its prompt); `prompt(s, len)` is probe
/// `s`'s prompt.
struct Probes<'a> {
    model: &'a VlModel,
    vocab: usize,
    image: u32,
}

impl Probes<'_> {
    fn prompt(&self, s: usize, len: usize) -> Vec<u32> {
        token_ids(100 + s as u64, len, self.vocab, self.image)
    }

    fn run(&self, prompts: &[Vec<u32>], probes: usize, chunks: &[usize]) -> Result<Vec<f32>> {
        let model = self.model;
        // A sequence's decode tokens follow from its prompt, wherever it sits in the batch.
        let decode = |s: usize| {
            let seed = 200 + 7919 * prompts[s].len() as u64 + u64::from(prompts[s][0]);
            token_ids(seed, DECODE, self.vocab, self.image)
        };
        let tokens: usize = prompts.iter().map(|p| p.len() + DECODE).sum();
        let mut batch = Batch::new(model, prompts.len(), tokens)?;
        let mut logits = vec![Vec::new(); prompts.len()];
        let mut done = 0;
        for &c in chunks {
            let part: Vec<(usize, &[u32])> = vec![(0, &prompts[0][done..done + c])];
            batch.step(&part)?;
            done += c;
        }
        let work: Vec<(usize, &[u32])> = prompts
            .iter()
            .enumerate()
            .map(|(s, p)| (s, &p[if s == 0 { done } else { 0 }..]))
            .collect();
        for (s, l) in batch.step(&work)?.into_iter().enumerate() {
            logits[s].extend(l);
        }
        let next: Vec<Vec<u32>> = (0..prompts.len()).map(decode).collect();
        for t in 0..DECODE {
            let work: Vec<(usize, &[u32])> =
                (0..prompts.len()).map(|s| (s, &next[s][t..=t])).collect();
            for (s, l) in batch.step(&work)?.into_iter().enumerate() {
                logits[s].extend(l);
            }
        }
        Ok(logits[..probes].concat())
    }
}

fn probes(model: &VlModel) -> Probes<'_> {
    Probes {
        model,
        vocab: model.text_spec().vocab_size,
        image: model.image_token_id(),
    }
}

/// The logits of the probe sequences each run alone (prompts of 40 and 300 tokens, then 3
/// decode steps): what [`forward_invariance`] compares batches with, and what `doctor`
/// compares between a device and the CPU.
///
/// Errors: candle errors of the forward.
pub fn probe_logits(model: &VlModel) -> Result<Vec<Vec<f32>>> {
    let p = probes(model);
    PROBES
        .iter()
        .enumerate()
        .map(|(s, &len)| p.run(&[p.prompt(s, len)], 1, &[]))
        .collect()
}

/// Whether the logits of two probe sequences (prompts of 40 and 300 tokens, then 3 decode
/// steps) are bitwise the same computed alone and inside batches of 7, 16, 64 and 100
/// sequences of 1 to 350 tokens (100: a decode step past one batched call of the portable
/// attention), and the long prompt's prefilled in chunks of 100 + 200.
///
/// Errors: candle errors of the forward.
pub fn forward_invariance(model: &VlModel) -> Result<Vec<Variation>> {
    let p = probes(model);
    let alone = probe_logits(model)?;
    let mut variations = Vec::new();
    for n in [7, 16, 64, 100] {
        let prompts: Vec<Vec<u32>> = (0..n)
            .map(|s| p.prompt(s, PROBES.get(s).copied().unwrap_or(1 + (s * 53) % 350)))
            .collect();
        variations.push(Variation {
            what: format!("batch of {n}"),
            max_abs_diff: max_abs_diff(&p.run(&prompts, PROBES.len(), &[])?, &alone.concat()),
        });
    }
    // The long probe first in the batch, its prompt in chunks of 100 and 200, beside one other.
    let prompts = [p.prompt(1, PROBES[1]), p.prompt(7, 90)];
    let chunked = p.run(&prompts, 1, &[100])?;
    variations.push(Variation {
        what: "prefill in chunks 100 + 200".into(),
        max_abs_diff: max_abs_diff(&chunked, &alone[1]),
    });
    Ok(variations)
}

/// The probe image's embeddings ([`probe_grids`]: pseudo-random pixels) encoded alone, f32:
/// what `doctor` compares between a device and the CPU.
///
/// Errors: candle errors of the tower.
pub fn probe_image_embeds(model: &VlModel) -> Result<Vec<f32>> {
    let (probe, _) = probe_grids(model);
    encode(model, &[(1, probe)])
}

/// Whether the vision tower's output for one image ([`probe_grids`]) is bitwise the same
/// encoded alone and encoded in one call after three images of other sizes.
///
/// Errors: candle errors of the tower.
pub fn vision_invariance(model: &VlModel) -> Result<Vec<Variation>> {
    let (probe, [a, b, c]) = probe_grids(model);
    let alone = encode(model, &[(1, probe)])?;
    let together = encode(model, &[(10, a), (11, b), (12, c), (1, probe)])?;
    Ok(vec![Variation {
        what: "image after three others".into(),
        max_abs_diff: max_abs_diff(&together[together.len() - alone.len()..], &alone),
    }])
}

/// The probe image's grid and three others of other sizes: patch grids `[1, 3·merge,
/// 4·merge]` after `[1, 2·merge, 5·merge]`, `[1, 4·merge, 4·merge]`, `[1, merge, 3·merge]`
/// for the Qwen towers; 1 tile after 2, 1 and 3 tiles for InternViT.
fn probe_grids(model: &VlModel) -> ([usize; 3], [[usize; 3]; 3]) {
    match model.vision_spec() {
        VisionConfig::Qwen(s) => {
            let m = s.spatial_merge_size;
            (
                [1, 3 * m, 4 * m],
                [[1, 2 * m, 5 * m], [1, 4 * m, 4 * m], [1, m, 3 * m]],
            )
        }
        VisionConfig::InternVit(s) => {
            let side = s.patches_per_side();
            ([1, side, side], [2, 1, 3].map(|t| [t, side, side]))
        }
    }
}

/// The embeddings (f32, flat) of `images` — `(seed, grid)`, pseudo-random pixels in [-1.5, 1.5)
/// seeded by `seed` — encoded in one call of the vision tower.
fn encode(model: &VlModel, images: &[(u64, [usize; 3])]) -> Result<Vec<f32>> {
    let row = model.vision_spec().patch_dim();
    let parts = images
        .iter()
        .map(|&(seed, grid)| {
            let n = grid.iter().product::<usize>();
            Tensor::from_vec(lcg_uniform(seed, n * row, 1.5), (n, row), model.device())
        })
        .collect::<Result<Vec<_>>>()?;
    model
        .encode_images(&VisionInputs {
            pixel_values: Tensor::cat(&parts, 0)?,
            grid_thw: images.iter().map(|&(_, g)| g).collect(),
        })?
        .embeds
        .to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1()
}
