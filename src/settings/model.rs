//! Where `--model` points (a local folder or the offline Hugging Face cache) and the hashes
//! of its files for the run fingerprint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::file_hash::FileHasher;
use super::{rebase, SettingsError};

/// Where the model weights come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedModel {
    /// What the user wrote (`--model`).
    pub spec: String,
    /// The folder holding `config.json` and the safetensors files.
    pub dir: PathBuf,
    /// `true` when found in the Hugging Face cache rather than as a local folder.
    pub from_hub_cache: bool,
    /// `architectures` of the folder's `config.json`, read when resolved: the dataset card
    /// names them, also from a merge that has no model (it reads them from `run.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
    /// `_name_or_path` of `config.json`, likewise (absent when it has none or it is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_or_path: Option<String>,
}

/// `architectures` and `_name_or_path` of `dir/config.json` (empty when it cannot be read:
/// `run` reports an unreadable config.json itself, naming its field).
fn config_facts(dir: &Path) -> (Vec<String>, Option<String>) {
    let config: serde_json::Value = std::fs::read(dir.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let architectures = config["architectures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let name_or_path = config["_name_or_path"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(String::from);
    (architectures, name_or_path)
}

/// The files of a model folder that define its behaviour: every `*.safetensors` (weights),
/// `*.json` (config, tokenizer, chat template), `*.jinja` and `*.txt` (merges), by name,
/// sorted, with their sizes in bytes (symlinks of HF cache snapshots followed).
///
/// Errors: I/O on listing.
pub fn model_files(dir: &Path) -> std::io::Result<BTreeMap<String, (PathBuf, u64)>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = match path.file_name().and_then(|n| n.to_str()) {
            Some(n) => n.to_string(),
            None => continue,
        };
        let wanted = [".safetensors", ".json", ".jinja", ".txt"]
            .iter()
            .any(|ext| name.ends_with(ext));
        if wanted && path.is_file() {
            let size = std::fs::metadata(&path)?.len();
            out.insert(name, (path, size));
        }
    }
    Ok(out)
}

/// Hash the files of a model folder ([`model_files`]) with `hasher` (HF blob names and the
/// hash cache where they answer). Returns file name → hex sha256, sorted; `progress` gets the
/// bytes of each read.
///
/// Errors: I/O on listing or reading; a damaged HF blob with `--verify-weights`.
pub fn hash_model_files(
    dir: &Path,
    hasher: &mut FileHasher,
    progress: &mut dyn FnMut(u64),
) -> std::io::Result<BTreeMap<String, String>> {
    model_files(dir)?
        .into_iter()
        .map(|(name, (path, _))| Ok((name, hasher.sha256(&path, progress)?)))
        .collect()
}

/// The Hugging Face hub cache folder: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `$HOME/.cache/huggingface/hub` (the layout of `huggingface_hub`'s `constants.py`).
pub fn hf_cache_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("HF_HOME").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p).join("hub"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
}

/// `true` when `s` has the shape of a hub id `owner/name`.
pub(crate) fn looks_like_hub_id(s: &str) -> bool {
    let mut parts = s.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// What to do about a `--model` that was not found: for a hub id, that verisample never
/// downloads and the command that fetches it into the local cache; empty otherwise.
pub(crate) fn fetch_hint(spec: &str) -> String {
    if looks_like_hub_id(spec) {
        format!(
            ". verisample never downloads: fetch it once with `pip install -U huggingface_hub` and `hf download {spec}` (into the cache above), then rerun with --model {spec}, or pass --model DIR of a local copy"
        )
    } else {
        String::new()
    }
}

/// Resolve `--model`: a local folder (relative to `base`), else a hub id found in the local
/// HF cache (offline: the snapshot `refs/main` points at, via hf-hub's [`hf_hub::Cache`]).
///
/// Errors: [`SettingsError::ModelNotFound`] listing every place looked at.
pub fn resolve_model(spec: &str, base: &Path) -> Result<ResolvedModel, SettingsError> {
    let local = rebase(base, PathBuf::from(spec));
    if local.is_file() {
        return Err(SettingsError::ModelIsAFile(local));
    }
    if local.is_dir() {
        let config = local.join("config.json");
        if !config.is_file() {
            return Err(match config.symlink_metadata() {
                Ok(_) => SettingsError::ConfigNotAFile(local),
                Err(_) => SettingsError::NotAModel(local),
            });
        }
        let (architectures, name_or_path) = config_facts(&local);
        return Ok(ResolvedModel {
            spec: spec.to_string(),
            dir: local,
            from_hub_cache: false,
            architectures,
            name_or_path,
        });
    }
    let mut looked = vec![local];
    if looks_like_hub_id(spec) {
        if let Some(cache_dir) = hf_cache_dir() {
            let repo = hf_hub::Cache::new(cache_dir.clone()).model(spec.to_string());
            if let Some(dir) = repo
                .get("config.json")
                .and_then(|p| p.parent().map(Path::to_path_buf))
            {
                let (architectures, name_or_path) = config_facts(&dir);
                return Ok(ResolvedModel {
                    spec: spec.to_string(),
                    dir,
                    from_hub_cache: true,
                    architectures,
                    name_or_path,
                });
            }
            looked.push(cache_dir.join(format!("models--{}", spec.replace('/', "--"))));
        }
    }
    Err(SettingsError::ModelNotFound {
        spec: spec.to_string(),
        looked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_without_config_json_is_not_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_model(dir.path().to_str().unwrap(), Path::new(".")).unwrap_err();
        assert!(matches!(err, SettingsError::NotAModel(_)), "{err}");
        assert!(err.to_string().contains("no config.json"), "{err}");
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let found = resolve_model(dir.path().to_str().unwrap(), Path::new(".")).unwrap();
        assert_eq!(found.dir, dir.path());
        // The file itself instead of its folder.
        let file = dir.path().join("config.json");
        let err = resolve_model(file.to_str().unwrap(), Path::new(".")).unwrap_err();
        assert!(matches!(err, SettingsError::ModelIsAFile(_)), "{err}");
        assert!(err.to_string().contains("pass the folder"), "{err}");
    }

    #[test]
    fn a_config_json_that_is_no_file_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("config.json")).unwrap();
        let err = resolve_model(dir.path().to_str().unwrap(), Path::new(".")).unwrap_err();
        assert!(matches!(err, SettingsError::ConfigNotAFile(_)), "{err}");
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            linked.path().join("gone.json"),
            linked.path().join("config.json"),
        )
        .unwrap();
        let err = resolve_model(linked.path().to_str().unwrap(), Path::new(".")).unwrap_err();
        assert!(err.to_string().contains("not a readable file"), "{err}");
    }

    #[test]
    fn hub_id_shape_table() {
        for (s, want) in [
            ("Qwen/Qwen3-VL-2B-Thinking", true),
            ("org/model.v1", true),
            ("assets/model/extra", false),
            ("./model", false),
            ("model", false),
            ("/abs/x", false),
        ] {
            assert_eq!(looks_like_hub_id(s), want, "{s}");
        }
    }
}
