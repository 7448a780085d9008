//! The rotary-parameter block of a config and the spellings published and re-saved files use
//! for it, folded into one before the typed parse.
//!
//! Spellings accepted (each at the top level of a flat file, or inside `text_config`):
//! - the block named `rope_parameters` (transformers 5) or `rope_scaling` (published files), or
//!   both side by side (merged; a key present in both must agree);
//! - its kind named `rope_type` or `type`, or both (they must agree; `"mrope"` and `"default"`
//!   are the same plain M-RoPE, as transformers' `convert_rope_params_to_dict` treats them);
//! - `mrope_section` inside either block;
//! - `rope_theta` inside the block or next to it (transformers' `setdefault`: the block's value
//!   is used; the two disagreeing is an error here, not a silent pick).
//!
//! Unknown keys are kept (and ignored by the typed parse).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::ConfigError;

/// `rope_parameters` after [`normalize`]: the kind under `rope_type`, the base inside.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RopeParameters {
    /// Rotary base; [`normalize`] copies a `rope_theta` sitting next to the block in here.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Rotary pairs per M-RoPE axis (temporal, height, width); sums to `head_dim / 2`.
    #[serde(default)]
    pub mrope_section: Option<Vec<usize>>,
    /// Qwen3-VL: axes interleaved over the frequency pairs instead of contiguous chunks.
    #[serde(default)]
    pub mrope_interleaved: Option<bool>,
    /// Fraction of each head that is rotated (Qwen3.5; absent: the whole head).
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    /// Rotary kind: `"default"` / `"mrope"` (both plain M-RoPE) for the decoder, `"axial"` for
    /// the vision tower of transformers 5 files.
    #[serde(default)]
    pub rope_type: Option<String>,
}

/// Kinds of decoder RoPE this crate implements: both spellings of plain M-RoPE.
pub const MROPE_TYPES: [&str; 2] = ["default", "mrope"];

/// Pairs of keys that name the same setting: the transformers 5 name first, the older name
/// it replaced second (`rope_scaling` → `rope_parameters` in transformers 5; `in_chans` →
/// `in_channels` in the Qwen2-VL vision config; `num_local_experts` → `num_experts`, the
/// `attribute_map` of the MoE text configs).
const LEGACY_KEYS: [(&str, &str); 3] = [
    ("rope_parameters", "rope_scaling"),
    ("in_channels", "in_chans"),
    ("num_experts", "num_local_experts"),
];

/// Folds every spelling of the module docs into one, at the top level and in `text_config` /
/// `vision_config`: the old name of a renamed key into the new one, `type` into `rope_type`,
/// a sibling `rope_theta` into `rope_parameters`.
///
/// Errors: [`ConfigError::Invalid`] naming both places (with their values) when two spellings
/// of one setting disagree, e.g. two different `mrope_section`s.
pub(super) fn normalize(value: &mut Value) -> Result<(), ConfigError> {
    let Value::Object(top) = value else {
        return Ok(());
    };
    normalize_scope(top, "")?;
    for nested in ["text_config", "vision_config"] {
        if let Some(Value::Object(obj)) = top.get_mut(nested) {
            normalize_scope(obj, &format!("{nested}."))?;
        }
    }
    Ok(())
}

fn normalize_scope(obj: &mut Map<String, Value>, prefix: &str) -> Result<(), ConfigError> {
    for (new, old) in LEGACY_KEYS {
        let Some(old_value) = obj.remove(old) else {
            continue;
        };
        match obj.get_mut(new) {
            _ if old_value.is_null() => {}
            None | Some(Value::Null) => {
                obj.insert(new.to_string(), old_value);
            }
            Some(current) => merge(
                current,
                old_value,
                &format!("{prefix}{new}"),
                &format!("{prefix}{old}"),
            )?,
        }
    }
    let sibling_theta = obj.get("rope_theta").cloned();
    if let Some(Value::Object(rope)) = obj.get_mut("rope_parameters") {
        let block = format!("{prefix}rope_parameters");
        if let Some(legacy) = rope.remove("type") {
            merge_key(rope, "rope_type", legacy, &block, &block, "type")?;
        }
        if let Some(theta) = sibling_theta.filter(|t| !t.is_null()) {
            merge_key(rope, "rope_theta", theta, &block, prefix, "rope_theta")?;
        }
    }
    Ok(())
}

