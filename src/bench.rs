//! `bench`: throughput of the engine on a folder of images, one fixed question each.
//!
//! Reports images/s, prefill and decode tokens/s (engine-side model time), peak resident
//! memory, and every item's generated tokens, so that `scripts/bench_vs_transformers.py` can
//! check them against transformers' batched `generate` on the same checkpoint and images.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::engine::{
    Completion, Engine, EngineError, EngineModel, EngineStats, FinishReason, ImageInput,
    InputProcessor, Request,
};

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
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Some images could not be run (undecodable, too large, …): their time would count
    /// in images/s without their work, so the measurement is refused.
    #[error("{failed} of {images} image(s) could not be run, first {first}; a benchmark needs every image to run (remove or fix them)")]
    ItemsFailed {
        /// Images that failed.
        failed: usize,
        /// Images run.
        images: usize,
        /// `file: message` of the first failure.
        first: String,
    },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Folder of images; the first `num_images` by file name are used.
    pub images_dir: PathBuf,
    /// Images to run (0 = all).
    pub num_images: usize,
    /// The user text asked about every image.
    pub question: String,
    /// Generation limit per image.
    pub max_new_tokens: usize,
}

/// One image's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchItem {
    /// Image file name.
    pub file: String,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Generated token ids (the final end-of-sequence token included when it stopped).
    pub token_ids: Vec<u32>,
    /// Decoded text.
    pub text: String,
    /// Why it ended.
    pub finish_reason: FinishReason,
}

/// Result of one bench run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Images run.
    pub images: usize,
    /// The engine's `max_batch`.
    pub max_batch: usize,
    /// Wall-clock seconds of `generate` (input pipeline, vision, prefill, decode).
    pub wall_secs: f64,
    /// `images / wall_secs`.
    pub images_per_sec: f64,
    /// Prefill tokens per second of prefill model time, vision encoder included (as in a
    /// transformers forward over the prompt).
    pub prefill_tokens_per_sec: f64,
    /// Decode tokens per second of decode model time.
    pub decode_tokens_per_sec: f64,
    /// Peak resident set size of the process in bytes (`VmHWM`), 0 when unknown.
    pub peak_rss_bytes: u64,
    /// Engine counters of this run.
    pub stats: EngineStats,
    /// Per image, in file-name order.
    pub items: Vec<BenchItem>,
}

impl BenchReport {
    /// A one-row text table: images, batch, wall seconds, images/s, prefill and decode
    /// tokens/s, peak RSS in MiB.
    pub fn to_table(&self) -> String {
        format!(
            "{:>7} {:>6} {:>9} {:>9} {:>13} {:>12} {:>13}\n{:>7} {:>6} {:>9.2} {:>9.2} {:>13.0} {:>12.0} {:>13.0}",
            "images",
            "batch",
            "wall_s",
            "images/s",
            "prefill tok/s",
            "decode tok/s",
            "peak RSS MiB",
            self.images,
            self.max_batch,
            self.wall_secs,
            self.images_per_sec,
            self.prefill_tokens_per_sec,
            self.decode_tokens_per_sec,
            self.peak_rss_bytes as f64 / (1024.0 * 1024.0),
        )
    }
}

/// Image files of `dir` (`.jpg`, `.jpeg`, `.png`), sorted by name, the first `limit` (0 = all).
///
/// Errors: [`BenchError::Io`], [`BenchError::NoImages`].
pub fn list_images(dir: &Path, limit: usize) -> Result<Vec<PathBuf>, BenchError> {
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
    if limit > 0 {
        files.truncate(limit);
    }
    Ok(files)
}

/// Peak resident set size in bytes from a `/proc/self/status` text (`VmHWM`).
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident set size of this process in bytes (0 where `/proc` is missing).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .as_deref()
        .and_then(parse_vm_hwm)
        .unwrap_or(0)
}

fn ratio(num: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        num as f64 / secs
    } else {
        0.0
    }
}

