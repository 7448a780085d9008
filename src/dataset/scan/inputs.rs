//! An input spec (`--data`, `prepare --parquet`, `inspect`) resolved to its parquet files:
//! a file, a folder, or a glob, each walked under the link rules of [`super`].
//!
//! A spec that exists (a file or a folder) is taken literally, whatever characters its name
//! holds. A glob's folder part that exists as written is taken literally too: in
//! `'/data/run[1]/*.parquet'`, the folder `run[1]` (when there is one) is that folder, not
//! the character class `[1]`; only the components from the first one that does not exist
//! as a folder on are patterns.

use std::path::{Component, Path, PathBuf};

use super::{is_parquet, readable_from, scan, Refused, ScanRules, MAX_DEPTH};
use crate::dataset::DatasetError;

/// The files of a dataset and the folder that path-only images must stay inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFiles {
    /// Parquet files in reading order.
    pub files: Vec<PathBuf>,
    /// The dataset's own folder (canonical).
    pub root: PathBuf,
    /// Links in the folder that were not followed (outside `root`, or not resolvable); the
    /// reader reports each as a file error.
    pub refused: Vec<Refused>,
}

/// Whether `s` contains glob metacharacters.
fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn canonical(p: &Path) -> Result<PathBuf, DatasetError> {
    let listed = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    listed
        .canonicalize()
        .map_err(|e| DatasetError::io(listed, e))
}

/// A glob split into its fixed folder and its pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob {
    /// The folder the walk starts from: the components before the first one with a
    /// wildcard, and after those any that exist as folders as written (`run[1]`).
    prefix: PathBuf,
    /// The whole pattern, `prefix` escaped ([`glob::Pattern::escape`]) so that its
    /// characters match themselves, then the remaining components as given.
    pattern: String,
    /// Components after `prefix`.
    below: usize,
}

impl Glob {
    /// Split `spec` (which has a wildcard) into its fixed folder and its pattern.
    fn of(spec: &str) -> Self {
        let mut prefix = PathBuf::new();
        let mut rest: Vec<String> = Vec::new();
        for comp in Path::new(spec).components() {
            let text = comp.as_os_str().to_string_lossy();
            let literal = rest.is_empty()
                && (!is_glob(&text)
                    || matches!(comp, Component::Normal(_)) && {
                        // A folder whose name holds glob characters, existing as written.
                        prefix.join(comp).is_dir()
                    });
            if literal {
                prefix.push(comp);
            } else {
                rest.push(text.into_owned());
            }
        }
        let mut pattern = glob::Pattern::escape(&prefix.to_string_lossy());
        for comp in &rest {
            if !(pattern.is_empty() || pattern.ends_with(std::path::MAIN_SEPARATOR)) {
                pattern.push(std::path::MAIN_SEPARATOR);
            }
            pattern.push_str(comp);
        }
        Self {
            prefix,
            pattern,
            below: rest.len(),
        }
    }
}

