//! `verisample prepare --images-root`: images given by absolute path (as `datasets`'
//! `to_parquet` writes them) are read from under the root, as `run --images-root` reads them;
//! without it they are refused, and paths out of the root are refused with it.

mod dataset_util;

use verisample::dataset::reader::InputReader;

use dataset_util::{bin, png};

/// Catches: `prepare` refusing every absolute image path although its hint names
/// `--images-root` (the flag did not exist), or reading a path out of the root.
#[test]
fn absolute_image_paths_are_read_under_images_root_only() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("imgs")).unwrap();
    let a = png(5, 4, 1);
    std::fs::write(root.join("imgs/a.png"), &a).unwrap();
    std::fs::write(tmp.path().join("outside.png"), png(3, 3, 2)).unwrap();
    let line = |image: &std::path::Path| {
        let line =
            serde_json::json!({"image": image.to_str().unwrap(), "question": "Q1", "answer": "1"});
        format!("{line}\n")
    };
    let prepare = |image: &std::path::Path, out: &str, root_flag: bool| {
        let jsonl = tmp.path().join(format!("{out}.jsonl"));
        std::fs::write(&jsonl, line(image)).unwrap();
        let mut cmd = bin();
        cmd.args(["-q", "prepare", "--jsonl"])
            .arg(&jsonl)
            .args(["--family", "Mine", "--out"])
            .arg(tmp.path().join(out));
        if root_flag {
            cmd.arg("--images-root").arg(&root);
        }
        cmd.output().unwrap()
    };
    let inside = root.join("imgs/a.png");
    // Without the flag an absolute path is refused (its line left out, the only one: exit 1).
    let refused = prepare(&inside, "without", false);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("absolute path"), "{stderr}");
    // With it, a path out of the root is refused all the same.
    let out_of_root = prepare(&tmp.path().join("outside.png"), "outside", true);
    assert_eq!(out_of_root.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out_of_root.stderr);
    assert!(stderr.contains("is outside --images-root"), "{stderr}");

    let st = prepare(&inside, "with", true);
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{stderr}");
    let rows: Vec<_> = InputReader::open(tmp.path().join("with").to_str().unwrap())
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].image.bytes.as_deref(), Some(a.as_slice()));
    assert_eq!(rows[0].qa[0].question, "Q1");
}
