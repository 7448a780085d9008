//! `run` settings: flags over TOML over defaults, validation before anything loads, model
//! lookup in a local folder or the offline Hugging Face cache.

use std::path::{Path, PathBuf};

use clap::Parser;
use verisample::cli::RunArgs;
use verisample::settings::{
    fingerprint, hash_input_files, DTypeSpec, DeviceSpec, ProgressMode, RunOptions, Settings,
    SettingsError,
};
use verisample::shard::Shard;

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

/// The flags as `verisample run` parses them, converted into the settings' options.
fn parse(args: &[&str]) -> RunOptions {
    Cli::try_parse_from(std::iter::once("verisample").chain(args.iter().copied()))
        .expect("flags parse")
        .run
        .into()
}

/// A model folder and a data folder inside `root`.
fn fixture(root: &Path) -> (PathBuf, PathBuf) {
    let model = root.join("model");
    let data = root.join("data");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    (model, data)
}

#[test]
fn flags_win_over_config_file_over_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let config = dir.path().join("job.toml");
    std::fs::write(
        &config,
        "model = \"model\"\ndata = \"data\"\nout = \"out\"\nthink = \"off\"\n\
         max-new-tokens = 512\nshard = \"1/4\"\ndevice = \"cpu\"\njudge-calibrate = 60\n",
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let mut args = parse(&["--config", cfg, "--max-new-tokens", "99"]);
    args.quiet = true; // the CLI's global -q
    let s = Settings::resolve(&args).unwrap();
    // Relative paths in the file are relative to the file.
    assert_eq!(s.model.dir, model);
    assert_eq!(s.data, data);
    assert_eq!(s.out, dir.path().join("out"));
    assert!(!s.think, "from the file");
    assert_eq!(s.max_new_tokens, 99, "flag wins");
    assert_eq!(s.shard, Shard { index: 1, count: 4 });
    assert_eq!(s.judge_calibrate, 60);
    assert_eq!(s.limit, None, "every row by default");
    // Defaults.
    assert!(s.judge && s.number_guard);
    assert_eq!((s.device, s.dtype), (DeviceSpec::Cpu, DTypeSpec::F32));
    assert_eq!((s.max_batch, s.max_batch_tokens), (64, 16384));
    // The CPU keeps a fixed default batch; a GPU run without --max-batch lets the engine pick
    // one from its KV pool (and run.json of a CPU run does not mention it).
    assert!(!s.max_batch_auto);
    assert!(!serde_json::to_string(&s)
        .unwrap()
        .contains("max_batch_auto"));
    assert_eq!(s.progress, ProgressMode::None, "-q silences progress");
}

#[test]
fn bad_values_fail_before_anything_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let (m, d) = (model.to_str().unwrap(), data.to_str().unwrap());
    // Shard specs are rejected by the flag parser itself.
    let cli = Cli::try_parse_from(["verisample", "--shard", "4/4"]);
    assert!(cli
        .unwrap_err()
        .to_string()
        .contains("I must be smaller than N"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--max-batch", "0"], "--max-batch 0"),
        (
            vec!["--max-batch", "99999999999"],
            "--max-batch 99999999999: must be at most 65536",
        ),
        (vec!["--kv-cache-gib=0"], "--kv-cache-gib 0"),
        (
            vec!["--limit", "0"],
            "invalid --limit 0: must be at least 1",
        ),
        (vec!["--family", "Orand Car"], "--family Orand Car"),
        (
            vec!["--data", "/nonexistent/verisample"],
            "input dataset not found",
        ),
        (vec!["--device", "cuda:1"], "built without cuda"),
        (
            vec!["--verifier", "MyBench=fuzzy"],
            "--verifier MyBench=fuzzy",
        ),
        (
            vec!["--verifier", "MyBench=exact", "--verifier", "MyBench=alnum"],
            "family MyBench already has the verifier \"MyBench=exact\"",
        ),
        (
            vec!["--verifier", "exact", "--verifier", "numeric"],
            "the default already has the verifier \"exact\"",
        ),
    ];
    for (extra, want) in cases {
        if extra[0] == "--device" && cfg!(feature = "cuda") {
            continue;
        }
        let mut args = vec!["--model", m];
        if extra[0] != "--data" {
            args.extend(["--data", d]);
        }
        args.extend(extra);
        let err = Settings::resolve(&parse(&args)).unwrap_err();
        assert!(err.to_string().contains(want), "{args:?}: {err}");
    }
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "max-new-token = 5\n").unwrap();
    let err = Settings::resolve(&parse(&["--config", config.to_str().unwrap()])).unwrap_err();
    assert!(matches!(err, SettingsError::ConfigParse { .. }), "{err}");
    std::fs::write(&config, "shard = \"2/2\"\n").unwrap();
    let err = Settings::resolve(&parse(&["--config", config.to_str().unwrap()])).unwrap_err();
    assert!(matches!(err, SettingsError::Shard(_)), "{err}");
}

