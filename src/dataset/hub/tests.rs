use super::*;
#[cfg(unix)]
use std::os::unix::fs::symlink;

const REV: &str = "0123456789abcdef0123456789abcdef01234567";

/// A hub-cache repo `datasets--acme--vqa` under `cache` with `files` (path in the snapshot →
/// content), each a relative link into `blobs/` as `huggingface_hub` writes them. Returns the
/// snapshot folder.
#[cfg(unix)]
fn repo(cache: &Path, files: &[(&str, &str)]) -> PathBuf {
    let dir = cache.join("datasets--acme--vqa");
    let snapshot = dir.join("snapshots").join(REV);
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::write(dir.join("refs/main"), REV).unwrap();
    for (i, (path, content)) in files.iter().enumerate() {
        let blob = format!("blob{i}");
        std::fs::write(dir.join("blobs").join(&blob), content).unwrap();
        let link = snapshot.join(path);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let up = "../".repeat(path.matches('/').count() + 2);
        symlink(format!("{up}blobs/{blob}"), &link).unwrap();
    }
    snapshot
}

fn card(configs: &str) -> String {
    format!("---\nlicense: mit\nconfigs:\n{configs}---\n# A card\n")
}

#[cfg(unix)]
#[test]
fn card_configs_choose_the_parquet_files_of_a_config_and_split() {
    let tmp = tempfile::tempdir().unwrap();
    let readme = card(
        "- config_name: en\n  data_files:\n  - split: test\n    path: en/test-*\n  - split: val\n    path: [en/val-*]\n  default: true\n- config_name: fr\n  data_files: fr/*.parquet\n",
    );
    let snapshot = repo(
        tmp.path(),
        &[
            ("README.md", &readme),
            ("en/test-00000-of-00001.parquet", "t"),
            ("en/val-00000-of-00001.parquet", "v"),
            ("fr/all.parquet", "f"),
        ],
    );
    let (found, spec) = resolve_hub_dataset(tmp.path(), "acme/vqa", None, Some("val")).unwrap();
    assert_eq!(
        found,
        HubDataset {
            repo: "acme/vqa".into(),
            revision: REV.into(),
            config: "en".into(),
            split: "val".into(),
            pattern: "en/val-*".into(),
        }
    );
    assert_eq!(spec, snapshot.join("en/val-*"));
    // The links into blobs/ are read (as the snapshot's paths), nothing else.
    let inputs = super::super::scan::resolve_inputs(&spec.to_string_lossy()).unwrap();
    assert_eq!(
        inputs.files,
        vec![snapshot.join("en/val-00000-of-00001.parquet")]
    );
    assert!(inputs.refused.is_empty());
    // A string `data_files` is the split `train`.
    let (fr, spec) = resolve_hub_dataset(tmp.path(), "acme/vqa", Some("fr"), None).unwrap();
    assert_eq!(
        (fr.split.as_str(), fr.pattern.as_str()),
        ("train", "fr/*.parquet")
    );
    assert_eq!(spec, snapshot.join("fr/*.parquet"));

    let err = |config: Option<&str>, split: Option<&str>| {
        resolve_hub_dataset(tmp.path(), "acme/vqa", config, split)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(None, None),
        "dataset `acme/vqa`: config en has 2 splits; choose one with --data-split (found: test, val)"
    );
    assert_eq!(
        err(Some("fr"), Some("val")),
        "dataset `acme/vqa`: config fr has no split val; choose one with --data-split (found: train)"
    );
    assert_eq!(
        err(Some("de"), None),
        "dataset `acme/vqa`: no config de; choose one with --data-config (found: en, fr)"
    );
    let missing = resolve_hub_dataset(tmp.path(), "acme/other", None, None).unwrap_err();
    assert!(
        matches!(&missing, HubError::NotFound { looked, .. } if looked.ends_with("datasets--acme--other")),
        "{missing}"
    );
    assert!(missing
        .to_string()
        .contains("hf download acme/other --repo-type dataset"));
}

