//! Unit tests of the server's answers (no socket): routes, 404s, the host check, images,
//! the query string.

use super::rows::tests::{image as image_bytes, output};
use super::*;

fn state(out: &Path) -> State {
    State {
        rows: OutputRows::open(out).unwrap(),
        title: "out".into(),
        choices: Choices::read(out),
        port: 8000,
    }
}

fn get(state: &State, url: &str) -> Reply {
    handle(state, url, Some("127.0.0.1:8000"))
}

#[test]
fn the_page_its_files_and_the_api_are_served() {
    let out = output();
    let s = state(out.path());
    for (url, ty) in [
        ("/", "text/html; charset=utf-8"),
        ("/?split=Fam_rejected&page=2", "text/html; charset=utf-8"),
        ("/view.js", "text/javascript; charset=utf-8"),
        ("/view.css", "text/css; charset=utf-8"),
        ("/api/meta", "application/json"),
    ] {
        let r = get(&s, url);
        assert_eq!((r.status, r.content_type), (200, ty), "{url}");
    }
    let meta: serde_json::Value = serde_json::from_slice(&get(&s, "/api/meta").body).unwrap();
    assert_eq!(meta["splits"][1]["name"], "Fam_rejected");
    assert_eq!(meta["splits"][1]["rows"], 12);
    assert_eq!(meta["families"], serde_json::json!(["Fam"]));
    let r = get(&s, "/api/rows?split=Fam_rejected&per=5&page=2&q=");
    let page: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let rows: Vec<u64> = page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["row"].as_u64().unwrap())
        .collect();
    assert_eq!(rows, [5, 6, 7, 8, 9]);
    assert_eq!(
        (&page["total"], &page["page"], &page["per"]),
        (&12.into(), &2.into(), &5.into())
    );
    assert_eq!(page["rows"][0]["qa"][0]["question"], "q105");
    assert_eq!(page["rows"][0]["kind"], "rejected");
}

#[test]
fn images_are_addressed_by_split_and_row_and_typed_by_their_bytes() {
    let out = output();
    let s = state(out.path());
    let r = get(&s, "/image/Fam_RS_think/3");
    assert_eq!((r.status, r.content_type), (200, "image/png"));
    assert_eq!(r.body, image_bytes(3));
    assert_eq!(get(&s, "/image/Fam_rejected/0").body, image_bytes(100));
    for url in [
        "/image/Fam_RS_think/35",
        "/image/Fam_RS_think/-1",
        "/image/Fam_RS_think/x",
        "/image/Fam_RS_think",
        "/image/..%2Fdata%2FFam_RS_think/0",
        "/image/Fam_RS_think-00000-of-00001.parquet/0",
    ] {
        assert_eq!(get(&s, url).status, 404, "{url}");
    }
    assert_eq!(image_type(&[0xFF, 0xD8, 0xFF, 0xE0]), "image/jpeg");
    assert_eq!(image_type(b"GIF89a.."), "image/gif");
    assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), "image/webp");
    assert_eq!(image_type(b"BM...."), "image/bmp");
    assert_eq!(image_type(b"<svg onload=x>"), "application/octet-stream");
}

#[test]
fn nothing_outside_the_routes_is_served() {
    let out = output();
    std::fs::write(out.path().join("README.md"), "card").unwrap();
    let s = state(out.path());
    for url in [
        "/README.md",
        "/../README.md",
        "/%2e%2e/README.md",
        "/data/Fam_rejected-00000-of-00001.parquet",
        "/run.json",
        "/api",
        "/api/rows/../meta",
        "/view.js/",
        "//etc/passwd",
        "/index.html/../README.md",
    ] {
        assert_eq!(get(&s, url).status, 404, "{url}");
    }
}

#[test]
fn another_host_is_refused() {
    let out = output();
    let s = state(out.path());
    assert_eq!(handle(&s, "/", Some("localhost:8000")).status, 200);
    assert_eq!(handle(&s, "/", None).status, 200, "an HTTP/1.0 client");
    for host in ["evil.example:8000", "127.0.0.1:8001", "127.0.0.1"] {
        assert_eq!(handle(&s, "/api/meta", Some(host)).status, 403, "{host}");
    }
}

#[test]
fn the_query_string_is_decoded_into_a_row_query() {
    let q = row_query(&query_pairs(
        "split=OrandCar_rejected&reason=wrong_answer&q=a%20b+c%3C&page=2&per=500&verdict=",
    ));
    assert_eq!(
        q,
        RowQuery {
            split: Some("OrandCar_rejected".into()),
            reason: Some("wrong_answer".into()),
            text: Some("a b c<".into()),
            page: 1,
            per_page: MAX_PER_PAGE,
            ..RowQuery::default()
        }
    );
    assert_eq!(row_query(&query_pairs("page=0&per=x")), RowQuery::default());
    assert_eq!(percent_decode("%E2%9C%93%zz%4"), "✓%zz%4");
}

#[test]
fn filter_values_come_from_run_json() {
    let out = output();
    std::fs::write(
        out.path().join("run.json"),
        r#"{"stats":{"reject_reasons":{"wrong_answer":3},"accepted_by":{"judge":1},"judge":{"verdicts":{"WRONG":2}}}}"#,
    )
    .unwrap();
    let c = Choices::read(out.path());
    assert_eq!(
        (c.reason, c.verdict, c.accepted_by),
        (
            vec!["wrong_answer".to_string()],
            vec!["WRONG".to_string()],
            vec!["judge".to_string()]
        )
    );
    assert!(Choices::read(&out.path().join("nowhere")).reason.is_empty());
}
