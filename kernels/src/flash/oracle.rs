//! The CPU oracle of `candle-flash-attn` 0.11.1: its two varlen entry points with exactly the
//! crate's argument contract (shapes, `u32` cumulative lengths, block table, window and scale
//! semantics, the same checks and the same error cases), computed on the CPU.
//!
//! Where the arguments describe what the native kernels compute — a causal mask without
//! softcap over the paged cache ([`crate::paged_attention`]), or full attention within
//! segments ([`crate::segment_attention`]) — the oracle runs those kernels, so a model on the
//! flash path on the CPU is bitwise the native path exactly when the arguments it built are
//! right. Any other window or a softcap runs a direct reference (scores, stable softmax and sum
//! in f32 over the visible keys).
//!
//! Semantics, as FlashAttention-2 (`csrc/flash_attn/src/mask.h`, `block_info.h`) and the
//! crate's `FlashAttnVarLen::cuda_fwd_t`:
//! - sequence `b` has `q_len = seqlens_q[b+1] - seqlens_q[b]` queries and `k_len =
//!   seqlens_k[b+1] - seqlens_k[b]` keys; with a block table, key `j` of sequence `b` lives in
//!   block `block_table[b][j / page_block_size]` at offset `j % page_block_size`, without one at
//!   row `seqlens_k[b] + j`;
//! - a window bound larger than `max_seqlen_k` is no bound; `(None, Some(0))` is causal; a
//!   missing left bound with a right one becomes `max_seqlen_k`, and the reverse;
//! - masks are aligned bottom-right: query `i` sees key `j` iff `i + k_len - q_len - left <= j
//!   <= i + k_len - q_len + right` (causal: `j <= i + k_len - q_len`, the rule of
//!   `verisample_models::batch`); a query that sees no key outputs zeros;
//! - softcap `c`: scores are `c · tanh(q·k · scale / c)` before the softmax.
//!
//! Deliberate differences, all stricter or wider in dtype only: the crate computes in f16/bf16
//! only, the oracle also takes f32 (the models' f32 fixtures exercise the argument code;
//! [`crate::AttentionPath::for_device`] never picks flash for f32 on CUDA); where the crate
//! would read out of bounds or skip rows silently (a block id outside the pool, a block table
//! too short, `max_seqlen_*` below a sequence's length, cumulative lengths that do not start at
//! 0 or end at the row count) the oracle refuses; `mm_prefix_ranges` is refused (unused here).

use candle_core::{DType, Tensor};

use crate::{
    paged_attention, require_cpu, segment_attention, KernelError, PagedAttentionParams,
    SegmentAttentionParams,
};

const PAGED: &str = "flash_attn_varlen_paged_windowed";
const VARLEN: &str = "flash_attn_varlen";

fn invalid(kernel: &'static str) -> impl Fn(String) -> KernelError {
    move |msg| KernelError::Invalid { kernel, msg }
}

/// The visible keys of one query under the crate's window rule, after its conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// Left bound (`-1`: none).
    left: i64,
    /// Right bound (`-1`: none).
    right: i64,
}

impl Window {
    /// The crate's conversion of `(window_size_left, window_size_right)` for `max_seqlen_k`.
    fn convert(left: Option<usize>, right: Option<usize>, max_seqlen_k: usize) -> Self {
        let bound = |w: Option<usize>| {
            w.filter(|&v| v <= max_seqlen_k)
                .map_or(-1, |v| i64::try_from(v).unwrap_or(-1))
        };
        let (mut left, mut right) = (bound(left), bound(right));
        if left < 0 && right >= 0 && right != 0 {
            left = max_seqlen_k as i64;
        }
        if left >= 0 && right < 0 {
            right = max_seqlen_k as i64;
        }
        Self { left, right }
    }

    fn is_causal(self) -> bool {
        self.left < 0 && self.right == 0
    }

    /// Keys `lo..hi` query `i` of a sequence with `q_len` queries and `k_len` keys sees.
    fn visible(self, i: usize, q_len: usize, k_len: usize) -> (usize, usize) {
        let diag = i as i64 + k_len as i64 - q_len as i64;
        let lo = if self.left >= 0 { diag - self.left } else { 0 };
        let hi = if self.right >= 0 {
            diag + self.right + 1
        } else {
            k_len as i64
        };
        let clamp = |x: i64| x.clamp(0, k_len as i64) as usize;
        (clamp(lo), clamp(hi))
    }
}

