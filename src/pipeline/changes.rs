//! What differs between the run that wrote an output folder and this one, in words a user
//! can act on ("--think changed: on → off", "the model changed: assets/model → ~/q7b"), for
//! the refusal of a rerun into that folder. The fingerprint hashes stay out of the message
//! (they are logged at debug level, `-v`).

use std::collections::{BTreeMap, BTreeSet};

use crate::settings::Fingerprint;

/// How a canonical setting is named to a user: its flag, or what it is.
fn setting_name(key: &str) -> String {
    match key {
        "data" => "the input (--data)".into(),
        "device" => "the device kind (--device)".into(),
        "verifiers" => "--verifier".into(),
        "sampling" => {
            "sampling (--samples, --temperature, --top-k, --top-p, --min-p, --seed)".into()
        }
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// A canonical setting's value as a user writes it: switches as `on`/`off`, strings bare,
/// lists comma-separated, nothing as `none`.
fn setting_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Bool(true) => "on".into(),
        serde_json::Value::Bool(false) => "off".into(),
        serde_json::Value::Null => "none".into(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(a) if a.is_empty() => "none".into(),
        serde_json::Value::Array(a) => a.iter().map(setting_value).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// What changed from the run of `old` to the run of `new`, one phrase per difference, in
/// words: the settings (by flag, with both values), the model (by the name the user gave it,
/// else the files that differ) and the input files (unless the input path itself changed).
pub fn describe_changes(old: &Fingerprint, new: &Fingerprint) -> Vec<String> {
    let mut changed = Vec::new();
    let a = serde_json::to_value(&old.settings).unwrap_or_default();
    let b = serde_json::to_value(&new.settings).unwrap_or_default();
    let empty = serde_json::Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    // Keys of both sides: a field left out when at its default is on one side only.
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    // `kernels` is left out at its device's default: native on the CPU, portable elsewhere.
    let default_of = |k: &str, side: &serde_json::Map<String, serde_json::Value>| match k {
        "dedup" | "generation_config" => serde_json::Value::Bool(true),
        "input_columns" => "keep".into(),
        "kernels" => match side.get("device").and_then(|d| d.as_str()) {
            Some("cpu") => "native".into(),
            _ => "portable".into(),
        },
        _ => serde_json::Value::Null,
    };
    for k in keys {
        let va = a
            .get(k.as_str())
            .cloned()
            .unwrap_or_else(|| default_of(k, a));
        let vb = b
            .get(k.as_str())
            .cloned()
            .unwrap_or_else(|| default_of(k, b));
        if va != vb {
            changed.push(format!(
                "{} changed: {} → {}",
                setting_name(k),
                setting_value(&va),
                setting_value(&vb)
            ));
        }
    }
    let names: BTreeSet<&String> = old
        .model_files
        .keys()
        .chain(new.model_files.keys())
        .collect();
    let files: Vec<&str> = names
        .into_iter()
        .filter(|n| old.model_files.get(*n) != new.model_files.get(*n))
        .map(String::as_str)
        .collect();
    if !files.is_empty() {
        match (&old.model, &new.model) {
            (Some(o), Some(n)) if o != n => changed.push(format!("the model changed: {o} → {n}")),
            _ => changed.push(format!("the model's files changed ({})", files.join(", "))),
        }
    }
    let data_changed = a.get("data") != b.get("data");
    if old.input_files != new.input_files && !data_changed {
        let old_map: BTreeMap<&String, &String> =
            old.input_files.iter().map(|(f, h)| (f, h)).collect();
        let new_map: BTreeMap<&String, &String> =
            new.input_files.iter().map(|(f, h)| (f, h)).collect();
        let names: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).copied().collect();
        let mut what = Vec::new();
        for name in names {
            match (old_map.get(name), new_map.get(name)) {
                (Some(a), Some(b)) if a == b => {}
                (Some(_), Some(_)) => what.push(format!("{name} changed content")),
                (Some(_), None) => what.push(format!("{name} was removed")),
                _ => what.push(format!("{name} was added")),
            }
        }
        if what.is_empty() {
            what.push("its files are read in another order".into());
        }
        changed.push(format!("the input changed: {}", what.join(", ")));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::fingerprint;

    fn base() -> Fingerprint {
        let settings = crate::settings::CanonicalSettings {
            data: "/d".into(),
            family: None,
            think: true,
            judge: true,
            judge_calibrate: 0,
            number_guard: true,
            device: "cpu".into(),
            dtype: crate::settings::DTypeSpec::F32,
            kernels: None,
            max_new_tokens: 2048,
            think_budget: None,
            shard: "0/1".into(),
            verifiers: Vec::new(),
            dedup: true,
            min_pixels: None,
            max_pixels: None,
            read: Default::default(),
            input_columns: Default::default(),
            decoding: crate::settings::CanonicalDecoding::from(
                &crate::settings::Decoding::default(),
            ),
            sampling: None,
        };
        let mut fp = fingerprint(
            settings,
            BTreeMap::from([("model.safetensors".to_string(), "ab".to_string())]),
            vec![("/d/a.parquet".to_string(), "11".to_string())],
        );
        fp.model = Some("assets/model".into());
        fp
    }

    #[test]
    fn changes_are_named_in_words_without_hashes() {
        let old = base();
        let mut new = base();
        new.settings.think = false;
        new.settings.dedup = false;
        new.settings.verifiers = vec!["OrandCar=exact".into()];
        assert_eq!(
            describe_changes(&old, &new),
            vec![
                "--dedup changed: on → off",
                "--think changed: on → off",
                "--verifier changed: none → OrandCar=exact"
            ]
        );
        // `--kernels` left out is the device's default, named as such.
        let mut new = base();
        new.settings.kernels = Some(crate::settings::KernelsSpec::Portable);
        assert_eq!(
            describe_changes(&new, &old),
            vec!["--kernels changed: portable → native"]
        );
        // `--input-columns` left out is `keep`, named as such.
        let mut new = base();
        new.settings.input_columns = crate::settings::InputColumns::Drop;
        assert_eq!(
            describe_changes(&old, &new),
            vec!["--input-columns changed: keep → drop"]
        );
        let mut new = base();
        new.model = Some("~/q7b".into());
        new.model_files
            .insert("model.safetensors".into(), "cd".into());
        assert_eq!(
            describe_changes(&old, &new),
            vec!["the model changed: assets/model → ~/q7b"]
        );
        new.model = old.model.clone();
        assert_eq!(
            describe_changes(&old, &new),
            vec!["the model's files changed (model.safetensors)"]
        );
        let mut new = base();
        new.input_files[0].1 = "22".into();
        assert_eq!(
            describe_changes(&old, &new),
            vec!["the input changed: /d/a.parquet changed content"]
        );
        new.settings.data = "/e".into();
        assert_eq!(
            describe_changes(&old, &new),
            vec!["the input (--data) changed: /d → /e"]
        );
    }
}
