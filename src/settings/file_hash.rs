//! SHA-256 of the model and input files for the run fingerprint, without reading every byte
//! again on every start:
//! - a Hugging Face cache blob (`…/blobs/<64 hex>`, which a snapshot's files link to) is named
//!   by the SHA-256 of its content when it is an LFS file (safetensors weights): the name is
//!   the hash, checked against the content only with `--verify-weights`;
//! - any other file's hash is kept in a cache keyed by its canonical path and checked against
//!   its size, modification time and inode ([`FileHasher`]), as `git`'s index does; a file
//!   modified within [`RACY_SECONDS`] of hashing is not cached (its time stamp could
//!   repeat after a change).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// File name of the hash cache in the cache folder ([`default_cache_file`]).
pub const CACHE_FILE: &str = "file-sha256.json";

/// Environment variable naming the cache folder (default: `$XDG_CACHE_HOME/verisample`, else
/// `$HOME/.cache/verisample`); empty: no cache.
pub const CACHE_DIR_ENV: &str = "VERISAMPLE_CACHE_DIR";

/// A file whose modification time is this close to the start of its hashing is hashed but
/// not cached: a change within the file system's time stamp granularity could keep size and
/// time (git's "racily clean" entries).
pub const RACY_SECONDS: u64 = 2;

/// Bytes per read while hashing (1 MiB).
const READ_BYTES: usize = 1 << 20;

/// The hash cache file: [`CACHE_DIR_ENV`], else `$XDG_CACHE_HOME/verisample`, else
/// `$HOME/.cache/verisample`, holding [`CACHE_FILE`]; `None` when the variable is set empty or
/// no home is known.
pub fn default_cache_file() -> Option<PathBuf> {
    let dir = match std::env::var_os(CACHE_DIR_ENV) {
        Some(d) if d.is_empty() => return None,
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d).join("verisample"),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/verisample"),
        },
    };
    Some(dir.join(CACHE_FILE))
}

/// Hex SHA-256 of a file, streamed in 1 MiB reads.
///
/// Errors: I/O.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    sha256_file_with(path, &mut |_| {})
}

/// [`sha256_file`], calling `progress` with the bytes of each read.
///
/// Errors: I/O.
pub fn sha256_file_with(path: &Path, progress: &mut dyn FnMut(u64)) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        progress(n as u64);
    }
    Ok(hex::encode(h.finalize()))
}

/// What identifies a file's content between starts, without reading it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    size: u64,
    /// Modification time, nanoseconds since the Unix epoch (0 before it).
    mtime_ns: u64,
    /// Inode number (0 where the platform has none).
    inode: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    stamp: Stamp,
    sha256: String,
}

/// The cache file's content: canonical path → stamp and hash.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    entries: BTreeMap<String, Entry>,
}

/// Hashes files for the fingerprint ([`FileHasher::sha256`]), from Hugging Face blob names and
/// the hash cache where they answer, else by reading the file (then remembered; written back
/// by [`FileHasher::save`]).
#[derive(Debug)]
pub struct FileHasher {
    cache_file: Option<PathBuf>,
    cache: CacheFile,
    changed: bool,
    verify: bool,
    bytes_read: u64,
}

impl FileHasher {
    /// A hasher with the cache at `cache_file` (`None`: no cache; an unreadable or invalid
    /// file counts as empty). `verify` (`--verify-weights`): read every file in full, and
    /// refuse a Hugging Face blob whose content does not match its name.
    pub fn open(cache_file: Option<PathBuf>, verify: bool) -> Self {
        let cache = cache_file
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Self {
            cache_file,
            cache,
            changed: false,
            verify,
            bytes_read: 0,
        }
    }

    /// Bytes read by [`Self::sha256`] so far (0 when every hash came from a blob name or the
    /// cache).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Hex SHA-256 of the file at `path` (symlinks followed). `progress` gets the bytes read
    /// after each read of a file that is hashed in full.
    ///
    /// Errors: I/O; with `verify`, `InvalidData` for a Hugging Face blob whose content does not
    /// match its name.
    pub fn sha256(
        &mut self,
        path: &Path,
        progress: &mut dyn FnMut(u64),
    ) -> std::io::Result<String> {
        let real = std::fs::canonicalize(path)?;
        let blob = hf_blob_sha256(&real);
        if let (Some(name), false) = (&blob, self.verify) {
            return Ok(name.clone());
        }
        let meta = std::fs::metadata(&real)?;
        let stamp = stamp_of(&meta);
        let key = real.to_string_lossy().into_owned();
        if !self.verify {
            if let Some(e) = self.cache.entries.get(&key).filter(|e| e.stamp == stamp) {
                return Ok(e.sha256.clone());
            }
        }
        let started = SystemTime::now();
        let sha = self.read_sha256(&real, progress)?;
        if let Some(name) = blob.filter(|n| *n != sha) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: its content hashes to {sha}, not to its Hugging Face blob name {name}: \
                     the cached file was changed or is damaged; fetch the model again",
                    path.display()
                ),
            ));
        }
        let racy = meta
            .modified()
            .ok()
            .is_none_or(|m| m + Duration::from_secs(RACY_SECONDS) > started);
        if !racy {
            self.cache.entries.insert(
                key,
                Entry {
                    stamp,
                    sha256: sha.clone(),
                },
            );
            self.changed = true;
        }
        Ok(sha)
    }

    fn read_sha256(
        &mut self,
        path: &Path,
        progress: &mut dyn FnMut(u64),
    ) -> std::io::Result<String> {
        let bytes_read = &mut self.bytes_read;
        sha256_file_with(path, &mut |n| {
            *bytes_read += n;
            progress(n);
        })
    }

    /// Write the cache back when a hash was added (atomically: temporary file, then rename;
    /// two processes saving at once keep one of their caches, which only costs a rehash).
    /// A cache that cannot be written is a warning (the run goes on: the cache only saves
    /// time; the next start hashes again).
    pub fn save(&self) {
        let (Some(path), true) = (&self.cache_file, self.changed) else {
            return;
        };
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let bytes = serde_json::to_vec(&self.cache).map_err(std::io::Error::other)?;
            crate::atomic::write_atomic(path, &bytes)
                .map(drop)
                .map_err(std::io::Error::other)
        };
        if let Err(e) = write() {
            tracing::warn!(
                "hash cache {} not written ({e}): the next start hashes the files again; set \
                 {CACHE_DIR_ENV} to a writable folder, or empty for no cache",
                path.display()
            );
        }
    }
}