/// Cumulative lengths from a `u32` tensor (the crate reads them as `u32`), checked to start at
/// 0, never decrease, and end at `rows` when given.
fn cumulative(
    kernel: &'static str,
    name: &str,
    t: &Tensor,
    rows: Option<usize>,
) -> Result<Vec<usize>, KernelError> {
    let bad = invalid(kernel);
    if t.dtype() != DType::U32 {
        return Err(bad(format!("{name} must be u32, got {:?}", t.dtype())));
    }
    let v: Vec<usize> = t
        .to_device(&candle_core::Device::Cpu)?
        .to_vec1::<u32>()
        .map_err(|_| {
            bad(format!(
                "{name} must be one-dimensional, got {:?}",
                t.dims()
            ))
        })?
        .into_iter()
        .map(|x| x as usize)
        .collect();
    if v.len() < 2 {
        return Err(bad(format!("{name} should have a len >= 2 {}", v.len())));
    }
    if v[0] != 0 || v.windows(2).any(|w| w[1] < w[0]) {
        return Err(bad(format!(
            "{name} must start at 0 and never decrease: {v:?}"
        )));
    }
    if let Some(rows) = rows.filter(|&r| r != v[v.len() - 1]) {
        return Err(bad(format!(
            "{name} ends at {} but there are {rows} rows",
            v[v.len() - 1]
        )));
    }
    Ok(v)
}

/// Head-dimension and GQA checks the crate makes for every call.
fn check_heads(
    kernel: &'static str,
    n_heads: usize,
    kv_heads: usize,
    hd: usize,
) -> Result<(), KernelError> {
    let bad = invalid(kernel);
    if hd > 512 {
        return Err(bad(format!(
            "only supports head dimension at most 512 (got {hd})"
        )));
    }
    if !hd.is_multiple_of(8) {
        return Err(bad(format!(
            "only supports head sizes that are a multiple of 8 (got {hd})"
        )));
    }
    if kv_heads == 0 || !n_heads.is_multiple_of(kv_heads) {
        return Err(bad(format!(
            "number of k/v heads {kv_heads} must divide number of heads in query {n_heads}"
        )));
    }
    Ok(())
}

