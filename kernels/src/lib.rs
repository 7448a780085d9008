//! Hot kernels for verisample on candle tensors: the paged KV cache write
//! ([`reshape_and_cache`]), ragged causal attention over that cache ([`paged_attention`]),
//! the vision towers' attention within images or windows ([`segment_attention`], blockwise
//! with an online softmax: memory linear in the patches), and the CPU linear layer with its
//! weights packed once at load and a batch-invariant reduction order ([`PackedLinear`]).
//!
//! Cache layout (vLLM's, flattened): per layer a key and a value pool, each
//! `[num_blocks, block_size, n_kv_heads, head_dim]`. Token `p` of a sequence lives in slot
//! `block_table[p / block_size] * block_size + p % block_size`.
//!
//! Causality (the rule of `verisample_models::batch`): query `j` of a sequence with `q` new
//! tokens and context length `c` sits at cache position `c - q + j` and attends to cache
//! positions `0..=c - q + j`.
//!
//! The linear-attention (Gated DeltaNet) layers' kernels over per-sequence state slots,
//! updated in place: [`causal_conv1d_update`] and [`gated_delta_rule_recurrent`] (CPU).
//!
//! Three implementations behind one step interface ([`PagedStep`]):
//! - **native** (CPU only): plain Rust with rayon, f32/f16/bf16 storage, f32 accumulation
//!   ([`reshape_and_cache`], [`paged_attention`]; any non-CPU tensor gives
//!   [`KernelError::UnsupportedDevice`]);
//! - **portable** (every candle device): the same ops made of candle tensor ops
//!   ([`PortableStep`], [`segment_attention_portable`]); what runs on Metal, on CUDA in f32,
//!   and on CUDA in a build without the `flash-attn` feature;
//! - **flash**: FlashAttention-2 through `candle-flash-attn` on CUDA (bf16/f16, feature
//!   `flash-attn`), its CPU oracle on the CPU ([`flash`]). Not yet executed on a GPU: the
//!   argument-building code is tested against the oracle on the CPU, and `verisample doctor`
//!   compares the three paths on the device before anything else runs.

mod cache;
pub mod flash;
mod linear;
mod paged;
mod portable;
pub mod probe;
mod recurrent;
mod recurrent_portable;
mod segment;

pub use cache::reshape_and_cache;

/// `n` pseudo-random f32 values, uniform in `[-half_width, half_width)`, from a 64-bit linear
/// congruential generator (Knuth's MMIX constants) seeded with `seed`: reproducible inputs for
/// the kernel tests and the device self-check (`verisample doctor`), identical on every
/// platform.
pub fn lcg_uniform(seed: u64, n: usize, half_width: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 * half_width - half_width
        })
        .collect()
}
pub use flash::oracle::paged_attention_reference;
/// Largest `|a[i] - b[i]|`, NaN-aware: `+∞` when the lengths differ or any value of either
/// side is not finite, so a NaN or an infinity fails every bound (a plain
/// `fold(0.0, f32::max)` drops NaN and reports 0). The one comparison of the kernel, model and
/// engine tests and of `verisample doctor`.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() || !a.iter().chain(b).all(|x| x.is_finite()) {
        return f32::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub use linear::{
    PackedLinear, TiledLinear, DEPTH_BLOCK, LINEAR_TILE_ROWS, PANEL_COLS, ROW_BLOCK, TILE_ROWS,
};
pub use paged::{paged_attention, PagedAttentionParams};
pub use portable::{
    portable_chunk_rows, segment_attention_portable, CacheWrite, PortableStep, PORTABLE_KV_BLOCK,
    PORTABLE_QUERY_TILE, PORTABLE_SCORE_ELEMENTS, PORTABLE_TILES_PER_CALL,
};
pub use recurrent::{causal_conv1d_update, gated_delta_rule_recurrent, RecurrentStep, L2NORM_EPS};
pub use recurrent_portable::{
    causal_conv1d_update_portable, gated_delta_rule_portable, recurrent_kernels,
    CausalConv1dUpdate, GatedDeltaRule,
};
pub use segment::{
    segment_attention, segment_attention_scratch_bytes, SegmentAttentionParams, BLOCK_K, BLOCK_Q,
};

use candle_core::{Device, Tensor};

/// Which implementation of the paged-attention ops a model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPath {
    /// The CPU kernels ([`reshape_and_cache`], [`paged_attention`]): CPU tensors only.
    Native,
    /// Candle tensor ops ([`PortableStep`]): any device.
    Portable,
    /// FlashAttention-2 ([`flash`]): on CUDA in a build with the `flash-attn` feature (bf16 and
    /// f16), its oracle on the CPU (tests and `doctor`).
    Flash,
}

