//! Unit tests of the JSONL readers of `prepare`.

use super::*;

#[test]
fn text_of_json_values() {
    let cases = [
        (Value::Null, None),
        (Value::from("x"), Some("x")),
        (Value::from(108), Some("108")),
        (serde_json::json!([1, {"a": 2}]), Some("[1,{\"a\":2}]")),
    ];
    for (v, want) in cases {
        assert_eq!(as_text(&v).as_deref(), want, "{v}");
    }
}

#[test]
fn labels_filter_and_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("labels.jsonl");
    std::fs::write(
        &p,
        "{\"file\": \"train/a.jpg\", \"split\": \"train\", \"label\": \"2250\", \"width\": 108, \"family\": \"x\"}\n\n{\"file\": \"val/b.jpg\", \"split\": \"val\", \"label\": 60}\n",
    )
    .unwrap();
    let all = labels_rows(&p, "Q?", None).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].qa[0].answers, ["60"]);
    let train = labels_rows(&p, "Q?", Some("train")).unwrap();
    assert_eq!(train.len(), 1);
    assert_eq!(train[0].image_rel, "train/a.jpg");
    assert_eq!(train[0].qa[0].question, "Q?");
    let keys: Vec<&str> = train[0].provenance.keys().map(String::as_str).collect();
    assert_eq!(keys, ["file", "orig_family", "split", "width"]);
    // A split no line has: the error names the splits there are.
    let e = labels_rows(&p, "Q?", Some("nosuch")).unwrap_err();
    assert!(matches!(e, DatasetError::Choice(_)), "{e:?}");
    assert!(
        e.to_string()
            .ends_with("has split \"nosuch\"; the splits present: train, val"),
        "{e}"
    );
}

#[test]
fn bad_label_lines_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("labels.jsonl");
    std::fs::write(
        &p,
        "{\"file\": \"a.jpg\", \"label\": \"1\"}\n{\"file\": \"b.jpg\"}\n",
    )
    .unwrap();
    let e = labels_rows(&p, "Q", None).unwrap_err().to_string();
    assert!(e.ends_with("labels.jsonl:2: missing `label`"), "{e}");
    std::fs::write(&p, "not json\n").unwrap();
    assert!(labels_rows(&p, "Q", None)
        .unwrap_err()
        .to_string()
        .contains(":1: invalid JSON"));
    // An integral float is the integer (as a parquet float answer); `1e3` means 1000.
    for (integral, want) in [("1500.0", "1500"), ("1e3", "1000"), ("-0.0", "0")] {
        std::fs::write(
            &p,
            format!("{{\"file\": \"a.jpg\", \"label\": {integral}}}\n"),
        )
        .unwrap();
        let rows = labels_rows(&p, "Q", None).unwrap();
        assert_eq!(rows[0].qa[0].answers, [want], "{integral}");
    }
    for lossy in ["1.50", "12345678901234567890123"] {
        std::fs::write(&p, format!("{{\"file\": \"a.jpg\", \"label\": {lossy}}}\n")).unwrap();
        let e = labels_rows(&p, "Q", None).unwrap_err().to_string();
        assert!(e.contains("labels.jsonl:1: `label` is the number"), "{e}");
    }
    std::fs::write(&p, b"{\"file\": \"a.jpg\", \"label\": \"1\"}\n\xff\n").unwrap();
    let e = labels_rows(&p, "Q", None).unwrap_err().to_string();
    assert!(e.contains("labels.jsonl:2: "), "{e}");
}

#[test]
fn qa_jsonl_groups_by_image() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("qa.jsonl");
    std::fs::write(
        &p,
        "{\"image\": \"x.png\", \"question\": \"q1\", \"answer\": \"a1\", \"source\": \"s\"}\n{\"image\": \"y.png\", \"question\": \"q2\", \"answer\": \"a2\"}\n{\"image\": \"x.png\", \"question\": \"q3\", \"answer\": \"a3\", \"lang\": \"en\"}\n",
    )
    .unwrap();
    let rows = qa_jsonl_rows(&p).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r.image_rel.as_str())
            .collect::<Vec<_>>(),
        ["x.png", "y.png"]
    );
    assert_eq!(
        rows[0]
            .qa
            .iter()
            .map(|q| q.question.as_str())
            .collect::<Vec<_>>(),
        ["q1", "q3"]
    );
    assert_eq!(
        rows[0].qa[0].extra.get("orig_source"),
        Some(&Value::from("s"))
    );
    assert_eq!(rows[0].qa[1].extra.get("lang"), Some(&Value::from("en")));
}
