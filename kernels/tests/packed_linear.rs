//! [`PackedLinear`] against a naive f64 product, and its batch invariance: row `i` of the
//! output is bitwise the same computed alone or among m = 2, 7, 16, 23, 64, ROW_BLOCK + 1 and
//! 2 ROW_BLOCK + 7 rows (f32 and bf16 weights). Sizes straddle a partial last panel
//! (`n % PANEL_COLS != 0`), a partial last depth block (`k % DEPTH_BLOCK != 0`), partial row
//! tiles (`m % PackedLinear::tile_rows() != 0`) and a partial last row block
//! (`m % ROW_BLOCK != 0`).

use candle_core::{DType, Device, Tensor};
use half::bf16;
use verisample_kernels::{
    KernelError, PackedLinear, DEPTH_BLOCK, PANEL_COLS, ROW_BLOCK, TILE_ROWS,
};

/// Row counts of the batch-invariance test.
const BATCHES: [usize; 8] = [1, 2, 7, 16, 23, 64, ROW_BLOCK + 1, 2 * ROW_BLOCK + 7];

/// Deterministic pseudo-random floats in [-2, 2) (64-bit LCG, Knuth's constants).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 2.0)
}

const K: usize = DEPTH_BLOCK + 45;
/// Five panels, the last partial: an odd count, so AVX-512's two-panel tile ends in a one-panel
/// unit.
const N: usize = 4 * PANEL_COLS + 5;

fn weight(dtype: DType) -> Tensor {
    Tensor::from_vec(lcg(1, N * K), (N, K), &Device::Cpu)
        .and_then(|w| w.to_dtype(dtype))
        .expect("weight")
}

fn bias() -> Tensor {
    Tensor::from_vec(lcg(2, N), N, &Device::Cpu).expect("bias")
}

/// `x Wᵀ + b` in f64 from the weights as stored (bf16 rounding included), and the bound
/// `Σ_k |x w| + |b|` per element that scales the rounding error.
fn naive(x: &[f32], w: &Tensor, b: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let w: Vec<f32> = w
        .to_dtype(DType::F32)
        .and_then(|w| w.flatten_all())
        .and_then(|w| w.to_vec1())
        .expect("weights");
    let m = x.len() / K;
    let (mut y, mut mag) = (vec![0f64; m * N], vec![0f64; m * N]);
    for i in 0..m {
        for j in 0..N {
            let (mut s, mut a) = (b[j] as f64, (b[j] as f64).abs());
            for k in 0..K {
                let p = x[i * K + k] as f64 * w[j * K + k] as f64;
                s += p;
                a += p.abs();
            }
            y[i * N + j] = s;
            mag[i * N + j] = a;
        }
    }
    (y, mag)
}

#[test]
fn matches_the_naive_product_in_f64() {
    // 9 rows: one row block; 2 ROW_BLOCK + 7: three, the last partial.
    for (dtype, m) in [
        (DType::F32, 9),
        (DType::BF16, 9),
        (DType::F32, 2 * ROW_BLOCK + 7),
        (DType::BF16, 2 * ROW_BLOCK + 7),
    ] {
        let w = weight(dtype);
        let lin = PackedLinear::pack(&[(w.clone(), Some(bias()))]).expect("pack");
        let x = lcg(3, m * K);
        let y = lin.matmul_f32(&x);
        let (want, mag) = naive(&x, &w, &lcg(2, N));
        assert_eq!(y.len(), m * N);
        for ((&got, &want), &mag) in y.iter().zip(&want).zip(&mag) {
            // f32 accumulation of K products: |error| ≤ (K + 1) ε Σ|x w| (Higham, Thm. 3.1).
            let tol = (K + 1) as f64 * f32::EPSILON as f64 * mag;
            assert!(
                (got as f64 - want).abs() <= tol,
                "{dtype:?}: got {got}, want {want}, tol {tol}"
            );
        }
        // The error is far below the worst-case bound: not a coincidence of a loose check.
        let max_err = y
            .iter()
            .zip(&want)
            .map(|(&g, &w)| (g as f64 - w).abs())
            .fold(0.0, f64::max);
        assert!(max_err < 1e-3, "{dtype:?}: max error {max_err}");
    }
}

