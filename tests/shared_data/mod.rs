//! Where the integration tests find the real data (`orand-car-a/`): `$VERISAMPLE_SHARED_DATA`,
//! else `<repo>/../../shared/data` (a git worktree), else `<repo>/../shared/data` (a clone with
//! `shared/` beside it). Tests that need it print "skipped: no ../shared/data" when it is absent.

use std::path::PathBuf;

/// The shared data folder holding `orand-car-a/labels.jsonl`, if any.
pub fn shared_data() -> Option<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
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