impl AttentionPath {
    /// The default path on `device`: native on the CPU, portable elsewhere. The flash path is
    /// never a default: it has not run on a GPU yet, so it is chosen only explicitly (`doctor`
    /// compares it with the portable path and the CPU on the device) until `doctor` has passed
    /// there.
    pub fn for_device(device: &Device) -> Self {
        if device.is_cpu() {
            Self::Native
        } else {
            Self::Portable
        }
    }

    /// Whether this path can run on `device` in this build.
    pub fn available_on(self, device: &Device) -> bool {
        match self {
            Self::Native => device.is_cpu(),
            Self::Portable => true,
            Self::Flash => flash::available_on(device),
        }
    }

    /// Whether this path runs the CPU's own kernels for everything but attention — the packed
    /// linear ([`PackedLinear`]) and the linear-attention layers' recurrent kernels — rather
    /// than candle ops ([`TiledLinear`], [`gated_delta_rule_portable`]): native, and flash on
    /// the CPU (where flash is its oracle over the CPU kernels); not portable, and not flash on
    /// CUDA (which has no linear or recurrent kernels of its own).
    pub fn uses_cpu_kernels(self, device: &Device) -> bool {
        match self {
            Self::Native => true,
            Self::Portable => false,
            Self::Flash => device.is_cpu(),
        }
    }

    /// The path's name in reports: `native`, `portable` or `flash`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Portable => "portable",
            Self::Flash => "flash",
        }
    }

    /// Attention of `q`, `k`, `v` `[n, heads, head_dim]` within `params.segments` on this
    /// path ([`segment_attention`], [`segment_attention_portable`] or
    /// [`flash::segment_attention_flash`]); returns `[n, heads, head_dim]` in the input dtype.
    ///
    /// Errors: as the chosen implementation.
    pub fn segment_attention(
        self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        params: &SegmentAttentionParams<'_>,
    ) -> Result<Tensor, KernelError> {
        match self {
            Self::Native => segment_attention(q, k, v, params),
            Self::Portable => segment_attention_portable(q, k, v, params),
            Self::Flash => flash::segment_attention_flash(q, k, v, params),
        }
    }
}

/// The device-side part of a step on each path.
#[derive(Debug)]
enum StepKind {
    Native,
    Portable(PortableStep),
    /// The flash step, and on a device other than the CPU the portable cache write.
    Flash(flash::FlashStep, Option<CacheWrite>),
}

/// One step's paged-attention metadata, prepared once per step and used by every layer.
#[derive(Debug)]
pub struct PagedStep<'a> {
    params: PagedAttentionParams<'a>,
    slot_mapping: &'a [u32],
    kind: StepKind,
}

impl<'a> PagedStep<'a> {
    /// Prepares a step on `path` for pools of `num_blocks` blocks of `block_size` tokens on
    /// `device`: `params` as for [`paged_attention`], `slot_mapping` (`[total_tokens]`, slot =
    /// `block * block_size + offset`) as for [`reshape_and_cache`].
    ///
    /// Errors: [`KernelError::Invalid`] for inconsistent metadata (portable and flash paths: at
    /// once; native path: at the first kernel call) and, on the flash path, a block size that
    /// is not a multiple of 32.
    pub fn new(
        path: AttentionPath,
        params: PagedAttentionParams<'a>,
        slot_mapping: &'a [u32],
        block_size: usize,
        num_blocks: usize,
        device: &Device,
    ) -> Result<Self, KernelError> {
        let kind = match path {
            AttentionPath::Native => StepKind::Native,
            AttentionPath::Portable => StepKind::Portable(PortableStep::new(
                &params,
                slot_mapping,
                block_size,
                num_blocks,
                device,
            )?),
            AttentionPath::Flash => {
                let step = flash::FlashStep::new(&params, block_size, num_blocks, device)?;
                let write = if device.is_cpu() {
                    None
                } else {
                    Some(CacheWrite::new(slot_mapping, block_size, device)?)
                };
                StepKind::Flash(step, write)
            }
        };
        Ok(Self {
            params,
            slot_mapping,
            kind,
        })
    }

