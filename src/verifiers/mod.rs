//! String verifiers (contract §5): a deterministic accept/reject of a model answer against the
//! official reference, chosen per family from a [`VerifierRegistry`], plus the think/answer
//! split of a raw generation ([`think`]).
//!
//! Every verifier tries the three candidates of contract §5 in order (whole prediction, first
//! line, first paragraph; see [`alnum::candidates`]) and records which one matched, so a model
//! that answers and then explains is not penalised, and the text that passed is known.
//! Pure functions: no I/O, no model.

pub mod alnum;
pub mod anls;
pub mod mc_letter;
pub mod numeric;
pub mod pytext;
pub mod python;
pub mod registry;
pub mod think;

use serde::{Deserialize, Serialize};

pub use registry::{VerifierError, VerifierRegistry};

/// Which candidate of the prediction was compared (contract §5), in trial order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// The prediction as given.
    Whole,
    /// The first line of the stripped prediction.
    FirstLine,
    /// The first paragraph (lines up to the first blank one), joined with `\n`.
    FirstParagraph,
}

impl Variant {
    /// All variants in trial order.
    pub const ALL: [Variant; 3] = [Variant::Whole, Variant::FirstLine, Variant::FirstParagraph];

    /// The stored name: `whole`, `first_line`, `first_paragraph`.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Whole => "whole",
            Variant::FirstLine => "first_line",
            Variant::FirstParagraph => "first_paragraph",
        }
    }

    /// Parses a stored name (inverse of [`Variant::as_str`]).
    pub fn parse(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.as_str() == name)
    }
}

/// A verifier, chosen per family (contract §5: "the verifier is chosen per family and is a
/// plug-in"). Parse one from its name with [`std::str::FromStr`]: `alnum`, `exact`,
/// `mc_letter`, `numeric` (tolerance 0), `numeric:<rel_tol>`, `relaxed` (= `numeric:0.05`),
/// `anls` (τ = 0.5), `anls:<tau>`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum Verifier {
    /// Contract §5 `alnum`: lower-case, keep ASCII `a-z0-9`, compare ([`alnum`]).
    Alnum,
    /// Byte equality after Python `strip()` of both sides; case-sensitive.
    Exact,
    /// The chosen option letter, extracted from free text ([`mc_letter`]).
    McLetter,
    /// A number compared with relative tolerance `rel_tol` (0 = exact; 0.05 = ChartQA relaxed
    /// accuracy), falling back to case-insensitive text equality ([`numeric`]).
    Numeric {
        /// Largest accepted `|pred - ref| / |ref|`.
        rel_tol: f64,
    },
    /// ANLS: accepted when the normalised Levenshtein distance is below `threshold`
    /// (τ = 0.5 for DocVQA / ST-VQA; [`anls`]).
    Anls {
        /// τ: the largest rejected normalised distance.
        threshold: f64,
    },
}

/// One candidate compared with the reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// Which candidate.
    pub variant: Variant,
    /// The candidate text exactly as compared (and as stored when it passes).
    pub text: String,
    /// The candidate's normalised form under the verifier (`alnum_norm`, extracted letter, …).
    pub normalised: String,
    /// Whether it matched the reference (pure comparison, even for an unusable reference).
    pub matched: bool,
    /// A similarity score where the verifier has one (ANLS), else `None`.
    pub score: Option<f64>,
}

/// The outcome of one verifier on one prediction, with everything `check` explains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    /// The verifier's name (`alnum`, `exact`, `mc_letter`, `numeric`, `anls`).
    pub verifier: String,
    /// The reference's normalised form.
    pub reference_normalised: String,
    /// The reference cannot be string-verified (normalises to empty, has no option letter, …):
    /// never accepted by the string verifier (contract §5); it goes to the judge.
    pub unusable_reference: bool,
    /// The three candidates in trial order.
    pub trials: Vec<Trial>,
    /// The first matching variant under the pure semantics (ignores `unusable_reference`).
    pub matched: Option<Variant>,
}

impl Verification {
    /// Whether the string verifier accepts: a variant matched and the reference is usable.
    pub fn accepted(&self) -> bool {
        self.matched.is_some() && !self.unusable_reference
    }

