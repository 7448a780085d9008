//! The family registry as users meet it: the docs' table, `--model`'s help, and a checkpoint of
//! a `model_type` no family runs, refused before any weight file is read.

mod shared_data;
use shared_data::repo;

use std::process::Command;

use verisample_models::FAMILIES;

const BIN: &str = env!("CARGO_BIN_EXE_verisample");

/// docs/models-and-gpus.md's architecture table lists exactly the registry's families, in its
/// order, each as `Name (`model_type`)`.
#[test]
fn the_docs_table_lists_the_registry() {
    let doc = std::fs::read_to_string(repo().join("docs/models-and-gpus.md")).unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| architecture | vision tower | decoder |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap().trim())
        .collect();
    let want: Vec<String> = FAMILIES
        .iter()
        .map(|f| format!("{} (`{}`)", f.name, f.model_type))
        .collect();
    assert_eq!(rows, want);
}

#[test]
fn model_help_names_every_family() {
    let out = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for f in FAMILIES.iter() {
        let entry = format!("{} ({})", f.model_type, f.name);
        assert!(help.contains(&entry), "run --help lacks {entry}");
    }
}

/// `run` of a 4 GiB (sparse) checkpoint in `tmp/name` with this `config.json`: its exit status
/// and stderr, and whether it left anything in its output folder.
fn run_checkpoint(tmp: &std::path::Path, name: &str, config: &str) -> (Option<i32>, String, bool) {
    let model = tmp.join(name);
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("config.json"), config).unwrap();
    let weights = std::fs::File::create(model.join("model.safetensors")).unwrap();
    weights.set_len(4 << 30).unwrap();
    let out_dir = tmp.join(format!("out-{name}"));
    let out = Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(&model)
        .arg("--data")
        .arg(repo().join("assets/sample/data"))
        .arg("--out")
        .arg(&out_dir)
        .args(["--device", "cpu", "--progress", "jsonl"])
        .env("VERISAMPLE_CACHE_DIR", tmp.join("cache"))
        .output()
        .unwrap();
    let wrote = out_dir.exists() && std::fs::read_dir(&out_dir).unwrap().next().is_some();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        wrote,
    )
}

/// A `model_type` no family runs, or a field its family cannot use, is refused from
/// `config.json` with the `--model` exit status before the weights are hashed: the 4 GiB
/// weight file is never read, so the start step that hashes model files never begins.
#[test]
fn an_unusable_config_is_refused_before_hashing() {
    let tmp = tempfile::tempdir().unwrap();
    let (status, stderr, wrote) = run_checkpoint(
        tmp.path(),
        "llava",
        r#"{"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}"#,
    );
    assert_eq!(status, Some(2), "{stderr}");
    assert!(
        stderr.contains("unsupported model_type `llava`"),
        "{stderr}"
    );
    for f in FAMILIES.iter() {
        assert!(
            stderr.contains(f.model_type),
            "{stderr} lacks {}",
            f.model_type
        );
    }
    assert!(stderr.contains("config.json"), "{stderr}");
    assert!(!stderr.contains("hash model files"), "{stderr}");
    assert!(!wrote);
    // A supported family with a field of the wrong type: the field is named.
    let (status, stderr, wrote) = run_checkpoint(
        tmp.path(),
        "qwen2",
        r#"{"model_type": "qwen2_vl", "vision_config": {"depth": "deep"}}"#,
    );
    assert_eq!(status, Some(2), "{stderr}");
    assert!(
        stderr.contains("`vision_config.depth`: invalid type: string \"deep\""),
        "{stderr}"
    );
    assert!(!stderr.contains("hash model files"), "{stderr}");
    assert!(!wrote);
}
