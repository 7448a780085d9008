//! The command line surface: exit codes and help texts.

mod dataset_util;

use dataset_util::bin;

#[test]
fn usage_errors_exit_2_and_help_has_examples() {
    let out = bin().args(["prepare", "--out", "o"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .args([
            "prepare",
            "--labels",
            "/nonexistent/labels.jsonl",
            "--family",
            "OrandCar",
            "--out",
            "o",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"));
    let out = bin()
        .args(["inspect", "/nonexistent/dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin().args(["verify", "/nonexistent/out"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/out is not an output folder")
    );
    // A file (say a split's parquet) is not taken for a missing folder.
    let file = tempfile::NamedTempFile::new().unwrap();
    let out = bin()
        .args(["verify", file.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not an output folder (a file"), "{err}");
    // A merge of shard folders that do not exist is a usage error too.
    let out = bin()
        .args([
            "merge",
            "/nonexistent/shard-0",
            "--out",
            "/nonexistent/merged",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for cmd in [
        "prepare", "inspect", "run", "verify", "check", "merge", "bench",
    ] {
        let out = bin().args([cmd, "--help"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{cmd}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("Example"),
            "{cmd} --help has no example:\n{help}"
        );
        assert!(
            help.contains(&format!("verisample {cmd}")),
            "{cmd}:\n{help}"
        );
    }
}

/// Catches: `verisample --help` saying `prepare` works only "from images plus a labels JSONL"
/// (leaving out --jsonl and --parquet) and `check` "against one reference" although `--ref`
/// repeats (newcomer finding).
#[test]
fn the_command_list_names_every_prepare_input_and_several_references() {
    let out = bin().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    let line = |cmd: &str| {
        help.lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("no {cmd} line in:\n{help}"))
            .to_string()
    };
    let prepare = line("prepare");
    for flag in ["--labels", "--jsonl", "--parquet"] {
        assert!(prepare.contains(flag), "{prepare}");
    }
    let check = line("check");
    assert!(
        check.contains("one or more references") && check.contains("--ref"),
        "{check}"
    );
}

#[test]
fn inspect_of_an_unreadable_file_reports_it_and_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("x.parquet");
    std::fs::write(&f, b"PAR1 not really").unwrap();
    let out = bin().arg("inspect").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNREADABLE"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 parquet file(s) unreadable") && err.contains("x.parquet"),
        "{err}"
    );
}

#[test]
fn check_names_the_default_verifier_for_an_unregistered_family() {
    let out = bin()
        .args([
            "check", "--family", "MyBench", "--pred", "12", "--ref", "12",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no verifier is registered for family \"MyBench\"") && err.contains("(alnum)"),
        "{err}"
    );
    let out = bin()
        .args([
            "check", "--family", "OrandCar", "--pred", "12", "--ref", "12",
        ])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("no verifier is registered"));
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.contains("family:     OrandCar"), "{human}");
}

#[test]
fn check_takes_several_references() {
    let out = bin()
        .args([
            "check",
            "--verifier",
            "anls",
            "--pred",
            "Main Stret",
            "--ref",
            "elm road",
            "--ref",
            "main street",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["reference"], r#"["elm road","main street"]"#);
    assert_eq!(report["verifier"], "anls:0.5");
    assert!(
        report["family"].is_null(),
        "--verifier chose the verifier, not a family: {report}"
    );
    assert_eq!(report["accepted"], true);
    let score = report["candidates"][0]["score"].as_f64().unwrap();
    assert_eq!(
        format!("{score:.4}"),
        "0.9091",
        "the best reference's score"
    );
    // No --ref at all is a usage error.
    let out = bin().args(["check", "--pred", "12"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// With reasoning on, an accepted answer that came without a `<think>` block is written to
/// `_RS_nothink` only; `verify` of that output recomputes every decision (it required an
/// `_RS_think` twin for every `_RS_nothink` entry: newcomer finding).
#[test]
fn an_answer_without_a_reasoning_trace_is_in_nothink_only_and_verifies() {
    use dataset_util::{write_input, InputSpec};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let png = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/traceless/digit_one.png"),
    )
    .unwrap();
    write_input(
        &data.join("one.parquet"),
        &[InputSpec::new(png, &[("What?", "1")])],
        1,
    );
    let out = dir.path().join("out");
    let run = bin()
        .args(["run", "-q", "--json", "--data"])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let splits = &summary["split_items"];
    assert_eq!(splits["TestSet_RS_nothink"], 1, "{summary}");
    assert!(splits.get("TestSet_RS_think").is_none(), "{summary}");
    let verify = bin().arg("verify").arg(&out).output().unwrap();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}