#[test]
fn model_is_found_in_the_offline_hf_cache_or_the_error_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let (_, data) = fixture(dir.path());
    let cache = dir.path().join("hub");
    let repo = cache.join("models--tiny-org--tiny-vlm");
    let snapshot = repo.join("snapshots/0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    std::fs::write(snapshot.join("config.json"), "{}").unwrap();
    // This is the only test in this binary that reads the HF environment variables.
    std::env::set_var("HF_HUB_CACHE", &cache);
    let d = data.to_str().unwrap();
    let s = Settings::resolve(&parse(&["--model", "tiny-org/tiny-vlm", "--data", d])).unwrap();
    assert_eq!(s.model.dir, snapshot);
    assert!(s.model.from_hub_cache);
    let err = Settings::resolve(&parse(&["--model", "tiny-org/absent", "--data", d])).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("tiny-org/absent"), "{msg}");
    assert!(
        msg.contains(&cache.join("models--tiny-org--absent").display().to_string()),
        "{msg}"
    );
    std::env::remove_var("HF_HUB_CACHE");
}

#[test]
fn fingerprint_ignores_scheduling_and_display_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let (m, d) = (model.to_str().unwrap(), data.to_str().unwrap());
    let a = Settings::resolve(&parse(&["--model", m, "--data", d])).unwrap();
    let b = Settings::resolve(&parse(&[
        "--model",
        m,
        "--data",
        d,
        "--max-batch",
        "3",
        "--max-batch-tokens",
        "100",
        "--progress",
        "jsonl",
        "--max-errors",
        "2",
        "--out",
        "/tmp/elsewhere",
    ]))
    .unwrap();
    assert_eq!(a.canonical(), b.canonical());
    let c = Settings::resolve(&parse(&[
        "--model",
        m,
        "--data",
        d,
        "--number-guard",
        "off",
    ]))
    .unwrap();
    assert_eq!(
        a.canonical().diff(&c.canonical()),
        vec!["number_guard: true -> false".to_string()]
    );
    // A verifier decides accept/reject: it is part of the fingerprint.
    let v = Settings::resolve(&parse(&[
        "--model",
        m,
        "--data",
        d,
        "--verifier",
        "MyBench=exact",
        "--verifier",
        "numeric:0.05",
    ]))
    .unwrap();
    assert_eq!(
        a.canonical().diff(&v.canonical()),
        vec![r#"verifiers: null -> ["MyBench=exact","numeric:0.05"]"#.to_string()]
    );
    let registry = v.verifier_registry();
    assert_eq!(
        registry.for_family(Some("MyBench")).to_string(),
        "exact",
        "{registry:?}"
    );
    assert_eq!(
        registry.for_family(Some("Other")).to_string(),
        "numeric:0.05"
    );
    assert_eq!(registry.for_family(Some("OrandCar")).to_string(), "alnum");
}

#[test]
fn input_hashes_follow_the_file_content_in_reading_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("b.parquet"), b"two").unwrap();
    std::fs::write(data.join("a.parquet"), b"one").unwrap();
    let first = hash_input_files(&data).unwrap();
    let names: Vec<&str> = first
        .iter()
        .map(|(f, _)| Path::new(f).file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a.parquet", "b.parquet"]);
    // sha256("one")
    assert_eq!(
        first[0].1,
        "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed"
    );
    std::fs::write(data.join("b.parquet"), b"changed").unwrap();
    let second = hash_input_files(&data).unwrap();
    assert_eq!(first[0], second[0]);
    assert_ne!(first[1].1, second[1].1);
    assert!(hash_input_files(&dir.path().join("missing")).is_err());
}

