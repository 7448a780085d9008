//! Greedy decoding on the logits' device: the repetition penalty, then the argmax, with candle
//! tensor ops; only the `[rows]` token ids come back to the host.
//!
//! - Penalty: transformers' `RepetitionPenaltyLogitsProcessor` (transformers 5.24,
//!   `generation/logits_process.py`), in f32 as transformers' `generate` runs its logits
//!   processors (it casts the logits to f32 first): pad the scores with one zero column,
//!   `gather` the scores of the row's seen ids, `where(score < 0, score * p, score / p)`,
//!   `scatter` them back, drop the pad column. `p` is the penalty rounded to f32 (a Python float
//!   times an f32 tensor computes in f32), and `/ p` is a true division, as on torch's CPU.
//!   Ids at or beyond the logits' vocabulary go to the pad column (transformers clamps them
//!   there). Each id counts once however often it was seen.
//! - Argmax: compared in f32, ties going to the lowest token id (the first maximum, as
//!   `torch.argmax` returns on CPU and transformers' greedy search uses), NaN never wins. candle's
//!   own `argmax` does not give that: on CPU a NaN in column 0 wins every row it is in, and the
//!   CUDA reduction does not promise the first index among equal maxima. So the maximum is
//!   taken over the row with NaN as −∞, and the token is the smallest column index whose value
//!   equals it (a `min` over indices, exact on every backend); a row with no such column (all
//!   NaN) has no token.
//!
//! Every op is per row: a row's token depends only on its own logits and seen ids, never on
//! the other rows of the batch.

use candle_core::{DType, Device, Tensor};

/// The greedy sampler of an engine: its repetition penalty (1.0: none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Greedy {
    penalty: f32,
}

impl Greedy {
    /// A sampler with `repetition_penalty` (positive and finite, checked by
    /// `EngineConfig::validate`; 1.0 turns the penalty off, as in transformers, which then adds
    /// no processor). The value is rounded to f32, the dtype the penalty is applied in.
    pub fn new(repetition_penalty: f64) -> Self {
        Self {
            penalty: repetition_penalty as f32,
        }
    }

    /// Whether the penalty is on (the caller then passes every row's seen ids).
    pub fn penalizes(&self) -> bool {
        self.penalty != 1.0
    }

    /// Greedy token of every row of `logits` `[rows, vocab]` (any float dtype, any device),
    /// after the repetition penalty over `seen[row]` (the distinct ids of that row's prompt and
    /// generated tokens; ignored, and may be empty, when the penalty is off). A row with no
    /// usable value (all NaN) gives `None`.
    ///
    /// Errors: candle errors (logits not 2-D, device), or `seen` not one entry per row while
    /// the penalty is on.
    pub fn sample(
        &self,
        logits: &Tensor,
        seen: &[&[u32]],
    ) -> candle_core::Result<Vec<Option<u32>>> {
        if logits.dim(0)? == 0 {
            // A step that samples no sequence (chunked prefill); candle cannot reduce nothing.
            return Ok(Vec::new());
        }
        self.argmax(&self.scores(logits, seen)?)
    }

    /// `logits` `[rows, vocab]` as f32 with the penalty applied over `seen` (as
    /// [`Greedy::sample`]): what the argmax, or a sampler's warpers, read.
    ///
    /// Errors: as [`Greedy::sample`].
    pub fn scores(&self, logits: &Tensor, seen: &[&[u32]]) -> candle_core::Result<Tensor> {
        let scores = logits.to_dtype(DType::F32)?;
        if self.penalizes() {
            self.penalize(&scores, seen)
        } else {
            Ok(scores)
        }
    }

    /// The first maximum of every row of `scores` ([`Greedy::scores`]), NaN skipped.
    ///
    /// Errors: candle errors.
    pub fn argmax(&self, scores: &Tensor) -> candle_core::Result<Vec<Option<u32>>> {
        if scores.dim(0)? == 0 {
            return Ok(Vec::new());
        }
        first_argmax(scores)
    }

    /// `scores` `[rows, vocab]` f32 with the penalty applied to each row's `seen` ids.
    fn penalize(&self, scores: &Tensor, seen: &[&[u32]]) -> candle_core::Result<Tensor> {
        let (rows, vocab) = scores.dims2()?;
        if seen.len() != rows {
            candle_core::bail!("{} seen-id lists for {rows} logits rows", seen.len());
        }
        let dev = scores.device();
        let width = seen.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let pad = u32::try_from(vocab).map_err(candle_core::Error::wrap)?;
        let mut idx = vec![pad; rows * width];
        for (row, ids) in seen.iter().enumerate() {
            for (slot, &t) in idx[row * width..].iter_mut().zip(ids.iter()) {
                *slot = t.min(pad);
            }
        }
        let idx = Tensor::from_vec(idx, (rows, width), dev)?;
        let padded = Tensor::cat(&[scores, &Tensor::zeros((rows, 1), DType::F32, dev)?], 1)?;
        let picked = padded.gather(&idx, 1)?;
        let p = Tensor::new(self.penalty, dev)?;
        let penalized = picked
            .lt(0f32)?
            .where_cond(&picked.broadcast_mul(&p)?, &picked.broadcast_div(&p)?)?;
        padded.scatter(&idx, &penalized, 1)?.narrow(1, 0, vocab)
    }
}

