//! `verisample prepare` holds its OUT's lock, as `run` and `merge` do: a second process
//! writing into the same folder is refused before anything runs.

mod dataset_util;

use dataset_util::{bin, png};

/// Catches: two prepares of one split into one folder both exiting 0 while one's shards
/// silently replace the other's (newcomer finding), or a prepare leaving the lock file.
#[test]
fn a_prepare_into_a_folder_another_process_holds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.png"), png(5, 4, 1)).unwrap();
    let jsonl = src.join("qa.jsonl");
    std::fs::write(
        &jsonl,
        "{\"image\": \"a.png\", \"question\": \"Q\", \"answer\": \"1\"}\n",
    )
    .unwrap();
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
