//! Hot kernels for verisample on candle tensors: the paged KV cache write
//! ([`reshape_and_cache`]) and ragged causal attention over that cache ([`paged_attention`]).
//!
//! Cache layout (vLLM's, flattened): per layer a key and a value pool, each
//! `[num_blocks, block_size, n_kv_heads, head_dim]`. Token `p` of a sequence lives in slot
//! `block_table[p / block_size] * block_size + p % block_size`.
//!
//! Causality (the rule of `verisample_models::batch`): query `j` of a sequence with `q` new
//! tokens and context length `c` sits at cache position `c - q + j` and attends to cache
//! positions `0..=c - q + j`.
//!
//! CPU: plain Rust with rayon, f32/f16/bf16 storage, f32 accumulation. The `cuda` feature is
//! declared but has no kernels yet: any non-CPU tensor gives [`KernelError::UnsupportedDevice`].

mod cache;
mod paged;

pub use cache::reshape_and_cache;
pub use paged::{paged_attention, PagedAttentionParams};

/// Errors of the kernels: invalid shapes or metadata are caught before any memory is touched.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A tensor is on a device the kernel has no implementation for yet (CUDA, Metal).
    #[error("{kernel}: no kernel for device {device} yet (only CPU is implemented)")]
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
