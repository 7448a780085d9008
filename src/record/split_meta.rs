//! What a split row's `clean_meta` says about the QA items of that row, beside the input
//! row's provenance and cleaning notes: `cleaning.kept_from`, the input `qa` index of each
//! item of this split row (in item order; the samples of one question repeat its index), and
//! for rejection sampling (`--samples K > 1`) `"samples": K` and `"sample_index"`, the sample
//! of each item. Every sample — accepted or wrong — is its own QA item, so every column of a
//! split holds one value of one type. Written by the pipeline, read back by `verisample verify`.

use crate::verifiers::think::AnswerFormat;

/// The `clean_meta` key holding K.
pub const SAMPLES_KEY: &str = "samples";
/// The `clean_meta` key holding each QA item's sample index.
pub const SAMPLE_INDEX_KEY: &str = "sample_index";
/// The `clean_meta` key holding `--think-budget` N.
pub const THINK_BUDGET_KEY: &str = "think_budget";
/// The `clean_meta` key holding, per QA item, whether the thinking budget ended its reasoning.
pub const THINK_BUDGET_HIT_KEY: &str = "think_budget_hit";
/// The `clean_meta` key holding where the model's family writes its final answer, when not
/// after the reasoning ([`AnswerFormat`]; GLM-4.1V: `"glm_box"`): `vlm_answer` and `wrong_vlm`
/// hold the whole text after the reasoning, and `verify` reads the answer out of it this way.
pub const ANSWER_FORMAT_KEY: &str = "answer_format";
/// The `clean_meta` object holding the cleaner's notes ([`crate::clean::RowNotes`]).
pub const CLEANING_KEY: &str = "cleaning";
/// The key, inside [`CLEANING_KEY`], holding each item's input `qa` index.
pub const KEPT_FROM_KEY: &str = "kept_from";

/// `clean_meta` of one split row: the input row's (`clean_meta`, a JSON object), its
/// `cleaning.kept_from` replaced by `kept_from` (the input `qa` index of each item of this
/// split row; left out when the row's `clean_meta` has no `cleaning` object), and with
/// `sampling` = `Some((K, indices))` K and the sample of each item, with `think_budget` =
/// `Some((N, hits))` the budget and whether it ended each item's reasoning. Keys stay sorted,
/// as in every `clean_meta`.
pub fn split_row_meta(
    clean_meta: &str,
    kept_from: &[u32],
    sampling: Option<(usize, &[u32])>,
    think_budget: Option<(usize, &[bool])>,
    format: AnswerFormat,
) -> String {
    let mut meta: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(clean_meta).unwrap_or_default();
    if let Some(serde_json::Value::Object(cleaning)) = meta.get_mut(CLEANING_KEY) {
        cleaning.insert(KEPT_FROM_KEY.into(), serde_json::json!(kept_from));
    }
    if let Some((samples, index)) = sampling {
        meta.insert(SAMPLES_KEY.into(), samples.into());
        meta.insert(SAMPLE_INDEX_KEY.into(), serde_json::json!(index));
    }
    if let Some((budget, hits)) = think_budget {
        meta.insert(THINK_BUDGET_KEY.into(), budget.into());
        meta.insert(THINK_BUDGET_HIT_KEY.into(), serde_json::json!(hits));
    }
    if !format.is_after_think() {
        meta.insert(ANSWER_FORMAT_KEY.into(), serde_json::json!(format));
    }
    serde_json::Value::Object(meta).to_string()
}

/// The answer format a split row's `clean_meta` names ([`ANSWER_FORMAT_KEY`]); the text after
/// the reasoning when it names none.
///
/// Errors: the value when it is not a known format.
pub fn answer_format_of(clean_meta: &str) -> Result<AnswerFormat, String> {
    let meta: serde_json::Value = serde_json::from_str(clean_meta).unwrap_or_default();
    match meta.get(ANSWER_FORMAT_KEY) {
        None => Ok(AnswerFormat::AfterThink),
        Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
            format!(
                "clean_meta {ANSWER_FORMAT_KEY} {v} is not an answer format (known: \
                     \"glm_box\"; absent: the text after the reasoning)"
            )
        }),
    }
}

