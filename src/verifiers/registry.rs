//! Which verifier a family uses (contract §5: "the verifier is chosen per family and is a
//! plug-in"), and parsing verifier names from the command line or a run config.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::anls::ANLS_TAU;
use super::numeric::CHARTQA_RELAXED_TOL;
use super::Verifier;

/// Errors from parsing a verifier specification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifierError {
    /// The name is none of `alnum`, `exact`, `mc_letter`, `numeric`, `relaxed`, `anls`.
    #[error("unknown verifier `{0}` (known: alnum, exact, mc_letter, numeric[:tol], relaxed, anls[:tau])")]
    Unknown(String),
    /// The parameter after `:` is not a finite number in `[0, 1]`.
    #[error("bad parameter in verifier `{0}`: expected a number in [0, 1]")]
    BadParameter(String),
    /// A `family=verifier` mapping lacks its `=`.
    #[error("bad family mapping `{0}`: expected FAMILY=VERIFIER")]
    BadMapping(String),
}

impl FromStr for Verifier {
    type Err = VerifierError;

    /// `alnum`, `exact`, `mc_letter`, `numeric` (tolerance 0), `numeric:<rel_tol>`,
    /// `relaxed` (ChartQA, tolerance 0.05), `anls` (τ 0.5), `anls:<tau>`.
    fn from_str(spec: &str) -> Result<Verifier, VerifierError> {
        let (name, raw_param) = match spec.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (spec, None),
        };
        let param = |default: f64| -> Result<f64, VerifierError> {
            match raw_param {
                None => Ok(default),
                Some(p) => p
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && (0.0..=1.0).contains(v))
                    .ok_or_else(|| VerifierError::BadParameter(spec.to_string())),
            }
        };
        let no_param = |v: Verifier| match raw_param {
            None => Ok(v),
            Some(_) => Err(VerifierError::BadParameter(spec.to_string())),
        };
        match name {
            "alnum" => no_param(Verifier::Alnum),
            "exact" => no_param(Verifier::Exact),
            "mc_letter" => no_param(Verifier::McLetter),
            "relaxed" => no_param(Verifier::Numeric {
                rel_tol: CHARTQA_RELAXED_TOL,
            }),
            "numeric" => Ok(Verifier::Numeric {
                rel_tol: param(0.0)?,
            }),
            "anls" => Ok(Verifier::Anls {
                threshold: param(ANLS_TAU)?,
            }),
            _ => Err(VerifierError::Unknown(spec.to_string())),
        }
    }
}

impl fmt::Display for Verifier {
    /// The specification that [`FromStr`] parses back to the same verifier.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verifier::Numeric { rel_tol } => write!(f, "numeric:{rel_tol}"),
            Verifier::Anls { threshold } => write!(f, "anls:{threshold}"),
            other => f.write_str(other.name()),
        }
    }
}

/// Family → verifier, with a default for families not listed.
///
/// [`VerifierRegistry::default`] maps `OrandCar` to `alnum` and uses `alnum` for unknown
/// families (the STR protocol of contract §5); both are overridable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierRegistry {
    /// Used for a family with no entry in `by_family`.
    pub default: Verifier,
    /// Per-family choices, keyed by the family name as in the split names (`OrandCar`).
    pub by_family: BTreeMap<String, Verifier>,
}

impl Default for VerifierRegistry {
    fn default() -> Self {
        let mut by_family = BTreeMap::new();
        by_family.insert("OrandCar".to_string(), Verifier::Alnum);
        VerifierRegistry {
            default: Verifier::Alnum,
            by_family,
        }
    }
}

impl VerifierRegistry {
    /// The verifier for `family` (`None`: a row without a family column).
    pub fn for_family(&self, family: Option<&str>) -> Verifier {
        family
            .and_then(|f| self.by_family.get(f))
            .copied()
            .unwrap_or(self.default)
    }

    /// Sets the verifier of one family.
    pub fn set(&mut self, family: &str, verifier: Verifier) {
        self.by_family.insert(family.to_string(), verifier);
    }

    /// Applies a `FAMILY=VERIFIER` override (`--verifier OrandCar=exact`); a bare `VERIFIER`
    /// replaces the default.
    ///
    /// # Errors
    /// [`VerifierError`] when the verifier name or the mapping does not parse.
    pub fn apply_override(&mut self, spec: &str) -> Result<(), VerifierError> {
        match spec.split_once('=') {
            Some((family, verifier)) if !family.is_empty() => {
                self.set(family, verifier.parse()?);
                Ok(())
            }
            Some(_) => Err(VerifierError::BadMapping(spec.to_string())),
            None => {
                self.default = spec.parse()?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases = [
            ("alnum", Ok(Verifier::Alnum)),
            ("exact", Ok(Verifier::Exact)),
            ("mc_letter", Ok(Verifier::McLetter)),
            ("numeric", Ok(Verifier::Numeric { rel_tol: 0.0 })),
            ("numeric:0.1", Ok(Verifier::Numeric { rel_tol: 0.1 })),
            ("relaxed", Ok(Verifier::Numeric { rel_tol: 0.05 })),
            ("anls", Ok(Verifier::Anls { threshold: 0.5 })),
            ("anls:2", Err(VerifierError::BadParameter("anls:2".into()))),
            (
                "alnum:1",
                Err(VerifierError::BadParameter("alnum:1".into())),
            ),
            ("regex", Err(VerifierError::Unknown("regex".into()))),
        ];
        for (spec, want) in cases {
            assert_eq!(spec.parse::<Verifier>(), want, "{spec}");
        }
        for v in [
            Verifier::Alnum,
            Verifier::Numeric { rel_tol: 0.05 },
            Verifier::Anls { threshold: 0.5 },
        ] {
            assert_eq!(v.to_string().parse::<Verifier>(), Ok(v));
        }
    }

    #[test]
    fn registry_defaults_and_overrides() {
        let mut reg = VerifierRegistry::default();
        assert_eq!(reg.for_family(Some("OrandCar")), Verifier::Alnum);
        assert_eq!(reg.for_family(Some("ChartQA")), Verifier::Alnum);
        assert_eq!(reg.for_family(None), Verifier::Alnum);
        reg.apply_override("ChartQA=relaxed").unwrap();
        reg.apply_override("exact").unwrap();
        assert_eq!(
            reg.for_family(Some("ChartQA")),
            Verifier::Numeric { rel_tol: 0.05 }
        );
        assert_eq!(reg.for_family(Some("DocVQA")), Verifier::Exact);
        assert_eq!(reg.for_family(Some("OrandCar")), Verifier::Alnum);
        assert_eq!(
            reg.apply_override("=alnum"),
            Err(VerifierError::BadMapping("=alnum".into()))
        );
    }
}
