//! Unit tests of [`super`]: the fingerprint, the progress under `-q`.

use super::*;
use std::collections::BTreeMap;

#[test]
fn fingerprint_changes_with_settings_and_weights() {
    let s = CanonicalSettings {
        data: "/d".into(),
        family: None,
        think: true,
        judge: true,
        judge_calibrate: 0,
        number_guard: true,
        device: "cpu".into(),
        dtype: DTypeSpec::F32,
        kernels: None,
        max_new_tokens: 16,
        think_budget: None,
        shard: "0/1".into(),
        verifiers: Vec::new(),
        dedup: true,
        min_pixels: None,
        max_pixels: None,
        read: Default::default(),
        input_columns: InputColumns::Keep,
        decoding: CanonicalDecoding::from(&Decoding::default()),
        sampling: None,
    };
    let w = BTreeMap::from([("model.safetensors".to_string(), "aa".to_string())]);
    let a = fingerprint(s.clone(), w.clone(), Vec::new());
    assert_eq!(a, fingerprint(s.clone(), w.clone(), Vec::new()));
    let mut s2 = s.clone();
    s2.think = false;
    let b = fingerprint(s2.clone(), w.clone(), Vec::new());
    assert_ne!(a.sha256, b.sha256);
    assert_eq!(s.diff(&s2), vec!["think: true -> false".to_string()]);
    let w2 = BTreeMap::from([("model.safetensors".to_string(), "ab".to_string())]);
    assert_ne!(a.sha256, fingerprint(s.clone(), w2, Vec::new()).sha256);
    let no_dedup = CanonicalSettings {
        dedup: false,
        ..s.clone()
    };
    assert_ne!(
        a.sha256,
        fingerprint(no_dedup, w.clone(), Vec::new()).sha256
    );
    let mut s3 = s.clone();
    s3.max_pixels = Some(65_536);
    assert_ne!(
        a.sha256,
        fingerprint(s3.clone(), w.clone(), Vec::new()).sha256
    );
    assert_eq!(s.diff(&s3), vec!["max_pixels: null -> 65536".to_string()]);
    let mut s4 = s.clone();
    s4.decoding.repetition_penalty = Some("1.05".into());
    assert_ne!(
        a.sha256,
        fingerprint(s4.clone(), w.clone(), Vec::new()).sha256
    );
    assert_eq!(
        s.diff(&s4),
        vec!["repetition_penalty: null -> \"1.05\"".to_string()]
    );
    // `--input-columns keep` (the default) is left out, so earlier runs keep their
    // fingerprint; `drop` changes it.
    assert!(!serde_json::to_string(&s).unwrap().contains("input_columns"));
    let dropped = CanonicalSettings {
        input_columns: InputColumns::Drop,
        ..s.clone()
    };
    assert_ne!(a.sha256, fingerprint(dropped, w.clone(), Vec::new()).sha256);
    let inputs = vec![("d/a.parquet".to_string(), "00".to_string())];
    assert_ne!(a.sha256, fingerprint(s, w, inputs).sha256);
}

#[test]
fn column_flags_and_images_root_change_the_fingerprint() {
    let s = CanonicalSettings {
        data: "/d".into(),
        family: None,
        think: true,
        judge: true,
        judge_calibrate: 0,
        number_guard: true,
        device: "cpu".into(),
        dtype: DTypeSpec::F32,
        kernels: None,
        max_new_tokens: 16,
        think_budget: None,
        shard: "0/1".into(),
        verifiers: Vec::new(),
        dedup: true,
        min_pixels: None,
        max_pixels: None,
        read: ReadOptions::default(),
        input_columns: InputColumns::Keep,
        decoding: CanonicalDecoding::from(&Decoding::default()),
        sampling: None,
    };
    // Unset, the key is left out: runs from before the flags keep their fingerprint.
    assert!(!serde_json::to_string(&s).unwrap().contains("read"));
    let mut mapped = s.clone();
    mapped.read.columns.answer = Some("label".into());
    assert_eq!(
        s.diff(&mapped),
        vec![r#"read: null -> {"columns":{"answer":"label"}}"#.to_string()]
    );
    let mut rooted = s.clone();
    rooted.read.images_root = Some("/imgs".into());
    let w = BTreeMap::new();
    let a = fingerprint(s, w.clone(), Vec::new()).sha256;
    assert_ne!(a, fingerprint(mapped, w.clone(), Vec::new()).sha256);
    assert_ne!(a, fingerprint(rooted, w, Vec::new()).sha256);
}

#[test]
fn quiet_keeps_only_an_explicit_jsonl_progress() {
    use ProgressMode::{Bar, Jsonl, None as Off};
    assert_eq!(ProgressMode::chosen(Some(Jsonl), true), Jsonl);
    assert_eq!(ProgressMode::chosen(Some(Bar), true), Off);
    assert_eq!(ProgressMode::chosen(Option::None, true), Off);
    assert_eq!(ProgressMode::chosen(Some(Bar), false), Bar);
    assert_eq!(ProgressMode::chosen(Some(Off), false), Off);
}
