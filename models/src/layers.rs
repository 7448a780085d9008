//! Layers shared by every tower and decoder: norms, activations, MLPs and rotary embeddings
//! (the vision towers' segment attention is `verisample_kernels::segment_attention`).
//! Architecture differences are arguments.

use candle_core::{DType, Module, Result, Tensor, D};
use candle_nn::VarBuilder;
use verisample_kernels::{AttentionPath, PackedLinear, TiledLinear};

use crate::config::MlpNames;

/// Activation functions used by the Qwen-VL families (transformers `ACT2FN` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `silu`.
    Silu,
    /// `quick_gelu`: `x * sigmoid(1.702 x)`.
    QuickGelu,
    /// `gelu` (exact, erf).
    GeluErf,
    /// `gelu_pytorch_tanh` (tanh approximation).
    GeluTanh,
}

impl Act {
    /// Parses a transformers activation name.
    ///
    /// Errors: a candle `Msg` error naming the unsupported activation.
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name {
            "silu" | "swish" => Self::Silu,
            "quick_gelu" => Self::QuickGelu,
            "gelu" => Self::GeluErf,
            "gelu_pytorch_tanh" | "gelu_new" => Self::GeluTanh,
            other => candle_core::bail!("unsupported activation `{other}`"),
        })
    }

    /// Applies the activation element-wise.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Silu => x.silu(),
            Self::QuickGelu => x.mul(&candle_nn::ops::sigmoid(&(x * 1.702)?)?),
            Self::GeluErf => x.gelu_erf(),
            Self::GeluTanh => x.gelu(),
        }
    }
}

/// A linear projection `y = x Wᵀ (+ b)`, possibly fused: several checkpoint linears with one
/// input width side by side (q/k/v, gate/up), their outputs concatenated in order.
///
/// Both kinds are batch-invariant: a row's output does not depend on the other rows. On the
/// CPU's own kernels (native path, and the flash oracle) the weights are packed once, here,
/// for [`PackedLinear`]; on the portable path (CUDA, Metal, or the CPU when asked for it)
/// candle's matmul over fixed row tiles ([`TiledLinear`]).
#[derive(Debug, Clone)]
pub enum Proj {
    /// The packed CPU kernel.
    Packed(PackedLinear),
    /// candle's matmul in row tiles of [`verisample_kernels::LINEAR_TILE_ROWS`], any device.
    Portable(TiledLinear),
}

impl Proj {
    /// Fuses `parts` (weight `[n_i, k]`, optional bias `[n_i]`, one device) into one
    /// projection of `Σ n_i` outputs for attention `path`: packed where the path runs the
    /// CPU's own kernels ([`AttentionPath::uses_cpu_kernels`]), tiled otherwise.
    ///
    /// Errors: a candle error for mismatched shapes or devices, or no parts.
    pub fn from_parts(parts: Vec<(Tensor, Option<Tensor>)>, path: AttentionPath) -> Result<Self> {
        let Some((first, _)) = parts.first() else {
            candle_core::bail!("a projection needs at least one weight");
        };
        if path.uses_cpu_kernels(first.device()) {
            return Ok(Self::Packed(PackedLinear::pack(&parts)?));
        }
        let weights: Vec<&Tensor> = parts.iter().map(|(w, _)| w).collect();
        let bias = if parts.iter().any(|(_, b)| b.is_some()) {
            let biases = parts
                .iter()
                .map(|(w, b)| match b {
                    Some(b) => Ok(b.clone()),
                    None => Tensor::zeros(w.dim(0)?, w.dtype(), w.device()),
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&biases, 0)?)
        } else {
            None
        };
        Ok(Self::Portable(TiledLinear::new(
            Tensor::cat(&weights, 0)?,
            bias,
        )))
    }

    /// `[.., k] → [.., Σ n_i]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Packed(p) => Ok(p.forward(x)?),
            Self::Portable(l) => l.forward(x),
        }
    }
}

