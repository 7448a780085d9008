//! Resume: the journal of a run (its header with the run's fingerprint, one record per
//! finished generation), opened and checked under the OUT lock before the model loads, and
//! what a rerun may replace (`--restart`, an earlier run with nothing to lose, the
//! fingerprint diff of a refused one).

use serde::{Deserialize, Serialize};

pub use super::backend::JournalOutcome;
use super::backend::{ItemKey, Pass};
use super::error::PipelineError;
use super::store::{Store, StoreError, Table};
use super::{changes, lock, outputs};
use crate::journal::{Journal, JournalError};
use crate::settings::{Fingerprint, Settings};

/// Version of the journal record format.
pub const JOURNAL_FORMAT: u32 = 1;

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
// One header per journal, against thousands of small `Generated` records read one at a time:
// boxing the header would save nothing that matters.
#[allow(clippy::large_enum_variant)]
pub enum JournalEntry {
    /// First record: what produced this journal.
    Header {
        /// [`JOURNAL_FORMAT`].
        format: u32,
        /// The run's fingerprint.
        fingerprint: Fingerprint,
    },
    /// A finished generation request.
    Generated {
        /// The question.
        key: ItemKey,
        /// The pass.
        pass: Pass,
        /// What came out.
        outcome: JournalOutcome,
        /// An outcome of the engine's resource limits (a prompt larger than the KV cache pool,
        /// a generation cut when its context filled it): kept for a merge, but not replayed by
        /// a resumed run, which tries the request again. Absent (false) in the JSON otherwise.
        #[serde(default, skip_serializing_if = "is_false")]
        exceeds_capacity: bool,
        /// Hex SHA-256 of the image an answer was generated from (absent for judge passes and
        /// in journals of earlier versions): a resume or merge whose row now holds another
        /// image (one given by path, which the input's hashes do not cover) answers again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image_sha256: Option<String>,
    },
}

/// Fold one journal record into `store`, in journal order: a request's last record is its
/// outcome; an answer recorded after a judge pass of its question drops that judge pass (it
/// graded the earlier answer); with `retry_capacity`, an outcome of the engine's resource
/// limits is dropped so that a resumed run tries the request again (a merge keeps a shard's).
/// The header is skipped.
///
/// Errors: [`StoreError`].
pub(crate) fn fold_record(
    store: &Store,
    record: JournalEntry,
    retry_capacity: bool,
) -> Result<(), StoreError> {
    let JournalEntry::Generated {
        key,
        pass,
        outcome,
        exceeds_capacity,
        image_sha256,
    } = record
    else {
        return Ok(());
    };
    if pass == Pass::Answer {
        store.remove_result(key, Pass::Judge)?;
        store.set_answer_image(key, image_sha256.as_deref())?;
    }
    if retry_capacity && exceeds_capacity {
        return store.remove_result(key, pass);
    }
    store.set_result(key, pass, &outcome)
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The journal opened and checked against this run's fingerprint; made before the model is
/// loaded so that a refused resume fails fast.
#[derive(Debug)]
pub struct Prepared {
    /// The run's settings.
    pub settings: Settings,
    /// The run's fingerprint.
    pub fingerprint: Fingerprint,
    /// `OUT/.verisample.lock`, locked for as long as this run lives, removed with it.
    lock: lock::OutLock,
    pub(super) journal: Journal<JournalEntry>,
    /// The journal's outcomes and answer images as replayed, then as the run adds to them
    /// ([`fold_record`]), on disk in an unlinked temporary file in OUT.
    pub(super) results: Store,
    /// Outcomes replayed from the journal (and imported from shards' by a merge).
    replayed: usize,
    /// Bytes of a torn last record dropped on open.
    pub torn_bytes: u64,
}

impl Prepared {
    /// Generation results replayed from the journal.
    pub fn replayed(&self) -> usize {
        self.replayed
    }

    /// Give up a run that failed before generating anything (the model does not load, a KV
    /// cache that does not fit, …): remove the journal when it holds no generation, the lock,
    /// and OUT itself when this process created it and nothing else is in it, so that the
    /// corrected command starts as on a fresh folder.
    pub fn abandon(self) {
        if self.replayed == 0 {
            let journal = self.settings.out.join(crate::out_files::JOURNAL_FILE);
            if let Err(e) = std::fs::remove_file(&journal) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("cannot remove {}: {e}", journal.display());
                }
            }
        }
        drop(self.journal);
        self.lock.release();
    }
}

