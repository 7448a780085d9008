//! Where `--data` points (a parquet folder, file or glob, or a dataset id of the local Hugging
//! Face hub cache) and the early checks of the input: its columns, and families that differ
//! only in case.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::model::{hf_cache_dir, looks_like_hub_id};
use super::{bundled, rebase, SettingsError, DEFAULT_DATA};
use crate::dataset::hub::{resolve_hub_dataset, HubDataset, HubError};
use crate::dataset::layout::{Layout, ReadOptions};

/// What `--data`, `--data-config` and `--data-split` (flag or TOML) ask for.
pub(super) struct DataChoice<'a> {
    /// `--data` on the command line (relative to the working folder).
    pub flag: Option<&'a Path>,
    /// `data` of the TOML file (relative to its folder).
    pub file: Option<&'a Path>,
    /// The folder of the TOML file.
    pub base: &'a Path,
    /// `--data-config`.
    pub config: Option<&'a str>,
    /// `--data-split`.
    pub split: Option<&'a str>,
}

/// Resolve `--data`: an existing path or a glob is read as given; otherwise a hub id
/// `OWNER/NAME` is looked up in the local hub cache (offline, [`resolve_hub_dataset`]) and
/// becomes the snapshot's parquet files of the chosen config and split. Returns the input
/// spec for the reader and the hub dataset, if one.
///
/// Errors: [`SettingsError::Hub`] (repo, config or split not found or not chosen);
/// [`SettingsError::Invalid`] for `--data-config`/`--data-split` without a hub id.
pub(super) fn resolve_data(
    choice: &DataChoice<'_>,
) -> Result<(PathBuf, Option<HubDataset>), SettingsError> {
    let (given, path) = match (choice.flag, choice.file) {
        (Some(d), _) => (d.to_path_buf(), d.to_path_buf()),
        (None, Some(d)) => (d.to_path_buf(), rebase(choice.base, d.to_path_buf())),
        (None, None) => (PathBuf::new(), bundled(DEFAULT_DATA)),
    };
    let text = given.to_string_lossy();
    let local = path.exists() || text.contains(['*', '?', '[']);
    if local || !looks_like_hub_id(&text) {
        for (key, value) in [("data-config", choice.config), ("data-split", choice.split)] {
            if let Some(v) = value {
                return Err(SettingsError::Invalid {
                    key,
                    value: v.to_string(),
                    why: format!(
                        "applies only to --data OWNER/NAME of the Hugging Face cache, not to the path {}",
                        path.display()
                    ),
                });
            }
        }
        return Ok((path, None));
    }
    let cache = hf_cache_dir().ok_or_else(|| {
        SettingsError::Hub(HubError::NotFound {
            repo: text.to_string(),
            looked: PathBuf::from("$HF_HUB_CACHE (no HF_HUB_CACHE, HF_HOME or HOME set)"),
        })
    })?;
    let (hub, spec) = resolve_hub_dataset(&cache, &text, choice.config, choice.split)?;
    tracing::info!(
        "--data {}: config {}, split {}, revision {} ({})",
        hub.repo,
        hub.config,
        hub.split,
        hub.revision,
        spec.display()
    );
    Ok((spec, Some(hub)))
}

/// `--images-root` must be a folder, and the first input file's columns must resolve to a
/// layout ([`Layout::resolve`]), so an ambiguous layout fails before any weight is loaded.
/// (The reader resolves every file again and reports a later file that does not fit as one
/// error for its rows.)
pub(super) fn check_read_options(data: &Path, read: &ReadOptions) -> Result<(), SettingsError> {
    if let Some(r) = &read.images_root {
        if !r.is_dir() {
            return Err(SettingsError::Invalid {
                key: "images-root",
                value: r.display().to_string(),
                why: "must be an existing folder".into(),
            });
        }
    }
    let first = crate::dataset::reader::resolve_inputs(&data.to_string_lossy())
        .ok()
        .and_then(|inputs| inputs.files.into_iter().next());
    let Some(first) = first else {
        return Ok(()); // the reader reports an input without parquet files
    };
    let columns = crate::dataset::layout::file_columns(&first);
    match columns {
        Some(columns) => Layout::resolve(&columns, &read.columns)
            .map(|_| ())
            .map_err(|source| SettingsError::Columns {
                file: first,
                source,
            }),
        None => Ok(()), // unreadable footer: the reader reports the file
    }
}

/// The input's other columns must be carriable into the splits
/// ([`crate::dataset::carry::carried_schema`] of every input file's footer), so a clash or a
/// type that differs between files fails before any weight is loaded.
///
/// Errors: [`SettingsError::Carry`] naming the file and column.
pub(super) fn check_carried_columns(data: &Path, read: &ReadOptions) -> Result<(), SettingsError> {
    let Ok(inputs) = crate::dataset::reader::resolve_inputs(&data.to_string_lossy()) else {
        return Ok(()); // the reader reports an input without parquet files
    };
    crate::dataset::carry::carried_schema(&inputs.files, &read.columns)
        .map_err(|e| SettingsError::Carry(Box::new(e)))?;
    Ok(())
}

/// The families of the input's rows: `--family` when given, else those its `family` column
/// names ([`crate::dataset::families::input_families`]); `None` when the input cannot be
/// listed (the reader reports it).
pub(super) fn input_families(data: &Path, family: Option<&str>) -> Option<BTreeSet<String>> {
    if let Some(f) = family {
        return Some(BTreeSet::from([f.to_string()]));
    }
    let inputs = crate::dataset::reader::resolve_inputs(&data.to_string_lossy()).ok()?;
    Some(crate::dataset::families::input_families(&inputs.files))
}

/// Without `--family`, the `families` the input at `data` names must not differ only in case
/// ([`crate::dataset::families`]): their split files (`Cheque_RS_think-…`,
/// `cheque_RS_think-…`) would overwrite each other on a case-insensitive file system.
///
/// Errors: [`SettingsError::Invalid`] on `--data`, naming the families.
pub(super) fn check_family_case(
    data: &Path,
    families: &BTreeSet<String>,
) -> Result<(), SettingsError> {
    let Some(group) = crate::dataset::families::case_clashes(families)
        .into_iter()
        .next()
    else {
        return Ok(());
    };
    let quoted: Vec<String> = group.iter().map(|f| format!("{f:?}")).collect();
    let files: Vec<String> = group.iter().map(|f| format!("{f}_RS_think-…")).collect();
    Err(SettingsError::Invalid {
        key: "data",
        value: data.display().to_string(),
        why: format!(
            "the families {} differ only in case: their split files ({}) would overwrite each \
             other on a case-insensitive file system (macOS, Windows); rename them in the \
             `family` column so that they differ otherwise, or pass --family to put every row \
             in one family",
            quoted.join(" and "),
            files.join(", ")
        ),
    })
}
