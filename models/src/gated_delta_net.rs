//! The Gated DeltaNet token mixer of Qwen3.5's linear-attention layers, over a flattened ragged
//! batch whose per-sequence state lives in the engine's slots ([`crate::batch::KvCache::states`]).
//!
//! Reference: transformers 5.24 `Qwen3_5GatedDeltaNet` (`models/qwen3_5/modeling_qwen3_5.py`):
//! fused in-projections `[qkv | z | b | a]`; depthwise causal conv1d over `qkv` with SiLU and
//! its conv state; `q`, `k` L2-normalised (in the kernel); `beta = sigmoid(b)`;
//! `g = -exp(A_log) · softplus(a + dt_bias)` in f32; the gated delta rule (each key head
//! serving `num_value_heads / num_key_heads` value heads); a gated RMSNorm
//! `rms_norm(o) · silu(z)` per value head; `out_proj`. The CPU kernels are
//! `verisample_kernels::{causal_conv1d_update, gated_delta_rule_recurrent}` (recurrent form for
//! prefill too: transformers' chunked form computes the same recurrence).

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use verisample_kernels::{recurrent_kernels, AttentionPath, RecurrentStep};

use crate::batch::BatchMeta;
use crate::config::LinearAttentionSpec;
use crate::layers::{fused_linear, linear, Proj, RmsNorm};

/// `F.softplus` with torch's defaults (`beta = 1`, linear above `threshold = 20`).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// One Gated DeltaNet mixer (`linear_attn.*` of a decoder layer).
pub struct GatedDeltaNet {
    spec: LinearAttentionSpec,
    /// `[in_proj_qkv | in_proj_z | in_proj_b | in_proj_a]`: `conv_dim + value_dim + 2 · heads`.
    in_proj: Proj,
    /// Depthwise conv weight `[conv_dim, conv_kernel]` (`conv1d.weight` squeezed; no bias).
    conv_weight: Tensor,
    /// `-exp(A_log)` per value head, f32.
    neg_a: Vec<f32>,
    /// `dt_bias` per value head, f32.
    dt_bias: Vec<f32>,
    /// `neg_a` and `dt_bias` as `[1, num_value_heads]` f32 tensors on the model's device, for
    /// the portable path's decay (no host round trip per layer and step on a GPU).
    neg_a_dt_bias: (Tensor, Tensor),
    /// The gated RMSNorm's weight over `value_head_dim` (a plain, not zero-centred, norm).
    norm: RmsNorm,
    out_proj: Proj,
}

impl GatedDeltaNet {
    /// Loads `linear_attn.*` from `vb` for a decoder of width `hidden`; `act` is the config's
    /// `hidden_act` (the conv activation); its projections for attention `path`.
    ///
    /// Errors: a candle error naming a missing or mis-shaped tensor, an activation other
    /// than SiLU (the only one the conv kernel applies).
    pub fn new(
        spec: &LinearAttentionSpec,
        hidden: usize,
        eps: f64,
        act: &str,
        vb: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        if !matches!(act, "silu" | "swish") {
            candle_core::bail!("Gated DeltaNet conv activation `{act}` is not supported (silu)");
        }
        let (cd, vd, nv) = (spec.conv_dim(), spec.value_dim(), spec.num_value_heads);
        let in_proj = fused_linear(
            hidden,
            &[
                (cd, vb.pp("in_proj_qkv")),
                (vd, vb.pp("in_proj_z")),
                (nv, vb.pp("in_proj_b")),
                (nv, vb.pp("in_proj_a")),
            ],
            false,
            path,
        )?;
        let conv_weight = vb
            .pp("conv1d")
            .get((cd, 1, spec.conv_kernel), "weight")?
            .reshape((cd, spec.conv_kernel))?;
        let f32s = |name: &str| -> Result<Vec<f32>> {
            vb.get(nv, name)?.to_dtype(DType::F32)?.to_vec1::<f32>()
        };
        let neg_a: Vec<f32> = f32s("A_log")?.into_iter().map(|a| -a.exp()).collect();
        let dt_bias = f32s("dt_bias")?;
        let row = |v: &[f32]| Tensor::from_slice(v, (1, nv), vb.device());
        Ok(Self {
            spec: *spec,
            in_proj,
            conv_weight,
            neg_a_dt_bias: (row(&neg_a)?, row(&dt_bias)?),
            neg_a,
            dt_bias,
            norm: RmsNorm::new(spec.value_head_dim, eps, vb.pp("norm"))?,
            out_proj: linear(vd, hidden, false, vb.pp("out_proj"), path)?,
        })
    }

