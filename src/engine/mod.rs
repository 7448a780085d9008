//! The batch engine: continuous batching with greedy decoding over a paged KV cache.
//!
//! ```text
//! requests ─▶ input pipeline (rayon pool: image decode + preprocessing, chat template,
//!             tokenizer, position ids) ─▶ bounded channel ─▶ waiting queue
//!          ─▶ scheduler step: prefill newly admitted sequences (ragged, no padding; vision
//!             encoder batched over images not seen yet) or decode one token per running
//!             sequence ─▶ greedy sampler on the device (repetition penalty, argmax; only
//!             token ids come back) ─▶ completions, in completion order
//! ```
//!
//! The engine is the only owner of the KV cache ([`verisample_models::batch::KvCache`], one
//! preallocated pool per attention layer, sized from a memory budget) and of the recurrent
//! state of linear-attention layers (one slot per running sequence, `state_slots.rs`; prefix
//! caching is off for such models). Blocks are handed out by the
//! [`block_manager`], with prefix caching of full blocks (system prompts, duplicate image +
//! prompt rows); when the pool runs out the youngest running sequence is preempted and
//! recomputed later, so every request completes. A sequence's tokens do not depend on the
//! batch it ran in or on the input order (given a model whose per-row results do not depend
//! on the batch composition).

pub mod block_manager;
pub mod config;
pub mod generation;
pub mod metrics;
pub mod model;
pub mod request;
pub mod sampler;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
mod state_slots;
mod step;
pub mod think_budget;
pub mod vision_budget;
pub mod vision_cache;
pub mod vl;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use serde::Serialize;
use verisample_models::batch::KvCache;

pub use config::{EngineConfig, KvBudget, VisionMemory};
pub use model::{EngineModel, InputError, InputProcessor, KvLayout, StepImages};
pub use request::{
    Completion, FinishReason, ImageContent, ImageInput, PreparedImage, PreparedInput, Request,
};

use block_manager::BlockManager;
use sampler::Greedy;
use scheduler::{Scheduler, SchedulerConfig};
use state_slots::StateSlots;
use step::Core;

/// Error a completion callback may return; it stops `generate` (anyhow errors convert with `?`
/// or `.into()`).
pub type CallbackError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the engine. Per-request problems are not errors: they come back as completions
/// with `FinishReason::Error`.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A bad setting, or a KV cache budget that cannot be resolved.
    #[error("engine configuration: {0}")]
    Config(String),
    /// The model (or a tensor operation of the engine) failed.
    #[error("model: {0}")]
    Model(#[from] candle_core::Error),
    /// The input pipeline's thread pool could not start.
    #[error("input pipeline thread pool: {0}")]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
    /// The completion callback returned an error.
    #[error("completion callback: {0}")]
    Callback(CallbackError),
    /// The stop flag given to [`Engine::set_stop_flag`] was raised; generation stopped
    /// between two steps and unfinished requests were dropped (a later call starts clean).
    #[error("stopped on request")]
    Stopped,
    /// An internal invariant does not hold (a bug).
    #[error("engine invariant broken: {0}")]
    Internal(String),
}

