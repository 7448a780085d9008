//! Kernels of the linear-attention (Gated DeltaNet) layers over a flattened ragged batch, each
//! sequence's fixed-size state living in one slot of a pool and updated in place:
//! [`causal_conv1d_update`] (depthwise causal conv1d with its conv state) and
//! [`gated_delta_rule_recurrent`] (the gated delta rule, token by token).
//!
//! Reference: transformers 5.24 `models/qwen3_5/modeling_qwen3_5.py`, `causal_conv1d_update`
//! (and `causal_conv1d_fn`, which is the same with a zero state) and
//! `torch_recurrent_gated_delta_rule`. One call handles prefill, chunked prefill and decode:
//! a sequence's `query_len` new tokens continue from whatever its slot holds (zeros for a new
//! sequence), and the slot holds the state after them when the call returns.
//!
//! Arithmetic is f32 whatever the input dtype; states are f32.

use std::sync::Mutex;

use candle_core::{CpuStorage, DType, InplaceOp1, Layout, Tensor};
use rayon::prelude::*;

use crate::{require_cpu, KernelError};

/// Epsilon of the L2 normalisation of q and k (`l2norm(x, eps=1e-6)` in transformers, as in
/// the FLA library): `x · rsqrt(Σx² + eps)`.
pub const L2NORM_EPS: f32 = 1e-6;

/// Which sequences of a step own which state slot.
#[derive(Debug, Clone, Copy)]
pub struct RecurrentStep<'a> {
    /// New tokens per sequence, in the order their rows are concatenated; sums to the rows.
    pub query_lens: &'a [usize],
    /// State slot of each sequence (index into the pool's first dimension); all distinct.
    pub slots: &'a [u32],
}

impl RecurrentStep<'_> {
    /// Checks the step against `rows` flattened rows and a pool of `num_slots`; returns the
    /// first row of each sequence.
    pub(crate) fn validate(
        &self,
        kernel: &'static str,
        rows: usize,
        num_slots: usize,
    ) -> Result<Vec<usize>, KernelError> {
        let invalid = |msg: String| KernelError::Invalid { kernel, msg };
        if self.query_lens.len() != self.slots.len() {
            return Err(invalid(format!(
                "{} query_lens but {} slots",
                self.query_lens.len(),
                self.slots.len()
            )));
        }
        let sum: usize = self.query_lens.iter().sum();
        if sum != rows {
            return Err(invalid(format!(
                "query_lens sum to {sum} but there are {rows} rows"
            )));
        }
        let mut seen = vec![false; num_slots];
        for &s in self.slots {
            let s = s as usize;
            if s >= num_slots {
                return Err(invalid(format!("slot {s} outside the pool of {num_slots}")));
            }
            if std::mem::replace(&mut seen[s], true) {
                return Err(invalid(format!("slot {s} given to two sequences")));
            }
        }
        let mut start = 0;
        Ok(self
            .query_lens
            .iter()
            .map(|&q| {
                let s = start;
                start += q;
                s
            })
            .collect())
    }
}

