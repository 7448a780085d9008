//! Datasets in the local Hugging Face hub cache, named by their id (`--data OWNER/NAME`),
//! resolved offline the way `--model` is: `datasets--OWNER--NAME/snapshots/<rev>/` with `rev`
//! from `refs/main` (`huggingface_hub`'s cache layout), the parquet files of one config and
//! split taken from the dataset card's YAML front matter (`configs:`, as `datasets`'
//! `MetadataConfigs` reads it), else from the conventional layouts `data/<split>-*.parquet`
//! (config `default`) and `<config>/<split>-*.parquet`.
//!
//! The snapshot's files are links into the repo's `blobs/`; the input scan follows exactly
//! those links out of the dataset folder ([`super::scan::hub_blobs`]). A card's `data_files`
//! pattern must stay inside the snapshot: one that is absolute, has a `..` component or
//! whose folder resolves outside it is refused ([`HubError::Escapes`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_norway::Value as Yaml;

/// A dataset of the hub cache as resolved for a run (recorded in `run.json` and the
/// fingerprint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubDataset {
    /// The repo id, `OWNER/NAME`.
    pub repo: String,
    /// The snapshot read: the commit hash `refs/main` points at.
    pub revision: String,
    /// The config (`config_name` of the card, or the folder of a conventional layout).
    pub config: String,
    /// The split.
    pub split: String,
    /// The `data_files` pattern of that split, relative to the snapshot.
    pub pattern: String,
}

/// Why a hub dataset id did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// No such repo in the cache.
    #[error(
        "dataset `{repo}` is neither a local path nor in the Hugging Face cache (looked in {}). \
         verisample never downloads: fetch it once with `hf download {repo} --repo-type dataset`, \
         or pass --data with the folder or parquet files", looked.display()
    )]
    NotFound {
        /// The id given.
        repo: String,
        /// The repo folder looked for.
        looked: PathBuf,
    },
    /// The repo has no `refs/main` or its snapshot folder is missing.
    #[error("dataset `{repo}`: no snapshot of refs/main in {}: {why}", dir.display())]
    NoSnapshot {
        /// The id given.
        repo: String,
        /// The repo folder.
        dir: PathBuf,
        /// What is missing.
        why: String,
    },
    /// The card's YAML front matter is not what `datasets` accepts.
    #[error("dataset `{repo}`: README.md: {why}")]
    Card {
        /// The id given.
        repo: String,
        /// What is wrong.
        why: String,
    },
    /// A choice (`--data-config`, `--data-split`) is missing or names nothing there.
    #[error("dataset `{repo}`: {why}; choose one with --{key} (found: {})", found.join(", "))]
    Choose {
        /// The id given.
        repo: String,
        /// `data-config` or `data-split`.
        key: &'static str,
        /// What is wrong.
        why: String,
        /// The names there are.
        found: Vec<String>,
    },
    /// The chosen split lists several `data_files` patterns.
    #[error(
        "dataset `{repo}`: config {config} split {split} lists several data_files ({}); \
         verisample reads one pattern per split: pass --data with the folder or a glob",
        patterns.join(", ")
    )]
    SeveralPatterns {
        /// The id given.
        repo: String,
        /// The config.
        config: String,
        /// The split.
        split: String,
        /// Its patterns.
        patterns: Vec<String>,
    },
    /// A card `data_files` pattern of the chosen split leads out of the snapshot: it is
    /// absolute, has a `..` component, or its folder resolves (through links) outside it.
    #[error(
        "dataset `{repo}`: README.md (the dataset card), config {config}, split {split}: \
         data_files `{pattern}` {why}; only files inside the snapshot are read"
    )]
    Escapes {
        /// The id given.
        repo: String,
        /// The config.
        config: String,
        /// The split.
        split: String,
        /// The pattern as the card gives it.
        pattern: String,
        /// How it leads out.
        why: String,
    },
    /// The chosen split's pattern matches no file of the snapshot.
    #[error("dataset `{repo}`: config {config} split {split}: {why}")]
    NoFiles {
        /// The id given.
        repo: String,
        /// The config.
        config: String,
        /// The split.
        split: String,
        /// The reader's message.
        why: String,
    },
}