#[test]
fn rows_are_bitwise_the_same_at_every_batch_size() {
    let tile = PackedLinear::tile_rows();
    assert!((1..=TILE_ROWS).contains(&tile), "tile of {tile} rows");
    assert!(
        BATCHES.iter().any(|&m| m > tile && m % tile != 0),
        "some batch must end in a partial tile after a full one"
    );
    let total = BATCHES[BATCHES.len() - 1];
    assert_ne!(
        total % tile,
        0,
        "the last row block must end in a partial tile"
    );
    for dtype in [DType::F32, DType::BF16] {
        let lin = PackedLinear::pack(&[(weight(dtype), Some(bias()))]).expect("pack");
        let x = lcg(4, total * K);
        let all = lin.matmul_f32(&x);
        for m in BATCHES {
            // Every window of m rows, at offsets that move rows between tile and block positions.
            for start in [0, total - m, (total - m) / 2, 1.min(total - m)] {
                let part = lin.matmul_f32(&x[start * K..(start + m) * K]);
                let same = part
                    .iter()
                    .zip(&all[start * N..(start + m) * N])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{dtype:?}: rows {start}..{} differ at m = {m}",
                    start + m
                );
            }
        }
    }
}

#[test]
fn a_fused_projection_equals_its_parts_bitwise() {
    let w = Tensor::from_vec(lcg(5, 40 * K), (40, K), &Device::Cpu).expect("w");
    let (w1, w2, w3) = (
        w.narrow(0, 0, 7).expect("w1"),
        w.narrow(0, 7, 20).expect("w2"),
        w.narrow(0, 27, 13).expect("w3"),
    );
    let b1 = Tensor::from_vec(lcg(6, 7), 7, &Device::Cpu).expect("b1");
    let fused = PackedLinear::pack(&[
        (w1.clone(), Some(b1.clone())),
        (w2.clone(), None),
        (w3.clone(), None),
    ])
    .expect("fused");
    assert_eq!((fused.in_dim(), fused.out_dim()), (K, 40));
    let x = lcg(7, 5 * K);
    let y = fused.matmul_f32(&x);
    let mut offset = 0;
    for (w, b) in [(w1, Some(b1)), (w2, None), (w3, None)] {
        let n = w.dim(0).expect("n");
        let alone = PackedLinear::pack(&[(w, b)]).expect("part").matmul_f32(&x);
        for r in 0..5 {
            let fused_row = &y[r * 40 + offset..r * 40 + offset + n];
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(fused_row), bits(&alone[r * n..(r + 1) * n]), "row {r}");
        }
        offset += n;
    }
}

#[test]
fn forward_keeps_leading_dims_and_the_input_dtype() {
    let lin = PackedLinear::pack(&[(weight(DType::BF16), None)]).expect("pack");
    let x = Tensor::from_vec(lcg(8, 6 * K), (2, 3, K), &Device::Cpu).expect("x");
    let y = lin.forward(&x).expect("f32 forward");
    assert_eq!((y.dims(), y.dtype()), (&[2, 3, N][..], DType::F32));
    let want = lin.matmul_f32(&lcg(8, 6 * K));
    assert_eq!(
        y.flatten_all().and_then(|y| y.to_vec1::<f32>()).ok(),
        Some(want)
    );
    // A bf16 input is widened, multiplied in f32 and rounded once at the end.
    let xb = x.to_dtype(DType::BF16).expect("bf16 x");
    let yb = lin.forward(&xb).expect("bf16 forward");
    assert_eq!(yb.dtype(), DType::BF16);
    let xw: Vec<f32> = xb
        .to_dtype(DType::F32)
        .and_then(|x| x.flatten_all())
        .and_then(|x| x.to_vec1())
        .expect("x");
    let want: Vec<bf16> = lin
        .matmul_f32(&xw)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    assert_eq!(
        yb.flatten_all().and_then(|y| y.to_vec1::<bf16>()).ok(),
        Some(want)
    );
}

#[test]
fn mismatched_shapes_are_errors() {
    let w = weight(DType::F32);
    let other = Tensor::zeros((4, K + 1), DType::F32, &Device::Cpu).expect("other");
    let err = PackedLinear::pack(&[(w.clone(), None), (other, None)]).unwrap_err();
    assert!(matches!(err, KernelError::Invalid { .. }), "{err}");
    let short_bias = Tensor::zeros(N - 1, DType::F32, &Device::Cpu).expect("bias");
    assert!(PackedLinear::pack(&[(w.clone(), Some(short_bias))]).is_err());
    assert!(PackedLinear::pack(&[]).is_err());
    let lin = PackedLinear::pack(&[(w, None)]).expect("pack");
    let x = Tensor::zeros((3, K - 1), DType::F32, &Device::Cpu).expect("x");
    assert!(matches!(lin.forward(&x), Err(KernelError::Invalid { .. })));
}

