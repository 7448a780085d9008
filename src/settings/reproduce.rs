//! The `verisample run` command line that reproduces a run's outputs, for the dataset card:
//! every output-determining setting ([`super::CanonicalSettings`]) that differs from its
//! default, as the flag a user types, and no absolute local path (a folder outside the
//! working directory is named by its last component, a placeholder the reader replaces; the
//! output folder is `OUT`).

use std::path::Path;

use super::{Settings, SettingsError};

/// `path` as the card shows it: as given when relative (and free of `..`), else its last
/// component (`/home/me/models/Qwen2-VL-2B` → `Qwen2-VL-2B`).
pub fn portable_path(path: &Path) -> String {
    let relative = path.is_relative()
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if relative {
        return path.to_string_lossy().into_owned();
    }
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "FOLDER".to_string())
}

/// The keys `--card-meta` takes: the Hub's dataset-card metadata a published card carries
/// (`size_categories` is computed from the splits). `license`, `pretty_name` take one value;
/// the others are lists.
pub const CARD_META_KEYS: [&str; 5] = [
    "license",
    "language",
    "task_categories",
    "source_datasets",
    "pretty_name",
];

/// Parses `--card-meta KEY=VALUE` entries into (key, value) pairs in the given order.
///
/// Errors: an entry without `=`, an empty value, or a key outside [`CARD_META_KEYS`] (the
/// message lists them).
pub fn card_meta_entries(entries: &[String]) -> Result<Vec<(String, String)>, SettingsError> {
    entries
        .iter()
        .map(|e| {
            let invalid = |why: String| SettingsError::Invalid {
                key: "card-meta",
                value: e.clone(),
                why,
            };
            let (k, v) = e
                .split_once('=')
                .ok_or_else(|| invalid("expected KEY=VALUE".into()))?;
            let (k, v) = (k.trim(), v.trim());
            if !CARD_META_KEYS.contains(&k) {
                return Err(invalid(format!(
                    "KEY is one of {}",
                    CARD_META_KEYS.join(", ")
                )));
            }
            if v.is_empty() {
                return Err(invalid("the value is empty".into()));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|pairs| {
            for single in ["license", "pretty_name"] {
                let given: Vec<&String> = pairs
                    .iter()
                    .filter(|(k, _)| k == single)
                    .map(|(_, v)| v)
                    .collect();
                if given.len() > 1 {
                    return Err(SettingsError::Invalid {
                        key: "card-meta",
                        value: format!("{single}={}", given[1]),
                        why: format!(
                            "{single} takes one value, given twice (first {single}={})",
                            given[0]
                        ),
                    });
                }
            }
            Ok(pairs)
        })
}

/// A shell word: bare when it holds only safe characters, else single-quoted.
fn word(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@+,".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl Settings {
    /// The model as the card names it: the hub id a cached model was found by, else the
    /// model folder's [`portable_path`].
    pub fn model_name(&self) -> String {
        if self.model.from_hub_cache {
            self.model.spec.clone()
        } else {
            portable_path(Path::new(&self.model.spec))
        }
    }

    /// The input as the card names it: `OWNER/NAME` for a dataset of the local hub cache,
    /// else the `--data` path's [`portable_path`].
    pub fn data_name(&self) -> String {
        match &self.read.hub {
            Some(hub) => hub.repo.clone(),
            None => portable_path(self.data_as_typed.as_ref().unwrap_or(&self.data)),
        }
    }

    /// `verisample run …` with every output-determining setting that is not its default
    /// (`--limit` included: it decides which rows are in the splits), paths made portable.
    pub fn reproduce_command(&self) -> String {
        let mut args: Vec<String> = vec![
            "verisample run".into(),
            format!("--model {}", word(&self.model_name())),
            format!("--data {}", word(&self.data_name())),
        ];
        let mut flag = |name: &str, value: String| args.push(format!("--{name} {}", word(&value)));
        if let Some(hub) = &self.read.hub {
            flag("data-config", hub.config.clone());
            flag("data-split", hub.split.clone());
        }
        let columns = &self.read.columns;
        for (name, value) in [
            ("image-column", &columns.image),
            ("question-column", &columns.question),
            ("answer-column", &columns.answer),
        ] {
            if let Some(v) = value {
                flag(name, v.clone());
            }
        }
        if let Some(root) = &self.read.images_root {
            flag("images-root", portable_path(root));
        }
        // The output folder's name is no part of the data: the same job into another folder
        // (a merge's, another shard layout's) writes the same card.
        flag("out", "OUT".into());
        if let Some(f) = &self.family {
            flag("family", f.clone());
        }
        let off = |on: bool| (!on).then(|| "off".to_string());
        for (name, value) in [
            ("think", off(self.think)),
            ("judge", off(self.judge)),
            ("number-guard", off(self.number_guard)),
            ("dedup", off(self.dedup)),
            ("generation-config", off(self.decoding.generation_config)),
        ] {
            if let Some(v) = value {
                flag(name, v);
            }
        }
        if self.judge_calibrate > 0 {
            flag("judge-calibrate", self.judge_calibrate.to_string());
        }
        for v in &self.verifiers {
            flag("verifier", v.clone());
        }
        flag("device", self.device.kind().to_string());
        flag("dtype", format!("{:?}", self.dtype).to_lowercase());
        if let Some(k) = self.kernels {
            flag("kernels", format!("{k:?}").to_lowercase());
        }
        if self.max_new_tokens != super::DEFAULT_MAX_NEW_TOKENS {
            flag("max-new-tokens", self.max_new_tokens.to_string());
        }
        if let Some(b) = self.think_budget {
            flag("think-budget", b.to_string());
        }
        if let Some(p) = self.decoding.repetition_penalty_override {
            flag("repetition-penalty", p.to_string());
        }
        if let Some(p) = self.min_pixels {
            flag("min-pixels", p.to_string());
        }
        if let Some(p) = self.max_pixels {
            flag("max-pixels", p.to_string());
        }
        if let Some(params) = &self.sampling.params {
            flag("samples", self.sampling.samples.to_string());
            flag("temperature", params.temperature.to_string());
            if let Some(k) = params.top_k {
                flag("top-k", k.to_string());
            }
            if let Some(p) = params.top_p {
                flag("top-p", p.to_string());
            }
            if let Some(p) = params.min_p {
                flag("min-p", p.to_string());
            }
            flag("seed", params.seed.to_string());
            if self.sampling.distinct {
                flag("distinct-samples", "on".into());
            }
        }
        if !self.input_columns.is_keep() {
            flag("input-columns", "drop".into());
        }
        if self.shard.count > 1 {
            flag("shard", self.shard.to_string());
        }
        if let Some(n) = self.limit {
            flag("limit", n.to_string());
        }
        for entry in &self.card_meta {
            flag("card-meta", entry.clone());
        }
        args.join(" \\\n    ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_and_parent_paths_keep_only_their_last_component() {
        assert_eq!(
            portable_path(Path::new("/home/me/models/Qwen2-VL")),
            "Qwen2-VL"
        );
        assert_eq!(portable_path(Path::new("../data/orand")), "orand");
        assert_eq!(
            portable_path(Path::new("assets/sample/data")),
            "assets/sample/data"
        );
        assert_eq!(word("a b'c"), r"'a b'\''c'");
        assert_eq!(word("OrandCar=alnum"), "OrandCar=alnum");
        let ok = card_meta_entries(&["license=cc-by-4.0".into(), "language = en".into()]);
        assert_eq!(
            ok.unwrap(),
            [
                ("license".into(), "cc-by-4.0".into()),
                ("language".into(), "en".into())
            ]
        );
        let bad = card_meta_entries(&["licence=mit".into()])
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("--card-meta licence=mit") && bad.contains("source_datasets"),
            "{bad}"
        );
        assert!(card_meta_entries(&["license".into()]).is_err());
        let twice = card_meta_entries(&["license=mit".into(), "license=apache-2.0".into()]);
        assert!(twice.unwrap_err().to_string().contains("given twice"));
        let languages = card_meta_entries(&["language=en".into(), "language=fr".into()]);
        assert_eq!(languages.unwrap().len(), 2);
    }
}
