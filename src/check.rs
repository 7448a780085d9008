//! `verisample check --family F --pred TEXT --ref TEXT [--ref TEXT…] [--json]`: explains one
//! string decision against one reference or several (a list-valued answer) — the normalised forms, each candidate tried and which matched, the result.
//! Pure: the CLI prints [`CheckReport::to_human`] or the JSON of [`CheckReport`].

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::judge::{ascii_digits, numbers_disagree};
use crate::record::{references_blank, BLANK_REFERENCE};
use crate::route::is_blank;
use crate::verifiers::think::split_think;
use crate::verifiers::{Trial, Variant, Verifier};

/// Everything `check` reports; its JSON is the `--json` output (one object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The family whose verifier was used; `None` when `--verifier` chose it (the family then
    /// decides nothing).
    pub family: Option<String>,
    /// The verifier used, as a specification (`alnum`, `numeric:0.05`, …).
    pub verifier: String,
    /// The prediction as given.
    pub prediction: String,
    /// The answer after the reasoning, stripped: what the verifier sees.
    pub answer: String,
    /// The reasoning split off the prediction, if any.
    pub think: Option<String>,
    /// The reference as given; for several, their JSON array text (as `org_answer` stores a
    /// list-valued answer).
    pub reference: String,
    /// The reference's normalised form; for several, the JSON array of those compared.
    pub reference_normalised: String,
    /// `run`'s input check refuses the item (every reference blank, [`references_blank`]):
    /// `run` reports it in `errors.jsonl` (field `qa[i].answer`) with this message and never
    /// generates it; nothing is then accepted, judged or matched.
    pub input_error: Option<String>,
    /// The reference cannot be string-verified (the verifier compares nothing).
    pub unusable_reference: bool,
    /// The three candidates in trial order, with their normalised forms: `matched` is the
    /// pipeline's view (false for every one when the reference is unusable or the item
    /// refused: nothing is counted), `verifier_score` the verifier's own value beside it.
    pub candidates: Vec<CandidateCheck>,
    /// The first matching variant under the pure semantics (`None` when the reference is
    /// unusable or refused).
    pub matched_variant: Option<Variant>,
    /// Accepted by the string verifier.
    pub accepted: bool,
    /// `verifier:<name>:<variant>` when accepted.
    pub accepted_by: Option<String>,
    /// The text that would be stored as `answer` when accepted.
    pub stored_answer: Option<String>,
    /// The answer is blank (`no_answer`).
    pub blank_answer: bool,
    /// The item would go to the judge (not blank, not accepted).
    pub needs_judge: bool,
    /// ASCII digits of the answer, then of each reference (the number guard's view).
    pub digits: Vec<String>,
    /// The number guard would veto a judge `CORRECT`: the answer's digits differ from those
    /// of every reference (the rule of `route`).
    pub numbers_disagree: bool,
}

/// One of the contract's three candidates (contract §5) as the verifier compares it and as the
/// pipeline counts it; the contract keeps the two apart for a reference that normalises to
/// nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateCheck {
    /// The candidate; its `matched` is the pipeline's view (false when not counted).
    #[serde(flatten)]
    pub trial: Trial,
    /// The verifier's own value under the contract's semantics, counted or not: 1.0 or 0.0
    /// for a match/no match (`alnum_pair` gives 1.0 to two empty normalised forms), the score
    /// for ANLS.
    pub verifier_score: f64,
}

/// Explains the decision of `verifier` on `pred` (reasoning split off) against `references`
/// (one, or several: accepted when any matches, ANLS scored by the best, as
/// [`Verifier::verify_any`]).
pub fn check_with(
    family: Option<&str>,
    pred: &str,
    references: &[&str],
    verifier: Verifier,
) -> CheckReport {
    let split = split_think(pred, false);
    let v = verifier.verify_any(&split.answer, references);
    let reference = match references {
        [one] => (*one).to_string(),
        several => serde_json::Value::from(several.to_vec()).to_string(),
    };
    let mut digits = vec![ascii_digits(&split.answer)];
    digits.extend(references.iter().map(|r| ascii_digits(r)));
    let blank = is_blank(&split.answer);
    let input_error = references_blank(references).then(|| BLANK_REFERENCE.to_string());
    let accepted = v.accepted() && !blank && input_error.is_none();
    // What the verifier ignores is not reported as matched.
    let compared = !v.unusable_reference && input_error.is_none();
    let candidates = v
        .trials
        .iter()
        .map(|t| CandidateCheck {
            verifier_score: t.score.unwrap_or(if t.matched { 1.0 } else { 0.0 }),
            trial: Trial {
                matched: t.matched && compared,
                ..t.clone()
            },
        })
        .collect();
    CheckReport {
        family: family.map(str::to_string),
        verifier: verifier.to_string(),
        prediction: pred.to_string(),
        think: split.think,
        reference,
        reference_normalised: v.reference_normalised.clone(),
        unusable_reference: v.unusable_reference,
        matched_variant: v.matched.filter(|_| compared),
        accepted,
        accepted_by: v.accepted_by().filter(|_| accepted),
        stored_answer: v
            .accepted_trial()
            .map(|t| t.text.clone())
            .filter(|_| accepted),
        blank_answer: blank,
        needs_judge: !blank && !accepted && input_error.is_none(),
        input_error,
        digits,
        numbers_disagree: !references.is_empty()
            && references
                .iter()
                .all(|r| numbers_disagree(&split.answer, r)),
        candidates,
        answer: split.answer,
    }
}

