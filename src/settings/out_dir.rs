//! Checks of the output folder made before anything loads: it is a folder (or can become
//! one) that this process can write, it neither lies inside the input nor holds it, and it is
//! not someone else's non-empty folder (whose `README.md` and `run.json` a run would
//! overwrite) unless `--force`.

use std::path::{Path, PathBuf};

use super::{canonical_lenient, SettingsError};

use crate::out_files::WRITTEN_IN_OUT;

/// Whether `out` holds the output of a `run` or `merge`: its journal (`journal.bin`) or a
/// `run.json` written by verisample ([`crate::run_json::is_ours`]). A lock file alone does not count:
/// `prepare` holds that lock too, and one killed leaves its file behind.
pub fn holds_run_output(out: &Path) -> bool {
    out.join(crate::out_files::JOURNAL_FILE).exists() || crate::run_json::is_ours(out)
}

/// Whether `out` holds an earlier verisample output: a run's ([`holds_run_output`]), or the
/// lock file (`.verisample.lock`) of a process that wrote in it.
pub fn is_verisample_output(out: &Path) -> bool {
    holds_run_output(out) || out.join(crate::out_files::LOCK_FILE).exists()
}

/// The canonical folder an input is read from, for the output-folder checks: the folder
/// itself, a file's parent, or the root of a glob (`dir/*.parquet`) as the reader resolves
/// it; `None` when it cannot be canonicalised.
///
/// Errors: [`SettingsError::DataNotFound`] when a path that does not exist resolves to no
/// input either.
pub fn input_root(data: &Path) -> Result<Option<PathBuf>, SettingsError> {
    if data.exists() {
        let folder = if data.is_dir() {
            data.to_path_buf()
        } else {
            match data.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            }
        };
        return Ok(std::fs::canonicalize(&folder).ok());
    }
    match crate::dataset::reader::resolve_inputs(&data.to_string_lossy()) {
        Ok(inputs) => Ok(Some(inputs.root)),
        Err(_) => Err(SettingsError::DataNotFound(data.to_path_buf())),
    }
}

fn invalid(out: &Path, why: String) -> SettingsError {
    SettingsError::Invalid {
        key: "out",
        value: out.display().to_string(),
        why,
    }
}

