//! Throughput and latency of the engine, defined once for `bench` and `run.json`
//! ([`ThroughputMetrics`]); the formulas are in docs/bench.md.
//!
//! Per-request times are kept in HDR histograms (Gil Tene's HdrHistogram, the `hdrhistogram`
//! crate: microseconds, 3 significant digits), so that a run of 10⁶ requests measures its
//! percentiles in a few dozen KiB.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::EngineStats;

/// Largest time a histogram records: one day (longer ones are clamped to it).
const MAX_MICROS: u64 = 86_400 * 1_000_000;

/// Per-request times of the completions handed out, each a histogram of microseconds.
///
/// A request's clock starts when the engine takes it from its input (before its image is
/// decoded); a failed request that generated nothing is not recorded.
#[derive(Debug, Clone)]
pub struct RequestLatency {
    /// Time to first token: taken → first generated token sampled.
    ttft: Histogram<u64>,
    /// End-to-end latency: taken → finished.
    latency: Histogram<u64>,
    /// Time per output token after the first: `(latency − ttft) / (generated − 1)`, for
    /// requests of at least two generated tokens (vLLM's TPOT).
    tpot: Histogram<u64>,
}

impl Default for RequestLatency {
    fn default() -> Self {
        let h = || {
            Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .expect("1 µs ..= 1 day at 3 significant digits are valid bounds")
        };
        Self {
            ttft: h(),
            latency: h(),
            tpot: h(),
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_MICROS)
}

impl RequestLatency {
    /// Record a request taken at `taken`, whose first token came at `first_token`, finished
    /// at `finished` with `generated` tokens. Nothing is recorded without a first token.
    pub fn record(
        &mut self,
        taken: Instant,
        first_token: Option<Instant>,
        finished: Instant,
        generated: usize,
    ) {
        let Some(first) = first_token else { return };
        let ttft = first.saturating_duration_since(taken);
        let total = finished.saturating_duration_since(taken);
        self.ttft.saturating_record(micros(ttft));
        self.latency.saturating_record(micros(total));
        if generated >= 2 {
            let per = total.saturating_sub(ttft) / (generated as u32 - 1).max(1);
            self.tpot.saturating_record(micros(per));
        }
    }

    /// Requests recorded.
    pub fn len(&self) -> u64 {
        self.latency.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Time to first token, seconds.
    pub fn ttft(&self) -> Percentiles {
        Percentiles::of(&self.ttft)
    }

    /// End-to-end latency, seconds.
    pub fn latency(&self) -> Percentiles {
        Percentiles::of(&self.latency)
    }

    /// Time per output token after the first, seconds.
    pub fn tpot(&self) -> Percentiles {
        Percentiles::of(&self.tpot)
    }
}

/// The distribution of one per-request time, in seconds (all 0 when nothing was recorded).
/// Percentiles are HDR-histogram values: within 0.1 % of the exact order statistic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Requests measured.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let s = |us: u64| us as f64 / 1e6;
        Self {
            count: h.len(),
            mean: h.mean() / 1e6,
            p50: s(h.value_at_quantile(0.50)),
            p90: s(h.value_at_quantile(0.90)),
            p99: s(h.value_at_quantile(0.99)),
            max: s(h.max()),
        }
    }
}

