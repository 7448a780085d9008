//! The crash-safe journal of completed work: an append-only file of checksummed records.
//!
//! Record framing (little-endian):
//!
//! ```text
//! [u32 payload length][u32 crc32 (IEEE, crc32fast) of payload][payload: one JSON value]
//! ```
//!
//! Each [`Journal::append`] writes one record with a single `write_all` and then
//! `fsync`s (`File::sync_data`) before returning, so a record that `append` returned for
//! survives a kill -9 or power loss. On [`Journal::open`] the file is replayed from the
//! start; the first record that is incomplete (short header, short payload) or whose
//! checksum does not match ends the replay: it and anything after it are a torn tail from an
//! interrupted write, are reported in [`Replay::torn_bytes`], and the file is truncated to
//! the last good record before new appends. A record with a valid checksum that does not
//! decode as `T` is an error (a journal written by another version), never skipped.
//!
//! The pipeline keeps the journal after a successful run (`OUT/journal.bin`): it makes a
//! rerun of a finished job cheap and is what `verisample merge` joins.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Bytes of framing before each payload.
pub const RECORD_HEADER_BYTES: usize = 8;
/// Largest payload accepted on replay; a larger length field is treated as a torn record.
pub const MAX_RECORD_BYTES: usize = 256 << 20;

/// Journal failures.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading, writing, syncing or truncating the file failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A record passed its checksum but is not a valid record of this version.
    #[error("journal {path}: record {index} at byte {offset} does not decode: {message}")]
    Decode {
        /// The journal file.
        path: PathBuf,
        /// 0-based record number.
        index: usize,
        /// Byte offset of the record.
        offset: u64,
        /// The serde error.
        message: String,
    },
    /// A record could not be serialised.
    #[error("journal {path}: cannot encode record: {message}")]
    Encode {
        /// The journal file.
        path: PathBuf,
        /// The serde error.
        message: String,
    },
}

/// What [`Journal::open`] found in an existing file.
#[derive(Debug)]
pub struct Replay<T> {
    /// The intact records in file order.
    pub records: Vec<T>,
    /// Bytes dropped from the tail (0 when the last record was complete).
    pub torn_bytes: u64,
}

/// An open journal, positioned for appending records of type `T`.
#[derive(Debug)]
pub struct Journal<T> {
    file: File,
    path: PathBuf,
    records: usize,
    _t: PhantomData<fn(&T)>,
}

/// Frame one payload: length, crc32, bytes.
pub fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    buf.extend_from_slice(payload);
    buf
}

/// Read the next frame from `reader`, of which `available` bytes remain, into `payload`:
/// `false` (nothing consumed that matters) when what remains is not one whole, intact record —
/// a short header, a length over [`MAX_RECORD_BYTES`] or past the end, a checksum mismatch.
/// The one framing check of replay, [`decode_frames`] and [`damage`].
///
/// Errors: reading.
fn read_frame(
    reader: &mut impl Read,
    available: u64,
    payload: &mut Vec<u8>,
) -> std::io::Result<bool> {
    if available < RECORD_HEADER_BYTES as u64 {
        return Ok(false);
    }
    let mut header = [0u8; RECORD_HEADER_BYTES];
    reader.read_exact(&mut header)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_RECORD_BYTES || available - (RECORD_HEADER_BYTES as u64) < len as u64 {
        return Ok(false);
    }
    payload.resize(len, 0);
    reader.read_exact(payload)?;
    Ok(crc32fast::hash(payload) == crc)
}

/// Split `bytes` into intact payloads; returns the payloads with their offsets and the
/// length of the intact prefix. Stops at the first short or checksum-failing record.
pub fn decode_frames(bytes: &[u8]) -> (Vec<(u64, &[u8])>, usize) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut payload = Vec::new();
    let mut reader = bytes;
    // Reading a slice cannot fail.
    while read_frame(&mut reader, (bytes.len() - pos) as u64, &mut payload).unwrap_or(false) {
        let start = pos + RECORD_HEADER_BYTES;
        out.push((pos as u64, &bytes[start..start + payload.len()]));
        pos = start + payload.len();
    }
    (out, pos)
}

