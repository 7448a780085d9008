//! Engine settings and KV cache pool sizing from a memory budget.

use candle_core::Device;

use super::model::KvLayout;
use super::EngineError;
use verisample_models::batch::KvCache;

/// How much memory the KV cache pool may take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvBudget {
    /// A fixed size in GiB (2^30 bytes).
    Gib(f64),
    /// A fraction (0, 1] of the memory free once the weights are loaded ([`device_memory`]:
    /// `MemAvailable` on the CPU, the driver's free memory on CUDA). On Metal, give
    /// [`KvBudget::Gib`].
    FreeFraction(f64),
    /// Exactly this many blocks (tests, benchmarks).
    Blocks(usize),
}

/// How much memory one vision-encoder pass may take beyond the weights (its input pixels,
/// activations and attention scratch: [`super::EngineModel::vision_pass_bytes`]). An image
/// whose pass needs more is refused before it is decoded ([`super::Engine::check_image`]), and
/// images of one step are batched only as far as it allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum VisionMemory {
    /// A fixed size in GiB (2^30 bytes).
    Gib(f64),
    /// A fraction (0, 1] of the memory free once the weights are loaded, less the KV cache
    /// pool ([`device_memory`]); nothing is checked where free memory cannot be measured
    /// (Metal).
    FreeFraction(f64),
}

impl VisionMemory {
    /// The budget in bytes, given the device's free memory `available` (measured after the
    /// weights, before the pool) and the pool's `pool_bytes`; `None` when unknown.
    pub fn bytes(self, available: Option<u64>, pool_bytes: u64) -> Option<u64> {
        match self {
            VisionMemory::Gib(g) => Some((g * (1u64 << 30) as f64) as u64),
            VisionMemory::FreeFraction(f) => {
                available.map(|free| (free.saturating_sub(pool_bytes) as f64 * f) as u64)
            }
        }
    }
}

/// Engine settings. `Default` gives the values documented on each field.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Tokens per KV cache block (32: a multiple of 32, as flash-attn's paged kernels need, so
    /// the CPU kernels, the portable path and flash-attn read one cache layout).
    pub block_size: usize,
    /// KV cache pool size (`FreeFraction(0.25)`).
    pub kv_budget: KvBudget,
    /// Most sequences running at once (16); with [`EngineConfig::auto_max_batch`] the cap of
    /// the value the engine picks.
    pub max_batch: usize,
    /// Pick `max_batch` from the KV cache pool once it is sized ([`auto_max_batch`]), at most
    /// `max_batch` (false). What a run on a GPU does without `--max-batch`.
    pub auto_max_batch: bool,
    /// Most new tokens per prefill step (4096); longer prompts are prefilled in chunks.
    pub max_batch_tokens: usize,
    /// Default generation limit per request (512).
    pub max_new_tokens: usize,
    /// Share computed full blocks between sequences with the same prefix (true).
    pub prefix_caching: bool,
    /// Worker threads of the input pipeline (0 = `min(4, available cores)`).
    pub prepare_threads: usize,
    /// Prepared requests buffered ahead of admission (0 = `2 · max_batch`): bounds the memory
    /// of preprocessed images waiting for a slot.
    pub lookahead: usize,
    /// Prepare inputs on the engine thread, before the step that admits them, instead of on
    /// the input pipeline's workers (false). Each step then finds every input up to the
    /// lookahead prepared, so the schedule (which sequences share a step, encoder forwards,
    /// preemptions, reuse of vision embeddings) depends only on the requests and the settings,
    /// not on thread timing; tokens never depend on it. Slower: preparation no longer overlaps
    /// the model's compute. For tests and profiling that count scheduling events.
    pub inline_inputs: bool,
    /// Most images per vision-encoder forward (16).
    pub max_vision_batch: usize,
    /// Most patches per vision-encoder forward (16384, one 1792×1792 image at patch 14):
    /// images of a step are batched up to this token budget, or fewer when
    /// [`EngineConfig::vision_memory`] allows fewer; an image larger than the budget runs alone.
    pub max_vision_patches: usize,
    /// Memory one vision-encoder pass may take (`FreeFraction(0.5)`).
    pub vision_memory: VisionMemory,
    /// Free blocks kept back when admitting while others run, as a fraction of the pool
    /// (0.01, vLLM's `watermark`).
    pub watermark: f64,
    /// Repetition penalty of greedy decoding (transformers' `repetition_penalty`, see
    /// [`super::sampler`]); `None` (the default): 1.0, no penalty. [`super::vl::load_engine`]
    /// sets it from the resolved [`super::generation::GenerationConfig`].
    pub repetition_penalty: Option<f64>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            block_size: 32,
            kv_budget: KvBudget::FreeFraction(0.25),
            max_batch: 16,
            auto_max_batch: false,
            max_batch_tokens: 4096,
            max_new_tokens: 512,
            prefix_caching: true,
            prepare_threads: 0,
            lookahead: 0,
            inline_inputs: false,
            max_vision_batch: 16,
            max_vision_patches: 16384,
            vision_memory: VisionMemory::FreeFraction(0.5),
            watermark: 0.01,
            repetition_penalty: None,
        }
    }
}