/// Counters since the engine was built. Times are wall-clock seconds of the model calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EngineStats {
    /// Model steps run.
    pub steps: u64,
    /// Prefill steps.
    pub prefill_steps: u64,
    /// Decode steps.
    pub decode_steps: u64,
    /// Tokens computed in prefill steps (prompt tokens not served by the prefix cache, plus
    /// recomputed tokens of preempted sequences).
    pub prefill_tokens: u64,
    /// Seconds in prefill forwards (vision encoder excluded).
    pub prefill_secs: f64,
    /// Tokens computed in decode steps.
    pub decode_tokens: u64,
    /// Seconds in decode forwards.
    pub decode_secs: f64,
    /// Distinct images run through the vision encoder.
    pub vision_images: u64,
    /// Vision-encoder forwards (batches of images, see [`EngineConfig::max_vision_patches`]).
    pub vision_batches: u64,
    /// Seconds in the vision encoder.
    pub vision_secs: f64,
    /// Seconds the loop waited for the input pipeline with nothing to compute.
    pub input_wait_secs: f64,
    /// Prompt tokens served from the prefix cache.
    pub cached_prompt_tokens: u64,
    /// Preemptions (a sequence preempted twice counts twice).
    pub preemptions: u64,
    /// Completions handed out (all finish reasons).
    pub completed: u64,
    /// Completions with `FinishReason::Error`.
    pub failed: u64,
    /// Generated tokens over all completions.
    pub generated_tokens: u64,
    /// Most sequences running at once (the engine's `max_batch`, as picked when
    /// [`EngineConfig::auto_max_batch`]).
    pub max_batch: usize,
    /// Whether the engine picked `max_batch` from the KV pool ([`config::auto_max_batch`]).
    pub max_batch_auto: bool,
    /// Wall-clock seconds inside [`Engine::generate`] calls.
    pub generate_secs: f64,
    /// Prompt tokens over all completions (prefix-cache hits included).
    pub prompt_tokens: u64,
    /// Completions of requests about an image that did not fail.
    pub image_requests: u64,
}

impl EngineStats {
    /// The counters of what ran since `before` (an earlier copy of these): every count and
    /// time is the difference; `max_batch` and `max_batch_auto` are these.
    pub fn since(&self, before: &EngineStats) -> EngineStats {
        EngineStats {
            steps: self.steps - before.steps,
            prefill_steps: self.prefill_steps - before.prefill_steps,
            decode_steps: self.decode_steps - before.decode_steps,
            prefill_tokens: self.prefill_tokens - before.prefill_tokens,
            prefill_secs: self.prefill_secs - before.prefill_secs,
            decode_tokens: self.decode_tokens - before.decode_tokens,
            decode_secs: self.decode_secs - before.decode_secs,
            vision_images: self.vision_images - before.vision_images,
            vision_batches: self.vision_batches - before.vision_batches,
            vision_secs: self.vision_secs - before.vision_secs,
            input_wait_secs: self.input_wait_secs - before.input_wait_secs,
            cached_prompt_tokens: self.cached_prompt_tokens - before.cached_prompt_tokens,
            preemptions: self.preemptions - before.preemptions,
            completed: self.completed - before.completed,
            failed: self.failed - before.failed,
            generated_tokens: self.generated_tokens - before.generated_tokens,
            max_batch: self.max_batch,
            max_batch_auto: self.max_batch_auto,
            generate_secs: self.generate_secs - before.generate_secs,
            prompt_tokens: self.prompt_tokens - before.prompt_tokens,
            image_requests: self.image_requests - before.image_requests,
        }
    }
}

/// Prepare one request's input, a panic in the processor being that request's error; the
/// request travels on without its encoded image (only its options are needed after this).
fn prepare_one<P: InputProcessor>(
    processor: &P,
    req: Request,
) -> (Request, Result<PreparedInput, InputError>) {
    let r = catch_unwind(AssertUnwindSafe(|| processor.prepare(&req)))
        .unwrap_or_else(|_| Err(InputError::Panicked));
    (Request { image: None, ..req }, r)
}

/// The batch engine over a model `M` and its input processor `P`.
pub struct Engine<M, P> {
    core: Core<M>,
    processor: P,
    pool: rayon::ThreadPool,
    stop: Option<Arc<AtomicBool>>,
}

