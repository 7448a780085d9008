//! The run's per-item state on disk: journaled outcomes, the image each answer was generated
//! from, the duplicate marker's keys and the judge's bookkeeping, in an embedded B-tree store
//! (`redb`) of bounded memory instead of maps that grow with the input (issue 44: about 2 kB
//! per row, 2 GB at 10⁶ rows).
//!
//! The store is an index, never a record: it lives in an unlinked temporary file in OUT
//! (`tempfile_in`, gone with the process, a kill -9 included) and is rebuilt from the journal
//! on every start, so nothing in it needs to be durable. Writes go through one open write
//! transaction, committed every [`WRITES_PER_COMMIT`] writes; reads see the writes before them.
//! Keys are big-endian, so a table iterates in the order of its keys' fields
//! ([`item_key_bytes`]: position, qa, sample; then the pass).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::backend::{ItemKey, JournalOutcome, Pass};

/// Memory the store may keep cached (pages read and written), in bytes.
const CACHE_BYTES: usize = 2 << 20;
/// Writes between two commits of the write transaction (bounds its dirty pages).
const WRITES_PER_COMMIT: usize = 4096;
/// Entries read per step of [`Store::for_each`].
const SCAN_STEP: usize = 1024;

/// The store's tables; each maps bytes to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    /// `(ItemKey, Pass)` → the JSON of its `JournalOutcome`.
    Results,
    /// `ItemKey` → the hex SHA-256 of the image its answer was generated from.
    AnswerImages,
    /// Duplicate-marker key (32-byte digest) → the JSON of the kept occurrence.
    Dedup,
    /// `ItemKey` → why the judge looks at it (one byte).
    JudgeRoles,
    /// Judge prompt (32-byte digest) → the first `ItemKey` with that prompt.
    JudgePrompts,
    /// `ItemKey` → the `ItemKey` whose judge generation it reuses.
    JudgeCopies,
    /// `ItemKey` → the judge prompt still to generate for it.
    JudgePending,
}

impl Table {
    fn definition(self) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
        TableDefinition::new(match self {
            Table::Results => "results",
            Table::AnswerImages => "answer_images",
            Table::Dedup => "dedup",
            Table::JudgeRoles => "judge_roles",
            Table::JudgePrompts => "judge_prompts",
            Table::JudgeCopies => "judge_copies",
            Table::JudgePending => "judge_pending",
        })
    }
}

/// A failure of the store (its temporary file: disk full, I/O).
#[derive(Debug, thiserror::Error)]
#[error("the run's temporary index in {}: {message}", dir.display())]
pub struct StoreError {
    dir: PathBuf,
    message: String,
}

/// The on-disk index of one run (see the module doc).
pub(crate) struct Store {
    db: redb::Database,
    txn: RefCell<Option<WriteTransaction>>,
    writes: Cell<usize>,
    dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

/// The 16 key bytes of an item: position, qa, sample, big-endian.
pub(crate) fn item_key_bytes(key: ItemKey) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&key.position.to_be_bytes());
    b[8..12].copy_from_slice(&key.qa.to_be_bytes());
    b[12..].copy_from_slice(&key.sample.to_be_bytes());
    b
}

/// The item of [`item_key_bytes`]; `None` for bytes of another length.
fn item_key_from(b: &[u8]) -> Option<ItemKey> {
    let b: &[u8; 16] = b.get(..16)?.try_into().ok()?;
    let position = u64::from_be_bytes(b[..8].try_into().ok()?);
    let qa = u32::from_be_bytes(b[8..12].try_into().ok()?);
    let sample = u32::from_be_bytes(b[12..].try_into().ok()?);
    Some(ItemKey::question(position, qa).with_sample(sample))
}

fn result_key(key: ItemKey, pass: Pass) -> [u8; 17] {
    let mut b = [0u8; 17];
    b[..16].copy_from_slice(&item_key_bytes(key));
    b[16] = match pass {
        Pass::Answer => 0,
        Pass::Judge => 1,
    };
    b
}

fn result_key_from(b: &[u8]) -> Option<(ItemKey, Pass)> {
    let pass = match b.get(16)? {
        0 => Pass::Answer,
        _ => Pass::Judge,
    };
    Some((item_key_from(b)?, pass))
}