impl EngineConfig {
    /// Check the settings before anything is loaded.
    ///
    /// Errors: [`EngineError::Config`] naming the bad field.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: &str| Err(EngineError::Config(m.to_string()));
        if self.block_size == 0 {
            return bad("block_size must be ≥ 1");
        }
        if [
            self.max_batch,
            self.max_batch_tokens,
            self.max_vision_batch,
            self.max_vision_patches,
        ]
        .contains(&0)
        {
            return bad(
                "max_batch, max_batch_tokens, max_vision_batch and max_vision_patches must be ≥ 1",
            );
        }
        match self.vision_memory {
            VisionMemory::Gib(g) if !(g > 0.0 && g.is_finite()) => {
                return bad("vision memory must be > 0 GiB")
            }
            VisionMemory::FreeFraction(f) if !(f > 0.0 && f <= 1.0) => {
                return bad("vision memory fraction must be in (0, 1]")
            }
            _ => {}
        }
        if !(0.0..0.5).contains(&self.watermark) {
            return bad("watermark must be in [0, 0.5)");
        }
        if self
            .repetition_penalty
            .is_some_and(|p| !(p > 0.0 && p.is_finite()))
        {
            return bad("repetition_penalty must be a positive number");
        }
        match self.kv_budget {
            KvBudget::Gib(g) if !(g > 0.0 && g.is_finite()) => bad("kv_cache_gib must be > 0"),
            KvBudget::FreeFraction(f) if !(f > 0.0 && f <= 1.0) => {
                bad("KV cache fraction must be in (0, 1]")
            }
            KvBudget::Blocks(0) => bad("KV cache must have ≥ 1 block"),
            _ => Ok(()),
        }
    }
}

/// Bytes of the recurrent-state slots of `layout`: one slot per running sequence
/// (`cfg.max_batch`), 0 for a model without recurrent layers.
pub fn state_bytes(cfg: &EngineConfig, layout: &KvLayout) -> u64 {
    layout.states.map_or(0, |s| {
        (s.bytes_per_slot() as u64).saturating_mul(cfg.max_batch as u64)
    })
}

/// Most elements one layer's key (or value) pool may hold: 2³² − 1. candle's `index_select`
/// (the portable path's cache gathers) computes element offsets in 32 bits on CUDA, so a larger
/// pool would read wrong rows; a hybrid model with few attention layers on a 141 GB GPU would
/// otherwise reach it.
pub const MAX_POOL_ELEMENTS_PER_LAYER: u64 = u32::MAX as u64;

/// The most blocks of `block_size × n_kv_heads × head_dim` elements one layer's pool may hold
/// within [`MAX_POOL_ELEMENTS_PER_LAYER`].
pub fn max_pool_blocks(block_size: usize, n_kv_heads: usize, head_dim: usize) -> usize {
    let per_block = (block_size * n_kv_heads * head_dim).max(1) as u64;
    usize::try_from(MAX_POOL_ELEMENTS_PER_LAYER / per_block).unwrap_or(usize::MAX)
}

/// Tokens one sequence is expected to hold beside its generation budget when
/// [`auto_max_batch`] sizes the batch: a prompt with one image of about 1 Mpx (Qwen2-VL: ~1,300
/// tokens at 28 × 28 pixels a token) is of this order.
pub const AUTO_PROMPT_TOKENS: usize = 1024;

/// Fewest sequences [`auto_max_batch`] picks (a pool too small for them preempts instead).
pub const AUTO_MIN_BATCH: usize = 16;

