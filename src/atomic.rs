//! Atomic file writes: a reader sees either the old file or the complete new one, never a
//! half-written file under the final name.
//!
//! Protocol (the usual POSIX recipe, as used by e.g. `tempfile::NamedTempFile::persist` plus
//! the directory fsync that it leaves to the caller):
//! 1. write to a hidden temporary file in the *same directory* (`.<name>.tmp-<pid>-<n>`), so the
//!    final `rename` never crosses a file system;
//! 2. `fsync` the file;
//! 3. `rename` it over the final name (atomic on POSIX);
//! 4. `fsync` the directory so the rename itself survives a crash.
//!
//! A temporary file that is dropped without [`AtomicFile::commit`] is removed. A crash can
//! leave a `.…tmp-…` file behind, which never matches a final name or a `*.parquet` glob.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// An I/O failure while writing `path` atomically.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}")]
pub struct AtomicError {
    /// What was being done (`create`, `write`, `fsync`, `rename`, …).
    pub op: &'static str,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

impl AtomicError {
    pub(crate) fn new(op: &'static str, path: &Path, source: io::Error) -> Self {
        Self {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether process `pid` is alive (Linux: `/proc/<pid>` exists; this process always). Elsewhere
/// every other process counts as dead: a caller that removes the temporary files of dead
/// processes must either hold a lock that keeps other writers out (the OUT lock of `run`) or
/// act only where this is known ([`PROCESS_LIVENESS_KNOWN`]).
pub fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    PROCESS_LIVENESS_KNOWN && Path::new("/proc").join(pid.to_string()).exists()
}

/// Whether [`process_alive`] knows other processes (Linux).
pub const PROCESS_LIVENESS_KNOWN: bool = cfg!(target_os = "linux");

/// The id of the process that created the temporary file named `name`: a hidden name with
/// `.tmp-<pid>` followed by nothing, `-<n>` ([`AtomicFile`]) or an extension (`.png`, for
/// writers that need one); `None` for any other name. A crash can leave such a file behind.
pub fn temp_file_pid(name: &str) -> Option<u32> {
    let (head, tail) = name.rsplit_once(".tmp-")?;
    if !name.starts_with('.') || head.len() < 2 {
        return None;
    }
    let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &tail[digits..];
    if !(rest.is_empty() || rest.starts_with(['-', '.'])) {
        return None;
    }
    tail[..digits].parse().ok()
}

/// A file being written under a temporary name next to its final `path`.
///
/// Implements [`Write`] (buffered). Call [`AtomicFile::commit`] to publish it; dropping it
/// without committing deletes the temporary file.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Create the temporary file for `dest`. The parent directory must exist.
    ///
    /// Errors: `dest` has no file name, or the temporary file cannot be created.
    pub fn create(dest: impl AsRef<Path>) -> Result<Self, AtomicError> {
        let dest = dest.as_ref().to_path_buf();
        let name = dest
            .file_name()
            .ok_or_else(|| {
                AtomicError::new(
                    "name",
                    &dest,
                    io::Error::other("destination has no file name"),
                )
            })?
            .to_string_lossy()
            .into_owned();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dest.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| AtomicError::new("create", &tmp, e))?;
        Ok(Self {
            tmp,
            dest,
            file: Some(BufWriter::new(file)),
        })
    }

    /// The final path this file will have after [`AtomicFile::commit`].
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Flush, fsync, rename over the destination and fsync the directory.
    ///
    /// Errors: any of those steps failing; the temporary file is then removed.
    pub fn commit(mut self) -> Result<PathBuf, AtomicError> {
        let Some(buf) = self.file.take() else {
            return Err(AtomicError::new(
                "commit",
                &self.dest,
                io::Error::other("already closed"),
            ));
        };
        let file = buf
            .into_inner()
            .map_err(|e| AtomicError::new("write", &self.tmp, e.into_error()))?;
        file.sync_all()
            .map_err(|e| AtomicError::new("fsync", &self.tmp, e))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| AtomicError::new("rename", &self.dest, e))?;
        sync_parent_dir(&self.dest)?;
        Ok(self.dest.clone())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.file.as_mut() {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("atomic file already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Best effort: the file was never published, so nothing depends on it.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Write `bytes` to `dest` atomically (see the module docs).
///
/// Errors: any I/O step failing; `dest` is then unchanged.
pub fn write_atomic(dest: impl AsRef<Path>, bytes: &[u8]) -> Result<PathBuf, AtomicError> {
    let mut f = AtomicFile::create(dest)?;
    f.write_all(bytes)
        .map_err(|e| AtomicError::new("write", &f.tmp, e))?;
    f.commit()
}

/// Rename `from` to `to` (same directory) and fsync that directory.
///
/// Errors: the rename or the directory fsync failing.
pub fn rename_durable(from: &Path, to: &Path) -> Result<(), AtomicError> {
    std::fs::rename(from, to).map_err(|e| AtomicError::new("rename", to, e))?;
    sync_parent_dir(to)
}

/// fsync the directory holding `path`, so a rename or create inside it is durable.
///
/// On non-Unix systems directories cannot be opened for fsync; this is then a no-op.
///
/// Errors: the directory cannot be opened or synced.
pub fn sync_parent_dir(path: &Path) -> Result<(), AtomicError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if cfg!(unix) {
        let d = File::open(&dir).map_err(|e| AtomicError::new("open dir", &dir, e))?;
        d.sync_all()
            .map_err(|e| AtomicError::new("fsync dir", &dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_file_pids() {
        for (name, want) in [
            (".run.json.tmp-4242-7", Some(4242)),
            (".chart.tmp-17.png", Some(17)),
            ("..Split-00000.staged-9.tmp-9-0", Some(9)),
            ("run.json.tmp-4242-7", None),
            (".tmp-12-0", None),
            (".a.tmp-x-0", None),
            (".a.tmp-12x", None),
            ("run.json", None),
        ] {
            assert_eq!(temp_file_pid(name), want, "{name}");
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn write_atomic_replaces_content_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"old").unwrap();
        write_atomic(&p, b"new content").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new content");
        assert_eq!(names(dir.path()), vec!["a.json".to_string()]);
    }

    #[test]
    fn dropped_file_is_never_published() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.parquet");
        write_atomic(&p, b"complete").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(b"half").unwrap();
            // dropped here, as if the writer failed half way
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"complete");
        assert_eq!(names(dir.path()), vec!["b.parquet".to_string()]);
    }

    #[test]
    fn temp_name_is_hidden_and_in_same_dir() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.parquet");
        let f = AtomicFile::create(&p).unwrap();
        let listed = names(dir.path());
        assert_eq!(listed.len(), 1);
        assert!(listed[0].starts_with(".c.parquet.tmp-"), "{listed:?}");
        assert!(!listed[0].ends_with(".parquet"));
        assert_eq!(f.dest(), p.as_path());
    }

    #[test]
    fn missing_parent_dir_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope").join("d.txt");
        let err = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(err.op, "create");
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