    /// The accepted variant and its text (the text that passed the verifier), if accepted.
    pub fn accepted_trial(&self) -> Option<&Trial> {
        if !self.accepted() {
            return None;
        }
        self.trials.iter().find(|t| Some(t.variant) == self.matched)
    }

    /// `verifier:<name>:<variant>` when accepted (the `accepted_by` value of contract §7).
    pub fn accepted_by(&self) -> Option<String> {
        self.accepted_trial()
            .map(|t| format!("verifier:{}:{}", self.verifier, t.variant.as_str()))
    }
}

/// A comparison of one candidate with the reference, as each verifier computes it.
struct Comparison {
    candidate_normalised: String,
    reference_normalised: String,
    reference_usable: bool,
    matched: bool,
    score: Option<f64>,
}

impl Verifier {
    /// The name used in `accepted_by` and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Verifier::Alnum => "alnum",
            Verifier::Exact => "exact",
            Verifier::McLetter => "mc_letter",
            Verifier::Numeric { .. } => "numeric",
            Verifier::Anls { .. } => "anls",
        }
    }

    fn compare(&self, candidate: &str, reference: &str) -> Comparison {
        match *self {
            Verifier::Alnum => {
                let c = alnum::alnum_norm(candidate);
                let r = alnum::alnum_norm(reference);
                Comparison {
                    matched: c == r,
                    reference_usable: !r.is_empty(),
                    candidate_normalised: c,
                    reference_normalised: r,
                    score: None,
                }
            }
            Verifier::Exact => {
                let c = pytext::py_strip(candidate);
                let r = pytext::py_strip(reference);
                Comparison {
                    matched: c == r,
                    reference_usable: !r.is_empty(),
                    candidate_normalised: c.to_string(),
                    reference_normalised: r.to_string(),
                    score: None,
                }
            }
            Verifier::McLetter => {
                let c = mc_letter::extract_choice(candidate);
                let r = mc_letter::reference_letter(reference);
                Comparison {
                    matched: c.is_some() && c == r,
                    reference_usable: r.is_some(),
                    candidate_normalised: c.map(String::from).unwrap_or_default(),
                    reference_normalised: r.map(String::from).unwrap_or_default(),
                    score: None,
                }
            }
            Verifier::Numeric { rel_tol } => {
                let c = numeric::NumericValue::parse(candidate);
                let r = numeric::NumericValue::parse(reference);
                Comparison {
                    matched: numeric::numeric_match(&c, &r, rel_tol),
                    reference_usable: !r.is_empty(),
                    candidate_normalised: c.to_string(),
                    reference_normalised: r.to_string(),
                    score: None,
                }
            }
            Verifier::Anls { threshold } => {
                let c = anls::anls_normalise(candidate);
                let r = anls::anls_normalise(reference);
                let score = anls::anls_score(&c, &r, threshold);
                Comparison {
                    matched: score > 0.0,
                    reference_usable: !r.is_empty(),
                    candidate_normalised: c,
                    reference_normalised: r,
                    score: Some(score),
                }
            }
        }
    }

    /// Verifies `pred` (the model's answer after its reasoning) against `reference`: tries the
    /// three candidates of contract §5 in order and records each trial and the first match.
    pub fn verify(&self, pred: &str, reference: &str) -> Verification {
        self.verify_any(pred, &[reference])
    }

    /// Verifies `pred` against several references (a list-valued answer: DocVQA, TextVQA),
    /// each normalised alike. A candidate matches when it matches any usable reference;
    /// its score (ANLS) is the maximum over them, the ST-VQA / DocVQA definition (Biten et
    /// al., 2019: `max_j s(a_ij, o_q)`). References the verifier cannot use (contract §5: e.g.
    /// normalised to empty) are left out while one is usable, so `"?!"` never passes through
    /// a CJK reference beside a usable one; when none is usable the comparison is the pure one
    /// over all of them and `unusable_reference` is set. `reference_normalised` is the
    /// normalised reference, or the JSON array of those compared when there are several. An
    /// empty `references` is one empty reference.
    pub fn verify_any(&self, pred: &str, references: &[&str]) -> Verification {
        let references = if references.is_empty() {
            &[""][..]
        } else {
            references
        };
        let usable: Vec<&str> = references
            .iter()
            .copied()
            .filter(|r| self.compare("", r).reference_usable)
            .collect();
        let unusable_reference = usable.is_empty();
        let compared = if unusable_reference {
            references
        } else {
            usable.as_slice()
        };
        let mut trials = Vec::with_capacity(3);
        for (variant, text) in alnum::candidates(pred) {
            let cmps: Vec<Comparison> = compared.iter().map(|r| self.compare(&text, r)).collect();
            let score = cmps
                .iter()
                .filter_map(|c| c.score)
                .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
            trials.push(Trial {
                variant,
                text,
                normalised: cmps
                    .first()
                    .map(|c| c.candidate_normalised.clone())
                    .unwrap_or_default(),
                matched: cmps.iter().any(|c| c.matched),
                score,
            });
        }
        let normalised: Vec<String> = compared
            .iter()
            .map(|r| self.compare("", r).reference_normalised)
            .collect();
        let reference_normalised = match normalised.as_slice() {
            [one] => one.clone(),
            _ => serde_json::Value::from(normalised).to_string(),
        };
        let matched = trials.iter().find(|t| t.matched).map(|t| t.variant);
        Verification {
            verifier: self.name().to_string(),
            reference_normalised,
            unusable_reference,
            trials,
            matched,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_table() {
        // (verifier, pred, reference, accepted variant)
        let cases: Vec<(Verifier, &str, &str, Option<Variant>)> = vec![
            (
                Verifier::Alnum,
                "bridgestone",
                "Bridgestone",
                Some(Variant::Whole),
            ),
            (
                Verifier::Alnum,
                "11850\n\nThe amount",
                "11850",
                Some(Variant::FirstLine),
            ),
            (Verifier::Alnum, "ll.850", "11850", None),
            (Verifier::Alnum, "", "\u{4E2D}", None),
            (Verifier::Exact, "  Paris \n", "Paris", Some(Variant::Whole)),
            (Verifier::Exact, "paris", "Paris", None),
            (
                Verifier::Exact,
                "Paris\nThe capital",
                "Paris",
                Some(Variant::FirstLine),
            ),
            (
                Verifier::McLetter,
                "The answer is B",
                "B",
                Some(Variant::Whole),
            ),
            (Verifier::McLetter, "(c)", "C", Some(Variant::Whole)),
            (Verifier::McLetter, "Because", "B", None),
            (
                Verifier::Numeric { rel_tol: 0.0 },
                "1,234",
                "1234",
                Some(Variant::Whole),
            ),
            (Verifier::Numeric { rel_tol: 0.0 }, "1235", "1234", None),
            (
                Verifier::Numeric { rel_tol: 0.05 },
                "1290",
                "1234",
                Some(Variant::Whole),
            ),
            (Verifier::Numeric { rel_tol: 0.05 }, "1300", "1234", None),
            (
                Verifier::Anls { threshold: 0.5 },
                "Main  Stret",
                "main street",
                Some(Variant::Whole),
            ),
            (
                Verifier::Anls { threshold: 0.5 },
                "elm road",
                "main street",
                None,
            ),
        ];
        for (verifier, pred, reference, want) in cases {
            let v = verifier.verify(pred, reference);
            assert_eq!(
                v.accepted_trial().map(|t| t.variant),
                want,
                "{verifier:?} {pred:?} vs {reference:?}"
            );
        }
    }

    #[test]
    fn unusable_reference_is_never_accepted() {
        let v = Verifier::Alnum.verify("?!", "\u{4E2D}\u{6587}");
        assert_eq!(v.matched, Some(Variant::Whole));
        assert!(v.unusable_reference);
        assert!(!v.accepted());
        assert_eq!(v.accepted_by(), None);
    }

    #[test]
    fn accepted_by_names_variant_and_text() {
        let v = Verifier::Alnum.verify("\n\n11850\n\nThe amount is 11.850", "11850");
        assert_eq!(
            v.accepted_by().as_deref(),
            Some("verifier:alnum:first_line")
        );
        assert_eq!(v.accepted_trial().map(|t| t.text.as_str()), Some("11850"));
        assert_eq!(v.trials[0].normalised, "11850theamountis11850");
    }
}