impl CheckReport {
    /// The report as one JSON object (the `--json` output).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A human-readable explanation (strings quoted with escapes, so invisible characters
    /// show).
    pub fn to_human(&self) -> String {
        let mut s = String::new();
        if let Some(family) = &self.family {
            let _ = writeln!(s, "family:     {family}");
        }
        let _ = writeln!(s, "verifier:   {}", self.verifier);
        let _ = writeln!(
            s,
            "reference:  {:?} -> {:?}{}",
            self.reference,
            self.reference_normalised,
            if self.unusable_reference {
                "  (unusable: never accepted by the string verifier)"
            } else {
                ""
            }
        );
        if let Some(think) = &self.think {
            let _ = writeln!(s, "reasoning:  {} chars split off", think.chars().count());
        }
        let _ = writeln!(s, "answer:     {:?}", self.answer);
        for c in &self.candidates {
            let t = &c.trial;
            let score = t
                .score
                .map(|x| format!(" score {x:.4}"))
                .unwrap_or_default();
            let mark = if self.unusable_reference || self.input_error.is_some() {
                format!(
                    "not compared (unusable reference; the verifier alone gives {})",
                    c.verifier_score
                )
            } else if Some(t.variant) == self.matched_variant {
                "MATCH (first)".to_string()
            } else if t.matched {
                "match".to_string()
            } else {
                "no match".to_string()
            };
            let _ = writeln!(
                s,
                "  {:<16} {:?} -> {:?}{score}  {mark}",
                t.variant.as_str(),
                t.text,
                t.normalised
            );
        }
        let result = match (&self.accepted_by, &self.stored_answer) {
            _ if self.input_error.is_some() => format!(
                "NOT RUN: `run`'s input check reports the item in errors.jsonl (qa[i].answer: {}); \
                 the model is never asked",
                self.input_error.as_deref().unwrap_or_default()
            ),
            (Some(by), Some(ans)) => format!("ACCEPTED by {by}; stored answer {ans:?}"),
            _ if self.blank_answer => {
                "REJECTED: no_answer (blank answer; the judge is not asked)".to_string()
            }
            _ => "REJECTED by the string verifier; the judge would grade it".to_string(),
        };
        let _ = writeln!(s, "result:     {result}");
        let answer_digits = self.digits.first().cloned().unwrap_or_default();
        let reference_digits = match self.digits.get(1..).unwrap_or_default() {
            [one] => format!("{one:?}"),
            several => format!("{several:?}"),
        };
        let _ = writeln!(
            s,
            "digits:     {answer_digits:?} vs {reference_digits}{}",
            if self.numbers_disagree {
                "  (differ: the number guard would veto a judge CORRECT)"
            } else {
                ""
            }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verifiers::VerifierRegistry;

    #[test]
    fn explains_first_line_match() {
        let verifier = VerifierRegistry::default().for_family(Some("OrandCar"));
        let r = check_with(
            Some("OrandCar"),
            "\n\n11850\n\nThe amount is 11.850",
            &["11850"],
            verifier,
        );
        assert_eq!(r.verifier, "alnum");
        assert_eq!(r.matched_variant, Some(Variant::FirstLine));
        assert_eq!(r.accepted_by.as_deref(), Some("verifier:alnum:first_line"));
        assert_eq!(r.stored_answer.as_deref(), Some("11850"));
        assert_eq!(r.candidates[0].trial.normalised, "11850theamountis11850");
        assert!(
            !r.candidates[0].trial.matched
                && r.candidates[1].trial.matched
                && r.candidates[2].trial.matched
        );
        let human = r.to_human();
        assert!(
            human.contains("first_line       \"11850\" -> \"11850\"  MATCH (first)"),
            "{human}"
        );
        assert!(
            human.contains("ACCEPTED by verifier:alnum:first_line"),
            "{human}"
        );
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["matched_variant"], "first_line");
        assert_eq!(json["candidates"][2]["variant"], "first_paragraph");
    }

    #[test]
    fn explains_rejections() {
        let r = check_with(Some("OrandCar"), "ll.850", &["11850"], Verifier::Alnum);
        assert!(!r.accepted && r.needs_judge && r.numbers_disagree);
        assert_eq!(r.digits, ["850", "11850"]);
        assert!(r.to_human().contains("number guard would veto"));

        // Both normalise to "": the verifier ignores that comparison, so nothing is matched.
        let r = check_with(
            Some("OrandCar"),
            "!!",
            &["\u{4E2D}\u{6587}"],
            Verifier::Alnum,
        );
        assert_eq!(r.matched_variant, None);
        assert!(r.candidates.iter().all(|c| !c.trial.matched));
        // … while the verifier alone, as the contract defines it, gives 1.0 ("" == "").
        assert!(r.candidates.iter().all(|c| c.verifier_score == 1.0));
        assert!(r.unusable_reference && !r.accepted && r.needs_judge);
        assert_eq!(
            r.input_error, None,
            "a reference in another script is given"
        );
        let human = r.to_human();
        assert!(
            human.contains("not compared (unusable reference; the verifier alone gives 1)")
                && !human.contains("MATCH"),
            "{human}"
        );
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["matched_variant"], serde_json::Value::Null);
        assert_eq!(json["candidates"][0]["matched"], false);
        assert_eq!(json["candidates"][0]["verifier_score"], 1.0);

        let r = check_with(
            Some("OrandCar"),
            "<think>faint</think>\u{200B}",
            &["1432"],
            Verifier::Alnum,
        );
        assert!(r.blank_answer && !r.needs_judge);
        assert_eq!(r.think.as_deref(), Some("faint"));
        assert!(r.to_human().contains("no_answer"));
    }

