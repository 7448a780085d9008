//! `view`: a local, read-only web page over the rows of an output folder.
//!
//! [`Viewer::open`] reads the footers of `OUT/data/`'s splits ([`rows`]) and binds
//! `127.0.0.1` only; [`Viewer::serve`] answers until the process stops. It serves the page
//! (HTML, script and style built into the binary, no front-end build), two JSON endpoints and
//! image bytes addressed by split name and row index — never a file named by the request:
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /` | the page (its filters and page in the query string: `split`, `family`, `reason`, `verdict`, `accepted_by`, `q`, `page` from 1, `per`) |
//! | `GET /view.js`, `GET /view.css` | its script and style |
//! | `GET /api/meta` | the splits (name, family, kind, rows), families and the filter values `run.json` records |
//! | `GET /api/rows?…` | a page of rows ([`RowsPage`]), the query as for `/` |
//! | `GET /image/<split>/<row>` | that row's image bytes, typed by their signature |
//!
//! Anything else is 404 (`/../README.md` included), a method other than GET or HEAD 405, a
//! `Host` other than `127.0.0.1:<port>` or `localhost:<port>`, or two `Host` headers, 403 (a
//! page of another site that rebinds its name to this address cannot read the rows; a
//! request without `Host`, which no browser sends, is an HTTP/1.0 client's and answered). Every answer carries
//! `Content-Security-Policy: default-src 'self'; img-src 'self'; script-src 'self';
//! style-src 'self'` and `X-Content-Type-Options: nosniff`; the page builds its DOM with
//! `textContent` only, so a `<script>` in a question shows as text.

pub mod rows;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

pub use rows::{OutputRows, RowQuery, RowsError, RowsPage, SplitInfo, ViewRow, MAX_PER_PAGE};

/// The page, its script and its style.
const INDEX_HTML: &str = include_str!("index.html");
const VIEW_JS: &str = include_str!("view.js");
const VIEW_CSS: &str = include_str!("view.css");

/// Sent with every answer: only this server's own script, style and images, and no type
/// guessing by the browser.
const CSP: &str = "default-src 'self'; img-src 'self'; script-src 'self'; style-src 'self'";

/// Threads answering requests (a page loads its images in parallel).
const WORKERS: usize = 4;

/// The headers every answer carries besides its content type.
const HEADERS: [(&str, &str); 5] = [
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// Why `view` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The folder cannot be read as an output.
    #[error(transparent)]
    Rows(#[from] RowsError),
    /// The port cannot be bound.
    #[error("cannot listen on {addr}: {message}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        message: String,
    },
}

/// The filter values a run recorded in `run.json` (`stats.reject_reasons`,
/// `stats.judge.verdicts`, `stats.accepted_by`): the page offers them; others can be typed.
#[derive(Debug, Clone, Default, serde::Serialize)]
struct Choices {
    reason: Vec<String>,
    verdict: Vec<String>,
    accepted_by: Vec<String>,
}

impl Choices {
    /// The keys of those objects of `OUT/run.json`, each list empty when the file or the
    /// object is missing.
    fn read(out: &Path) -> Self {
        let json: serde_json::Value = std::fs::read(out.join(crate::out_files::RUN_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let keys = |ptr: &str| -> Vec<String> {
            json.pointer(ptr)
                .and_then(serde_json::Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        Self {
            reason: keys("/stats/reject_reasons"),
            verdict: keys("/stats/judge/verdicts"),
            accepted_by: keys("/stats/accepted_by"),
        }
    }
}

/// What the handlers read: the rows, the title and filter values, the port.
#[derive(Debug)]
struct State {
    rows: OutputRows,
    title: String,
    choices: Choices,
    port: u16,
}

/// The server over one output folder, bound and ready to [`serve`](Viewer::serve).
pub struct Viewer {
    listener: std::net::TcpListener,
    state: Arc<State>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer").field("addr", &self.addr).finish()
    }
}

impl Viewer {
    /// Open output folder `out` (its split footers) and bind `127.0.0.1:port` (`0`: a free
    /// port).
    ///
    /// Errors: [`ViewError::Rows`] when `out` is not an output or a footer cannot be read,
    /// [`ViewError::Bind`] when the port cannot be bound.
    pub fn open(out: &Path, port: u16) -> Result<Self, ViewError> {
        let rows = OutputRows::open(out)?;
        let asked = format!("127.0.0.1:{port}");
        let bind = |e: std::io::Error| ViewError::Bind {
            addr: asked.clone(),
            message: e.to_string(),
        };
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        Ok(Self {
            state: Arc::new(State {
                rows,
                title: out.display().to_string(),
                choices: Choices::read(out),
                port: addr.port(),
            }),
            listener,
            addr,
        })
    }

    /// The page's address, `http://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Answer requests until the process stops (Ctrl-C ends it as any other process): HTTP/1.1
    /// by axum on a tokio runtime of [`WORKERS`] threads, each answer computed on the
    /// blocking pool (it reads parquet).
    ///
    /// Errors: the runtime cannot start or the listener fails.
    pub fn serve(self) -> std::io::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .enable_io()
            .build()?;
        let state = self.state;
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(self.listener)?;
            let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
                let state = Arc::clone(&state);
                async move { answer(state, request).await }
            });
            axum::serve(listener, app).await
        })
    }
}

/// An answer before it is sent: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
        }
    }

    fn json(status: u16, value: &serde_json::Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: value.to_string().into_bytes(),
        }
    }

    fn not_found() -> Self {
        Self::text(404, "not found\n")
    }
}