/// The SHA-256 a Hugging Face cache blob is named by: a file `…/blobs/<64 lowercase hex>`
/// (LFS files; other blobs are named by their 40-hex git object id, which is not a SHA-256).
fn hf_blob_sha256(real: &Path) -> Option<String> {
    let name = real.file_name()?.to_str()?;
    let in_blobs = real.parent()?.file_name()? == "blobs";
    let hex64 = name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (in_blobs && hex64).then(|| name.to_string())
}

fn stamp_of(meta: &std::fs::Metadata) -> Stamp {
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(meta);
    #[cfg(not(unix))]
    let inode = 0;
    Stamp {
        size: meta.len(),
        mtime_ns: meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        inode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha_of(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Set `path`'s modification time `secs` into the past (out of the racy window).
    fn age(path: &Path, secs: u64) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn a_cached_hash_is_reused_until_size_time_or_inode_change() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache/file-sha256.json");
        let file = dir.path().join("w.safetensors");
        std::fs::write(&file, b"first").unwrap();
        age(&file, 60);
        let mut h = FileHasher::open(Some(cache.clone()), false);
        assert_eq!(h.sha256(&file, &mut |_| {}).unwrap(), sha_of(b"first"));
        assert_eq!(h.bytes_read(), 5);
        h.save();
        // A second start reads nothing.
        let mut h = FileHasher::open(Some(cache.clone()), false);
        assert_eq!(h.sha256(&file, &mut |_| {}).unwrap(), sha_of(b"first"));
        assert_eq!(h.bytes_read(), 0);
        // Same size, another time stamp: read again.
        std::fs::write(&file, b"other").unwrap();
        age(&file, 30);
        let mut h = FileHasher::open(Some(cache.clone()), false);
        assert_eq!(h.sha256(&file, &mut |_| {}).unwrap(), sha_of(b"other"));
        assert_eq!(h.bytes_read(), 5);
        // --verify-weights reads even a cached file.
        h.save();
        let mut h = FileHasher::open(Some(cache), true);
        assert_eq!(h.sha256(&file, &mut |_| {}).unwrap(), sha_of(b"other"));
        assert_eq!(h.bytes_read(), 5);
    }

    #[test]
    fn a_file_changed_just_now_is_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("c.json");
        let file = dir.path().join("x.json");
        std::fs::write(&file, b"{}").unwrap();
        let mut h = FileHasher::open(Some(cache.clone()), false);
        h.sha256(&file, &mut |_| {}).unwrap();
        h.save();
        let mut h = FileHasher::open(Some(cache), false);
        h.sha256(&file, &mut |_| {}).unwrap();
        assert_eq!(h.bytes_read(), 2);
    }

    #[test]
    fn hf_blobs_are_named_by_their_hash_and_checked_on_verify() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("models--o--m/blobs");
        let snap = dir.path().join("models--o--m/snapshots/abc");
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::create_dir_all(&snap).unwrap();
        let good = sha_of(b"weights");
        std::fs::write(blobs.join(&good), b"weights").unwrap();
        std::os::unix::fs::symlink(blobs.join(&good), snap.join("model.safetensors")).unwrap();
        let mut h = FileHasher::open(None, false);
        assert_eq!(
            h.sha256(&snap.join("model.safetensors"), &mut |_| {})
                .unwrap(),
            good
        );
        assert_eq!(h.bytes_read(), 0);
        let mut h = FileHasher::open(None, true);
        assert_eq!(
            h.sha256(&snap.join("model.safetensors"), &mut |_| {})
                .unwrap(),
            good
        );
        assert_eq!(h.bytes_read(), 7);
        // A blob whose content changed: its name is trusted without --verify-weights, refused
        // with it.
        std::fs::write(blobs.join(&good), b"damaged").unwrap();
        let mut h = FileHasher::open(None, true);
        let err = h
            .sha256(&snap.join("model.safetensors"), &mut |_| {})
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("Hugging Face blob name"), "{err}");
        // A 40-hex git object name is no SHA-256: hashed.
        let git = blobs.join("0123456789abcdef0123456789abcdef01234567");
        std::fs::write(&git, b"{}").unwrap();
        let mut h = FileHasher::open(None, false);
        assert_eq!(h.sha256(&git, &mut |_| {}).unwrap(), sha_of(b"{}"));
    }
}