    #[test]
    fn a_blank_reference_is_what_run_refuses_not_a_judge_item() {
        // `run`'s input check: every reference blank → errors.jsonl, never generated.
        for refs in [&["   "][..], &["", "\t\n"][..]] {
            let r = check_with(Some("OrandCar"), "12", refs, Verifier::Alnum);
            assert_eq!(r.input_error.as_deref(), Some(BLANK_REFERENCE), "{refs:?}");
            assert!(!r.accepted && !r.needs_judge && r.matched_variant.is_none());
            assert!(r.candidates.iter().all(|c| !c.trial.matched), "{refs:?}");
            let human = r.to_human();
            assert!(human.contains("NOT RUN: `run`'s input check"), "{human}");
            let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
            assert_eq!(json["input_error"], BLANK_REFERENCE);
            assert_eq!(json["needs_judge"], false);
        }
        // One usable reference among blanks: run generates and verifies it.
        let r = check_with(Some("OrandCar"), "12", &[" ", "12"], Verifier::Alnum);
        assert_eq!(r.input_error, None);
        assert!(r.accepted, "{}", r.to_human());
    }

    #[test]
    fn several_references_any_match_and_the_best_anls() {
        // `Black.` against several `black`s: the second reference matches.
        let r = check_with(None, "Black.", &["white", "black", "blak"], Verifier::Alnum);
        assert_eq!(r.reference, r#"["white","black","blak"]"#);
        assert!(r.accepted, "{}", r.to_human());
        let r = check_with(None, "Black.", &["white", "blak"], Verifier::Alnum);
        assert!(!r.accepted && r.needs_judge);
        // ANLS: the best reference is not the first; its score is the maximum.
        let anls = Verifier::Anls { threshold: 0.5 };
        let r = check_with(None, "Main Stret", &["elm road", "main street"], anls);
        assert!(r.accepted);
        let score = r.candidates[0].trial.score.unwrap();
        assert_eq!(format!("{score:.4}"), "0.9091");
        // The number guard vetoes only when every reference's digits differ.
        let r = check_with(None, "ll.850", &["11850", "850"], Verifier::Alnum);
        assert!(!r.numbers_disagree);
        assert_eq!(r.digits, ["850", "11850", "850"]);
        let r = check_with(None, "ll.850", &["11850", "1185"], Verifier::Alnum);
        assert!(r.numbers_disagree);
        assert!(
            r.to_human()
                .contains(r#"digits:     "850" vs ["11850", "1185"]"#),
            "{}",
            r.to_human()
        );
    }
}