/// The HTTP response to `request`: GET and HEAD answered by [`handle`] (the body of a HEAD
/// left out by the server), anything else 405.
async fn answer(state: Arc<State>, request: axum::extract::Request) -> axum::response::Response {
    let method = request.method().clone();
    let url = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_string(),
        |p| p.as_str().to_string(),
    );
    // Two `Host` headers are answered as a foreign host: which one counts is up to each
    // proxy and server, so neither may.
    let hosts: Vec<_> = request
        .headers()
        .get_all(axum::http::header::HOST)
        .iter()
        .collect();
    let host = match hosts.as_slice() {
        [] => None,
        [one] => Some(one.to_str().unwrap_or("").to_string()),
        _ => Some(String::new()),
    };
    let reply = if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
        Reply::text(405, "only GET and HEAD\n")
    } else {
        let url = url.clone();
        tokio::task::spawn_blocking(move || handle(&state, &url, host.as_deref()))
            .await
            .unwrap_or_else(|_| Reply::text(500, "internal error\n"))
    };
    tracing::debug!("{method} {url} → {}", reply.status);
    let mut response = axum::response::Response::new(axum::body::Body::from(reply.body));
    *response.status_mut() = axum::http::StatusCode::from_u16(reply.status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    let all = std::iter::once(("content-type", reply.content_type)).chain(HEADERS);
    for (name, value) in all {
        if let Ok(v) = axum::http::HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    }
    response
}

/// The answer to a GET of `url` (path and query) with `Host` header `host`.
fn handle(state: &State, url: &str, host: Option<&str>) -> Reply {
    let allowed = [
        format!("127.0.0.1:{}", state.port),
        format!("localhost:{}", state.port),
    ];
    if host.is_some_and(|h| !allowed.iter().any(|a| a.eq_ignore_ascii_case(h))) {
        return Reply::text(403, "this page answers 127.0.0.1 and localhost only\n");
    }
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    match path {
        "/" | "/index.html" => Reply {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: INDEX_HTML.as_bytes().to_vec(),
        },
        "/view.js" => Reply {
            status: 200,
            content_type: "text/javascript; charset=utf-8",
            body: VIEW_JS.as_bytes().to_vec(),
        },
        "/view.css" => Reply {
            status: 200,
            content_type: "text/css; charset=utf-8",
            body: VIEW_CSS.as_bytes().to_vec(),
        },
        "/api/meta" => meta(state),
        "/api/rows" => rows_page(state, &row_query(&query_pairs(query))),
        _ => path
            .strip_prefix("/image/")
            .and_then(|rest| rest.split_once('/'))
            .and_then(|(split, row)| Some((percent_decode(split), row.parse::<u64>().ok()?)))
            .map_or_else(Reply::not_found, |(split, row)| image(state, &split, row)),
    }
}

fn meta(state: &State) -> Reply {
    let splits = state.rows.splits();
    let mut families: Vec<&str> = splits.iter().map(|s| s.family.as_str()).collect();
    families.dedup();
    Reply::json(
        200,
        &serde_json::json!({
            "title": state.title,
            "splits": splits,
            "families": families,
            "choices": state.choices,
            "max_per_page": MAX_PER_PAGE,
        }),
    )
}

fn rows_page(state: &State, q: &RowQuery) -> Reply {
    match state.rows.page(q) {
        Ok(page) => {
            let mut v = serde_json::to_value(&page).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.insert("page".into(), (q.page + 1).into());
                m.insert("per".into(), q.per_page.clamp(1, MAX_PER_PAGE).into());
            }
            Reply::json(200, &v)
        }
        Err(e) => {
            tracing::warn!("{e}");
            Reply::json(500, &serde_json::json!({ "error": e.to_string() }))
        }
    }
}

fn image(state: &State, split: &str, row: u64) -> Reply {
    match state.rows.image(split, row) {
        Ok(Some(body)) => Reply {
            status: 200,
            content_type: image_type(&body),
            body,
        },
        Ok(None) => Reply::not_found(),
        Err(e) => {
            tracing::warn!("{e}");
            Reply::text(500, &format!("{e}\n"))
        }
    }
}

/// The content type of image bytes from their signature: PNG, JPEG, GIF, WebP or BMP, else
/// `application/octet-stream`.
fn image_type(b: &[u8]) -> &'static str {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        "image/jpeg"
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        "image/gif"
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        "image/webp"
    } else if b.starts_with(b"BM") {
        "image/bmp"
    } else {
        "application/octet-stream"
    }
}

/// `%XX` escapes and `+` (a space) decoded; invalid UTF-8 replaced.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `name=value` pairs of a query string, decoded.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// The page a query string asks for: empty values are no filter, `page` counts from 1.
fn row_query(pairs: &[(String, String)]) -> RowQuery {
    let get = |name: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let number = |name: &str| get(name).and_then(|v| v.trim().parse::<usize>().ok());
    let defaults = RowQuery::default();
    RowQuery {
        split: get("split"),
        family: get("family"),
        reason: get("reason"),
        verdict: get("verdict"),
        accepted_by: get("accepted_by"),
        text: get("q"),
        page: number("page").map_or(0, |p| p.saturating_sub(1)),
        per_page: number("per").map_or(defaults.per_page, |n| n.clamp(1, MAX_PER_PAGE)),
    }
}

#[cfg(test)]
mod tests;
