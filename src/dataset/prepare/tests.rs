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
        "{\"file\": \"train/a.jpg\", \"split\": \"train\", \"label\": \"2250\", \"width\": 108, \"family\": \"x\", \"clean_meta\": 1}\n\n{\"file\": \"val/b.jpg\", \"split\": \"val\", \"label\": 60}\n",
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
    // `family` is prepare's own column, `clean_meta` one of `run`'s splits: both renamed.
    assert_eq!(
        keys,
        ["file", "orig_clean_meta", "orig_family", "split", "width"]
    );
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
    // A label that is no text leaves its row out (named), as a parquet answer of a type
    // `run` cannot read does: not the whole prepare.
    for (value, want) in [
        (
            "1.50",
            "`label` is the number 1.5, whose exact text JSON does not keep",
        ),
        ("12345678901234567890123", "`label` is the number 1.23"),
        ("true", "`label` must be a string, got true"),
    ] {
        std::fs::write(&p, format!("{{\"file\": \"a.jpg\", \"label\": {value}}}\n")).unwrap();
        let rows = labels_rows(&p, "Q", None).unwrap();
        let (field, message) = rows[0].qa[0].unread.clone().expect(value);
        assert_eq!(field, "qa[0].answer");
        assert!(message.starts_with(want), "{value}: {message}");
    }
    // A file path that is no text is a malformed line.
    std::fs::write(&p, "{\"file\": 7.5, \"label\": \"1\"}\n").unwrap();
    let e = labels_rows(&p, "Q", None).unwrap_err().to_string();
    assert!(
        e.contains("labels.jsonl:1: `file` is the number 7.5"),
        "{e}"
    );
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

/// Catches: a bool or fractional `answer` (or `question`) of one line aborting the whole
/// `prepare --jsonl`; the question is left out, named by its field in its row.
#[test]
fn qa_jsonl_values_that_are_no_text_leave_their_question_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("qa.jsonl");
    std::fs::write(
        &p,
        "{\"image\": \"x.png\", \"question\": \"q1\", \"answer\": \"a1\"}\n\
         {\"image\": \"x.png\", \"question\": \"q2\", \"answer\": true}\n\
         {\"image\": \"y.png\", \"question\": \"q3\", \"answer\": 2.5}\n\
         {\"image\": \"y.png\", \"question\": \"q4\", \"answer\": [\"b\", false]}\n\
         {\"image\": \"y.png\", \"question\": {\"t\": 1}, \"answer\": \"a5\"}\n\
         {\"image\": \"y.png\", \"question\": \"q6\", \"answer\": 3.0}\n",
    )
    .unwrap();
    let rows = qa_jsonl_rows(&p).unwrap();
    let unread: Vec<Vec<Option<(&str, &str)>>> = rows
        .iter()
        .map(|r| {
            r.qa.iter()
                .map(|q| q.unread.as_ref().map(|(f, m)| (f.as_str(), m.as_str())))
                .collect()
        })
        .collect();
    let fraction = "`answer` is the number 2.5, whose exact text JSON does not keep: write it as \
                    a string (e.g. \"1.50\")";
    assert_eq!(
        unread,
        [
            vec![
                None,
                Some(("qa[1].answer", "`answer` must be a string, got true"))
            ],
            vec![
                Some(("qa[0].answer", fraction)),
                Some(("qa[1].answer", "`answer[]` must be a string, got false")),
                Some((
                    "qa[2].question",
                    "`question` must be a string, got {\"t\":1}"
                )),
                None,
            ],
        ]
    );
    assert_eq!(rows[1].qa[3].answers, ["3"]);
}

/// Catches: a `--jsonl` line without its `answer`, `question` or `image` aborting the whole
/// prepare (`qa.jsonl:3: missing `answer``) where a null answer only leaves its question out.
#[test]
fn qa_jsonl_lines_without_a_key_leave_their_question_or_row_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("qa.jsonl");
    std::fs::write(
        &p,
        "{\"image\": \"x.png\", \"question\": \"q1\", \"answer\": \"a1\"}\n\
         {\"image\": \"x.png\", \"question\": \"q2\"}\n\
         {\"image\": \"x.png\", \"answer\": \"a3\"}\n\
         {\"question\": \"q4\", \"answer\": \"a4\"}\n\
         {\"image\": null, \"question\": \"q5\", \"answer\": \"a5\"}\n",
    )
    .unwrap();
    let rows = qa_jsonl_rows(&p).unwrap();
    let unread = |q: &PendingQa| q.unread.clone().map(|(f, m)| format!("{f}: {m}"));
    assert_eq!(
        rows[0].qa.iter().map(unread).collect::<Vec<_>>(),
        [
            None,
            Some("qa[1].answer: missing `answer`".to_string()),
            Some("qa[2].question: missing `question`".to_string()),
        ]
    );
    let origin = |n: usize| format!("{}:{n}", p.display());
    let own_rows: Vec<_> = rows[1..]
        .iter()
        .map(|r| (r.origin.clone(), r.unread.clone(), r.qa.len()))
        .collect();
    assert_eq!(
        own_rows,
        [
            (
                origin(4),
                Some(("image".to_string(), "missing `image`".to_string())),
                0
            ),
            (
                origin(5),
                Some((
                    "image".to_string(),
                    "`image` must be a string, got null".to_string()
                )),
                0
            ),
        ]
    );
    // A line that is not JSON still ends the prepare.
    std::fs::write(&p, "{\"image\": \"x.png\"\n").unwrap();
    let e = qa_jsonl_rows(&p).unwrap_err().to_string();
    assert!(e.contains("qa.jsonl:1: invalid JSON"), "{e}");
}

/// Catches: numbers written as text, a mixed column typed by its first value, an integer
/// beyond a double's exact range silently rounded into a float column.
#[test]
fn provenance_columns_take_the_kind_of_their_values() {
    use serde_json::json;
    let kind = |values: &[Value]| ColumnKind::of(values.iter());
    assert_eq!(kind(&[json!(108), Value::Null, json!(-3)]), ColumnKind::Int);
    assert_eq!(kind(&[json!(1.5), json!(2)]), ColumnKind::Float);
    assert_eq!(kind(&[json!(true), json!(false)]), ColumnKind::Bool);
    assert_eq!(kind(&[json!("a"), json!("b")]), ColumnKind::Text);
    assert_eq!(kind(&[json!(1), json!("1")]), ColumnKind::Text);
    assert_eq!(kind(&[json!(true), json!(1)]), ColumnKind::Text);
    assert_eq!(kind(&[json!([1, 2])]), ColumnKind::Text);
    assert_eq!(kind(&[json!(0.5), json!(1_i64 << 60)]), ColumnKind::Text);
    assert_eq!(kind(&[json!(u64::MAX)]), ColumnKind::Text);
    assert_eq!(kind(&[Value::Null]), ColumnKind::Text);
    assert_eq!(kind(&[]), ColumnKind::Text);
    let ints = ColumnKind::Int.array([Some(&json!(7)), None, Some(&Value::Null)].into_iter());
    let ints = ints.as_any().downcast_ref::<Int64Array>().unwrap();
    use arrow::array::Array as _;
    assert_eq!((ints.value(0), ints.null_count()), (7, 2));
    let text = ColumnKind::Text.array([Some(&json!([2, {"bbox": [1]}]))].into_iter());
    let text = text.as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(text.value(0), r#"[2,{"bbox":[1]}]"#);
}