/// Check that this process can create files in `dir` (an existing folder): creates and
/// removes a hidden probe file, which also answers for root, ACLs and read-only mounts. The
/// name is unique per call (process id and a counter), so threads probing one folder at once
/// do not collide.
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(".verisample-probe-{}-{n}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// Check that this process can write the output folder `out`: the folder itself when it
/// exists, else the nearest existing folder above it, where it would be created (a probe
/// file, [`probe_writable`]). `run`, `merge` and `prepare` check their `--out` with it before
/// anything loads or is written.
///
/// Errors: [`SettingsError::Invalid`] (key `out`) when that nearest existing path is a file or
/// is not writable (permissions, a read-only mount), or when a link on the way leads nowhere.
pub fn check_writable(out: &Path) -> Result<(), SettingsError> {
    let out_c = canonical_lenient(out);
    // The nearest existing folder is where the first file (or folder) will be created.
    let mut existing: PathBuf = out_c.clone();
    while !existing.exists() {
        // A link to nothing: creating the folder would fail with "File exists".
        if let Ok(target) = std::fs::read_link(&existing) {
            return Err(invalid(
                out,
                format!(
                    "cannot be created: {} is a link to {}, which does not exist",
                    existing.display(),
                    target.display()
                ),
            ));
        }
        match existing.parent() {
            Some(p) => existing = p.to_path_buf(),
            None => break,
        }
    }
    if !existing.is_dir() {
        return Err(invalid(
            out,
            format!("cannot be created: {} is a file", existing.display()),
        ));
    }
    if let Err(e) = probe_writable(&existing) {
        let what = if existing == out_c {
            "is not writable".to_string()
        } else {
            format!("cannot be created: {} is not writable", existing.display())
        };
        return Err(invalid(out, format!("{what} ({e})")));
    }
    Ok(())
}

/// Validate the output folder `out` of a run reading its input from the folder `data_root`
/// (canonical; `None` when unknown). `force` accepts a non-empty folder that holds no
/// earlier verisample output.
///
/// Errors: [`SettingsError::Invalid`] (key `out`) when `out` is a file or lies under one, is
/// not writable, is inside the input folder, holds the input folder, or is a foreign
/// non-empty folder without `force`.
pub fn check_out(out: &Path, data_root: Option<&Path>, force: bool) -> Result<(), SettingsError> {
    if out.exists() && !out.is_dir() {
        return Err(invalid(out, "exists and is not a folder".into()));
    }
    let out_c = canonical_lenient(out);
    if let Some(root) = data_root {
        if out_c.starts_with(root) {
            return Err(invalid(
                out,
                format!(
                    "is inside the input dataset folder {}; a rerun would read the output as input",
                    root.display()
                ),
            ));
        }
        if root.starts_with(&out_c) {
            return Err(invalid(
                out,
                format!(
                    "holds the input dataset folder {}; the next run would read this run's splits as input. Choose an --out outside the input",
                    root.display()
                ),
            ));
        }
    }
    check_writable(out)?;
    if out.is_dir() && !force && !is_verisample_output(out) {
        let mut names: Vec<String> = std::fs::read_dir(out)
            .map_err(|e| invalid(out, format!("cannot be listed ({e})")))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        if !names.is_empty() {
            names.sort();
            let shown = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
            let more = if names.len() > 3 { ", …" } else { "" };
            return Err(invalid(
                out,
                format!(
                    "is a folder with files of its own ({shown}{more}) and no earlier verisample output; a run writes {WRITTEN_IN_OUT} there, replacing files of those names. Choose a new or empty folder, or add --force to write into it (with --restart as well when its data/ holds files named like splits, which are then replaced)"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_folders_need_force_our_outputs_and_empty_folders_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o");
        // Missing and empty folders are fine.
        check_out(&out, None, false).unwrap();
        std::fs::create_dir(&out).unwrap();
        check_out(&out, None, false).unwrap();
        // A user's own README.md and run.json: refused without --force.
        std::fs::write(out.join("README.md"), "mine").unwrap();
        std::fs::write(out.join("run.json"), r#"{"my":"notes"}"#).unwrap();
        let err = check_out(&out, None, false).unwrap_err().to_string();
        assert!(
            err.contains("(README.md, run.json)")
                && err.contains("add --force to write into it (with --restart as well"),
            "{err}"
        );
        check_out(&out, None, true).unwrap();
        // A run.json of ours marks the folder as an earlier output.
        std::fs::write(
            out.join("run.json"),
            r#"{"verisample_version":"0","fingerprint":{}}"#,
        )
        .unwrap();
        check_out(&out, None, false).unwrap();
    }

    #[test]
    fn input_inside_output_and_output_under_a_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let data = root.join("x/data");
        std::fs::create_dir_all(&data).unwrap();
        let err = check_out(&root.join("x"), Some(&data), true).unwrap_err();
        assert!(
            err.to_string().contains("holds the input dataset folder"),
            "{err}"
        );
        let err = check_out(&data.join("o"), Some(&data), true).unwrap_err();
        assert!(err.to_string().contains("inside the input"), "{err}");
        std::fs::write(root.join("f"), "").unwrap();
        let err = check_out(&root.join("f/o"), None, false).unwrap_err();
        assert!(err.to_string().contains("is a file"), "{err}");
    }

    /// A dangling link as OUT (or on its way) is named, not met later as the lock file's
    /// "File exists" (exit 1; newcomer finding).
    #[test]
    fn a_link_to_nothing_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("dangling");
        std::os::unix::fs::symlink("/nonexistent/x", &link).unwrap();
        for out in [link.clone(), link.join("sub")] {
            let err = check_out(&out, None, false).unwrap_err().to_string();
            assert!(
                err.ends_with(&format!(
                    "cannot be created: {} is a link to /nonexistent/x, which does not exist",
                    link.display()
                )),
                "{err}"
            );
        }
    }
}