/// Throughput of the engine over its `generate` calls: what `bench` reports per pass and
/// `run.json` (`engine_metrics`) over the whole process. Rates divide by `wall_s`, the
/// seconds inside `generate` (input pipeline, vision, prefill, decode and the callbacks),
/// as vLLM's benchmarks divide by their run's duration; `model_*` rates divide by the model's
/// own time instead. Formulas: docs/bench.md.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputMetrics {
    /// Seconds inside the engine's `generate` calls.
    pub wall_s: f64,
    /// Requests completed (every finish reason but failures).
    pub requests: u64,
    /// Requests that failed (an error completion).
    pub failed_requests: u64,
    /// Completed requests about an image.
    pub images: u64,
    /// `requests / wall_s`.
    pub requests_per_s: f64,
    /// `images / wall_s`.
    pub images_per_s: f64,
    /// Prompt tokens of the completed requests (prefix-cache hits included).
    pub prompt_tokens: u64,
    /// Tokens generated (end-of-sequence tokens included).
    pub generated_tokens: u64,
    /// `prompt_tokens / wall_s` (vLLM: input token throughput).
    pub prompt_tokens_per_s: f64,
    /// `generated_tokens / wall_s` (vLLM: output token throughput).
    pub generated_tokens_per_s: f64,
    /// Time to first token per request, seconds.
    pub ttft_s: Percentiles,
    /// End-to-end latency per request, seconds.
    pub latency_s: Percentiles,
    /// Time per output token after the first, per request, seconds.
    pub tpot_s: Percentiles,
    /// Seconds in the vision encoder.
    pub vision_s: f64,
    /// Images the vision encoder ran (an image asked about twice at once runs once).
    pub vision_images: u64,
    /// Seconds in prefill forwards (vision excluded).
    pub prefill_s: f64,
    /// Seconds in decode forwards.
    pub decode_s: f64,
    /// Tokens computed in prefill (prompt tokens not served by the prefix cache, and the
    /// recomputed tokens of preempted sequences).
    pub prefill_computed_tokens: u64,
    /// `prefill_computed_tokens / (prefill_s + vision_s)`: the model's prefill rate, vision
    /// included (as a transformers forward over the prompt).
    pub model_prefill_tokens_per_s: f64,
    /// Tokens computed in decode steps over `decode_s`: the model's decode rate.
    pub model_decode_tokens_per_s: f64,
    /// Preemptions (a sequence preempted twice counts twice).
    pub preemptions: u64,
    /// Prompt tokens served from the prefix cache.
    pub prefix_cache_hit_tokens: u64,
    /// `prefix_cache_hit_tokens / prompt_tokens`.
    pub prefix_cache_hit_rate: f64,
    /// Peak resident set size of the process (`VmHWM`), bytes; `None` where unknown.
    pub peak_rss_bytes: Option<u64>,
    /// Device memory in use when measured (total − free, every process), bytes; `None` on
    /// the CPU or where the device does not say.
    pub device_memory_used_bytes: Option<u64>,
}

fn per(n: f64, secs: f64) -> f64 {
    if secs > 0.0 {
        n / secs
    } else {
        0.0
    }
}

impl ThroughputMetrics {
    /// The metrics of `stats` (the counters of the measured calls, e.g.
    /// [`EngineStats::since`]) and `latency` (their requests' times), with the memory figures
    /// given.
    pub fn new(
        stats: &EngineStats,
        latency: &RequestLatency,
        peak_rss_bytes: Option<u64>,
        device_memory_used_bytes: Option<u64>,
    ) -> Self {
        let wall_s = stats.generate_secs;
        let requests = stats.completed - stats.failed;
        Self {
            wall_s,
            requests,
            failed_requests: stats.failed,
            images: stats.image_requests,
            requests_per_s: per(requests as f64, wall_s),
            images_per_s: per(stats.image_requests as f64, wall_s),
            prompt_tokens: stats.prompt_tokens,
            generated_tokens: stats.generated_tokens,
            prompt_tokens_per_s: per(stats.prompt_tokens as f64, wall_s),
            generated_tokens_per_s: per(stats.generated_tokens as f64, wall_s),
            ttft_s: latency.ttft(),
            latency_s: latency.latency(),
            tpot_s: latency.tpot(),
            vision_s: stats.vision_secs,
            vision_images: stats.vision_images,
            prefill_s: stats.prefill_secs,
            decode_s: stats.decode_secs,
            prefill_computed_tokens: stats.prefill_tokens,
            model_prefill_tokens_per_s: per(
                stats.prefill_tokens as f64,
                stats.prefill_secs + stats.vision_secs,
            ),
            model_decode_tokens_per_s: per(stats.decode_tokens as f64, stats.decode_secs),
            preemptions: stats.preemptions,
            prefix_cache_hit_tokens: stats.cached_prompt_tokens,
            prefix_cache_hit_rate: per(
                stats.cached_prompt_tokens as f64,
                stats.prompt_tokens as f64,
            ),
            peak_rss_bytes,
            device_memory_used_bytes,
        }
    }
}