#[cfg(unix)]
#[test]
fn several_configs_without_a_default_are_a_choice_to_make() {
    let tmp = tempfile::tempdir().unwrap();
    let readme = card(
        "- config_name: a\n  data_files:\n  - split: train\n    path: a/*\n- config_name: b\n  data_files:\n  - split: train\n    path:\n    - b/one-*\n    - b/two-*\n",
    );
    repo(
        tmp.path(),
        &[
            ("README.md", &readme),
            ("a/x.parquet", "a"),
            ("b/one-0.parquet", "b"),
        ],
    );
    let e = resolve_hub_dataset(tmp.path(), "acme/vqa", None, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "dataset `acme/vqa`: 2 configs and none is the default; choose one with --data-config (found: a, b)"
    );
    let e = resolve_hub_dataset(tmp.path(), "acme/vqa", Some("b"), None).unwrap_err();
    assert!(
        matches!(&e, HubError::SeveralPatterns { patterns, .. } if patterns == &["b/one-*", "b/two-*"]),
        "{e}"
    );
}

#[cfg(unix)]
#[test]
fn without_card_configs_the_conventional_layouts_name_configs_and_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshot = repo(
        tmp.path(),
        &[
            ("README.md", "# no front matter\n"),
            ("data/train-00000-of-00002.parquet", "0"),
            ("data/train-00001-of-00002.parquet", "1"),
            ("data/test-00000-of-00001.parquet", "t"),
        ],
    );
    let (found, spec) = resolve_hub_dataset(tmp.path(), "acme/vqa", None, Some("train")).unwrap();
    assert_eq!(
        (found.config.as_str(), found.pattern.as_str()),
        ("default", "data/train-*.parquet")
    );
    let inputs = super::super::scan::resolve_inputs(&spec.to_string_lossy()).unwrap();
    assert_eq!(
        inputs.files,
        vec![
            snapshot.join("data/train-00000-of-00002.parquet"),
            snapshot.join("data/train-00001-of-00002.parquet")
        ]
    );

    let tmp = tempfile::tempdir().unwrap();
    repo(
        tmp.path(),
        &[
            ("docs/test-00000-of-00001.parquet", "d"),
            ("charts/test-00000-of-00001.parquet", "c"),
            ("charts/val-00000-of-00001.parquet", "c"),
        ],
    );
    let e = resolve_hub_dataset(tmp.path(), "acme/vqa", None, None).unwrap_err();
    assert!(e.to_string().ends_with("(found: charts, docs)"), "{e}");
    let (found, _) = resolve_hub_dataset(tmp.path(), "acme/vqa", Some("docs"), None).unwrap();
    assert_eq!(
        (found.split.as_str(), found.pattern.as_str()),
        ("test", "docs/test-*.parquet")
    );
}

#[cfg(unix)]
#[test]
fn links_from_a_snapshot_to_elsewhere_are_still_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshot = repo(tmp.path(), &[("data/train-0.parquet", "0")]);
    let other = tmp.path().join("datasets--acme--other/blobs");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("x"), "x").unwrap();
    symlink(other.join("x"), snapshot.join("data/train-1.parquet")).unwrap();
    let inputs =
        super::super::scan::resolve_inputs(&snapshot.join("data").to_string_lossy()).unwrap();
    assert_eq!(inputs.files, vec![snapshot.join("data/train-0.parquet")]);
    assert_eq!(inputs.refused.len(), 1);
    assert!(inputs.refused[0].link.ends_with("train-1.parquet"));
}