/// A linear layer `y = x Wᵀ (+ b)` loaded from `<prefix>.weight` `[out_dim, in_dim]` (and
/// `.bias`), for attention `path` ([`Proj::from_parts`]).
pub fn linear(
    in_dim: usize,
    out_dim: usize,
    bias: bool,
    vb: VarBuilder,
    path: AttentionPath,
) -> Result<Proj> {
    fused_linear(in_dim, &[(out_dim, vb)], bias, path)
}

/// Linears `(out_dim_i, prefix_i)` of one input width loaded as one fused [`Proj`] for
/// attention `path`.
pub fn fused_linear(
    in_dim: usize,
    parts: &[(usize, VarBuilder)],
    bias: bool,
    path: AttentionPath,
) -> Result<Proj> {
    let parts = parts
        .iter()
        .map(|(out, vb)| {
            let w = vb.get((*out, in_dim), "weight")?;
            let b = bias.then(|| vb.get(*out, "bias")).transpose()?;
            Ok((w, b))
        })
        .collect::<Result<Vec<_>>>()?;
    Proj::from_parts(parts, path)
}

/// RMSNorm (`weight * x / sqrt(mean(x²) + eps)`), transformers `Qwen2RMSNorm`; or Qwen3.5's
/// zero-centred variant (`Qwen3_5RMSNorm`: `x̂ · (1 + w)` computed in f32, cast back).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// The scale applied after normalising: `w`, or `1 + w` (f32) when zero-centred.
    weight: Tensor,
    eps: f32,
    /// Compute in f32 and cast back (the zero-centred norm).
    in_f32: bool,
}

impl RmsNorm {
    /// Loads `<prefix>.weight` `[dim]`.
    pub fn new(dim: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Self::load(dim, eps, false, vb)
    }

    /// Loads `<prefix>.weight` `[dim]`; `zero_centered`: the weight is stored as an offset
    /// from 1 (Qwen3.5, `TextSpec::zero_centered_norm`) and the norm runs in f32 as
    /// transformers' `Qwen3_5RMSNorm` (`_norm(x.float()) * (1.0 + w.float())`, then
    /// `type_as(x)`).
    pub fn load(dim: usize, eps: f64, zero_centered: bool, vb: VarBuilder) -> Result<Self> {
        let w = vb.get(dim, "weight")?;
        Ok(Self {
            weight: if zero_centered {
                (w.to_dtype(DType::F32)? + 1.0)?
            } else {
                w
            },
            eps: eps as f32,
            in_f32: zero_centered,
        })
    }

    /// Normalises over the last dimension (output dtype = input dtype).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.in_f32 {
            let y = candle_nn::ops::rms_norm(
                &x.to_dtype(DType::F32)?.contiguous()?,
                &self.weight,
                self.eps,
            )?;
            return y.to_dtype(x.dtype());
        }
        candle_nn::ops::rms_norm(&x.contiguous()?, &self.weight, self.eps)
    }
}

/// LayerNorm or RMSNorm, per architecture.
#[derive(Debug, Clone)]
pub enum Norm {
    /// `nn.LayerNorm` with weight and bias.
    Layer(candle_nn::LayerNorm),
    /// RMSNorm with weight.
    Rms(RmsNorm),
}

impl Norm {
    /// Loads a LayerNorm (`rms == false`) or an RMSNorm of width `dim`.
    pub fn new(rms: bool, dim: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(if rms {
            Self::Rms(RmsNorm::new(dim, eps, vb)?)
        } else {
            Self::Layer(candle_nn::layer_norm(dim, eps, vb)?)
        })
    }

    /// Normalises over the last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Layer(n) => n.forward(&x.contiguous()?),
            Self::Rms(n) => n.forward(x),
        }
    }
}