/// The checks every call starts with: CPU tensors, one dtype of f16/bf16 (f32 on the oracle
/// only), `q` of rank 3 and `k`/`v` of `kv_rank` (4 for a paged cache, 3 otherwise).
fn check_inputs(
    kernel: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    kv_rank: usize,
) -> Result<(), KernelError> {
    for t in [q, k, v] {
        require_cpu(kernel, t)?;
    }
    let bad = invalid(kernel);
    if !matches!(q.dtype(), DType::F16 | DType::BF16 | DType::F32)
        || k.dtype() != q.dtype()
        || v.dtype() != q.dtype()
    {
        return Err(bad(format!(
            "q, k, v must share one of f16/bf16 (f32 on the oracle only), got {:?}, {:?}, {:?}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        )));
    }
    if q.rank() != 3 || k.rank() != kv_rank || v.rank() != kv_rank {
        return Err(bad(format!(
            "{kernel} expects q of rank 3 and k/v of rank {kv_rank} (q: {:?}, k: {:?}, v: {:?})",
            q.dims(),
            k.dims(),
            v.dims()
        )));
    }
    Ok(())
}

/// `seqlens_q` (ending at `total_q`) and `seqlens_k` (ending at `total_k` when given), as
/// many of each.
fn cumulative_pair(
    kernel: &'static str,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    total_q: usize,
    total_k: Option<usize>,
) -> Result<(Vec<usize>, Vec<usize>), KernelError> {
    let cu_q = cumulative(kernel, "seqlens_q", seqlens_q, Some(total_q))?;
    let cu_k = cumulative(kernel, "seqlens_k", seqlens_k, total_k)?;
    if cu_k.len() != cu_q.len() {
        return Err(invalid(kernel)(format!(
            "seqlens_q and seqlens_k should have the same number of elements {} <> {}",
            cu_q.len(),
            cu_k.len()
        )));
    }
    Ok((cu_q, cu_k))
}

fn lengths(cu: &[usize]) -> Vec<usize> {
    cu.windows(2).map(|w| w[1] - w[0]).collect()
}

/// The oracle of `candle_flash_attn::flash_attn_varlen_paged_windowed`: `q` `[total_q,
/// n_heads, head_dim]`, `k`/`v` `[num_blocks, page_block_size, kv_heads, head_dim]`,
/// `seqlens_q`/`seqlens_k` `[batch + 1]` u32 cumulative lengths, `block_table` `[batch,
/// max_blocks]` u32 or i32; returns `[total_q, n_heads, head_dim]` in `q`'s dtype. Semantics in
/// the module documentation.
///
/// Errors: [`KernelError::Invalid`] for every argument the crate refuses and the stricter cases
/// listed there; [`KernelError::UnsupportedDevice`] off the CPU.
#[allow(clippy::too_many_arguments)] // the crate's signature, argument for argument
pub fn flash_attn_varlen_paged_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
    softcap: Option<f32>,
) -> Result<Tensor, KernelError> {
    check_inputs(PAGED, q, k, v, 4)?;
    let bad = invalid(PAGED);
    let (total_q, n_heads, hd) = q.dims3()?;
    let (num_blocks, block_size, kv_heads, k_hd) = k.dims4()?;
    if v.dims() != k.dims() {
        return Err(bad(format!(
            "shape mismatch k {:?} and v {:?}",
            k.dims(),
            v.dims()
        )));
    }
    if k_hd != hd {
        return Err(bad(format!(
            "shape mismatch q {:?} and k {:?}",
            q.dims(),
            k.dims()
        )));
    }
    if page_block_size != block_size {
        return Err(bad(format!(
            "page_block_size {page_block_size} does not match k shape {:?}",
            k.dims()
        )));
    }
    if block_size % 32 != 0 {
        return Err(bad(format!(
            "paged flash-attn requires page_block_size to be a multiple of 32 (got {block_size})"
        )));
    }
    check_heads(PAGED, n_heads, kv_heads, hd)?;
    if mm_prefix_ranges.is_some() {
        return Err(bad("mm_prefix_ranges: not implemented by the oracle".into()));
    }
    let (cu_q, cu_k) = cumulative_pair(PAGED, seqlens_q, seqlens_k, total_q, None)?;
    let (q_lens, k_lens) = (lengths(&cu_q), lengths(&cu_k));
    let tables: Vec<Vec<u32>> = match block_table.dtype() {
        DType::U32 => block_table.to_vec2::<u32>()?,
        DType::I32 => block_table
            .to_vec2::<i32>()?
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|b| u32::try_from(b).unwrap_or(u32::MAX))
                    .collect()
            })
            .collect(),
        other => {
            return Err(bad(format!(
                "block_table must be u32 or i32, got {other:?}"
            )))
        }
    };
    if tables.len() != q_lens.len() {
        return Err(bad(format!(
            "block_table has {} rows for a batch of {}",
            tables.len(),
            q_lens.len()
        )));
    }
    check_maxima(PAGED, &q_lens, &k_lens, max_seqlen_q, max_seqlen_k)?;
    for (b, (table, &k_len)) in tables.iter().zip(&k_lens).enumerate() {
        let used = k_len.div_ceil(block_size);
        if used > table.len() {
            return Err(bad(format!(
                "sequence {b}: {} blocks of {block_size} cannot hold {k_len} keys",
                table.len()
            )));
        }
        if let Some(id) = table[..used].iter().find(|&&id| id as usize >= num_blocks) {
            return Err(bad(format!(
                "sequence {b}: block {id} outside the pool of {num_blocks}"
            )));
        }
    }
    let window = Window::convert(window_size_left, window_size_right, max_seqlen_k);
    if window.is_causal() && softcap.is_none() && q_lens.iter().zip(&k_lens).all(|(q, k)| q <= k) {
        let params = PagedAttentionParams {
            query_lens: &q_lens,
            context_lens: &k_lens,
            block_tables: &tables,
            scale: softmax_scale,
        };
        return paged_attention(q, k, v, &params);
    }
    let key_row =
        |b: usize, j: usize| tables[b][j / block_size] as usize * block_size + j % block_size;
    direct(
        q,
        k,
        v,
        &cu_q,
        &k_lens,
        key_row,
        softmax_scale,
        window,
        softcap,
    )
}

