//! The sparse mixture-of-experts block of Qwen3-VL-MoE and Qwen3.5-MoE decoder layers.
//!
//! Reference: transformers 5.24 `Qwen3VLMoeTextSparseMoeBlock` / `Qwen3_5MoeSparseMoeBlock`
//! with their `*TopKRouter` and `*Experts`: router logits `x Wᵀ` in the weights' dtype,
//! softmax in f32, `torch.topk` (its order, ties included: [`topk_torch_order`]), the k
//! weights divided by their sum and cast back; each expert hit, in increasing expert index,
//! runs `down(silu(gate(x)) · up(x))` on its tokens, scales by the routing weight and
//! `index_add_`s into a zero output; Qwen3.5-MoE adds `sigmoid(shared_expert_gate(x)) ·
//! shared_expert(x)`.
//!
//! Tokens are gathered per expert (`index_select`), each expert's projections run on its
//! rows only, and the rows are scattered back (`index_add`) in increasing expert order. On
//! the CPU the projections are [`verisample_kernels::PackedLinear`]s (packed once at load),
//! whose rows do not depend on the other rows, and a token's sum is `0 + y_a + y_b + …` over
//! its experts in increasing index whatever else is in the step: a token's output is
//! bitwise independent of the other tokens of the step (batch invariance). The same candle
//! ops run on any device with candle's matmul in fixed row tiles (the portable path's
//! [`verisample_kernels::TiledLinear`]: each expert's group of tokens padded to whole tiles), so
//! the same holds there by construction.
//!
//! Expert weights are read in three layouts (see [`SparseMoe::new`]).

use candle_core::{DType, Result, Tensor, D};
use candle_nn::VarBuilder;
use verisample_kernels::AttentionPath;

use crate::config::MlpNames;
use crate::config::MoeSpec;
use crate::layers::{fused_linear, linear, Act, Mlp, Proj};

/// One layer's sparse MoE block (`mlp.*` of a sparse layer).
pub struct SparseMoe {
    /// `mlp.gate`: `[hidden] → [num_experts]` router logits.
    router: Proj,
    /// Routed experts, by index.
    experts: Vec<Mlp>,
    /// Qwen3.5-MoE `shared_expert` and `shared_expert_gate` (`[hidden] → [1]`).
    shared: Option<(Mlp, Proj)>,
    top_k: usize,
}

