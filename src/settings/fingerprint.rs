//! The identity of a run for resume checks: the canonical settings, the hashes of the model
//! files and of the input files, and their combined sha256.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{CanonicalSettings, FileHasher, SettingsError};

/// The identity of a run: canonical settings, model file hashes and their combined sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Hex sha256 over the canonical JSON of `settings` and `model_files`.
    pub sha256: String,
    /// The settings hashed.
    pub settings: CanonicalSettings,
    /// Model file name → hex sha256 (safetensors, json, jinja, txt files of the model folder).
    pub model_files: BTreeMap<String, String>,
    /// Input parquet files in reading order (see [`hash_input_files`]): path → hex sha256.
    #[serde(default)]
    pub input_files: Vec<(String, String)>,
    /// The model as the user named it (`--model`), to name it when a rerun changes it; not
    /// hashed (the model files are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `--data` made absolute (its longest existing prefix canonical, a glob's pattern kept):
    /// where a `merge` run from another folder finds the same input. Not hashed: the run's
    /// identity is `settings.data` (the folder holding the files) and the files' hashes, so
    /// another spelling of the same files resumes the same run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_spec: Option<String>,
}

/// The sha256 of every input parquet file, in the order the dataset reader reads them
/// ([`crate::dataset::reader::resolve_inputs`] of `data`), keyed by the file's path relative to
/// the deepest folder holding them all (however `data` was spelt). A changed input at the same
/// path changes the [`Fingerprint`], so stale answers are not reused.
///
/// Errors: the spec resolves to no file (as a message), or a file cannot be read.
pub fn hash_input_files(data: &Path) -> Result<Vec<(String, String)>, SettingsError> {
    hash_input_files_with(data, &mut FileHasher::open(None, false), &mut |_| {})
}

/// [`hash_input_files`] with `hasher` (its cache answers for files unchanged since an earlier
/// start); `progress` gets the bytes of each read.
///
/// Errors: as [`hash_input_files`].
pub fn hash_input_files_with(
    data: &Path,
    hasher: &mut FileHasher,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, String)>, SettingsError> {
    let spec = data.to_string_lossy();
    let inputs = crate::dataset::reader::resolve_inputs(&spec)
        .map_err(|e| SettingsError::DataUnreadable(e.to_string()))?;
    let base = common_dir(&inputs.files);
    inputs
        .files
        .iter()
        .map(|f| {
            let sha = hasher
                .sha256(f, progress)
                .map_err(|e| SettingsError::DataUnreadable(format!("{}: {e}", f.display())))?;
            let name = f.strip_prefix(&base).unwrap_or(f);
            Ok((name.display().to_string(), sha))
        })
        .collect()
}

/// The input as the run's identity ([`crate::settings::CanonicalSettings::data`]) names it:
/// the deepest folder holding every file `data` resolves to, canonical, so `--data X`,
/// `--data X/data`, `--data ./X/` or a glob matching the same files name one input and a
/// killed run resumes under any of them (the files themselves are [`hash_input_files`]'s).
/// A spec that resolves to no file is named as given (canonical when it exists).
pub fn input_identity(data: &Path) -> String {
    let files = crate::dataset::reader::resolve_inputs(&data.to_string_lossy())
        .map(|i| i.files)
        .unwrap_or_default();
    let dir = identity_folder(data, &files);
    std::fs::canonicalize(&dir)
        .unwrap_or(dir)
        .to_string_lossy()
        .into_owned()
}

/// The folder [`input_identity`] canonicalises: the deepest one holding every file of
/// `files`; `.` for files named relative to the working folder (`--data a.parquet`,
/// `--data '*.parquet'`, whose common parent is the empty path); `data` itself for no file.
fn identity_folder(data: &Path, files: &[std::path::PathBuf]) -> std::path::PathBuf {
    match common_dir(files) {
        d if !d.as_os_str().is_empty() => d,
        _ if files.is_empty() => data.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    }
}

