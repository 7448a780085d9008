//! `verisample view OUT` as a user sees it: the real binary serves an output of a real run,
//! Debian's headless `chromium` loads the page and the test reads the DOM it dumps — images
//! shown and loaded, questions shown, filters taken from the address narrowing the rows to the
//! counts the splits hold, a `<script>` in a question shown as text and never run — and plain
//! HTTP requests show that nothing outside the page, its API and the images is served.
//!
//! Without `chromium` on the PATH the browser tests skip (`skip`: they fail under CI, where
//! `.ci/run` installs it).

mod dataset_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dataset_util::{bin, check, png, repo, skip, write_input, InputSpec};
use verisample::dataset::writer::{read_accepted_split, read_rejected_split, split_files};
use verisample::record::{AcceptedQa, OutputRow, RejectedQa};

/// What the page does with a question holding markup, were it parsed as HTML.
const SCRIPT_QUESTION: &str =
    "<script>document.title='pwned';document.body.setAttribute('data-pwned','1')</script> What is written?";
const IMG_QUESTION: &str =
    "<img src=x onerror=\"document.body.setAttribute('data-pwned-img','1')\"> What is written?";

/// `verisample run` of the bundled model over `data` into `out` (CPU, about a second).
fn run(data: &Path, out: &Path) {
    check(
        bin()
            .args([
                "run",
                "-q",
                "--device",
                "cpu",
                "--progress",
                "none",
                "--model",
            ])
            .arg(repo().join("assets/model"))
            .arg("--data")
            .arg(data)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap(),
        "run",
    );
}

/// The output of the bundled sample.
fn sample_output(tmp: &Path) -> PathBuf {
    let out = tmp.join("out");
    run(&repo().join("assets/sample/data"), &out);
    out
}

/// A running `view OUT --port 0`, stopped on drop.
struct View {
    child: Child,
    url: String,
}

impl View {
    fn start(out: &Path) -> View {
        let mut child = bin()
            .args(["view", "--port", "0"])
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .strip_prefix("view: ")
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address printed: {line:?}"))
            .to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        assert!(line.contains("(Ctrl-C stops)"), "{line}");
        View { child, url }
    }

    /// `host:port`.
    fn addr(&self) -> &str {
        self.url.trim_start_matches("http://").trim_end_matches('/')
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `chromium` on the PATH, else `None` after [`skip`] (a failure under CI).
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip("no chromium on the PATH (Debian: apt-get install chromium)");
    }
    found
}

/// One chromium at a time in this test binary (the tests run in parallel threads).
static CHROMIUM: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The DOM of `url` after the page's scripts ran and its images loaded (headless chromium,
/// a fresh profile, virtual time of 10 s: it does not advance while a request is pending, so
/// a request the server never answers shows as a run past 90 s of real time, a failure).
fn dump_dom(chromium: &Path, url: &str) -> String {
    let _one = CHROMIUM.lock().unwrap_or_else(|e| e.into_inner());
    let dom = dump_dom_once(chromium, url).unwrap_or_else(|| {
        panic!("chromium did not finish within 90 s on {url}: a request left unanswered?")
    });
    assert!(
        dom.contains("</html>"),
        "no DOM from chromium for {url}: {dom}"
    );
    dom
}

