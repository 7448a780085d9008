//! `bench`: the throughput of the engine `run` builds, on `run`'s input.
//!
//! The requests are those of a run's answer pass (the CLI plans the rows with the run's
//! `pipeline::RowPlanner`: the same shard, limit, checks, cleaning, image admission and
//! duplicates; every kept question, `--samples` of each), or one question about each image of
//! a folder. A few warm-up
//! requests run first, unmeasured; then `repeat` measured passes over all requests, each
//! starting with an empty prefix cache. Every figure is a
//! [`ThroughputMetrics`] (docs/bench.md), the same record `run.json` keeps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::engine::metrics::{peak_rss_bytes, ThroughputMetrics};
use crate::engine::{Completion, Engine, EngineError, EngineModel, FinishReason, InputProcessor};
use crate::engine::{ImageInput, Request};

/// Errors of the bench.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The images folder could not be listed or an image read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No image file in the folder.
    #[error("no .jpg/.jpeg/.png image in {0}")]
    NoImages(PathBuf),
    /// Every input row was refused, or the input has no question: nothing to measure.
    #[error("no request to run: {0}")]
    NothingToRun(String),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Some requests failed in the engine: their time would count in the rates without their
    /// work, so the measurement is refused.
    #[error("{failed} of {requests} request(s) failed, first {first}; a benchmark needs every request to run")]
    RequestsFailed {
        /// Requests that failed.
        failed: usize,
        /// Requests run.
        requests: usize,
        /// `label: message` of the first failure.
        first: String,
    },
}

/// One request of the bench, with what names it in the report.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    /// `file` (a folder's image) or `file row R qa Q` (`sample S` when sampling).
    pub label: String,
    /// The engine request.
    pub request: Request,
}

/// The requests to measure and the input rows `run` would refuse (left out, with their
/// errors.jsonl message).
#[derive(Debug, Clone, Default)]
pub struct BenchInput {
    /// The requests, in input order.
    pub requests: Vec<BenchRequest>,
    /// `file row R: field: message` of each refused row.
    pub skipped: Vec<String>,
}

/// How to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchPlan {
    /// Requests (the first ones of the input) run once before measuring, not measured.
    pub warmup: usize,
    /// Measured passes over all requests (at least 1).
    pub repeat: usize,
}

/// One request's result in the first measured pass.
#[derive(Debug, Clone, Serialize)]
pub struct BenchItem {
    /// [`BenchRequest::label`].
    pub label: String,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Generated token ids (the final end-of-sequence token included when it stopped).
    pub token_ids: Vec<u32>,
    /// Decoded text.
    pub text: String,
    /// Why it ended.
    pub finish_reason: FinishReason,
}

/// Mean, extremes and sample standard deviation of one metric over the measured passes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Sample standard deviation (n − 1); 0 for one pass.
    pub stdev: f64,
}

impl Spread {
    /// The spread of `values` (not empty).
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len().max(1) as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = if values.len() > 1 {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Spread {
            mean,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stdev: var.sqrt(),
        }
    }
}

/// What the bench measured (the JSON report of `bench --json`, less the settings).
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Warm-up requests run before measuring.
    pub warmup_requests: usize,
    /// Requests of each measured pass.
    pub requests: usize,
    /// Input rows left out as `run` refuses them.
    pub skipped: Vec<String>,
    /// The metrics of each measured pass, in order.
    pub passes: Vec<ThroughputMetrics>,
    /// Every number of the metrics (`ttft_s.p50` for nested ones) over the passes.
    pub spread: BTreeMap<String, Spread>,
    /// Each request's result in the first measured pass, in input order.
    pub items: Vec<BenchItem>,
}

/// Image files of `dir` (`.jpg`, `.jpeg`, `.png`), sorted by name.
///
/// Errors: [`BenchError::Io`], [`BenchError::NoImages`].
pub fn list_images(dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let io = |source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if matches!(ext.as_deref(), Some("jpg" | "jpeg" | "png")) {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(BenchError::NoImages(dir.to_path_buf()));
    }
    Ok(files)
}

