//! The model families this crate runs: one file per `model_type`, one line per family in
//! [`FAMILIES`]. A family file holds what its transformers configuration class holds — the
//! class defaults of the keys a saved `config.json` may omit (token ids included) —, which
//! decoder and vision tower of [`crate::config`] its fields resolve to, and the tokens of its
//! chat format the engine needs (turn ends, the opening reasoning tag). The supported list in
//! errors, `--model` and `doctor --model` help read [`FAMILIES`]; tests hold the docs table and
//! the fixture folders equal to it. How to add one: `docs/adding-a-model-family.md`.

mod qwen2_5_vl;
mod qwen2_vl;
mod qwen3_5;
mod qwen3_5_moe;
mod qwen3_vl;
mod qwen3_vl_moe;

use std::path::Path;

use serde_json::Value;

use crate::config::{ConfigError, Defaults, Fields, TextSpec, VisionSpec, VisionTokenIds};
use crate::load::LoadError;

/// One model family: a `model_type` of `config.json` and how its fields resolve.
#[derive(Debug)]
pub struct Family {
    /// `model_type` in `config.json` (transformers' `model_type` of the configuration class).
    pub model_type: &'static str,
    /// The name people know it by (`Qwen2.5-VL`).
    pub name: &'static str,
    /// The configuration classes' defaults for the keys a file may omit.
    pub defaults: Defaults,
    /// Tokens of its chat format that end a turn, looked up in the checkpoint's tokenizer:
    /// generation stops on them besides the configs' `eos_token_id`s.
    pub stop_tokens: &'static [&'static str],
    /// The tag a thinking chat template opens the reasoning with (a template that pre-fills it
    /// ends the prompt with it, so the generated text starts inside the reasoning).
    pub think_open: &'static str,
    /// The decoder and vision tower the parsed fields resolve to.
    ///
    /// Errors: [`ConfigError::Invalid`] naming the inconsistent setting.
    pub resolve: fn(&Fields) -> Result<(TextSpec, VisionSpec), ConfigError>,
}

/// The turn-ending tokens of the Qwen chat format (ChatML), shared by every Qwen-VL family.
pub(crate) const QWEN_STOP_TOKENS: &[&str] = &["<|im_end|>", "<|endoftext|>"];

/// Every family this crate runs, in the order they are listed to users.
pub static FAMILIES: &[&Family] = &[
    &qwen2_vl::FAMILY,
    &qwen2_5_vl::FAMILY,
    &qwen3_vl::FAMILY,
    &qwen3_5::FAMILY,
    &qwen3_vl_moe::FAMILY,
    &qwen3_5_moe::FAMILY,
];

/// The `model_type`s of [`FAMILIES`], in order.
pub fn supported_model_types() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.model_type).collect()
}

/// Every family as users read it, for help texts: `qwen2_vl (Qwen2-VL), qwen2_5_vl
/// (Qwen2.5-VL), …`.
pub fn listing() -> String {
    FAMILIES
        .iter()
        .map(|f| format!("{} ({})", f.model_type, f.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The family of a parsed `config.json`, from its `model_type`.
///
/// Errors: [`ConfigError::Unsupported`] naming the `model_type` found (as written when it is
/// not a string; `<missing>` when there is none) and the supported ones.
fn family_of_value(value: &Value) -> Result<&'static Family, ConfigError> {
    let found = match value.get("model_type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "<missing>".to_string(),
    };
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.model_type == found)
        .ok_or_else(|| ConfigError::Unsupported {
            found,
            supported: supported_model_types(),
        })
}

/// A parsed and resolved `config.json`: its family, decoder and vision specs, token ids.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    family: &'static Family,
    text: TextSpec,
    vision: VisionSpec,
    token_ids: VisionTokenIds,
}

impl ModelConfig {
    /// Parses and resolves a `config.json` text (either layout, every spelling of the rotary
    /// block listed in [`crate::config`]'s docs).
    ///
    /// Errors: [`ConfigError::Unsupported`] listing the supported `model_type`s;
    /// [`ConfigError::Json`] for malformed JSON; [`ConfigError::Field`] naming a missing
    /// field or one of the wrong type; [`ConfigError::Invalid`]
    /// naming the setting when values are inconsistent (an `mrope_section` not summing to
    /// `rotary_dim / 2`, heads that do not divide, …) or two spellings of one setting
    /// disagree.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let value: Value = serde_json::from_str(text)?;
        let family = family_of_value(&value)?;
        let fields = Fields::parse(value, &family.defaults)?;
        let (text, vision) = (family.resolve)(&fields)?;
        Ok(Self {
            family,
            text,
            vision,
            token_ids: fields.token_ids,
        })
    }

    /// Reads and resolves `dir/config.json` ([`Self::from_json`]): all a run checks of a
    /// checkpoint before it hashes or loads any weight file.
    ///
    /// Errors: [`LoadError::Io`] when the file cannot be read; [`LoadError::Config`] naming
    /// the file and what is wrong in it.
    pub fn from_dir(dir: &Path) -> Result<Self, LoadError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
            path: path.clone(),
            source,
        })?;
        Self::from_json(&text).map_err(|source| LoadError::Config { path, source })
    }

    /// The family (its `model_type`).
    pub fn family(&self) -> &'static Family {
        self.family
    }

    /// The image placeholder's special token ids.
    pub fn token_ids(&self) -> &VisionTokenIds {
        &self.token_ids
    }

    /// Resolved decoder spec.
    pub fn text(&self) -> &TextSpec {
        &self.text
    }

    /// Resolved vision spec.
    pub fn vision(&self) -> &VisionSpec {
        &self.vision
    }
}