/// K of a split row's `clean_meta` when it holds more than one sample per question (`None`
/// for a greedy run's rows, or K = 1).
pub fn samples_of(clean_meta: &str) -> Option<usize> {
    let meta: serde_json::Value = serde_json::from_str(clean_meta).ok()?;
    let k = usize::try_from(meta.get(SAMPLES_KEY)?.as_u64()?).ok()?;
    (k > 1).then_some(k)
}

/// `cleaning.kept_from` of a split row's `clean_meta`: `None` when the row has no `cleaning`
/// object (nothing to check); `Some(Err)` when it is there but not a list of indices.
pub fn kept_from_of(clean_meta: &str) -> Option<Result<Vec<u64>, String>> {
    let meta: serde_json::Value = serde_json::from_str(clean_meta).ok()?;
    let cleaning = meta.get(CLEANING_KEY)?;
    let list = cleaning
        .get(KEPT_FROM_KEY)
        .and_then(serde_json::Value::as_array)
        .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect());
    Some(list.ok_or_else(|| {
        format!(
            "clean_meta cleaning.kept_from {:?} is not a list of qa indices",
            cleaning.get(KEPT_FROM_KEY)
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_row_meta_sets_kept_from_and_samples_with_sorted_keys() {
        let meta = r#"{"cleaning":{"dropped":[[0,"duplicate"]],"kept_from":[0,1]},"position":3,"source_file":"a.parquet"}"#;
        let greedy = split_row_meta(meta, &[1], None, None, AnswerFormat::AfterThink);
        assert_eq!(
            greedy,
            r#"{"cleaning":{"dropped":[[0,"duplicate"]],"kept_from":[1]},"position":3,"source_file":"a.parquet"}"#
        );
        assert_eq!(samples_of(&greedy), None);
        assert_eq!(kept_from_of(&greedy), Some(Ok(vec![1])));
        let sampled = split_row_meta(
            meta,
            &[1, 1],
            Some((4, &[0, 2])),
            None,
            AnswerFormat::AfterThink,
        );
        assert_eq!(
            sampled,
            r#"{"cleaning":{"dropped":[[0,"duplicate"]],"kept_from":[1,1]},"position":3,"sample_index":[0,2],"samples":4,"source_file":"a.parquet"}"#
        );
        assert_eq!(samples_of(&sampled), Some(4));
        let budgeted = split_row_meta(
            meta,
            &[0, 1],
            None,
            Some((64, &[true, false])),
            AnswerFormat::AfterThink,
        );
        assert_eq!(
            budgeted,
            r#"{"cleaning":{"dropped":[[0,"duplicate"]],"kept_from":[0,1]},"position":3,"source_file":"a.parquet","think_budget":64,"think_budget_hit":[true,false]}"#
        );
        let glm = split_row_meta(meta, &[1], None, None, AnswerFormat::GlmBox);
        assert!(glm.ends_with(r#""source_file":"a.parquet"}"#), "{glm}");
        assert!(
            glm.starts_with(r#"{"answer_format":"glm_box","cleaning""#),
            "{glm}"
        );
        assert_eq!(answer_format_of(&glm), Ok(AnswerFormat::GlmBox));
        assert_eq!(answer_format_of(&greedy), Ok(AnswerFormat::AfterThink));
        assert!(answer_format_of(r#"{"answer_format":"boxed"}"#).is_err());
        // A row without cleaning notes keeps none.
        assert_eq!(
            split_row_meta("{}", &[0], None, None, AnswerFormat::AfterThink),
            "{}"
        );
        assert_eq!(kept_from_of("{}"), None);
        assert!(kept_from_of(r#"{"cleaning":{"kept_from":"x"}}"#)
            .unwrap()
            .unwrap_err()
            .contains("not a list"));
    }
}