/// Run `input` on `engine`: `plan.warmup` requests unmeasured, then `plan.repeat` measured
/// passes, each after the prefix cache is emptied.
///
/// Errors: [`BenchError::NothingToRun`] for no request, [`BenchError::Engine`],
/// [`BenchError::RequestsFailed`] when a request of a measured pass failed.
pub fn run<M: EngineModel, P: InputProcessor>(
    engine: &mut Engine<M, P>,
    input: BenchInput,
    plan: BenchPlan,
) -> Result<BenchReport, BenchError> {
    let BenchInput { requests, skipped } = input;
    if requests.is_empty() {
        let why = skipped
            .first()
            .map_or("the input has no question".to_string(), |s| {
                format!("all {} input row(s) refused, first {s}", skipped.len())
            });
        return Err(BenchError::NothingToRun(why));
    }
    let warmup = plan.warmup.min(requests.len());
    if warmup > 0 {
        let warm = requests[..warmup].iter().map(|r| r.request.clone());
        engine.generate(warm, |_| Ok(()))?;
    }
    let mut passes = Vec::new();
    let mut items = Vec::new();
    for pass in 0..plan.repeat.max(1) {
        engine.clear_prefix_cache();
        engine.reset_latency();
        let before = engine.stats().clone();
        let mut done: Vec<Option<Completion>> = vec![None; requests.len()];
        let pass_requests = requests.iter().enumerate().map(|(i, r)| Request {
            id: i as u64,
            ..r.request.clone()
        });
        engine.generate(pass_requests, |c| {
            if let Some(slot) = usize::try_from(c.id).ok().and_then(|i| done.get_mut(i)) {
                *slot = Some(c);
            }
            Ok(())
        })?;
        let stats = engine.stats().since(&before);
        let metrics = ThroughputMetrics::new(
            &stats,
            engine.latency(),
            peak_rss_bytes(),
            engine.device_memory_used(),
        );
        let done: Vec<Completion> = done
            .into_iter()
            .map(|c| c.unwrap_or_else(|| Completion::failed(0, 0, "no completion")))
            .collect();
        let failures: Vec<String> = requests
            .iter()
            .zip(&done)
            .filter_map(|(r, c)| c.error.as_ref().map(|e| format!("{}: {e}", r.label)))
            .collect();
        if let Some(first) = failures.first() {
            return Err(BenchError::RequestsFailed {
                failed: failures.len(),
                requests: requests.len(),
                first: first.clone(),
            });
        }
        if pass == 0 {
            items = requests
                .iter()
                .zip(done)
                .map(|(r, c)| BenchItem {
                    label: r.label.clone(),
                    prompt_tokens: c.prompt_tokens,
                    token_ids: c.token_ids,
                    text: c.text,
                    finish_reason: c.finish_reason,
                })
                .collect();
        }
        passes.push(metrics);
    }
    Ok(BenchReport {
        warmup_requests: warmup,
        requests: requests.len(),
        skipped,
        spread: spread(&passes),
        passes,
        items,
    })
}

/// Every number of `passes`' metrics by its dotted path (`ttft_s.p50`), over the passes.
pub fn spread(passes: &[ThroughputMetrics]) -> BTreeMap<String, Spread> {
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for p in passes {
        if let Ok(v) = serde_json::to_value(p) {
            numbers("", &v, &mut values);
        }
    }
    values
        .into_iter()
        .map(|(k, v)| (k, Spread::of(&v)))
        .collect()
}

fn numbers(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, Vec<f64>>) {
    match v {
        serde_json::Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.entry(prefix.to_string()).or_default().push(x);
            }
        }
        serde_json::Value::Object(m) => {
            for (k, child) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                numbers(&key, child, out);
            }
        }
        _ => {}
    }
}