/// One headless chromium run: its stdout, or `None` when it ran past 90 s (then killed with its
/// process group).
fn dump_dom_once(chromium: &Path, url: &str) -> Option<String> {
    use std::os::unix::process::CommandExt as _;
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--dump-dom",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        stdout.read_to_string(&mut dom).map(|_| dom)
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(90) {
            // The whole group: the browser's renderer and zygote processes too.
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(reader.join().unwrap().unwrap())
}

/// The number of row elements in a dumped DOM.
fn rows_in(dom: &str) -> usize {
    dom.matches("<article class=\"row").count()
}

/// The opening `<body …>` tag of a dumped DOM.
fn body_tag(dom: &str) -> &str {
    let start = dom.find("<body").expect("a body");
    &dom[start..start + dom[start..].find('>').unwrap()]
}

/// What `view` searches in a row (`q`): every `qa` field, `clean_meta`, the image path and hash.
fn row_texts<Q: serde::Serialize>(row: &OutputRow<Q>) -> Vec<String> {
    let mut texts = vec![row.clean_meta.clone(), row.image_sha256.clone()];
    texts.extend(row.image.path.clone());
    for qa in &row.qa {
        if let serde_json::Value::Object(m) = serde_json::to_value(qa).unwrap() {
            texts.extend(m.values().filter_map(|v| v.as_str().map(str::to_string)));
        }
    }
    texts
}

fn read_think(out: &Path) -> Vec<OutputRow<AcceptedQa>> {
    let files = split_files(out, "OrandCar_RS_think").unwrap();
    files
        .iter()
        .flat_map(|f| read_accepted_split(f).unwrap())
        .collect()
}

fn read_rejected(out: &Path) -> Vec<OutputRow<RejectedQa>> {
    let files = split_files(out, "OrandCar_rejected").unwrap();
    files
        .iter()
        .flat_map(|f| read_rejected_split(f).unwrap())
        .collect()
}

#[test]
fn the_page_shows_images_and_questions_and_filters_from_the_address_narrow_the_rows() {
    let Some(chromium) = chromium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = sample_output(tmp.path());
    let think = read_think(&out);
    let rejected = read_rejected(&out);
    let nothink: Vec<OutputRow<AcceptedQa>> = split_files(&out, "OrandCar_RS_nothink")
        .unwrap()
        .iter()
        .flat_map(|f| read_accepted_split(f).unwrap())
        .collect();
    let total = think.len() + nothink.len() + rejected.len();
    assert!(
        think.len() > 30 && !rejected.is_empty(),
        "the sample's splits"
    );
    let view = View::start(&out);

    // The first page: 25 rows, think first, each image loaded, the first question shown.
    let dom = dump_dom(&chromium, &view.url);
    assert_eq!(rows_in(&dom), 25.min(total), "{dom}");
    assert_eq!(
        dom.matches("data-loaded=\"1\"").count(),
        25.min(total),
        "{dom}"
    );
    assert!(
        dom.contains("data-split=\"OrandCar_RS_think\" data-row=\"0\""),
        "{dom}"
    );
    assert!(dom.contains(&think[0].qa[0].question), "{dom}");
    assert!(dom.contains(think[0].qa[0].think.as_deref().unwrap()));
    assert!(
        body_tag(&dom).contains(&format!("data-total=\"{total}\"")),
        "{}",
        body_tag(&dom)
    );
    assert!(dom.contains(&format!("rows 1–25 of {total}")), "{dom}");

    // One split, from the address.
    let dom = dump_dom(&chromium, &format!("{}?split=OrandCar_rejected", view.url));
    assert_eq!(rows_in(&dom), rejected.len().min(25));
    assert_eq!(
        dom.matches("data-split=\"OrandCar_rejected\"").count(),
        rows_in(&dom)
    );
    assert!(dom.contains(&rejected[0].qa[0].wrong_vlm), "{dom}");
    // The second page of the think split at 30 a page: the rest of it.
    let dom = dump_dom(
        &chromium,
        &format!("{}?split=OrandCar_RS_think&page=2&per=30", view.url),
    );
    assert_eq!(rows_in(&dom), think.len() - 30);
    assert!(dom.contains("data-split=\"OrandCar_RS_think\" data-row=\"30\""));
    // An entry filter: the rejected rows with that reason (a scan).
    let reason = rejected[0].qa[0].reason.clone();
    let with_reason = rejected
        .iter()
        .filter(|r| r.qa.iter().any(|q| q.reason == reason))
        .count();
    let dom = dump_dom(&chromium, &format!("{}?reason={reason}&per=100", view.url));
    assert_eq!(rows_in(&dom), with_reason, "{dom}");
    assert!(body_tag(&dom).contains(&format!("data-total=\"{with_reason}\"")));
    // A search: the rows that hold a reference, anywhere in their text.
    let needle = rejected[0].qa[0].answer.clone();
    let holding = |texts: Vec<String>| texts.iter().any(|t| t.to_lowercase().contains(&needle));
    let want = think.iter().filter(|r| holding(row_texts(r))).count()
        + nothink.iter().filter(|r| holding(row_texts(r))).count()
        + rejected.iter().filter(|r| holding(row_texts(r))).count();
    let dom = dump_dom(&chromium, &format!("{}?q={needle}&per=200", view.url));
    assert_eq!(rows_in(&dom), want, "q={needle}: {dom}");
    assert!(want >= 1);
    // Filters together, as a shared link gives them.
    let dom = dump_dom(
        &chromium,
        &format!(
            "{}?split=OrandCar_rejected&reason={reason}&q={needle}",
            view.url
        ),
    );
    assert_eq!(
        rows_in(&dom),
        rejected
            .iter()
            .filter(|r| r.qa.iter().any(|q| q.reason == reason) && holding(row_texts(r)))
            .count()
    );
}

#[test]
fn a_script_in_a_question_is_shown_as_text_and_does_not_run() {
    let Some(chromium) = chromium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("input")).unwrap();
    let data = tmp.path().join("input/input.parquet");
    let rows = vec![
        InputSpec::new(png(64, 24, 1), &[(SCRIPT_QUESTION, "11850")]),
        InputSpec::new(png(64, 24, 2), &[(IMG_QUESTION, "3601")]),
        InputSpec::new(png(64, 24, 3), &[("What is written in the image?", "733")]),
    ];
    write_input(&data, &rows, 100);
    let out = tmp.path().join("out");
    run(&data, &out);
    let view = View::start(&out);
    let dom = dump_dom(&chromium, &format!("{}?q=data-pwned&per=200", view.url));
    assert_eq!(
        rows_in(&dom),
        2,
        "both questions reached a split and are found: {dom}"
    );
    // The text is there, escaped as text, and no element was made from it.
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned';"),
        "the script as text: {dom}"
    );
    assert!(
        dom.contains("&lt;img src=x onerror="),
        "the img as text: {dom}"
    );
    assert!(!dom.contains("<script>document.title"), "{dom}");
    assert!(!dom.contains("<img src=\"x\""), "{dom}");
    // Nothing ran: the body has no mark, the title is the page's.
    let body = body_tag(&dom);
    assert!(!body.contains("data-pwned"), "{body}");
    let title = &dom[dom.find("<title>").unwrap() + 7..dom.find("</title>").unwrap()];
    assert!(title.starts_with("verisample view"), "{title}");
    // Every image of the page loaded.
    assert_eq!(dom.matches("data-loaded=\"1\"").count(), 2, "{dom}");
}

