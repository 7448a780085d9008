//! Listing the files of an input dataset folder under the link rules of contract §3 ("the input
//! stays inside its folder; each file is read once").
//!
//! - A symbolic link (to a file or a folder) is followed only when its target, resolved with
//!   `canonicalize`, lies inside the dataset's root folder. A link that leads outside, or that
//!   does not resolve, is not read: it is returned in [`Scan::refused`] with a message naming
//!   the link (the reader reports it as a file error in `errors.jsonl`).
//! - Every real file is listed once, however many paths lead to it (links, hard links, a
//!   folder reached both directly and through a link), identified by device and inode (the
//!   canonical path where those do not exist): the path kept is the direct one (no link on
//!   the way) when there is one, else the first in path order.
//! - Every real folder is entered once. The real folders are walked first without following
//!   any link to a folder; a link to a folder is followed afterwards only when its target has
//!   not been entered yet (a link to an ancestor, `DIR/loop -> DIR`, is never followed), so
//!   the walk visits each folder of the tree once and always ends.
//! - The one exception to "inside the folder": in a Hugging Face hub cache snapshot
//!   (`datasets--O--N/snapshots/<rev>/`), links into the same repo's `blobs/` are followed,
//!   as that is where the cache keeps every file ([`hub_blobs`]).
//!
//! [`inputs`]: an input spec (file, folder or glob) resolved to its files by this walk.
//! Here too: the containment rules of image paths ([`resolve_inside`],
//! [`resolve_in_images_root`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use super::DatasetError;

mod inputs;

pub use inputs::{resolve_inputs, InputFiles};

/// A link that was not followed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The link, as reached from the path given.
    pub link: PathBuf,
    /// Why it was not read.
    pub message: String,
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scan {
    /// Matching files, each real file once, sorted by path.
    pub files: Vec<PathBuf>,
    /// Links not followed (outside the root, or not resolvable) and folders below the depth
    /// limit, sorted by path.
    pub refused: Vec<Refused>,
}

/// How to walk.
pub struct ScanRules<'a> {
    /// Skip entries whose name starts with `.` or `_` (a folder input skips hidden files and
    /// `_`-prefixed bookkeeping such as `_SUCCESS`); a glob input sees every name.
    pub skip_hidden: bool,
    /// Deepest folder level entered below the start (0: only the start folder).
    pub max_depth: usize,
    /// Whether a file, by its path as reached, is part of the input.
    pub keep: &'a dyn Fn(&Path) -> bool,
    /// Whether a folder, by its path as reached, may hold files that `keep` takes (a glob's
    /// folders that cannot lead to a match are not followed, and a link among them that
    /// leads outside is not reported).
    pub descend: &'a dyn Fn(&Path) -> bool,
}

/// A file reached during the walk.
struct Found {
    shown: PathBuf,
    direct: bool,
}

/// The identity of a file or folder: device and inode on Unix, else the canonical path.
type FileId = (u64, u64, PathBuf);

#[cfg(unix)]
fn file_id(real: &Path) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(real)?;
    Ok((m.dev(), m.ino(), PathBuf::new()))
}

#[cfg(not(unix))]
fn file_id(real: &Path) -> std::io::Result<FileId> {
    Ok((0, 0, real.canonicalize()?))
}

/// The walk's state: folders entered, files found, links refused or pending.
struct Walker<'a> {
    root: &'a Path,
    rules: &'a ScanRules<'a>,
    entered: BTreeSet<FileId>,
    found: BTreeMap<FileId, Vec<Found>>,
    refused: Vec<Refused>,
    /// Links to folders inside the root: (path reached, canonical target, depth).
    folder_links: Vec<(PathBuf, PathBuf, usize)>,
}

