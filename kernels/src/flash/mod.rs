//! The flash path: FlashAttention-2 through `candle-flash-attn` 0.11.1 on CUDA (feature
//! `flash-attn`; bf16/f16), its CPU oracle everywhere else ([`oracle`]), and the code that turns
//! one step's batch metadata into the crate's arguments ([`FlashPagedArgs`], [`FlashStep`]).
//!
//! Text attention: one `flash_attn_varlen_paged_windowed` call per layer for the whole mixed
//! batch (prefill chunks and decode tokens together) over the paged cache, which already has
//! the crate's layout `[num_blocks, block_size, kv_heads, head_dim]`: the native kernels, the
//! portable path and flash-attn read the same blocks, nothing is converted per step. The
//! crate's paged kernels need `block_size % 32 == 0` (the engine's default block is 32). The
//! step's metadata (`u32` cumulative query and context lengths, an `i32` block table) is
//! uploaded once per step and used by every layer; the cache write is the native
//! `reshape_and_cache` on the CPU and the portable one elsewhere.
//!
//! Vision attention: `flash_attn_varlen` over the tower's full or window segments (no mask
//! within a segment). Head dimensions: the paged kernels are compiled for 64/128/256/512 and
//! take any multiple of 8 up to 512 (rounded up to the next compiled one); the varlen kernels
//! for 32/64/96/128/160/192/224/256/512, so the vision towers' 80 (Qwen2-VL, Qwen2.5-VL) and 72
//! (Qwen3-VL) run on the 96 kernels. [`supports_head_dim`] is the crate's own rule.
//!
//! Batch invariance (read in candle-flash-attn 0.11.1's `kernels/flash_api.cu` and
//! `flash_fwd_launch_template.h`): the crate's `run_mha` sets `params.num_splits = 1` on every
//! call and its Rust API has no way to change it, so the paged kernel (the split-KV kernel,
//! `kBlockM = 64` query rows × `kBlockN = 32` keys per tile, `Flash_fwd_kernel_traits<d, 64, 32,
//! 4>`) never splits a query's keys across thread blocks and never runs the combine kernel,
//! whatever the batch: each query row's online softmax walks its own key blocks, from its last
//! visible block down to block 0, in one thread block. Keys past a row's causal limit inside
//! its 64-row tile (a tile reaching further in a longer chunk) are masked to `-inf` and add
//! exact zeros. So a row's output depends on its own context only — the property the oracle
//! gives by construction and `kernels/tests/batch_invariance.rs` checks through it, and that
//! `verisample doctor` checks on the GPU itself.

pub mod oracle;

use candle_core::{DType, Device, Tensor};

use crate::{validate_step, KernelError, PagedAttentionParams, SegmentAttentionParams};

/// Whether `candle-flash-attn` takes `head_dim` (a multiple of 8, at most 512).
pub fn supports_head_dim(head_dim: usize) -> bool {
    head_dim > 0 && head_dim.is_multiple_of(8) && head_dim <= 512
}

/// Whether this build can run flash-attn on `device`: CUDA with the `flash-attn` feature, or
/// the CPU, where the oracle stands in for it.
pub fn available_on(device: &Device) -> bool {
    device.is_cpu() || (cfg!(feature = "flash-attn") && device.is_cuda())
}

/// `flash_attn_varlen_paged_windowed` of the crate on CUDA, the oracle on the CPU; the crate's
/// arguments and semantics ([`oracle::flash_attn_varlen_paged_windowed`]).
///
/// Errors: the crate's or the oracle's; [`KernelError::UnsupportedDevice`] on a device this
/// build has no flash-attn for (Metal, or CUDA without the `flash-attn` feature).
#[allow(clippy::too_many_arguments)] // the crate's signature, argument for argument
pub fn flash_attn_varlen_paged_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
) -> Result<Tensor, KernelError> {
    if q.device().is_cpu() {
        return oracle::flash_attn_varlen_paged_windowed(
            q,
            k,
            v,
            seqlens_q,
            seqlens_k,
            block_table,
            None,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            window_size_left,
            window_size_right,
            page_block_size,
            None,
        );
    }
    #[cfg(feature = "flash-attn")]
    if q.device().is_cuda() {
        return Ok(candle_flash_attn::flash_attn_varlen_paged_windowed(
            q,
            k,
            v,
            seqlens_q,
            seqlens_k,
            block_table,
            None,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            window_size_left,
            window_size_right,
            page_block_size,
            None,
        )?);
    }
    Err(unavailable("flash_attn_varlen_paged_windowed", q.device()))
}