/// One raw HTTP/1.1 GET of `target` (sent as written, `..` included): status and the
/// response head.
fn get(view: &View, target: &str) -> (u16, String) {
    get_with(view, target, "")
}

/// [`get`] with `extra` header lines (each ending in `\r\n`) after the `Host` header.
fn get_with(view: &View, target: &str, extra: &str) -> (u16, String) {
    let mut s = TcpStream::connect(view.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {}\r\n{extra}Connection: close\r\n\r\n",
        view.addr()
    )
    .unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response);
    // Header names are case-insensitive (the server writes them in lower case).
    let head = text
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head}"));
    (status, head)
}

#[test]
fn http_serves_the_page_its_api_and_images_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let out = sample_output(tmp.path());
    let view = View::start(&out);
    let (status, head) = get(&view, "/");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains(
            "content-security-policy: default-src 'self'; img-src 'self'; script-src 'self'; style-src 'self'"
        ),
        "{head}"
    );
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    let (status, head) = get(&view, "/image/OrandCar_rejected/0");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: image/png"), "{head}");
    assert_eq!(get(&view, "/api/rows?split=OrandCar_rejected").0, 200);
    for target in [
        "/nope",
        "/../README.md",
        "/../../README.md",
        "/%2e%2e/README.md",
        "/README.md",
        "/run.json",
        "/data/OrandCar_rejected-00000-of-00001.parquet",
        "/image/../README.md",
        "/image/OrandCar_rejected/100000",
        "/view.js/../../README.md",
    ] {
        let (status, head) = get(&view, target);
        assert_eq!(status, 404, "{target}: {head}");
    }
    // A second `Host` after the right one: which one a server or proxy reads is its own
    // choice, so the request is refused.
    let (status, head) = get_with(&view, "/api/meta", "Host: evil.example\r\n");
    assert_eq!(status, 403, "{head}");
}

#[test]
fn a_folder_that_is_not_an_output_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "x").unwrap();
    for (folder, says) in [
        (tmp.path().to_path_buf(), "no data/ folder"),
        (tmp.path().join("missing"), "no such folder"),
        (tmp.path().join("notes.txt"), "not a folder"),
    ] {
        let o = bin()
            .args(["view", "--port", "0"])
            .arg(&folder)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.starts_with("error: ") && err.contains("is not a verisample output folder"),
            "{err}"
        );
        assert!(err.contains(says), "{err}");
        assert!(o.stdout.is_empty(), "no address printed");
    }
}
