//! Duplicate questions (contract §3): the same image (by content hash) with the same question and
//! the same reference in the same family is sampled once. The first occurrence in input order
//! is kept; every later one becomes [`ItemPlan::Duplicate`] naming it, and lands in
//! `cleaning.jsonl` with reason [`DUPLICATE`]. Only questions that cleaning kept take part (a
//! question dropped or invalid is accounted for on its own). Two different questions about one
//! image, or one question about two different images, are not duplicates; nor is a repeat in
//! another family: each family is a dataset of its own (its own splits), which would lose the
//! row otherwise.
//!
//! The key is the row's family (as the plan decided it: `--family`, else the row's) and the
//! cleaned question and reference (what would be sampled). The decision depends only on the
//! input, never on the shard: every shard marks duplicates over the whole input stream, so
//! shards and their merge agree with an unsharded run.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::outputs::DuplicateOf;
use super::plan::{ItemPlan, RowPlan};
use super::store::{Store, StoreError, Table};

/// The `cleaning.jsonl` reason of a repeated question.
pub const DUPLICATE: &str = "duplicate";

/// The keys seen so far: a 32-byte digest each (so memory does not grow with text length),
/// with the kept occurrence, in an on-disk [`Store`] (nor with the number of rows).
#[derive(Debug)]
pub(crate) struct Dedup {
    seen: Option<Store>,
}

/// The digest of (family, image sha256, question, reference), each length-prefixed so no two
/// different tuples share an encoding.
fn key(family: &str, image_sha256: &str, question: &str, reference: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [family, image_sha256, question, reference] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

impl Dedup {
    /// A marker; with `on == false` ([`crate::settings::Settings::dedup`] off) it marks
    /// nothing. Its keys go to a temporary file in `dir`.
    ///
    /// Errors: [`StoreError`] when that file cannot be created.
    pub(crate) fn new(on: bool, dir: &Path) -> Result<Dedup, StoreError> {
        Ok(Dedup {
            seen: on.then(|| Store::temporary(dir)).transpose()?,
        })
    }

    /// Turn the kept questions of `plan` that repeat an earlier kept question into
    /// [`ItemPlan::Duplicate`]; remember the others.
    ///
    /// Errors: [`StoreError`].
    pub(crate) fn mark(&mut self, plan: &mut RowPlan) -> Result<(), StoreError> {
        let Some(seen) = &self.seen else {
            return Ok(());
        };
        let Ok(body) = plan.body.as_mut() else {
            return Ok(());
        };
        for (qa, item) in body.items.iter_mut().enumerate() {
            let ItemPlan::Keep(q) = item else { continue };
            let k = key(&body.family, &body.image_sha256, &q.question, &q.answer);
            match seen.get::<DuplicateOf>(Table::Dedup, &k)? {
                Some(kept) => *item = ItemPlan::Duplicate(kept),
                None => {
                    let kept = DuplicateOf {
                        file: plan.file.clone(),
                        row: plan.row.unwrap_or(0),
                        position: plan.position,
                        qa: qa as u32,
                    };
                    seen.put(Table::Dedup, &k, &kept)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::plan::RowOk;
    use crate::record::QaItem;

    fn plan(position: u64, sha: &str, items: &[(&str, &str)]) -> RowPlan {
        in_family("F", position, sha, items)
    }

    fn in_family(family: &str, position: u64, sha: &str, items: &[(&str, &str)]) -> RowPlan {
        RowPlan {
            position,
            file: "f.parquet".into(),
            row: Some(position as usize),
            rows: None,
            body: Ok(RowOk {
                family: family.into(),
                clean_meta: "{}".into(),
                image_sha256: sha.into(),
                items: items
                    .iter()
                    .map(|(q, a)| {
                        ItemPlan::Keep(QaItem {
                            question: (*q).into(),
                            answer: (*a).into(),
                            ..QaItem::default()
                        })
                    })
                    .collect(),
            }),
        }
    }

    fn kinds(p: &RowPlan) -> Vec<Option<(u64, u32)>> {
        p.body
            .as_ref()
            .unwrap()
            .items
            .iter()
            .map(|i| match i {
                ItemPlan::Duplicate(d) => Some((d.position, d.qa)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn repeats_name_the_first_occurrence_and_other_keys_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Dedup::new(true, dir.path()).unwrap();
        let mut a = plan(0, "aa", &[("q", "1"), ("q2", "1")]);
        let mut b = plan(1, "aa", &[("q2", "1"), ("q", "2"), ("q", "1")]);
        let mut c = plan(2, "bb", &[("q", "1")]);
        for p in [&mut a, &mut b, &mut c] {
            d.mark(p).unwrap();
        }
        assert_eq!(kinds(&a), vec![None, None]);
        assert_eq!(kinds(&b), vec![Some((0, 1)), None, Some((0, 0))]);
        assert_eq!(kinds(&c), vec![None], "another image is not a duplicate");
        let mut off = Dedup::new(false, dir.path()).unwrap();
        let mut again = plan(3, "aa", &[("q", "1")]);
        off.mark(&mut a.clone()).unwrap();
        off.mark(&mut again).unwrap();
        assert_eq!(kinds(&again), vec![None]);
    }

    #[test]
    fn a_repeat_in_another_family_is_kept_and_one_in_the_same_family_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Dedup::new(true, dir.path()).unwrap();
        let mut a = in_family("A", 0, "aa", &[("q", "1")]);
        let mut b = in_family("B", 1, "aa", &[("q", "1")]);
        let mut a_again = in_family("A", 2, "aa", &[("q", "1")]);
        for p in [&mut a, &mut b, &mut a_again] {
            d.mark(p).unwrap();
        }
        assert_eq!(kinds(&b), vec![None], "family B's split keeps its row");
        assert_eq!(kinds(&a_again), vec![Some((0, 0))]);
    }

    #[test]
    fn the_key_separates_its_parts() {
        assert_ne!(key("f", "a", "bc", "d"), key("f", "a", "b", "cd"));
        assert_ne!(key("fa", "b", "c", "d"), key("f", "ab", "c", "d"));
        assert_eq!(key("f", "a", "b", "c"), key("f", "a", "b", "c"));
    }
}