/// `flash_attn_varlen` of the crate on CUDA, the oracle on the CPU
/// ([`oracle::flash_attn_varlen`]).
///
/// Errors: as [`flash_attn_varlen_paged_windowed`].
#[allow(clippy::too_many_arguments)] // the crate's signature, argument for argument
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor, KernelError> {
    if q.device().is_cpu() {
        return oracle::flash_attn_varlen(
            q,
            k,
            v,
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            causal,
        );
    }
    #[cfg(feature = "flash-attn")]
    if q.device().is_cuda() {
        return Ok(candle_flash_attn::flash_attn_varlen(
            q,
            k,
            v,
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            causal,
        )?);
    }
    Err(unavailable("flash_attn_varlen", q.device()))
}

fn unavailable(kernel: &'static str, device: &Device) -> KernelError {
    KernelError::UnsupportedDevice {
        kernel,
        device: format!(
            "{:?} (flash-attn runs on CUDA in a build with the `flash-attn` feature)",
            device.location()
        ),
    }
}

/// The crate's arguments for one step's text attention, on the host: built from the engine's
/// batch metadata by [`FlashPagedArgs::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashPagedArgs {
    /// `[num_seqs + 1]` cumulative new-token counts: sequence `s`'s queries are rows
    /// `cu_seqlens_q[s]..cu_seqlens_q[s + 1]` of the step.
    pub cu_seqlens_q: Vec<u32>,
    /// `[num_seqs + 1]` cumulative context lengths (cached + new tokens).
    pub cu_seqlens_k: Vec<u32>,
    /// `[num_seqs, max_blocks]` row-major, each row the blocks covering the sequence's context,
    /// padded with block 0 (never read: past the context length).
    pub block_table: Vec<i32>,
    /// Columns of [`FlashPagedArgs::block_table`] (at least 1).
    pub max_blocks: usize,
    /// Longest query run of the step.
    pub max_seqlen_q: usize,
    /// Longest context of the step.
    pub max_seqlen_k: usize,
}

impl FlashPagedArgs {
    /// The arguments for `params` over a pool of `num_blocks` blocks of `block_size` tokens.
    ///
    /// Errors: [`KernelError::Invalid`] for metadata the native kernels refuse
    /// ([`crate::paged_attention`]'s checks), a block size that is not a multiple of 32 (the
    /// crate's paged kernels), or a length or block id beyond `i32`.
    pub fn new(
        params: &PagedAttentionParams<'_>,
        block_size: usize,
        num_blocks: usize,
    ) -> Result<Self, KernelError> {
        let bad = |msg: String| KernelError::Invalid {
            kernel: "flash_attn_varlen_paged_windowed",
            msg,
        };
        if !block_size.is_multiple_of(32) {
            return Err(bad(format!(
                "the flash path needs a KV block size that is a multiple of 32, not {block_size}"
            )));
        }
        let total = params.query_lens.iter().sum();
        validate_step(
            "flash_attn_varlen_paged_windowed",
            params,
            total,
            block_size,
            num_blocks,
        )?;
        let cumulative = |lens: &[usize]| -> Result<Vec<u32>, KernelError> {
            let mut acc = 0usize;
            let mut cu = Vec::with_capacity(lens.len() + 1);
            cu.push(0);
            for &l in lens {
                acc += l;
                cu.push(
                    i32::try_from(acc).map_err(|_| bad(format!("{acc} rows exceed i32")))? as u32,
                );
            }
            Ok(cu)
        };
        let used: Vec<usize> = params
            .context_lens
            .iter()
            .map(|c| c.div_ceil(block_size))
            .collect();
        let max_blocks = used.iter().copied().max().unwrap_or(0).max(1);
        let mut block_table = vec![0i32; params.block_tables.len() * max_blocks];
        for (s, (table, &n)) in params.block_tables.iter().zip(&used).enumerate() {
            for (dst, &id) in block_table[s * max_blocks..][..n].iter_mut().zip(table) {
                *dst = i32::try_from(id).map_err(|_| bad(format!("block {id} exceeds i32")))?;
            }
        }
        Ok(Self {
            cu_seqlens_q: cumulative(params.query_lens)?,
            cu_seqlens_k: cumulative(params.context_lens)?,
            block_table,
            max_blocks,
            max_seqlen_q: params.query_lens.iter().copied().max().unwrap_or(0),
            max_seqlen_k: params.context_lens.iter().copied().max().unwrap_or(0),
        })
    }
}

/// One step's flash-path metadata on the device, uploaded once and used by every layer.
#[derive(Debug)]
pub struct FlashStep {
    seqlens_q: Tensor,
    seqlens_k: Tensor,
    block_table: Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    block_size: usize,
}