/// The batch a pool of `pool_tokens` tokens serves without preempting when every sequence
/// holds [`AUTO_PROMPT_TOKENS`] of prompt and its whole `max_new_tokens` budget, within
/// `[AUTO_MIN_BATCH, cap]` (`cap` below the minimum wins): the role of vLLM's `max_num_seqs`,
/// derived from the device's memory and the model's KV size instead of fixed. The scheduler
/// still admits by free blocks, so shorter sequences never wait on this bound alone.
pub fn auto_max_batch(pool_tokens: usize, max_new_tokens: usize, cap: usize) -> usize {
    (pool_tokens / (max_new_tokens + AUTO_PROMPT_TOKENS))
        .max(AUTO_MIN_BATCH)
        .min(cap)
}

/// Blocks that fit in `budget_bytes` at `bytes_per_block` each (floor).
pub fn blocks_in_budget(budget_bytes: u64, bytes_per_block: usize) -> usize {
    if bytes_per_block == 0 {
        return 0;
    }
    usize::try_from(budget_bytes / bytes_per_block as u64).unwrap_or(usize::MAX)
}

/// `MemAvailable` from a `/proc/meminfo` text, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    proc_kib_field(meminfo, "MemAvailable:")
}

/// `MemTotal` from a `/proc/meminfo` text, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    proc_kib_field(meminfo, "MemTotal:")
}

/// The value of the line starting with `key` (e.g. `MemTotal:`) of a `/proc` text whose values
/// are in kB (`/proc/meminfo`, `/proc/self/status`), in bytes.
pub fn proc_kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Free and total memory of `device` in bytes: `MemAvailable` and `MemTotal` of
/// `/proc/meminfo` on the CPU, the driver's `cuMemGetInfo` on CUDA; `None` where it cannot be
/// measured (Metal, no `/proc`).
pub fn device_memory(device: &Device) -> Option<(u64, u64)> {
    match device {
        Device::Cpu => {
            let text = std::fs::read_to_string("/proc/meminfo").ok()?;
            Some((parse_mem_available(&text)?, parse_mem_total(&text)?))
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            use candle_core::cuda_backend::cudarc::driver::result::mem_get_info;
            d.cuda_stream().context().bind_to_thread().ok()?;
            let (free, total) = mem_get_info().ok()?;
            Some((free as u64, total as u64))
        }
        _ => None,
    }
}

