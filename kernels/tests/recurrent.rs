//! `causal_conv1d_update` and `gated_delta_rule_recurrent` against transformers' torch functions
//! (`tests/fixtures/recurrent.safetensors`, from `scripts/make_recurrent_fixtures.py`) and
//! against a naive f64 loop; chunked calls equal one call; sequences are independent of their
//! order and neighbours in the batch.

use std::collections::HashMap;
use verisample_kernels::max_abs_diff;

use candle_core::{DType, Device, Tensor};
use verisample_kernels::{
    causal_conv1d_update, gated_delta_rule_recurrent, recurrent_kernels, AttentionPath,
    KernelError, RecurrentStep, L2NORM_EPS,
};

/// The kernels of both paths: the CPU ones and the portable ones (candle ops, any device).
const PATHS: [(&str, AttentionPath); 2] = [
    ("cpu", AttentionPath::Native),
    ("portable", AttentionPath::Portable),
];

/// Deterministic pseudo-random floats in [-1, 1) (64-bit LCG, Knuth's constants).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 1.0)
}

fn t(v: Vec<f32>, dims: &[usize]) -> Tensor {
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn fixture() -> HashMap<String, Tensor> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recurrent.safetensors");
    candle_core::safetensors::load(p, &Device::Cpu).unwrap()
}

fn usizes(t: &Tensor) -> Vec<usize> {
    t.to_vec1::<i64>()
        .unwrap()
        .into_iter()
        .map(|x| x as usize)
        .collect()
}

#[test]
fn conv1d_update_matches_transformers() {
    let f = fixture();
    let query_lens = usizes(&f["query_lens"]);
    let slots: Vec<u32> = usizes(&f["slots"]).into_iter().map(|s| s as u32).collect();
    let step = RecurrentStep {
        query_lens: &query_lens,
        slots: &slots,
    };
    for (name, path) in PATHS {
        let conv = recurrent_kernels(path, &Device::Cpu).0;
        let state = f["conv_state_in"].copy().unwrap();
        let out = conv(
            &f["conv_x"],
            &state,
            &f["conv_weight"],
            Some(&f["conv_bias"]),
            &step,
            true,
        )
        .unwrap();
        let d = max_abs_diff(&flat(&out), &flat(&f["conv_out"]));
        assert!(d < 1e-5, "{name}: conv output differs by {d}");
        // Slot 1 is nobody's: untouched. The others hold the last 3 inputs.
        assert_eq!(flat(&state), flat(&f["conv_state_out"]), "{name}");
        assert_eq!(
            flat(&state.get(1).unwrap()),
            flat(&f["conv_state_in"].get(1).unwrap())
        );
    }
}

#[test]
fn gated_delta_rule_matches_transformers() {
    let f = fixture();
    let query_lens = usizes(&f["query_lens"]);
    let slots: Vec<u32> = usizes(&f["slots"]).into_iter().map(|s| s as u32).collect();
    let step = RecurrentStep {
        query_lens: &query_lens,
        slots: &slots,
    };
    for (name, path) in PATHS {
        let delta = recurrent_kernels(path, &Device::Cpu).1;
        let state = f["delta_state_in"].copy().unwrap();
        let out = delta(
            &f["q"], &f["k"], &f["v"], &f["g"], &f["beta"], &state, &step, true,
        )
        .unwrap();
        let d = max_abs_diff(&flat(&out), &flat(&f["delta_out"]));
        assert!(d < 1e-5, "{name}: delta-rule output differs by {d}");
        let d = max_abs_diff(&flat(&state), &flat(&f["delta_state_out"]));
        assert!(d < 1e-5, "{name}: delta-rule state differs by {d}");
        assert_eq!(
            flat(&state.get(1).unwrap()),
            flat(&f["delta_state_in"].get(1).unwrap())
        );
    }
}