/// Index of the first maximum of every row of `scores` `[rows, vocab]` f32, NaN skipped; `None`
/// for a row of NaN only (or an empty row).
fn first_argmax(scores: &Tensor) -> candle_core::Result<Vec<Option<u32>>> {
    let (rows, vocab) = scores.dims2()?;
    if vocab == 0 {
        return Ok(vec![None; rows]);
    }
    let dev: &Device = scores.device();
    let shape = (rows, vocab);
    let none = u32::try_from(vocab).map_err(candle_core::Error::wrap)?;
    let neg_inf = Tensor::new(f32::NEG_INFINITY, dev)?.broadcast_as(shape)?;
    let keys = scores.ne(scores)?.where_cond(&neg_inf, scores)?;
    let best = keys.max_keepdim(1)?;
    let columns = Tensor::arange(0u32, none, dev)?
        .unsqueeze(0)?
        .broadcast_as(shape)?;
    let past_end = Tensor::new(none, dev)?.broadcast_as(shape)?;
    let first = scores
        .broadcast_eq(&best)?
        .where_cond(&columns, &past_end)?
        .min(1)?;
    Ok(first
        .to_vec1::<u32>()?
        .into_iter()
        .map(|i| (i < none).then_some(i))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The documented semantics on the host, one row at a time: transformers' penalty in f32
    /// over the distinct seen ids inside the vocabulary, then the first maximum, NaN skipped.
    fn reference(row: &[f32], seen: &[u32], penalty: f32) -> Option<u32> {
        let mut x = row.to_vec();
        if penalty != 1.0 {
            let mut ids: Vec<usize> = seen.iter().map(|&t| t as usize).collect();
            ids.sort_unstable();
            ids.dedup();
            let vocab = x.len();
            for i in ids.into_iter().filter(|&i| i < vocab) {
                x[i] = if x[i] < 0.0 {
                    x[i] * penalty
                } else {
                    x[i] / penalty
                };
            }
        }
        let mut best: Option<(usize, f32)> = None;
        for (i, &v) in x.iter().enumerate() {
            match best {
                _ if v.is_nan() => {}
                Some((_, b)) if v <= b => {}
                _ => best = Some((i, v)),
            }
        }
        best.map(|(i, _)| i as u32)
    }

    fn sample_rows(rows: &[Vec<f32>], seen: &[Vec<u32>], penalty: f64) -> Vec<Option<u32>> {
        let vocab = rows.first().map_or(0, Vec::len);
        let flat: Vec<f32> = rows.concat();
        let t = Tensor::from_vec(flat, (rows.len(), vocab), &Device::Cpu).unwrap();
        let seen: Vec<&[u32]> = seen.iter().map(Vec::as_slice).collect();
        Greedy::new(penalty).sample(&t, &seen).unwrap()
    }

    #[test]
    fn argmax_table_ties_nan_and_infinities() {
        let nan = f32::NAN;
        let cases: &[(&[f32], Option<u32>)] = &[
            (&[nan, nan], None),
            (&[0.5], Some(0)),
            (&[1.0, 3.0, 2.0], Some(1)),
            (&[3.0, 1.0, 3.0], Some(0)),
            (&[-1.0, -1.0, -2.0], Some(0)),
            // candle's CPU argmax would answer 0 here: the NaN in column 0 never loses.
            (&[nan, 2.0, 2.0], Some(1)),
            (&[nan, f32::NEG_INFINITY, f32::NEG_INFINITY], Some(1)),
            (&[f32::NEG_INFINITY, f32::NEG_INFINITY], Some(0)),
            (&[1.0, f32::INFINITY, nan, f32::INFINITY], Some(1)),
            (&[1e-30, 1.0000001, 1.0], Some(1)),
            (&[-0.0, 0.0], Some(0)),
        ];
        for (row, want) in cases {
            let got = sample_rows(&[row.to_vec()], &[vec![]], 1.0);
            assert_eq!(got, vec![*want], "{row:?}");
            assert_eq!(reference(row, &[], 1.0), *want, "reference {row:?}");
        }
    }

    #[test]
    fn penalty_divides_positive_multiplies_negative_each_id_once() {
        // Row a: column 0 (2.0) beats column 1 (1.95) until penalized: 2.0 / 1.05 = 1.905.
        // Row b: seen twice, column 0 is still divided once (1.905 > 1.85; twice would be 1.814).
        let (a, b) = (vec![2.0f32, 1.95, 1.85, -0.1], vec![2.0f32, 1.85, 0.0, 0.0]);
        let seen = vec![vec![0u32, 0], vec![0u32, 0]];
        let rows = [a.clone(), b];
        assert_eq!(sample_rows(&rows, &seen, 1.0), vec![Some(0), Some(0)]);
        assert_eq!(sample_rows(&rows, &seen, 1.05), vec![Some(1), Some(0)]);
        // Negative logits are multiplied: -0.1 · 3 = -0.3 falls below column 2's -0.15.
        let neg = vec![-0.2f32, -0.1, -0.15];
        assert_eq!(
            sample_rows(std::slice::from_ref(&neg), &[vec![1]], 1.0),
            vec![Some(1)]
        );
        assert_eq!(sample_rows(&[neg], &[vec![1]], 3.0), vec![Some(2)]);
        // A penalty below 1 favours seen ids; ids beyond the vocabulary are ignored.
        assert_eq!(
            sample_rows(&[a], &[vec![2, 4, 4_000_000]], 0.5),
            vec![Some(2)]
        );
    }

    #[test]
    fn penalty_rows_are_independent_and_bit_exact_in_f32() {
        // 1.05 is not exact in f32: the f32 division must round as torch's does, and a row
        // must not see another row's ids.
        let rows = vec![vec![1.0f32, 1.05, -1.0], vec![1.0f32, 1.05, -1.0]];
        let seen = vec![vec![1u32], vec![0u32]];
        let got = sample_rows(&rows, &seen, 1.05);
        assert_eq!(got, vec![Some(0), Some(1)]);
        let p = 1.05f64 as f32;
        assert_eq!(1.05f32 / p, 1.0, "the exactly tied case above");
    }

    #[test]
    fn penalized_values_are_torchs_bits() {
        // Bits of f32 values and of what torch 2.15 (CPU) gives for `x / 1.05` (x ≥ 0) and
        // `x * 1.05` (x < 0) on them; these x are among those where multiplying by the f32
        // reciprocal of 1.05 lands one ulp away from the true division.
        let cases: [(u32, u32); 4] = [
            (1054567863, 1053883079),
            (1079733687, 1079048903),
            ((-1092915785i32) as u32, (-1092196762i32) as u32),
            ((-1067749961i32) as u32, (-1067030938i32) as u32),
        ];
        let row: Vec<f32> = cases.iter().map(|(x, _)| f32::from_bits(*x)).collect();
        let t = Tensor::from_vec(row, (1, cases.len()), &Device::Cpu).unwrap();
        let got = Greedy::new(1.05)
            .penalize(&t, &[&[0, 1, 2, 3]])
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let bits: Vec<u32> = got[0].iter().map(|v| v.to_bits()).collect();
        let want: Vec<u32> = cases.iter().map(|(_, y)| *y).collect();
        assert_eq!(bits, want);
    }

    #[test]
    fn works_on_bf16_rows() {
        let t = Tensor::new(&[[0.0f32, 2.0, 1.0], [5.0, 5.0, 4.0]], &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        assert_eq!(
            Greedy::new(1.0).sample(&t, &[]).unwrap(),
            vec![Some(1), Some(0)]
        );
        let seen: [&[u32]; 2] = [&[1], &[0]];
        assert_eq!(
            Greedy::new(4.0).sample(&t, &seen).unwrap(),
            vec![Some(2), Some(1)]
        );
    }

    #[test]
    fn a_step_without_sampled_rows_gives_no_tokens() {
        let t = Tensor::zeros((0, 5), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(Greedy::new(1.0).sample(&t, &[]).unwrap(), vec![]);
        assert_eq!(Greedy::new(1.05).sample(&t, &[]).unwrap(), vec![]);
    }

    #[test]
    fn seen_lists_must_match_the_rows_when_penalizing() {
        let t = Tensor::zeros((2, 3), DType::F32, &Device::Cpu).unwrap();
        let err = Greedy::new(1.1).sample(&t, &[&[1]]).unwrap_err();
        assert!(
            err.to_string()
                .contains("1 seen-id lists for 2 logits rows"),
            "{err}"
        );
    }

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => (-40i32..40).prop_map(|k| k as f32 / 8.0),
            2 => any::<f32>(),
            1 => Just(f32::NAN),
            1 => Just(f32::NEG_INFINITY),
        ]
    }

    proptest! {
        #[test]
        fn matches_the_host_reference(
            rows in prop::collection::vec(prop::collection::vec(value(), 7), 1..5),
            seen in prop::collection::vec(prop::collection::vec(0u32..9, 0..6), 5),
            penalty in prop_oneof![Just(1.0f64), Just(1.05), Just(1.3), Just(0.7)],
        ) {
            let seen = &seen[..rows.len()];
            let got = sample_rows(&rows, seen, penalty);
            let want: Vec<Option<u32>> = rows
                .iter()
                .zip(seen)
                .map(|(r, s)| reference(r, s, penalty as f32))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
