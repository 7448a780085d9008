//! The recurrent kernels of [`crate::recurrent`] as candle ops, for any device (the portable
//! path, as [`crate::portable`] is for paged attention): the same arguments, the same
//! arithmetic up to the order of summation, the state updated in place through
//! [`Tensor::slice_set`]. One sequence at a time, and token by token inside the delta rule (the
//! recurrent form): correct everywhere, fast nowhere; the fused kernels replace it per device
//! once they are verified there.

use candle_core::{DType, Device, Tensor, D};

use crate::recurrent::{
    causal_conv1d_update, gated_delta_rule_recurrent, RecurrentStep, L2NORM_EPS,
};
use crate::{AttentionPath, KernelError};

/// The signature of [`causal_conv1d_update`] and [`causal_conv1d_update_portable`].
pub type CausalConv1dUpdate = fn(
    &Tensor,
    &Tensor,
    &Tensor,
    Option<&Tensor>,
    &RecurrentStep<'_>,
    bool,
) -> Result<Tensor, KernelError>;

/// The signature of [`gated_delta_rule_recurrent`] and [`gated_delta_rule_portable`].
pub type GatedDeltaRule = fn(
    &Tensor,
    &Tensor,
    &Tensor,
    &Tensor,
    &Tensor,
    &Tensor,
    &RecurrentStep<'_>,
    bool,
) -> Result<Tensor, KernelError>;

/// The recurrent kernels that go with attention `path` on `device`: the CPU ones where the
/// path runs the CPU's own kernels ([`AttentionPath::uses_cpu_kernels`]), the candle-op
/// ones otherwise.
pub fn recurrent_kernels(
    path: AttentionPath,
    device: &Device,
) -> (CausalConv1dUpdate, GatedDeltaRule) {
    if path.uses_cpu_kernels(device) {
        (causal_conv1d_update, gated_delta_rule_recurrent)
    } else {
        (causal_conv1d_update_portable, gated_delta_rule_portable)
    }
}

const CONV: &str = "causal_conv1d_update_portable";
const DELTA: &str = "gated_delta_rule_portable";

/// [`crate::causal_conv1d_update`] with candle ops: `x` `[total_tokens, channels]`,
/// `conv_state` `[num_slots, channels, kernel - 1]` f32 (contiguous, updated in place),
/// `weight` `[channels, kernel]`, `bias` `[channels]`; returns `[total_tokens, channels]` f32.
/// A decode step (one token per sequence) runs every sequence at once; a step with a prefill
/// runs sequence by sequence.
///
/// Errors: [`KernelError::Invalid`] for disagreeing shapes or an invalid `step`; candle errors.
pub fn causal_conv1d_update_portable(
    x: &Tensor,
    conv_state: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    step: &RecurrentStep<'_>,
    silu: bool,
) -> Result<Tensor, KernelError> {
    let (rows, channels) = x.dims2()?;
    let (slots, sc, width) = conv_state.dims3()?;
    let (wc, kernel) = weight.dims2()?;
    if wc != channels || sc != channels || width + 1 != kernel {
        return Err(KernelError::Invalid {
            kernel: CONV,
            msg: format!(
                "x {:?}, conv_state {:?}, weight {:?} disagree",
                x.dims(),
                conv_state.dims(),
                weight.dims()
            ),
        });
    }
    let starts = step.validate(CONV, rows, slots)?;
    let weight = weight.to_dtype(DType::F32)?;
    let x = x.to_dtype(DType::F32)?;
    let bias = bias
        .map(|b| b.to_dtype(DType::F32)?.unsqueeze(1))
        .transpose()?;
    if !conv_state.is_contiguous() {
        return Err(KernelError::Invalid {
            kernel: CONV,
            msg: "conv_state must be contiguous".into(),
        });
    }
    if rows > 0 && step.query_lens.iter().all(|&len| len == 1) {
        // A decode step: every sequence at once (row `i` is sequence `i`'s token).
        let dev = x.device();
        let slot_ids = Tensor::from_vec(step.slots.to_vec(), rows, dev)?;
        // `[rows, channels, kernel]`: each sequence's kept inputs, oldest first, then its new one.
        let window = Tensor::cat(
            &[conv_state.index_select(&slot_ids, 0)?, x.unsqueeze(2)?],
            2,
        )?;
        let mut y = Tensor::zeros((rows, channels, 1), DType::F32, dev)?;
        for j in 0..kernel {
            y = (y + window
                .narrow(2, j, 1)?
                .broadcast_mul(&weight.narrow(1, j, 1)?)?)?;
        }
        if let Some(b) = &bias {
            y = y.broadcast_add(b)?;
        }
        let kept = window
            .narrow(2, 1, width)?
            .reshape((rows, channels * width))?;
        let index = slot_ids
            .reshape((rows, 1))?
            .broadcast_as((rows, channels * width))?
            .contiguous()?;
        conv_state.reshape((slots, channels * width))?.scatter_set(
            &index,
            &kept.contiguous()?,
            0,
        )?;
        let y = y.reshape((rows, channels))?;
        return Ok(if silu { y.silu()? } else { y });
    }
    let mut outs = Vec::with_capacity(starts.len());
    for ((&start, &len), &slot) in starts.iter().zip(step.query_lens).zip(step.slots) {
        let slot = slot as usize;
        // `[channels, kernel - 1 + len]`: the kept inputs, oldest first, then the new ones.
        let window = Tensor::cat(
            &[
                conv_state.narrow(0, slot, 1)?.squeeze(0)?,
                x.narrow(0, start, len)?.t()?,
            ],
            1,
        )?;
        let mut y = Tensor::zeros((channels, len), DType::F32, x.device())?;
        for j in 0..kernel {
            y = (y + window
                .narrow(1, j, len)?
                .broadcast_mul(&weight.narrow(1, j, 1)?)?)?;
        }
        if let Some(b) = &bias {
            y = y.broadcast_add(b)?;
        }
        let kept = window.narrow(1, len, width)?.unsqueeze(0)?.contiguous()?;
        conv_state.slice_set(&kept, 0, slot)?;
        let y = y.t()?;
        outs.push(if silu { y.silu()? } else { y });
    }
    Ok(Tensor::cat(&outs, 0)?.contiguous()?)
}