fn naive_conv(
    x: &[f32],
    state: &[f32],
    w: &[f32],
    b: &[f32],
    q: usize,
    ch: usize,
    k: usize,
) -> (Vec<f32>, Vec<f32>) {
    let mut out = vec![0f32; q * ch];
    let mut new_state = vec![0f32; ch * (k - 1)];
    for c in 0..ch {
        let hist: Vec<f64> = (0..k - 1)
            .map(|j| state[c * (k - 1) + j] as f64)
            .chain((0..q).map(|t| x[t * ch + c] as f64))
            .collect();
        for t in 0..q {
            let y: f64 = (0..k)
                .map(|j| w[c * k + j] as f64 * hist[t + j])
                .sum::<f64>()
                + b[c] as f64;
            out[t * ch + c] = (y / (1.0 + (-y).exp())) as f32;
        }
        for j in 0..k - 1 {
            new_state[c * (k - 1) + j] = hist[q + j] as f32;
        }
    }
    (out, new_state)
}

#[test]
fn conv1d_update_matches_a_naive_loop_chunked_and_in_any_order() {
    let (ch, k) = (7, 4);
    let query_lens = [6usize, 1, 2, 4];
    let slots = [3u32, 0, 4, 1];
    let total: usize = query_lens.iter().sum();
    let x = lcg(1, total * ch);
    let w = lcg(2, ch * k);
    let b = lcg(3, ch);
    let init = lcg(4, 5 * ch * (k - 1));
    let state = t(init.clone(), &[5, ch, k - 1]);
    let step = RecurrentStep {
        query_lens: &query_lens,
        slots: &slots,
    };
    let out = causal_conv1d_update(
        &t(x.clone(), &[total, ch]),
        &state,
        &t(w.clone(), &[ch, k]),
        Some(&t(b.clone(), &[ch])),
        &step,
        true,
    )
    .unwrap();
    let out = flat(&out);
    let got_state = flat(&state);
    let mut start = 0;
    for (&q, &s) in query_lens.iter().zip(&slots) {
        let s = s as usize;
        let sz = ch * (k - 1);
        let (o, ns) = naive_conv(
            &x[start * ch..(start + q) * ch],
            &init[s * sz..(s + 1) * sz],
            &w,
            &b,
            q,
            ch,
            k,
        );
        assert!(max_abs_diff(&out[start * ch..(start + q) * ch], &o) < 1e-5);
        assert!(max_abs_diff(&got_state[s * sz..(s + 1) * sz], &ns) < 1e-6);
        start += q;
    }
    // The first sequence alone, in chunks of 4 then 2 tokens, from the same state: same output.
    let single = t(init.clone(), &[5, ch, k - 1]);
    let mut chunks = Vec::new();
    for (lo, hi) in [(0usize, 4usize), (4, 6)] {
        let st = RecurrentStep {
            query_lens: &[hi - lo],
            slots: &[3],
        };
        let xs = t(x[lo * ch..hi * ch].to_vec(), &[hi - lo, ch]);
        chunks.extend(flat(
            &causal_conv1d_update(
                &xs,
                &single,
                &t(w.clone(), &[ch, k]),
                Some(&t(b.clone(), &[ch])),
                &st,
                true,
            )
            .unwrap(),
        ));
    }
    assert_eq!(chunks, out[..6 * ch].to_vec());
    assert_eq!(
        flat(&single.get(3).unwrap()),
        got_state[3 * ch * (k - 1)..4 * ch * (k - 1)].to_vec()
    );
}

