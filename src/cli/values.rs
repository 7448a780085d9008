//! The settings' value enums as clap values: their names on the command line (the same as in
//! the TOML file and `run.json`) and the help of each, shown under "Possible values" in
//! `--help`. The enums live in `settings` without clap; only this layer knows it.

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::settings::{DTypeSpec, InputColumns, KernelsSpec, ProgressMode, Switch};

impl ValueEnum for Switch {
    fn value_variants<'a>() -> &'a [Self] {
        &[Switch::On, Switch::Off]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Switch::On => PossibleValue::new("on").help("Enabled"),
            Switch::Off => PossibleValue::new("off").help("Disabled"),
        })
    }
}

impl ValueEnum for ProgressMode {
    fn value_variants<'a>() -> &'a [Self] {
        &[ProgressMode::Bar, ProgressMode::Jsonl, ProgressMode::None]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            ProgressMode::Bar => PossibleValue::new("bar")
                .help("An indicatif bar (default when stderr is a terminal)"),
            ProgressMode::Jsonl => PossibleValue::new("jsonl").help(
                "One JSON object per interval on stderr (only when asked for: `--progress jsonl`)",
            ),
            ProgressMode::None => {
                PossibleValue::new("none").help("Nothing (default when stderr is not a terminal)")
            }
        })
    }
}

impl ValueEnum for DTypeSpec {
    fn value_variants<'a>() -> &'a [Self] {
        &[DTypeSpec::F32, DTypeSpec::Bf16, DTypeSpec::F16]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            DTypeSpec::F32 => PossibleValue::new("f32").help("32-bit float (CPU default)"),
            DTypeSpec::Bf16 => PossibleValue::new("bf16").help("bfloat16 (CUDA / Metal default)"),
            DTypeSpec::F16 => PossibleValue::new("f16").help("IEEE half"),
        })
    }
}

impl ValueEnum for KernelsSpec {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            KernelsSpec::Native,
            KernelsSpec::Portable,
            KernelsSpec::Flash,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            KernelsSpec::Native => {
                PossibleValue::new("native").help("The CPU's own kernels (CPU default)")
            }
            KernelsSpec::Portable => {
                PossibleValue::new("portable").help("candle ops, any device (GPU default)")
            }
            KernelsSpec::Flash => {
                PossibleValue::new("flash").help("FlashAttention-2 (CUDA, flash-attn build)")
            }
        })
    }
}

impl ValueEnum for InputColumns {
    fn value_variants<'a>() -> &'a [Self] {
        &[InputColumns::Keep, InputColumns::Drop]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            InputColumns::Keep => PossibleValue::new("keep")
                .help("Every split carries them after its own columns, typed as in the input"),
            InputColumns::Drop => {
                PossibleValue::new("drop").help("The splits hold only their own columns")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command-line names are the serde names (TOML file, `run.json`), variant by variant.
    #[test]
    fn clap_names_are_the_serde_names() {
        fn check<T: ValueEnum + serde::Serialize>() {
            for v in T::value_variants() {
                let clap = v.to_possible_value().unwrap().get_name().to_string();
                assert_eq!(serde_json::to_value(v).unwrap(), clap.as_str());
                assert!(T::from_str(&clap, false).is_ok());
            }
        }
        check::<Switch>();
        check::<ProgressMode>();
        check::<DTypeSpec>();
        check::<KernelsSpec>();
        check::<InputColumns>();
        assert_eq!(InputColumns::value_variants().len(), 2);
        assert_eq!(KernelsSpec::value_variants().len(), 3);
        assert_eq!(Switch::value_variants().len(), 2);
        assert_eq!(ProgressMode::value_variants().len(), 3);
        assert_eq!(DTypeSpec::value_variants().len(), 3);
    }
}
