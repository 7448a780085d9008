//! The end-of-run accounting check: every input unit lands in exactly one destination.
//!
//! A unit is one `qa` entry of a readable row, `(position, Some(qa))`, or a whole row that
//! could not be used (unreadable, bad image, no questions), `(position, None)`.
//! Destinations: `accepted` (the `_RS_*` splits), `rejected` (the `_rejected` split),
//! `cleaning` (`cleaning.jsonl`) and `errors` (`errors.jsonl`).

use std::collections::{BTreeMap, BTreeSet};

pub type Unit = (u64, Option<u32>);

/// The check over the whole run, one input row at a time: the units of the row being
/// written are held until [`Ledger::settle`] (the write phase calls it after each row),
/// then only counts and the first [`SHOWN`] problems of each kind are kept, so memory does
/// not grow with the input.
#[derive(Debug, Default)]
pub struct Ledger {
    expected: BTreeSet<Unit>,
    placed: BTreeMap<Unit, &'static str>,
    expected_total: u64,
    placed_total: u64,
    counts: BTreeMap<&'static str, u64>,
    missing: Problems<Unit>,
    unexpected: Problems<Unit>,
    doubles: Problems<(Unit, &'static str, &'static str)>,
}

/// How many of one kind of problem, and the first [`SHOWN`].
#[derive(Debug)]
struct Problems<T> {
    count: u64,
    first: Vec<T>,
}

impl<T> Default for Problems<T> {
    fn default() -> Self {
        Problems {
            count: 0,
            first: Vec::new(),
        }
    }
}

impl<T: std::fmt::Debug> Problems<T> {
    fn add(&mut self, problem: T) {
        self.count += 1;
        if self.first.len() < SHOWN {
            self.first.push(problem);
        }
    }

    fn shown(&self) -> String {
        let shown: Vec<String> = self.first.iter().map(|p| format!("{p:?}")).collect();
        shown.join(", ")
    }
}

const SHOWN: usize = 10;

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    pub fn expect(&mut self, unit: Unit) {
        self.expected.insert(unit);
    }

    pub fn place(&mut self, unit: Unit, destination: &'static str) {
        match self.placed.get(&unit) {
            Some(first) => self.doubles.add((unit, *first, destination)),
            None => {
                self.placed.insert(unit, destination);
            }
        }
    }

    /// Check the units expected and placed since the last call against each other, count
    /// them and forget them. Every unit of a row must be expected and placed before the row
    /// is settled.
    pub fn settle(&mut self) {
        for unit in &self.expected {
            if !self.placed.contains_key(unit) {
                self.missing.add(*unit);
            }
        }
        for (unit, destination) in &self.placed {
            if !self.expected.contains(unit) {
                self.unexpected.add(*unit);
            }
            *self.counts.entry(*destination).or_insert(0) += 1;
        }
        self.expected_total += self.expected.len() as u64;
        self.placed_total += self.placed.len() as u64;
        self.expected.clear();
        self.placed.clear();
    }

    /// Units placed in each destination (settled ones).
    pub fn counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.counts
    }

    /// Settle, then fail naming the first problems of each kind.
    pub fn check(&mut self) -> Result<(), String> {
        self.settle();
        if self.missing.count == 0 && self.unexpected.count == 0 && self.doubles.count == 0 {
            return Ok(());
        }
        Err(format!(
            "{} expected units, {} placed; {} in no output [{}]; {} in two outputs [{}]; {} not in the input [{}]",
            self.expected_total,
            self.placed_total,
            self.missing.count,
            self.missing.shown(),
            self.doubles.count,
            self.doubles
                .first
                .iter()
                .map(|(u, a, b)| format!("{u:?} {a}+{b}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.unexpected.count,
            self.unexpected.shown(),
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
        assert_eq!(l.counts().get("accepted"), Some(&1));
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

    #[test]
    fn a_unit_placed_after_its_row_was_settled_is_both_missing_and_unexpected() {
        let mut l = Ledger::new();
        l.expect((0, Some(0)));
        l.settle();
        l.expect((1, Some(0)));
        l.place((1, Some(0)), "accepted");
        l.place((0, Some(0)), "accepted");
        let msg = l.check().unwrap_err();
        assert!(msg.starts_with("2 expected units, 2 placed"), "{msg}");
        assert!(msg.contains("1 in no output [(0, Some(0))]"), "{msg}");
        assert!(msg.contains("1 not in the input [(0, Some(0))]"), "{msg}");
    }
}