/// The oracle of `candle_flash_attn::flash_attn_varlen`: `q` `[total_q, n_heads, head_dim]`,
/// `k`/`v` `[total_k, kv_heads, head_dim]`, `seqlens_q`/`seqlens_k` `[batch + 1]` u32
/// cumulative lengths; `causal` is the window `(None, Some(0))`, otherwise no window. Returns
/// `[total_q, n_heads, head_dim]` in `q`'s dtype.
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
    check_inputs(VARLEN, q, k, v, 3)?;
    let bad = invalid(VARLEN);
    let (total_q, n_heads, hd) = q.dims3()?;
    let (total_k, kv_heads, k_hd) = k.dims3()?;
    if k_hd != hd {
        return Err(bad(format!(
            "shape mismatch q {:?} and k {:?}",
            q.dims(),
            k.dims()
        )));
    }
    if v.dims() != k.dims() {
        return Err(bad(format!(
            "shape mismatch q {:?} and v {:?}",
            q.dims(),
            v.dims()
        )));
    }
    check_heads(VARLEN, n_heads, kv_heads, hd)?;
    let (cu_q, cu_k) = cumulative_pair(VARLEN, seqlens_q, seqlens_k, total_q, Some(total_k))?;
    let (q_lens, k_lens) = (lengths(&cu_q), lengths(&cu_k));
    check_maxima(VARLEN, &q_lens, &k_lens, max_seqlen_q, max_seqlen_k)?;
    let window = Window::convert(None, causal.then_some(0), max_seqlen_k);
    if !causal && cu_q == cu_k && n_heads == kv_heads {
        let segments: Vec<(usize, usize)> = cu_q.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
        let params = SegmentAttentionParams {
            segments: &segments,
            scale: softmax_scale,
        };
        return segment_attention(q, k, v, &params);
    }
    direct(
        q,
        k,
        v,
        &cu_q,
        &k_lens,
        |b, j| cu_k[b] + j,
        softmax_scale,
        window,
        None,
    )
}

fn check_maxima(
    kernel: &'static str,
    q_lens: &[usize],
    k_lens: &[usize],
    max_seqlen_q: usize,
    max_seqlen_k: usize,
) -> Result<(), KernelError> {
    let (mq, mk) = (
        q_lens.iter().copied().max().unwrap_or(0),
        k_lens.iter().copied().max().unwrap_or(0),
    );
    if mq > max_seqlen_q || mk > max_seqlen_k {
        return Err(invalid(kernel)(format!(
            "max_seqlen_q {max_seqlen_q} / max_seqlen_k {max_seqlen_k} below the longest sequence \
             ({mq} queries, {mk} keys): the kernel would leave rows uncomputed"
        )));
    }
    Ok(())
}

/// A direct reference for [`crate::paged_attention`] (same arguments, same rule): plain f32
/// loops over the visible cache positions, no tiling and no shared code with the kernel; for
/// checks that need an independent reference (`verisample doctor`, tests). Slow: `O(tokens ·
/// heads · context · head_dim)` on one thread.
///
/// Errors: [`KernelError::Invalid`] for inconsistent shapes or metadata (the kernel's checks).
pub fn paged_attention_reference(
    query: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    params: &PagedAttentionParams<'_>,
) -> Result<Tensor, KernelError> {
    let (total, n_heads, hd) = query.dims3()?;
    let (num_blocks, block_size, kv_heads, hd_c) = key_cache.dims4()?;
    if value_cache.dims() != key_cache.dims()
        || hd != hd_c
        || kv_heads == 0
        || n_heads % kv_heads != 0
    {
        return Err(invalid("paged_attention_reference")(format!(
            "query {:?}, caches {:?} / {:?} disagree",
            query.dims(),
            key_cache.dims(),
            value_cache.dims()
        )));
    }
    crate::validate_step(
        "paged_attention_reference",
        params,
        total,
        block_size,
        num_blocks,
    )?;
    let mut cu_q = vec![0];
    for &q in params.query_lens {
        cu_q.push(cu_q[cu_q.len() - 1] + q);
    }
    let tables = params.block_tables;
    let key_row =
        |b: usize, j: usize| tables[b][j / block_size] as usize * block_size + j % block_size;
    direct(
        query,
        key_cache,
        value_cache,
        &cu_q,
        params.context_lens,
        key_row,
        params.scale,
        Window { left: -1, right: 0 },
        None,
    )
}

