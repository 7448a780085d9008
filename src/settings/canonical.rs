//! The output-determining settings of a run in canonical form ([`CanonicalSettings`]): what
//! the fingerprint hashes and what a resume compares.

use serde::{Deserialize, Serialize};

use super::decoding::CanonicalDecoding;
use super::{switch_on, DTypeSpec, KernelsSpec};
use crate::dataset::layout::ReadOptions;

/// The output-determining settings (see [`super::Settings::canonical`]). Field order is fixed, so
/// its JSON is canonical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanonicalSettings {
    /// The input: the canonical deepest folder holding every input file, however `--data`
    /// was spelt ([`super::fingerprint::input_identity`]).
    pub data: String,
    /// Family override.
    pub family: Option<String>,
    /// Thinking mode.
    pub think: bool,
    /// Judge pass.
    pub judge: bool,
    /// Calibration size.
    pub judge_calibrate: usize,
    /// Number guard.
    pub number_guard: bool,
    /// Device kind.
    pub device: String,
    /// Dtype.
    pub dtype: DTypeSpec,
    /// `--kernels` when it differs from the device's default (another path can round
    /// differently); left out otherwise, so runs without it keep their fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelsSpec>,
    /// Generation budget.
    pub max_new_tokens: usize,
    /// Thinking budget; left out when unset, so runs without it keep their fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_budget: Option<usize>,
    /// Shard `I/N`.
    pub shard: String,
    /// Verifier overrides (they decide accept/reject), as given, less those that change no
    /// family's verifier (a default stated explicitly: `alnum`, `OrandCar=alnum`), so stating
    /// one is no change on resume; left out when empty, so runs without any keep the
    /// fingerprint they had before the setting existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifiers: Vec<String>,
    /// Duplicate questions dropped; left out when on (the default), as `verifiers`.
    #[serde(default = "switch_on", skip_serializing_if = "is_on")]
    pub dedup: bool,
    /// `--min-pixels` (it changes `pixel_values`, so the answers); left out when unset, so
    /// runs without it keep the fingerprint they had before the setting existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pixels: Option<usize>,
    /// `--max-pixels`, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pixels: Option<usize>,
    /// Column flags and `--images-root` (they decide which rows and images are read); left
    /// out when unset, so runs without them keep their fingerprint.
    #[serde(default, skip_serializing_if = "ReadOptions::is_default")]
    pub read: ReadOptions,
    /// `--input-columns` (it decides the splits' columns); left out when kept, the default,
    /// so runs from before the setting keep their fingerprint. A rerun with it changed is
    /// refused as with any other setting of the splits (`--distinct-samples`).
    #[serde(default, skip_serializing_if = "super::InputColumns::is_keep")]
    pub input_columns: super::InputColumns,
    /// Decoding switch and effective repetition penalty, each left out at the value runs had
    /// before the setting existed.
    #[serde(flatten)]
    pub decoding: CanonicalDecoding,
    /// Samples per question and the warpers; left out for greedy runs, so their fingerprint
    /// stays what it was before sampling existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<super::CanonicalSampling>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_on(b: &bool) -> bool {
    *b
}

impl CanonicalSettings {
    /// The names of the fields that differ between `self` and `other` (for the resume refusal).
    pub fn diff(&self, other: &CanonicalSettings) -> Vec<String> {
        let a = serde_json::to_value(self).unwrap_or_default();
        let b = serde_json::to_value(other).unwrap_or_default();
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                // Keys of both sides: a field left out when empty is on one side only.
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                keys.into_iter()
                    .filter(|k| a.get(k.as_str()) != b.get(k.as_str()))
                    .map(|k| {
                        let side = |m: &serde_json::Map<String, serde_json::Value>| {
                            m.get(k.as_str()).cloned().unwrap_or_default()
                        };
                        format!("{k}: {} -> {}", side(&a), side(&b))
                    })
                    .collect()
            }
            _ => Vec::new(),
        }
    }
}