/// With no journal to replay (missing, or its header unreadable), the earlier run in `out`
/// that this run would overwrite is checked as a journal would be: `run.json`'s fingerprint
/// must be this run's; splits without a `run.json` cannot be checked and are refused too.
///
/// Errors: [`PipelineError::FingerprintMismatch`], [`PipelineError::UncheckedEarlierRun`].
fn check_earlier_run(
    out: &std::path::Path,
    fingerprint: &Fingerprint,
) -> Result<(), PipelineError> {
    let old = crate::run_json::RunJsonView::read(out).and_then(|v| v.fingerprint::<Fingerprint>());
    match old {
        Some(old) if old.sha256 == fingerprint.sha256 => Ok(()),
        Some(old) => {
            tracing::debug!(
                "run.json fingerprint {}, this run's {}",
                old.sha256,
                fingerprint.sha256
            );
            Err(PipelineError::FingerprintMismatch {
                out: out.to_path_buf(),
                old: old.sha256.clone(),
                new: fingerprint.sha256.clone(),
                changed: changes::describe_changes(&old, fingerprint),
            })
        }
        None => {
            // A folder that cannot be listed holds no split this run could delete.
            let splits = crate::dataset::card::output_split_files(out).unwrap_or_default();
            if splits.is_empty() {
                Ok(())
            } else {
                Err(PipelineError::UncheckedEarlierRun(out.to_path_buf()))
            }
        }
    }
}

/// Whether OUT holds no work a rerun could lose: no split, and a journal (if any) without a
/// single generation — what a run that failed before its first generation (a model that does
/// not load, bad input) or that had nothing to generate leaves. Its files are replaced like
/// with `--restart`, so that the corrected command is not refused as a different run.
fn nothing_to_lose(out: &std::path::Path, journal: &std::path::Path) -> bool {
    // As in `check_earlier_run`: a folder that cannot be listed holds no split to lose.
    let no_splits = crate::dataset::card::output_split_files(out)
        .unwrap_or_default()
        .is_empty();
    let mut generations = 0usize;
    let read = crate::journal::read_each(journal, |r: JournalEntry| {
        generations += usize::from(matches!(r, JournalEntry::Generated { .. }));
        Ok::<_, JournalError>(())
    });
    let no_generation = match read {
        Ok(_) => generations == 0,
        Err(_) => !journal.exists(),
    };
    no_splits && no_generation
}

/// Open (or create) `OUT/journal.bin`, check its header against `fingerprint`, and replay
/// it: [`prepare_with`] with nothing to start.
///
/// Errors: as [`prepare_with`].
pub fn prepare(settings: &Settings, fingerprint: Fingerprint) -> Result<Prepared, PipelineError> {
    prepare_with(settings, fingerprint, || Ok::<_, PipelineError>(())).map(|(p, ())| p)
}

/// Take OUT's lock, check the journal's header against `fingerprint` and replay it, and call
/// `start` (the model load) at the one point where its failure loses nothing:
/// - resuming (a journal or splits to keep): the journal is checked first, so a changed
///   setting or model is refused before any weight is loaded; if `start` fails, a journal
///   without a generation is removed again ([`Prepared::abandon`]);
/// - with `settings.restart`, or when OUT holds nothing a rerun could lose: `start` runs
///   before the pipeline's files in OUT ([`outputs::OWNED_FILES`]) and the splits its
///   `run.json` records are discarded, so a
///   restart whose model does not load leaves the earlier output exactly as it was.
///
/// Temporary files of killed runs are removed ([`outputs::remove_debris`]); without a
/// journal to replay, an earlier run in OUT must match as well (`check_earlier_run`).
///
/// Errors: `start`'s error; [`PipelineError::FingerprintMismatch`] (settings or model
/// changed), [`PipelineError::UncheckedEarlierRun`], [`PipelineError::NoHeader`],
/// [`PipelineError::Locked`], journal I/O.
pub fn prepare_with<T, E: From<PipelineError>>(
    settings: &Settings,
    fingerprint: Fingerprint,
    start: impl FnOnce() -> Result<T, E>,
) -> Result<(Prepared, T), E> {
    let lock = lock::OutLock::take(&settings.out)?;
    super::dataset_io::check_kept_split_files(&settings.out, settings.restart)?;
    let path = settings.out.join(crate::out_files::JOURNAL_FILE);
    if settings.restart || nothing_to_lose(&settings.out, &path) {
        let started = match start() {
            Ok(started) => started,
            Err(e) => {
                lock.release();
                return Err(e);
            }
        };
        // The card first: it names the earlier splits, and a kill between removing them and
        // writing the new card would leave a card whose configs point at no files (this run
        // writes its own card at the end, or none without splits). Then the earlier run's
        // splits, with the run.json that records them (a user's own files in data/ stay).
        let card = settings.out.join(crate::out_files::CARD_FILE);
        match std::fs::remove_file(&card) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                return Err(PipelineError::from(JournalError::Io { path: card, source }).into());
            }
            _ => {}
        }
        let none = std::collections::BTreeSet::new();
        let earlier = super::dataset_io::EarlierSplits::read(&settings.out);
        super::dataset_io::remove_earlier_splits(&settings.out, &earlier, &none, true)
            .map_err(PipelineError::Sink)?;
        for name in outputs::OWNED_FILES {
            let p = settings.out.join(name);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(PipelineError::from(JournalError::Io { path: p, source }).into());
                }
            }
        }
        return Ok((open_journal(lock, settings, fingerprint)?, started));
    }
    let prepared = open_journal(lock, settings, fingerprint)?;
    match start() {
        Ok(started) => Ok((prepared, started)),
        Err(e) => {
            prepared.abandon();
            Err(e)
        }
    }
}

