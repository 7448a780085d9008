//! The sampler's warpers against transformers' (a committed fixture), its draws against the
//! distribution they define (chi-square), and its random stream's independence of anything
//! but (seed, identity, token index).

use super::*;

#[derive(serde::Deserialize)]
struct Case {
    settings: serde_json::Map<String, serde_json::Value>,
    logits: Vec<f32>,
    kept: Vec<usize>,
}

fn params(s: &serde_json::Map<String, serde_json::Value>) -> SamplingParams {
    SamplingParams {
        temperature: s["temperature"].as_f64().unwrap(),
        top_k: s.get("top_k").map(|v| v.as_u64().unwrap() as usize),
        top_p: s.get("top_p").map(|v| v.as_f64().unwrap()),
        min_p: s.get("min_p").map(|v| v.as_f64().unwrap()),
        seed: 0,
    }
}

#[test]
fn warpers_keep_the_tokens_transformers_keeps() {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sampling/warpers.json"
    ));
    let fixture: serde_json::Value = serde_json::from_str(text).unwrap();
    let cases: Vec<Case> = serde_json::from_value(fixture["cases"].clone()).unwrap();
    assert_eq!(cases.len(), 40);
    for (i, c) in cases.iter().enumerate() {
        let mut scores = c.logits.clone();
        warp(&mut scores, &params(&c.settings));
        let kept: Vec<usize> = (0..scores.len())
            .filter(|&j| scores[j].is_finite())
            .collect();
        assert_eq!(kept, c.kept, "case {i}: {:?}", c.settings);
    }
}

/// The probabilities sampling should follow for `logits` under `p`, computed plainly: the kept
/// set from [`warp`], then the softmax of the tempered logits over it (f64).
fn expected(logits: &[f32], p: &SamplingParams) -> Vec<f64> {
    let mut warped = logits.to_vec();
    warp(&mut warped, p);
    let t = p.temperature;
    let w: Vec<f64> = logits
        .iter()
        .zip(&warped)
        .map(|(&l, &k)| {
            if k.is_finite() {
                (f64::from(l) / t).exp()
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// 0.999 quantiles of the chi-square distribution, degrees of freedom 1..=10.
const CHI2_999: [f64; 10] = [
    10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588,
];

#[test]
fn draws_follow_the_softmax_of_the_kept_logits() {
    let logits = [2.0f32, 1.5, 1.2, 0.3, 0.0, -0.5, -1.0, -3.0, 0.9, 1.1];
    for p in [
        SamplingParams {
            temperature: 0.7,
            top_k: None,
            top_p: None,
            min_p: None,
            seed: 7,
        },
        SamplingParams {
            temperature: 0.7,
            top_k: Some(6),
            top_p: Some(0.9),
            min_p: Some(0.05),
            seed: 7,
        },
        SamplingParams {
            temperature: 1.5,
            top_k: None,
            top_p: Some(0.8),
            min_p: None,
            seed: 11,
        },
    ] {
        let probs = expected(&logits, &p);
        let stream = SampleStream {
            params: p,
            id: [3, 1 << 32],
        };
        let key = stream.key();
        let n = 100_000u64;
        let mut counts = vec![0u64; logits.len()];
        for index in 0..n {
            let mut row = logits.to_vec();
            let t = sample_row(&mut row, &p, &key, index).unwrap() as usize;
            counts[t] += 1;
        }
        let kept: Vec<usize> = (0..logits.len()).filter(|&i| probs[i] > 0.0).collect();
        for i in (0..logits.len()).filter(|i| !kept.contains(i)) {
            assert_eq!(counts[i], 0, "token {i} was removed by the warpers: {p:?}");
        }
        let chi2: f64 = kept
            .iter()
            .map(|&i| {
                let e = probs[i] * n as f64;
                (counts[i] as f64 - e).powi(2) / e
            })
            .sum();
        let df = kept.len() - 1;
        assert!(
            chi2 < CHI2_999[df - 1],
            "chi-square {chi2:.2} over {df} degrees of freedom: {counts:?} vs {probs:?} ({p:?})"
        );
    }
}

#[test]
fn a_stream_depends_on_seed_identity_and_token_index_only() {
    let p = SamplingParams {
        temperature: 0.7,
        top_k: None,
        top_p: None,
        min_p: None,
        seed: 1,
    };
    let key = |seed: u64, id: [u64; 2]| {
        SampleStream {
            params: SamplingParams { seed, ..p },
            id,
        }
        .key()
    };
    let base = key(1, [5, 2]);
    // Same inputs, same value; any one changed, another value.
    assert_eq!(uniform(&base, 9), uniform(&key(1, [5, 2]), 9));
    for other in [key(2, [5, 2]), key(1, [6, 2]), key(1, [5, 3])] {
        assert_ne!(uniform(&base, 9), uniform(&other, 9));
    }
    assert_ne!(uniform(&base, 9), uniform(&base, 10));
    // The value of token 9 does not depend on having drawn tokens 0..9 first.
    let in_order: Vec<f64> = (0..12).map(|i| uniform(&base, i)).collect();
    assert_eq!(in_order[9], uniform(&base, 9));
    assert!(in_order.iter().all(|u| (0.0..1.0).contains(u)));
}

#[test]
fn draw_skips_removed_tokens_and_refuses_nan() {
    let scores = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
    assert_eq!(draw(&scores, 0.0), Some(1));
    assert_eq!(draw(&scores, 0.49), Some(1));
    assert_eq!(draw(&scores, 0.51), Some(3));
    assert_eq!(draw(&scores, 0.999_999), Some(3));
    assert_eq!(draw(&[f32::NEG_INFINITY; 3], 0.5), None);
    assert_eq!(draw(&[0.0, f32::NAN], 0.5), None);
}
