//! The checkpoint's `generation_config.json`, read the way transformers' greedy
//! `generate(do_sample=False)` uses it (`GenerationMixin._get_logits_processor` and
//! `_get_stopping_criteria` of transformers 5.24):
//!
//! - applied: `repetition_penalty` (over the prompt and the generated tokens, see
//!   [`super::sampler`]) and `eos_token_id` (a number or a list: generation stops on any);
//! - not applicable to greedy decoding, ignored: `do_sample`, `temperature`, `top_k`, `top_p`,
//!   `min_p`, `top_h`, `typical_p`, `epsilon_cutoff`, `eta_cutoff` (sampling only), and keys
//!   without effect on the tokens (`bos_token_id`, `pad_token_id`, `use_cache`, …). The
//!   generation budget is the run's own (`--max-new-tokens`), as when transformers is called
//!   with `max_new_tokens`; `max_length` / `max_new_tokens` of the file are not used;
//! - refused, with the key named ([`GenerationConfigError::Unsupported`]): every other setting
//!   that changes greedy output when active ([`UNSUPPORTED`]), so that a checkpoint is never
//!   decoded differently from its reference without a word.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// File name of the generation settings in a checkpoint folder.
pub const FILE_NAME: &str = "generation_config.json";

/// Settings of `generation_config.json` that change transformers' greedy output when active
/// and that the engine does not implement, with the test for "active" (the condition under
/// which transformers 5.24 adds the logits processor, stopping criterion or decoding mode).
pub const UNSUPPORTED: &[(&str, Inactive)] = &[
    ("num_beams", Inactive::NullOr(1.0)),
    ("penalty_alpha", Inactive::NullOrAtMost(0.0)),
    ("dola_layers", Inactive::Null),
    ("constraints", Inactive::Null),
    ("force_words_ids", Inactive::Null),
    ("guidance_scale", Inactive::NullOr(1.0)),
    ("sequence_bias", Inactive::Null),
    ("encoder_repetition_penalty", Inactive::NullOr(1.0)),
    ("no_repeat_ngram_size", Inactive::NullOrAtMost(0.0)),
    ("encoder_no_repeat_ngram_size", Inactive::NullOrAtMost(0.0)),
    ("bad_words_ids", Inactive::Null),
    ("min_length", Inactive::NullOrAtMost(0.0)),
    ("min_new_tokens", Inactive::NullOrAtMost(0.0)),
    ("forced_bos_token_id", Inactive::Null),
    ("forced_eos_token_id", Inactive::Null),
    ("remove_invalid_values", Inactive::NullOrFalse),
    ("exponential_decay_length_penalty", Inactive::Null),
    ("suppress_tokens", Inactive::Null),
    ("begin_suppress_tokens", Inactive::Null),
    ("forced_decoder_ids", Inactive::Null),
    ("watermarking_config", Inactive::Null),
    ("renormalize_logits", Inactive::NullOrFalse),
    ("token_healing", Inactive::NullOrFalse),
    ("stop_strings", Inactive::Null),
    ("max_time", Inactive::Null),
    ("prompt_lookup_num_tokens", Inactive::Null),
    ("assistant_early_exit", Inactive::Null),
    ("use_mtp", Inactive::NullOrFalse),
    ("custom_generate", Inactive::Null),
];

/// The sampling knobs of the file: `temperature` a positive number, `top_k` a non-negative
/// integer, `top_p` in (0, 1], `min_p` in [0, 1] (each may be absent or `null`).
fn sampling_defaults(obj: &serde_json::Map<String, Value>) -> Result<SamplingDefaults, Refusal> {
    let number = |key: &str, ok: &dyn Fn(f64) -> bool, what: &str| match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite() && ok(*x))
            .map(Some)
            .ok_or_else(|| Refusal::Invalid(format!("`{key}` = {v} must be {what}"))),
    };
    let top_k = number(
        "top_k",
        &|k| k >= 0.0 && k.fract() == 0.0,
        "a non-negative integer",
    )?;
    Ok(SamplingDefaults {
        unsupported: SAMPLING_UNSUPPORTED.iter().find_map(|(key, inactive)| {
            obj.get(*key)
                .filter(|v| !inactive.holds(v))
                .map(|v| (*key, v.to_string()))
        }),
        temperature: number("temperature", &|t| t > 0.0, "a positive number")?,
        top_k: top_k.map(|k| k as usize),
        top_p: number("top_p", &|p| p > 0.0 && p <= 1.0, "in (0, 1]")?,
        min_p: number("min_p", &|m| (0.0..=1.0).contains(&m), "in [0, 1]")?,
    })
}

/// When a setting of [`UNSUPPORTED`] has no effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Inactive {
    /// Absent or `null`.
    Null,
    /// Absent, `null` or `false`.
    NullOrFalse,
    /// Absent, `null` or exactly this number.
    NullOr(f64),
    /// Absent, `null` or a number not above this one.
    NullOrAtMost(f64),
}