    /// Writes this step's `key`/`value` `[total_tokens, n_kv_heads, head_dim]` into the pools
    /// `[num_blocks, block_size, n_kv_heads, head_dim]`, in place.
    ///
    /// Errors: as [`reshape_and_cache`].
    pub fn write_cache(
        &self,
        key: &Tensor,
        value: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
    ) -> Result<(), KernelError> {
        match &self.kind {
            StepKind::Portable(p) => p.write_cache(key, value, key_cache, value_cache),
            StepKind::Flash(_, Some(w)) => w.write(key, value, key_cache, value_cache),
            StepKind::Native | StepKind::Flash(_, None) => {
                reshape_and_cache(key, value, key_cache, value_cache, self.slot_mapping)
            }
        }
    }

    /// Attention of `query` `[total_tokens, n_heads, head_dim]` over the pools; returns
    /// `[total_tokens, n_heads, head_dim]` in the query dtype.
    ///
    /// Errors: as [`paged_attention`].
    pub fn attend(
        &self,
        query: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
    ) -> Result<Tensor, KernelError> {
        match &self.kind {
            StepKind::Portable(p) => p.attend(query, key_cache, value_cache, self.params.scale),
            StepKind::Flash(f, _) => f.attend(query, key_cache, value_cache, self.params.scale),
            StepKind::Native => paged_attention(query, key_cache, value_cache, &self.params),
        }
    }
}

/// Errors of the kernels: invalid shapes or metadata are caught before any memory is touched.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A tensor given to a native (CPU) kernel lives on another device.
    #[error("{kernel}: the native kernels run on the CPU only, not on {device} (use AttentionPath::Portable)")]
    UnsupportedDevice {
        /// Kernel name.
        kernel: &'static str,
        /// Debug rendering of the device location.
        device: String,
    },
    /// Shapes, dtypes or metadata lengths disagree.
    #[error("{kernel}: {msg}")]
    Invalid {
        /// Kernel name.
        kernel: &'static str,
        /// What is wrong, with the offending values.
        msg: String,
    },
    /// An error from candle itself.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl From<KernelError> for candle_core::Error {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Candle(c) => c,
            other => candle_core::Error::wrap(other),
        }
    }
}

/// Fails with [`KernelError::UnsupportedDevice`] unless `t` lives on the CPU.
fn require_cpu(kernel: &'static str, t: &candle_core::Tensor) -> Result<(), KernelError> {
    if t.device().is_cpu() {
        Ok(())
    } else {
        Err(KernelError::UnsupportedDevice {
            kernel,
            device: format!("{:?}", t.device().location()),
        })
    }
}

/// Checks a step's metadata against `total_tokens` query rows and a pool of `num_blocks`
/// blocks of `block_size`; returns `(sequence, cache position)` of every query row.
///
/// Errors: [`KernelError::Invalid`] naming `kernel` when lengths disagree, a query is longer
/// than its context, a block table is too short, or a block id is outside the pool.
fn validate_step(
    kernel: &'static str,
    params: &PagedAttentionParams<'_>,
    total_tokens: usize,
    block_size: usize,
    num_blocks: usize,
) -> Result<Vec<(usize, usize)>, KernelError> {
    let invalid = |msg: String| KernelError::Invalid { kernel, msg };
    let n = params.query_lens.len();
    if params.context_lens.len() != n || params.block_tables.len() != n {
        return Err(invalid(format!(
            "{} query_lens, {} context_lens, {} block tables",
            n,
            params.context_lens.len(),
            params.block_tables.len()
        )));
    }
    let sum = params.query_lens.iter().sum::<usize>();
    if sum != total_tokens {
        return Err(invalid(format!(
            "query_lens sum to {sum} but there are {total_tokens} query rows"
        )));
    }
    let mut tokens = Vec::with_capacity(total_tokens);
    for s in 0..n {
        let (q, c) = (params.query_lens[s], params.context_lens[s]);
        if q > c {
            return Err(invalid(format!(
                "sequence {s}: query_len {q} > context_len {c}"
            )));
        }
        let table = &params.block_tables[s];
        if table.len() * block_size < c {
            return Err(invalid(format!(
                "sequence {s}: {} blocks of {block_size} cannot hold {c} tokens",
                table.len()
            )));
        }
        if let Some(b) = table[..c.div_ceil(block_size)]
            .iter()
            .find(|&&b| b as usize >= num_blocks)
        {
            return Err(invalid(format!(
                "sequence {s}: block {b} outside the pool of {num_blocks}"
            )));
        }
        tokens.extend((0..q).map(|j| (s, c - q + j)));
    }
    Ok(tokens)
}

/// Storage element types the kernels accept, converted to and from `f32` for accumulation.
trait Element: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for half::f16 {
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
}

impl Element for half::bf16 {
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
}
