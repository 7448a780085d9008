//! The end-of-run accounting check: every input unit lands in exactly one destination.
//!
//! A unit is one `qa` entry of a readable row, `(position, Some(qa))`, or a whole row that
//! could not be used (unreadable, bad image, no questions), `(position, None)`.
//! Destinations: `accepted` (the `_RS_*` splits), `rejected` (the `_rejected` split),
//! `cleaning` (`cleaning.jsonl`) and `errors` (`errors.jsonl`).

use std::collections::{BTreeMap, BTreeSet};

/// One input unit: stream position and `qa` index (`None` = the whole row).
pub type Unit = (u64, Option<u32>);

/// Records where each unit went and which units were expected.
#[derive(Debug, Default)]
pub struct Ledger {
    expected: BTreeSet<Unit>,
    placed: BTreeMap<Unit, &'static str>,
    doubles: Vec<(Unit, &'static str, &'static str)>,
}

/// Most discrepancies named in the failure message.
const SHOWN: usize = 10;

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Declare that `unit` exists in the input.
    pub fn expect(&mut self, unit: Unit) {
        self.expected.insert(unit);
    }

    /// Record that `unit` was written to `destination`.
    pub fn place(&mut self, unit: Unit, destination: &'static str) {
        if let Some(first) = self.placed.insert(unit, destination) {
            self.doubles.push((unit, first, destination));
        }
    }

    /// Units placed per destination.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for d in self.placed.values() {
            *out.entry(*d).or_insert(0) += 1;
        }
        out
    }

    /// `Ok` when every expected unit was placed exactly once and nothing else was placed;
    /// else a message naming the first discrepancies of each kind.
    pub fn check(&self) -> Result<(), String> {
        let missing: Vec<&Unit> = self
            .expected
            .iter()
            .filter(|u| !self.placed.contains_key(u))
            .collect();
        let unexpected: Vec<&Unit> = self
            .placed
            .keys()
            .filter(|u| !self.expected.contains(u))
            .collect();
        if missing.is_empty() && unexpected.is_empty() && self.doubles.is_empty() {
            return Ok(());
        }
        let show = |v: Vec<String>| v.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
        Err(format!(
            "{} expected units, {} placed; {} in no output [{}]; {} in two outputs [{}]; {} not in the input [{}]",
            self.expected.len(),
            self.placed.len(),
            missing.len(),
            show(missing.iter().map(|u| format!("{u:?}")).collect()),
            self.doubles.len(),
            show(self.doubles.iter().map(|(u, a, b)| format!("{u:?} {a}+{b}")).collect()),
            unexpected.len(),
            show(unexpected.iter().map(|u| format!("{u:?}")).collect()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_placement_passes() {
        let mut l = Ledger::new();
        for u in [(0, Some(0)), (0, Some(1)), (1, None)] {
            l.expect(u);
        }
        l.place((0, Some(0)), "accepted");
        l.place((0, Some(1)), "cleaning");
        l.place((1, None), "errors");
        assert_eq!(l.check(), Ok(()));
        assert_eq!(l.counts().get("errors"), Some(&1));
    }

    #[test]
    fn missing_double_and_unexpected_units_fail() {
        let mut l = Ledger::new();
        l.expect((0, Some(0)));
        l.expect((0, Some(1)));
        l.place((0, Some(0)), "accepted");
        l.place((0, Some(0)), "rejected");
        l.place((7, None), "errors");
        let msg = l.check().unwrap_err();
        assert!(msg.contains("1 in no output [(0, Some(1))]"), "{msg}");
        assert!(
            msg.contains("1 in two outputs [(0, Some(0)) accepted+rejected]"),
            "{msg}"
        );
        assert!(msg.contains("1 not in the input [(7, None)]"), "{msg}");
    }
}
