//! `verisample run --limit N` with the real binary, the bundled tiny model and the bundled
//! sample (48 rows): the splits hold only the first N rows' questions, the summary and
//! run.json name the limit, a later run with a larger limit or none in the same OUT generates
//! only the new rows and writes the splits and JSONL files of a fresh run with that limit or
//! none, and `--limit 0` is refused.
//! The pipeline's properties (prefix equality, shards, duplicates, merge): tests/run_limit.rs.

mod shared_data;
use shared_data::repo;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use verisample::dataset::reader::InputReader;
use verisample::dataset::writer::{read_split, split_files};
use verisample::record::{AcceptedQa, RejectedQa};

const BIN: &str = env!("CARGO_BIN_EXE_verisample");

fn sample() -> PathBuf {
    repo().join("assets/sample/data")
}

/// `verisample run` of the bundled model on the bundled sample into `out`, with `extra` flags.
fn run(out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(sample())
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--max-new-tokens", "48"])
        .args(extra)
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstderr:\n{}",
        out.status,
        text(&out.stderr)
    );
    out
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap()
}

/// The questions of each input row of the sample, by stream position.
fn input_questions() -> Vec<Vec<String>> {
    InputReader::open(&sample().to_string_lossy())
        .unwrap()
        .map(|r| r.unwrap().qa.into_iter().map(|q| q.question).collect())
        .collect()
}

/// Every (position, question) the splits of `out` hold.
fn split_questions(out: &Path) -> BTreeSet<(u64, String)> {
    let position = |clean_meta: &str| {
        let meta: serde_json::Value = serde_json::from_str(clean_meta).unwrap();
        meta["position"].as_u64().unwrap()
    };
    let mut got = BTreeSet::new();
    for split in ["OrandCar_RS_think", "OrandCar_RS_nothink"] {
        for f in split_files(out, split).unwrap_or_default() {
            for r in read_split::<AcceptedQa>(&f).unwrap() {
                let p = position(&r.clean_meta);
                got.extend(r.qa.into_iter().map(|q| (p, q.question)));
            }
        }
    }
    for f in split_files(out, "OrandCar_rejected").unwrap_or_default() {
        for r in read_split::<RejectedQa>(&f).unwrap() {
            let p = position(&r.clean_meta);
            got.extend(r.qa.into_iter().map(|q| (p, q.question)));
        }
    }
    got
}

/// The (position, qa) units of `out`'s generations, cleaning and errors files.
fn logged_units(out: &Path) -> BTreeSet<(u64, Option<u64>)> {
    ["generations.jsonl", "cleaning.jsonl", "errors.jsonl"]
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(out.join(f))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .map(|l| (l["position"].as_u64().unwrap(), l["qa"].as_u64()))
        .collect()
}

/// Every file of `out` whose bytes do not depend on timings or history: the splits and the
/// JSONL files.
fn stable_files(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(out.join("data")).unwrap().flatten() {
        let name = format!("data/{}", e.file_name().to_string_lossy());
        files.insert(name, std::fs::read(e.path()).unwrap());
    }
    for f in ["errors.jsonl", "cleaning.jsonl", "generations.jsonl"] {
        files.insert(f.into(), std::fs::read(out.join(f)).unwrap());
    }
    files
}

/// [`stable_files`] of `a` and `b` byte-identical; the message names the files that differ.
fn assert_same_files(a: &Path, b: &Path) {
    let (fa, fb) = (stable_files(a), stable_files(b));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    let differ: Vec<&String> = fa.keys().filter(|k| fa[*k] != fb[*k]).collect();
    assert!(differ.is_empty(), "differ: {differ:?}");
}