/// Peak resident set size in bytes from a `/proc/self/status` text (`VmHWM`).
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    super::config::proc_kib_field(status, "VmHWM:")
}

/// Peak resident set size of this process in bytes: `VmHWM` of `/proc/self/status`
/// (Linux); `None` elsewhere.
pub fn peak_rss_bytes() -> Option<u64> {
    parse_vm_hwm(&std::fs::read_to_string("/proc/self/status").ok()?)
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
    fn peak_rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            let m = peak_rss_bytes().expect("VmHWM");
            assert!(m > 1 << 20, "{m}");
        }
    }

    /// TTFT, latency and TPOT of known requests: the percentiles are the recorded values
    /// (within the histogram's 0.1 %), a request without a first token is not counted, one of
    /// a single token has no TPOT.
    #[test]
    fn latency_percentiles_of_known_requests() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut l = RequestLatency::default();
        // 100 requests: first token at k ms, finished at 10·k ms, 10 tokens each.
        for k in 1..=100 {
            l.record(t0, Some(ms(k)), ms(10 * k), 10);
        }
        l.record(t0, None, ms(5), 0);
        l.record(t0, Some(ms(3)), ms(3), 1);
        assert_eq!(l.len(), 101);
        let ttft = l.ttft();
        assert_eq!(ttft.count, 101);
        assert!((ttft.p50 - 0.050).abs() < 1e-4, "{ttft:?}");
        assert!((ttft.p99 - 0.099).abs() < 1e-4, "{ttft:?}");
        assert!((ttft.max - 0.100).abs() < 1e-4, "{ttft:?}");
        let lat = l.latency();
        assert!((lat.p90 - 0.900).abs() < 1e-3, "{lat:?}");
        // TPOT of request k: (10k − k) / 9 ms = k ms; the 1-token request has none.
        let tpot = l.tpot();
        assert_eq!(tpot.count, 100);
        assert!((tpot.p50 - 0.050).abs() < 1e-4, "{tpot:?}");
        assert!((tpot.mean - 0.0505).abs() < 1e-4, "{tpot:?}");
    }

    /// Every rate is its count over the seconds it names; nothing divides by zero.
    #[test]
    fn rates_follow_their_definitions() {
        let stats = EngineStats {
            generate_secs: 4.0,
            completed: 10,
            failed: 2,
            image_requests: 6,
            prompt_tokens: 1000,
            generated_tokens: 200,
            prefill_tokens: 600,
            prefill_secs: 1.0,
            vision_secs: 0.5,
            decode_tokens: 180,
            decode_secs: 2.0,
            cached_prompt_tokens: 400,
            ..Default::default()
        };
        let m = ThroughputMetrics::new(&stats, &RequestLatency::default(), Some(7), None);
        assert_eq!((m.requests, m.failed_requests, m.images), (8, 2, 6));
        assert_eq!(m.requests_per_s, 2.0);
        assert_eq!(m.images_per_s, 1.5);
        assert_eq!(m.prompt_tokens_per_s, 250.0);
        assert_eq!(m.generated_tokens_per_s, 50.0);
        assert_eq!(m.model_prefill_tokens_per_s, 400.0);
        assert_eq!(m.model_decode_tokens_per_s, 90.0);
        assert_eq!(m.prefix_cache_hit_rate, 0.4);
        assert_eq!(m.ttft_s, Percentiles::default());
        let idle = ThroughputMetrics::new(
            &EngineStats::default(),
            &RequestLatency::default(),
            None,
            None,
        );
        assert_eq!(
            (idle.requests_per_s, idle.prefix_cache_hit_rate),
            (0.0, 0.0)
        );
    }
}