/// Walk `start` (the folder as given; empty for the current folder) whose canonical form is
/// `root`, under `rules`.
///
/// Errors: [`DatasetError::Io`] when a folder of the tree cannot be listed.
pub fn scan(start: &Path, root: &Path, rules: &ScanRules<'_>) -> Result<Scan, DatasetError> {
    let mut w = Walker {
        root,
        rules,
        entered: BTreeSet::new(),
        found: BTreeMap::new(),
        refused: Vec::new(),
        folder_links: Vec::new(),
    };
    w.entered
        .insert(file_id(root).map_err(|e| DatasetError::io(root, e))?);
    w.walk(start, root, 0, true)?;
    // Links to folders, after the real tree; each may reveal more links.
    while !w.folder_links.is_empty() {
        let mut links = std::mem::take(&mut w.folder_links);
        links.sort();
        for (shown, target, depth) in links {
            let id = file_id(&target).map_err(|e| DatasetError::io(&target, e))?;
            if w.entered.insert(id) {
                w.walk(&shown, &target, depth, false)?;
            } else {
                tracing::debug!(
                    "{}: a link to a folder already read, not followed",
                    shown.display()
                );
            }
        }
    }
    let mut files = Vec::new();
    for mut paths in w.found.into_values() {
        paths.sort_by(|a, b| b.direct.cmp(&a.direct).then_with(|| a.shown.cmp(&b.shown)));
        let mut paths = paths.into_iter();
        if let Some(kept) = paths.next() {
            for other in paths {
                tracing::debug!(
                    "{} is the same file as {}: read once",
                    other.shown.display(),
                    kept.shown.display()
                );
            }
            files.push(kept.shown);
        }
    }
    files.sort();
    w.refused.sort_by(|a, b| a.link.cmp(&b.link));
    Ok(Scan {
        files,
        refused: w.refused,
    })
}

impl Walker<'_> {
    /// List the folder reached as `shown`, whose canonical path is `real`, at `depth`.
    /// `direct`: no link was followed to reach it.
    fn walk(
        &mut self,
        shown: &Path,
        real: &Path,
        depth: usize,
        direct: bool,
    ) -> Result<(), DatasetError> {
        let listed = if shown.as_os_str().is_empty() {
            Path::new(".")
        } else {
            shown
        };
        let rd = std::fs::read_dir(listed).map_err(|e| DatasetError::io(listed, e))?;
        let mut entries = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| DatasetError::io(listed, e))?;
            let name = entry.file_name();
            let hidden = name.to_string_lossy().starts_with(['.', '_']);
            if self.rules.skip_hidden && hidden {
                continue;
            }
            let file_type = entry.file_type().map_err(|e| DatasetError::io(listed, e))?;
            entries.push((name, file_type));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, file_type) in entries {
            let path = shown.join(&name);
            if !file_type.is_symlink() {
                let real_child = real.join(&name);
                if file_type.is_dir() {
                    let id = file_id(&real_child).map_err(|e| DatasetError::io(&path, e))?;
                    if is_run_output(&real_child) {
                        self.run_output(path);
                    } else if depth >= self.rules.max_depth {
                        self.too_deep(path);
                    } else if self.entered.insert(id) {
                        self.walk(&path, &real_child, depth + 1, direct)?;
                    }
                } else if file_type.is_file() && (self.rules.keep)(&path) {
                    self.add(&real_child, path, direct)?;
                }
                continue;
            }
            let target = match path.canonicalize() {
                Ok(t) => t,
                Err(e) => {
                    if (self.rules.keep)(&path) {
                        self.refuse(
                            path,
                            format!("a link that does not resolve ({e}): not read"),
                        );
                    }
                    continue;
                }
            };
            let is_dir = target.is_dir();
            if !readable_from(self.root, &target) {
                let wanted = if is_dir {
                    (self.rules.descend)(&path)
                } else {
                    (self.rules.keep)(&path)
                };
                if wanted {
                    let what = if is_dir { "folder" } else { "file" };
                    let message = format!(
                        "a link to a {what} outside the dataset folder {}: not read (links are \
                         followed only inside the dataset folder)",
                        self.root.display()
                    );
                    self.refuse(path, message);
                }
                continue;
            }
            if is_dir {
                if is_run_output(&target) {
                    self.run_output(path);
                } else if depth < self.rules.max_depth {
                    self.folder_links.push((path, target, depth + 1));
                } else {
                    self.too_deep(path);
                }
            } else if target.is_file() && (self.rules.keep)(&path) {
                self.add(&target, path, false)?;
            }
        }
        Ok(())
    }

    /// A folder below the start that holds an earlier run's output ([`is_run_output`]): not
    /// read, and reported when the rules would descend into it.
    fn run_output(&mut self, path: PathBuf) {
        if (self.rules.descend)(&path) {
            let message = "the output folder of an earlier verisample run (it holds run.json and \
                           journal.bin): not read as input, as its accepted splits hold the model's \
                           own answers as references; give its data folder as --data to read it"
                .to_string();
            self.refuse(path, message);
        }
    }

    /// A folder below the walk's depth limit: reported (not silently passed over) when the
    /// limit is [`MAX_DEPTH`] and the rules would descend into it — a glob's own depth bound
    /// is its pattern's, below which nothing can match.
    fn too_deep(&mut self, path: PathBuf) {
        if self.rules.max_depth == MAX_DEPTH && (self.rules.descend)(&path) {
            let message =
                format!("a folder more than {MAX_DEPTH} levels below the dataset folder: not read");
            self.refuse(path, message);
        }
    }

    fn add(&mut self, real: &Path, shown: PathBuf, direct: bool) -> Result<(), DatasetError> {
        let id = file_id(real).map_err(|e| DatasetError::io(&shown, e))?;
        self.found
            .entry(id)
            .or_default()
            .push(Found { shown, direct });
        Ok(())
    }

    fn refuse(&mut self, link: PathBuf, message: String) {
        tracing::debug!("{}: {message}", link.display());
        self.refused.push(Refused { link, message });
    }
}