/// A card pattern that is absolute or has a `..` component is refused by its text, naming
/// the card, config, split and pattern, even where files lie at its target; a name holding
/// `..` inside it is no such component.
#[cfg(unix)]
#[test]
fn card_patterns_leading_out_of_the_snapshot_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other/data");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("x.parquet"), "x").unwrap();
    let abs = format!("{}/*.parquet", other.display());
    let readme = card(&format!(
        "- config_name: up\n  data_files: \"../../../other/data/*.parquet\"\n\
         - config_name: abs\n  data_files: \"{abs}\"\n\
         - config_name: mid\n  data_files:\n  - split: test\n    path: [ok/*, \"ok/../../../../other/data/*\"]\n\
         - config_name: win\n  data_files: '..\\..\\x\\*.parquet'\n\
         - config_name: drive\n  data_files: 'C:/x/*.parquet'\n\
         - config_name: dots\n  data_files: a..b/*.parquet\n",
    ));
    let snapshot = repo(
        tmp.path(),
        &[
            ("README.md", &readme),
            ("ok/t.parquet", "t"),
            ("a..b/t.parquet", "t"),
        ],
    );
    // The `..` pattern does reach the parquet file outside, so only the check stops it.
    assert!(snapshot.join("../../../other/data/x.parquet").is_file());
    let err =
        |config: &str| resolve_hub_dataset(tmp.path(), "acme/vqa", Some(config), None).unwrap_err();
    let e = err("up");
    assert!(
        matches!(&e, HubError::Escapes { config, split, pattern, .. }
            if config == "up" && split == "train" && pattern == "../../../other/data/*.parquet"),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "dataset `acme/vqa`: README.md (the dataset card), config up, split train: \
         data_files `../../../other/data/*.parquet` has a `..` component (leads to the \
         folder above); only files inside the snapshot are read"
    );
    let e = err("abs");
    assert!(
        e.to_string().contains(&format!(
            "config abs, split train: data_files `{abs}` is absolute;"
        )),
        "{e}"
    );
    // One pattern of several leading out is named (before "several patterns").
    let e = err("mid");
    assert!(
        matches!(&e, HubError::Escapes { pattern, split, .. }
            if pattern == "ok/../../../../other/data/*" && split == "test"),
        "{e}"
    );
    assert!(e.to_string().contains("`..` component"), "{e}");
    assert!(err("win").to_string().contains("`..` component"));
    assert!(err("drive").to_string().contains("is absolute"));
    let (dots, spec) = resolve_hub_dataset(tmp.path(), "acme/vqa", Some("dots"), None).unwrap();
    assert_eq!(dots.pattern, "a..b/*.parquet");
    assert_eq!(spec, snapshot.join("a..b/*.parquet"));
}

/// A pattern whose folder in the snapshot is a link to a folder elsewhere resolves outside
/// the snapshot and is refused, naming where it leads.
#[cfg(unix)]
#[test]
fn a_card_pattern_through_a_folder_link_out_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("x.parquet"), "x").unwrap();
    let readme = card("- config_name: a\n  data_files: data/*.parquet\n");
    let snapshot = repo(tmp.path(), &[("README.md", &readme)]);
    symlink(&other, snapshot.join("data")).unwrap();
    let e = resolve_hub_dataset(tmp.path(), "acme/vqa", None, None).unwrap_err();
    assert!(
        matches!(&e, HubError::Escapes { pattern, .. } if pattern == "data/*.parquet"),
        "{e}"
    );
    let root = other.canonicalize().unwrap();
    assert!(
        e.to_string().contains(&format!(
            "data_files `data/*.parquet` resolves (through a link) to the folder {}, outside \
             the snapshot {}",
            root.display(),
            snapshot.display()
        )),
        "{e}"
    );
}

#[test]
fn an_input_cards_metadata_is_read_and_what_is_left_out_is_said() {
    let (meta, problems) = card_metadata(
        "---\nlicense: [mit, apache-2.0]\nlanguage: 42\ntask_categories: ''\n---\n# x\n",
    );
    assert_eq!(meta.get("license").unwrap(), &["mit", "apache-2.0"]);
    assert!(!meta.contains_key("language") && !meta.contains_key("task_categories"));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("`language`: 42 is not"),
        "{problems:?}"
    );
    let (meta, problems) = card_metadata("---\nlicense: [unclosed\n---\n");
    assert!(meta.is_empty());
    assert!(problems[0].contains("not valid YAML"), "{problems:?}");
    assert_eq!(
        card_metadata("# no front matter\n"),
        (BTreeMap::new(), Vec::new())
    );
}
