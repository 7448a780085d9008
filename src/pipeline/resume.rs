//! Resume: the journal of a run (its header with the run's fingerprint, one record per
//! finished generation), opened and checked under the OUT lock before the model loads, and
//! what a rerun may replace (`--restart`, an earlier run with nothing to lose, the
//! fingerprint diff of a refused one).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::backend::{Generation, ItemKey, Pass};
use super::error::PipelineError;
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

/// What a journal's generation records leave ([`fold_generated`]).
#[derive(Debug, Default)]
pub struct Replayed {
    /// Each request's last recorded outcome.
    pub results: BTreeMap<(ItemKey, Pass), JournalOutcome>,
    /// The image each answer was generated from (hex SHA-256), where recorded.
    pub answer_images: BTreeMap<ItemKey, String>,
}

/// Fold generation `records` in journal order: a request's last record is its outcome; an
/// answer recorded after a judge pass of its question drops that judge pass (it graded the
/// earlier answer); with `retry_capacity`, an outcome of the engine's resource limits is
/// dropped so that a resumed run tries the request again (a merge keeps a shard's).
pub fn fold_generated(
    records: impl IntoIterator<Item = JournalEntry>,
    retry_capacity: bool,
) -> Replayed {
    let mut r = Replayed::default();
    for rec in records {
        let JournalEntry::Generated {
            key,
            pass,
            outcome,
            exceeds_capacity,
            image_sha256,
        } = rec
        else {
            continue;
        };
        if pass == Pass::Answer {
            r.results.remove(&(key, Pass::Judge));
            match image_sha256 {
                Some(sha) => r.answer_images.insert(key, sha),
                None => r.answer_images.remove(&key),
            };
        }
        if retry_capacity && exceeds_capacity {
            r.results.remove(&(key, pass));
            continue;
        }
        r.results.insert((key, pass), outcome);
    }
    r
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A journaled generation result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalOutcome {
    /// The engine produced a generation.
    Done(Generation),
    /// The engine refused this request (recorded in `errors.jsonl`, not retried).
    Failed(String),
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
    pub(super) results: BTreeMap<(ItemKey, Pass), JournalOutcome>,
    /// The image each replayed answer was generated from ([`Replayed::answer_images`]).
    pub(super) answer_images: BTreeMap<ItemKey, String>,
    /// Bytes of a torn last record dropped on open.
    pub torn_bytes: u64,
}

impl Prepared {
    /// Generation results replayed from the journal.
    pub fn replayed(&self) -> usize {
        self.results.len()
    }

    /// Give up a run that failed before generating anything (the model does not load, a KV
    /// cache that does not fit, …): remove the journal when it holds no generation, the lock,
    /// and OUT itself when this process created it and nothing else is in it, so that the
    /// corrected command starts as on a fresh folder.
    pub fn abandon(self) {
        if self.results.is_empty() {
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
    let no_generation = match crate::journal::read_records::<JournalEntry>(journal) {
        Ok(replay) => replay
            .records
            .iter()
            .all(|r| matches!(r, JournalEntry::Header { .. })),
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
    let (mut journal, replay) = Journal::<JournalEntry>::open(&path)?;
    let mut records = replay.records.into_iter();
    match records.next() {
        None => {
            if !fresh && !settings.restart {
                check_earlier_run(&settings.out, &fingerprint)?;
            }
            journal.append(&JournalEntry::Header {
                format: JOURNAL_FORMAT,
                fingerprint: fingerprint.clone(),
            })?
        }
        Some(JournalEntry::Header {
            fingerprint: old, ..
        }) => {
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
        }
        Some(JournalEntry::Generated { .. }) => return Err(PipelineError::NoHeader(path)),
    }
    // A request that did not fit the engine's KV cache is tried again (a later record, should
    // it fit now, replaces an earlier one).
    let Replayed {
        results,
        answer_images,
    } = fold_generated(records, true);
    if replay.torn_bytes > 0 {
        tracing::info!(
            "{}: the last {} bytes are a record cut short by an interrupted write (a kill or a \
             crash): truncated; that generation is done again",
            path.display(),
            replay.torn_bytes
        );
    }
    Ok(Prepared {
        settings: settings.clone(),
        fingerprint,
        lock,
        journal,
        results,
        answer_images,
        torn_bytes: replay.torn_bytes,
    })
}

/// Append pre-existing generation results (a shard journal's, [`fold_generated`]) to a
/// freshly prepared journal: used by `verisample merge`. Existing keys are kept.
///
/// Errors: journal I/O.
pub fn import_results(prepared: &mut Prepared, replayed: Replayed) -> Result<(), PipelineError> {
    for ((key, pass), outcome) in replayed.results {
        if prepared.results.contains_key(&(key, pass)) {
            continue;
        }
        let image_sha256 = match pass {
            Pass::Answer => replayed.answer_images.get(&key).cloned(),
            Pass::Judge => None,
        };
        prepared.journal.append(&JournalEntry::Generated {
            exceeds_capacity: false,
            key,
            pass,
            outcome: outcome.clone(),
            image_sha256: image_sha256.clone(),
        })?;
        prepared.results.insert((key, pass), outcome);
        if let Some(sha) = image_sha256 {
            prepared.answer_images.insert(key, sha);
        }
    }
    Ok(())
}