use crate::out_files::RUN_OUTPUT_MARKERS;

/// Whether the folder `dir` is an earlier run's output ([`RUN_OUTPUT_MARKERS`] all present).
/// A folder walk does not enter such a folder below its start: a run's `--out` kept inside
/// the dataset folder would otherwise be read back as input on the next run (its accepted
/// splits' `qa` answers are the model's own, which then pass their own check). Given as the
/// start itself (`--data OUT` or `--data OUT/data`), it is read.
fn is_run_output(dir: &Path) -> bool {
    RUN_OUTPUT_MARKERS.iter().all(|m| dir.join(m).is_file())
}

/// Deepest folder level below the dataset folder that is searched for parquet files (bounds
/// the walk of a folder or a `**` glob; HF layouts use two levels, `data/<config>/`).
pub const MAX_DEPTH: usize = 32;

fn is_parquet(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(".parquet"))
}

/// Whether `base/rel`, with `.` and `..` taken literally (no look-up), stays inside `root`.
fn lexically_inside(root: &Path, base: &Path, rel: &Path) -> bool {
    let mut p = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::ParentDir => {
                if !p.pop() {
                    return false;
                }
            }
            Component::Normal(n) => p.push(n),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    p.starts_with(root)
}

/// Resolve the image path `rel` of a row in a file under `base`, allowing only files inside
/// `root` (canonical). Tries `base/rel`, then `root/rel`. A path whose `..` lead out of
/// `root` is refused as escaping before anything is looked up, so the message does not tell
/// whether a file outside exists; a link inside that resolves outside is refused the same way.
///
/// Errors (as a message): empty or absolute path, outside `root`, not found, not a file.
pub fn resolve_inside(root: &Path, base: &Path, rel: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    if rel.is_empty() {
        return Err("empty path".into());
    }
    if p.is_absolute()
        || p.components()
            .any(|c| matches!(c, Component::RootDir | Component::Prefix(_)))
    {
        return Err(format!(
            "absolute path {rel:?} is not allowed; image paths must be relative to the dataset \
             folder, or pass --images-root DIR to read images given by path inside DIR"
        ));
    }
    let escapes = || format!("path {rel:?} escapes the dataset folder {}", root.display());
    let mut escaped = false;
    for dir in [base, root] {
        if !lexically_inside(root, dir, p) {
            escaped = true;
            continue;
        }
        let Ok(c) = dir.join(p).canonicalize() else {
            continue;
        };
        if !readable_from(root, &c) {
            escaped = true;
            continue;
        }
        if !c.is_file() {
            return Err(format!("{rel:?} is not a file"));
        }
        return Ok(c);
    }
    if escaped {
        Err(escapes())
    } else {
        Err(format!(
            "image file {rel:?} not found in the dataset folder {}",
            root.display()
        ))
    }
}