/// Number of pool blocks for `layout` under `cfg.kv_budget` on `device`, given the device's
/// free memory `available` measured after the weights are loaded ([`device_memory`]; `None`:
/// unknown, not checked), so a fraction of free memory is what the weights left. A pool
/// larger than `available` bytes is refused instead of letting the allocation abort the
/// process. A model with recurrent state ([`KvLayout::states`]) has `cfg.max_batch` state
/// slots (one per running sequence, [`state_bytes`]) taken from the budget first. The pool
/// holds at most [`max_pool_blocks`] blocks (a layer's pool below 2³² elements).
///
/// Errors: [`EngineError::Config`] when free memory is needed but unknown, the budget holds
/// no block next to the state slots, or the pool would not fit in `available`.
pub fn pool_blocks_within(
    cfg: &EngineConfig,
    layout: &KvLayout,
    device: &Device,
    available: Option<u64>,
) -> Result<usize, EngineError> {
    let per_block = KvCache::bytes_per_block(
        layout.num_layers,
        cfg.block_size,
        layout.n_kv_heads,
        layout.head_dim,
        layout.dtype,
    );
    let states = state_bytes(cfg, layout);
    let blocks = match cfg.kv_budget {
        KvBudget::Blocks(n) => n,
        KvBudget::Gib(g) => blocks_in_budget(
            ((g * (1u64 << 30) as f64) as u64).saturating_sub(states),
            per_block,
        ),
        KvBudget::FreeFraction(f) => {
            let free = available.ok_or_else(|| {
                EngineError::Config(format!(
                    "cannot measure the free memory of {:?}; give the KV cache size in GiB",
                    device.location()
                ))
            })?;
            blocks_in_budget(((free as f64 * f) as u64).saturating_sub(states), per_block)
        }
    };
    if blocks == 0 {
        return Err(EngineError::Config(format!(
            "the KV cache budget holds no block of {per_block} bytes next to {states} bytes of \
             recurrent state ({} sequences)",
            cfg.max_batch
        )));
    }
    let bytes = (blocks as u128) * (per_block as u128) + u128::from(states);
    if let Some(free) = available {
        if bytes > u128::from(free) {
            let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
            return Err(EngineError::Config(format!(
                "the KV cache pool needs {:.2} GiB ({blocks} blocks of {per_block} bytes) but only \
                 {:.2} GiB is free on {}; lower --kv-cache-gib",
                gib(bytes),
                gib(u128::from(free)),
                if device.is_cpu() { "the CPU (MemAvailable of /proc/meminfo)" } else { "the device" }
            )));
        }
    }
    let cap = max_pool_blocks(cfg.block_size, layout.n_kv_heads, layout.head_dim);
    let blocks = if blocks > cap {
        tracing::info!(
            blocks,
            cap,
            "KV pool capped: one layer's pool stays below 2^32 elements (32-bit gather offsets)"
        );
        cap
    } else {
        blocks
    };
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool_blocks(
        cfg: &EngineConfig,
        layout: &KvLayout,
        device: &Device,
    ) -> Result<usize, EngineError> {
        let available = device_memory(device).map(|(free, _)| free);
        pool_blocks_within(cfg, layout, device, available)
    }

    #[test]
    fn blocks_in_budget_table() {
        for (budget, per, want) in [
            (0, 10, 0),
            (9, 10, 0),
            (10, 10, 1),
            (1 << 30, 1 << 20, 1024),
            (5, 0, 0),
        ] {
            assert_eq!(blocks_in_budget(budget, per), want, "{budget}/{per}");
        }
    }

    #[test]
    fn auto_max_batch_follows_the_pool() {
        // An H200-sized pool: 1.75M tokens at 2048 new tokens each → 570, capped at 256.
        assert_eq!(auto_max_batch(1_750_000, 2048, 256), 256);
        // 200k tokens: 200000 / 3072 = 65.
        assert_eq!(auto_max_batch(200_000, 2048, 256), 65);
        // A tiny pool still runs AUTO_MIN_BATCH (the scheduler preempts as needed) …
        assert_eq!(auto_max_batch(4096, 2048, 256), AUTO_MIN_BATCH);
        // … unless the cap is lower.
        assert_eq!(auto_max_batch(4096, 2048, 8), 8);
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn pool_blocks_from_gib_and_exact_blocks() {
        let layout = KvLayout {
            num_layers: 2,
            n_kv_heads: 2,
            head_dim: 64,
            dtype: candle_core::DType::F32,
            states: None,
        };
        // Per block: 2 (K,V) · 2 layers · 16 tokens · 2 heads · 64 · 4 bytes = 32 KiB.
        let cfg = EngineConfig {
            block_size: 16,
            kv_budget: KvBudget::Gib(1.0 / 1024.0),
            ..Default::default()
        };
        assert_eq!(pool_blocks(&cfg, &layout, &Device::Cpu).unwrap(), 32);
        let cfg = EngineConfig {
            kv_budget: KvBudget::Blocks(7),
            ..Default::default()
        };
        assert_eq!(pool_blocks(&cfg, &layout, &Device::Cpu).unwrap(), 7);
        let cfg = EngineConfig {
            kv_budget: KvBudget::Gib(1e-9),
            ..Default::default()
        };
        assert!(matches!(
            pool_blocks(&cfg, &layout, &Device::Cpu),
            Err(EngineError::Config(_))
        ));
    }

    /// A layer's pool stays below 2³² elements whatever the budget (candle's 32-bit gather
    /// offsets). Catches: a pool sized from memory alone on a large GPU.
    #[test]
    fn pool_is_capped_below_2_pow_32_elements_per_layer() {
        let layout = KvLayout {
            num_layers: 4,
            n_kv_heads: 8,
            head_dim: 128,
            dtype: candle_core::DType::BF16,
            states: None,
        };
        // 32 tokens · 8 heads · 128 = 32768 elements per block: (2³² − 1) / 32768 = 131071.
        assert_eq!(max_pool_blocks(32, 8, 128), 131_071);
        let cfg = EngineConfig {
            kv_budget: KvBudget::Blocks(200_000),
            ..Default::default()
        };
        let blocks = pool_blocks_within(&cfg, &layout, &Device::Cpu, None).unwrap();
        assert_eq!(blocks, 131_071);
        assert!((blocks as u64) * 32 * 8 * 128 < 1u64 << 32);
        let cfg = EngineConfig {
            kv_budget: KvBudget::Blocks(1000),
            ..Default::default()
        };
        assert_eq!(
            pool_blocks_within(&cfg, &layout, &Device::Cpu, None).unwrap(),
            1000
        );
    }

    #[test]
    fn pool_larger_than_available_memory_is_refused_on_cpu() {
        let layout = KvLayout {
            num_layers: 2,
            n_kv_heads: 2,
            head_dim: 64,
            dtype: candle_core::DType::F32,
            states: None,
        };
        let gib = |g: f64| EngineConfig {
            block_size: 16,
            kv_budget: KvBudget::Gib(g),
            ..Default::default()
        };
        let one_gib = 1u64 << 30;
        // 1 GiB of 32 KiB blocks fits in 2 GiB; 100000 GiB does not.
        assert_eq!(
            pool_blocks_within(&gib(1.0), &layout, &Device::Cpu, Some(2 * one_gib)).unwrap(),
            32 * 1024
        );
        match pool_blocks_within(&gib(100_000.0), &layout, &Device::Cpu, Some(2 * one_gib)) {
            Err(EngineError::Config(m)) => {
                assert!(m.contains("100000.00 GiB"), "{m}");
                assert!(
                    m.contains("2.00 GiB is free on the CPU (MemAvailable"),
                    "{m}"
                );
            }
            other => panic!("want a Config error, got {other:?}"),
        }
        // Exactly the available memory still fits; unknown memory is not checked.
        assert_eq!(
            pool_blocks_within(&gib(2.0), &layout, &Device::Cpu, Some(2 * one_gib)).unwrap(),
            64 * 1024
        );
        // Unknown memory: the budget's 100000 · 32768 blocks, capped so that one layer's pool
        // stays below 2³² elements (2048 elements per block).
        assert_eq!(
            pool_blocks_within(&gib(100_000.0), &layout, &Device::Cpu, None).unwrap(),
            ((1u64 << 32) - 1) as usize / 2048
        );
    }

    /// Catches: state slots left out of the budget (32 blocks) or counted once instead of per
    /// sequence (31).
    #[test]
    fn state_slots_come_out_of_the_budget() {
        use verisample_models::{batch::StateLayout, LinearAttentionSpec};
        let spec = LinearAttentionSpec {
            conv_kernel: 4,
            num_key_heads: 2,
            num_value_heads: 4,
            key_head_dim: 16,
            value_head_dim: 8,
        };
        let layout = KvLayout {
            num_layers: 2,
            n_kv_heads: 2,
            head_dim: 64,
            dtype: candle_core::DType::F32,
            states: Some(StateLayout {
                num_layers: 3,
                spec,
            }),
        };
        // A slot: 3 layers · (96 channels · 3 + 4 · 16 · 8) f32 = 9600 bytes; 16 slots take
        // 153600 of 1 MiB, leaving 27 blocks of 32 KiB.
        let cfg = EngineConfig {
            block_size: 16,
            kv_budget: KvBudget::Gib(1.0 / 1024.0),
            max_batch: 16,
            ..Default::default()
        };
        assert_eq!(state_bytes(&cfg, &layout), 153_600);
        assert_eq!(pool_blocks(&cfg, &layout, &Device::Cpu).unwrap(), 27);
        let crowded = EngineConfig {
            max_batch: 110,
            ..cfg
        };
        match pool_blocks(&crowded, &layout, &Device::Cpu) {
            Err(EngineError::Config(m)) => assert!(m.contains("110 sequences"), "{m}"),
            other => panic!("want a Config error, got {other:?}"),
        }
    }

    #[test]
    fn validate_rejects_zero_limits() {
        assert!(EngineConfig::default().validate().is_ok());
        let bad = [
            EngineConfig {
                block_size: 0,
                ..Default::default()
            },
            EngineConfig {
                max_batch: 0,
                ..Default::default()
            },
            EngineConfig {
                kv_budget: KvBudget::FreeFraction(1.5),
                ..Default::default()
            },
            EngineConfig {
                kv_budget: KvBudget::Blocks(0),
                ..Default::default()
            },
            EngineConfig {
                repetition_penalty: Some(0.0),
                ..Default::default()
            },
            EngineConfig {
                repetition_penalty: Some(f64::NAN),
                ..Default::default()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