impl Inactive {
    fn holds(self, v: &Value) -> bool {
        match (self, v) {
            (_, Value::Null) => true,
            (Inactive::NullOrFalse, Value::Bool(false)) => true,
            (Inactive::NullOr(x), Value::Number(n)) => n.as_f64() == Some(x),
            (Inactive::NullOrAtMost(x), Value::Number(n)) => n.as_f64().is_some_and(|n| n <= x),
            _ => false,
        }
    }
}

/// Why `generation_config.json` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GenerationConfigError {
    /// The file exists but cannot be read or is not a JSON object.
    #[error("{path}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A setting that changes greedy output is active and not implemented.
    #[error(
        "{path}: `{key}` = {value} changes greedy decoding and is not implemented; remove it \
         from the file or run with --generation-config off"
    )]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The setting.
        key: &'static str,
        /// Its value, as JSON.
        value: String,
    },
}

/// What decoding takes from `generation_config.json` (defaults when the file is absent).
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    /// `repetition_penalty` (1.0 when absent: no penalty). Positive and finite.
    pub repetition_penalty: f64,
    /// `eos_token_id`, a number or a list (empty when absent).
    pub eos_token_ids: Vec<u32>,
    /// The sampling knobs, used only when a run samples (greedy ignores them, as
    /// transformers' greedy search does).
    pub sampling: SamplingDefaults,
}

/// Sampling settings of `generation_config.json` that change transformers' sampled output
/// and that the engine does not implement, with the value at which each is off.
pub const SAMPLING_UNSUPPORTED: &[(&str, Inactive)] = &[
    ("typical_p", Inactive::NullOr(1.0)),
    ("epsilon_cutoff", Inactive::NullOrAtMost(0.0)),
    ("eta_cutoff", Inactive::NullOrAtMost(0.0)),
];

/// `temperature`, `top_k`, `top_p` and `min_p` of `generation_config.json` (each checked
/// for its range when given), and the first active setting of [`SAMPLING_UNSUPPORTED`]:
/// used only when a run samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplingDefaults {
    /// The first active sampling setting not implemented, with its value as JSON.
    pub unsupported: Option<(&'static str, String)>,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_k` (0: off).
    pub top_k: Option<usize>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// `min_p`.
    pub min_p: Option<f64>,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            sampling: SamplingDefaults::default(),
        }
    }
}

impl GenerationConfig {
    /// Read `dir/generation_config.json`; an absent file gives the defaults.
    ///
    /// Errors: [`GenerationConfigError::Invalid`] (unreadable, not a JSON object, a
    /// `repetition_penalty` that is not a positive number, an `eos_token_id` that is not a
    /// token id or a list of them), [`GenerationConfigError::Unsupported`] naming the first
    /// active setting of [`UNSUPPORTED`].
    pub fn from_dir(dir: &Path) -> Result<Self, GenerationConfigError> {
        let path = dir.join(FILE_NAME);
        if !path.exists() {
            return Ok(Self::default());
        }
        let invalid = |msg: String| GenerationConfigError::Invalid {
            path: path.clone(),
            msg,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| invalid(e.to_string()))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        Self::from_json(&v).map_err(|e| match e {
            Refusal::Invalid(msg) => invalid(msg),
            Refusal::Unsupported { key, value } => GenerationConfigError::Unsupported {
                path: path.clone(),
                key,
                value,
            },
        })
    }

    /// The settings greedy decoding uses for the checkpoint in `dir`: its file's when
    /// `use_file` (`--generation-config on`), else the defaults; the penalty replaced by
    /// `repetition_penalty` when given (`--repetition-penalty`).
    ///
    /// Errors: as [`GenerationConfig::from_dir`] when `use_file`.
    pub fn resolve(
        dir: &Path,
        use_file: bool,
        repetition_penalty: Option<f64>,
    ) -> Result<Self, GenerationConfigError> {
        let mut g = if use_file {
            Self::from_dir(dir)?
        } else {
            Self::default()
        };
        if let Some(p) = repetition_penalty {
            g.repetition_penalty = p;
        }
        Ok(g)
    }

    /// [`GenerationConfig::from_dir`] on the parsed file.
    fn from_json(v: &Value) -> Result<Self, Refusal> {
        let obj = v
            .as_object()
            .ok_or_else(|| Refusal::Invalid("not a JSON object".into()))?;
        for (key, inactive) in UNSUPPORTED {
            if let Some(value) = obj.get(*key).filter(|v| !inactive.holds(v)) {
                return Err(Refusal::Unsupported {
                    key,
                    value: value.to_string(),
                });
            }
        }
        let repetition_penalty = match obj.get("repetition_penalty") {
            None | Some(Value::Null) => 1.0,
            Some(p) => p
                .as_f64()
                .filter(|p| *p > 0.0 && p.is_finite())
                .ok_or_else(|| {
                    Refusal::Invalid(format!(
                        "`repetition_penalty` = {p} must be a positive number"
                    ))
                })?,
        };
        Ok(Self {
            repetition_penalty,
            eos_token_ids: parse_eos(obj.get("eos_token_id")).map_err(Refusal::Invalid)?,
            sampling: sampling_defaults(obj)?,
        })
    }
}

