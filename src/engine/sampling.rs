//! Seeded sampling at a temperature, beside greedy decoding: transformers' sampling logits
//! warpers, then one draw from a counter-based random stream, per row on the host.
//!
//! - Warpers, in transformers' order (5.24, `generation/logits_process.py`, as
//!   `_get_logits_processor` appends them after the repetition penalty): temperature
//!   (`scores / T` in f32), top-k (keep every score ≥ the k-th largest), top-p (sort ascending,
//!   f32 softmax, cumulative sum accumulated in f64 as torch's CPU `cumsum` does, remove while
//!   `cum ≤ 1 − p`, keep the largest), min-p (remove `prob < min_p · max prob`, keep the
//!   largest). Removed scores become −∞.
//! - Draw: the kept scores' softmax in f64, inverse CDF over token ids in ascending order at
//!   one uniform `u ∈ [0, 1)`.
//! - Stream: `u` is a function of the run's seed, the sample's identity (row position,
//!   question, sample index: [`SampleStream`]) and the token's index in the generation only —
//!   ChaCha20 (`rand_chacha`, a counter-based generator: the key is the SHA-256 of seed and
//!   identity, the word position the token index) — so a sample's tokens do not depend on the
//!   batch it ran in, the threads, or an interruption.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};

/// The sampling settings of a request (transformers' names; `None`: the warper is off).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// `temperature`, > 0.
    pub temperature: f64,
    /// `top_k` (≥ 1).
    pub top_k: Option<usize>,
    /// `top_p` in (0, 1].
    pub top_p: Option<f64>,
    /// `min_p` in [0, 1].
    pub min_p: Option<f64>,
    /// The run's seed (`--seed`).
    pub seed: u64,
}

/// One sample's identity and settings: its random stream is keyed by `params.seed` and `id`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleStream {
    /// The settings.
    pub params: SamplingParams,
    /// The sample's identity: `[row position, (question index << 32) | sample index]`.
    pub id: [u64; 2],
}

impl SampleStream {
    /// The ChaCha20 key of this stream: SHA-256 of a domain tag, the seed and the identity
    /// (little-endian).
    pub fn key(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"verisample/sample/v1");
        h.update(self.params.seed.to_le_bytes());
        h.update(self.id[0].to_le_bytes());
        h.update(self.id[1].to_le_bytes());
        h.finalize().into()
    }
}

/// The uniform in `[0, 1)` of token `index` of the stream keyed by `key`: the 64-bit word at
/// word position `2 · index` of ChaCha20, top 53 bits.
pub fn uniform(key: &[u8; 32], index: u64) -> f64 {
    let mut rng = ChaCha20Rng::from_seed(*key);
    rng.set_word_pos(u128::from(index) * 2);
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Apply the warpers of `p` to `scores` (one row, f32, after the repetition penalty) in
/// transformers' order; removed entries become −∞.
pub fn warp(scores: &mut [f32], p: &SamplingParams) {
    let t = p.temperature as f32;
    for s in scores.iter_mut() {
        *s /= t;
    }
    if let Some(k) = p.top_k {
        top_k(scores, k);
    }
    if let Some(top_p) = p.top_p.filter(|&v| v < 1.0) {
        top_p_filter(scores, top_p);
    }
    if let Some(min_p) = p.min_p.filter(|&v| v > 0.0) {
        min_p_filter(scores, min_p);
    }
}

/// transformers' `TopKLogitsWarper`: keep the scores ≥ the `k`-th largest (ties kept).
fn top_k(scores: &mut [f32], k: usize) {
    let k = k.max(1).min(scores.len());
    if k == scores.len() {
        return;
    }
    let mut sorted: Vec<f32> = scores.to_vec();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let kth = sorted[k - 1];
    for s in scores.iter_mut() {
        if *s < kth {
            *s = f32::NEG_INFINITY;
        }
    }
}

/// Softmax of `scores` in f32 (max subtracted, `exp`, then divided by the sum).
fn softmax_f32(scores: &[f32]) -> Vec<f32> {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = scores.iter().map(|&s| (s - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.iter().map(|&e| e / sum).collect()
}

/// Token ids ordered by score: ascending, ties by id.
fn ascending(scores: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    order
}

/// transformers' `TopPLogitsWarper`.
fn top_p_filter(scores: &mut [f32], top_p: f64) {
    let order = ascending(scores);
    let sorted: Vec<f32> = order.iter().map(|&i| scores[i]).collect();
    let probs = softmax_f32(&sorted);
    let threshold = (1.0 - top_p) as f32;
    let mut cum = 0f64;
    let last = order.len() - 1;
    for (rank, &i) in order.iter().enumerate() {
        cum += f64::from(probs[rank]);
        if (cum as f32) <= threshold && rank != last {
            scores[i] = f32::NEG_INFINITY;
        }
    }
}

/// transformers' `MinPLogitsWarper`.
fn min_p_filter(scores: &mut [f32], min_p: f64) {
    let probs = softmax_f32(scores);
    let top = probs.iter().copied().fold(0f32, f32::max);
    let scaled = min_p as f32 * top;
    let best = ascending(scores).last().copied();
    for (i, s) in scores.iter_mut().enumerate() {
        if probs[i] < scaled && Some(i) != best {
            *s = f32::NEG_INFINITY;
        }
    }
}

/// The token drawn at `u ∈ [0, 1)` from the softmax of `scores` (after [`warp`]): the first id
/// whose cumulative probability (f64, ascending ids) exceeds `u`; `None` when no score is
/// finite or one is NaN.
pub fn draw(scores: &[f32], u: f64) -> Option<u32> {
    if scores.iter().any(|s| s.is_nan()) {
        return None;
    }
    let max = scores
        .iter()
        .copied()
        .filter(|s| s.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return None;
    }
    let weights: Vec<f64> = scores
        .iter()
        .map(|&s| (f64::from(s) - f64::from(max)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let target = u * total;
    let mut cum = 0f64;
    let mut last = None;
    for (i, &w) in weights.iter().enumerate() {
        if w == 0.0 {
            continue;
        }
        cum += w;
        last = Some(i as u32);
        if cum > target {
            return last;
        }
    }
    last
}

/// The sampled token of one row: [`warp`] `scores` by the stream's settings, then [`draw`] at
/// the uniform of token `index` of its stream (`key`: [`SampleStream::key`]).
pub fn sample_row(
    scores: &mut [f32],
    params: &SamplingParams,
    key: &[u8; 32],
    index: u64,
) -> Option<u32> {
    warp(scores, params);
    draw(scores, uniform(key, index))
}

#[cfg(test)]
mod tests;
