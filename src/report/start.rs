//! Progress of a run's start on stderr — hashing the model and input files, loading the
//! weights — so that a start is never silent for more than a second: a bar that ticks every
//! [`TICK`] on a terminal, a JSON line at least every second with `--progress jsonl`, else one
//! log line when a step begins and one when it ends.

use std::io::Write as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::settings::ProgressMode;

/// How often the terminal bar redraws, also when no byte moved (a load shows its seconds).
pub const TICK: Duration = Duration::from_millis(200);

/// Most time between two JSON lines of one step (`--progress jsonl`).
const JSONL_EVERY: Duration = Duration::from_secs(1);

/// How a step measures its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Bytes read, out of a total when it is known.
    Bytes(Option<u64>),
    /// Only the time it takes (loading weights: the loader reports nothing on the way).
    Time,
}

/// One step of the start: `what` (`hash model files`, `hash input files`, `load the model`).
#[derive(Debug)]
pub struct StartStep {
    mode: ProgressMode,
    what: String,
    measure: Measure,
    done: u64,
    started: Instant,
    last_line: Instant,
    bar: Option<ProgressBar>,
}

/// `bytes` in GB (10⁹ bytes) with 2 decimals.
pub fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

impl StartStep {
    /// Begin the step in `mode` ([`ProgressMode::None`]: log lines at info level, which `-q`
    /// silences).
    pub fn begin(mode: ProgressMode, what: impl Into<String>, measure: Measure) -> Self {
        let now = Instant::now();
        let what = what.into();
        let total = match measure {
            Measure::Bytes(total) => total,
            Measure::Time => None,
        };
        let mut step = Self {
            mode,
            what,
            measure,
            done: 0,
            started: now,
            last_line: now,
            bar: None,
        };
        match mode {
            ProgressMode::Bar => {
                let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
                let template = match measure {
                    Measure::Bytes(Some(_)) => {
                        "{prefix} [{bar:30}] {bytes}/{total_bytes} {elapsed}"
                    }
                    Measure::Bytes(None) => "{prefix} {spinner} {bytes} {elapsed}",
                    Measure::Time => "{prefix} {spinner} {elapsed}",
                };
                let style = ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> ");
                bar.set_style(style);
                bar.set_prefix(step.what.clone());
                bar.enable_steady_tick(TICK);
                step.bar = Some(bar);
            }
            ProgressMode::Jsonl => step.json_line("begin"),
            ProgressMode::None => match total {
                Some(t) => tracing::info!("{}: {}", step.what, gb(t)),
                None => tracing::info!("{}", step.what),
            },
        }
        step
    }

    /// Count `bytes` more done.
    pub fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
        }
        if self.mode == ProgressMode::Jsonl && self.last_line.elapsed() >= JSONL_EVERY {
            self.json_line("progress");
        }
    }

    /// End the step: clear the bar, then a closing line with the seconds and the bytes
    /// counted (a hash from the cache reads none).
    pub fn finish(mut self) {
        let secs = self.started.elapsed().as_secs_f64();
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        match (self.mode, self.measure) {
            (ProgressMode::Jsonl, _) => self.json_line("end"),
            (_, Measure::Time) => tracing::info!("{}: done in {secs:.1} s", self.what),
            (_, Measure::Bytes(_)) => {
                tracing::info!(
                    "{}: done in {secs:.1} s ({} read)",
                    self.what,
                    gb(self.done)
                )
            }
        }
    }

    fn json_line(&mut self, event: &str) {
        self.last_line = Instant::now();
        // The keys of the run's own lines (`phase`, `done`, `total`, `elapsed_s`), in bytes.
        let line = serde_json::json!({
            "phase": self.what,
            "event": event,
            "done": self.done,
            "total": match self.measure {
                Measure::Bytes(total) => total,
                Measure::Time => None,
            },
            "unit": match self.measure {
                Measure::Bytes(_) => "bytes",
                Measure::Time => "seconds",
            },
            "elapsed_s": self.started.elapsed().as_secs_f64(),
        });
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}