impl Store {
    /// A new, empty store in an unlinked temporary file in `dir` (created when missing).
    ///
    /// Errors: [`StoreError`] when the file cannot be created.
    pub(crate) fn temporary(dir: &Path) -> Result<Store, StoreError> {
        let fail = |message: String| StoreError {
            dir: dir.to_path_buf(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        let file = tempfile::tempfile_in(dir).map_err(|e| fail(e.to_string()))?;
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create_with_backend(redb::backends::FileBackend::new(file))
            .map_err(|e| fail(e.to_string()))?;
        Ok(Store {
            db,
            txn: RefCell::new(None),
            writes: Cell::new(0),
            dir: dir.to_path_buf(),
        })
    }

    /// The error of an entry this store did not write as read (a key or value of the
    /// wrong shape).
    fn malformed(&self) -> StoreError {
        self.error("an entry of the wrong shape")
    }

    fn error(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError {
            dir: self.dir.clone(),
            message: e.to_string(),
        }
    }

    /// Run `f` on the open write transaction (begun when none is), committing it after
    /// `writes` more writes reach [`WRITES_PER_COMMIT`].
    fn with_txn<R>(
        &self,
        writes: usize,
        f: impl FnOnce(&WriteTransaction) -> Result<R, redb::Error>,
    ) -> Result<R, StoreError> {
        let mut slot = self.txn.borrow_mut();
        if slot.is_none() {
            *slot = Some(self.db.begin_write().map_err(|e| self.error(e))?);
        }
        let txn = slot.as_ref().expect("begun above");
        let out = f(txn).map_err(|e| self.error(e))?;
        let n = self.writes.get() + writes;
        if n >= WRITES_PER_COMMIT {
            self.writes.set(0);
            let txn = slot.take().expect("begun above");
            txn.commit().map_err(|e| self.error(e))?;
        } else {
            self.writes.set(n);
        }
        Ok(out)
    }

    fn get_raw(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.with_txn(0, |txn| {
            let t = txn.open_table(table.definition())?;
            let v = t.get(key)?.map(|v| v.value().to_vec());
            Ok(v)
        })
    }

    /// The value stored under `key`, decoded from JSON.
    ///
    /// Errors: [`StoreError`] (I/O, or a value that does not decode).
    pub(crate) fn get<V: DeserializeOwned>(
        &self,
        table: Table,
        key: &[u8],
    ) -> Result<Option<V>, StoreError> {
        match self.get_raw(table, key)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.error(e)),
        }
    }

