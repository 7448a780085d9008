//! The model families this crate runs: one file per `model_type`, one line per family in
//! [`FAMILIES`]. A family file holds what its transformers configuration class holds — the
//! class defaults of the keys a saved `config.json` may omit (token ids included) —, which
//! decoder and vision tower of [`crate::config`] its fields resolve to, and the tokens of its
//! chat format the engine needs (turn ends, the opening reasoning tag). The supported list in
//! errors, `--model` and `doctor --model` help read [`FAMILIES`]; tests hold the docs table and
//! the fixture folders equal to it. How to add one: `docs/adding-a-model-family.md`.

mod glm4v;
mod internvl;
mod qwen2_5_vl;
mod qwen2_vl;
mod qwen3_5;
mod qwen3_5_moe;
mod qwen3_vl;
mod qwen3_vl_moe;

use std::path::Path;

use serde_json::Value;

use crate::chat::AnswerFormat;
use crate::config::{
    ConfigError, Defaults, Fields, TextSpec, VisionConfig, VisionFields, VisionSpec, VisionTokenIds,
};
use crate::load::LoadError;
use crate::processor::ResizeRule;

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
    /// The text that ends the reasoning when a thinking budget is reached, the closing tag
    /// included (`--think-budget`; the engine appends it, tokenized, in place of the next
    /// sampled tokens).
    pub think_budget_stop: &'static str,
    /// The tokens the processor puts around an image's placeholder run, when the chat
    /// template writes the placeholder alone (InternVL: `<img>` … `</img>` around the
    /// `<IMG_CONTEXT>` run; `None` for the Qwen-VL families, whose templates write
    /// `<|vision_start|><|image_pad|><|vision_end|>`).
    pub image_wrap: Option<(&'static str, &'static str)>,
    /// The `smart_resize` of its image processor (the Qwen-VL processor's families).
    pub resize: ResizeRule,
    /// Where its generated text holds the final answer after the reasoning.
    pub answer: AnswerFormat,
    /// The decoder, vision tower and image placeholder the parsed fields resolve to.
    ///
    /// Errors: [`ConfigError::Invalid`] naming the inconsistent setting;
    /// [`ConfigError::Field`] naming a missing or mistyped field of the family's own.
    pub resolve: fn(&Fields) -> Result<Resolved, ConfigError>,
}

/// What a family's fields resolve to.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The decoder.
    pub text: TextSpec,
    /// The vision tower.
    pub vision: VisionConfig,
    /// The image placeholder token id (`image_token_id`).
    pub image_token_id: u32,
}

/// A Qwen-VL family's resolution: the top level's Qwen token ids and `vision_config`
/// ([`VisionFields`]) parsed first (a mistyped field is named before any inconsistency), then
/// the decoder `text` resolves and the tower `tower` builds.
///
/// Errors: [`ConfigError::Field`] naming a missing or mistyped field; the decoder's errors.
pub(crate) fn qwen_vl(
    f: &Fields,
    text: impl FnOnce(&Fields) -> Result<TextSpec, ConfigError>,
    tower: impl FnOnce(&VisionFields) -> VisionSpec,
) -> Result<Resolved, ConfigError> {
    let ids: VisionTokenIds = f.top_as()?;
    let vision: VisionFields = f.vision_as()?;
    Ok(Resolved {
        text: text(f)?,
        vision: VisionConfig::Qwen(tower(&vision)),
        image_token_id: ids.image_token_id,
    })
}

/// The turn-ending tokens of the Qwen chat format (ChatML), shared by every Qwen-VL family.
pub(crate) const QWEN_STOP_TOKENS: &[&str] = &["<|im_end|>", "<|endoftext|>"];

/// Qwen3's early-stopping text for a thinking budget (Qwen docs, quickstart "Thinking
/// Budget"; vLLM #18127), without the `.` those examples put after `</think>`, which would
/// open the answer.
pub(crate) const QWEN_THINK_BUDGET_STOP: &str = "\n\nConsidering the limited time by the user, I \
     have to give the solution based on the thinking directly now.\n</think>\n\n";

/// Every family this crate runs, in the order they are listed to users.
pub static FAMILIES: &[&Family] = &[
    &qwen2_vl::FAMILY,
    &qwen2_5_vl::FAMILY,
    &qwen3_vl::FAMILY,
    &qwen3_5::FAMILY,
    &qwen3_vl_moe::FAMILY,
    &qwen3_5_moe::FAMILY,
    &internvl::FAMILY,
    &glm4v::FAMILY,
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
    vision: VisionConfig,
    image_token_id: u32,
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
        let r = (family.resolve)(&fields)?;
        Ok(Self {
            family,
            text: r.text,
            vision: r.vision,
            image_token_id: r.image_token_id,
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

    /// The image placeholder token id (one per image token in a prompt).
    pub fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    /// Resolved decoder spec.
    pub fn text(&self) -> &TextSpec {
        &self.text
    }

    /// Resolved vision tower.
    pub fn vision(&self) -> &VisionConfig {
        &self.vision
    }
}
