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
/// path runs the CPU's own kernels ([`AttentionPath::recurrent_on_cpu_kernels`]), the candle-op
/// ones otherwise.
pub fn recurrent_kernels(
    path: AttentionPath,
    device: &Device,
) -> (CausalConv1dUpdate, GatedDeltaRule) {
    if path.recurrent_on_cpu_kernels(device) {
        (causal_conv1d_update, gated_delta_rule_recurrent)
    } else {
        (causal_conv1d_update_portable, gated_delta_rule_portable)
    }
}

const CONV: &str = "causal_conv1d_update_portable";
const DELTA: &str = "gated_delta_rule_portable";

/// [`crate::causal_conv1d_update`] with candle ops: `x` `[total_tokens, channels]`,
/// `conv_state` `[num_slots, channels, kernel - 1]` f32 (updated in place), `weight`
/// `[channels, kernel]`, `bias` `[channels]`; returns `[total_tokens, channels]` f32.
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
        if let Some(b) = bias {
            y = y.broadcast_add(&b.to_dtype(DType::F32)?.unsqueeze(1)?)?;
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
/// f32 (updated in place); returns `[total_tokens, num_v_heads, v_head_dim]` f32. Per token:
/// `S ← S·exp(g)`; `δ = β·(v − Sᵀk)`; `S ← S + k δᵀ`; `o = Sᵀq`.
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
    let mut outs = Vec::with_capacity(rows);
    for ((&start, &len), &slot) in starts.iter().zip(step.query_lens).zip(step.slots) {
        let slot = slot as usize;
        let mut s = state.narrow(0, slot, 1)?.squeeze(0)?;
        for t in start..start + len {
            // `[hv, dk, 1]` and `[hv, 1, dv]` views of this token's key, query, value.
            let kt = k.get(t)?.unsqueeze(2)?;
            let qt = q.get(t)?.unsqueeze(2)?;
            let vt = v.get(t)?.unsqueeze(1)?;
            s = s.broadcast_mul(&decay.get(t)?.reshape((hv, 1, 1))?)?;
            let remembered = s.broadcast_mul(&kt)?.sum_keepdim(1)?;
            let delta = (vt - remembered)?.broadcast_mul(&beta.get(t)?.reshape((hv, 1, 1))?)?;
            s = (s + kt.broadcast_mul(&delta)?)?;
            outs.push(s.broadcast_mul(&qt)?.sum(1)?);
        }
        state.slice_set(&s.unsqueeze(0)?.contiguous()?, 0, slot)?;
    }
    Ok(Tensor::stack(&outs, 0)?)
}