/// Damage in the middle of a journal, as opposed to a torn tail (see [`damage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Why the record at the end of the intact prefix was refused.
    pub why: String,
    /// Bytes dropped (from the end of the intact prefix to the end of the file).
    pub dropped_bytes: u64,
    /// Intact-looking records found after the damaged one (dropped with it).
    pub dropped_records: usize,
}

/// Classify what follows the intact prefix `good` of `bytes`: `None` when nothing does or
/// it is a torn tail (a short header or a last record cut short, what an interrupted append
/// leaves); `Some` for corruption (a complete record with a checksum mismatch, or a length
/// field over [`MAX_RECORD_BYTES`]).
pub fn damage(bytes: &[u8], good: usize) -> Option<Damage> {
    let rest = bytes.get(good..)?;
    if rest.len() < RECORD_HEADER_BYTES {
        return None;
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let (why, next) = if len > MAX_RECORD_BYTES {
        (
            format!("length field {len} exceeds the {MAX_RECORD_BYTES}-byte limit"),
            None,
        )
    } else if rest.len() - RECORD_HEADER_BYTES < len {
        return None;
    } else {
        (
            "checksum mismatch in a complete record".to_string(),
            Some(RECORD_HEADER_BYTES + len),
        )
    };
    let dropped_records = next.map_or(0, |n| decode_frames(&rest[n..]).0.len());
    Some(Damage {
        why,
        dropped_bytes: rest.len() as u64,
        dropped_records,
    })
}

/// Walk the intact frames of `file` from its start, one at a time (memory bounded by one
/// record, whatever the journal's size), decoding each payload as a `T` for `visit`. Returns
/// the length of the intact prefix and the file's length.
///
/// Errors: [`JournalError::Io`], [`JournalError::Decode`], or `visit`'s error.
fn scan_records<T: DeserializeOwned, E: From<JournalError>>(
    path: &Path,
    file: &mut File,
    mut visit: impl FnMut(T) -> Result<(), E>,
) -> Result<(u64, u64), E> {
    let io = |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let total = file.seek(SeekFrom::End(0)).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, &mut *file);
    let (mut good, mut index) = (0u64, 0usize);
    let mut payload = Vec::new();
    while read_frame(&mut reader, total - good, &mut payload).map_err(io)? {
        let rec = serde_json::from_slice(&payload).map_err(|e| JournalError::Decode {
            path: path.to_path_buf(),
            index,
            offset: good,
            message: e.to_string(),
        })?;
        visit(rec)?;
        good += (RECORD_HEADER_BYTES + payload.len()) as u64;
        index += 1;
    }
    Ok((good, total))
}

/// Call `visit` on each intact record of the journal at `path` in file order, without
/// modifying the file and without holding more than one record; returns the bytes of a torn
/// tail (left in place). Used to read shard journals.
///
/// Errors: [`JournalError::Io`], [`JournalError::Decode`], or `visit`'s error.
pub fn read_each<T: DeserializeOwned, E: From<JournalError>>(
    path: &Path,
    visit: impl FnMut(T) -> Result<(), E>,
) -> Result<u64, E> {
    let mut file = File::open(path).map_err(|source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let (good, total) = scan_records(path, &mut file, visit)?;
    Ok(total - good)
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    // Make the file's directory entry durable (POSIX: fsync the directory).
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => File::open(dir)?.sync_all(),
        None => File::open(".")?.sync_all(),
    }
}

impl<T: Serialize + DeserializeOwned> Journal<T> {
    /// Open `path` for appending, creating it (and its folder) when missing, and replay the
    /// records already in it. A torn tail is truncated away (and the truncation synced).
    ///
    /// Errors: as [`Journal::open_each`].
    pub fn open(path: &Path) -> Result<(Journal<T>, Replay<T>), JournalError> {
        let mut records = Vec::new();
        let (journal, torn_bytes) = Self::open_each(path, |r| {
            records.push(r);
            Ok::<_, JournalError>(())
        })?;
        Ok((
            journal,
            Replay {
                records,
                torn_bytes,
            },
        ))
    }