/// Resolve an input spec (file, folder or glob) to its parquet files, under the link rules of
/// [`super`]. The root is the folder given, the folder of the file given, or the glob's
/// fixed prefix (the components before the first one with a wildcard, and any after them
/// that exist as folders as written; module docs).
///
/// Errors: [`DatasetError::Invalid`] when the path does not exist, a file given is a link out
/// of its folder, the glob is malformed, or nothing matches; [`DatasetError::Io`] when a
/// folder cannot be listed.
pub fn resolve_inputs(spec: &str) -> Result<InputFiles, DatasetError> {
    let path = Path::new(spec);
    if path.is_file() {
        let root = canonical(path.parent().unwrap_or(Path::new("")))?;
        let real = canonical(path)?;
        if !readable_from(&root, &real) {
            return Err(DatasetError::Invalid(format!(
                "{spec}: a link to a file outside its folder {}: not read (links are followed \
                 only inside the dataset folder)",
                root.display()
            )));
        }
        return Ok(InputFiles {
            files: vec![path.to_path_buf()],
            root,
            refused: Vec::new(),
        });
    }
    // A folder: every `*.parquet` below it. A glob: the files under its fixed prefix that
    // match it (`*` stops at `/`), no deeper than its last component unless it has `**`.
    let (start, max_depth, glob) = if path.is_dir() {
        (path.to_path_buf(), MAX_DEPTH, None)
    } else if is_glob(spec) {
        let g = Glob::of(spec);
        let pattern = glob::Pattern::new(&g.pattern)
            .map_err(|e| DatasetError::Invalid(format!("{spec}: bad glob: {e}")))?;
        let depth = if g.pattern.contains("**") {
            MAX_DEPTH
        } else {
            g.below.saturating_sub(1)
        };
        (g.prefix.clone(), depth, Some((pattern, g.pattern)))
    } else {
        return Err(DatasetError::Invalid(format!(
            "{spec}: no such file or folder"
        )));
    };
    let options = glob::MatchOptions {
        require_literal_separator: true,
        ..glob::MatchOptions::new()
    };
    let keep = |p: &Path| match &glob {
        Some((g, _)) => g.matches_path_with(p, options),
        None => is_parquet(p),
    };
    let descend = |p: &Path| {
        glob.as_ref()
            .is_none_or(|(_, text)| may_lead_to_match(text, p))
    };
    let root = canonical(&start)?;
    let found = scan(
        &start,
        &root,
        &ScanRules {
            skip_hidden: glob.is_none(),
            max_depth,
            keep: &keep,
            descend: &descend,
        },
    )?;
    if found.files.is_empty() {
        let what = if path.is_dir() {
            "no .parquet files in this folder"
        } else {
            "the glob matches no file"
        };
        let refused = match found.refused.len() {
            0 => String::new(),
            n => format!(" ({n} path(s) not read: {})", found.refused[0].message),
        };
        return Err(DatasetError::Invalid(format!("{spec}: {what}{refused}")));
    }
    Ok(InputFiles {
        files: found.files,
        root,
        refused: found.refused,
    })
}

