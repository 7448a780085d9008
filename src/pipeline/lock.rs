//! The exclusive lock of an output folder, `OUT/.verisample.lock`: held (the OS's advisory
//! file lock, released with the process even after `kill -9`) for as long as a `run`, `merge`
//! or `prepare` lives, so that two processes never write one journal and one set of splits.
//!
//! The file is removed when the holder ends without being killed, so a finished output holds
//! no lock file. Removing a lock file races with a process that opened it just before: after
//! taking the lock, the holder checks that the path still names the file it locked (same
//! device and inode) and starts over otherwise.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::PipelineError;
use crate::journal::JournalError;
use crate::out_files::LOCK_FILE;

/// The held lock of an output folder; dropping it removes the lock file and releases it.
#[derive(Debug)]
pub struct OutLock {
    file: std::fs::File,
    path: PathBuf,
    /// The folders this process created for OUT: OUT itself and its missing ancestors,
    /// deepest first (empty when OUT existed).
    created: Vec<PathBuf>,
}

/// Lock attempts before giving up when the lock file keeps being replaced under us.
const ATTEMPTS: usize = 16;

impl OutLock {
    /// Create `out` if missing and take its lock.
    ///
    /// Errors: [`PipelineError::Locked`] when another process holds it; I/O creating OUT or
    /// the lock file.
    pub fn take(out: &Path) -> Result<OutLock, PipelineError> {
        let io = |path: PathBuf| move |source| JournalError::Io { path, source };
        let created: Vec<PathBuf> = out
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(out).map_err(io(out.to_path_buf()))?;
        let path = out.join(LOCK_FILE);
        for _ in 0..ATTEMPTS {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(io(path.clone()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(PipelineError::Locked(out.to_path_buf()))
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(JournalError::Io { path, source }.into())
                }
            }
            let held = file.metadata().map_err(io(path.clone()))?;
            let same = std::fs::metadata(&path)
                .is_ok_and(|now| now.dev() == held.dev() && now.ino() == held.ino());
            if same {
                return Ok(OutLock {
                    file,
                    path,
                    created,
                });
            }
            // The previous holder removed the file between our open and our lock: retry on
            // the file that the path names now.
        }
        Err(PipelineError::Locked(out.to_path_buf()))
    }
}

impl OutLock {
    /// Give the lock up, and remove OUT again when this process created it and it is empty
    /// (what a run that failed before its first generation leaves: nothing), with the parent
    /// folders it created for it (`--out a/b/c` where `a` did not exist), each only if empty.
    pub fn release(mut self) {
        let created = std::mem::take(&mut self.created);
        drop(self);
        for dir in created {
            // Fails (and is meant to) when the folder is not empty; then so would its parents.
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

impl Drop for OutLock {
    fn drop(&mut self) {
        // Removed while still locked, so no other process can hold a lock on this file.
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("cannot remove {}: {e}", self.path.display());
            }
        }
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_excludes_a_second_holder_and_its_file_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o");
        let first = OutLock::take(&out).unwrap();
        assert_eq!(first.created, std::slice::from_ref(&out));
        assert!(out.join(LOCK_FILE).exists());
        assert!(matches!(OutLock::take(&out), Err(PipelineError::Locked(_))));
        drop(first);
        assert!(!out.join(LOCK_FILE).exists());
        let again = OutLock::take(&out).unwrap();
        assert!(again.created.is_empty());
    }

    /// Catches: a failed start leaving the parents it created for `--out a/b/c` behind, or
    /// removing a folder that existed or holds anything.
    #[test]
    fn release_removes_the_empty_folders_it_created_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a/b/c");
        OutLock::take(&out).unwrap().release();
        assert!(!dir.path().join("a").exists());
        assert!(dir.path().exists());
        // A sibling written meanwhile keeps `a/b` (and so `a`); `c` goes.
        let lock = OutLock::take(&out).unwrap();
        std::fs::write(dir.path().join("a/b/note"), "x").unwrap();
        lock.release();
        assert!(!out.exists());
        assert!(dir.path().join("a/b/note").exists());
    }
}