/// Config name → (`default: true`, split → `data_files` patterns), in card order.
type Configs = Vec<(String, bool, BTreeMap<String, Vec<String>>)>;

/// Resolve `repo` (`OWNER/NAME`) in the hub cache folder `cache`, choosing `config` and
/// `split` (each may be left out when there is only one, or a default config).
///
/// Returns the dataset and the input spec for the reader: the snapshot joined with the
/// split's pattern (a glob or a file).
///
/// Errors: [`HubError`], each naming the repo; a choice left open or naming nothing lists
/// what there is.
pub fn resolve_hub_dataset(
    cache: &Path,
    repo: &str,
    config: Option<&str>,
    split: Option<&str>,
) -> Result<(HubDataset, PathBuf), HubError> {
    let dir = cache.join(format!("datasets--{}", repo.replace('/', "--")));
    if !dir.is_dir() {
        return Err(HubError::NotFound {
            repo: repo.into(),
            looked: dir,
        });
    }
    let no_snapshot = |why: String| HubError::NoSnapshot {
        repo: repo.into(),
        dir: dir.clone(),
        why,
    };
    let revision = std::fs::read_to_string(dir.join("refs/main"))
        .map_err(|e| no_snapshot(format!("refs/main: {e}")))?
        .trim()
        .to_string();
    let snapshot = dir.join("snapshots").join(&revision);
    if revision.is_empty() || revision.contains(['/', '\\']) || !snapshot.is_dir() {
        return Err(no_snapshot(format!("snapshots/{revision} is not a folder")));
    }
    let card = match std::fs::read_to_string(snapshot.join("README.md")) {
        Ok(text) => card_configs(&text).map_err(|why| HubError::Card {
            repo: repo.into(),
            why,
        })?,
        Err(_) => Vec::new(),
    };
    let configs = if card.is_empty() {
        conventional_configs(&snapshot)
    } else {
        card
    };
    let (config, splits) = choose_config(repo, &configs, config)?;
    let names: Vec<String> = splits.keys().cloned().collect();
    let choose = |why: String| HubError::Choose {
        repo: repo.into(),
        key: "data-split",
        why,
        found: names.clone(),
    };
    let (split, patterns) = match split {
        Some(s) => splits
            .get_key_value(s)
            .ok_or_else(|| choose(format!("config {config} has no split {s}")))?,
        None if splits.len() == 1 => splits.iter().next().expect("one split"),
        None => {
            return Err(choose(format!(
                "config {config} has {} splits",
                splits.len()
            )))
        }
    };
    let escapes = |pattern: &String, why: String| HubError::Escapes {
        repo: repo.into(),
        config: config.clone(),
        split: split.clone(),
        pattern: pattern.clone(),
        why,
    };
    if let Some((pattern, why)) = patterns
        .iter()
        .find_map(|p| leads_out(p).map(|why| (p, why)))
    {
        return Err(escapes(pattern, why.into()));
    }
    let [pattern] = patterns.as_slice() else {
        return Err(HubError::SeveralPatterns {
            repo: repo.into(),
            config,
            split: split.clone(),
            patterns: patterns.clone(),
        });
    };
    let spec = snapshot.join(pattern.trim_start_matches("./"));
    let inputs = match super::scan::resolve_inputs(&spec.to_string_lossy()) {
        Ok(inputs) => inputs,
        Err(e) => {
            return Err(HubError::NoFiles {
                repo: repo.into(),
                config,
                split: split.clone(),
                why: e.to_string(),
            })
        }
    };
    // The files' folder, links resolved, must lie in the snapshot too (a folder of the
    // snapshot that is a link elsewhere); files inside it may still be links into blobs/.
    let inside = snapshot
        .canonicalize()
        .is_ok_and(|s| inputs.root.starts_with(s));
    if !inside {
        let why = format!(
            "resolves (through a link) to the folder {}, outside the snapshot {}",
            inputs.root.display(),
            snapshot.display()
        );
        return Err(escapes(pattern, why));
    }
    let found = HubDataset {
        repo: repo.into(),
        revision,
        config,
        split: split.clone(),
        pattern: pattern.clone(),
    };
    Ok((found, spec))
}