/// A tensor's elements as f32, row-major.
fn host_f32(t: &Tensor) -> Result<Vec<f32>, KernelError> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Checks that `state` is a contiguous f32 CPU tensor of `dims` after the slot dimension;
/// returns the number of slots.
fn check_state(kernel: &'static str, state: &Tensor, dims: &[usize]) -> Result<usize, KernelError> {
    require_cpu(kernel, state)?;
    let invalid = |msg: String| KernelError::Invalid { kernel, msg };
    if state.dtype() != DType::F32 || !state.is_contiguous() {
        return Err(invalid(format!(
            "state must be a contiguous f32 tensor, got {:?} (contiguous: {})",
            state.dtype(),
            state.is_contiguous()
        )));
    }
    match state.dims().split_first() {
        Some((&n, rest)) if rest == dims => Ok(n),
        _ => Err(invalid(format!(
            "state {:?} is not [num_slots, {}]",
            state.dims(),
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The f32 slice of a contiguous CPU storage.
fn f32_slice<'s>(
    kernel: &'static str,
    s: &'s mut CpuStorage,
    l: &Layout,
) -> candle_core::Result<&'s mut [f32]> {
    match s {
        CpuStorage::F32(d) => Ok(&mut d[l.start_offset()..]),
        _ => candle_core::bail!("{kernel}: state must be f32"),
    }
}

const CONV: &str = "causal_conv1d_update";

/// Depthwise causal conv1d of the new rows `x` `[total_tokens, channels]` continuing each
/// sequence's conv state, optionally followed by SiLU; returns `[total_tokens, channels]` f32.
///
/// `conv_state` `[num_slots, channels, kernel - 1]` f32 holds, per slot, the last
/// `kernel - 1` inputs of every channel (oldest first; zeros for a new sequence) and is
/// updated in place. `weight` `[channels, kernel]` (`conv1d.weight` squeezed), `bias`
/// `[channels]`. Output row `t` of a sequence, channel `c`:
/// `Σ_j weight[c][j] · window[t + j]` (+ bias) over `window = state ++ x`, as transformers'
/// `causal_conv1d_update` with a state of `kernel - 1` columns.
///
/// Errors: [`KernelError::Invalid`] for disagreeing shapes, a non-f32 or non-contiguous state,
/// or invalid `step`; [`KernelError::UnsupportedDevice`] off the CPU.
pub fn causal_conv1d_update(
    x: &Tensor,
    conv_state: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    step: &RecurrentStep<'_>,
    silu: bool,
) -> Result<Tensor, KernelError> {
    let invalid = |msg: String| KernelError::Invalid { kernel: CONV, msg };
    for t in [x, weight].into_iter().chain(bias) {
        require_cpu(CONV, t)?;
    }
    let (rows, channels) = x.dims2()?;
    let (wc, kernel) = weight.dims2()?;
    if wc != channels || kernel < 2 {
        return Err(invalid(format!(
            "weight {:?} does not match {channels} channels (kernel ≥ 2)",
            weight.dims()
        )));
    }
    if let Some(b) = bias {
        if b.dims() != [channels] {
            return Err(invalid(format!("bias {:?} is not [{channels}]", b.dims())));
        }
    }
    let num_slots = check_state(CONV, conv_state, &[channels, kernel - 1])?;
    let starts = step.validate(CONV, rows, num_slots)?;
    let op = ConvOp {
        x: host_f32(x)?,
        weight: host_f32(weight)?,
        bias: bias.map(host_f32).transpose()?,
        channels,
        kernel,
        starts,
        step: *step,
        silu,
        out: Mutex::new(Vec::new()),
    };
    conv_state.inplace_op1(&op)?;
    let out = op.out.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(Tensor::from_vec(out, (rows, channels), x.device())?)
}

struct ConvOp<'a> {
    x: Vec<f32>,
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    channels: usize,
    kernel: usize,
    starts: Vec<usize>,
    step: RecurrentStep<'a>,
    silu: bool,
    out: Mutex<Vec<f32>>,
}

impl InplaceOp1 for ConvOp<'_> {
    fn name(&self) -> &'static str {
        CONV
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let state = f32_slice(CONV, storage, layout)?;
        let (ch, kernel) = (self.channels, self.kernel);
        let w = kernel - 1;
        let mut out = vec![0f32; self.x.len()];
        for ((&q, &slot), &start) in self
            .step
            .query_lens
            .iter()
            .zip(self.step.slots)
            .zip(&self.starts)
        {
            let st = &mut state[slot as usize * ch * w..(slot as usize + 1) * ch * w];
            let out_rows = &mut out[start * ch..(start + q) * ch];
            let x = &self.x[start * ch..(start + q) * ch];
            // One channel at a time: its window is the state followed by the new inputs.
            let cols: Vec<(Vec<f32>, Vec<f32>)> = (0..ch)
                .into_par_iter()
                .map(|c| {
                    let mut window: Vec<f32> = st[c * w..(c + 1) * w].to_vec();
                    window.extend((0..q).map(|t| x[t * ch + c]));
                    let wt = &self.weight[c * kernel..(c + 1) * kernel];
                    let b = self.bias.as_ref().map_or(0.0, |b| b[c]);
                    let ys = (0..q)
                        .map(|t| {
                            let y = wt
                                .iter()
                                .zip(&window[t..t + kernel])
                                .map(|(a, b)| a * b)
                                .sum::<f32>()
                                + b;
                            if self.silu {
                                y / (1.0 + (-y).exp())
                            } else {
                                y
                            }
                        })
                        .collect();
                    (ys, window[window.len() - w..].to_vec())
                })
                .collect();
            for (c, (ys, new_state)) in cols.into_iter().enumerate() {
                for (t, y) in ys.into_iter().enumerate() {
                    out_rows[t * ch + c] = y;
                }
                st[c * w..(c + 1) * w].copy_from_slice(&new_state);
            }
        }
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = out;
        Ok(())
    }
}

