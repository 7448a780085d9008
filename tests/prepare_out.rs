//! `verisample prepare` holds its OUT's lock, as `run` and `merge` do: a second process
//! writing into the same folder is refused before anything runs.

mod dataset_util;

use dataset_util::{bin, png};

/// Catches: two prepares of one split into one folder both exiting 0 while one's shards
/// silently replace the other's (newcomer finding), or a prepare leaving the lock file.
#[test]
fn a_prepare_into_a_folder_another_process_holds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = one_line_jsonl(tmp.path());
    let out = tmp.path().join("out");
    let prepare = || {
        bin()
            .args(["-q", "prepare", "--jsonl"])
            .arg(&jsonl)
            .args(["--family", "Mine", "--out"])
            .arg(&out)
            .output()
            .unwrap()
    };
    std::fs::create_dir(&out).unwrap();
    let lock = std::fs::File::create(out.join(".verisample.lock")).unwrap();
    lock.try_lock().unwrap();
    let busy = prepare();
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert_eq!(busy.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("another verisample process is running"),
        "{stderr}"
    );
    assert!(
        !out.join("data").exists(),
        "the refused prepare wrote in OUT"
    );
    // Released, its file left behind (as a killed prepare leaves it): no obstacle.
    drop(lock);

    let st = prepare();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert!(!left.contains(&".verisample.lock".to_string()), "{left:?}");
    assert!(left.contains(&"data".to_string()), "{left:?}");
    // The split is now there: a second prepare is refused under the lock as before it.
    let again = prepare();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds split train"));
}

/// The `error:` line of a finished command.
fn error_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default()
        .to_string()
}

/// `tmp/src/qa.jsonl`: one good line, its image `tmp/src/a.png`.
fn one_line_jsonl(tmp: &std::path::Path) -> std::path::PathBuf {
    let src = tmp.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.png"), png(5, 4, 1)).unwrap();
    let jsonl = src.join("qa.jsonl");
    std::fs::write(
        &jsonl,
        "{\"image\": \"a.png\", \"question\": \"Q\", \"answer\": \"1\"}\n",
    )
    .unwrap();
    jsonl
}

/// `verisample prepare --jsonl` of one good line into `out`.
fn prepare_into(tmp: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    let jsonl = one_line_jsonl(tmp);
    bin()
        .args(["prepare", "--jsonl"])
        .arg(&jsonl)
        .args(["--family", "Mine", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// Catches: `prepare --out R` into a folder it cannot write exiting 1 with `error: journal
/// R/.verisample.lock: Read-only file system` (an internal term) where `run` and `merge`
/// exit 2 with `invalid --out R: is not writable` (newcomer finding).
#[test]
fn an_out_prepare_cannot_write_is_refused_as_run_refuses_it() {
    let tmp = tempfile::tempdir().unwrap();
    // A read-only folder (meaningless as root, who writes anyway: see below).
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), "").is_err() {
        let st = prepare_into(tmp.path(), &ro);
        assert_eq!(st.status.code(), Some(2), "{}", error_line(&st));
        assert!(
            error_line(&st).starts_with(&format!(
                "error: invalid --out {}: is not writable (",
                ro.display()
            )),
            "{}",
            error_line(&st)
        );
        assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 0);
    } else {
        println!("note: running as root, the read-only folder is skipped");
    }
    // A folder that cannot be created even as root: /proc takes no new files. `run` says the
    // same of it, word for word.
    if cfg!(target_os = "linux") {
        let out = std::path::Path::new("/proc/verisample-prepare-test/out");
        let st = prepare_into(tmp.path(), out);
        assert_eq!(st.status.code(), Some(2), "{}", error_line(&st));
        let want = "error: invalid --out /proc/verisample-prepare-test/out: cannot be created: \
                    /proc is not writable (";
        assert!(error_line(&st).starts_with(want), "{}", error_line(&st));
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let run = bin()
            .arg("run")
            .arg("--model")
            .arg(repo.join("assets/model"))
            .arg("--data")
            .arg(repo.join("assets/sample/data"))
            .arg("--out")
            .arg(out)
            .args(["--device", "cpu"])
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(2));
        assert_eq!(error_line(&run), error_line(&st));
    }
}