/// Merges `incoming` (found at `incoming_path`) into `current` (at `current_path`): objects
/// key by key, anything else must be the same value.
fn merge(
    current: &mut Value,
    incoming: Value,
    current_path: &str,
    incoming_path: &str,
) -> Result<(), ConfigError> {
    match (current, incoming) {
        (Value::Object(cur), Value::Object(inc)) => {
            for (k, v) in inc {
                merge_key(cur, &k, v, current_path, incoming_path, &k)?;
            }
            Ok(())
        }
        (cur, inc) if same("", cur, &inc) => Ok(()),
        (cur, inc) => Err(disagree(current_path, cur, incoming_path, &inc)),
    }
}

/// Puts `value` (found at `incoming_path.incoming_key`) under `key` of `obj` (at
/// `current_path`) unless a value is there already, which must then be the same.
fn merge_key(
    obj: &mut Map<String, Value>,
    key: &str,
    value: Value,
    current_path: &str,
    incoming_path: &str,
    incoming_key: &str,
) -> Result<(), ConfigError> {
    match obj.get(key) {
        None | Some(Value::Null) => {
            obj.insert(key.to_string(), value);
            Ok(())
        }
        Some(cur) if value.is_null() || same(key, cur, &value) => Ok(()),
        Some(cur) => Err(disagree(
            &join(current_path, key),
            cur,
            &join(incoming_path, incoming_key),
            &value,
        )),
    }
}

fn join(path: &str, key: &str) -> String {
    match path {
        "" => key.to_string(),
        p if p.ends_with('.') => format!("{p}{key}"),
        p => format!("{p}.{key}"),
    }
}

/// Equal as settings: numbers by value (`5000000` = `5000000.0`), arrays element by element,
/// and under a rope-kind key the two spellings of plain M-RoPE.
fn same(key: &str, a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same("", x, y))
        }
        (Value::String(x), Value::String(y)) if key == "rope_type" || key == "type" => {
            x == y || (MROPE_TYPES.contains(&x.as_str()) && MROPE_TYPES.contains(&y.as_str()))
        }
        _ => a == b,
    }
}

fn disagree(a_path: &str, a: &Value, b_path: &str, b: &Value) -> ConfigError {
    ConfigError::Invalid(format!("`{a_path}` = {a} and `{b_path}` = {b} disagree"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_and_rope_type_fold_into_rope_type_and_sibling_theta_moves_in() {
        let mut v = json!({"text_config": {"rope_theta": 5e6,
            "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [1, 2, 3]}}});
        normalize(&mut v).unwrap();
        let rope = &v["text_config"]["rope_parameters"];
        assert_eq!(rope["rope_type"], json!("default"));
        assert_eq!(rope.get("type"), None);
        assert_eq!(rope["rope_theta"], json!(5e6));
        assert_eq!(rope["mrope_section"], json!([1, 2, 3]));
        assert_eq!(v["text_config"].get("rope_scaling"), None);
    }

    #[test]
    fn a_lone_type_becomes_rope_type() {
        let mut v = json!({"rope_scaling": {"type": "mrope", "mrope_section": [1, 2, 3]}});
        normalize(&mut v).unwrap();
        assert_eq!(v["rope_parameters"]["rope_type"], json!("mrope"));
    }

    #[test]
    fn contradictions_name_both_places() {
        let cases = [
            (
                json!({"rope_parameters": {"mrope_section": [16, 24, 24]},
                       "rope_scaling": {"mrope_section": [16, 24, 20]}}),
                [
                    "`rope_parameters.mrope_section` = [16,24,24]",
                    "`rope_scaling.mrope_section` = [16,24,20]",
                ],
            ),
            (
                json!({"text_config": {"rope_parameters": {"rope_type": "yarn", "type": "mrope"}}}),
                [
                    "`text_config.rope_parameters.rope_type` = \"yarn\"",
                    "`text_config.rope_parameters.type` = \"mrope\"",
                ],
            ),
            (
                json!({"text_config": {"rope_theta": 1e6, "rope_parameters": {"rope_theta": 5e6}}}),
                [
                    "`text_config.rope_parameters.rope_theta` = 5000000.0",
                    "`text_config.rope_theta` = 1000000.0",
                ],
            ),
        ];
        for (mut v, names) in cases {
            let msg = normalize(&mut v).unwrap_err().to_string();
            for name in names {
                assert!(msg.contains(name), "{msg} lacks {name}");
            }
        }
    }

    #[test]
    fn same_values_in_other_spellings_agree() {
        let mut v = json!({"rope_theta": 5000000, "rope_parameters": {"rope_theta": 5000000.0,
            "rope_type": "default"}, "rope_scaling": {"rope_type": "mrope", "extra": 1}});
        normalize(&mut v).unwrap();
        assert_eq!(v["rope_parameters"]["extra"], json!(1));
        assert_eq!(v["rope_parameters"]["rope_type"], json!("default"));
    }
}