    /// Store `value` (as JSON) under `key`, replacing any earlier value.
    ///
    /// Errors: [`StoreError`].
    pub(crate) fn put<V: Serialize>(
        &self,
        table: Table,
        key: &[u8],
        value: &V,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| self.error(e))?;
        self.with_txn(1, |txn| {
            txn.open_table(table.definition())?
                .insert(key, bytes.as_slice())?;
            Ok(())
        })
    }

    /// Remove `key` (nothing when absent). Errors: [`StoreError`].
    pub(crate) fn remove(&self, table: Table, key: &[u8]) -> Result<(), StoreError> {
        self.with_txn(1, |txn| {
            txn.open_table(table.definition())?.remove(key)?;
            Ok(())
        })
    }

    /// Entries in `table`. Errors: [`StoreError`].
    pub(crate) fn len(&self, table: Table) -> Result<u64, StoreError> {
        self.with_txn(0, |txn| Ok(txn.open_table(table.definition())?.len()?))
    }

    /// Call `f` on every entry of `table` in key order, [`SCAN_STEP`] entries read at a
    /// time, so that `f` may use the store (its writes to `table` after the current key are
    /// seen, as in a B-tree walk).
    ///
    /// Errors: [`StoreError`], or `f`'s error.
    pub(crate) fn for_each<E: From<StoreError>>(
        &self,
        table: Table,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let step: Vec<(Vec<u8>, Vec<u8>)> = self.with_txn(0, |txn| {
                let t = txn.open_table(table.definition())?;
                let range = match &after {
                    None => t.range(..)?,
                    Some(a) => t.range((
                        std::ops::Bound::Excluded(a.as_slice()),
                        std::ops::Bound::Unbounded,
                    ))?,
                };
                let mut step = Vec::new();
                for entry in range.take(SCAN_STEP) {
                    let (k, v) = entry?;
                    step.push((k.value().to_vec(), v.value().to_vec()));
                }
                Ok(step)
            })?;
            let Some((last, _)) = step.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (k, v) in &step {
                f(k, v)?;
            }
        }
    }

    /// Call `f` on every entry of `table`, a table keyed by [`item_key_bytes`], with its item
    /// and its value decoded from JSON, in key order ([`Store::for_each`]).
    ///
    /// Errors: [`StoreError`] (an entry of the wrong shape among them), or `f`'s error.
    pub(crate) fn for_each_item<V: DeserializeOwned, E: From<StoreError>>(
        &self,
        table: Table,
        mut f: impl FnMut(ItemKey, V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each(table, |k, v| {
            let key = item_key_from(k).ok_or_else(|| self.malformed())?;
            let value = serde_json::from_slice(v).map_err(|_| self.malformed())?;
            f(key, value)
        })
    }

    /// The journaled outcome of `(key, pass)`.
    ///
    /// Errors: [`StoreError`].
    pub(crate) fn result(
        &self,
        key: ItemKey,
        pass: Pass,
    ) -> Result<Option<JournalOutcome>, StoreError> {
        self.get(Table::Results, &result_key(key, pass))
    }

    /// Whether `(key, pass)` has an outcome. Errors: [`StoreError`].
    pub(crate) fn has_result(&self, key: ItemKey, pass: Pass) -> Result<bool, StoreError> {
        Ok(self
            .get_raw(Table::Results, &result_key(key, pass))?
            .is_some())
    }

    /// Record the outcome of `(key, pass)`. Errors: [`StoreError`].
    pub(crate) fn set_result(
        &self,
        key: ItemKey,
        pass: Pass,
        outcome: &JournalOutcome,
    ) -> Result<(), StoreError> {
        self.put(Table::Results, &result_key(key, pass), outcome)
    }

    /// Forget the outcome of `(key, pass)`. Errors: [`StoreError`].
    pub(crate) fn remove_result(&self, key: ItemKey, pass: Pass) -> Result<(), StoreError> {
        self.remove(Table::Results, &result_key(key, pass))
    }

    /// Every outcome in key order (position, qa, sample, then answer before judge).
    ///
    /// Errors: [`StoreError`], or `f`'s error.
    pub(crate) fn for_each_result<E: From<StoreError>>(
        &self,
        mut f: impl FnMut(ItemKey, Pass, JournalOutcome) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each(Table::Results, |k, v| {
            let (key, pass) = result_key_from(k).ok_or_else(|| self.malformed())?;
            let outcome = serde_json::from_slice(v).map_err(|e| self.error(e))?;
            f(key, pass, outcome)
        })
    }

    /// The image (hex SHA-256) the answer of `key` was generated from, where recorded.
    ///
    /// Errors: [`StoreError`].
    pub(crate) fn answer_image(&self, key: ItemKey) -> Result<Option<String>, StoreError> {
        self.get(Table::AnswerImages, &item_key_bytes(key))
    }

    /// Record (`Some`) or forget (`None`) the image of the answer of `key`.
    ///
    /// Errors: [`StoreError`].
    pub(crate) fn set_answer_image(
        &self,
        key: ItemKey,
        sha256: Option<&str>,
    ) -> Result<(), StoreError> {
        match sha256 {
            Some(sha) => self.put(Table::AnswerImages, &item_key_bytes(key), &sha),
            None => self.remove(Table::AnswerImages, &item_key_bytes(key)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_keys_round_trip_and_sort_by_position_then_qa_then_sample() {
        let keys = [
            ItemKey::question(2, 0),
            ItemKey::question(1, 7).with_sample(3),
            ItemKey::question(1, 7),
            ItemKey::question(u64::MAX, u32::MAX).with_sample(1),
            ItemKey::question(256, 1),
        ];
        let mut by_bytes: Vec<_> = keys.iter().map(|&k| item_key_bytes(k)).collect();
        by_bytes.sort();
        let decoded: Vec<_> = by_bytes.iter().map(|b| item_key_from(b).unwrap()).collect();
        let mut sorted = keys.to_vec();
        sorted.sort();
        assert_eq!(decoded, sorted);
    }

    #[test]
    fn results_are_read_back_after_commits_and_iterate_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::temporary(dir.path()).unwrap();
        // More writes than one commit holds, in reverse order.
        let n = WRITES_PER_COMMIT as u64 + 10;
        for p in (0..n).rev() {
            let key = ItemKey::question(p, 0);
            let outcome = JournalOutcome::Failed(format!("row {p}"));
            store.set_result(key, Pass::Judge, &outcome).unwrap();
            store.set_result(key, Pass::Answer, &outcome).unwrap();
        }
        store
            .remove_result(ItemKey::question(5, 0), Pass::Judge)
            .unwrap();
        assert_eq!(store.len(Table::Results).unwrap(), 2 * n - 1);
        assert_eq!(
            store.result(ItemKey::question(7, 0), Pass::Judge).unwrap(),
            Some(JournalOutcome::Failed("row 7".into()))
        );
        assert!(!store
            .has_result(ItemKey::question(5, 0), Pass::Judge)
            .unwrap());
        let mut seen = Vec::new();
        store
            .for_each_result::<StoreError>(|k, p, _| {
                seen.push((k, p));
                Ok(())
            })
            .unwrap();
        let mut expected: Vec<_> = (0..n)
            .flat_map(|p| [Pass::Answer, Pass::Judge].map(|s| (ItemKey::question(p, 0), s)))
            .filter(|&(k, p)| !(k.position == 5 && p == Pass::Judge))
            .collect();
        expected.sort();
        assert_eq!(seen, expected);
        // The temporary file is unlinked: nothing is left in the folder.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
