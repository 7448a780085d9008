//! An arithmetic stand-in for a VLM that exercises everything the engine owns: block
//! tables, slot mapping, prefix sharing, image embedding slicing, position rows (M-RoPE's three
//! by default, or the one row of a 1-D RoPE model: [`MockModel::rows`]).
//!
//! Each computed token writes a "KV" value (a hash of its id, its position ids and, for an
//! image-pad token, its vision embedding) into the slot the engine assigned; the logits of a
//! sequence's last token are peaked at `Σ_i value_i · (i + 1) mod VOCAB` over the cache
//! positions `0..context_len` read back through the block table. A wrong slot, a stale or
//! wrongly shared block, or a misplaced image row changes the tokens. [`reference`] computes
//! the same tokens directly from the prompt, with no cache.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use verisample::engine::{
    EngineModel, FinishReason, ImageInput, InputError, InputProcessor, KvLayout, PreparedImage,
    PreparedInput, Request, StepImages,
};
use verisample_models::batch::{BatchMeta, KvCache};
use verisample_models::{ImageEmbeds, ImageGrid};

pub const VOCAB: usize = 97;
pub const EOS: u32 = 0;
pub const IMAGE_PAD: u32 = 3;
const P: u64 = 1_000_000_007;

fn value(token: u32, pos: &[u32], emb: Option<f32>) -> u64 {
    let e = emb.map_or(0, |e| e as u64 + 1);
    let p: u64 = pos
        .iter()
        .zip([7919, 31, 17])
        .map(|(&p, w)| p as u64 * w)
        .sum();
    (token as u64 * 1_000_003 + p + e * 13) % P
}

fn next_token(values: &[u64]) -> u32 {
    let acc = values
        .iter()
        .enumerate()
        .fold(0u64, |a, (i, v)| (a + v * (i as u64 + 1)) % P);
    (acc % VOCAB as u64) as u32
}

/// Vision embedding of image-pad token `k` of an image with these pixel rows: the sum of its
/// two patch rows.
fn embed_rows(pixels: &[Vec<f32>]) -> Vec<f32> {
    pixels.chunks(2).map(|c| c.iter().flatten().sum()).collect()
}

pub struct MockModel {
    device: Device,
    store: Mutex<Vec<Option<u64>>>,
    /// Images run through `encode_images`, summed over calls.
    pub images_encoded: AtomicUsize,
    /// Largest number of sequences in one step.
    pub max_seqs_in_step: AtomicUsize,
    /// The context reported by `max_context` (`None`: unlimited).
    pub context: Option<usize>,
    /// Position rows it takes (`position_rows`): 3 as M-RoPE, or 1 as 1-D RoPE.
    pub rows: usize,
}

impl Default for MockModel {
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            store: Mutex::default(),
            images_encoded: AtomicUsize::default(),
            max_seqs_in_step: AtomicUsize::default(),
            context: None,
            rows: 3,
        }
    }
}

impl EngineModel for MockModel {
    fn device(&self) -> &Device {
        &self.device
    }

    fn max_context(&self) -> Option<usize> {
        self.context
    }

    fn position_rows(&self) -> usize {
        self.rows
    }

    fn kv_layout(&self) -> KvLayout {
        KvLayout {
            num_layers: 1,
            n_kv_heads: 1,
            head_dim: 1,
            dtype: DType::F32,
            states: None,
        }
    }

    fn encode_images(
        &self,
        pixel_values: &Tensor,
        grids: &[ImageGrid],
    ) -> candle_core::Result<ImageEmbeds> {
        self.images_encoded
            .fetch_add(grids.len(), Ordering::Relaxed);
        let rows = pixel_values.to_vec2::<f32>()?;
        let e = embed_rows(&rows);
        let n = e.len();
        Ok(ImageEmbeds {
            embeds: Tensor::from_vec(e, (n, 1), &self.device)?,
            deepstack: vec![],
        })
    }

    fn placeholder_token_ids(&self) -> Vec<u32> {
        vec![IMAGE_PAD]
    }

    fn forward(
        &self,
        input_ids: &[u32],
        images: Option<&StepImages>,
        meta: &BatchMeta,
        cache: &mut KvCache,
    ) -> candle_core::Result<Tensor> {
        let ids = input_ids;
        let pos = meta.positions.to_vec2::<u32>()?;
        let (emb, rows): (Vec<f32>, &[usize]) = match images {
            Some(e) => (e.embeds.embeds.flatten_all()?.to_vec1()?, &e.rows),
            None => (vec![], &[]),
        };
        let bs = cache.block_size;
        let mut store = self.store.lock().expect("mock store");
        let slots = cache.layers[0].0.dim(0)? * bs;
        if store.len() != slots {
            *store = vec![None; slots];
        }
        if rows.len() != emb.len() || rows.iter().any(|&r| ids.get(r) != Some(&IMAGE_PAD)) {
            return Err(candle_core::Error::Msg(format!(
                "{} image rows for {} embeddings",
                rows.len(),
                emb.len()
            )));
        }
        for (t, &id) in ids.iter().enumerate() {
            let e = rows.iter().position(|&r| r == t).map(|k| emb[k]);
            let p: Vec<u32> = pos.iter().map(|row| row[t]).collect();
            store[meta.slot_mapping[t] as usize] = Some(value(id, &p, e));
        }
        self.max_seqs_in_step
            .fetch_max(meta.query_lens.len(), Ordering::Relaxed);
        let mut logits = Vec::new();
        let mut row_end = 0;
        for (s, (&q, &c)) in meta.query_lens.iter().zip(&meta.context_lens).enumerate() {
            row_end += q;
            if !meta.logits_indices.contains(&(row_end - 1)) {
                continue;
            }
            let values = (0..c)
                .map(|i| {
                    let slot = meta.block_tables[s][i / bs] as usize * bs + i % bs;
                    store[slot].ok_or_else(|| {
                        candle_core::Error::Msg(format!("read of unwritten slot {slot}"))
                    })
                })
                .collect::<candle_core::Result<Vec<u64>>>()?;
            let target = next_token(&values) as f32;
            logits.extend((0..VOCAB).map(|v| -(v as f32 - target).abs()));
        }
        let n = logits.len() / VOCAB;
        Tensor::from_vec(logits, (n, VOCAB), &self.device)
    }
}

