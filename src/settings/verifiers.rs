//! `--verifier` entries: each parses and names a family once ([`check_entries`]); those that
//! would decide nothing for the input, warned about before anything loads ([`idle_verifiers`]);
//! those that change no family's verifier, left out of the run's identity ([`effective_verifiers`]).

use std::collections::{BTreeMap, BTreeSet};

use super::SettingsError;
use crate::verifiers::{Verifier, VerifierRegistry};

/// Every `--verifier` entry parses, and each family (and the default, without `FAMILY=`) has
/// at most one: a second one would silently replace the first.
///
/// Errors: [`SettingsError::Invalid`] naming the first entry at fault.
pub(super) fn check_entries(verifiers: &[String]) -> Result<(), SettingsError> {
    let mut targets = BTreeMap::new();
    for v in verifiers {
        let invalid = |why: String| SettingsError::Invalid {
            key: "verifier",
            value: v.clone(),
            why,
        };
        VerifierRegistry::default()
            .apply_override(v)
            .map_err(|e| invalid(e.to_string()))?;
        let family = v.split_once('=').map(|(f, _)| f);
        if let Some(first) = targets.insert(family, v) {
            return Err(invalid(format!(
                "{} already has the verifier {first:?}: give one per family",
                family.map_or("the default".to_string(), |f| format!("family {f}"))
            )));
        }
    }
    Ok(())
}

/// The default registry with `verifiers` applied in order (an entry that does not parse is
/// skipped: [`super::Settings::resolve`] refuses it first).
fn registry(verifiers: &[&String]) -> VerifierRegistry {
    let mut registry = VerifierRegistry::default();
    for v in verifiers {
        let _ = registry.apply_override(v);
    }
    registry
}

/// What a registry decides: its default, and every family whose verifier is not that default
/// (an entry equal to the default decides as no entry would).
fn behaviour(registry: VerifierRegistry) -> (Verifier, BTreeMap<String, Verifier>) {
    let default = registry.default;
    let own = registry
        .by_family
        .into_iter()
        .filter(|(_, v)| *v != default)
        .collect();
    (default, own)
}

/// `verifiers` without the entries that change no family's verifier (the default stated
/// explicitly: a bare `alnum`, `OrandCar=alnum`, `MyBench=alnum` when the default is `alnum`),
/// in their order and spelling: the run's identity ([`super::CanonicalSettings::verifiers`]),
/// so that stating a default does not count as a change of settings on resume, and a run that
/// states none keeps the fingerprint it had.
pub(super) fn effective_verifiers(verifiers: &[String]) -> Vec<String> {
    // One entry left out at a time, against what remains: two entries that repeat each other
    // (`X=exact` twice) each decide nothing beside the other, yet one of them must stay.
    let mut kept: Vec<&String> = verifiers.iter().collect();
    let decided = behaviour(registry(&kept));
    let mut i = 0;
    while i < kept.len() {
        let mut without = kept.clone();
        without.remove(i);
        if behaviour(registry(&without)) == decided {
            kept = without;
        } else {
            i += 1;
        }
    }
    kept.into_iter().cloned().collect()
}

/// A warning for each of `verifiers` that would decide nothing over an input whose rows
/// belong to `families` (`None`, or none: unknown, no warning): a `FAMILY=NAME` whose family
/// no row has (most likely misspelt; the message lists the families present), or a bare
/// `NAME` when every family present has a verifier of its own (a bare one only sets the
/// default).
pub(super) fn idle_verifiers(
    verifiers: &[String],
    families: Option<&BTreeSet<String>>,
) -> Vec<String> {
    let Some(families) = families.filter(|f| !f.is_empty()) else {
        return Vec::new();
    };
    let registry = registry(&verifiers.iter().collect::<Vec<_>>());
    let listed = families.iter().cloned().collect::<Vec<_>>().join(", ");
    verifiers
        .iter()
        .filter_map(|v| match v.split_once('=') {
            Some((f, _)) if !families.contains(f) => {
                let hint = families
                    .iter()
                    .find(|p| p.eq_ignore_ascii_case(f))
                    .map_or(String::new(), |p| format!(" (did you mean {p}?)"));
                Some(format!(
                    "--verifier {v}: no row of the input is of family {f}{hint}; its families: \
                     {listed}. This verifier would decide nothing; is the family name right?"
                ))
            }
            Some(_) => None,
            None if families.iter().all(|f| registry.by_family.contains_key(f)) => {
                let own: Vec<String> = families
                    .iter()
                    .map(|f| format!("{f}: {}", registry.for_family(Some(f))))
                    .collect();
                Some(format!(
                    "--verifier {v}: a verifier without FAMILY= is the default of families that \
                     have none of their own, and every family of the input has one ({}); to \
                     replace it, give --verifier {}={v}",
                    own.join(", "),
                    families.first().map_or("", String::as_str)
                ))
            }
            None => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_stated_default_is_no_change_and_a_real_override_stays() {
        assert!(effective_verifiers(&strings(&["alnum"])).is_empty());
        assert!(effective_verifiers(&strings(&["OrandCar=alnum"])).is_empty());
        assert!(effective_verifiers(&strings(&["MyBench=alnum", "alnum"])).is_empty());
        assert_eq!(
            effective_verifiers(&strings(&["OrandCar=alnum", "MyBench=exact"])),
            ["MyBench=exact"]
        );
        // Under another default, a family's alnum is a choice; the family's own repeat of the
        // default is not.
        assert_eq!(
            effective_verifiers(&strings(&["exact", "MyBench=alnum", "Other=exact"])),
            ["exact", "MyBench=alnum"]
        );
        // An override given twice is one choice: one of the two stays in the identity.
        assert_eq!(
            effective_verifiers(&strings(&["MyBench=exact", "MyBench=exact"])),
            ["MyBench=exact"]
        );
        assert_eq!(
            effective_verifiers(&strings(&["exact", "exact"])),
            ["exact"]
        );
        // OrandCar keeps its own alnum under any default: stating it changes nothing.
        assert_eq!(
            effective_verifiers(&strings(&["numeric", "OrandCar=alnum"])),
            ["numeric"]
        );
    }

    #[test]
    fn verifiers_that_decide_nothing_are_named_before_the_run() {
        let families: BTreeSet<String> = ["My_Bench", "OrandCar"].map(String::from).into();
        let given = strings(&["Orand=exact", "orandcar=anls", "OrandCar=alnum", "numeric"]);
        let warnings = idle_verifiers(&given, Some(&families));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(
            warnings[0],
            "--verifier Orand=exact: no row of the input is of family Orand; its families: \
             My_Bench, OrandCar. This verifier would decide nothing; is the family name right?"
        );
        assert!(
            warnings[1].contains("family orandcar (did you mean OrandCar?)"),
            "{}",
            warnings[1]
        );
        // A bare verifier reaches My_Bench (no verifier of its own) above; with OrandCar alone
        // it decides nothing.
        let orand: BTreeSet<String> = ["OrandCar".to_string()].into();
        assert_eq!(
            idle_verifiers(&strings(&["numeric:0.05"]), Some(&orand)),
            [
                "--verifier numeric:0.05: a verifier without FAMILY= is the default of families \
                 that have none of their own, and every family of the input has one (OrandCar: \
                 alnum); to replace it, give --verifier OrandCar=numeric:0.05"
            ]
        );
        // Families unknown (an input that cannot be listed, or of no readable row): no guess.
        assert!(idle_verifiers(&given, None).is_empty());
        assert!(idle_verifiers(&given, Some(&BTreeSet::new())).is_empty());
    }
}
