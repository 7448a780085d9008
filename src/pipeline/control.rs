//! Stopping a run: Ctrl-C or SIGTERM (clean stop after the current step, exit 128 + the
//! signal: 130 for SIGINT, 143 for SIGTERM) and the test-only kill hook used by the end-to-end
//! crash tests.
//!
//! Test hook (documented, test-only): `VERISAMPLE_TEST_KILL_AT=<stage>:<n>[:torn]` makes the
//! process SIGKILL itself right after the `n`-th event of `stage` in this process:
//! `generation` (answer records journaled), `judge` (judge records journaled), `write`
//! (split rows handed to the writer) or `publish` (outputs in OUT replaced: the JSONL files,
//! while `run.json` says `writing`). With `:torn` the `n`-th journal record is written
//! only half before the kill, leaving a torn record for the replay to detect. With `:wait`
//! the process is not killed: it waits there until a stop is requested (SIGINT/SIGTERM), so
//! a test's signal surely arrives while the run is still running. The variable
//! is read once at start. The hook is compiled only with the `test-hooks` cargo feature, which
//! the crate's tests enable (a dev-dependency of the crate on itself); a release build has
//! neither the variable nor a branch per event.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::journal::Journal;

/// Environment variable of the test kill hook.
#[cfg(feature = "test-hooks")]
pub const KILL_AT_ENV: &str = "VERISAMPLE_TEST_KILL_AT";
/// Bytes of a record left behind by the `:torn` test hook (header + a few payload bytes).
#[cfg(feature = "test-hooks")]
const TORN_BYTES: usize = 12;
/// Exit status of a run stopped by Ctrl-C (128 + SIGINT), and of a stop not caused by a
/// signal.
pub const EXIT_INTERRUPTED: i32 = 130;

/// The first stop signal received (0: none).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The exit status of a stopped run: 128 + the signal that stopped it (SIGINT 130, SIGTERM
/// 143, the shell convention), [`EXIT_INTERRUPTED`] when no signal was received.
pub fn interrupted_exit_code() -> i32 {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => EXIT_INTERRUPTED,
        signal => 128 + signal,
    }
}

/// Where the kill hook fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillStage {
    /// After answer records are journaled.
    Generation,
    /// After judge records are journaled.
    Judge,
    /// After split rows are written (staged, not yet published).
    Write,
    /// After the write phase replaced an output in OUT (1: `errors.jsonl`, 2:
    /// `cleaning.jsonl`, 3: `generations.jsonl`): inside the window that `run.json`'s status
    /// `writing` covers.
    Publish,
}

/// A parsed `VERISAMPLE_TEST_KILL_AT`.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillAt {
    /// The stage.
    pub stage: KillStage,
    /// Fire at the `n`-th event (1-based).
    pub n: u64,
    /// Leave a torn journal record behind.
    pub torn: bool,
    /// Wait for a stop request instead of dying.
    pub wait: bool,
}

#[cfg(feature = "test-hooks")]
impl KillAt {
    /// Parse `<stage>:<n>[:torn|:wait]`; `None` for anything else.
    pub fn parse(s: &str) -> Option<KillAt> {
        let mut parts = s.split(':');
        let stage = match parts.next()? {
            "generation" => KillStage::Generation,
            "judge" => KillStage::Judge,
            "write" => KillStage::Write,
            "publish" => KillStage::Publish,
            _ => return None,
        };
        let n = parts.next()?.parse().ok().filter(|&n| n > 0)?;
        let (torn, wait) = match parts.next() {
            None => (false, false),
            Some("torn") => (true, false),
            Some("wait") => (false, true),
            Some(_) => return None,
        };
        parts.next().is_none().then_some(KillAt {
            stage,
            n,
            torn,
            wait,
        })
    }

    /// Read [`KILL_AT_ENV`]; `None` when unset or malformed.
    pub fn from_env() -> Option<KillAt> {
        std::env::var(KILL_AT_ENV)
            .ok()
            .as_deref()
            .and_then(KillAt::parse)
    }
}

/// Kill this process now with SIGKILL (no destructor, no flush), as a test's `kill -9`.
#[cfg(feature = "test-hooks")]
fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    // If `kill` is unavailable, abort is the closest: no unwinding, no buffered writes.
    std::process::abort()
}

