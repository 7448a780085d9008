//! The MoE router's top-k against `torch.topk` on tied probabilities
//! (`models/tests/fixtures/topk_ties.json`, `scripts/make_topk_ties.py`). Catches: ties
//! broken by lower index (or any stable sort), which picks other experts than transformers
//! when probabilities tie at the k-th place and orders them differently inside the top k.

use verisample_models::moe::topk_torch_order;

#[test]
fn router_top_k_breaks_ties_as_torch_topk() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/topk_ties.json");
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let cases = meta["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 160);
    let mut not_by_index = 0;
    for (i, c) in cases.iter().enumerate() {
        let values: Vec<f32> = c["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let k = c["k"].as_u64().unwrap() as usize;
        let want: Vec<usize> = c["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let mut by_index: Vec<usize> = (0..values.len()).collect();
        by_index.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
        not_by_index += usize::from(by_index[..k] != want[..]);
        assert_eq!(
            topk_torch_order(&values, k),
            want,
            "case {i}: {values:?} top-{k}"
        );
    }
    // The fixture does exercise torch's own tie order: a lower-index-first sort fails most
    // cases.
    assert!(not_by_index > 80, "{not_by_index}");
}

/// Distinct values: the plain descending order (what any top-k must give).
#[test]
fn router_top_k_without_ties_is_descending() {
    let v = [0.1f32, 0.4, 0.05, 0.3, 0.15];
    assert_eq!(topk_torch_order(&v, 3), vec![1, 3, 4]);
    assert_eq!(topk_torch_order(&v, 5), vec![1, 3, 4, 0, 2]);
}