#[test]
fn the_run_is_named_by_its_input_files_however_data_is_spelt() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = fixture(dir.path());
    let ds = dir.path().join("ds");
    std::fs::create_dir_all(ds.join("data/sub")).unwrap();
    std::fs::write(ds.join("data/a.parquet"), b"one").unwrap();
    std::fs::write(ds.join("data/sub/b.parquet"), b"two").unwrap();
    let m = model.to_str().unwrap();
    let identity = |spec: &str| {
        let s = Settings::resolve(&parse(&["--model", m, "--data", spec])).unwrap();
        let files = hash_input_files(Path::new(spec)).unwrap();
        fingerprint(s.canonical(), Default::default(), files).sha256
    };
    let want = identity(ds.to_str().unwrap());
    for spelt in [
        ds.join("data").display().to_string(),
        format!("{}/./", ds.display()),
        format!("{}/../data/", ds.join("data").display()),
        format!("{}/data/**/*.parquet", ds.display()),
    ] {
        assert_eq!(identity(&spelt), want, "{spelt}");
    }
    // The memory budgets only decide which rows are refused (each run plans afresh): a rerun
    // with another --vision-memory-gib or --kv-cache-gib resumes the same run.
    let ds_spec = ds.to_str().unwrap();
    for budget in [["--vision-memory-gib", "0.5"], ["--kv-cache-gib", "2"]] {
        let args = [&["--model", m, "--data", ds_spec][..], &budget[..]].concat();
        let s = Settings::resolve(&parse(&args)).unwrap();
        let files = hash_input_files(&ds).unwrap();
        let with = fingerprint(s.canonical(), Default::default(), files).sha256;
        assert_eq!(with, want, "{budget:?}");
    }
    // Another set of files is another run: a subset, or a copy elsewhere.
    assert_ne!(identity(ds.join("data/sub").to_str().unwrap()), want);
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(copy.join("sub")).unwrap();
    std::fs::write(copy.join("a.parquet"), b"one").unwrap();
    std::fs::write(copy.join("sub/b.parquet"), b"two").unwrap();
    assert_ne!(identity(copy.to_str().unwrap()), want);
}

#[test]
fn families_differing_only_in_case_are_refused_before_anything_loads() {
    use verisample::dataset::prepare::{prepare, PrepareOptions, PrepareSource};
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = fixture(dir.path());
    let m = model.to_str().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.png"), b"image").unwrap();
    let jsonl = src.join("qa.jsonl");
    std::fs::write(
        &jsonl,
        "{\"image\": \"a.png\", \"question\": \"q\", \"answer\": \"1\"}\n",
    )
    .unwrap();
    // Each split of a dataset holds one family.
    let dataset = |name: &str, families: &[&str]| {
        let out = dir.path().join(name);
        for (i, family) in families.iter().enumerate() {
            let opts = PrepareOptions {
                source: PrepareSource::QaJsonl {
                    jsonl: jsonl.clone(),
                },
                family: Some(family.to_string()),
                out: out.clone(),
                split: format!("s{i}"),
                shard: Default::default(),
                images_root: None,
            };
            prepare(&opts, &|_, qa, _| Ok(vec![None; qa.len()])).unwrap();
        }
        out.display().to_string()
    };
    let clash = dataset("clash", &["Cheque", "Other", "cheque"]);
    let err = Settings::resolve(&parse(&["--model", m, "--data", &clash])).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, SettingsError::Invalid { key: "data", .. }),
        "{err:?}"
    );
    assert!(
        msg.contains(r#"the families "Cheque" and "cheque" differ only in case"#)
            && msg.contains("(Cheque_RS_think-…, cheque_RS_think-…)")
            && msg.contains("case-insensitive file system")
            && msg.contains("--family"),
        "{msg}"
    );
    // `--family` puts every row in one family; families that differ otherwise are fine.
    Settings::resolve(&parse(&[
        "--model", m, "--data", &clash, "--family", "Cheque",
    ]))
    .unwrap();
    let fine = dataset("fine", &["Cheque", "Cheques"]);
    Settings::resolve(&parse(&["--model", m, "--data", &fine])).unwrap();
}

