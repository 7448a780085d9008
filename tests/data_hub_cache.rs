//! `--data OWNER/NAME` reads a dataset repo of the local Hugging Face hub cache,
//! offline, like `--model`. The cache is made by hand in a temp folder the way
//! `huggingface_hub` lays it out (`datasets--OWNER--NAME/{refs/main, blobs/<sha256>,
//! snapshots/<rev>/…}` with the snapshot's files as relative links into `blobs/`) and found
//! through `HF_HUB_CACHE`. The parquet file is the bundled sample (`assets/sample/data`), so
//! no shared data is needed.

mod shared_data;
use shared_data::repo;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use verisample::settings::sha256_file;

const REV: &str = "89abcdef0123456789abcdef0123456789abcdef";

fn sample() -> PathBuf {
    repo().join("assets/sample/data/train-00000-of-00001.parquet")
}

/// A hub cache under `cache` holding `datasets--acme--orand` with `files` (path in the
/// snapshot → source file), each stored as `blobs/<sha256>` and linked from the snapshot.
fn hub_repo(cache: &Path, files: &[(&str, &Path)]) {
    let dir = cache.join("datasets--acme--orand");
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::write(dir.join("refs/main"), format!("{REV}\n")).unwrap();
    for (path, source) in files {
        let sha = sha256_file(source).unwrap();
        std::fs::copy(source, dir.join("blobs").join(&sha)).unwrap();
        let link = dir.join("snapshots").join(REV).join(path);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let up = "../".repeat(path.matches('/').count() + 2);
        std::os::unix::fs::symlink(format!("{up}blobs/{sha}"), link).unwrap();
    }
}

/// A dataset card with `configs`.
fn card(dir: &Path, configs: &str) -> PathBuf {
    let p = dir.join("README.md");
    std::fs::write(&p, format!("---\nconfigs:\n{configs}---\n# acme/orand\n")).unwrap();
    p
}

/// `verisample run` with the bundled model, the hub cache `cache`, and `args`.
fn run(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verisample"))
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .args(["--progress", "none", "--device", "cpu"])
        .args(["--max-new-tokens", "16", "--judge", "off"])
        .args(args)
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_HOME")
        .output()
        .unwrap()
}

