//! One engine step: plan (scheduler), encode missing images, build the flattened batch, run
//! the model, sample greedily, and turn finished sequences into completions.

use std::time::Instant;

use candle_core::Tensor;
use verisample_models::batch::{BatchMeta, KvCache};
use verisample_models::ImageEmbeds;

use super::config::EngineConfig;
use super::metrics::RequestLatency;
use super::model::{EngineModel, InputProcessor, StepImages};
use super::request::{Completion, FinishReason, PreparedInput, Request};
use super::sampler::Greedy;
use super::scheduler::{Dropout, Schedule, ScheduledSeq, Scheduler, StepKind};
use super::sequence::{ImageSpan, SeenTokens, Sequence};
use super::state_slots::StateSlots;
use super::think_budget::{ThinkBudget, ThinkTokens};
use super::vision_budget::vision_batches;
use super::vision_cache::VisionCache;
use super::{EngineError, EngineStats};

/// The engine state owned by the generation loop (everything but the input processor).
pub(crate) struct Core<M> {
    pub model: M,
    pub cfg: EngineConfig,
    pub cache: KvCache,
    pub scheduler: Scheduler,
    pub vision: VisionCache,
    pub stats: EngineStats,
    /// Times of the completed requests.
    pub latency: RequestLatency,
    pub next_arrival: u64,
    /// `model.placeholder_token_ids()`, cached.
    pub placeholders: Vec<u32>,
    /// `processor.think_tokens()`, cached.
    pub think_tokens: Option<ThinkTokens>,
    /// The greedy sampler (`cfg.repetition_penalty`).
    pub sampler: Greedy,
    /// Bytes one vision pass may take (`cfg.vision_memory` resolved; `None`: unknown).
    pub vision_budget: Option<u64>,
    /// Patches per vision-encoder forward ([`super::vision_budget::batch_patches`]).
    pub vision_batch_patches: usize,
    /// Recurrent-state slot of each running sequence (models with linear-attention layers).
    pub state_slots: StateSlots,
}

/// The flattened inputs of one step.
struct StepBatch {
    input_ids: Vec<u32>,
    images: Option<StepImages>,
    meta: BatchMeta,
}

/// `[lo, hi)` of the image-pad tokens of `img` inside tokens `start..end`, if any.
fn overlap(img: &ImageSpan, start: usize, end: usize) -> Option<(usize, usize)> {
    let (lo, hi) = (start.max(img.start), end.min(img.end()));
    (lo < hi).then_some((lo, hi))
}

impl<M: EngineModel> Core<M> {
    /// Queue the prepared input `p` of `req` (its id and generation options), taken from the
    /// input at `taken`. Returns a failed completion when the prepared input is inconsistent
    /// (nothing is queued then).
    pub fn add(&mut self, req: &Request, p: PreparedInput, taken: Instant) -> Option<Completion> {
        let id = req.id;
        let n = p.token_ids.len();
        let rows = self.model.position_rows();
        if n == 0 || p.positions.len() != rows || p.positions.iter().any(|r| r.len() != n) {
            return Some(Completion::failed(
                id,
                n,
                format!(
                    "prepared prompt has {n} tokens and position rows of {:?} tokens; the model \
                     takes {rows} rows",
                    p.positions.iter().map(Vec::len).collect::<Vec<_>>()
                ),
            ));
        }
        if let Some(max) = self.model.max_context().filter(|&m| n > m) {
            return Some(Completion::failed(
                id,
                n,
                format!("prompt of {n} tokens exceeds the model's context of {max}"),
            ));
        }
        if let Some(img) = p
            .images
            .iter()
            .find(|i| i.num_tokens == 0 || i.start + i.num_tokens > n)
        {
            return Some(Completion::failed(
                id,
                n,
                format!(
                    "image tokens {}..{} outside the {n}-token prompt",
                    img.start,
                    img.start + img.num_tokens
                ),
            ));
        }
        let think =
            match (req.think_budget, &self.think_tokens) {
                (None, _) => None,
                (Some(budget), Some(t)) => Some(ThinkBudget::new(budget, p.prefilled_think, t)),
                (Some(_), None) => return Some(Completion::failed(
                    id,
                    n,
                    "a thinking budget needs the tokenizer's closing reasoning tag, which this \
                     model's tokenizer lacks",
                )),
            };
        for img in &p.images {
            self.vision.add_user(img);
        }
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.scheduler.add(Sequence {
            arrival,
            id,
            prompt_len: n,
            seen: SeenTokens::of(&p.token_ids),
            tokens: p.token_ids,
            prompt_positions: p.positions,
            next_position: p.next_position,
            images: p
                .images
                .iter()
                .map(|i| ImageSpan {
                    start: i.start,
                    len: i.num_tokens,
                    sha256: i.sha256,
                })
                .collect(),
            max_new_tokens: req.max_new_tokens.unwrap_or(self.cfg.max_new_tokens).max(1),
            stop_token_ids: req.stop_token_ids.clone(),
            block_table: vec![],
            num_computed: 0,
            in_prefill: false,
            hashes: vec![],
            preemptions: 0,
            cached_tokens: 0,
            prefilled_think: p.prefilled_think,
            think,
            sampling: req.sampling.map(|s| (s.params, s.key())),
            taken,
            first_token: None,
        });
        None
    }

