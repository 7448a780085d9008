//! Greedy decoding: the next token is the argmax of the logits, compared in f32, ties going
//! to the lowest token id (the first maximum, as `torch.argmax` returns on CPU and as
//! transformers' greedy search uses). NaN never wins.

use candle_core::{DType, Tensor};

/// Index of the largest value of `logits`, the lowest index among equal maxima; `None` when
/// `logits` is empty or all NaN.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        match best {
            Some((_, b)) if v <= b => {}
            _ => best = Some((i, v)),
        }
    }
    best.map(|(i, _)| i as u32)
}

/// Greedy token of every row of `logits` `[rows, vocab]` (any float dtype, any device; the
/// rows are copied to the host as f32). A row with no usable value (all NaN) gives `None`.
///
/// Errors: candle errors (logits not 2-D, dtype conversion, device copy).
pub fn greedy_rows(logits: &Tensor) -> candle_core::Result<Vec<Option<u32>>> {
    let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    Ok(rows.iter().map(|r| argmax(r)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_table() {
        let nan = f32::NAN;
        let cases: &[(&[f32], Option<u32>)] = &[
            (&[], None),
            (&[nan, nan], None),
            (&[0.5], Some(0)),
            (&[1.0, 3.0, 2.0], Some(1)),
            (&[3.0, 1.0, 3.0], Some(0)),
            (&[-1.0, -1.0, -2.0], Some(0)),
            (&[nan, 2.0, 2.0], Some(1)),
            (&[f32::NEG_INFINITY, f32::NEG_INFINITY], Some(0)),
            (&[1.0, f32::INFINITY, nan, f32::INFINITY], Some(1)),
            (&[1e-30, 1.0000001, 1.0], Some(1)),
        ];
        for (logits, want) in cases {
            assert_eq!(argmax(logits), *want, "{logits:?}");
        }
    }

    #[test]
    fn greedy_rows_works_on_bf16_rows() {
        let t = Tensor::new(
            &[[0.0f32, 2.0, 1.0], [5.0, 5.0, 4.0]],
            &candle_core::Device::Cpu,
        )
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
        assert_eq!(greedy_rows(&t).unwrap(), vec![Some(1), Some(0)]);
    }
}
