//! The `run` process itself. SIGTERM exits 143 (128 + 15) and SIGINT 130,
//! and `/proc/cpuinfo` is read once per run, not once per matmul. The real binary with the
//! bundled tiny model (`assets/model`) on a small input made here; the cpuinfo test skips
//! without `strace` (the shared skip helper: a failure under CI). The signal arrives while the
//! run surely runs: the test hook `VERISAMPLE_TEST_KILL_AT=generation:1:wait` holds the run
//! after its first journaled answer until a stop is requested.

mod dataset_util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dataset_util::{png, skip, write_input, InputSpec};

/// The bundled model (committed with the repository).
fn model() -> PathBuf {
    let m = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/model");
    assert!(m.join("config.json").exists(), "no {}", m.display());
    m
}

/// An input of `rows` rows in `dir/ds`.
fn input(dir: &Path, rows: usize) -> PathBuf {
    let ds = dir.join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    let specs: Vec<InputSpec> = (0..rows)
        .map(|i| {
            InputSpec::new(
                png(24, 12, i as u8),
                &[("What is written in the image?", "12")],
            )
        })
        .collect();
    write_input(&ds.join("train.parquet"), &specs, 16);
    ds
}

/// The arguments of a small CPU `run`.
fn run_args(model: &Path, data: &Path, out: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = ["run", "--device", "cpu", "--max-new-tokens", "16"]
        .iter()
        .map(Into::into)
        .collect();
    for (flag, value) in [("--model", model), ("--data", data), ("--out", out)] {
        args.push(flag.into());
        args.push(value.into());
    }
    args
}

const BIN: &str = env!("CARGO_BIN_EXE_verisample");

#[test]
fn sigterm_exits_143_and_sigint_130() {
    let model = model();
    let tmp = tempfile::tempdir().unwrap();
    let data = input(tmp.path(), 256);
    for (signal, want) in [("TERM", 143), ("INT", 130)] {
        let out = tmp.path().join(format!("out-{signal}"));
        let mut child = Command::new(BIN)
            .args(run_args(&model, &data, &out))
            .args(["--progress", "jsonl"])
            .env("VERISAMPLE_TEST_KILL_AT", "generation:1:wait")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The engine's first log line comes after the signal handler is installed; the hook
        // then holds the run after its first answer until the signal has been handled.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        for line in lines.by_ref() {
            if line.unwrap_or_default().contains("KV cache pool allocated") {
                break;
            }
        }
        let _ = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status();
        for _ in lines {}
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(want), "SIG{signal}: {status:?}");
    }
}

#[test]
fn proc_cpuinfo_is_read_once_per_run() {
    let model = model();
    if Command::new("strace").arg("-V").output().is_err() {
        skip("no strace");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = input(tmp.path(), 4);
    let trace = tmp.path().join("trace.txt");
    let status = Command::new("strace")
        .args(["-f", "-e", "trace=openat", "-o"])
        .arg(&trace)
        .arg(BIN)
        .args(run_args(&model, &data, &tmp.path().join("out")))
        .args(["--progress", "none"])
        .env_remove("RAYON_NUM_THREADS")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let opens = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("/proc/cpuinfo"))
        .count();
    assert_eq!(opens, 1, "/proc/cpuinfo opened {opens} times");
}