impl<M: EngineModel, P: InputProcessor> Engine<M, P> {
    /// Build an engine: validate `cfg`, size and allocate the KV cache pool on the model's
    /// device, start the input pipeline's worker threads.
    ///
    /// Errors: [`EngineError::Config`] (bad settings, unresolvable budget),
    /// [`EngineError::Model`] (pool allocation), [`EngineError::ThreadPool`].
    pub fn new(model: M, processor: P, mut cfg: EngineConfig) -> Result<Self, EngineError> {
        cfg.validate()?;
        let layout = model.kv_layout();
        let available = config::device_memory(model.device()).map(|(free, _)| free);
        // Sized with state slots for the cap; an automatic batch below it leaves their memory
        // unused rather than sizing the pool twice.
        let num_blocks = config::pool_blocks_within(&cfg, &layout, model.device(), available)?;
        if cfg.auto_max_batch {
            cfg.max_batch = config::auto_max_batch(
                num_blocks * cfg.block_size,
                cfg.max_new_tokens,
                cfg.max_batch,
            );
        }
        let pool_bytes = num_blocks as u64
            * KvCache::bytes_per_block(
                layout.num_layers,
                cfg.block_size,
                layout.n_kv_heads,
                layout.head_dim,
                layout.dtype,
            ) as u64
            + config::state_bytes(&cfg, &layout);
        let vision_budget = cfg.vision_memory.bytes(available, pool_bytes);
        let vision_batch_patches =
            vision_budget::batch_patches(cfg.max_vision_patches, vision_budget, |p| {
                model.vision_pass_bytes(p)
            });
        let mut cache = KvCache::new(
            layout.num_layers,
            num_blocks,
            cfg.block_size,
            layout.n_kv_heads,
            layout.head_dim,
            layout.dtype,
            model.device(),
        )?;
        // One recurrent-state slot per running sequence; a prefix-cache hit would skip the
        // tokens that build a sequence's state, so prefix caching is off for such models.
        let num_slots = layout.states.map_or(0, |_| cfg.max_batch);
        if let Some(states) = layout.states {
            cache.states = states.allocate(num_slots, model.device())?;
        }
        let prefix_caching = cfg.prefix_caching && layout.states.is_none();
        let scheduler = Scheduler::new(
            SchedulerConfig {
                max_batch: cfg.max_batch,
                max_batch_tokens: cfg.max_batch_tokens,
                watermark_blocks: (num_blocks as f64 * cfg.watermark) as usize,
            },
            BlockManager::new(num_blocks, cfg.block_size, prefix_caching),
        );
        let threads = match cfg.prepare_threads {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("verisample-input-{i}"))
            .build()?;
        tracing::info!(
            num_blocks,
            block_size = cfg.block_size,
            max_batch = cfg.max_batch,
            state_slots = num_slots,
            prefix_caching,
            vision_budget,
            vision_batch_patches,
            "KV cache pool allocated"
        );
        let placeholders = model.placeholder_token_ids();
        let think_tokens = processor.think_tokens().cloned();
        let sampler = Greedy::new(cfg.repetition_penalty.unwrap_or(1.0));
        let stats = EngineStats {
            max_batch: cfg.max_batch,
            max_batch_auto: cfg.auto_max_batch,
            ..EngineStats::default()
        };
        let core = Core {
            sampler,
            model,
            cfg,
            cache,
            scheduler,
            vision: Default::default(),
            stats,
            latency: Default::default(),
            next_arrival: 0,
            placeholders,
            think_tokens,
            vision_budget,
            vision_batch_patches,
            state_slots: StateSlots::new(num_slots),
        };
        Ok(Self {
            core,
            processor,
            pool,
            stop: None,
        })
    }

    /// Check `flag` before every model step of [`Engine::generate`]: once it is `true`,
    /// `generate` returns [`EngineError::Stopped`] without starting another step (a Ctrl-C
    /// then waits for one step, not for a sequence to finish).
    pub fn set_stop_flag(&mut self, flag: Arc<AtomicBool>) {
        self.stop = Some(flag);
    }