const DELTA: &str = "gated_delta_rule_recurrent";

/// The gated delta rule, token by token, over a flattened ragged batch; returns the output
/// `[total_tokens, num_v_heads, v_head_dim]` f32.
///
/// Inputs: `query`, `key` `[total_tokens, num_k_heads, k_head_dim]`; `value`
/// `[total_tokens, num_v_heads, v_head_dim]`; `g` (log decay, ≤ 0) and `beta` (write
/// strength) `[total_tokens, num_v_heads]`. Value head `h` reads key head
/// `h / (num_v_heads / num_k_heads)` (transformers' `repeat_interleave`). `state`
/// `[num_slots, num_v_heads, k_head_dim, v_head_dim]` f32 is each sequence's `S` (zeros for a
/// new sequence), updated in place. Per token, with `q` L2-normalised when `l2norm_qk` and
/// scaled by `k_head_dim^-½`, `k` L2-normalised when `l2norm_qk`:
///
/// `S ← S·exp(g)`; `δ = β·(v − Sᵀk)`; `S ← S + k δᵀ`; `o = Sᵀq`
///
/// exactly as `torch_recurrent_gated_delta_rule` (`use_qk_l2norm_in_kernel`).
///
/// Errors: [`KernelError::Invalid`] for disagreeing shapes, value heads not a multiple of key
/// heads, a non-f32 or non-contiguous state, or invalid `step`;
/// [`KernelError::UnsupportedDevice`] off the CPU.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule_recurrent(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &Tensor,
    step: &RecurrentStep<'_>,
    l2norm_qk: bool,
) -> Result<Tensor, KernelError> {
    let invalid = |msg: String| KernelError::Invalid { kernel: DELTA, msg };
    for t in [query, key, value, g, beta] {
        require_cpu(DELTA, t)?;
    }
    let (rows, hk, dk) = query.dims3()?;
    let (vrows, hv, dv) = value.dims3()?;
    if key.dims() != query.dims() || vrows != rows {
        return Err(invalid(format!(
            "query {:?}, key {:?}, value {:?} disagree",
            query.dims(),
            key.dims(),
            value.dims()
        )));
    }
    if hk == 0 || hv % hk != 0 {
        return Err(invalid(format!(
            "{hv} value heads are not a multiple of {hk} key heads"
        )));
    }
    for (name, t) in [("g", g), ("beta", beta)] {
        if t.dims() != [rows, hv] {
            return Err(invalid(format!(
                "{name} {:?} is not [{rows}, {hv}]",
                t.dims()
            )));
        }
    }
    let num_slots = check_state(DELTA, state, &[hv, dk, dv])?;
    let starts = step.validate(DELTA, rows, num_slots)?;
    let op = DeltaOp {
        q: host_f32(query)?,
        k: host_f32(key)?,
        v: host_f32(value)?,
        g: host_f32(g)?,
        beta: host_f32(beta)?,
        dims: [hk, dk, hv, dv],
        starts,
        step: *step,
        l2norm_qk,
        out: Mutex::new(Vec::new()),
    };
    state.inplace_op1(&op)?;
    let out = op.out.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(Tensor::from_vec(out, (rows, hv, dv), value.device())?)
}

