//! `--samples K --temperature T [--top-k N --top-p P --min-p M] --seed S`: rejection sampling
//! with K samples per question beside greedy decoding. K = 1 without a temperature (or at
//! `--temperature 0`) is the greedy path, untouched; asking for sampling takes the knobs not
//! given from the checkpoint's `generation_config.json` (with `--generation-config on`), else
//! transformers' `GenerationConfig` defaults (temperature 1.0, top-k 50, top-p 1.0, no min-p).

use serde::{Deserialize, Serialize};

use super::SettingsError;
use crate::engine::generation::SamplingDefaults;
use crate::engine::sampling::{SampleStream, SamplingParams};

/// Most samples per question (`--samples`).
pub const MAX_SAMPLES: usize = 1024;

/// transformers' `GenerationConfig` defaults for a knob the checkpoint does not set.
const DEFAULT_TEMPERATURE: f64 = 1.0;
const DEFAULT_TOP_K: usize = 50;

/// The sampling settings of a run, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Samples per question (`--samples`, ≥ 1).
    pub samples: usize,
    /// The warpers and seed when the run samples; `None`: greedy.
    pub params: Option<SamplingParams>,
    /// `--distinct-samples on`: of the accepted samples of a question, only the first of each
    /// distinct (reasoning, answer) pair is written (by sample index, so batch-invariant).
    #[serde(default, skip_serializing_if = "is_false")]
    pub distinct: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_false(b: &bool) -> bool {
    !*b
}

impl Default for Sampling {
    fn default() -> Self {
        Self::GREEDY
    }
}

