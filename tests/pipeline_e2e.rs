//! End-to-end tests of the real `verisample run` binary with the bundled tiny model and the
//! bundled sample (the 78 OrandCar val images): kill -9 at three points and resume to
//! byte-identical outputs, Ctrl-C exits 130 and SIGTERM 143 and both resume, and the run works with no network.
//!
//! They run the binary cargo built (or `VERISAMPLE_E2E_BIN`, an installed one) on the assets
//! (`assets/model`, `assets/sample/data`, or the folders named by `VERISAMPLE_E2E_MODEL` /
//! `VERISAMPLE_E2E_DATA`); a missing binary, a `run` without the flags used here or missing
//! assets fail the test (they never turn it into a no-op). `VERISAMPLE_E2E_ARGS` adds flags
//! to every run (e.g. `--max-new-tokens 16` for a random-weight fixture). Kill points use the
//! documented test hook `VERISAMPLE_TEST_KILL_AT=<stage>:<n>[:torn]` (src/pipeline/control.rs).

mod shared_data;
use shared_data::repo;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Files whose bytes legitimately differ between runs: `run.json` (timings, throughput,
/// resume counts, the output path) is compared without those fields, `chart.svg` and the
/// card `README.md` (they show throughput over time) and `journal.bin` (the run's history,
/// kills and resumes included) for presence. Every other file is compared byte for byte.
const VOLATILE: [&str; 4] = ["run.json", "chart.svg", "README.md", "journal.bin"];

/// The binary and assets; panics when any is missing. Catches: a binary whose `run` lost a
/// flag (or is not built) turning every test here into a no-op that passes.
fn setup() -> (PathBuf, PathBuf, PathBuf) {
    let bin = std::env::var_os("VERISAMPLE_E2E_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_verisample")),
        PathBuf::from,
    );
    let help = Command::new(&bin)
        .args(["run", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(help.status.success(), "`run --help` failed: {help:?}");
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--model",
        "--data",
        "--out",
        "--device",
        "--progress",
        "--judge-calibrate",
        "--restart",
    ] {
        assert!(help.contains(flag), "`run --help` has no {flag}:\n{help}");
    }
    let from_env = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| repo().join(default), PathBuf::from)
    };
    let model = from_env("VERISAMPLE_E2E_MODEL", "assets/model");
    let data = from_env("VERISAMPLE_E2E_DATA", "assets/sample/data");
    assert!(
        model.join("config.json").is_file(),
        "no model at {}",
        model.display()
    );
    assert!(data.exists(), "no data at {}", data.display());
    (bin, model, data)
}

