//! Where the integration tests find the real data (`orand-car-a/`): `$VERISAMPLE_SHARED_DATA`,
//! else `<repo>/../../shared/data` (a git worktree), else `<repo>/../shared/data` (a clone with
//! `shared/` beside it).
//!
//! A test that needs it calls [`require_shared_data`]: without the data it prints
//! "skipped: …", appends a line to `$VERISAMPLE_SKIP_LOG` (`.ci/run` counts them) and returns
//! `None`; under CI (`CI` set, as `.ci/run` runs) it panics instead: nothing may skip there.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

/// The folder of the crate under test (`CARGO_MANIFEST_DIR`): the repository root for the
/// integration tests of the `verisample` crate.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shared data folder holding `orand-car-a/labels.jsonl`, if any.
pub fn shared_data() -> Option<PathBuf> {
    let repo = repo();
    let candidates = [
        std::env::var_os("VERISAMPLE_SHARED_DATA").map(PathBuf::from),
        Some(repo.join("../../shared/data")),
        Some(repo.join("../shared/data")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("orand-car-a/labels.jsonl").is_file())
}

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Skip the calling test: under CI panic (nothing may skip there); else print
/// "skipped: {why}" and record it in `$VERISAMPLE_SKIP_LOG`.
pub fn skip(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unknown test")
        .to_string();
    assert!(!in_ci(), "{test}: would skip under CI: {why}");
    println!("skipped: {why}");
    if let Some(log) = std::env::var_os("VERISAMPLE_SKIP_LOG") {
        let line = format!("{test}: {why}\n");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .expect("append to $VERISAMPLE_SKIP_LOG");
    }
}

/// [`shared_data`], or `None` after [`skip`] (a panic under CI). Catches: a CI run without
/// `../shared/data` passing by skipping every test that reads it.
pub fn require_shared_data() -> Option<PathBuf> {
    let found = shared_data();
    if found.is_none() {
        skip("no ../shared/data");
    }
    found
}