/// The flags of sampling as given (from the command line or the job file).
#[derive(Debug, Clone, Copy, Default)]
pub struct SamplingFlags {
    /// `--samples`.
    pub samples: Option<usize>,
    /// `--temperature`.
    pub temperature: Option<f64>,
    /// `--top-k` (0: off).
    pub top_k: Option<usize>,
    /// `--top-p`.
    pub top_p: Option<f64>,
    /// `--min-p`.
    pub min_p: Option<f64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--distinct-samples`.
    pub distinct: Option<bool>,
}

impl Sampling {
    /// One greedy answer per question.
    pub const GREEDY: Sampling = Sampling {
        samples: 1,
        params: None,
        distinct: false,
    };

    /// Whether this is the greedy path (left out of `run.json` and the fingerprint then).
    pub fn is_greedy(&self) -> bool {
        *self == Self::GREEDY
    }

    /// Resolve `flags` against the checkpoint's knobs `file` (empty with
    /// `--generation-config off`).
    ///
    /// Errors: [`SettingsError::Invalid`] for a value out of range, a warper given without
    /// sampling (`--seed` is accepted and ignored then, so that a script may always pass it),
    /// several samples at temperature 0 (they would all be the greedy answer), or a sampling
    /// setting of the checkpoint's `generation_config.json` that is not implemented.
    pub fn resolve(flags: SamplingFlags, file: SamplingDefaults) -> Result<Self, SettingsError> {
        let invalid = |key: &'static str, value: String, why: &str| SettingsError::Invalid {
            key,
            value,
            why: why.into(),
        };
        let samples = flags.samples.unwrap_or(1);
        if samples == 0 || samples > MAX_SAMPLES {
            return Err(invalid(
                "samples",
                samples.to_string(),
                &format!("must be 1 to {MAX_SAMPLES}"),
            ));
        }
        let sampling = samples > 1 || flags.temperature.is_some_and(|t| t != 0.0);
        let distinct = flags.distinct.unwrap_or(false);
        if distinct && samples == 1 {
            return Err(invalid(
                "distinct-samples",
                "on".into(),
                "keeps one sample of each distinct (reasoning, answer) pair of a question: it \
                 needs --samples K > 1",
            ));
        }
        if !sampling {
            for (key, given) in [
                ("top-k", flags.top_k.map(|v| v.to_string())),
                ("top-p", flags.top_p.map(|v| v.to_string())),
                ("min-p", flags.min_p.map(|v| v.to_string())),
            ] {
                if let Some(value) = given {
                    return Err(invalid(
                        key,
                        value,
                        "applies only when sampling (--samples K > 1, or --temperature T > 0)",
                    ));
                }
            }
            return Ok(Self::GREEDY);
        }
        if let Some((key, value)) = file.unsupported {
            return Err(SettingsError::Invalid {
                key: "samples",
                value: samples.to_string(),
                why: format!(
                    "the checkpoint's generation_config.json sets {key} = {value}, a sampling \
                     setting verisample does not implement (transformers would apply it); \
                     remove it from the file, or run with --generation-config off"
                ),
            });
        }
        let temperature = flags
            .temperature
            .or(file.temperature)
            .unwrap_or(DEFAULT_TEMPERATURE);
        if !(temperature > 0.0 && temperature.is_finite()) {
            let why = if temperature == 0.0 {
                "must be above 0 with --samples K > 1: at temperature 0 every sample is the \
                 greedy answer"
            } else {
                "must be a positive number"
            };
            return Err(invalid("temperature", temperature.to_string(), why));
        }
        let top_k = flags.top_k.or(file.top_k).unwrap_or(DEFAULT_TOP_K);
        let top_p = flags.top_p.or(file.top_p);
        if let Some(p) = top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(invalid("top-p", p.to_string(), "must be in (0, 1]"));
        }
        let min_p = flags.min_p.or(file.min_p);
        if let Some(m) = min_p.filter(|m| !(0.0..=1.0).contains(m)) {
            return Err(invalid("min-p", m.to_string(), "must be in [0, 1]"));
        }
        Ok(Self {
            samples,
            params: Some(SamplingParams {
                temperature,
                top_k: (top_k > 0).then_some(top_k),
                top_p: top_p.filter(|p| *p < 1.0),
                min_p: min_p.filter(|m| *m > 0.0),
                seed: flags.seed.unwrap_or(0),
            }),
            distinct,
        })
    }

    /// The random stream of sample `sample` of question `qa` of the row at stream position
    /// `position`; `None` for greedy.
    pub fn stream(&self, position: u64, qa: u32, sample: u32) -> Option<SampleStream> {
        self.params.map(|params| SampleStream {
            params,
            id: [position, (u64::from(qa) << 32) | u64::from(sample)],
        })
    }
}

/// [`Sampling`] in the fingerprint: left out for greedy runs (their fingerprint stays what it
/// was before sampling existed); floats as their decimal text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanonicalSampling {
    samples: usize,
    temperature: String,
    top_k: Option<usize>,
    top_p: Option<String>,
    min_p: Option<String>,
    seed: u64,
    /// Left out when off, so sampled runs without it keep their fingerprint.
    #[serde(default, skip_serializing_if = "is_false")]
    distinct: bool,
}

impl CanonicalSampling {
    /// `None` for greedy.
    pub fn of(s: &Sampling) -> Option<Self> {
        let p = s.params?;
        Some(Self {
            samples: s.samples,
            temperature: p.temperature.to_string(),
            top_k: p.top_k,
            top_p: p.top_p.map(|v| v.to_string()),
            min_p: p.min_p.map(|v| v.to_string()),
            seed: p.seed,
            distinct: s.distinct,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_by_default_and_defaults_from_the_checkpoint_when_sampling() {
        let none = SamplingFlags::default();
        let file = SamplingDefaults {
            temperature: Some(0.7),
            top_k: Some(20),
            top_p: Some(0.8),
            ..Default::default()
        };
        assert!(Sampling::resolve(none, file.clone()).unwrap().is_greedy());
        let t0 = SamplingFlags {
            temperature: Some(0.0),
            ..none
        };
        assert!(Sampling::resolve(t0, file.clone()).unwrap().is_greedy());
        let k4 = SamplingFlags {
            samples: Some(4),
            ..none
        };
        let s = Sampling::resolve(k4, file.clone()).unwrap();
        let p = s.params.unwrap();
        assert_eq!(
            (s.samples, p.temperature, p.top_k, p.top_p, p.min_p, p.seed),
            (4, 0.7, Some(20), Some(0.8), None, 0)
        );
        // No knob in the file: transformers' defaults.
        let p = Sampling::resolve(k4, SamplingDefaults::default())
            .unwrap()
            .params
            .unwrap();
        assert_eq!((p.temperature, p.top_k, p.top_p), (1.0, Some(50), None));
        // Flags win; top-k 0 and top-p 1 are off.
        let flags = SamplingFlags {
            samples: Some(2),
            temperature: Some(0.5),
            top_k: Some(0),
            top_p: Some(1.0),
            min_p: Some(0.1),
            seed: Some(9),
            distinct: None,
        };
        let p = Sampling::resolve(flags, file).unwrap().params.unwrap();
        assert_eq!(
            (p.temperature, p.top_k, p.top_p, p.min_p, p.seed),
            (0.5, None, None, Some(0.1), 9)
        );
    }

    #[test]
    fn impossible_settings_are_refused_by_name() {
        let file = SamplingDefaults::default();
        let cases = [
            (
                SamplingFlags {
                    samples: Some(4),
                    temperature: Some(0.0),
                    ..Default::default()
                },
                "--temperature",
            ),
            (
                SamplingFlags {
                    samples: Some(0),
                    ..Default::default()
                },
                "--samples",
            ),
            (
                SamplingFlags {
                    top_p: Some(0.9),
                    ..Default::default()
                },
                "--top-p",
            ),
            (
                SamplingFlags {
                    samples: Some(2),
                    ..Default::default()
                },
                "typical_p = 0.5",
            ),
            (
                SamplingFlags {
                    samples: Some(2),
                    top_p: Some(1.5),
                    ..Default::default()
                },
                "--top-p",
            ),
            (
                SamplingFlags {
                    samples: Some(2),
                    min_p: Some(-0.1),
                    ..Default::default()
                },
                "--min-p",
            ),
            (
                SamplingFlags {
                    temperature: Some(0.7),
                    distinct: Some(true),
                    ..Default::default()
                },
                "--distinct-samples",
            ),
        ];
        for (flags, key) in cases {
            let file = match key {
                "typical_p = 0.5" => SamplingDefaults {
                    unsupported: Some(("typical_p", "0.5".into())),
                    ..file.clone()
                },
                _ => file.clone(),
            };
            let err = Sampling::resolve(flags, file).unwrap_err().to_string();
            assert!(err.contains(key), "{flags:?}: {err}");
        }
    }

    /// `--distinct-samples` is in the fingerprint when on, and left out when off, so a sampled
    /// run without it keeps the fingerprint it had before the setting existed.
    #[test]
    fn distinct_samples_is_fingerprinted_only_when_on() {
        let flags = |distinct| SamplingFlags {
            samples: Some(4),
            distinct,
            ..Default::default()
        };
        let canonical = |distinct| {
            let s = Sampling::resolve(flags(distinct), SamplingDefaults::default()).unwrap();
            serde_json::to_string(&CanonicalSampling::of(&s)).unwrap()
        };
        let before =
            r#"{"samples":4,"temperature":"1","top_k":50,"top_p":null,"min_p":null,"seed":0}"#;
        assert_eq!(canonical(None), before);
        assert_eq!(canonical(Some(false)), before);
        assert_eq!(
            canonical(Some(true)),
            before.replace('}', r#","distinct":true}"#)
        );
    }

    #[test]
    fn each_sample_has_its_own_stream() {
        let s = Sampling::resolve(
            SamplingFlags {
                samples: Some(3),
                ..Default::default()
            },
            SamplingDefaults::default(),
        )
        .unwrap();
        let ids: Vec<[u64; 2]> = (0..3).map(|i| s.stream(7, 2, i).unwrap().id).collect();
        assert_eq!(ids, [[7, 2 << 32], [7, (2 << 32) | 1], [7, (2 << 32) | 2]]);
        assert_eq!(Sampling::GREEDY.stream(7, 2, 0), None);
    }
}
