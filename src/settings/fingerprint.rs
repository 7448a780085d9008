//! The identity of a run for resume checks: the canonical settings, the hashes of the model
//! files and of the input files, and their combined sha256.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{sha256_file, CanonicalSettings, SettingsError};

/// The identity of a run: canonical settings, model file hashes and their combined sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Hex sha256 over the canonical JSON of `settings` and `model_files`.
    pub sha256: String,
    /// The settings hashed.
    pub settings: CanonicalSettings,
    /// Model file name → hex sha256 (safetensors, json, jinja, txt files of the model folder).
    pub model_files: BTreeMap<String, String>,
    /// Input parquet files in reading order (see [`hash_input_files`]): path → hex sha256.
    #[serde(default)]
    pub input_files: Vec<(String, String)>,
    /// The model as the user named it (`--model`), to name it when a rerun changes it; not
    /// hashed (the model files are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The sha256 of every input parquet file, in the order the dataset reader reads them
/// ([`crate::dataset::reader::resolve_inputs`] of `data`), keyed by the file's path. A changed
/// input at the same path changes the [`Fingerprint`], so stale answers are not reused.
///
/// Errors: the spec resolves to no file (as a message), or a file cannot be read.
pub fn hash_input_files(data: &Path) -> Result<Vec<(String, String)>, SettingsError> {
    let spec = data.to_string_lossy();
    let inputs = crate::dataset::reader::resolve_inputs(&spec)
        .map_err(|e| SettingsError::DataUnreadable(e.to_string()))?;
    inputs
        .files
        .iter()
        .map(|f| {
            let sha = sha256_file(f)
                .map_err(|e| SettingsError::DataUnreadable(format!("{}: {e}", f.display())))?;
            Ok((f.display().to_string(), sha))
        })
        .collect()
}

/// Compute the [`Fingerprint`] of `settings` with the given model and input file hashes.
pub fn fingerprint(
    settings: CanonicalSettings,
    model_files: BTreeMap<String, String>,
    input_files: Vec<(String, String)>,
) -> Fingerprint {
    #[derive(Serialize)]
    struct Hashed<'a> {
        settings: &'a CanonicalSettings,
        model_files: &'a BTreeMap<String, String>,
        input_files: &'a [(String, String)],
    }
    let json = serde_json::to_vec(&Hashed {
        settings: &settings,
        model_files: &model_files,
        input_files: &input_files,
    })
    .unwrap_or_default();
    Fingerprint {
        sha256: hex::encode(Sha256::digest(&json)),
        settings,
        model_files,
        input_files,
        model: None,
    }
}