impl BenchReport {
    /// A text table: one row per measured pass, then the mean when there are several.
    pub fn to_table(&self) -> String {
        let header = format!(
            "{:>4} {:>8} {:>8} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9}",
            "pass",
            "requests",
            "wall_s",
            "req/s",
            "prompt t/s",
            "gen t/s",
            "TTFT p50",
            "TTFT p99",
            "lat p50",
            "preempt",
            "RSS MiB"
        );
        let row = |name: &str, m: &ThroughputMetrics| {
            format!(
                "{:>4} {:>8} {:>8.3} {:>9.2} {:>10.0} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>9.0}",
                name,
                m.requests,
                m.wall_s,
                m.requests_per_s,
                m.prompt_tokens_per_s,
                m.generated_tokens_per_s,
                m.ttft_s.p50,
                m.ttft_s.p99,
                m.latency_s.p50,
                m.preemptions,
                m.peak_rss_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0),
            )
        };
        let mut lines = vec![header];
        for (i, m) in self.passes.iter().enumerate() {
            lines.push(row(&(i + 1).to_string(), m));
        }
        if self.passes.len() > 1 {
            let mean = |k: &str| self.spread.get(k).map_or(0.0, |s| s.mean);
            let sd = |k: &str| self.spread.get(k).map_or(0.0, |s| s.stdev);
            lines.push(format!(
                "mean of {} passes: {:.2} req/s (sd {:.2}), {:.0} generated tok/s (sd {:.0}), TTFT p50 {:.3} s",
                self.passes.len(),
                mean("requests_per_s"),
                sd("requests_per_s"),
                mean("generated_tokens_per_s"),
                sd("generated_tokens_per_s"),
                mean("ttft_s.p50"),
            ));
        }
        lines.join("\n")
    }
}

/// The requests of a folder of images: the images of this `shard` (file-name positions p with
/// p % N == I, as `run`'s rows), its first `limit`, each asked about with `request` once
/// `admit` (the run's image check) lets it through; an image it refuses, or a file that cannot
/// be read, is skipped with its message.
///
/// Errors: [`BenchError::Io`] / [`BenchError::NoImages`] for the folder.
pub fn folder_input(
    dir: &Path,
    (shard, limit): (crate::shard::Shard, Option<usize>),
    admit: &dyn Fn(&[u8]) -> Result<ImageInput, String>,
    request: &dyn Fn(u64, ImageInput) -> Vec<(String, Request)>,
) -> Result<BenchInput, BenchError> {
    let mut input = BenchInput::default();
    let files = list_images(dir)?;
    let mine = files
        .iter()
        .enumerate()
        .filter(|(p, _)| shard.contains(*p as u64))
        .take(limit.unwrap_or(usize::MAX));
    for (position, f) in mine {
        let name = f
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let admitted = std::fs::read(f)
            .map_err(|e| format!("cannot read the file: {e}"))
            .and_then(|bytes| admit(&bytes));
        match admitted {
            Ok(image) => {
                for (suffix, r) in request(position as u64, image) {
                    input.requests.push(BenchRequest {
                        label: format!("{name}{suffix}"),
                        request: r,
                    });
                }
            }
            Err(message) => input
                .skipped
                .push(format!("{name}: image.bytes: {message}")),
        }
    }
    Ok(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_listed_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.jpg", "a.PNG", "c.txt", "d.jpeg"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let names: Vec<String> = list_images(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.PNG", "b.jpg", "d.jpeg"]);
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            list_images(empty.path()),
            Err(BenchError::NoImages(_))
        ));
    }

    /// The spread of known values, nested keys dotted, one pass with no deviation.
    #[test]
    fn spread_over_passes() {
        let s = Spread::of(&[2.0, 4.0, 6.0]);
        assert_eq!((s.mean, s.min, s.max, s.stdev), (4.0, 2.0, 6.0, 2.0));
        assert_eq!(Spread::of(&[3.0]).stdev, 0.0);
        let a = ThroughputMetrics {
            requests_per_s: 1.0,
            ..Default::default()
        };
        let mut b = a.clone();
        b.requests_per_s = 3.0;
        b.ttft_s.p50 = 0.5;
        let sp = spread(&[a, b]);
        assert_eq!(sp["requests_per_s"].mean, 2.0);
        assert_eq!(sp["ttft_s.p50"].max, 0.5);
        assert!(
            !sp.contains_key("device_memory_used_bytes"),
            "null is no number"
        );
    }
}