    /// `[n, hidden] → [n, hidden]` for the step described by `meta` (its `query_lens` and
    /// `state_slots`), continuing each sequence from its slot of `conv_state`
    /// `[num_slots, conv_dim, conv_kernel - 1]` and `state` `[num_slots, num_value_heads,
    /// key_head_dim, value_head_dim]` (both f32) and leaving the state after this step there.
    /// `path` picks the recurrent kernels as it does the attention ones: the CPU kernels
    /// (native) or candle ops on any device (portable).
    ///
    /// Errors: kernel errors for invalid metadata, or the native path off the CPU.
    pub fn forward(
        &self,
        x: &Tensor,
        meta: &BatchMeta,
        (conv_state, state): (&Tensor, &Tensor),
        path: AttentionPath,
    ) -> Result<Tensor> {
        let s = &self.spec;
        let (n, dtype) = (x.dim(0)?, x.dtype());
        let (cd, kd, vd, nv) = (s.conv_dim(), s.key_dim(), s.value_dim(), s.num_value_heads);
        let step = RecurrentStep {
            query_lens: &meta.query_lens,
            slots: &meta.state_slots,
        };
        let p = self.in_proj.forward(x)?;
        let qkv = p.narrow(1, 0, cd)?.contiguous()?;
        let (conv, delta) = recurrent_kernels(path, x.device());
        let mixed =
            conv(&qkv, conv_state, &self.conv_weight, None, &step, true)?.to_dtype(dtype)?;
        let q = mixed
            .narrow(1, 0, kd)?
            .reshape((n, s.num_key_heads, s.key_head_dim))?;
        let k = mixed
            .narrow(1, kd, kd)?
            .reshape((n, s.num_key_heads, s.key_head_dim))?;
        let v = mixed
            .narrow(1, 2 * kd, vd)?
            .reshape((n, nv, s.value_head_dim))?;
        let beta = candle_nn::ops::sigmoid(&p.narrow(1, cd + vd, nv)?.contiguous()?)?;
        let g = self.decay(
            &p.narrow(1, cd + vd + nv, nv)?,
            path.uses_cpu_kernels(x.device()),
        )?;
        let o = delta(&q, &k, &v, &g, &beta, state, &step, true)?.to_dtype(dtype)?;
        // Gated RMSNorm (`Qwen3_5RMSNormGated`): `(w · x̂) · silu(z)` with the gate in f32.
        let gate = p
            .narrow(1, cd, vd)?
            .reshape((n, nv, s.value_head_dim))?
            .to_dtype(DType::F32)?
            .silu()?;
        let o = (self.norm.forward(&o)?.to_dtype(DType::F32)? * gate)?
            .to_dtype(dtype)?
            .reshape((n, vd))?;
        self.out_proj.forward(&o)
    }

    /// `g = -exp(A_log) · softplus(a + dt_bias)` `[n, num_value_heads]` f32 from `a`
    /// `[n, num_value_heads]`: with `on_host` (the CPU kernels' path, where `a` is a CPU
    /// tensor) with torch's `log1p` form; otherwise as tensor ops on `a`'s device, so no layer
    /// of a GPU step copies to the host (`ln(1 + eˣ)`: rounding
    /// `1 + eˣ` to f32 costs an absolute error up to about 6e-8 against `log1p`, so `g` moves
    /// by up to `6e-8 · exp(A_log)` and the decay `exp(g)` by about that: an f32 ulp near 1 for
    /// `A_log` near 0. The relative error of softplus is large only where softplus is tiny,
    /// e.g. 1e-3 at x = -10).
    fn decay(&self, a: &Tensor, on_host: bool) -> Result<Tensor> {
        if !on_host {
            let (neg_a, dt_bias) = &self.neg_a_dt_bias;
            let x = a.to_dtype(DType::F32)?.broadcast_add(dt_bias)?;
            // torch's threshold: linear above 20; the exp is clamped there so it stays finite.
            let soft = (x.minimum(20f64)?.exp()? + 1.0)?.log()?;
            let softplus = x.gt(20f64)?.where_cond(&x, &soft)?;
            return softplus.broadcast_mul(neg_a);
        }
        let (n, nv) = a.dims2()?;
        let host: Vec<f32> = a.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let g: Vec<f32> = host
            .chunks(nv)
            .flat_map(|row| {
                row.iter()
                    .zip(&self.dt_bias)
                    .zip(&self.neg_a)
                    .map(|((&x, &b), &na)| na * softplus(x + b))
            })
            .collect();
        Tensor::from_vec(g, (n, nv), a.device())
    }
}

/// Zeroes, in every `(conv_state, state)` pair of `states`, the slot of each sequence of
/// `meta` whose step starts at position 0 (`context_len == query_len`): a new sequence starts
/// from zeros whatever its slot held before.
///
/// Errors: a candle error for a slot outside the pools or metadata of the wrong length.
pub fn reset_new_sequences(states: &[(Tensor, Tensor)], meta: &BatchMeta) -> Result<()> {
    if meta.state_slots.len() != meta.query_lens.len()
        || meta.context_lens.len() != meta.query_lens.len()
    {
        candle_core::bail!(
            "{} sequences but {} state slots and {} context lengths",
            meta.query_lens.len(),
            meta.state_slots.len(),
            meta.context_lens.len()
        );
    }
    for ((&q, &c), &slot) in meta
        .query_lens
        .iter()
        .zip(&meta.context_lens)
        .zip(&meta.state_slots)
    {
        if q != c {
            continue;
        }
        for t in states.iter().flat_map(|(conv, s)| [conv, s]) {
            let mut dims = t.dims().to_vec();
            dims[0] = 1;
            t.slice_set(
                &Tensor::zeros(dims, t.dtype(), t.device())?,
                0,
                slot as usize,
            )?;
        }
    }
    Ok(())
}