    /// Generate greedily for every request, handing each [`Completion`] to `on_done` as soon
    /// as its sequence finishes (completion order, not input order; match them by `id`).
    ///
    /// Requests are pulled lazily: at most `lookahead` of them are being prepared or waiting
    /// for admission at any time. Per-request failures (undecodable image, prompt larger
    /// than the KV cache) are completions with `FinishReason::Error`; the run goes on.
    ///
    /// Errors: [`EngineError::Model`] from the model, [`EngineError::Callback`] when
    /// `on_done` fails (generation stops; unfinished requests are dropped and a later call
    /// starts clean), [`EngineError::Stopped`] when the stop flag is raised (likewise),
    /// [`EngineError::Internal`].
    pub fn generate<I, F>(&mut self, requests: I, mut on_done: F) -> Result<(), EngineError>
    where
        I: IntoIterator<Item = Request>,
        F: FnMut(Completion) -> Result<(), CallbackError>,
    {
        let Engine {
            core,
            processor,
            pool,
            stop,
        } = self;
        let stop = stop.as_deref();
        core.reset();
        let started = Instant::now();
        let processor = &*processor;
        let lookahead = match core.cfg.lookahead {
            0 => 2 * core.cfg.max_batch,
            n => n,
        };
        let mut requests = requests.into_iter();
        let result = pool.in_place_scope(|scope| -> Result<(), EngineError> {
            // (input index, when the engine took it, the request, its prepared input).
            type Prepared = (u64, Instant, Request, Result<PreparedInput, InputError>);
            let (tx, rx) = mpsc::sync_channel::<Prepared>(lookahead);
            let mut emit = |core: &mut Core<M>, c: Completion| {
                core.stats.completed += 1;
                core.stats.failed += u64::from(c.finish_reason == FinishReason::Error);
                core.stats.generated_tokens += c.generated_tokens as u64;
                core.stats.cached_prompt_tokens += c.cached_prompt_tokens as u64;
                core.stats.prompt_tokens += c.prompt_tokens as u64;
                on_done(c).map_err(EngineError::Callback)
            };
            let (mut submitted, mut next_in, mut exhausted) = (0u64, 0u64, false);
            let mut ready: BTreeMap<u64, Prepared> = BTreeMap::new();
            loop {
                // Feed the input pipeline up to the lookahead.
                while !exhausted
                    && (submitted - next_in) as usize + core.scheduler.num_waiting() < lookahead
                {
                    let Some(req) = requests.next() else {
                        exhausted = true;
                        break;
                    };
                    let (idx, taken) = (submitted, Instant::now());
                    submitted += 1;
                    if core.cfg.inline_inputs {
                        let (req, r) = prepare_one(processor, req);
                        ready.insert(idx, (idx, taken, req, r));
                        continue;
                    }
                    let tx = tx.clone();
                    scope.spawn(move |_| {
                        let (req, r) = prepare_one(processor, req);
                        // The receiver is gone only when generate is returning early.
                        let _ = tx.send((idx, taken, req, r));
                    });
                }
                // Collect prepared inputs; block only when there is nothing to compute.
                loop {
                    let must_wait = core.scheduler.num_unfinished() == 0
                        && next_in < submitted
                        && !ready.contains_key(&next_in);
                    let msg = if must_wait {
                        let t0 = Instant::now();
                        let m = rx
                            .recv()
                            .map_err(|_| EngineError::Internal("input pipeline closed".into()))?;
                        core.stats.input_wait_secs += t0.elapsed().as_secs_f64();
                        m
                    } else {
                        match rx.try_recv() {
                            Ok(m) => m,
                            Err(_) => break,
                        }
                    };
                    ready.insert(msg.0, msg);
                }
                // Queue them in input order.
                while let Some((_, taken, req, r)) = ready.remove(&next_in) {
                    next_in += 1;
                    let failed = match r {
                        Ok(p) => core.add(&req, p, taken),
                        Err(e) => Some(Completion::failed(req.id, 0, e.to_string())),
                    };
                    if let Some(c) = failed {
                        emit(core, c)?;
                    }
                }
                if core.scheduler.num_unfinished() == 0 {
                    if exhausted && next_in == submitted {
                        return Ok(());
                    }
                    continue;
                }
                if stop.is_some_and(|f| f.load(Ordering::SeqCst)) {
                    return Err(EngineError::Stopped);
                }
                for c in core.step(processor)? {
                    emit(core, c)?;
                }
            }
        });
        if result.is_err() {
            core.reset();
        }
        core.stats.generate_secs += started.elapsed().as_secs_f64();
        let st = &core.stats;
        tracing::info!(
            completed = st.completed,
            failed = st.failed,
            prefill_tokens = st.prefill_tokens,
            decode_tokens = st.decode_tokens,
            cached_prompt_tokens = st.cached_prompt_tokens,
            preemptions = st.preemptions,
            vision_images = st.vision_images,
            "generate finished (totals since the engine started)"
        );
        result
    }