/// A refusal before the file's path is attached.
enum Refusal {
    Invalid(String),
    Unsupported { key: &'static str, value: String },
}

/// Token ids of an `eos_token_id` value: a number, a list of numbers, `null` or absent.
///
/// Errors: any other value (named in the message).
pub fn parse_eos(v: Option<&Value>) -> Result<Vec<u32>, String> {
    let id = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
    let bad = |x: &Value| format!("`eos_token_id` = {x} is not a token id or a list of them");
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(|x| id(x).ok_or_else(|| bad(x))).collect(),
        Some(x) => id(x).map(|n| vec![n]).ok_or_else(|| bad(x)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<GenerationConfig, String> {
        GenerationConfig::from_json(&v).map_err(|e| match e {
            Refusal::Invalid(m) => format!("invalid: {m}"),
            Refusal::Unsupported { key, value } => format!("unsupported: {key}={value}"),
        })
    }

    #[test]
    fn published_qwen_settings_are_read_and_sampling_keys_ignored() {
        // Qwen2.5-VL-7B-Instruct's generation_config.json.
        let g = parse(json!({
            "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true,
            "eos_token_id": [151645, 151643], "repetition_penalty": 1.05,
            "temperature": 0.1, "top_p": 0.001, "top_k": 1, "transformers_version": "4.37.0"
        }))
        .unwrap();
        assert_eq!(g.repetition_penalty, 1.05);
        assert_eq!(g.eos_token_ids, vec![151645, 151643]);
        // Qwen3-VL-8B-Instruct's: top_k 20 without penalty_alpha stays greedy.
        let g = parse(json!({
            "eos_token_id": [151645, 151643], "top_k": 20, "top_p": 0.8,
            "temperature": 0.7, "repetition_penalty": 1.0, "do_sample": true
        }))
        .unwrap();
        assert_eq!(g.repetition_penalty, 1.0);
        assert_eq!(parse(json!({})).unwrap(), GenerationConfig::default());
    }

    #[test]
    fn active_unsupported_settings_are_refused_by_name() {
        let cases = [
            (json!({"no_repeat_ngram_size": 3}), "no_repeat_ngram_size=3"),
            (json!({"bad_words_ids": [[5]]}), "bad_words_ids=[[5]]"),
            (json!({"suppress_tokens": [1, 2]}), "suppress_tokens=[1,2]"),
            (json!({"num_beams": 4}), "num_beams=4"),
            (
                json!({"penalty_alpha": 0.6, "top_k": 4}),
                "penalty_alpha=0.6",
            ),
            (json!({"min_new_tokens": 2}), "min_new_tokens=2"),
            (
                json!({"renormalize_logits": true}),
                "renormalize_logits=true",
            ),
            (
                json!({"encoder_repetition_penalty": 1.2}),
                "encoder_repetition_penalty=1.2",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(
                parse(v.clone()).unwrap_err(),
                format!("unsupported: {want}"),
                "{v}"
            );
        }
        // The same keys at their inactive values are accepted.
        let inactive = json!({
            "num_beams": 1, "no_repeat_ngram_size": 0, "min_length": 0, "bad_words_ids": null,
            "renormalize_logits": false, "guidance_scale": 1.0, "penalty_alpha": 0.0
        });
        assert!(parse(inactive).is_ok());
    }

    #[test]
    fn bad_values_are_invalid() {
        for (v, want) in [
            (
                json!({"repetition_penalty": 0.0}),
                "`repetition_penalty` = 0.0",
            ),
            (
                json!({"repetition_penalty": "1.1"}),
                "`repetition_penalty` = \"1.1\"",
            ),
            (json!({"eos_token_id": [1, -2]}), "`eos_token_id` = -2"),
            (json!({"eos_token_id": "x"}), "`eos_token_id` = \"x\""),
            (json!([1]), "not a JSON object"),
        ] {
            let err = parse(v.clone()).unwrap_err();
            assert!(
                err.starts_with("invalid: ") && err.contains(want),
                "{v}: {err}"
            );
        }
        assert_eq!(parse_eos(Some(&json!(7))).unwrap(), vec![7]);
        assert_eq!(parse_eos(None).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn the_file_error_names_the_path_and_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            GenerationConfig::from_dir(dir.path()).unwrap(),
            GenerationConfig::default()
        );
        std::fs::write(dir.path().join(FILE_NAME), r#"{"no_repeat_ngram_size": 2}"#).unwrap();
        let msg = GenerationConfig::from_dir(dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("generation_config.json: `no_repeat_ngram_size` = 2"),
            "{msg}"
        );
        assert!(msg.contains("--generation-config off"), "{msg}");
    }
}