/// The part of [`prepare_with`] after the lock: debris, journal header, replay.
fn open_journal(
    lock: lock::OutLock,
    settings: &Settings,
    fingerprint: Fingerprint,
) -> Result<Prepared, PipelineError> {
    let path = settings.out.join(crate::out_files::JOURNAL_FILE);
    let removed = outputs::remove_debris(&settings.out).map_err(|source| JournalError::Io {
        path: settings.out.clone(),
        source,
    })?;
    if !removed.is_empty() {
        tracing::info!(
            "removed {} temporary file(s) of a killed run",
            removed.len()
        );
    }
    // Checked before the journal file exists: a refused run leaves no journal behind, which
    // would make a user's folder look like an earlier run of ours to the next command.
    let fresh = !path.exists();
    if fresh && !settings.restart {
        check_earlier_run(&settings.out, &fingerprint)?;
    }
    // The records are folded into the store as they are read, the header (the first record)
    // checked before any is kept. A request that did not fit the engine's KV cache is tried
    // again (a later record, should it fit now, replaces an earlier one).
    let results = Store::temporary(&settings.out)?;
    let mut records = 0usize;
    let (mut journal, torn_bytes) = Journal::<JournalEntry>::open_each(&path, |rec| {
        records += 1;
        match rec {
            JournalEntry::Header {
                fingerprint: old, ..
            } if records == 1 => {
                if old.sha256 != fingerprint.sha256 {
                    tracing::debug!(
                        "journal fingerprint {}, this run's {}",
                        old.sha256,
                        fingerprint.sha256
                    );
                    return Err(PipelineError::FingerprintMismatch {
                        out: settings.out.clone(),
                        old: old.sha256.clone(),
                        new: fingerprint.sha256.clone(),
                        changed: changes::describe_changes(&old, &fingerprint),
                    });
                }
                Ok(())
            }
            _ if records == 1 => Err(PipelineError::NoHeader(path.clone())),
            rec => fold_record(&results, rec, true).map_err(PipelineError::from),
        }
    })?;
    if records == 0 {
        if !fresh && !settings.restart {
            check_earlier_run(&settings.out, &fingerprint)?;
        }
        journal.append(&JournalEntry::Header {
            format: JOURNAL_FORMAT,
            fingerprint: fingerprint.clone(),
        })?;
    }
    if torn_bytes > 0 {
        tracing::info!(
            "{}: the last {} bytes are a record cut short by an interrupted write (a kill or a \
             crash): truncated; that generation is done again",
            path.display(),
            torn_bytes
        );
    }
    let replayed = results.len(Table::Results)? as usize;
    Ok(Prepared {
        settings: settings.clone(),
        fingerprint,
        lock,
        journal,
        results,
        replayed,
        torn_bytes,
    })
}

/// Append the outcomes of a shard's journal (folded into `shard` by [`fold_record`]) to a
/// freshly prepared journal, in key order: used by `verisample merge`. Outcomes already
/// there (an earlier shard's) are kept.
///
/// Errors: journal I/O, [`StoreError`].
pub(crate) fn import_results(prepared: &mut Prepared, shard: &Store) -> Result<(), PipelineError> {
    let (journal, results) = (&mut prepared.journal, &prepared.results);
    let replayed = &mut prepared.replayed;
    shard.for_each_result(|key, pass, outcome| {
        if results.has_result(key, pass)? {
            return Ok(());
        }
        let image_sha256 = match pass {
            Pass::Answer => shard.answer_image(key)?,
            Pass::Judge => None,
        };
        journal.append(&JournalEntry::Generated {
            exceeds_capacity: false,
            key,
            pass,
            outcome: outcome.clone(),
            image_sha256: image_sha256.clone(),
        })?;
        results.set_result(key, pass, &outcome)?;
        *replayed += 1;
        if image_sha256.is_some() {
            results.set_answer_image(key, image_sha256.as_deref())?;
        }
        Ok::<_, PipelineError>(())
    })
}