#[test]
fn out_inside_or_equal_to_the_data_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let m = model.to_str().unwrap();
    let file = data.join("train.parquet");
    std::fs::write(&file, b"x").unwrap();
    let inside = data.join("out");
    let dotted = data.join("sub/../");
    for (d, out) in [
        (data.clone(), data.clone()),
        (data.clone(), inside.clone()),
        (data.clone(), dotted),
        (file.clone(), inside.clone()),
    ] {
        let args = parse(&[
            "--model",
            m,
            "--data",
            d.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = Settings::resolve(&args).unwrap_err();
        assert!(
            matches!(err, SettingsError::Invalid { key: "out", .. }),
            "{out:?}: {err}"
        );
        assert!(
            err.to_string().contains("inside the input dataset"),
            "{err}"
        );
    }
    // A sibling folder whose name starts like the data folder is fine.
    let sibling = dir.path().join("data-out");
    let args = parse(&[
        "--model",
        m,
        "--data",
        data.to_str().unwrap(),
        "--out",
        sibling.to_str().unwrap(),
    ]);
    // Accepted, with the sibling as the output folder.
    assert_eq!(Settings::resolve(&args).unwrap().out, sibling);
}

#[test]
fn a_quoted_glob_is_accepted_as_data_when_it_matches() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    std::fs::write(data.join("train-00000.parquet"), b"x").unwrap();
    let m = model.to_str().unwrap();
    let out = dir.path().join("out");
    let glob = format!("{}/*.parquet", data.display());
    let args = parse(&[
        "--model",
        m,
        "--data",
        &glob,
        "--out",
        out.to_str().unwrap(),
    ]);
    let s = Settings::resolve(&args).expect("glob accepted");
    assert_eq!(s.data, PathBuf::from(&glob));
    let none = format!("{}/*.nothing", data.display());
    let args = parse(&[
        "--model",
        m,
        "--data",
        &none,
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = Settings::resolve(&args).unwrap_err();
    assert!(matches!(err, SettingsError::DataNotFound(_)), "{err}");
    // The glob's folder counts as the data folder for the --out check.
    let inside = data.join("o");
    let args = parse(&[
        "--model",
        m,
        "--data",
        &glob,
        "--out",
        inside.to_str().unwrap(),
    ]);
    assert!(Settings::resolve(&args).is_err());
}

#[test]
fn pixel_bounds_come_from_flags_or_toml_are_checked_and_fingerprinted() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let (m, d) = (model.to_str().unwrap(), data.to_str().unwrap());
    let plain = Settings::resolve(&parse(&["--model", m, "--data", d])).unwrap();
    assert_eq!((plain.min_pixels, plain.max_pixels), (None, None));
    let config = dir.path().join("job.toml");
    std::fs::write(&config, "min-pixels = 3136\nmax-pixels = 100352\n").unwrap();
    let cfg = config.to_str().unwrap();
    let s = Settings::resolve(&parse(&[
        "--model",
        m,
        "--data",
        d,
        "--config",
        cfg,
        "--max-pixels",
        "65536",
    ]))
    .unwrap();
    assert_eq!(
        (s.min_pixels, s.max_pixels),
        (Some(3136), Some(65536)),
        "flag wins"
    );
    assert_eq!(
        plain.canonical().diff(&s.canonical()),
        vec![
            "max_pixels: null -> 65536".to_string(),
            "min_pixels: null -> 3136".to_string()
        ]
    );
    // Unset bounds leave the canonical JSON (and so older fingerprints) as they were.
    let json = serde_json::to_string(&plain.canonical()).unwrap();
    assert!(!json.contains("pixels"), "{json}");
    // run.json carries them in `settings`.
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(
        (&v["min_pixels"], &v["max_pixels"]),
        (&serde_json::json!(3136), &serde_json::json!(65536))
    );
    for (extra, want) in [
        (
            vec!["--max-pixels", "0"],
            "--max-pixels 0: must be at least 1",
        ),
        (
            vec!["--min-pixels", "70000", "--max-pixels", "65536"],
            "--min-pixels 70000: must not exceed --max-pixels 65536",
        ),
    ] {
        let mut args = vec!["--model", m, "--data", d];
        args.extend(extra);
        let err = Settings::resolve(&parse(&args)).unwrap_err();
        assert!(err.to_string().contains(want), "{args:?}: {err}");
    }
}

#[test]
fn decoding_settings_come_from_generation_config_flags_and_toml() {
    // The checkpoint's generation_config.json gives the penalty; --repetition-penalty
    // overrides it, --generation-config off drops it; both reach the fingerprint.
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    std::fs::write(
        model.join("generation_config.json"),
        r#"{"repetition_penalty": 1.05, "eos_token_id": [7, 8], "top_k": 1, "do_sample": true}"#,
    )
    .unwrap();
    let (m, d) = (model.to_str().unwrap(), data.to_str().unwrap());
    let resolve = |extra: &[&str]| {
        let mut args = vec!["--model", m, "--data", d];
        args.extend_from_slice(extra);
        Settings::resolve(&parse(&args))
    };
    let file = resolve(&[]).unwrap();
    assert_eq!(file.decoding.repetition_penalty, 1.05);
    assert_eq!(file.decoding.eos_token_ids, vec![7, 8]);
    let flag = resolve(&["--repetition-penalty", "1.2"]).unwrap();
    assert_eq!(flag.decoding.repetition_penalty, 1.2);
    assert_eq!(
        file.canonical().diff(&flag.canonical()),
        vec![r#"repetition_penalty: "1.05" -> "1.2""#.to_string()]
    );
    let off = resolve(&["--generation-config", "off"]).unwrap();
    assert_eq!(off.decoding.repetition_penalty, 1.0);
    assert!(off.decoding.eos_token_ids.is_empty());
    assert_eq!(
        file.canonical().diff(&off.canonical()),
        vec![
            "generation_config: null -> false".to_string(),
            r#"repetition_penalty: "1.05" -> null"#.to_string()
        ]
    );
    // The same override in the TOML file; a flag still wins over it.
    let config = dir.path().join("job.toml");
    std::fs::write(
        &config,
        "repetition-penalty = 1.3\ngeneration-config = \"off\"\n",
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let toml = resolve(&["--config", c]).unwrap();
    assert_eq!(
        (
            toml.decoding.repetition_penalty,
            toml.decoding.generation_config
        ),
        (1.3, false)
    );
    let both = resolve(&["--config", c, "--repetition-penalty", "1.1"]).unwrap();
    assert_eq!(both.decoding.repetition_penalty, 1.1);
    // run.json records the effective values.
    let json = serde_json::to_value(&file).unwrap();
    assert_eq!(json["decoding"]["repetition_penalty"], 1.05);
    assert_eq!(json["decoding"]["generation_config"], true);
    // Refusals name the key, before anything loads.
    let err = resolve(&["--repetition-penalty", "0"]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid --repetition-penalty 0"),
        "{err}"
    );
    std::fs::write(
        model.join("generation_config.json"),
        r#"{"suppress_tokens": [3]}"#,
    )
    .unwrap();
    let err = resolve(&[]).unwrap_err();
    assert!(matches!(err, SettingsError::GenerationConfig(_)), "{err}");
    assert!(err.to_string().contains("`suppress_tokens` = [3]"), "{err}");
    assert!(resolve(&["--generation-config", "off"]).is_ok());
}

#[test]
fn a_family_too_long_for_split_file_names_is_refused_before_anything_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let long = "F".repeat(verisample::family::MAX_FAMILY_LEN + 1);
    let args = [
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--family",
        &long,
    ];
    let err = Settings::resolve(&parse(&args)).unwrap_err().to_string();
    assert!(err.contains("1 to 128 ASCII letters"), "{err}");
    let ok = "F".repeat(verisample::family::MAX_FAMILY_LEN);
    let args = [&args[..5], &[ok.as_str()][..]].concat();
    let err = Settings::resolve(&parse(&args))
        .err()
        .map(|e| e.to_string());
    assert!(!err.unwrap_or_default().contains("ASCII letters"));
}

#[test]
fn limit_comes_from_the_flag_or_the_config_file_and_is_not_part_of_the_run_identity() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = fixture(dir.path());
    let (m, d) = (model.to_str().unwrap(), data.to_str().unwrap());
    let config = dir.path().join("job.toml");
    std::fs::write(&config, "limit = 20\n").unwrap();
    let cfg = config.to_str().unwrap();
    let resolve = |extra: &[&str]| {
        let mut args = vec!["--model", m, "--data", d];
        args.extend(extra);
        Settings::resolve(&parse(&args)).unwrap()
    };
    assert_eq!(resolve(&["--config", cfg]).limit, Some(20));
    assert_eq!(resolve(&["--config", cfg, "--limit", "5"]).limit, Some(5));
    let plain = resolve(&[]);
    let limited = resolve(&["--limit", "5"]);
    assert_eq!(plain.canonical(), limited.canonical());
    let fp = |s: &Settings| fingerprint(s.canonical(), Default::default(), Vec::new()).sha256;
    assert_eq!(fp(&plain), fp(&limited));
    // run.json of a run without it has no `limit` key, as before the flag existed.
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json.get("limit").is_none(), "{json}");
    assert_eq!(serde_json::to_value(&limited).unwrap()["limit"], 5);
}