/// Why the card pattern `pattern` leads out of the snapshot by its text alone (`None` when
/// it does not): it is absolute (a root, or a Windows drive or UNC prefix, in `/` or `\`
/// spelling) or has a `..` component. Checked before any file is looked at.
fn leads_out(pattern: &str) -> Option<&'static str> {
    // `datasets` patterns use `/`; a `\` is read as a separator too, so that `..\x` or
    // `C:\x` is refused on every system rather than taken as a file name.
    let parts: Vec<&str> = pattern.split(['/', '\\']).collect();
    let drive = matches!(parts[0].as_bytes(), [letter, b':'] if letter.is_ascii_alphabetic());
    if Path::new(pattern).is_absolute() || pattern.starts_with(['/', '\\']) || drive {
        return Some("is absolute");
    }
    parts
        .contains(&"..")
        .then_some("has a `..` component (leads to the folder above)")
}

/// The config to read: the one named, else the default of `datasets`'
/// `MetadataConfigs.get_default_config_name` (the only config, the one named `default`, or
/// the one with `default: true`, if exactly one qualifies).
fn choose_config<'c>(
    repo: &str,
    configs: &'c Configs,
    name: Option<&str>,
) -> Result<(String, &'c BTreeMap<String, Vec<String>>), HubError> {
    let choose = |why: String| HubError::Choose {
        repo: repo.into(),
        key: "data-config",
        why,
        found: configs.iter().map(|c| c.0.clone()).collect(),
    };
    let found = match name {
        Some(n) => configs
            .iter()
            .find(|c| c.0 == n)
            .ok_or_else(|| choose(format!("no config {n}")))?,
        None => {
            let defaults: Vec<_> = configs
                .iter()
                .filter(|c| configs.len() == 1 || c.0 == "default" || c.1)
                .collect();
            match defaults.as_slice() {
                [one] => *one,
                [] if configs.is_empty() => {
                    return Err(choose(
                        "no parquet files in its README configs, data/<split>-*.parquet or \
                         <config>/<split>-*.parquet"
                            .into(),
                    ))
                }
                [] => {
                    return Err(choose(format!(
                        "{} configs and none is the default",
                        configs.len()
                    )))
                }
                _ => {
                    return Err(choose(format!(
                        "several default configs: {}",
                        defaults
                            .iter()
                            .map(|c| c.0.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
    };
    Ok((found.0.clone(), &found.2))
}

/// A YAML scalar as the string `datasets` would use (`config_name: 2020` is `"2020"`).
fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// One or several patterns (`path: data/*` or `path: [a/*, b/*]`).
fn patterns(y: &Yaml) -> Option<Vec<String>> {
    match y {
        Yaml::Sequence(items) => items.iter().map(scalar).collect(),
        other => scalar(other).map(|s| vec![s]),
    }
}

/// The Hub metadata of a dataset card (`README.md` with YAML front matter) that a card
/// derived from it inherits: `license`, `language`, `task_categories`, each as its list of
/// non-empty strings (a string is a one-value list), and what was left out and why (invalid
/// YAML, a value that is not text). Empty when the text has no front matter.
pub fn card_metadata(text: &str) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let mut problems = Vec::new();
    let text = text.trim_start_matches('\u{feff}');
    let Some(rest) = text.strip_prefix("---") else {
        return (BTreeMap::new(), problems);
    };
    let Some(end) = rest.find("\n---") else {
        problems.push("its front matter has no closing `---`".to_string());
        return (BTreeMap::new(), problems);
    };
    let doc = match serde_norway::from_str::<Yaml>(&rest[..end]) {
        Ok(doc) => doc,
        Err(e) => {
            problems.push(format!("its front matter is not valid YAML: {e}"));
            return (BTreeMap::new(), problems);
        }
    };
    let mut meta = BTreeMap::new();
    for key in ["license", "language", "task_categories"] {
        let items: Vec<&Yaml> = match &doc[key] {
            Yaml::Null => continue,
            Yaml::Sequence(items) => items.iter().collect(),
            y => vec![y],
        };
        let mut values = Vec::new();
        for item in items {
            match item {
                Yaml::String(s) if !s.trim().is_empty() => values.push(s.trim().to_string()),
                other => problems.push(format!(
                    "`{key}`: {} is not a non-empty string, left out",
                    serde_norway::to_string(other).unwrap_or_default().trim()
                )),
            }
        }
        if !values.is_empty() {
            meta.insert(key.to_string(), values);
        }
    }
    (meta, problems)
}

/// The `configs:` of a dataset card (`README.md` with YAML front matter between `---`
/// lines); empty when there is no front matter or no `configs` key. `data_files` as a string
/// or a list of strings is the split `train`, as `datasets`' `sanitize_patterns` reads it.
///
/// Errors (as a message): invalid YAML, or `configs` in a shape `datasets` refuses
/// (`MetadataConfigs._raise_if_data_files_field_not_valid`).
fn card_configs(text: &str) -> Result<Configs, String> {
    let text = text.trim_start_matches('\u{feff}');
    let Some(rest) = text.strip_prefix("---") else {
        return Ok(Vec::new());
    };
    let Some(end) = rest.find("\n---") else {
        return Ok(Vec::new());
    };
    let doc: Yaml = serde_norway::from_str(&rest[..end]).map_err(|e| format!("YAML: {e}"))?;
    let list = &doc["configs"];
    if list.is_null() {
        return Ok(Vec::new());
    }
    let list = list
        .as_sequence()
        .ok_or("`configs` must be a list of {config_name, data_files}")?;
    let mut out = Configs::new();
    for c in list {
        let name = scalar(&c["config_name"]).ok_or("each config needs a `config_name`")?;
        let bad = || {
            format!("config {name}: `data_files` must be a string, a list of strings or a list of {{split, path}}")
        };
        let mut splits = BTreeMap::new();
        match &c["data_files"] {
            Yaml::Sequence(items) if items.iter().all(Yaml::is_mapping) => {
                for item in items {
                    let split = scalar(&item["split"]).ok_or_else(bad)?;
                    let paths = patterns(&item["path"]).ok_or_else(bad)?;
                    splits.entry(split).or_insert_with(Vec::new).extend(paths);
                }
            }
            Yaml::Null => {}
            other => {
                splits.insert("train".to_string(), patterns(other).ok_or_else(bad)?);
            }
        }
        let default = c["default"].as_bool().unwrap_or(false);
        out.push((name, default, splits));
    }
    Ok(out)
}

/// The splits of a folder in the layout `<split>-*.parquet` (what `push_to_hub` writes):
/// split name → its pattern `<prefix>/<split>-*.parquet`.
fn splits_in(folder: &Path, prefix: &str) -> BTreeMap<String, Vec<String>> {
    let mut splits = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return splits;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some((split, _)) = name
            .strip_suffix(".parquet")
            .and_then(|stem| stem.split_once('-'))
        {
            if !split.is_empty() && !split.starts_with(['.', '_']) {
                splits.insert(
                    split.to_string(),
                    vec![format!("{prefix}/{split}-*.parquet")],
                );
            }
        }
    }
    splits
}

/// Configs of a snapshot without card `configs`: `data/<split>-*.parquet` is the config
/// `default`; else every top folder with `<split>-*.parquet` files is a config of its name.
fn conventional_configs(snapshot: &Path) -> Configs {
    let data = splits_in(&snapshot.join("data"), "data");
    if !data.is_empty() {
        return vec![("default".into(), true, data)];
    }
    let mut folders: Vec<String> = std::fs::read_dir(snapshot)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(['.', '_']))
        .collect();
    folders.sort();
    folders
        .into_iter()
        .filter_map(|f| {
            let splits = splits_in(&snapshot.join(&f), &f);
            (!splits.is_empty()).then_some((f, false, splits))
        })
        .collect()
}

#[cfg(test)]
mod tests;