/// A tied embedding reads its rows out of the LM head's panels: they must be the weight's
/// rows exactly (bf16 widened), including rows in the padded last panel.
#[test]
fn weight_rows_are_the_rows_of_the_packed_weight() {
    for dtype in [DType::F32, DType::BF16] {
        let w = weight(dtype);
        let lin = PackedLinear::pack(&[(w.clone(), None)]).expect("pack");
        assert_eq!(lin.weight_dtype(), dtype);
        let rows = [0u32, 17, (N - 1) as u32, 3, 17];
        let got = lin.weight_rows(&rows).expect("rows");
        let want: Vec<f32> = rows
            .iter()
            .flat_map(|&r| {
                w.get(r as usize)
                    .and_then(|row| row.to_dtype(DType::F32))
                    .and_then(|row| row.to_vec1::<f32>())
                    .expect("row")
            })
            .collect();
        assert_eq!(got, want, "{dtype:?}");
        let err = lin.weight_rows(&[N as u32]).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("row {N} of a weight with {N} rows")),
            "{err}"
        );
    }
}

/// f32 weights widened from bf16 (a bf16 checkpoint loaded as f32) are stored as bf16 panels,
/// and the products are bitwise those of f32 panels: a weight with one value off the bf16 grid
/// (in its last row only) is stored as f32, and every other output column must agree exactly.
#[test]
fn f32_weights_on_the_bf16_grid_pack_as_bf16_with_bitwise_the_same_products() {
    let widened = weight(DType::BF16).to_dtype(DType::F32).expect("widen");
    let mut values: Vec<f32> = widened.flatten_all().and_then(|w| w.to_vec1()).expect("w");
    values[(N - 1) * K + 7] += 1e-3;
    let off_grid = Tensor::from_vec(values, (N, K), &Device::Cpu).expect("w");
    let on = PackedLinear::pack(&[(widened, Some(bias()))]).expect("pack");
    let off = PackedLinear::pack(&[(off_grid, Some(bias()))]).expect("pack");
    assert_eq!(
        (on.weight_dtype(), off.weight_dtype()),
        (DType::BF16, DType::F32)
    );
    for m in [1, 7, 16] {
        let x = lcg(5 + m as u64, m * K);
        let (a, b) = (on.matmul_f32(&x), off.matmul_f32(&x));
        for i in 0..m {
            assert_eq!(
                a[i * N..i * N + N - 1]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                b[i * N..i * N + N - 1]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                "m = {m}, row {i}"
            );
            assert_ne!(
                a[i * N + N - 1],
                b[i * N + N - 1],
                "the off-grid row differs"
            );
        }
    }
}

/// A long `x` is regrouped a chunk of row blocks at a time (2^18 floats): at a depth over
/// 2^18 / ROW_BLOCK a chunk is one row block, so 2 ROW_BLOCK + 7 rows span three chunks. Rows
/// in every chunk must be bitwise the rows computed alone, and the f64 product's up to f32
/// rounding.
#[test]
fn rows_in_every_chunk_of_a_long_input_are_the_rows_alone() {
    let (k, n, m) = (3_000, PANEL_COLS + 3, 2 * ROW_BLOCK + 7);
    assert!(k * ROW_BLOCK > 1 << 18, "one row block per chunk");
    let w = lcg(9, n * k);
    let lin = PackedLinear::pack(&[(
        Tensor::from_vec(w.clone(), (n, k), &Device::Cpu).expect("w"),
        None,
    )])
    .expect("pack");
    let x = lcg(10, m * k);
    let all = lin.matmul_f32(&x);
    for r in [0, ROW_BLOCK - 1, ROW_BLOCK, 2 * ROW_BLOCK + 1, m - 1] {
        let alone = lin.matmul_f32(&x[r * k..(r + 1) * k]);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&alone), bits(&all[r * n..(r + 1) * n]), "row {r}");
        for (j, &got) in alone.iter().enumerate() {
            let (mut want, mut mag) = (0f64, 0f64);
            for kk in 0..k {
                let p = x[r * k + kk] as f64 * w[j * k + kk] as f64;
                want += p;
                mag += p.abs();
            }
            let tol = (k + 1) as f64 * f32::EPSILON as f64 * mag;
            assert!((got as f64 - want).abs() <= tol, "row {r}, column {j}");
        }
    }
}