/// `x · rsqrt(Σx² + eps)` over the last dimension (transformers `l2norm`).
fn l2norm(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = (x.sqr()?.sum_keepdim(D::Minus1)? + f64::from(L2NORM_EPS))?.sqrt()?;
    x.broadcast_div(&norm)
}

/// [`crate::gated_delta_rule_recurrent`] with candle ops: `query`, `key` `[total_tokens,
/// num_k_heads, k_head_dim]`, `value` `[total_tokens, num_v_heads, v_head_dim]`, `g`, `beta`
/// `[total_tokens, num_v_heads]`, `state` `[num_slots, num_v_heads, k_head_dim, v_head_dim]`
/// f32 (contiguous, updated in place); returns `[total_tokens, num_v_heads, v_head_dim]` f32.
/// Per token: `S ← S·exp(g)`; `δ = β·(v − Sᵀk)`; `S ← S + k δᵀ`; `o = Sᵀq`. The step's
/// sequences run together, one pass of about fifteen ops per token position (a decode step:
/// one pass), each sequence's arithmetic the same as alone.
///
/// Errors: [`KernelError::Invalid`] for disagreeing shapes, value heads not a multiple of key
/// heads, or an invalid `step`; candle errors.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule_portable(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &Tensor,
    step: &RecurrentStep<'_>,
    l2norm_qk: bool,
) -> Result<Tensor, KernelError> {
    let (rows, hk, dk) = query.dims3()?;
    let (_, hv, dv) = value.dims3()?;
    let (slots, sh, sk, sv) = state.dims4()?;
    if key.dims() != query.dims()
        || value.dim(0)? != rows
        || hk == 0
        || hv % hk != 0
        || (sh, sk, sv) != (hv, dk, dv)
        || g.dims() != [rows, hv]
        || beta.dims() != [rows, hv]
    {
        return Err(KernelError::Invalid {
            kernel: DELTA,
            msg: format!(
                "query {:?}, key {:?}, value {:?}, g {:?}, beta {:?}, state {:?} disagree",
                query.dims(),
                key.dims(),
                value.dims(),
                g.dims(),
                beta.dims(),
                state.dims()
            ),
        });
    }
    let starts = step.validate(DELTA, rows, slots)?;
    if !state.is_contiguous() {
        return Err(KernelError::Invalid {
            kernel: DELTA,
            msg: "state must be contiguous".into(),
        });
    }
    let f32 = |t: &Tensor| t.to_dtype(DType::F32);
    // Value head `h` reads key head `h / (hv / hk)`: repeat each key head `hv / hk` times.
    let per_head = |t: &Tensor| -> candle_core::Result<Tensor> {
        let t = f32(t)?;
        let t = if l2norm_qk { l2norm(&t)? } else { t };
        t.unsqueeze(2)?
            .repeat((1, 1, hv / hk, 1))?
            .reshape((rows, hv, dk))
    };
    let q = (per_head(query)? * (dk as f64).powf(-0.5))?;
    let k = per_head(key)?;
    let (v, decay, beta) = (f32(value)?, f32(g)?.exp()?, f32(beta)?);
    let dev = query.device();
    // The step's sequences with new tokens, batched: one pass over token positions `t` runs
    // token `t` of every sequence at once (a sequence past its end repeats its last token and
    // keeps its state), so a decode step is one pass for the whole batch, whatever its size.
    let seqs: Vec<(usize, usize, u32)> = starts
        .iter()
        .zip(step.query_lens)
        .zip(step.slots)
        .filter(|((_, &len), _)| len > 0)
        .map(|((&start, &len), &slot)| (start, len, slot))
        .collect();
    if seqs.is_empty() {
        return Ok(Tensor::zeros((0, hv, dv), DType::F32, dev)?);
    }
    let b = seqs.len();
    let max_q = seqs.iter().map(|s| s.1).max().unwrap_or(0);
    let (mut row_of, mut live) = (Vec::with_capacity(max_q * b), Vec::with_capacity(max_q * b));
    for t in 0..max_q {
        for &(start, len, _) in &seqs {
            row_of.push((start + t.min(len - 1)) as u32);
            live.push(u8::from(t < len));
        }
    }
    // Output row `start + t` of a sequence is entry `t * b + s` of the stacked passes.
    let mut out_index = vec![0u32; rows];
    for (si, &(start, len, _)) in seqs.iter().enumerate() {
        for t in 0..len {
            out_index[start + t] = (t * b + si) as u32;
        }
    }
    let row_of = Tensor::from_vec(row_of, (max_q, b), dev)?;
    let live = Tensor::from_vec(live, (max_q, b), dev)?;
    let slot_ids = Tensor::from_vec(seqs.iter().map(|s| s.2).collect::<Vec<u32>>(), b, dev)?;
    let mut s = state.index_select(&slot_ids, 0)?;
    let mut outs = Vec::with_capacity(max_q);
    for t in 0..max_q {
        let r = row_of.get(t)?;
        // `[b, hv, dk, 1]` and `[b, hv, 1, dv]` views of this position's key, query, value.
        let kt = k.index_select(&r, 0)?.unsqueeze(3)?;
        let qt = q.index_select(&r, 0)?.unsqueeze(3)?;
        let vt = v.index_select(&r, 0)?.unsqueeze(2)?;
        let mut next = s.broadcast_mul(&decay.index_select(&r, 0)?.reshape((b, hv, 1, 1))?)?;
        let remembered = next.broadcast_mul(&kt)?.sum_keepdim(2)?;
        let delta =
            (vt - remembered)?.broadcast_mul(&beta.index_select(&r, 0)?.reshape((b, hv, 1, 1))?)?;
        next = (next + kt.broadcast_mul(&delta)?)?;
        outs.push(next.broadcast_mul(&qt)?.sum(2)?);
        s = if seqs.iter().all(|q| t < q.1) {
            next
        } else {
            live.get(t)?
                .reshape((b, 1, 1, 1))?
                .broadcast_as(next.shape())?
                .where_cond(&next, &s)?
        };
    }
    // Back into the pool: one scatter over the batch's slots.
    let width = hv * dk * dv;
    let index = slot_ids
        .reshape((b, 1))?
        .broadcast_as((b, width))?
        .contiguous()?;
    state
        .reshape((slots, width))?
        .scatter_set(&index, &s.reshape((b, width))?.contiguous()?, 0)?;
    let stacked = Tensor::stack(&outs, 0)?.reshape((max_q * b, hv, dv))?;
    Ok(stacked.index_select(&Tensor::from_vec(out_index, rows, dev)?, 0)?)
}
