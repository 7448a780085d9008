//! The decoding settings of a run: whether the checkpoint's `generation_config.json` is
//! honoured (`--generation-config`), the `--repetition-penalty` override, and the effective
//! values they give (recorded in `run.json`, part of the fingerprint).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{SettingsError, Switch};
use crate::engine::generation::{GenerationConfig, SamplingDefaults};

/// Decoding settings of one run, as resolved ([`Decoding::resolve`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decoding {
    /// The checkpoint's `generation_config.json` is honoured (`--generation-config on`).
    pub generation_config: bool,
    /// `--repetition-penalty`, when given.
    pub repetition_penalty_override: Option<f64>,
    /// The repetition penalty greedy decoding applies (1.0: none), for the answer and the
    /// judge pass alike.
    pub repetition_penalty: f64,
    /// End-of-sequence ids taken from `generation_config.json` (generation also ends on
    /// `config.json`'s `eos_token_id` and the family's turn-ending tokens, Qwen's `<|im_end|>`
    /// / `<|endoftext|>`).
    pub eos_token_ids: Vec<u32>,
    /// The file's sampling knobs (for the defaults of a run that samples,
    /// [`super::Sampling::resolve`]); not recorded.
    #[serde(skip)]
    pub file_sampling: SamplingDefaults,
}

impl Default for Decoding {
    /// What a run before these settings existed did: no `generation_config.json` penalty.
    fn default() -> Self {
        Self {
            generation_config: true,
            repetition_penalty_override: None,
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            file_sampling: SamplingDefaults::default(),
        }
    }
}

impl Decoding {
    /// What the engine takes from these settings: the effective penalty and the file's
    /// end-of-sequence ids (resolved once here, passed down to
    /// [`crate::engine::vl::load_engine`]).
    pub fn generation(&self) -> GenerationConfig {
        GenerationConfig {
            repetition_penalty: self.repetition_penalty,
            eos_token_ids: self.eos_token_ids.clone(),
            sampling: self.file_sampling.clone(),
        }
    }

    /// Resolve the switch and the override against the model folder `model_dir` (reads its
    /// `generation_config.json` when the switch is on).
    ///
    /// Errors: [`SettingsError::Invalid`] for a penalty that is not a positive number,
    /// [`SettingsError::GenerationConfig`] for a file that is invalid or asks for a setting
    /// not implemented.
    pub fn resolve(
        model_dir: &Path,
        generation_config: Switch,
        repetition_penalty: Option<f64>,
    ) -> Result<Self, SettingsError> {
        if let Some(p) = repetition_penalty.filter(|p| !(*p > 0.0 && p.is_finite())) {
            return Err(SettingsError::Invalid {
                key: "repetition-penalty",
                value: p.to_string(),
                why: "must be a positive number (1.0: no penalty)".into(),
            });
        }
        let use_file = generation_config.is_on();
        let g = GenerationConfig::resolve(model_dir, use_file, repetition_penalty)?;
        Ok(Self {
            generation_config: use_file,
            repetition_penalty_override: repetition_penalty,
            repetition_penalty: g.repetition_penalty,
            eos_token_ids: g.eos_token_ids,
            file_sampling: g.sampling,
        })
    }
}

/// The output-determining part of [`Decoding`] in the fingerprint: the switch and the
/// effective penalty (the file itself is hashed with the model files). Each is left out at its
/// value of runs made before the setting existed, so that their fingerprints stay valid when
/// the output would be the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanonicalDecoding {
    /// `--generation-config` (left out when on).
    #[serde(default = "on", skip_serializing_if = "is_on")]
    pub generation_config: bool,
    /// The effective repetition penalty as f64 bits in decimal text (left out when 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<String>,
}

fn on() -> bool {
    true
}

fn is_on(b: &bool) -> bool {
    *b
}

impl From<&Decoding> for CanonicalDecoding {
    fn from(d: &Decoding) -> Self {
        Self {
            generation_config: d.generation_config,
            repetition_penalty: (d.repetition_penalty != 1.0)
                .then(|| d.repetition_penalty.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_with(generation_config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("generation_config.json"), generation_config).unwrap();
        dir
    }

    #[test]
    fn file_override_and_switch_give_the_effective_penalty() {
        let dir = model_with(r#"{"repetition_penalty": 1.05, "eos_token_id": [7, 8]}"#);
        let d = Decoding::resolve(dir.path(), Switch::On, None).unwrap();
        assert_eq!(
            (d.repetition_penalty, d.eos_token_ids.clone()),
            (1.05, vec![7, 8])
        );
        let d = Decoding::resolve(dir.path(), Switch::On, Some(1.2)).unwrap();
        assert_eq!(
            (d.repetition_penalty, d.repetition_penalty_override),
            (1.2, Some(1.2))
        );
        let d = Decoding::resolve(dir.path(), Switch::Off, None).unwrap();
        assert_eq!((d.repetition_penalty, d.eos_token_ids.len()), (1.0, 0));
        let d = Decoding::resolve(dir.path(), Switch::Off, Some(1.3)).unwrap();
        assert_eq!(d.repetition_penalty, 1.3);
    }

    #[test]
    fn unsupported_file_settings_and_bad_overrides_are_refused() {
        let dir = model_with(r#"{"no_repeat_ngram_size": 3}"#);
        let err = Decoding::resolve(dir.path(), Switch::On, None).unwrap_err();
        assert!(
            err.to_string().contains("`no_repeat_ngram_size` = 3"),
            "{err}"
        );
        // Off reads nothing of the file.
        assert!(Decoding::resolve(dir.path(), Switch::Off, None).is_ok());
        for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            let err = Decoding::resolve(dir.path(), Switch::Off, Some(bad)).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid --repetition-penalty"),
                "{err}"
            );
        }
    }

    #[test]
    fn canonical_form_leaves_out_what_old_runs_had() {
        let old = CanonicalDecoding::from(&Decoding::default());
        assert_eq!(serde_json::to_string(&old).unwrap(), "{}");
        let d = Decoding {
            repetition_penalty: 1.05,
            generation_config: false,
            ..Decoding::default()
        };
        let json = serde_json::to_string(&CanonicalDecoding::from(&d)).unwrap();
        assert_eq!(
            json,
            r#"{"generation_config":false,"repetition_penalty":"1.05"}"#
        );
        let back: CanonicalDecoding = serde_json::from_str("{}").unwrap();
        assert_eq!(back, old);
    }
}