#[test]
fn limit_takes_the_first_rows_says_so_and_a_larger_limit_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let first = ok(run(&out, &["--limit", "3"]), "run --limit 3");
    assert!(!text(&first.stderr).contains("took more rows"));
    let stdout = text(&first.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("accepted "), "{stdout}");
    assert_eq!(
        lines[1],
        "--limit 3: the first 3 of 48 input rows; 45 left out (not read, not errors): the same \
         command without the limit resumes and does them",
        "{stdout}"
    );
    let report = run_json(&out);
    assert_eq!(report["settings"]["limit"], 3);
    assert_eq!(report["stats"]["input_rows"], 3);
    assert_eq!(report["stats"]["limit"]["left_out_rows"], 45);
    assert_eq!(report["stats"]["unread_rows"], 0);
    // The splits hold the questions of the first three rows, and only those; every question
    // of them is in a split or a log.
    let questions = input_questions();
    assert_eq!(questions.len(), 48);
    let want: BTreeSet<(u64, String)> = questions[..3]
        .iter()
        .enumerate()
        .flat_map(|(p, qs)| qs.iter().map(move |q| (p as u64, q.clone())))
        .collect();
    let got = split_questions(&out);
    assert!(!got.is_empty());
    assert!(got.is_subset(&want), "{got:?} not among {want:?}");
    let units = logged_units(&out);
    let positions: BTreeSet<u64> = units.iter().map(|u| u.0).collect();
    assert_eq!(positions, BTreeSet::from([0, 1, 2]), "{units:?}");
    let generated_first = report["stats"]["throughput"]["generated_items"]
        .as_u64()
        .unwrap();
    assert!(generated_first >= 3);
    // --json names the limit too.
    let json = ok(
        run(&out, &["--limit", "3", "--json"]),
        "run --limit 3 --json",
    );
    let summary: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(summary["limit"]["limit"], 3);
    assert_eq!(summary["limit"]["left_out_rows"], 45);
    assert_eq!(summary["input_rows"], 3);
    assert_eq!(summary["generated"], 0);

    // A larger limit in the same OUT resumes: it generates only for the rows after the first
    // three, and writes what a fresh run with that limit writes.
    ok(run(&out, &["--limit", "6"]), "run --limit 6");
    let resumed = run_json(&out);
    assert_eq!(resumed["replayed_results"], generated_first);
    let fresh = tmp.path().join("fresh");
    ok(run(&fresh, &["--limit", "6"]), "fresh run --limit 6");
    let fresh_report = run_json(&fresh);
    let generated = |r: &serde_json::Value| {
        r["stats"]["throughput"]["generated_items"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        generated_first + generated(&resumed),
        generated(&fresh_report)
    );
    assert_same_files(&out, &fresh);
    assert_eq!(resumed["stats"]["limit"]["left_out_rows"], 42);
    assert_eq!(
        logged_units(&out).iter().map(|u| u.0).max(),
        Some(5),
        "rows 0..6"
    );

    // Then without --limit: the rest, and what a fresh full run writes.
    let rest = ok(run(&out, &[]), "run without --limit");
    assert!(
        !text(&rest.stdout).contains("--limit"),
        "{}",
        text(&rest.stdout)
    );
    let finished = run_json(&out);
    assert!(finished["settings"].get("limit").is_none(), "{finished}");
    assert!(finished["stats"].get("limit").is_none(), "{finished}");
    assert_eq!(finished["stats"]["input_rows"], 48);
    let full = tmp.path().join("full");
    ok(run(&full, &[]), "fresh full run");
    let full_report = run_json(&full);
    assert_eq!(
        finished["replayed_results"].as_u64().unwrap() + generated(&finished),
        generated(&full_report)
    );
    assert_eq!(
        finished["replayed_results"].as_u64(),
        Some(generated_first + generated(&resumed))
    );
    assert_same_files(&out, &full);

    // A limit the input does not reach cuts nothing: no warning over the full run.
    let same = ok(
        run(&out, &["--limit", "48"]),
        "run --limit 48 over a full run",
    );
    assert!(
        !text(&same.stderr).contains("took more rows"),
        "{}",
        text(&same.stderr)
    );
    // A smaller limit over the finished full run writes only the first rows, generating
    // nothing, and warns that the splits shrink.
    let shrunk = ok(
        run(&out, &["--limit", "2"]),
        "run --limit 2 over a full run",
    );
    let err = text(&shrunk.stderr);
    assert!(
        err.contains("holds a finished run that took more rows than --limit 2"),
        "{err}"
    );
    let shrunk_report = run_json(&out);
    assert_eq!(generated(&shrunk_report), 0);
    assert_eq!(shrunk_report["stats"]["input_rows"], 2);
}

#[test]
fn limit_zero_or_negative_is_refused_before_anything_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let zero = run(&out, &["--limit", "0"]);
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero.stderr));
    let stderr = text(&zero.stderr);
    assert!(
        stderr.contains("error: invalid --limit 0: must be at least 1"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing written");
    let negative = run(&out, &["--limit", "-2"]);
    assert_eq!(
        negative.status.code(),
        Some(2),
        "{}",
        text(&negative.stderr)
    );
    // In the config file too.
    let config = tmp.path().join("job.toml");
    std::fs::write(&config, "limit = 0\n").unwrap();
    let from_file = run(&out, &["--config", config.to_str().unwrap()]);
    assert_eq!(from_file.status.code(), Some(2));
    assert!(
        text(&from_file.stderr).contains("invalid --limit 0: must be at least 1"),
        "{}",
        text(&from_file.stderr)
    );
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = text(&help.stdout);
    assert!(
        help.contains("--limit <N>") && help.contains("Take only the first N input rows"),
        "{help}"
    );
}