/// Stop controls handed to [`super::run`].
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    /// Set (by the Ctrl-C handler) to stop after the current step.
    pub stop: Arc<AtomicBool>,
    /// The test kill hook.
    #[cfg(feature = "test-hooks")]
    pub kill_at: Option<KillAt>,
}

impl RunControl {
    /// A control with the kill hook read from the environment and a fresh stop flag.
    pub fn from_env() -> RunControl {
        RunControl {
            stop: Arc::new(AtomicBool::new(false)),
            #[cfg(feature = "test-hooks")]
            kill_at: KillAt::from_env(),
        }
    }

    /// `true` once a stop was requested.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether the hook kills at the `count`-th event of `stage` (and whether torn); a `:wait`
    /// hook instead blocks here until a stop is requested and then reports nothing due.
    #[cfg(feature = "test-hooks")]
    fn kill_due(&self, stage: KillStage, count: u64) -> Option<bool> {
        let k = self.kill_at.filter(|k| k.stage == stage && k.n == count)?;
        if k.wait {
            while !self.stopped() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            return None;
        }
        Some(k.torn)
    }

    /// Test kill hook after the `count`-th event of `stage` (a split row written): SIGKILL
    /// this process when due. Nothing without the `test-hooks` feature.
    #[inline]
    pub fn kill_point(&self, stage: KillStage, count: u64) {
        #[cfg(feature = "test-hooks")]
        if self.kill_due(stage, count).is_some() {
            kill_self();
        }
        #[cfg(not(feature = "test-hooks"))]
        let _ = (stage, count);
    }

    /// Test kill hook at the `count`-th journaled event of `stage`: when due, append `entry`
    /// to `journal` (only its first bytes with `:torn`) and SIGKILL this process; otherwise
    /// leave both untouched (the caller appends). Nothing without the `test-hooks` feature.
    #[inline]
    pub fn kill_point_journaled<T: Serialize + DeserializeOwned>(
        &self,
        stage: KillStage,
        count: u64,
        journal: &mut Journal<T>,
        entry: &T,
    ) {
        #[cfg(feature = "test-hooks")]
        if let Some(torn) = self.kill_due(stage, count) {
            let _ = if torn {
                journal.append_torn(entry, TORN_BYTES)
            } else {
                journal.append(entry)
            };
            kill_self();
        }
        #[cfg(not(feature = "test-hooks"))]
        let _ = (stage, count, journal, entry);
    }
}

/// Install the process-wide handler of SIGINT (Ctrl-C) and SIGTERM (Slurm, Kubernetes): the
/// first signal sets `control.stop` (the run finishes its step, flushes and exits with
/// [`interrupted_exit_code`]); a second one exits with 128 + that signal at once. Call once,
/// from the binary.
///
/// Errors: the OS refused to register the handler.
pub fn install_ctrlc(control: &RunControl) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let stop = control.stop.clone();
    std::thread::spawn(move || {
        for signal in signals.forever() {
            // The signal first: the run may see `stop` and exit at once.
            let _ = STOP_SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(128 + signal);
            }
            eprintln!(
                "verisample: interrupt received, finishing the current step (Ctrl-C again to quit now)"
            );
        }
    });
    Ok(())
}

#[cfg(all(test, feature = "test-hooks"))]
mod tests {
    use super::*;

    #[test]
    fn kill_at_parse_table() {
        let k = |stage, n, torn| {
            Some(KillAt {
                stage,
                n,
                torn,
                wait: false,
            })
        };
        let cases = [
            ("generation:5", k(KillStage::Generation, 5, false)),
            ("judge:1:torn", k(KillStage::Judge, 1, true)),
            (
                "generation:1:wait",
                Some(KillAt {
                    stage: KillStage::Generation,
                    n: 1,
                    torn: false,
                    wait: true,
                }),
            ),
            ("write:12", k(KillStage::Write, 12, false)),
            ("publish:2", k(KillStage::Publish, 2, false)),
            ("write:0", None),
            ("generation", None),
            ("generation:x", None),
            ("decode:3", None),
            ("judge:2:soft", None),
            ("judge:2:torn:x", None),
        ];
        for (s, want) in cases {
            assert_eq!(KillAt::parse(s), want, "{s}");
        }
    }
}