/// Resolve the image `path` of a row under `--images-root` (`root`, canonical) instead of the
/// dataset folder: a relative path as [`resolve_inside`] does with `root` as the base, an
/// absolute one (what `datasets`' `to_parquet` writes for images that were files) only when
/// it lies inside `root` once links are followed on both sides — `root` is canonical, and so is
/// the row's path before the comparison — so a path spelt through a link to the root (rows
/// written as `/data/imgs/a.jpg` with `/data/imgs` a link to `/mnt/x/imgs`) is read, and a link
/// inside the root that resolves outside it is refused (the rule of the input scan).
///
/// Errors (as a message): outside `root`, not found, not a file.
pub fn resolve_in_images_root(root: &Path, path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return resolve_inside(root, root, path);
    }
    let outside = || format!("path {path:?} is outside --images-root {}", root.display());
    let c = p.canonicalize().map_err(|_| {
        if lexically_inside(root, Path::new("/"), p) {
            format!(
                "image file {path:?} not found under --images-root {}",
                root.display()
            )
        } else {
            outside()
        }
    })?;
    if !readable_from(root, &c) {
        return Err(outside());
    }
    if !c.is_file() {
        return Err(format!("{path:?} is not a file"));
    }
    Ok(c)
}

/// The `blobs/` folder of the hub-cache repo whose snapshot holds `root` (canonical):
/// `…/datasets--O--N/blobs` when `root` lies in `…/datasets--O--N/snapshots/<rev>/`, else
/// `None`. The input scan follows links from such a root into this folder only (that is how
/// the cache stores every file of a snapshot).
pub fn hub_blobs(root: &Path) -> Option<PathBuf> {
    root.ancestors().find_map(|rev| {
        let snapshots = rev.parent()?;
        let repo = snapshots.parent()?;
        let is_repo = repo
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("datasets--"));
        (snapshots.file_name()? == "snapshots" && is_repo).then(|| repo.join("blobs"))
    })
}