/// Naive delta rule of one sequence in f64, one value head at a time, state as a matrix.
#[allow(clippy::too_many_arguments)]
fn naive_delta(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    len: usize,
    [hk, dk, hv, dv]: [usize; 4],
) -> (Vec<f32>, Vec<f32>) {
    let mut out = vec![0f32; len * hv * dv];
    let mut new_state = vec![0f32; hv * dk * dv];
    for h in 0..hv {
        let kh = h / (hv / hk);
        let mut s: Vec<Vec<f64>> = (0..dk)
            .map(|i| {
                (0..dv)
                    .map(|j| state[(h * dk + i) * dv + j] as f64)
                    .collect()
            })
            .collect();
        for tt in 0..len {
            let norm = |x: &[f32]| {
                let n =
                    (x.iter().map(|a| (*a as f64).powi(2)).sum::<f64>() + L2NORM_EPS as f64).sqrt();
                x.iter().map(|a| *a as f64 / n).collect::<Vec<f64>>()
            };
            let qv: Vec<f64> = norm(&q[(tt * hk + kh) * dk..(tt * hk + kh + 1) * dk])
                .iter()
                .map(|a| a / (dk as f64).sqrt())
                .collect();
            let kv = norm(&k[(tt * hk + kh) * dk..(tt * hk + kh + 1) * dk]);
            let decay = (g[tt * hv + h] as f64).exp();
            let b = beta[tt * hv + h] as f64;
            for row in s.iter_mut() {
                row.iter_mut().for_each(|x| *x *= decay);
            }
            for j in 0..dv {
                let mem: f64 = (0..dk).map(|i| s[i][j] * kv[i]).sum();
                let delta = (v[(tt * hv + h) * dv + j] as f64 - mem) * b;
                for i in 0..dk {
                    s[i][j] += kv[i] * delta;
                }
                out[(tt * hv + h) * dv + j] = (0..dk).map(|i| s[i][j] * qv[i]).sum::<f64>() as f32;
            }
        }
        for i in 0..dk {
            for j in 0..dv {
                new_state[(h * dk + i) * dv + j] = s[i][j] as f32;
            }
        }
    }
    (out, new_state)
}

#[test]
fn gated_delta_rule_matches_a_naive_loop_chunked_and_in_any_order() {
    let dims @ [hk, dk, hv, dv] = [2usize, 5, 4, 3];
    let query_lens = [3usize, 1, 5];
    let slots = [1u32, 2, 0];
    let total: usize = query_lens.iter().sum();
    let q = lcg(11, total * hk * dk);
    let k = lcg(12, total * hk * dk);
    let v = lcg(13, total * hv * dv);
    let g: Vec<f32> = lcg(14, total * hv)
        .iter()
        .map(|x| -(x.abs() + 0.05))
        .collect();
    let beta: Vec<f32> = lcg(15, total * hv).iter().map(|x| 0.5 + 0.5 * x).collect();
    let init: Vec<f32> = lcg(16, 3 * hv * dk * dv).iter().map(|x| x * 0.3).collect();
    let tensors = |lo: usize, hi: usize| {
        let n = hi - lo;
        (
            t(q[lo * hk * dk..hi * hk * dk].to_vec(), &[n, hk, dk]),
            t(k[lo * hk * dk..hi * hk * dk].to_vec(), &[n, hk, dk]),
            t(v[lo * hv * dv..hi * hv * dv].to_vec(), &[n, hv, dv]),
            t(g[lo * hv..hi * hv].to_vec(), &[n, hv]),
            t(beta[lo * hv..hi * hv].to_vec(), &[n, hv]),
        )
    };
    let state = t(init.clone(), &[3, hv, dk, dv]);
    let (qt, kt, vt, gt, bt) = tensors(0, total);
    let step = RecurrentStep {
        query_lens: &query_lens,
        slots: &slots,
    };
    let out =
        flat(&gated_delta_rule_recurrent(&qt, &kt, &vt, &gt, &bt, &state, &step, true).unwrap());
    let got_state = flat(&state);
    let sz = hv * dk * dv;
    let mut start = 0;
    for (&len, &s) in query_lens.iter().zip(&slots) {
        let s = s as usize;
        let (o, ns) = naive_delta(
            &q[start * hk * dk..],
            &k[start * hk * dk..],
            &v[start * hv * dv..],
            &g[start * hv..],
            &beta[start * hv..],
            &init[s * sz..(s + 1) * sz],
            len,
            dims,
        );
        let d = max_abs_diff(&out[start * hv * dv..(start + len) * hv * dv], &o);
        assert!(d < 1e-5, "sequence at slot {s}: output differs by {d}");
        assert!(max_abs_diff(&got_state[s * sz..(s + 1) * sz], &ns) < 1e-5);
        start += len;
    }
    // The last sequence alone, chunked 2 + 3 tokens: the same numbers (bit for bit: same order
    // of operations per token).
    let alone = t(init.clone(), &[3, hv, dk, dv]);
    let mut chunks = Vec::new();
    for (lo, hi) in [(4usize, 6usize), (6, 9)] {
        let (qt, kt, vt, gt, bt) = tensors(lo, hi);
        let st = RecurrentStep {
            query_lens: &[hi - lo],
            slots: &[0],
        };
        chunks.extend(flat(
            &gated_delta_rule_recurrent(&qt, &kt, &vt, &gt, &bt, &alone, &st, true).unwrap(),
        ));
    }
    assert_eq!(chunks, out[4 * hv * dv..].to_vec());
    assert_eq!(flat(&alone.get(0).unwrap()), got_state[..sz].to_vec());
}