/// `data` as [`Fingerprint::data_spec`] records it: absolute, its longest existing prefix
/// canonical and the rest (a glob's pattern) kept as written.
pub fn data_spec(data: &Path) -> String {
    super::canonical_lenient(data)
        .to_string_lossy()
        .into_owned()
}

/// The deepest folder holding every file of `files` (empty for none): input files are named
/// relative to it, so `--data dir`, `--data ./dir/`, `--data /abs/dir` and a config run from
/// another folder name the same files alike and resume the same run.
fn common_dir(files: &[std::path::PathBuf]) -> std::path::PathBuf {
    let mut parents = files.iter().filter_map(|f| f.parent());
    let Some(first) = parents.next() else {
        return std::path::PathBuf::new();
    };
    let mut common: Vec<std::path::Component<'_>> = first.components().collect();
    for p in parents {
        let same = common
            .iter()
            .zip(p.components())
            .take_while(|(a, b)| **a == *b)
            .count();
        common.truncate(same);
    }
    common.iter().collect()
}

/// Compute the [`Fingerprint`] of `settings` with the given model and input file hashes.
pub fn fingerprint(
    settings: CanonicalSettings,
    model_files: BTreeMap<String, String>,
    input_files: Vec<(String, String)>,
) -> Fingerprint {
    #[derive(Serialize)]
    struct Hashed<'a> {
        settings: &'a CanonicalSettings,
        model_files: &'a BTreeMap<String, String>,
        input_files: &'a [(String, String)],
    }
    let json = serde_json::to_vec(&Hashed {
        settings: &settings,
        model_files: &model_files,
        input_files: &input_files,
    })
    .unwrap_or_default();
    Fingerprint {
        sha256: hex::encode(Sha256::digest(&json)),
        settings,
        model_files,
        input_files,
        model: None,
        data_spec: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_named_relative_to_the_working_folder_are_identified_by_it() {
        use std::path::PathBuf;
        let files = |names: &[&str]| names.iter().map(PathBuf::from).collect::<Vec<_>>();
        let folder = |data: &str, names: &[&str]| identity_folder(Path::new(data), &files(names));
        // `a.parquet`, `./a.parquet` and `*.parquet` all name the working folder.
        assert_eq!(folder("a.parquet", &["a.parquet"]), PathBuf::from("."));
        assert_eq!(folder("./a.parquet", &["./a.parquet"]), PathBuf::from("."));
        assert_eq!(
            folder("*.parquet", &["a.parquet", "b.parquet"]),
            PathBuf::from(".")
        );
        assert_eq!(
            folder("d/*.parquet", &["d/a.parquet", "d/e/b.parquet"]),
            PathBuf::from("d")
        );
        assert_eq!(folder("missing", &[]), PathBuf::from("missing"));
        // Canonical, they are one identity with the absolute spelling.
        let cwd = std::fs::canonicalize(".").unwrap();
        assert_eq!(
            std::fs::canonicalize(folder("a.parquet", &["a.parquet"])).unwrap(),
            cwd
        );
    }

    #[test]
    fn input_files_are_named_alike_however_the_input_is_spelt() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("ds/data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(data.join("a.parquet"), b"a").unwrap();
        std::fs::write(data.join("sub/b.parquet"), b"b").unwrap();
        let root = tmp.path().join("ds");
        let want = hash_input_files(&root).unwrap();
        let names: Vec<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a.parquet", "sub/b.parquet"]);
        for spelt in [
            format!("{}/", root.display()),
            format!("{}/./ds", tmp.path().display()),
            data.display().to_string(),
        ] {
            assert_eq!(
                hash_input_files(Path::new(&spelt)).unwrap(),
                want,
                "{spelt}"
            );
        }
        let one = hash_input_files(&data.join("a.parquet")).unwrap();
        assert_eq!(one, want[..1], "one file is named by its file name");
    }
}