    /// Drop every unfinished sequence (after an interrupted `generate`).
    pub fn reset(&mut self) {
        let keys: Vec<u64> = self
            .scheduler
            .running()
            .iter()
            .copied()
            .chain(self.scheduler.waiting())
            .collect();
        for k in keys {
            if let Some(s) = self.scheduler.finish(k) {
                self.release_images(&s);
            }
        }
        self.state_slots.clear();
    }

    fn release_images(&mut self, s: &Sequence) {
        for img in &s.images {
            self.vision.remove_user(&img.sha256);
        }
    }

    /// Run one step. Returns the sequences that finished in it.
    pub fn step<P: InputProcessor>(
        &mut self,
        processor: &P,
    ) -> Result<Vec<Completion>, EngineError> {
        let Some(plan) = self.scheduler.schedule() else {
            return Ok(vec![]);
        };
        let mut done = Vec::new();
        for (s, why) in &plan.dropped {
            self.release_images(s);
            let c = match why {
                Dropout::PromptTooLong { needed, pool } => Completion::exceeds_capacity(
                    s.id,
                    s.prompt_len,
                    format!(
                        "prompt of {} tokens needs {needed} KV cache blocks; the pool has {pool}",
                        s.prompt_len
                    ),
                ),
                // Cut by the pool, not by the request's limit: a larger pool runs it further.
                Dropout::PoolFull => Completion {
                    exceeds_capacity: true,
                    ..self.completion(s, FinishReason::Length, processor)
                },
            };
            done.push(c);
        }
        if plan.seqs.is_empty() {
            return Ok(done);
        }
        self.stats.preemptions += plan.preempted.len() as u64;
        if plan.kind == StepKind::Prefill {
            self.encode_missing_images(&plan.seqs)?;
        }
        let t0 = Instant::now();
        let keys: Vec<u64> = plan.seqs.iter().map(|sc| sc.seq).collect();
        let slots = self.state_slots.assign(self.scheduler.running(), &keys)?;
        let mut batch = self.build_batch(&plan)?;
        batch.meta.state_slots = slots;
        let (model, cache) = (&mut self.model, &mut self.cache);
        let logits = on_compute_pool(|| {
            model.forward(&batch.input_ids, batch.images.as_ref(), &batch.meta, cache)
        })?;
        let tokens = self.sample(&plan, &logits)?;
        let secs = t0.elapsed().as_secs_f64();
        let n_tokens = batch.meta.total_tokens() as u64;
        self.stats.steps += 1;
        match plan.kind {
            StepKind::Prefill => {
                self.stats.prefill_steps += 1;
                self.stats.prefill_tokens += n_tokens;
                self.stats.prefill_secs += secs;
            }
            StepKind::Decode => {
                self.stats.decode_steps += 1;
                self.stats.decode_tokens += n_tokens;
                self.stats.decode_secs += secs;
            }
        }
        if tokens.len() != batch.meta.logits_indices.len() {
            return Err(EngineError::Internal(format!(
                "model returned {} logits rows for {} sampled sequences",
                tokens.len(),
                batch.meta.logits_indices.len()
            )));
        }
        self.scheduler.commit(&plan);
        let sampled: Vec<&ScheduledSeq> = plan.seqs.iter().filter(|s| s.sample).collect();
        for (sc, tok) in sampled.into_iter().zip(tokens) {
            let Some(tok) = tok else {
                if let Some(s) = self.scheduler.finish(sc.seq) {
                    self.release_images(&s);
                    let mut c = self.completion(&s, FinishReason::Error, processor);
                    c.error = Some("logits are all NaN".into());
                    done.push(c);
                }
                continue;
            };
            let tok = self
                .scheduler
                .append_generated(sc.seq, tok, self.think_tokens.as_ref());
            let Some(s) = self.scheduler.seq(sc.seq) else {
                continue;
            };
            let reason =
                if processor.eos_token_ids().contains(&tok) || s.stop_token_ids.contains(&tok) {
                    FinishReason::Stop
                } else if self.placeholders.contains(&tok) {
                    FinishReason::Error
                } else if s.generated().len() >= s.max_new_tokens {
                    FinishReason::Length
                } else {
                    continue;
                };
            if let Some(s) = self.scheduler.finish(sc.seq) {
                self.release_images(&s);
                let mut c = self.completion(&s, reason, processor);
                if reason == FinishReason::Error && c.error.is_none() {
                    c.error = Some(format!("generated the image placeholder token {tok}"));
                }
                done.push(c);
            }
        }
        Ok(done)
    }