fn run_cmd(bin: &Path, model: &Path, data: &Path, out: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("run")
        .arg("--model")
        .arg(model)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args([
            "--device",
            "cpu",
            "--progress",
            "jsonl",
            "--judge-calibrate",
            "10",
        ])
        .args(
            std::env::var("VERISAMPLE_E2E_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env_remove("VERISAMPLE_TEST_KILL_AT");
    c
}

fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {:?}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every file under `out` except the volatile ones, relative path → bytes. Hidden files count:
/// a temporary file a killed run left behind must be gone after the resume.
fn outputs(out: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, acc: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                walk(root, &p, acc);
            } else if !VOLATILE.contains(&name.as_str()) {
                let rel = p
                    .strip_prefix(root)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                acc.insert(rel, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    let mut acc = BTreeMap::new();
    walk(out, out, &mut acc);
    acc
}

/// `run.json` without what legitimately differs between runs of the same job.
fn stable_run_json(out: &Path) -> serde_json::Value {
    let path = out.join("run.json");
    let mut v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap();
    let top = v.as_object_mut().expect("run.json is an object");
    for k in [
        "engine_stats",
        "engine_metrics",
        "peak_memory_bytes",
        "replayed_results",
        "torn_journal_bytes",
    ] {
        assert!(top.remove(k).is_some(), "run.json has no {k}");
    }
    for (section, k) in [("settings", "out"), ("stats", "throughput")] {
        let removed = top
            .get_mut(section)
            .and_then(|s| s.as_object_mut())
            .and_then(|s| s.remove(k));
        assert!(removed.is_some(), "run.json has no {section}.{k}");
    }
    v
}

/// The outputs of run `b` equal those of run `a`: every file byte for byte except
/// [`VOLATILE`], which must exist in both and agree in what is stable. Catches: a resumed
/// run whose dataset card or run report (counts, settings, fingerprint) differs.
fn assert_same(a: &Path, b: &Path, what: &str) {
    let (fa, fb) = (outputs(a), outputs(b));
    assert_eq!(
        fa.keys().collect::<Vec<_>>(),
        fb.keys().collect::<Vec<_>>(),
        "{what}: file sets"
    );
    for (k, v) in &fa {
        assert!(v == &fb[k], "{what}: {k} differs");
    }
    for f in VOLATILE {
        for dir in [a, b] {
            assert!(dir.join(f).is_file(), "{what}: no {f} in {}", dir.display());
        }
    }
    assert_eq!(stable_run_json(a), stable_run_json(b), "{what}: run.json");
    for dir in [a, b] {
        let svg = std::fs::read_to_string(dir.join("chart.svg")).unwrap();
        assert!(
            svg.contains("<svg"),
            "{what}: chart.svg of {}",
            dir.display()
        );
    }
}

#[test]
fn kill_9_at_three_points_then_resume_is_byte_identical() {
    let (bin, model, data) = setup();
    let reference = tempfile::tempdir().unwrap();
    check(
        run_cmd(&bin, &model, &data, reference.path())
            .output()
            .unwrap(),
        "reference run",
    );
    assert!(reference.path().join("README.md").is_file());
    // The judge pass has work, so the `judge:1` kill point is reached (no silent pass).
    let judged = stable_run_json(reference.path())["stats"]["judge"]["judged"].as_u64();
    assert!(judged.is_some_and(|n| n > 0), "judged: {judged:?}");
    for point in [
        "generation:5",
        "generation:9:torn",
        "judge:1",
        "write:1",
        "publish:1",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let killed = run_cmd(&bin, &model, &data, dir.path())
            .env("VERISAMPLE_TEST_KILL_AT", point)
            .output()
            .unwrap();
        assert_eq!(
            killed.status.signal(),
            Some(9),
            "{point}: {:?}",
            killed.status
        );
        if point.starts_with("publish") {
            // Killed while replacing the outputs: run.json says so, not `complete`.
            let run: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap())
                    .unwrap();
            assert_eq!(run["status"], "writing", "{point}");
        } else {
            assert!(!dir.path().join("run.json").exists(), "{point}");
        }
        let resumed = check(
            run_cmd(&bin, &model, &data, dir.path()).output().unwrap(),
            point,
        );
        let _ = resumed;
        assert_same(reference.path(), dir.path(), point);
        let run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
        assert!(
            run["replayed_results"].as_u64().unwrap_or(0) >= 1,
            "{point}: nothing replayed"
        );
        if point.ends_with(":torn") {
            assert!(
                run["torn_journal_bytes"].as_u64().unwrap_or(0) > 0,
                "{point}"
            );
        }
    }
}

#[test]
fn sigint_exits_130_and_sigterm_143_and_both_resume() {
    let (bin, model, data) = setup();
    let reference = tempfile::tempdir().unwrap();
    check(
        run_cmd(&bin, &model, &data, reference.path())
            .output()
            .unwrap(),
        "reference run",
    );
    // SIGTERM (Slurm, Kubernetes) must stop as cleanly as Ctrl-C.
    for signal in ["INT", "TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = run_cmd(&bin, &model, &data, dir.path())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // At the first progress line of the generate phase, freeze the process (SIGSTOP), send
        // the signal, then let it go on (SIGCONT): the signal is handled before the run can
        // do more work, so it always lands mid-run. Catches: a run that ignores the signal
        // and finishes (exit 0), or dies of it (no exit 130).
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap_or_default();
            let generating = line.contains("\"phase\":\"generate\"");
            seen.push(line);
            if generating {
                break;
            }
        }
        let pid = child.id().to_string();
        for sig in ["-STOP", &format!("-{signal}"), "-CONT"] {
            let sent = Command::new("kill").args([sig, &pid]).status().unwrap();
            assert!(sent.success(), "kill {sig} {pid}");
        }
        seen.extend(lines.map(Result::unwrap_or_default));
        let status = child.wait().unwrap();
        let want = if signal == "INT" { 130 } else { 143 };
        assert_eq!(
            status.code(),
            Some(want),
            "SIG{signal}: {status:?}\nstderr:\n{}",
            seen.join("\n")
        );
        assert!(
            !dir.path().join("run.json").exists(),
            "SIG{signal}: an interrupted run wrote run.json"
        );
        check(
            run_cmd(&bin, &model, &data, dir.path()).output().unwrap(),
            "resume",
        );
        assert_same(reference.path(), dir.path(), signal);
    }
}

#[test]
fn runs_without_network() {
    let (bin, model, data) = setup();
    let probe = Command::new("unshare").args(["-rn", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        shared_data::skip("cannot create a network namespace (unshare -rn)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let inner = run_cmd(&bin, &model, &data, dir.path());
    let mut c = Command::new("unshare");
    c.arg("-rn").arg(inner.get_program()).args(inner.get_args());
    check(c.output().unwrap(), "run in an empty network namespace");
    // With strace available, also check that no inet socket was even opened.
    if Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let trace = dir.path().join("strace.txt");
        let out2 = tempfile::tempdir().unwrap();
        let inner = run_cmd(&bin, &model, &data, out2.path());
        let mut c = Command::new("strace");
        c.args(["-f", "-e", "trace=socket", "-o"])
            .arg(&trace)
            .arg(inner.get_program())
            .args(inner.get_args());
        check(c.output().unwrap(), "run under strace");
        let t = std::fs::read_to_string(&trace).unwrap_or_default();
        assert!(!t.contains("AF_INET"), "inet socket opened:\n{t}");
    } else {
        println!("note: strace not available, socket check skipped");
    }
}

#[test]
fn a_reused_output_folder_keeps_no_stale_split_and_verify_refuses_an_unfinished_run() {
    let (bin, model, data) = setup();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    check(run_cmd(&bin, &model, &data, &out).output().unwrap(), "run");
    // Plant a split of an earlier run (another family: run.json records its rows, as a run
    // that wrote it would) and a file that is no split.
    let rejected = out.join("data/OrandCar_rejected-00000-of-00001.parquet");
    let stale = out.join("data/Old_rejected-00000-of-00001.parquet");
    let foreign = out.join("data/notes-00000-of-00001.parquet");
    std::fs::copy(&rejected, &stale).unwrap();
    std::fs::copy(&rejected, &foreign).unwrap();
    let run_json = out.join("run.json");
    let mut report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&run_json).unwrap()).unwrap();
    report["stats"]["split_rows"]["Old_rejected"] = serde_json::json!(1);
    std::fs::write(&run_json, serde_json::to_vec(&report).unwrap()).unwrap();
    check(
        run_cmd(&bin, &model, &data, &out)
            .arg("--restart")
            .output()
            .unwrap(),
        "rerun with --restart",
    );
    assert!(!stale.exists(), "the stale split is still there");
    assert!(
        foreign.exists(),
        "a file that is no output split was removed"
    );
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(!card.contains("Old_rejected"), "{card}");
    check(
        Command::new(&bin).arg("verify").arg(&out).output().unwrap(),
        "verify",
    );

    // A run that never finished (journal, no run.json) is refused by verify.
    std::fs::remove_file(out.join("run.json")).unwrap();
    let v = Command::new(&bin).arg("verify").arg(&out).output().unwrap();
    assert_eq!(v.status.code(), Some(1));
    let err = String::from_utf8_lossy(&v.stderr);
    assert!(err.contains("holds an unfinished run"), "{err}");
}
