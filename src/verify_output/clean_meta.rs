//! `verify`'s check of a split row's `clean_meta` ([`crate::record::split_meta`]): the input
//! items and samples it names for the row's entries.

use crate::record::split_meta::{kept_from_of, samples_of, SAMPLE_INDEX_KEY};

/// A split row's `clean_meta` against its `n` entries and the run's `samples` (K): a JSON
/// object; where the row has cleaning notes and the output lists them per split row
/// (`kept_from_per_row`), `cleaning.kept_from` names one input `qa` index per entry, none of
/// them an item cleaning dropped; with K > 1, `"samples": K` and a
/// `"sample_index"` naming one sample below K per entry; no (index, sample) twice in the row
/// ([`crate::record::split_meta`]).
///
/// Errors: what is wrong, in words.
pub(super) fn check_clean_meta(
    meta: &str,
    samples: usize,
    n: usize,
    kept_from_per_row: bool,
) -> Result<(), String> {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(meta) else {
        return Err(format!("clean_meta is not a JSON object: {meta:?}"));
    };
    let stored = samples_of(meta).unwrap_or(1);
    if stored != samples {
        return Err(format!(
            "clean_meta says {stored} sample(s) per question, run.json {samples}"
        ));
    }
    // An output of a version before per-row `kept_from` lists the input row's in every row.
    let kept_from = kept_from_of(meta)
        .filter(|_| kept_from_per_row)
        .transpose()?;
    if let Some(kept) = &kept_from {
        if kept.len() != n {
            return Err(format!(
                "clean_meta cleaning.kept_from {kept:?} names {} qa item(s), the row holds {n}",
                kept.len()
            ));
        }
        let dropped = m
            .get("cleaning")
            .and_then(|c| c.get("dropped"))
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
            .filter_map(|d| d.get(0).and_then(serde_json::Value::as_u64));
        if let Some(d) = dropped.into_iter().find(|d| kept.contains(d)) {
            return Err(format!(
                "clean_meta cleaning.kept_from names qa item {d}, which cleaning dropped"
            ));
        }
    }
    let index = if samples > 1 {
        let index = m.get(SAMPLE_INDEX_KEY);
        let valid = |v: &serde_json::Value| v.as_u64().filter(|&s| (s as usize) < samples);
        match index.and_then(|v| v.as_array()).map(|a| a.iter().map(valid).collect()) {
            Some(Some(list)) if Vec::len(&list) == n => list,
            _ => {
                return Err(format!(
                    "clean_meta sample_index {index:?} does not name a sample below {samples} for each of {n} entries"
                ))
            }
        }
    } else {
        vec![0; n]
    };
    if let Some(kept) = kept_from {
        let mut pairs: Vec<(u64, u64)> = kept.into_iter().zip(index).collect();
        pairs.sort_unstable();
        if let Some(w) = pairs.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!(
                "clean_meta names qa item {} sample {} twice",
                w[0].0, w[0].1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampled_runs_clean_meta_must_name_each_entrys_sample() {
        let ok = r#"{"position":0,"sample_index":[0,3],"samples":4}"#;
        assert_eq!(check_clean_meta(ok, 4, 2, true), Ok(()));
        for (meta, why) in [
            ("{not json", "not a JSON object"),
            (
                r#"{"position":0}"#,
                "says 1 sample(s) per question, run.json 4",
            ),
            (r#"{"sample_index":[0,7],"samples":4}"#, "below 4"),
            (r#"{"sample_index":[0],"samples":4}"#, "each of 2 entries"),
            (
                r#"{"sample_index":[0,1],"samples":1e30}"#,
                "says 1 sample(s)",
            ),
            (
                r#"{"cleaning":{"kept_from":[1,1]},"sample_index":[2,2],"samples":4}"#,
                "qa item 1 sample 2 twice",
            ),
        ] {
            let err = check_clean_meta(meta, 4, 2, true).unwrap_err();
            assert!(err.contains(why), "{meta}: {err}");
        }
        // A greedy run's rows: any JSON object without K.
        assert_eq!(check_clean_meta(r#"{"a":1}"#, 1, 1, true), Ok(()));
        let sampled = r#"{"cleaning":{"kept_from":[1,1]},"sample_index":[0,2],"samples":4}"#;
        assert_eq!(check_clean_meta(sampled, 4, 2, true), Ok(()));
    }

    /// Issue 45 item 6: `kept_from` names exactly the input items of the row.
    #[test]
    fn kept_from_must_name_each_entrys_input_item() {
        let meta = |kept: &str| {
            format!(r#"{{"cleaning":{{"dropped":[[2,"off_task"]],"kept_from":{kept}}}}}"#)
        };
        assert_eq!(check_clean_meta(&meta("[1]"), 1, 1, true), Ok(()));
        for (kept, n, why) in [
            ("[0,1]", 1, "names 2 qa item(s), the row holds 1"),
            ("[2]", 1, "qa item 2, which cleaning dropped"),
            ("[0,0]", 2, "qa item 0 sample 0 twice"),
            (r#""0""#, 1, "is not a list of qa indices"),
        ] {
            let err = check_clean_meta(&meta(kept), 1, n, true).unwrap_err();
            assert!(err.contains(why), "{kept}: {err}");
            // An output of an earlier version listed the input row's items in every row.
            assert_eq!(check_clean_meta(&meta(kept), 1, n, false), Ok(()));
        }
    }
}