    /// The next token of each sampled sequence of `plan` from its `logits` row, penalized over
    /// its own sequence's seen ids: the greedy token, or for a sequence that samples, a draw
    /// from its own stream at its own token index ([`super::sampling::sample_row`]) on the
    /// host. Every row's token depends on its own row only.
    fn sample(&self, plan: &Schedule, logits: &Tensor) -> Result<Vec<Option<u32>>, EngineError> {
        let mut seqs = Vec::new();
        for sc in plan.seqs.iter().filter(|s| s.sample) {
            let s = self.scheduler.seq(sc.seq).ok_or_else(|| {
                EngineError::Internal(format!("sampled sequence {} is gone", sc.seq))
            })?;
            seqs.push(s);
        }
        let seen: Vec<&[u32]> = if self.sampler.penalizes() {
            seqs.iter().map(|s| s.seen.ids()).collect()
        } else {
            Vec::new()
        };
        if seqs.iter().all(|s| s.sampling.is_none()) {
            return Ok(self.sampler.sample(logits, &seen)?);
        }
        let scores = self.sampler.scores(logits, &seen)?;
        let mut tokens = self.sampler.argmax(&scores)?;
        // The sampling rows' scores reach the host in one copy.
        let rows: Vec<u32> = (0..seqs.len() as u32)
            .filter(|&r| seqs[r as usize].sampling.is_some())
            .collect();
        let index = Tensor::new(rows.as_slice(), scores.device())?;
        let host = scores.index_select(&index, 0)?.to_vec2::<f32>()?;
        for (&row, mut row_scores) in rows.iter().zip(host) {
            let s = seqs[row as usize];
            if let Some((params, key)) = &s.sampling {
                let at = s.generated().len() as u64;
                tokens[row as usize] =
                    super::sampling::sample_row(&mut row_scores, params, key, at);
            }
        }
        Ok(tokens)
    }

    /// The completion of the finished sequence `s`, its times recorded and an image request
    /// counted.
    fn completion<P: InputProcessor>(
        &mut self,
        s: &Sequence,
        reason: FinishReason,
        processor: &P,
    ) -> Completion {
        let (text, reason, error) = match processor.decode(s.generated()) {
            Ok(t) => (t, reason, None),
            Err(e) => (
                String::new(),
                FinishReason::Error,
                Some(format!("decoding generated tokens: {e}")),
            ),
        };
        if reason != FinishReason::Error {
            let n = s.generated().len();
            self.latency
                .record(s.taken, s.first_token, Instant::now(), n);
            self.stats.image_requests += u64::from(!s.images.is_empty());
        }
        Completion {
            id: s.id,
            token_ids: s.generated().to_vec(),
            text,
            prompt_tokens: s.prompt_len,
            generated_tokens: s.generated().len(),
            cached_prompt_tokens: s.cached_tokens,
            finish_reason: reason,
            error,
            exceeds_capacity: false,
            prefilled_think: s.prefilled_think,
            think_budget_hit: s.think.as_ref().is_some_and(ThinkBudget::hit),
        }
    }