/// Run the bench on `engine`: every image with `opts.question`, greedy, `max_new_tokens`.
///
/// Errors: [`BenchError::Io`] / [`BenchError::NoImages`] for the images,
/// [`BenchError::Engine`] from the engine.
pub fn run<M: EngineModel, P: InputProcessor>(
    engine: &mut Engine<M, P>,
    opts: &BenchOptions,
) -> Result<BenchReport, BenchError> {
    let files = list_images(&opts.images_dir, opts.num_images)?;
    let mut requests = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).map_err(|source| BenchError::Io {
            path: f.clone(),
            source,
        })?;
        requests.push(Request {
            enable_thinking: Some(true),
            id: i as u64,
            system: None,
            image: Some(ImageInput::new(bytes)),
            text: opts.question.clone(),
            max_new_tokens: Some(opts.max_new_tokens),
            ..Default::default()
        });
    }
    let before = engine.stats().clone();
    let mut done: Vec<Option<Completion>> = vec![None; files.len()];
    let t0 = Instant::now();
    engine.generate(requests, |c| {
        let i = c.id as usize;
        if let Some(slot) = done.get_mut(i) {
            *slot = Some(c);
        }
        Ok(())
    })?;
    let wall_secs = t0.elapsed().as_secs_f64();
    let stats = stats_delta(engine.stats(), &before);
    let done: Vec<Completion> = done
        .into_iter()
        .map(|c| c.unwrap_or_else(|| Completion::failed(0, 0, "no completion")))
        .collect();
    let failures: Vec<String> = files
        .iter()
        .zip(&done)
        .filter_map(|(f, c)| c.error.as_ref().map(|e| format!("{}: {e}", f.display())))
        .collect();
    if let Some(first) = failures.first() {
        return Err(BenchError::ItemsFailed {
            failed: failures.len(),
            images: files.len(),
            first: first.clone(),
        });
    }
    let items = files
        .iter()
        .zip(done)
        .map(|(f, c)| BenchItem {
            file: f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            prompt_tokens: c.prompt_tokens,
            token_ids: c.token_ids,
            text: c.text,
            finish_reason: c.finish_reason,
        })
        .collect();
    Ok(BenchReport {
        images: files.len(),
        max_batch: engine.config().max_batch,
        wall_secs,
        images_per_sec: ratio(files.len() as u64, wall_secs),
        prefill_tokens_per_sec: ratio(stats.prefill_tokens, stats.prefill_secs + stats.vision_secs),
        decode_tokens_per_sec: ratio(stats.decode_tokens, stats.decode_secs),
        peak_rss_bytes: peak_rss_bytes(),
        stats,
        items,
    })
}

/// Counters of `now` minus those of `before`.
fn stats_delta(now: &EngineStats, before: &EngineStats) -> EngineStats {
    EngineStats {
        steps: now.steps - before.steps,
        prefill_steps: now.prefill_steps - before.prefill_steps,
        decode_steps: now.decode_steps - before.decode_steps,
        prefill_tokens: now.prefill_tokens - before.prefill_tokens,
        prefill_secs: now.prefill_secs - before.prefill_secs,
        decode_tokens: now.decode_tokens - before.decode_tokens,
        decode_secs: now.decode_secs - before.decode_secs,
        vision_images: now.vision_images - before.vision_images,
        vision_batches: now.vision_batches - before.vision_batches,
        vision_secs: now.vision_secs - before.vision_secs,
        input_wait_secs: now.input_wait_secs - before.input_wait_secs,
        cached_prompt_tokens: now.cached_prompt_tokens - before.cached_prompt_tokens,
        preemptions: now.preemptions - before.preemptions,
        completed: now.completed - before.completed,
        failed: now.failed - before.failed,
        generated_tokens: now.generated_tokens - before.generated_tokens,
        max_batch: now.max_batch,
        max_batch_auto: now.max_batch_auto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_hwm_is_read_in_bytes() {
        let status = "Name:\tbench\nVmPeak:\t  900 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234 * 1024));
        assert_eq!(parse_vm_hwm("Name: x\n"), None);
    }

    #[test]
    fn images_are_listed_sorted_and_limited() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.jpg", "a.PNG", "c.txt", "d.jpeg"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let names = |v: Vec<PathBuf>| {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(list_images(dir.path(), 0).unwrap()),
            ["a.PNG", "b.jpg", "d.jpeg"]
        );
        assert_eq!(
            names(list_images(dir.path(), 2).unwrap()),
            ["a.PNG", "b.jpg"]
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            list_images(empty.path(), 0),
            Err(BenchError::NoImages(_))
        ));
    }
}