/// Feed-forward block: gated `down(act(gate(x)) * up(x))` (gate and up fused into one
/// projection) or plain `fc2(act(fc1(x)))`.
#[derive(Debug, Clone)]
pub struct Mlp {
    /// `[gate | up]` (`2 · inner` outputs) when gated, else `fc1`.
    up: Proj,
    down: Proj,
    act: Act,
    /// Width of the gate half of `up` when gated.
    gate: Option<usize>,
}

impl Mlp {
    /// Loads an MLP `dim → inner → dim` with the given names, bias and activation, its
    /// projections for attention `path` ([`Proj::from_parts`]).
    pub fn new(
        dim: usize,
        inner: usize,
        names: MlpNames,
        bias: bool,
        act: Act,
        vb: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        let (up, down, gate) = match names {
            MlpNames::Gated => (
                fused_linear(
                    dim,
                    &[(inner, vb.pp("gate_proj")), (inner, vb.pp("up_proj"))],
                    bias,
                    path,
                )?,
                "down_proj",
                Some(inner),
            ),
            MlpNames::GateUp => (
                linear(dim, 2 * inner, bias, vb.pp("gate_up_proj"), path)?,
                "down_proj",
                Some(inner),
            ),
            MlpNames::Fc => (linear(dim, inner, bias, vb.pp("fc1"), path)?, "fc2", None),
            MlpNames::LinearFc => (
                linear(dim, inner, bias, vb.pp("linear_fc1"), path)?,
                "linear_fc2",
                None,
            ),
        };
        Ok(Self {
            up,
            down: linear(inner, dim, bias, vb.pp(down), path)?,
            act,
            gate,
        })
    }

    /// A gated MLP from its fused `[gate | up]` projection (`2 · inner` outputs) and `down`
    /// (an MoE expert whose weights come from a fused 3-D stack).
    pub fn gated(up: Proj, down: Proj, inner: usize, act: Act) -> Self {
        Self {
            up,
            down,
            act,
            gate: Some(inner),
        }
    }

    /// `[n, dim] → [n, dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.up.forward(x)?;
        let h = match self.gate {
            Some(inner)
                if self.act == Act::Silu
                    && h.device().is_cpu()
                    && h.dtype() == DType::F32
                    && h.is_contiguous()
                    && inner > 0 =>
            {
                h.apply_op1_no_bwd(&SiluMul { inner })?
            }
            Some(inner) => {
                (self.act.forward(&h.narrow(D::Minus1, 0, inner)?)?
                    * h.narrow(D::Minus1, inner, inner)?)?
            }
            None => self.act.forward(&h)?,
        };
        self.down.forward(&h)
    }
}

/// `silu(gate) · up` of a fused gate/up projection's output `h` `[.., 2 · inner]` (gate the
/// first `inner` columns, up the rest) → `[n, inner]`, in one pass over `h` into one fresh
/// buffer `[.., inner]` (f32, CPU): the decode step's gated MLP otherwise copies the gate half out, writes
/// SiLU into a second buffer and the product into a third. Per element exactly candle's
/// `silu` (`g / (1 + exp(-g))`, candle-core's `op.rs`) then its `mul`, so the bits are
/// those of `h.narrow(..).silu()? * h.narrow(..)`.
struct SiluMul {
    inner: usize,
}

impl candle_core::CustomOp1 for SiluMul {
    fn name(&self) -> &'static str {
        "silu_mul"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let (candle_core::CpuStorage::F32(h), Some((start, end))) = (s, l.contiguous_offsets())
        else {
            candle_core::bail!("silu_mul: a contiguous f32 input only");
        };
        let mut dims = l.dims().to_vec();
        let width = dims.last().copied().unwrap_or(0);
        if self.inner == 0 || width != 2 * self.inner {
            candle_core::bail!(
                "silu_mul: {width} columns for an inner size of {}",
                self.inner
            );
        }
        // Row by row into a buffer of the exact size (a `flat_map` collect grows its buffer
        // as it goes).
        let mut out = Vec::with_capacity((end - start) / 2);
        for row in h[start..end].chunks_exact(width) {
            let (gate, up) = row.split_at(self.inner);
            out.extend(
                gate.iter()
                    .zip(up)
                    .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u),
            );
        }
        if let Some(last) = dims.last_mut() {
            *last = self.inner;
        }
        Ok((candle_core::CpuStorage::F32(out), dims.into()))
    }
}

