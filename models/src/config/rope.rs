//! The rotary-parameter block of a config (`rope_parameters` / `rope_scaling`) and the
//! folding of renamed keys that re-saved files carry side by side.

use serde::Deserialize;
use serde_json::Value;

use super::ConfigError;

/// `rope_parameters` (transformers 5) or `rope_scaling` (published flat configs).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RopeParameters {
    /// Rotary base; may instead sit at the top level as `rope_theta`.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Rotary pairs per M-RoPE axis (temporal, height, width); sums to `head_dim / 2`.
    #[serde(default)]
    pub mrope_section: Option<Vec<usize>>,
    /// Qwen3-VL: axes interleaved over the frequency pairs instead of contiguous chunks.
    #[serde(default)]
    pub mrope_interleaved: Option<bool>,
    /// `"default"`/`"mrope"` (both mean plain M-RoPE here).
    #[serde(default, alias = "type")]
    pub rope_type: Option<String>,
}

/// Pairs of keys that name the same setting: the transformers 5 name first, the older name
/// it replaced second (`rope_scaling` → `rope_parameters` in transformers 5; `in_chans` →
/// `in_channels` in the Qwen2-VL vision config).
const LEGACY_KEYS: [(&str, &str); 2] = [
    ("rope_parameters", "rope_scaling"),
    ("in_channels", "in_chans"),
];

/// Files re-saved by transformers often carry both names of a renamed key (e.g. a flat
/// `rope_scaling` next to the new `rope_parameters`, `in_chans` next to `in_channels`), which
/// transformers reads fine. Fold the old name into the new one, at the top level and in
/// `text_config` / `vision_config`: objects are merged (new keys win), equal scalars
/// collapse.
///
/// Errors: [`ConfigError::Invalid`] when the two names hold different scalar values.
pub(super) fn fold_legacy_keys(value: &mut Value) -> Result<(), ConfigError> {
    fn fold(obj: &mut serde_json::Map<String, Value>) -> Result<(), ConfigError> {
        for (new, old) in LEGACY_KEYS {
            let Some(old_value) = obj.remove(old) else {
                continue;
            };
            match obj.get_mut(new) {
                None => {
                    obj.insert(new.to_string(), old_value);
                }
                Some(Value::Object(current)) => {
                    if let Value::Object(legacy) = old_value {
                        for (k, v) in legacy {
                            current.entry(k).or_insert(v);
                        }
                    }
                }
                Some(current) if *current == old_value => {}
                Some(current) => {
                    return Err(ConfigError::Invalid(format!(
                        "`{new}` = {current} and `{old}` = {old_value} disagree"
                    )))
                }
            }
        }
        Ok(())
    }
    if let Value::Object(top) = value {
        fold(top)?;
        for nested in ["text_config", "vision_config"] {
            if let Some(Value::Object(obj)) = top.get_mut(nested) {
                fold(obj)?;
            }
        }
    }
    Ok(())
}