#[test]
fn invalid_steps_are_errors_before_any_write() {
    let state = Tensor::zeros((2, 3, 3), DType::F32, &Device::Cpu).unwrap();
    let x = Tensor::ones((2, 3), DType::F32, &Device::Cpu).unwrap();
    let w = Tensor::ones((3, 4), DType::F32, &Device::Cpu).unwrap();
    let cases: [(&[usize], &[u32], &str); 3] = [
        (&[1, 1], &[0, 0], "slot 0 given to two sequences"),
        (&[1, 1], &[0, 2], "slot 2 outside the pool of 2"),
        (&[2, 1], &[0, 1], "query_lens sum to 3 but there are 2 rows"),
    ];
    for (ql, slots, needle) in cases {
        let step = RecurrentStep {
            query_lens: ql,
            slots,
        };
        let err = causal_conv1d_update(&x, &state, &w, None, &step, false).unwrap_err();
        assert!(matches!(err, KernelError::Invalid { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{err}");
    }
    assert_eq!(flat(&state), vec![0.0; 18]);
    let half = state.to_dtype(DType::F16).unwrap();
    let step = RecurrentStep {
        query_lens: &[2],
        slots: &[0],
    };
    let err = causal_conv1d_update(&x, &half, &w, None, &step, false).unwrap_err();
    assert!(err.to_string().contains("f32"), "{err}");
}

/// The portable kernels run a step's sequences together (a decode step in one pass; a mixed
/// step padded, a finished sequence keeping its state): every sequence's output and state are
/// bitwise those of the sequence run alone, and within 1e-5 of the native kernels. Catches: rows
/// or slots mixed up across the batch, a finished sequence's state moved by the padding.
#[test]
fn portable_kernels_batch_the_step_and_equal_each_sequence_alone() {
    let (hk, hv, dk, dv, ch, k, num_slots) = (2, 4, 8, 6, 10, 4, 9);
    for query_lens in [vec![1usize, 1, 1, 1, 1], vec![3, 1, 2]] {
        let slots: Vec<u32> = [7u32, 2, 5, 0, 8][..query_lens.len()].to_vec();
        let total: usize = query_lens.iter().sum();
        let (q, kk, v) = (
            lcg(11, total * hk * dk),
            lcg(12, total * hk * dk),
            lcg(13, total * hv * dv),
        );
        let (g, beta) = (lcg(14, total * hv), lcg(15, total * hv));
        let x = lcg(16, total * ch);
        let (w, b) = (lcg(17, ch * k), lcg(18, ch));
        let init_state = lcg(19, num_slots * hv * dk * dv);
        let init_conv = lcg(20, num_slots * ch * (k - 1));
        // One sequence `i` alone (rows `lo..hi`) or the whole step: (delta out, state, conv out, conv state).
        let run = |seqs: &[usize], portable: bool| -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
            let lens: Vec<usize> = seqs.iter().map(|&i| query_lens[i]).collect();
            let sl: Vec<u32> = seqs.iter().map(|&i| slots[i]).collect();
            let rows: Vec<usize> = seqs
                .iter()
                .flat_map(|&i| {
                    let lo: usize = query_lens[..i].iter().sum();
                    lo..lo + query_lens[i]
                })
                .collect();
            let pick = |src: &[f32], width: usize| -> Vec<f32> {
                rows.iter()
                    .flat_map(|&r| src[r * width..(r + 1) * width].to_vec())
                    .collect()
            };
            let n = rows.len();
            let step = RecurrentStep {
                query_lens: &lens,
                slots: &sl,
            };
            let state = t(init_state.clone(), &[num_slots, hv, dk, dv]);
            let conv_state = t(init_conv.clone(), &[num_slots, ch, k - 1]);
            let path = if portable {
                AttentionPath::Portable
            } else {
                AttentionPath::Native
            };
            let (conv, delta) = recurrent_kernels(path, &Device::Cpu);
            let out = delta(
                &t(pick(&q, hk * dk), &[n, hk, dk]),
                &t(pick(&kk, hk * dk), &[n, hk, dk]),
                &t(pick(&v, hv * dv), &[n, hv, dv]),
                &t(pick(&g, hv), &[n, hv]),
                &t(pick(&beta, hv), &[n, hv]),
                &state,
                &step,
                true,
            )
            .unwrap();
            let conv_out = conv(
                &t(pick(&x, ch), &[n, ch]),
                &conv_state,
                &t(w.clone(), &[ch, k]),
                Some(&t(b.clone(), &[ch])),
                &step,
                true,
            )
            .unwrap();
            (flat(&out), flat(&state), flat(&conv_out), flat(&conv_state))
        };
        let all: Vec<usize> = (0..query_lens.len()).collect();
        let batch = run(&all, true);
        let native = run(&all, false);
        for (got, want, what) in [
            (&batch.0, &native.0, "delta out"),
            (&batch.1, &native.1, "state"),
            (&batch.2, &native.2, "conv out"),
            (&batch.3, &native.3, "conv state"),
        ] {
            let d = max_abs_diff(got, want);
            assert!(d <= 1e-5, "{query_lens:?} {what}: portable vs native {d}");
        }
        let (sz, csz) = (hv * dk * dv, ch * (k - 1));
        for i in 0..query_lens.len() {
            let alone = run(&[i], true);
            let lo: usize = query_lens[..i].iter().sum();
            let hi = lo + query_lens[i];
            let s = slots[i] as usize;
            assert_eq!(
                batch.0[lo * hv * dv..hi * hv * dv],
                alone.0[..],
                "{query_lens:?} seq {i} out"
            );
            assert_eq!(
                batch.1[s * sz..(s + 1) * sz],
                alone.1[s * sz..(s + 1) * sz],
                "{query_lens:?} seq {i} state"
            );
            assert_eq!(
                batch.2[lo * ch..hi * ch],
                alone.2[..],
                "{query_lens:?} seq {i} conv out"
            );
            assert_eq!(
                batch.3[s * csz..(s + 1) * csz],
                alone.3[s * csz..(s + 1) * csz],
                "{query_lens:?} seq {i} conv state"
            );
        }
        // Slots the step does not use keep their values.
        let unused = (0..num_slots).filter(|s| !slots.contains(&(*s as u32)));
        for s in unused {
            assert_eq!(
                batch.1[s * sz..(s + 1) * sz],
                init_state[s * sz..(s + 1) * sz]
            );
            assert_eq!(
                batch.3[s * csz..(s + 1) * csz],
                init_conv[s * csz..(s + 1) * csz]
            );
        }
    }
}
