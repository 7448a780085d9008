//! `--device`: where the model runs.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The device to run on: `cpu`, `cuda:N` (`cuda` = `cuda:0`) or `metal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum DeviceSpec {
    /// The host CPU.
    Cpu,
    /// CUDA device by ordinal.
    Cuda(usize),
    /// The Metal device.
    Metal,
}

impl DeviceSpec {
    /// The device kind without the ordinal (`cpu`, `cuda`, `metal`): what can change numerics.
    pub fn kind(self) -> &'static str {
        match self {
            DeviceSpec::Cpu => "cpu",
            DeviceSpec::Cuda(_) => "cuda",
            DeviceSpec::Metal => "metal",
        }
    }

    /// The default device: CUDA 0 when built with `cuda`, Metal when built with `metal`, else CPU.
    pub fn default_for_build() -> Self {
        if cfg!(feature = "cuda") {
            DeviceSpec::Cuda(0)
        } else if cfg!(feature = "metal") {
            DeviceSpec::Metal
        } else {
            DeviceSpec::Cpu
        }
    }

    /// Open the candle device. Errors: candle's device errors (no such GPU, driver).
    pub fn open(self) -> candle_core::Result<candle_core::Device> {
        match self {
            DeviceSpec::Cpu => Ok(candle_core::Device::Cpu),
            DeviceSpec::Cuda(i) => candle_core::Device::new_cuda(i),
            DeviceSpec::Metal => candle_core::Device::new_metal(0),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => write!(f, "cpu"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceSpec::Metal => write!(f, "metal"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "metal" => Ok(DeviceSpec::Metal),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(i)) => Ok(DeviceSpec::Cuda(i)),
                _ => Err(format!(
                    "invalid device `{s}`: expected cpu, cuda, cuda:N or metal"
                )),
            },
        }
    }
}

impl From<DeviceSpec> for String {
    fn from(d: DeviceSpec) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for DeviceSpec {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_spec_parses_table() {
        let cases: &[(&str, Option<DeviceSpec>)] = &[
            ("cpu", Some(DeviceSpec::Cpu)),
            ("cuda", Some(DeviceSpec::Cuda(0))),
            ("cuda:3", Some(DeviceSpec::Cuda(3))),
            ("metal", Some(DeviceSpec::Metal)),
            ("cuda:", None),
            ("cuda:x", None),
            ("gpu", None),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<DeviceSpec>().ok(), *want, "{s}");
        }
    }
}