struct DeltaOp<'a> {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    /// Key heads, key head dim, value heads, value head dim.
    dims: [usize; 4],
    starts: Vec<usize>,
    step: RecurrentStep<'a>,
    l2norm_qk: bool,
    out: Mutex<Vec<f32>>,
}

/// `x · rsqrt(Σx² + eps)` (transformers `l2norm`).
fn l2norm(x: &[f32]) -> Vec<f32> {
    let inv = 1.0 / (x.iter().map(|a| a * a).sum::<f32>() + L2NORM_EPS).sqrt();
    x.iter().map(|a| a * inv).collect()
}

impl InplaceOp1 for DeltaOp<'_> {
    fn name(&self) -> &'static str {
        DELTA
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let state = f32_slice(DELTA, storage, layout)?;
        let [hk, dk, hv, dv] = self.dims;
        let group = hv / hk;
        let scale = (dk as f32).sqrt();
        let mut out = vec![0f32; self.v.len()];
        for ((&q, &slot), &start) in self
            .step
            .query_lens
            .iter()
            .zip(self.step.slots)
            .zip(&self.starts)
        {
            let seq_state =
                &mut state[slot as usize * hv * dk * dv..(slot as usize + 1) * hv * dk * dv];
            // Value heads are independent: each owns its [dk, dv] block of the state.
            let heads: Vec<Vec<f32>> = seq_state
                .par_chunks_mut(dk * dv)
                .enumerate()
                .map(|(h, s)| {
                    let kh = h / group;
                    let mut o = vec![0f32; q * dv];
                    for t in 0..q {
                        let r = start + t;
                        let qrow = &self.q[(r * hk + kh) * dk..(r * hk + kh + 1) * dk];
                        let krow = &self.k[(r * hk + kh) * dk..(r * hk + kh + 1) * dk];
                        let (qv, kv) = if self.l2norm_qk {
                            (l2norm(qrow), l2norm(krow))
                        } else {
                            (qrow.to_vec(), krow.to_vec())
                        };
                        let qv: Vec<f32> = qv.iter().map(|a| a / scale).collect();
                        let vrow = &self.v[(r * hv + h) * dv..(r * hv + h + 1) * dv];
                        let decay = self.g[r * hv + h].exp();
                        let b = self.beta[r * hv + h];
                        s.iter_mut().for_each(|x| *x *= decay);
                        // kv_mem[j] = Σ_i S[i][j] k[i]
                        let mut delta = vec![0f32; dv];
                        for (i, &ki) in kv.iter().enumerate() {
                            for (m, &sij) in delta.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                                *m += sij * ki;
                            }
                        }
                        for (m, &vj) in delta.iter_mut().zip(vrow) {
                            *m = (vj - *m) * b;
                        }
                        let orow = &mut o[t * dv..(t + 1) * dv];
                        for i in 0..dk {
                            let srow = &mut s[i * dv..(i + 1) * dv];
                            for ((sij, &dj), oj) in srow.iter_mut().zip(&delta).zip(orow.iter_mut())
                            {
                                *sij += kv[i] * dj;
                                *oj += *sij * qv[i];
                            }
                        }
                    }
                    o
                })
                .collect();
            for (h, o) in heads.into_iter().enumerate() {
                for t in 0..q {
                    let r = start + t;
                    out[(r * hv + h) * dv..(r * hv + h + 1) * dv]
                        .copy_from_slice(&o[t * dv..(t + 1) * dv]);
                }
            }
        }
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = out;
        Ok(())
    }
}