impl SparseMoe {
    /// Loads the block under `vb` (a layer's `mlp`). Routed experts are read from either
    /// - `experts.gate_up_proj` `[E, 2·inner, hidden]` + `experts.down_proj` `[E, hidden, inner]`
    ///   (what transformers 5.24's `Qwen3VLMoe` saves),
    /// - the same two transposed, `[E, hidden, 2·inner]` + `[E, inner, hidden]` (the
    ///   published Qwen3-VL-MoE checkpoints; transformers' `Transpose(1, 2, check_dims)`
    ///   conversion: an exact `[E, 2·inner, hidden]` shape is taken as is, as here), or
    /// - per expert `experts.{e}.{gate,up,down}_proj.weight` (published Qwen3.5-MoE and what
    ///   transformers saves for it: the reverse of its `qwen2_moe` conversion).
    ///
    /// Projections for attention `path` ([`Proj::from_parts`]).
    ///
    /// Errors: a candle error naming a missing tensor or one whose shape fits no layout.
    pub fn new(
        spec: &MoeSpec,
        hidden: usize,
        act: Act,
        vb: VarBuilder,
        path: AttentionPath,
    ) -> Result<Self> {
        let (e_count, inner) = (spec.num_experts, spec.expert_intermediate_size);
        let router = linear(hidden, e_count, false, vb.pp("gate"), path)?;
        let ex = vb.pp("experts");
        let experts = if ex.contains_tensor("gate_up_proj") {
            let gate_up = oriented(&ex, "gate_up_proj", [e_count, 2 * inner, hidden])?;
            let down = oriented(&ex, "down_proj", [e_count, hidden, inner])?;
            (0..e_count)
                .map(|e| {
                    let up = Proj::from_parts(vec![(gate_up.get(e)?.contiguous()?, None)], path)?;
                    let down = Proj::from_parts(vec![(down.get(e)?.contiguous()?, None)], path)?;
                    Ok(Mlp::gated(up, down, inner, act))
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            (0..e_count)
                .map(|e| Mlp::new(hidden, inner, MlpNames::Gated, false, act, ex.pp(e), path))
                .collect::<Result<Vec<_>>>()?
        };
        let shared = spec
            .shared_expert_intermediate_size
            .map(|size| -> Result<_> {
                Ok((
                    Mlp::new(
                        hidden,
                        size,
                        MlpNames::Gated,
                        false,
                        act,
                        vb.pp("shared_expert"),
                        path,
                    )?,
                    fused_linear(hidden, &[(1, vb.pp("shared_expert_gate"))], false, path)?,
                ))
            })
            .transpose()?;
        Ok(Self {
            router,
            experts,
            shared,
            top_k: spec.top_k,
        })
    }

    /// `x` `[n, hidden]` → `[n, hidden]` (dtype of `x`).
    ///
    /// Errors: candle errors for a mis-shaped `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)?;
        let probs = candle_nn::ops::softmax_last_dim(
            &self.router.forward(x)?.to_dtype(DType::F32)?.contiguous()?,
        )?
        .to_vec2::<f32>()?;
        // Per expert: the tokens routed to it (increasing) and their weights.
        let mut rows: Vec<(Vec<u32>, Vec<f32>)> =
            vec![(Vec::new(), Vec::new()); self.experts.len()];
        for (t, p) in probs.iter().enumerate() {
            let picked = topk_torch_order(p, self.top_k);
            let values: Vec<f32> = picked.iter().map(|&e| p[e]).collect();
            let sum = values.iter().fold(0.0f32, |a, &v| a + v);
            for (&e, &v) in picked.iter().zip(&values) {
                rows[e].0.push(t as u32);
                rows[e].1.push(v / sum);
            }
        }
        // Every expert's tokens and weights in one upload each (on a GPU: two host→device
        // copies per layer, not two per active expert); each expert reads its run of them.
        let dev = x.device();
        let all_tokens: Vec<u32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
        let all_weights: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
        let count = all_tokens.len();
        let all_tokens = Tensor::from_vec(all_tokens, count, dev)?;
        let all_weights = Tensor::from_vec(all_weights, (count, 1), dev)?.to_dtype(x.dtype())?;
        let mut out = x.zeros_like()?;
        let mut start = 0;
        for (expert, (tokens, _)) in self.experts.iter().zip(&rows) {
            let len = tokens.len();
            if len == 0 {
                continue;
            }
            let idx = all_tokens.narrow(0, start, len)?;
            let w = all_weights.narrow(0, start, len)?;
            start += len;
            let y = expert
                .forward(&x.index_select(&idx, 0)?)?
                .broadcast_mul(&w)?;
            out = out.index_add(&idx, &y, 0)?;
        }
        if let Some((mlp, gate)) = &self.shared {
            let g = candle_nn::ops::sigmoid(&gate.forward(x)?)?;
            out = (out + mlp.forward(x)?.broadcast_mul(&g)?)?;
        }
        debug_assert_eq!(out.dims(), [n, x.dim(D::Minus1)?]);
        Ok(out)
    }
}

/// `<prefix>.<name>` of shape `want` `[E, a, b]`, or stored as `[E, b, a]` and transposed.
fn oriented(vb: &VarBuilder, name: &str, want: [usize; 3]) -> Result<Tensor> {
    let t = vb.get_unchecked(name)?;
    let [e, a, b] = want;
    match t.dims() {
        d if d == [e, a, b] => Ok(t),
        d if d == [e, b, a] => t.transpose(1, 2)?.contiguous(),
        d => candle_core::bail!(
            "{}.{name}: shape {d:?}, expected [{e}, {a}, {b}] or [{e}, {b}, {a}]",
            vb.prefix()
        ),
    }
}

/// The indices of the `k` largest of `values`, in the order `torch.topk(values, k)` returns
/// them on the CPU, ties included: PyTorch's `topk` (ATen `TopKImpl.h`, largest, sorted)
/// runs `std::nth_element` at `k - 1` then `std::sort` of the first `k - 1` with the
/// comparator `a > b` (NaN first); this replays libstdc++'s introselect (median-of-three
/// pivot, unguarded partition, insertion sort below 4 elements) and insertion sort step by
/// step, so equal probabilities come out as torch orders them (checked against torch in
/// `models/tests/moe_router.rs`). ATen takes `std::partial_sort` instead when
/// `k · 64 <= values.len()`; that case falls back to value order, ties by lower index.
///
/// Panics when `k` is 0 or exceeds `values.len()` (the config rules both out).
pub fn topk_torch_order(values: &[f32], k: usize) -> Vec<usize> {
    assert!(k >= 1 && k <= values.len(), "top-{k} of {}", values.len());
    let before = |a: (f32, usize), b: (f32, usize)| (a.0.is_nan() && !b.0.is_nan()) || a.0 > b.0;
    let mut q: Vec<(f32, usize)> = values.iter().copied().zip(0..).collect();
    if k * 64 <= q.len() {
        q.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        return q[..k].iter().map(|p| p.1).collect();
    }
    let insertion_sort = |q: &mut [(f32, usize)]| {
        for i in 1..q.len() {
            let v = q[i];
            let mut j = i;
            if before(v, q[0]) {
                q.copy_within(0..i, 1);
                j = 0;
            } else {
                while before(v, q[j - 1]) {
                    q[j] = q[j - 1];
                    j -= 1;
                }
            }
            q[j] = v;
        }
    };
    let nth = k - 1;
    let (mut first, mut last) = (0usize, q.len());
    let mut depth = 2 * (usize::BITS - 1 - q.len().leading_zeros()) as usize;
    while last - first > 3 {
        if depth == 0 {
            // libstdc++ switches to a heap select here (only after 2·log2(n) bad pivots).
            q[first..last].sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            break;
        }
        depth -= 1;
        let (a, b, c) = (first + 1, first + (last - first) / 2, last - 1);
        let median = if before(q[a], q[b]) {
            if before(q[b], q[c]) {
                b
            } else if before(q[a], q[c]) {
                c
            } else {
                a
            }
        } else if before(q[a], q[c]) {
            a
        } else if before(q[b], q[c]) {
            c
        } else {
            b
        };
        q.swap(first, median);
        let (mut lo, mut hi) = (first + 1, last);
        let cut = loop {
            while before(q[lo], q[first]) {
                lo += 1;
            }
            hi -= 1;
            while before(q[first], q[hi]) {
                hi -= 1;
            }
            if lo >= hi {
                break lo;
            }
            q.swap(lo, hi);
            lo += 1;
        };
        if cut <= nth {
            first = cut;
        } else {
            last = cut;
        }
    }
    if last - first <= 3 {
        insertion_sort(&mut q[first..last]);
    }
    insertion_sort(&mut q[..nth]);
    q[..k].iter().map(|p| p.1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A block of `e` experts of `inner` over `hidden`, top-2, with a shared expert, from the
    /// same weights twice: packed CPU projections (what the CPU runs) and candle's `Linear`
    /// (the portable projections other devices run, through the same routing code): candle's
    /// matmul in fixed row tiles.
    fn blocks(hidden: usize, inner: usize, e: usize) -> (SparseMoe, SparseMoe) {
        let dev = Device::Cpu;
        let mut seed = 0;
        let mut w = |rows: usize, cols: usize| {
            seed += 1;
            Tensor::from_vec(
                verisample_kernels::lcg_uniform(seed, rows * cols, 0.3),
                (rows, cols),
                &dev,
            )
            .unwrap()
        };
        let router = w(e, hidden);
        let experts: Vec<(Tensor, Tensor)> = (0..e)
            .map(|_| (w(2 * inner, hidden), w(hidden, inner)))
            .collect();
        let shared = (w(2 * inner, hidden), w(hidden, inner), w(1, hidden));
        let build = |portable: bool| {
            let path = if portable {
                AttentionPath::Portable
            } else {
                AttentionPath::Native
            };
            let proj = |t: &Tensor| Proj::from_parts(vec![(t.clone(), None)], path).unwrap();
            SparseMoe {
                router: proj(&router),
                experts: experts
                    .iter()
                    .map(|(up, down)| Mlp::gated(proj(up), proj(down), inner, Act::Silu))
                    .collect(),
                shared: Some((
                    Mlp::gated(proj(&shared.0), proj(&shared.1), inner, Act::Silu),
                    proj(&shared.2),
                )),
                top_k: 2,
            }
        };
        (build(false), build(true))
    }

    /// The portable (candle-op) expert path equals the packed CPU one, and a token's output
    /// on either path is bitwise the same alone as inside a batch (tokens gathered per expert
    /// onto batch-invariant linears). Catches: tokens scattered back to the wrong rows, a
    /// routing weight applied to another token, an expert's run of the uploaded indices
    /// misaligned, an expert's group of tokens multiplied in a shape that follows its size.
    #[test]
    fn portable_experts_equal_the_packed_ones_and_tokens_are_batch_invariant() {
        let (hidden, inner, e, n) = (32, 24, 6, 40);
        let (packed, portable) = blocks(hidden, inner, e);
        let x = Tensor::from_vec(
            verisample_kernels::lcg_uniform(99, n * hidden, 1.0),
            (n, hidden),
            &Device::Cpu,
        )
        .unwrap();
        let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let a = flat(packed.forward(&x).unwrap());
        let b = flat(portable.forward(&x).unwrap());
        let d = verisample_kernels::max_abs_diff(&a, &b);
        assert!(d <= 1e-5, "portable vs packed experts: max |Δ| {d}");
        for t in [0, 7, n - 1] {
            let alone = flat(packed.forward(&x.narrow(0, t, 1).unwrap()).unwrap());
            assert_eq!(alone, a[t * hidden..(t + 1) * hidden], "token {t}");
            let alone = flat(portable.forward(&x.narrow(0, t, 1).unwrap()).unwrap());
            assert_eq!(alone, b[t * hidden..(t + 1) * hidden], "portable token {t}");
        }
    }
}