/// Byte-level "tokenizer" with a chat-like template and a toy M-RoPE layout for images, or
/// with `rows` 1, consecutive positions (1-D RoPE).
pub struct MockProcessor {
    eos: Vec<u32>,
    /// Position rows it prepares: 3 or 1.
    pub rows: usize,
}

impl Default for MockProcessor {
    fn default() -> Self {
        Self {
            eos: vec![EOS],
            rows: 3,
        }
    }
}

fn text_tokens(s: &str) -> impl Iterator<Item = u32> + '_ {
    s.bytes().map(|b| 10 + b as u32 % 80)
}

impl InputProcessor for MockProcessor {
    fn prepare(&self, req: &Request) -> Result<PreparedInput, InputError> {
        let mut ids = vec![1];
        if let Some(sys) = &req.system {
            ids.extend(text_tokens(sys));
            ids.push(2);
        }
        let mut positions: Vec<[u32; 3]> = (0..ids.len() as u32).map(|p| [p, p, p]).collect();
        let mut images = vec![];
        if let Some(img) = &req.image {
            let bytes = img.encoded().expect("the mock takes encoded images");
            if bytes.starts_with(b"BAD") {
                return Err(InputError::Other("undecodable image".into()));
            }
            let n = 1 + bytes.len() % 7;
            let start = ids.len();
            let p0 = start as u32;
            for k in 0..n as u32 {
                ids.push(IMAGE_PAD);
                positions.push([p0, p0 + k / 2, p0 + k % 2]);
            }
            let rows: Vec<f32> = (0..2 * n * 3)
                .map(|i| bytes[i % bytes.len()] as f32)
                .collect();
            images.push(PreparedImage {
                sha256: img.sha256,
                pixel_values: Tensor::from_vec(rows, (2 * n, 3), &Device::Cpu)?,
                grid: ImageGrid { thw: [1, 2, 2 * n] },
                start,
                num_tokens: n,
            });
        }
        let mut next = positions
            .iter()
            .map(|p| p.iter().max().copied().unwrap_or(0))
            .max()
            .unwrap_or(0)
            + 1;
        for t in text_tokens(&req.text).chain([4]) {
            ids.push(t);
            positions.push([next; 3]);
            next += 1;
        }
        let (positions, next) = match self.rows {
            1 => (vec![(0..ids.len() as u32).collect()], ids.len() as u32),
            _ => (
                (0..3)
                    .map(|r| positions.iter().map(|p| p[r]).collect())
                    .collect(),
                next,
            ),
        };
        Ok(PreparedInput {
            token_ids: ids,
            positions,
            next_position: next,
            images,
            prefilled_think: false,
        })
    }

    fn decode(&self, tokens: &[u32]) -> Result<String, InputError> {
        Ok(tokens
            .iter()
            .filter(|&&t| t != EOS)
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(","))
    }

    fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }
}

/// The tokens the mock generates for `req`, computed directly (no cache, no batching):
/// generated ids including the final EOS (or image placeholder), and why it ended.
pub fn reference(req: &Request, max_new: usize) -> (Vec<u32>, FinishReason) {
    reference_rows(req, max_new, 3)
}

/// [`reference`] for a model of `rows` position rows ([`MockModel::rows`]).
pub fn reference_rows(req: &Request, max_new: usize, rows: usize) -> (Vec<u32>, FinishReason) {
    let p = MockProcessor {
        rows,
        ..MockProcessor::default()
    }
    .prepare(req)
    .expect("reference prepare");
    let mut emb = vec![None; p.token_ids.len()];
    for img in &p.images {
        let rows = img.pixel_values.to_vec2::<f32>().expect("pixels");
        for (k, e) in embed_rows(&rows).into_iter().enumerate() {
            emb[img.start + k] = Some(e);
        }
    }
    let mut values: Vec<u64> = p
        .token_ids
        .iter()
        .enumerate()
        .zip(&emb)
        .map(|((i, &t), &e)| {
            let pos: Vec<u32> = p.positions.iter().map(|row| row[i]).collect();
            value(t, &pos, e)
        })
        .collect();
    let mut out = vec![];
    let mut pos = p.next_position;
    loop {
        let t = next_token(&values);
        out.push(t);
        if t == EOS {
            return (out, FinishReason::Stop);
        }
        if t == IMAGE_PAD {
            return (out, FinishReason::Error);
        }
        if out.len() >= max_new {
            return (out, FinishReason::Length);
        }
        values.push(value(t, &vec![pos; rows], None));
        pos += 1;
    }
}

/// An image whose "pixels" are derived from `seed`.
pub fn image(seed: u8, len: usize) -> ImageInput {
    ImageInput::new(
        (0..len)
            .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
            .collect::<Vec<u8>>(),
    )
}