impl FlashStep {
    /// Builds [`FlashPagedArgs`] for `params` and uploads them to `device` (three small
    /// host→device copies per step).
    ///
    /// Errors: as [`FlashPagedArgs::new`]; candle errors for the uploads.
    pub fn new(
        params: &PagedAttentionParams<'_>,
        block_size: usize,
        num_blocks: usize,
        device: &Device,
    ) -> Result<Self, KernelError> {
        let args = FlashPagedArgs::new(params, block_size, num_blocks)?;
        let num_seqs = args.cu_seqlens_q.len() - 1;
        Ok(Self {
            seqlens_q: Tensor::new(args.cu_seqlens_q.as_slice(), device)?,
            seqlens_k: Tensor::new(args.cu_seqlens_k.as_slice(), device)?,
            block_table: Tensor::from_vec(args.block_table, (num_seqs, args.max_blocks), device)?,
            max_seqlen_q: args.max_seqlen_q,
            max_seqlen_k: args.max_seqlen_k,
            block_size,
        })
    }

    /// Causal attention of `query` `[total_tokens, n_heads, head_dim]` over the pools (already
    /// holding this step's keys and values); returns `[total_tokens, n_heads, head_dim]`.
    ///
    /// Errors: the crate's or the oracle's.
    pub fn attend(
        &self,
        query: &Tensor,
        key_cache: &Tensor,
        value_cache: &Tensor,
        scale: f32,
    ) -> Result<Tensor, KernelError> {
        if query.dim(0)? == 0 {
            return Ok(query.clone());
        }
        flash_attn_varlen_paged_windowed(
            &query.contiguous()?,
            key_cache,
            value_cache,
            &self.seqlens_q,
            &self.seqlens_k,
            &self.block_table,
            self.max_seqlen_q,
            self.max_seqlen_k,
            scale,
            None,
            Some(0),
            self.block_size,
        )
    }
}

/// [`crate::segment_attention`] on the flash path: `q`, `k`, `v` `[n, heads, head_dim]`, each
/// row attending to its own segment only (`flash_attn_varlen`, not causal, the segments'
/// cumulative lengths as both `seqlens_q` and `seqlens_k`).
///
/// Errors: [`KernelError::Invalid`] when the segments do not tile the rows; the crate's or the
/// oracle's.
pub fn segment_attention_flash(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &SegmentAttentionParams<'_>,
) -> Result<Tensor, KernelError> {
    let n = q.dim(0)?;
    crate::segment::validate_segments("segment_attention", params.segments, n)?;
    if n == 0 {
        return Ok(q.clone());
    }
    let mut cu = Vec::with_capacity(params.segments.len() + 1);
    cu.push(0u32);
    cu.extend(params.segments.iter().map(|&(s, l)| (s + l) as u32));
    let max = params.segments.iter().map(|s| s.1).max().unwrap_or(0);
    let cu = Tensor::new(cu.as_slice(), q.device())?;
    flash_attn_varlen(
        &q.contiguous()?,
        &k.contiguous()?,
        &v.contiguous()?,
        &cu,
        &cu,
        max,
        max,
        params.scale,
        false,
    )
}

/// The dtypes the crate computes in (f32 stays on the portable path on CUDA).
pub fn supports_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_of_a_mixed_step() {
        // A prefill chunk of 3 new tokens over 40 cached (2 blocks of 32), a decode token of a
        // 1-token context, and a 64-token prefill.
        let tables = vec![vec![7, 99], vec![5], vec![0, 1]];
        let params = PagedAttentionParams {
            query_lens: &[3, 1, 64],
            context_lens: &[43, 1, 64],
            block_tables: &tables,
            scale: 0.5,
        };
        let a = FlashPagedArgs::new(&params, 32, 8).unwrap_err();
        assert!(a.to_string().contains("block 99 outside"), "{a}");
        let tables = vec![vec![7, 2], vec![5], vec![0, 1]];
        let params = PagedAttentionParams {
            block_tables: &tables,
            ..params
        };
        let a = FlashPagedArgs::new(&params, 32, 8).unwrap();
        assert_eq!(a.cu_seqlens_q, [0, 3, 4, 68]);
        assert_eq!(a.cu_seqlens_k, [0, 43, 44, 108]);
        assert_eq!(a.max_blocks, 2);
        assert_eq!(a.block_table, [7, 2, 5, 0, 0, 1]);
        assert_eq!((a.max_seqlen_q, a.max_seqlen_k), (64, 64));
        let e = FlashPagedArgs::new(&params, 16, 8).unwrap_err();
        assert!(e.to_string().contains("multiple of 32"), "{e}");
    }

    #[test]
    fn head_dims_the_crate_takes() {
        for (hd, ok) in [
            (64, true),
            (72, true),
            (80, true),
            (128, true),
            (256, true),
            (512, true),
            (12, false),
            (520, false),
            (0, false),
        ] {
            assert_eq!(supports_head_dim(hd), ok, "{hd}");
        }
    }
}
