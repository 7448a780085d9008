//! [`TiledLinear`]: the linear layer of the portable path (every device but the CPU's own
//! kernels: CUDA, Metal, and the CPU when asked for the portable path), `y = x Wᵀ + b` through
//! candle's matmul over row tiles of one fixed height, so that a row's output is bitwise the
//! same whatever the other rows of the call.
//!
//! Why tiles: a GEMM library picks its algorithm (tile sizes, split-K, instruction) from the
//! problem's shape `(m, n, k)`, dtype and device — cuBLAS through its heuristics, the CPU's
//! `gemm` crate through its blocking — and with it the order in which each output element's
//! `k` products are summed. Fed the whole batch, a row's logits would change with the number
//! of rows beside it (Thinking Machines Lab, "Defeating Nondeterminism in LLM Inference",
//! 2025). Here every matmul has `m =` [`LINEAR_TILE_ROWS`] (the tail tile padded with zero
//! rows), so for one weight every call has one shape, one algorithm and one reduction order,
//! and an output row depends only on its own input row: prefill chunks, decode rows, MoE
//! expert groups and the LM head all meet the same kernel whatever the batch, the chunking or
//! a recompute after preemption.
//!
//! The tiles are separate matmul calls, not one batched call: cuBLAS's heuristics also read the
//! batch count, which would vary with the number of tiles.

use candle_core::{Result, Tensor};

/// Rows per matmul of [`TiledLinear`]: 128.
///
/// Why 128: a decode step on a GPU reads every weight once whatever its row count below the
/// ridge point of the chip, so rows up to that point cost no extra time. On an H200 (bf16
/// tensor cores ≈ 790 TFLOP/s dense, HBM3e ≈ 4.8 TB/s) a matmul of `m` rows does `2·m·n·k`
/// FLOP over `2·n·k` bytes of bf16 weights, `m` FLOP per byte, against a ridge of
/// 790 / 4.8 ≈ 165: a tile of 128 rows stays memory-bound, so padding a decode step of 1–127
/// sequences up to one tile costs about nothing, and a prefill runs at ≈ 128/165 of the
/// compute roof per tile (less the L2 reuse of weights between consecutive tiles). 64 would
/// halve prefill efficiency; 256 would make decode compute-bound (≈ 1.6× its memory time).
/// In f32 (no tensor cores: ≈ 67 TFLOP/s, 4-byte weights, a ridge near 28 rows) and on the
/// CPU, the padding is paid in arithmetic: see BENCHMARKS.md ("Batch invariance on the
/// portable path").
pub const LINEAR_TILE_ROWS: usize = 128;

/// A linear layer `y = x Wᵀ (+ b)` over candle's matmul in fixed row tiles (module docs).
#[derive(Debug, Clone)]
pub struct TiledLinear {
    /// `[out, in]`, the checkpoint's orientation.
    weight: Tensor,
    /// `[out]`.
    bias: Option<Tensor>,
}

impl TiledLinear {
    /// From `weight` `[out, in]` and an optional `bias` `[out]` (one device and dtype).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self { weight, bias }
    }

    /// The weight `[out, in]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// `x` `[.., in]` → `[.., out]` in the weights' dtype: the rows of `x` flattened, padded
    /// with zero rows to a multiple of [`LINEAR_TILE_ROWS`], one matmul per tile, the bias added
    /// element-wise.
    ///
    /// Errors: candle errors for a last dimension other than `in`, or another device or dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (out, k) = self.weight.dims2()?;
        let mut dims = x.dims().to_vec();
        if dims.last() != Some(&k) {
            candle_core::bail!(
                "linear of {k} inputs applied to a tensor of shape {:?}",
                x.dims()
            );
        }
        let m = x.elem_count() / k.max(1);
        if let Some(last) = dims.last_mut() {
            *last = out;
        }
        if m == 0 {
            return Tensor::zeros(dims, self.weight.dtype(), self.weight.device());
        }
        let rows = x.reshape((m, k))?;
        let padded = m.next_multiple_of(LINEAR_TILE_ROWS);
        let rows = if padded > m {
            let pad = Tensor::zeros((padded - m, k), x.dtype(), x.device())?;
            Tensor::cat(&[&rows, &pad], 0)?
        } else {
            rows.contiguous()?
        };
        let wt = self.weight.t()?;
        let tiles = (0..padded / LINEAR_TILE_ROWS)
            .map(|t| {
                rows.narrow(0, t * LINEAR_TILE_ROWS, LINEAR_TILE_ROWS)?
                    .matmul(&wt)
            })
            .collect::<Result<Vec<_>>>()?;
        let y = if tiles.len() == 1 {
            tiles.into_iter().next().expect("one tile")
        } else {
            Tensor::cat(&tiles, 0)?
        };
        let y = if padded > m { y.narrow(0, 0, m)? } else { y };
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        y.reshape(dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn values(seed: u64, n: usize) -> Vec<f32> {
        crate::lcg_uniform(seed, n, 1.0)
    }

    /// Matches `x Wᵀ + b` computed directly, for row counts around the tile height (one row,
    /// a partial tile, exactly one, a partial second), and keeps leading dimensions.
    #[test]
    fn equals_the_plain_product_at_every_row_count() -> Result<()> {
        let (k, n) = (24, 10);
        let dev = Device::Cpu;
        let w = Tensor::from_vec(values(1, n * k), (n, k), &dev)?;
        let b = Tensor::from_vec(values(2, n), n, &dev)?;
        let layer = TiledLinear::new(w.clone(), Some(b.clone()));
        for m in [1, 5, LINEAR_TILE_ROWS, LINEAR_TILE_ROWS + 3] {
            let x = Tensor::from_vec(values(3, m * k), (m, k), &dev)?;
            let want = x.matmul(&w.t()?)?.broadcast_add(&b)?.to_vec2::<f32>()?;
            let got = layer.forward(&x)?.to_vec2::<f32>()?;
            for (r, (g, e)) in got.iter().zip(&want).enumerate() {
                for (a, c) in g.iter().zip(e) {
                    assert!((a - c).abs() <= 1e-5, "m {m} row {r}: {a} vs {c}");
                }
            }
        }
        let x3 = Tensor::from_vec(values(4, 2 * 3 * k), (2, 3, k), &dev)?;
        assert_eq!(layer.forward(&x3)?.dims(), [2, 3, n]);
        assert_eq!(
            layer
                .forward(&Tensor::zeros((0, k), DType::F32, &dev)?)?
                .dims(),
            [0, n]
        );
        assert!(layer
            .forward(&Tensor::zeros((2, k + 1), DType::F32, &dev)?)
            .is_err());
        Ok(())
    }
}