/// The direct reference: for every query row and head, scores over the visible keys (rows of
/// `k`/`v` viewed as `[rows, kv_heads, head_dim]`, row of key `j` of sequence `b` =
/// `key_row(b, j)`), softcap, stable softmax and weighted sum, all in f32.
#[allow(clippy::too_many_arguments)]
fn direct(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cu_q: &[usize],
    k_lens: &[usize],
    key_row: impl Fn(usize, usize) -> usize,
    scale: f32,
    window: Window,
    softcap: Option<f32>,
) -> Result<Tensor, KernelError> {
    let (total_q, n_heads, hd) = q.dims3()?;
    let kv_heads = k.dims()[k.rank() - 2];
    let group = n_heads / kv_heads;
    let flat = |t: &Tensor| -> candle_core::Result<Vec<f32>> {
        t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
    };
    let (qf, kf, vf) = (flat(q)?, flat(k)?, flat(v)?);
    let mut out = vec![0f32; total_q * n_heads * hd];
    let mut scores = Vec::new();
    for (b, &k_len) in k_lens.iter().enumerate() {
        let q_len = cu_q[b + 1] - cu_q[b];
        for i in 0..q_len {
            let (lo, hi) = window.visible(i, q_len, k_len);
            let row = cu_q[b] + i;
            for h in 0..n_heads {
                let kvh = h / group;
                let qv = &qf[(row * n_heads + h) * hd..][..hd];
                scores.clear();
                for j in lo..hi {
                    let kv = &kf[(key_row(b, j) * kv_heads + kvh) * hd..][..hd];
                    let dot: f32 = qv.iter().zip(kv).map(|(a, b)| a * b).sum();
                    scores.push(match softcap {
                        Some(c) if c > 0.0 => c * (dot * scale / c).tanh(),
                        _ => dot * scale,
                    });
                }
                let Some(max) = scores.iter().copied().reduce(f32::max) else {
                    continue; // no visible key: zeros, as the kernel writes
                };
                let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f32 = weights.iter().sum();
                let o = &mut out[(row * n_heads + h) * hd..][..hd];
                for (w, j) in weights.iter().zip(lo..hi) {
                    let vv = &vf[(key_row(b, j) * kv_heads + kvh) * hd..][..hd];
                    for (x, y) in o.iter_mut().zip(vv) {
                        *x += w / sum * y;
                    }
                }
            }
        }
    }
    Ok(Tensor::from_vec(out, (total_q, n_heads, hd), q.device())?.to_dtype(q.dtype())?)
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn window_conversion_follows_the_crate() {
        // (left, right, max_k) -> converted bounds, as FlashAttnVarLen::cuda_fwd_t computes them.
        for (l, r, mk, want) in [
            (None, Some(0), 10, (-1, 0)),     // causal
            (None, None, 10, (-1, -1)),       // no window
            (Some(3), None, 10, (3, 10)),     // left only: right becomes max_seqlen_k
            (None, Some(2), 10, (10, 2)),     // right only: left becomes max_seqlen_k
            (Some(11), Some(0), 10, (-1, 0)), // a bound beyond max_seqlen_k is none
            (Some(4), Some(1), 10, (4, 1)),
        ] {
            let w = Window::convert(l, r, mk);
            assert_eq!((w.left, w.right), want, "{l:?} {r:?} {mk}");
        }
    }

    #[test]
    fn visible_keys_are_aligned_bottom_right() {
        let causal = Window::convert(None, Some(0), 100);
        // 3 new queries over 7 keys: query 0 sits at key 4.
        assert_eq!(causal.visible(0, 3, 7), (0, 5));
        assert_eq!(causal.visible(2, 3, 7), (0, 7));
        // More queries than keys: the first query sees nothing.
        assert_eq!(causal.visible(0, 3, 2), (0, 0));
        let local = Window::convert(Some(2), Some(1), 100);
        assert_eq!(local.visible(0, 3, 7), (2, 6));
        assert_eq!(local.visible(2, 3, 7), (4, 7));
    }
}