/// Whether files below the folder `dir` may match the glob `spec`: each of `dir`'s path
/// components matches the glob's component at the same place (`*` stops at `/`), or the glob
/// has `**` (which can span any folders) at or before it.
fn may_lead_to_match(spec: &str, dir: &Path) -> bool {
    let globbed: Vec<String> = Path::new(spec)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for (i, comp) in dir.components().enumerate() {
        let Some(g) = globbed.get(i) else {
            return false;
        };
        if g.contains("**") {
            return true;
        }
        let name = comp.as_os_str().to_string_lossy();
        match glob::Pattern::new(g) {
            Ok(p) if p.matches(&name) => {}
            Ok(_) => return false,
            Err(_) => return true,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::symlink;

    #[test]
    fn resolve_inputs_file_folder_glob() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        for n in ["b.parquet", "a.parquet", ".hidden.parquet", "note.txt"] {
            std::fs::write(data.join(n), b"").unwrap();
        }
        let by_dir = resolve_inputs(dir.path().to_str().unwrap()).unwrap();
        assert_eq!(
            by_dir.files,
            vec![data.join("a.parquet"), data.join("b.parquet")]
        );
        assert_eq!(by_dir.root, dir.path().canonicalize().unwrap());
        let by_glob = resolve_inputs(&format!("{}/data/b*.parquet", dir.path().display())).unwrap();
        assert_eq!(by_glob.files, vec![data.join("b.parquet")]);
        assert_eq!(by_glob.root, data.canonicalize().unwrap());
        let by_file = resolve_inputs(data.join("a.parquet").to_str().unwrap()).unwrap();
        assert_eq!(by_file.root, data.canonicalize().unwrap());
        assert!(resolve_inputs(&format!("{}/nothing*", dir.path().display())).is_err());
        assert!(resolve_inputs(&format!("{}/missing.parquet", dir.path().display())).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn a_glob_reports_only_outside_links_it_could_match() {
        let dir = tempfile::tempdir().unwrap();
        let nest = dir.path().join("nest");
        std::fs::create_dir_all(nest.join("x/b/c")).unwrap();
        std::fs::create_dir_all(nest.join("d")).unwrap();
        std::fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
        std::fs::write(nest.join("x/b/c/f.parquet"), b"").unwrap();
        symlink(dir.path().join("elsewhere"), nest.join("d/outdir")).unwrap();
        let glob = |tail: &str| resolve_inputs(&format!("{}/{tail}", nest.display())).unwrap();
        // `d/outdir` cannot hold `*/b/c/*.parquet`: not followed, not reported.
        let narrow = glob("*/b/c/*.parquet");
        assert_eq!(narrow.files, vec![nest.join("x/b/c/f.parquet")]);
        assert!(narrow.refused.is_empty(), "{:?}", narrow.refused);
        // `**` may reach into it: reported.
        let deep = glob("**/*.parquet");
        let refused: Vec<&Path> = deep.refused.iter().map(|r| r.link.as_path()).collect();
        assert_eq!(refused, [nest.join("d/outdir").as_path()]);
        assert!(may_lead_to_match("a/*/c/*.parquet", Path::new("a/x")));
        assert!(!may_lead_to_match("a/*/c/*.parquet", Path::new("a/x/d")));
    }

    /// Catches: a quoted glob whose folder is named with glob characters (`run[1]`) read as
    /// a character class ("the glob matches no file"), and such a folder or file, given as
    /// it is, read as a glob.
    #[test]
    fn folders_named_with_glob_characters_are_taken_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run[1]");
        std::fs::create_dir_all(run.join("sub")).unwrap();
        std::fs::create_dir_all(dir.path().join("run1")).unwrap();
        for f in [
            "run[1]/a.parquet",
            "run[1]/b.parquet",
            "run[1]/f[2].parquet",
            "run[1]/sub/c.parquet",
            "run1/x.parquet",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let at = |tail: &str| format!("{}/{tail}", dir.path().display());
        let files = |tail: &str| resolve_inputs(&at(tail)).unwrap().files;
        let under =
            |names: &[&str]| -> Vec<PathBuf> { names.iter().map(|n| run.join(n)).collect() };
        let all = resolve_inputs(&at("run[1]/*.parquet")).unwrap();
        assert_eq!(
            all.files,
            under(&["a.parquet", "b.parquet", "f[2].parquet"])
        );
        assert_eq!(all.root, run.canonicalize().unwrap());
        // The components after the folder are still patterns.
        assert_eq!(
            files("run[1]/[ab].parquet"),
            under(&["a.parquet", "b.parquet"])
        );
        assert_eq!(
            files("run[1]/**/*.parquet"),
            under(&["a.parquet", "b.parquet", "f[2].parquet", "sub/c.parquet"])
        );
        // As given, the folder and a file in it are themselves.
        assert_eq!(
            files("run[1]"),
            under(&["a.parquet", "b.parquet", "f[2].parquet", "sub/c.parquet"])
        );
        assert_eq!(files("run[1]/f[2].parquet"), under(&["f[2].parquet"]));
        // No folder of that name: a character class, as before.
        assert_eq!(
            files("run[12]/*.parquet"),
            [dir.path().join("run1/x.parquet")]
        );
        let g = Glob::of("/nowhere/run[1]/*.parquet");
        assert_eq!(
            (g.prefix, g.pattern.as_str(), g.below),
            (PathBuf::from("/nowhere"), "/nowhere/run[1]/*.parquet", 2)
        );
        let g = Glob::of(&at("run[1]/*.parquet"));
        assert_eq!(g.prefix, run);
        assert!(
            g.pattern.ends_with("/run[[]1[]]/*.parquet"),
            "{}",
            g.pattern
        );
        assert_eq!(g.below, 1);
    }
}