/// Rotary inverse frequencies `1 / theta^(2i/dim)` for `i < dim/2`, computed in f32 as
/// transformers does (`torch.arange(0, dim, 2, dtype=float) / dim`).
pub fn inv_freq(dim: usize, theta: f64) -> Vec<f32> {
    (0..dim / 2)
        .map(|i| 1.0f32 / (theta as f32).powf((2 * i) as f32 / dim as f32))
        .collect()
}

/// Applies rotary embeddings (rotate-half layout) to `x` `[n, heads, head_dim]` with `cos`/`sin`
/// `[n, rotary_dim / 2]` (the first half of transformers' duplicated `[freq, freq]` tables).
/// When `rotary_dim < head_dim` (Qwen3.5's partial rotary) only the leading `rotary_dim`
/// dimensions of each head rotate and the rest pass through, as transformers'
/// `apply_rotary_pos_emb` with `q[..., :rotary_dim]` / `q[..., rotary_dim:]`.
///
/// Errors: a candle error when `rotary_dim` exceeds `head_dim` or shapes disagree.
pub fn apply_rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (head_dim, rotary_dim) = (x.dim(D::Minus1)?, 2 * cos.dim(D::Minus1)?);
    if rotary_dim < head_dim {
        let rotated = apply_rotary(&x.narrow(D::Minus1, 0, rotary_dim)?, cos, sin)?;
        let pass = x.narrow(D::Minus1, rotary_dim, head_dim - rotary_dim)?;
        return Tensor::cat(&[rotated, pass], D::Minus1);
    }
    let dtype = x.dtype();
    let x4 = x.to_dtype(cos.dtype())?.unsqueeze(0)?.contiguous()?;
    candle_nn::rotary_emb::rope_thd(&x4, cos, sin)?
        .squeeze(0)?
        .to_dtype(dtype)
}

/// `cos`/`sin` tables `[n, half]` from per-token angles `angles[n][half]` (f32, as torch).
pub fn cos_sin(
    angles: &[f32],
    n: usize,
    half: usize,
    device: &candle_core::Device,
) -> Result<(Tensor, Tensor)> {
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    Ok((
        Tensor::from_vec(cos, (n, half), device)?,
        Tensor::from_vec(sin, (n, half), device)?,
    ))
}

/// Sums the last dimension after an element-wise product (a small helper for weighted gathers).
pub fn weighted_sum(rows: &Tensor, weights: &Tensor) -> Result<Tensor> {
    rows.broadcast_mul(&weights.unsqueeze(D::Minus1)?)?.sum(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fused `silu(gate) · up` is bitwise candle's `silu` then `mul`, over values that
    /// reach exp's under- and overflow and SiLU's sign change.
    #[test]
    fn silu_mul_is_bitwise_candles_silu_then_mul() -> Result<()> {
        let (rows, inner) = (3, 37);
        let values: Vec<f32> = (0..rows * 2 * inner)
            .map(|i| (i as f32 * 0.731).sin() * (1.0 + (i % 7) as f32 * 15.0))
            .collect();
        let h = Tensor::from_vec(values, (rows, 2 * inner), &candle_core::Device::Cpu)?;
        let fused = h.apply_op1_no_bwd(&SiluMul { inner })?;
        let reference = (h.narrow(1, 0, inner)?.silu()? * h.narrow(1, inner, inner)?)?;
        assert_eq!(fused.dims(), [rows, inner]);
        let (a, b) = (
            fused.flatten_all()?.to_vec1::<f32>()?,
            reference.flatten_all()?.to_vec1::<f32>()?,
        );
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(h.apply_op1_no_bwd(&SiluMul { inner: inner + 1 }).is_err());
        Ok(())
    }
}