    /// Whether an image of `width × height` pixels (its header size) can be encoded: the
    /// model's image processor resizes it (its `smart_resize` refuses an aspect ratio over
    /// 200, as transformers' does), and its vision pass fits the vision memory budget
    /// ([`EngineConfig::vision_memory`]) — checked before anything decodes it.
    ///
    /// Errors: the processor's refusal (`absolute aspect ratio must be smaller than 200, …`);
    /// or a message naming the size, the patches once resized, the estimated bytes of its
    /// vision pass ([`EngineModel::vision_pass_bytes`]), the budget, and the largest
    /// `--max-pixels` that would fit ([`vision_budget::refusal`]).
    pub fn check_image(&self, width: u32, height: u32) -> Result<(), String> {
        let Some(pixel_bounds) = self.processor.pixel_bounds() else {
            return Ok(());
        };
        // The processor's own resize, for its refusal only: which shapes it refuses does not
        // depend on the patch factor (1 here) or the pixel bounds.
        let (min_pixels, max_pixels) = pixel_bounds;
        verisample_models::smart_resize(height as usize, width as usize, 1, min_pixels, max_pixels)
            .map_err(|e| format!("the model's image processor refuses this image: {e}"))?;
        let Some(budget) = self.core.vision_budget else {
            return Ok(());
        };
        let patches = |m: Option<usize>| self.processor.image_patches(width, height, m);
        let pass_bytes = |p: usize| self.core.model.vision_pass_bytes(p);
        let cost = vision_budget::ImageCost {
            patches: &patches,
            pass_bytes: &pass_bytes,
            pixel_bounds,
        };
        vision_budget::refusal(width, height, budget, &cost).map_or(Ok(()), Err)
    }

    /// Bytes one vision pass may take (the resolved [`EngineConfig::vision_memory`]; `None`
    /// where free memory cannot be measured).
    pub fn vision_budget(&self) -> Option<u64> {
        self.core.vision_budget
    }

    /// Counters since the engine was built.
    pub fn stats(&self) -> &EngineStats {
        &self.core.stats
    }

    /// Times of the requests completed since the engine was built or
    /// [`Engine::reset_latency`].
    pub fn latency(&self) -> &metrics::RequestLatency {
        &self.core.latency
    }

    /// Forget the request times recorded so far (`bench`: before a measured pass).
    pub fn reset_latency(&mut self) {
        self.core.latency = Default::default();
    }

    /// Empty the prefix cache, so that the next [`Engine::generate`] starts as the first one
    /// did (`bench`: every measured pass alike). Call between `generate` calls only.
    pub fn clear_prefix_cache(&mut self) {
        self.core.scheduler.clear_prefix_cache();
    }

    /// Device memory in use now (total − free, every process), bytes; `None` on the CPU or
    /// where the device does not say.
    pub fn device_memory_used(&self) -> Option<u64> {
        if self.core.model.device().is_cpu() {
            return None;
        }
        config::device_memory(self.core.model.device())
            .map(|(free, total)| total.saturating_sub(free))
    }

    /// Blocks in the KV cache pool.
    pub fn num_blocks(&self) -> usize {
        self.core.scheduler.blocks().num_blocks()
    }

    /// Free blocks of the pool now (plain free + evictable prefix-cache blocks).
    pub fn num_free_blocks(&self) -> usize {
        self.core.scheduler.blocks().num_free()
    }

    /// The engine's settings.
    pub fn config(&self) -> &EngineConfig {
        &self.core.cfg
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.core.model
    }

    /// The input processor.
    pub fn processor(&self) -> &P {
        &self.processor
    }
}