/// Whether `target` (canonical) may be read from the dataset folder `root` (canonical):
/// inside `root`, or in the blobs of the hub-cache repo whose snapshot holds `root`.
pub fn readable_from(root: &Path, target: &Path) -> bool {
    target.starts_with(root) || hub_blobs(root).is_some_and(|b| target.starts_with(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::symlink;

    #[cfg(unix)]
    fn scan_all(dir: &Path) -> Scan {
        let rules = ScanRules {
            skip_hidden: true,
            max_depth: usize::MAX,
            keep: &is_parquet,
            descend: &|_| true,
        };
        scan(dir, &dir.canonicalize().unwrap(), &rules).unwrap()
    }

    /// An earlier run's OUT kept inside the dataset folder is not read back as input (a
    /// link to it neither); named as the start, it is read.
    #[test]
    fn an_earlier_runs_output_below_the_start_is_reported_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        let old = ds.join("old_out");
        std::fs::create_dir_all(old.join("data")).unwrap();
        std::fs::write(ds.join("a.parquet"), b"a").unwrap();
        std::fs::write(old.join("data/OrandCar_RS_think.parquet"), b"x").unwrap();
        std::fs::write(old.join("run.json"), b"{}").unwrap();
        let rules = ScanRules {
            skip_hidden: true,
            max_depth: MAX_DEPTH,
            keep: &is_parquet,
            descend: &|_| true,
        };
        let walk = |start: &Path| scan(start, &start.canonicalize().unwrap(), &rules).unwrap();
        // run.json alone (another tool's) is no run output: read.
        assert_eq!(walk(&ds).files.len(), 2);
        std::fs::write(old.join("journal.bin"), b"").unwrap();
        #[cfg(unix)]
        symlink(&old, ds.join("link_to_old")).unwrap();
        let s = walk(&ds);
        assert_eq!(s.files, vec![ds.join("a.parquet")]);
        let refused: Vec<_> = s.refused.iter().map(|r| r.link.clone()).collect();
        #[cfg(unix)]
        assert_eq!(refused, [ds.join("link_to_old"), old.clone()]);
        assert!(refused.contains(&old));
        assert!(s.refused[0].message.contains("an earlier verisample run"));
        assert_eq!(
            walk(&old).files,
            [old.join("data/OrandCar_RS_think.parquet")]
        );
    }

    #[test]
    fn folders_below_the_depth_limit_are_reported_not_passed_over() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        let mut deep = ds.clone();
        for i in 0..=MAX_DEPTH {
            deep.push(format!("d{i}"));
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("a.parquet"), b"a").unwrap();
        std::fs::write(ds.join("top.parquet"), b"t").unwrap();
        let rules = ScanRules {
            skip_hidden: true,
            max_depth: MAX_DEPTH,
            keep: &is_parquet,
            descend: &|_| true,
        };
        let s = scan(&ds, &ds.canonicalize().unwrap(), &rules).unwrap();
        assert_eq!(s.files, vec![ds.join("top.parquet")]);
        assert_eq!(s.refused.len(), 1, "{:?}", s.refused);
        assert_eq!(s.refused[0].link, deep);
        assert!(s.refused[0].message.contains("more than 32 levels"));
    }

    #[cfg(unix)]
    #[test]
    fn links_inside_are_read_once_and_links_outside_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(ds.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ds.join("real/a.parquet"), b"a").unwrap();
        std::fs::write(outside.join("x.parquet"), b"x").unwrap();
        symlink(&ds, ds.join("loop")).unwrap();
        symlink("..", ds.join("real/up")).unwrap();
        symlink(ds.join("real"), ds.join("again")).unwrap();
        symlink(ds.join("real/a.parquet"), ds.join("b.parquet")).unwrap();
        std::fs::hard_link(ds.join("real/a.parquet"), ds.join("real/hard.parquet")).unwrap();
        symlink(&outside, ds.join("ext")).unwrap();
        symlink(outside.join("x.parquet"), ds.join("x.parquet")).unwrap();
        symlink(ds.join("gone.parquet"), ds.join("dangling.parquet")).unwrap();
        let s = scan_all(&ds);
        assert_eq!(s.files, vec![ds.join("real/a.parquet")]);
        let refused: Vec<&Path> = s.refused.iter().map(|r| r.link.as_path()).collect();
        assert_eq!(
            refused,
            vec![
                ds.join("dangling.parquet").as_path(),
                ds.join("ext").as_path(),
                ds.join("x.parquet").as_path()
            ]
        );
        assert!(s.refused[1].message.contains("outside the dataset folder"));
        assert!(s.refused[0].message.contains("does not resolve"));
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_only_reachable_through_a_link_is_read_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        std::fs::create_dir_all(ds.join(".store")).unwrap();
        std::fs::write(ds.join(".store/s.parquet"), b"s").unwrap();
        symlink(ds.join(".store"), ds.join("data")).unwrap();
        symlink(ds.join(".store"), ds.join("more")).unwrap();
        assert_eq!(scan_all(&ds).files, vec![ds.join("data/s.parquet")]);
    }

    #[test]
    fn resolve_inside_rejects_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ds");
        std::fs::create_dir_all(root.join("img")).unwrap();
        std::fs::write(root.join("img/a.png"), b"png").unwrap();
        std::fs::write(dir.path().join("secret.txt"), b"s").unwrap();
        let root = root.canonicalize().unwrap();
        let base = root.join("img");
        assert_eq!(
            resolve_inside(&root, &base, "a.png").unwrap(),
            root.join("img/a.png")
        );
        assert_eq!(
            resolve_inside(&root, &base, "img/a.png").unwrap(),
            root.join("img/a.png")
        );
        assert_eq!(
            resolve_inside(&root, &base, "../img/a.png").unwrap(),
            root.join("img/a.png")
        );
        let cases = [
            ("../../secret.txt", "escapes"),
            ("/etc/passwd", "absolute"),
            ("missing.png", "not found"),
            ("../../missing.png", "escapes"),
            ("img/../../../secret.txt", "escapes"),
            ("", "empty"),
            (".", "not a file"),
        ];
        for (rel, want) in cases {
            let e = resolve_inside(&root, &base, rel).unwrap_err();
            assert!(e.contains(want), "{rel:?}: {e}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn resolve_inside_rejects_symlink_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ds");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(dir.path().join("outside.png"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.png"), root.join("link.png")).unwrap();
        let root = root.canonicalize().unwrap();
        assert!(resolve_inside(&root, &root, "link.png")
            .unwrap_err()
            .contains("escapes"));
    }

    #[cfg(unix)]
    #[test]
    fn images_root_takes_absolute_paths_inside_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("imgs");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.png"), b"png").unwrap();
        std::fs::write(dir.path().join("secret.png"), b"s").unwrap();
        symlink(dir.path().join("secret.png"), root.join("link.png")).unwrap();
        let root = root.canonicalize().unwrap();
        let abs = |rel: &str| root.join(rel).to_string_lossy().into_owned();
        assert_eq!(
            resolve_in_images_root(&root, &abs("sub/a.png")).unwrap(),
            root.join("sub/a.png")
        );
        assert_eq!(
            resolve_in_images_root(&root, "sub/a.png").unwrap(),
            root.join("sub/a.png")
        );
        let secret = dir.path().join("secret.png").to_string_lossy().into_owned();
        let cases = [
            (secret, "outside --images-root"),
            (abs("../secret.png"), "outside --images-root"),
            (abs("link.png"), "outside --images-root"),
            (abs("sub/missing.png"), "not found"),
            (abs("sub"), "not a file"),
            ("../secret.png".to_string(), "escapes"),
            (
                dir.path()
                    .join("missing.png")
                    .to_string_lossy()
                    .into_owned(),
                "outside --images-root",
            ),
        ];
        for (path, want) in cases {
            let e = resolve_in_images_root(&root, &path).unwrap_err();
            assert!(e.contains(want), "{path:?}: {e}");
        }
    }

    /// A root behind a link (data folders on mounts, shared GPU boxes): rows spelt through
    /// the link are read, as the root resolves; a link inside it to a file outside is still
    /// refused. Catches: the row's path compared unresolved with the resolved root.
    #[cfg(unix)]
    #[test]
    fn images_root_behind_a_link_reads_rows_spelt_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("mnt/imgs");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("a.png"), b"png").unwrap();
        std::fs::write(dir.path().join("secret.png"), b"s").unwrap();
        symlink(dir.path().join("secret.png"), real.join("out.png")).unwrap();
        let view = dir.path().join("data");
        symlink(&real, &view).unwrap();
        let root = view.canonicalize().unwrap();
        let through = |name: &str| view.join(name).to_string_lossy().into_owned();
        assert_eq!(
            resolve_in_images_root(&root, &through("a.png")).unwrap(),
            real.canonicalize().unwrap().join("a.png")
        );
        let e = resolve_in_images_root(&root, &through("out.png")).unwrap_err();
        assert!(e.contains("outside --images-root"), "{e}");
    }

    #[test]
    fn hub_blobs_only_inside_a_dataset_snapshot() {
        let snap = Path::new("/c/datasets--a--b/snapshots/r1/data");
        assert_eq!(
            hub_blobs(snap),
            Some(PathBuf::from("/c/datasets--a--b/blobs"))
        );
        assert!(readable_from(snap, Path::new("/c/datasets--a--b/blobs/x")));
        assert!(!readable_from(snap, Path::new("/c/datasets--a--c/blobs/x")));
        assert!(!readable_from(snap, Path::new("/c/datasets--a--b/other/x")));
        assert_eq!(hub_blobs(Path::new("/c/models--a--b/snapshots/r1")), None);
        assert_eq!(hub_blobs(Path::new("/data/snapshots/r1")), None);
    }
}
