//! The split rows of rejection sampling (`--samples K > 1`): each accepted sample is its own
//! QA item; the rejected split keeps a question once with every wrong sample — `wrong_vlm`,
//! `reason`, `judge_verdict` and `judge_raw` hold JSON arrays as text, in sample order (a
//! verdict or raw text of a sample the judge never saw is `null`), as several references are
//! stored in `answer`; each split row's `clean_meta` says `"samples": K` and, in
//! `"sample_index"`, the sample of each QA item (the wrong samples' indices in the rejected
//! split). Written by the pipeline, read back by `verisample verify`.

use super::RejectedQa;

/// The `clean_meta` key holding K.
pub const SAMPLES_KEY: &str = "samples";
/// The `clean_meta` key holding each QA item's sample index (indices, for the rejected split).
pub const SAMPLE_INDEX_KEY: &str = "sample_index";

/// JSON array text of `items`.
fn array<T: serde::Serialize>(items: impl Iterator<Item = T>) -> String {
    serde_json::Value::Array(items.map(|v| serde_json::json!(v)).collect()).to_string()
}

/// The one rejected entry of a question holding every wrong sample of `wrong` (non-empty, in
/// sample order), and their sample indices.
pub fn merge_wrong(wrong: Vec<(u32, RejectedQa)>) -> (RejectedQa, Vec<u32>) {
    let judged = wrong.iter().any(|(_, r)| r.judge_verdict.is_some());
    let raw = wrong.iter().any(|(_, r)| r.judge_raw.is_some());
    let first = wrong[0].1.clone();
    let entry = RejectedQa {
        wrong_vlm: array(wrong.iter().map(|(_, r)| &r.wrong_vlm)),
        reason: array(wrong.iter().map(|(_, r)| &r.reason)),
        judge_verdict: judged.then(|| array(wrong.iter().map(|(_, r)| &r.judge_verdict))),
        judge_raw: raw.then(|| array(wrong.iter().map(|(_, r)| &r.judge_raw))),
        ..first
    };
    (entry, wrong.into_iter().map(|(s, _)| s).collect())
}

/// `clean_meta` of one split row of a sampled run: the row's, plus K and the samples of its
/// items (`index`). Keys stay sorted, as in every `clean_meta`.
pub fn clean_meta_with_samples(
    clean_meta: &str,
    samples: usize,
    index: serde_json::Value,
) -> String {
    let mut meta: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(clean_meta).unwrap_or_default();
    meta.insert(SAMPLES_KEY.into(), samples.into());
    meta.insert(SAMPLE_INDEX_KEY.into(), index);
    serde_json::Value::Object(meta).to_string()
}

/// K of a split row's `clean_meta` when it holds more than one sample per question (`None`
/// for a greedy run's rows, or K = 1).
pub fn samples_of(clean_meta: &str) -> Option<usize> {
    let meta: serde_json::Value = serde_json::from_str(clean_meta).ok()?;
    let k = usize::try_from(meta.get(SAMPLES_KEY)?.as_u64()?).ok()?;
    (k > 1).then_some(k)
}

/// The wrong samples of a rejected entry written by [`merge_wrong`], one entry each.
///
/// Errors: a field that is not a JSON array, or arrays of different lengths (said in words).
pub fn split_wrong(e: &RejectedQa) -> Result<Vec<RejectedQa>, String> {
    let strings = |field: &str, text: &str| {
        serde_json::from_str::<Vec<String>>(text)
            .map_err(|_| format!("{field} {text:?} is not a JSON array of strings"))
    };
    let optional = |field: &str, text: &Option<String>, n: usize| match text {
        None => Ok(vec![None; n]),
        Some(t) => serde_json::from_str::<Vec<Option<String>>>(t)
            .map_err(|_| format!("{field} {t:?} is not a JSON array of strings and nulls")),
    };
    let wrong = strings("wrong_vlm", &e.wrong_vlm)?;
    let reasons = strings("reason", &e.reason)?;
    let verdicts = optional("judge_verdict", &e.judge_verdict, wrong.len())?;
    let raws = optional("judge_raw", &e.judge_raw, wrong.len())?;
    let n = wrong.len();
    if n == 0
        || [reasons.len(), verdicts.len(), raws.len()]
            .iter()
            .any(|&m| m != n)
    {
        return Err(format!(
            "wrong_vlm, reason, judge_verdict and judge_raw hold {n}, {}, {} and {} samples",
            reasons.len(),
            verdicts.len(),
            raws.len()
        ));
    }
    Ok(wrong
        .into_iter()
        .zip(reasons)
        .zip(verdicts.into_iter().zip(raws))
        .map(
            |((wrong_vlm, reason), (judge_verdict, judge_raw))| RejectedQa {
                question: e.question.clone(),
                answer: e.answer.clone(),
                wrong_vlm,
                reason,
                judge_verdict,
                judge_raw,
            },
        )
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrong(answer: &str, reason: &str, verdict: Option<&str>) -> RejectedQa {
        RejectedQa {
            question: "q".into(),
            answer: "42".into(),
            wrong_vlm: answer.into(),
            reason: reason.into(),
            judge_verdict: verdict.map(str::to_string),
            judge_raw: verdict.map(|v| format!("... {v}")),
        }
    }

    #[test]
    fn wrong_samples_merge_into_one_entry_of_arrays() {
        let (e, idx) = merge_wrong(vec![
            (1, wrong("41", "verifier_mismatch", None)),
            (3, wrong("4 2", "judge_wrong", Some("WRONG"))),
        ]);
        assert_eq!(idx, [1, 3]);
        assert_eq!((e.question.as_str(), e.answer.as_str()), ("q", "42"));
        assert_eq!(e.wrong_vlm, r#"["41","4 2"]"#);
        assert_eq!(e.reason, r#"["verifier_mismatch","judge_wrong"]"#);
        assert_eq!(e.judge_verdict.as_deref(), Some(r#"[null,"WRONG"]"#));
        assert_eq!(e.judge_raw.as_deref(), Some(r#"[null,"... WRONG"]"#));
        // Read back: the two samples as they were.
        let back = split_wrong(&e).unwrap();
        assert_eq!(
            back,
            [
                wrong("41", "verifier_mismatch", None),
                wrong("4 2", "judge_wrong", Some("WRONG"))
            ]
        );
        let bad = RejectedQa {
            reason: r#"["x"]"#.into(),
            ..e.clone()
        };
        assert!(split_wrong(&bad).unwrap_err().contains("hold 2, 1"));
        let (e, _) = merge_wrong(vec![(0, wrong("7", "verifier_mismatch", None))]);
        assert_eq!((e.judge_verdict, e.judge_raw), (None, None));
    }

    #[test]
    fn clean_meta_gains_k_and_sample_indices_with_sorted_keys() {
        let meta = r#"{"position":3,"source_file":"a.parquet"}"#;
        let with = clean_meta_with_samples(meta, 4, serde_json::json!([0, 2]));
        assert_eq!(
            with,
            r#"{"position":3,"sample_index":[0,2],"samples":4,"source_file":"a.parquet"}"#
        );
        assert_eq!(samples_of(&with), Some(4));
        assert_eq!(samples_of(meta), None);
    }
}