    /// Run the vision encoder over every image whose tokens are computed in this step and
    /// whose embeddings are not cached yet, in batches of at most `max_vision_batch` images
    /// and `vision_batch_patches` patches ([`vision_batches`]).
    fn encode_missing_images(&mut self, seqs: &[ScheduledSeq]) -> Result<(), EngineError> {
        let mut missing: Vec<([u8; 32], usize)> = Vec::new();
        for sc in seqs {
            let Some(s) = self.scheduler.seq(sc.seq) else {
                continue;
            };
            for img in &s.images {
                if overlap(img, sc.start, sc.end).is_some()
                    && self.vision.embeds(&img.sha256).is_none()
                    && !missing.iter().any(|(h, _)| *h == img.sha256)
                {
                    missing.push((img.sha256, img.len));
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        let device = self.model.device().clone();
        let mut patches = Vec::with_capacity(missing.len());
        for (sha, _) in &missing {
            let (p, _) = self.vision.pending_pixels(sha).ok_or_else(|| {
                EngineError::Internal("image without pixels or embeddings".into())
            })?;
            patches.push(p.dim(0)?);
        }
        let batches = vision_batches(
            &patches,
            self.cfg.max_vision_batch,
            self.vision_batch_patches,
        );
        for chunk in batches.into_iter().map(|r| &missing[r]) {
            let mut pixels = Vec::with_capacity(chunk.len());
            let mut grids = Vec::with_capacity(chunk.len());
            for (sha, _) in chunk {
                let (p, g) = self.vision.pending_pixels(sha).ok_or_else(|| {
                    EngineError::Internal("image without pixels or embeddings".into())
                })?;
                pixels.push(p.to_device(&device)?);
                grids.push(*g);
            }
            let pixels = Tensor::cat(&pixels, 0)?;
            let model = &mut self.model;
            let embeds = on_compute_pool(|| model.encode_images(&pixels, &grids))?;
            let want: usize = chunk.iter().map(|(_, n)| n).sum();
            if embeds.embeds.dim(0)? != want {
                return Err(EngineError::Internal(format!(
                    "vision encoder returned {} rows for {want} image tokens",
                    embeds.embeds.dim(0)?
                )));
            }
            let mut off = 0;
            for (sha, n) in chunk {
                self.vision.set_embeds(sha, embeds.narrow(off, *n)?);
                off += n;
            }
            self.stats.vision_batches += 1;
        }
        self.stats.vision_images += missing.len() as u64;
        self.stats.vision_secs += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// Flatten the planned sequences into one ragged batch.
    fn build_batch(&self, plan: &Schedule) -> Result<StepBatch, EngineError> {
        let bs = self.cache.block_size;
        let total: usize = plan.seqs.iter().map(|s| s.end - s.start).sum();
        let mut ids = Vec::with_capacity(total);
        let mut pos: Vec<Vec<u32>> = (0..self.model.position_rows())
            .map(|_| Vec::with_capacity(total))
            .collect();
        let mut meta = BatchMeta {
            positions: Tensor::zeros(0, candle_core::DType::U32, &candle_core::Device::Cpu)?,
            query_lens: Vec::with_capacity(plan.seqs.len()),
            context_lens: Vec::with_capacity(plan.seqs.len()),
            block_tables: Vec::with_capacity(plan.seqs.len()),
            slot_mapping: Vec::with_capacity(total),
            logits_indices: Vec::new(),
            state_slots: Vec::new(),
        };
        let mut chunks = Vec::new();
        let mut rows = Vec::new();
        for sc in &plan.seqs {
            let row0 = ids.len();
            let s = self.scheduler.seq(sc.seq).ok_or_else(|| {
                EngineError::Internal(format!("scheduled sequence {} is gone", sc.seq))
            })?;
            for i in sc.start..sc.end {
                ids.push(s.tokens[i]);
                for (r, row) in pos.iter_mut().enumerate() {
                    row.push(s.position(r, i));
                }
                meta.slot_mapping
                    .push(s.block_table[i / bs] * bs as u32 + (i % bs) as u32);
            }
            meta.query_lens.push(sc.end - sc.start);
            meta.context_lens.push(sc.end);
            meta.block_tables.push(s.block_table.clone());
            if sc.sample {
                meta.logits_indices.push(ids.len() - 1);
            }
            for img in &s.images {
                if let Some((lo, hi)) = overlap(img, sc.start, sc.end) {
                    let e = self.vision.embeds(&img.sha256).ok_or_else(|| {
                        EngineError::Internal("image embeddings missing at batch time".into())
                    })?;
                    chunks.push(e.narrow(lo - img.start, hi - lo)?);
                    rows.extend((lo..hi).map(|i| row0 + i - sc.start));
                }
            }
        }
        // Host metadata: the model turns the positions into rotary tables on the host and
        // uploads those once per step (no device round trip).
        let flat: Vec<u32> = pos.concat();
        meta.positions = Tensor::from_vec(flat, (pos.len(), total), &candle_core::Device::Cpu)?;
        let images = if chunks.is_empty() {
            None
        } else {
            let parts: Vec<&ImageEmbeds> = chunks.iter().collect();
            Some(StepImages {
                embeds: ImageEmbeds::cat(&parts)?,
                rows,
            })
        };
        Ok(StepBatch {
            input_ids: ids,
            images,
            meta,
        })
    }
}

/// Run `f` (a model forward) on a worker of rayon's global pool, the pool the kernels'
/// parallel loops run on: their nested loops then start from inside the pool (a pool of one
/// thread runs them inline), instead of the engine's thread handing every parallel op of the
/// forward to a worker and sleeping until it is done — hundreds of hand-offs per decode step,
/// each a wake-up that waits for a time slice on a busy machine. One hand-off per forward
/// remains. The arithmetic, and so every output bit, is the same.
fn on_compute_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}