fn ok(out: Output) {
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file of `OUT/data`, name → sha256.
fn data_files(out: &Path) -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(out.join("data"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, sha256_file(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_hub_dataset_gives_the_splits_of_the_same_parquet_by_path() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    let readme = card(
        tmp.path(),
        "- config_name: default\n  data_files:\n  - split: val\n    path: data/val-*\n",
    );
    hub_repo(
        &cache,
        &[
            ("README.md", &readme),
            ("data/val-00000-of-00001.parquet", &sample()),
        ],
    );
    // The same file name: `clean_meta.source_file` names it.
    let by_path = tmp.path().join("plain/val-00000-of-00001.parquet");
    std::fs::create_dir_all(by_path.parent().unwrap()).unwrap();
    std::fs::copy(sample(), &by_path).unwrap();

    let (out_hub, out_path) = (tmp.path().join("out-hub"), tmp.path().join("out-path"));
    let hub = out_hub.to_str().unwrap();
    ok(run(&cache, &["--data", "acme/orand", "--out", hub]));
    let plain = by_path.to_str().unwrap();
    ok(run(
        &cache,
        &["--data", plain, "--out", out_path.to_str().unwrap()],
    ));
    let (a, b) = (data_files(&out_hub), data_files(&out_path));
    assert!(
        a.len() >= 2,
        "{:?}",
        a.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(a, b, "the same split files, byte for byte");
    assert!(a.iter().any(|f| f.0.starts_with("OrandCar_RS_think-")));

    // run.json and the fingerprint name the repo, revision, config and split.
    let run_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_hub.join("run.json")).unwrap()).unwrap();
    let want = serde_json::json!({
        "repo": "acme/orand", "revision": REV, "config": "default", "split": "val",
        "pattern": "data/val-*"
    });
    assert_eq!(run_json["settings"]["read"]["hub"], want, "{run_json}");
    assert_eq!(
        run_json["fingerprint"]["settings"]["read"]["hub"], want,
        "{run_json}"
    );
    // Files are named relative to the folder holding them (the revision is in `hub` above).
    let files = run_json["fingerprint"]["input_files"].to_string();
    assert!(files.contains("\"val-00000-of-00001.parquet\""), "{files}");
    let verify = Command::new(env!("CARGO_BIN_EXE_verisample"))
        .arg("verify")
        .arg(&out_hub)
        .output()
        .unwrap();
    ok(verify);
    // The same command again resumes: the resolution is stable.
    ok(run(&cache, &["--data", "acme/orand", "--out", hub]));

    // Shards of a hub run merge (the merge reads the input again, by its resolved glob).
    let shards: Vec<PathBuf> = (0..2)
        .map(|i| tmp.path().join(format!("shard-{i}")))
        .collect();
    for (i, dir) in shards.iter().enumerate() {
        let shard = format!("{i}/2");
        ok(run(
            &cache,
            &[
                "--data",
                "acme/orand",
                "--shard",
                &shard,
                "--out",
                dir.to_str().unwrap(),
            ],
        ));
    }
    let merged = tmp.path().join("merged");
    ok(Command::new(env!("CARGO_BIN_EXE_verisample"))
        .arg("merge")
        .args(&shards)
        .arg("--out")
        .arg(&merged)
        .args(["--progress", "none"])
        .env("HF_HUB_CACHE", &cache)
        .output()
        .unwrap());
    assert_eq!(
        data_files(&merged),
        a,
        "the merged shards are the whole run"
    );
}

/// `run` with `args` fails with exit 2 and a message holding every one of `want`.
fn refused(cache: &Path, args: &[&str], want: &[&str]) {
    let out = run(cache, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    for w in want {
        assert!(stderr.contains(w), "{args:?}: want {w:?} in {stderr}");
    }
}

#[test]
fn missing_repo_split_or_config_choice_is_a_settings_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    let readme = card(
        tmp.path(),
        "- config_name: cars\n  data_files:\n  - split: val\n    path: cars/val-*\n  - split: test\n    path: cars/test-*\n- config_name: plates\n  data_files: plates/*.parquet\n",
    );
    hub_repo(
        &cache,
        &[
            ("README.md", &readme),
            ("cars/val-0.parquet", &sample()),
            ("cars/test-0.parquet", &sample()),
            ("plates/all.parquet", &sample()),
        ],
    );
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    refused(
        &cache,
        &["--data", "acme/nothing", "--out", out],
        &[
            "dataset `acme/nothing` is neither a local path nor in the Hugging Face cache",
            "datasets--acme--nothing",
            "hf download acme/nothing --repo-type dataset",
        ],
    );
    refused(
        &cache,
        &["--data", "acme/orand", "--out", out],
        &[
            "2 configs and none is the default",
            "--data-config (found: cars, plates)",
        ],
    );
    refused(
        &cache,
        &[
            "--data",
            "acme/orand",
            "--data-config",
            "cars",
            "--out",
            out,
        ],
        &[
            "config cars has 2 splits",
            "--data-split (found: test, val)",
        ],
    );
    refused(
        &cache,
        &[
            "--data",
            "acme/orand",
            "--data-config",
            "cars",
            "--data-split",
            "train",
            "--out",
            out,
        ],
        &["config cars has no split train", "(found: test, val)"],
    );
    refused(
        &cache,
        &[
            "--data",
            sample().to_str().unwrap(),
            "--data-split",
            "val",
            "--out",
            out,
        ],
        &["--data-split val", "applies only to --data OWNER/NAME"],
    );
    // The TOML keys are read like the flags.
    let toml = tmp.path().join("job.toml");
    std::fs::write(
        &toml,
        "data = \"acme/orand\"\ndata-config = \"plates\"\ndata-split = \"val\"\n",
    )
    .unwrap();
    refused(
        &cache,
        &["--config", toml.to_str().unwrap(), "--out", out],
        &["config plates has no split val", "(found: train)"],
    );
    assert!(!Path::new(out).join("run.json").exists());
}

/// A card `data_files` pattern that leads out of the snapshot (`..`, absolute) is refused
/// with exit 2 before anything runs, though a parquet file lies where it points.
#[test]
fn a_card_pattern_leading_out_of_the_snapshot_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    let other = tmp.path().join("other/data");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(sample(), other.join("validation-0.parquet")).unwrap();
    let abs = format!("{}/*.parquet", other.display());
    let readme = card(
        tmp.path(),
        &format!(
            "- config_name: up\n  data_files: \"../../../../other/data/*.parquet\"\n\
             - config_name: abs\n  data_files: \"{abs}\"\n"
        ),
    );
    hub_repo(
        &cache,
        &[
            ("README.md", &readme),
            ("data/validation-0.parquet", &sample()),
        ],
    );
    let snapshot = cache.join("datasets--acme--orand/snapshots").join(REV);
    assert!(snapshot
        .join("../../../../other/data/validation-0.parquet")
        .is_file());
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    let data = ["--data", "acme/orand", "--out", out, "--limit", "2"];
    refused(
        &cache,
        &[&data[..], &["--data-config", "up"]].concat(),
        &[
            "dataset `acme/orand`: README.md (the dataset card), config up, split train",
            "data_files `../../../../other/data/*.parquet` has a `..` component",
        ],
    );
    refused(
        &cache,
        &[&data[..], &["--data-config", "abs"]].concat(),
        &[&format!(
            "config abs, split train: data_files `{abs}` is absolute"
        )],
    );
    assert!(!Path::new(out).join("run.json").exists());
}