    /// Open `path` for appending, creating it (and its folder) when missing, and call `visit`
    /// on each record already in it, in file order, one at a time (memory does not grow with
    /// the journal). A torn tail is truncated away (and the truncation synced); returns the
    /// journal and the bytes dropped.
    ///
    /// Errors: [`JournalError::Io`], [`JournalError::Decode`] for an intact record that is
    /// not a `T`, or `visit`'s error (the file is then left as it was).
    pub fn open_each<E: From<JournalError>>(
        path: &Path,
        mut visit: impl FnMut(T) -> Result<(), E>,
    ) -> Result<(Journal<T>, u64), E> {
        let io = |source| JournalError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        if !existed {
            sync_dir(path).map_err(io)?;
        }
        let mut records = 0usize;
        let (good, total) = scan_records(path, &mut file, |r| {
            records += 1;
            visit(r)
        })?;
        let torn_bytes = total - good;
        if torn_bytes > 0 {
            // Only the tail after the intact prefix is read (a torn record, or the rest of
            // a journal damaged in the middle).
            let mut tail = Vec::new();
            file.seek(SeekFrom::Start(good)).map_err(io)?;
            file.read_to_end(&mut tail).map_err(io)?;
            if let Some(d) = damage(&tail, 0) {
                tracing::warn!(
                    "{}: journal corrupted at byte {good} ({}): dropping {} bytes, the damaged \
                     record and {} intact-looking record(s) after it; their results will be \
                     regenerated",
                    path.display(),
                    d.why,
                    d.dropped_bytes,
                    d.dropped_records
                );
            }
            file.set_len(good).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        file.seek(SeekFrom::Start(good)).map_err(io)?;
        Ok((
            Journal {
                file,
                path: path.to_path_buf(),
                records,
                _t: PhantomData,
            },
            torn_bytes,
        ))
    }

    /// Remove any journal at `path` and open a fresh, empty one.
    ///
    /// Errors: [`JournalError::Io`].
    pub fn create_new(path: &Path) -> Result<Journal<T>, JournalError> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(JournalError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        Ok(Self::open(path)?.0)
    }

    /// The record's frame (length, crc32, JSON payload). Errors: [`JournalError::Encode`].
    fn frame(&self, record: &T) -> Result<Vec<u8>, JournalError> {
        let payload = serde_json::to_vec(record).map_err(|e| JournalError::Encode {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        Ok(encode_frame(&payload))
    }

    /// Append one record and make it durable (`fsync`) before returning.
    ///
    /// Errors: [`JournalError::Encode`], [`JournalError::Io`].
    pub fn append(&mut self, record: &T) -> Result<(), JournalError> {
        let frame = self.frame(record)?;
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&frame).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.records += 1;
        Ok(())
    }

    /// Write only the first `keep` bytes of the next record's frame and stop: used by the
    /// documented test hook `VERISAMPLE_TEST_KILL_AT=<stage>:<n>:torn` to leave a torn
    /// record behind before the process kills itself.
    ///
    /// Errors: [`JournalError::Encode`], [`JournalError::Io`].
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn append_torn(&mut self, record: &T, keep: usize) -> Result<(), JournalError> {
        let frame = self.frame(record)?;
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        self.file
            .write_all(&frame[..keep.min(frame.len().saturating_sub(1))])
            .map_err(io)?;
        self.file.sync_data().map_err(io)
    }

    /// Records in the file (replayed + appended).
    pub fn len(&self) -> usize {
        self.records
    }

    /// `true` when the journal holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Rec {
        id: u32,
        text: String,
    }

    fn rec(id: u32) -> Rec {
        Rec {
            id,
            text: format!("item {id} \u{e9}"),
        }
    }

    #[test]
    fn frames_roundtrip_and_stop_at_damage() {
        let mut bytes = Vec::new();
        for p in [&b"{}"[..], b"[1,2]", b"\"x\""] {
            bytes.extend(encode_frame(p));
        }
        let (frames, good) = decode_frames(&bytes);
        assert_eq!(frames.len(), 3);
        assert_eq!(good, bytes.len());
        assert_eq!(frames[1], (10, &b"[1,2]"[..]));
        // Flip one payload byte of the second record: replay keeps only the first.
        let mut bad = bytes.clone();
        bad[10 + RECORD_HEADER_BYTES] ^= 0x20;
        let (frames, good) = decode_frames(&bad);
        assert_eq!(frames.len(), 1);
        assert_eq!(good, 10);
        // Every truncation point inside the last record keeps exactly the first two.
        let second_end = 10 + RECORD_HEADER_BYTES + 5;
        for cut in second_end..bytes.len() {
            let (frames, good) = decode_frames(&bytes[..cut]);
            assert_eq!((frames.len(), good), (2, second_end), "cut {cut}");
        }
    }

    #[test]
    fn torn_tail_is_ignored_truncated_and_appends_continue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.bin");
        {
            let (mut j, replay) = Journal::<Rec>::open(&path).unwrap();
            assert!(replay.records.is_empty());
            for i in 0..3 {
                j.append(&rec(i)).unwrap();
            }
            j.append_torn(&rec(3), 11).unwrap();
        }
        let intact = std::fs::metadata(&path).unwrap().len() - 11;
        let (mut j, replay) = Journal::<Rec>::open(&path).unwrap();
        assert_eq!(replay.records, vec![rec(0), rec(1), rec(2)]);
        assert_eq!(replay.torn_bytes, 11);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), intact);
        j.append(&rec(4)).unwrap();
        drop(j);
        let (_, replay) = Journal::<Rec>::open(&path).unwrap();
        assert_eq!(replay.records, vec![rec(0), rec(1), rec(2), rec(4)]);
        assert_eq!(replay.torn_bytes, 0);
    }

    #[test]
    fn damage_tells_corruption_from_a_torn_tail() {
        let frames: Vec<Vec<u8>> = [b"aa".as_slice(), b"bbb", b"cccc"]
            .iter()
            .map(|p| encode_frame(p))
            .collect();
        let all = frames.concat();
        let first = frames[0].len();
        // Intact file, and a torn tail (last record cut short, header cut short): no damage.
        assert_eq!(damage(&all, all.len()), None);
        let cut = &all[..all.len() - 2];
        assert_eq!(damage(cut, decode_frames(cut).1), None);
        let cut = &all[..first + 3];
        assert_eq!(damage(cut, decode_frames(cut).1), None);
        // A flipped payload byte in the second record: corruption, one later record dropped.
        let mut bad = all.clone();
        bad[first + RECORD_HEADER_BYTES] ^= 0xff;
        let (_, good) = decode_frames(&bad);
        assert_eq!(good, first);
        let d = damage(&bad, good).expect("corruption");
        assert_eq!(d.dropped_bytes, (all.len() - first) as u64);
        assert_eq!(d.dropped_records, 1);
        assert!(d.why.contains("checksum"), "{}", d.why);
        // An absurd length field: corruption.
        let mut bad = all.clone();
        bad[first..first + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let d = damage(&bad, first).expect("corruption");
        assert!(d.why.contains("limit"), "{}", d.why);
        assert_eq!(d.dropped_records, 0);
    }

    #[test]
    fn intact_record_of_wrong_type_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.bin");
        std::fs::write(&path, encode_frame(b"{\"other\":1}")).unwrap();
        let err = Journal::<Rec>::open(&path).unwrap_err();
        assert!(
            matches!(err, JournalError::Decode { index: 0, .. }),
            "{err}"
        );
    }
}
