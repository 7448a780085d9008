//! What a run tells people and scripts: live progress (bar, JSON lines or nothing), the
//! statistics of `run.json`, the final summary ([`summary`]), the statistics section of the dataset
//! card and its chart ([`chart`]).

pub mod card;
pub mod chart;
pub mod start;
pub mod summary;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::settings::ProgressMode;

/// Seconds between two JSON progress lines.
pub const JSONL_INTERVAL: Duration = Duration::from_secs(5);
/// Seconds between two throughput samples kept for the chart.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Most throughput samples kept (older ones are thinned by half when full).
pub const MAX_SAMPLES: usize = 4096;

/// One point of throughput over the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputSample {
    /// Seconds since the start of the run.
    pub t_s: f64,
    /// Items finished in this process so far (both passes).
    pub items: u64,
    /// Tokens generated in this process so far (both passes).
    pub tokens: u64,
}

/// How the questions of a run (or of one family) fared over their K samples (K = 1 for a
/// greedy run): how many one sample (sample 0) answers, how many any of the K do, and how many
/// samples were accepted and rejected. Counted once per question
/// (`pipeline::sampled::QuestionSamples::count`); every accept rate the summary, card and
/// chart show comes from these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingStats {
    /// Samples per question (K).
    pub samples: u64,
    /// Questions sampled (kept questions of readable rows).
    pub questions: u64,
    /// Questions whose sample 0 was accepted (pass@1 is this over `questions`).
    pub pass_at_1: u64,
    /// Questions with at least one accepted sample (pass@K).
    pub pass_at_k: u64,
    /// Accepted samples, over all questions.
    pub accepted_samples: u64,
    /// Distinct (reasoning, answer) pairs among each question's accepted samples, summed
    /// over the questions: what `--distinct-samples on` writes.
    #[serde(default)]
    pub distinct_accepted: u64,
    /// Rejected samples, over all questions (a failed generation is neither accepted nor
    /// rejected): the per-sample accept rate is `accepted_samples` over both.
    #[serde(default)]
    pub wrong_samples: u64,
}

impl SamplingStats {
    /// pass@1 as a percentage of the questions (0 when there are none).
    pub fn pass_at_1_percent(&self) -> f64 {
        percent(self.pass_at_1, self.questions)
    }

    /// pass@K as a percentage of the questions (0 when there are none).
    pub fn pass_at_k_percent(&self) -> f64 {
        percent(self.pass_at_k, self.questions)
    }

    /// Accepted samples as a percentage of the accepted and rejected samples.
    pub fn per_sample_percent(&self) -> f64 {
        percent(
            self.accepted_samples,
            self.accepted_samples + self.wrong_samples,
        )
    }
}

/// `n` as a percentage of `of` (0 when `of` is 0).
fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

/// Judge pass statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeStats {
    /// Verifier rejects the judge looked at.
    pub judged: u64,
    /// Verdict → count over `judged`.
    pub verdicts: BTreeMap<String, u64>,
    /// Verifier rejects the judge moved into the accepted splits.
    pub overturns: u64,
    /// Judge `CORRECT`s refused by the number guard.
    pub number_guard_blocks: u64,
    /// Judged items (rescue and calibration) whose judge prompt — question, references and
    /// candidate answer — an earlier item had: they took its verdict instead of a generation
    /// of their own (the judge is greedy and batch-invariant: the same prompt, the same output).
    #[serde(default)]
    pub reused: u64,
}

/// Calibration agreement: the judge on verifier accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calibration {
    /// Items judged `CORRECT`.
    pub agreed: u64,
    /// Items judged.
    pub total: u64,
}

/// Throughput of this process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// Requests generated in this process (answer + judge).
    pub generated_items: u64,
    /// Tokens generated in this process.
    pub generated_tokens: u64,
    /// Prompt tokens processed in this process.
    pub prompt_tokens: u64,
    /// Results taken from the journal instead of generated (resume).
    pub replayed_items: u64,
    /// `generated_items / elapsed_s`.
    pub items_per_s: f64,
    /// `generated_tokens / elapsed_s`.
    pub tokens_per_s: f64,
    /// Samples over time for the chart.
    pub samples: Vec<ThroughputSample>,
}

/// Upper bounds (inclusive, in generated tokens) of the answer-length histogram's buckets:
/// powers of two, so a bucket reads "≤ 8 tokens"; the last bucket also holds longer answers.
pub const ANSWER_LENGTH_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Histogram of answer generations' lengths in tokens (EOS included), per outcome; bucket
/// `i` counts lengths in `(ANSWER_LENGTH_BOUNDS[i-1], ANSWER_LENGTH_BOUNDS[i]]`, the last one
/// everything above too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerLengths {
    /// Accepted items per bucket.
    pub accepted: [u64; 11],
    /// Rejected items per bucket.
    pub rejected: [u64; 11],
}

impl AnswerLengths {
    /// The bucket index of a generation of `tokens` tokens.
    pub fn bucket(tokens: u64) -> usize {
        ANSWER_LENGTH_BOUNDS
            .iter()
            .position(|&b| tokens <= b)
            .unwrap_or(ANSWER_LENGTH_BOUNDS.len() - 1)
    }

    /// Count one answer of `tokens` tokens, accepted or not.
    pub fn record(&mut self, tokens: u64, accepted: bool) {
        let b = Self::bucket(tokens);
        if accepted {
            self.accepted[b] += 1;
        } else {
            self.rejected[b] += 1;
        }
    }

    /// The label of bucket `i`: `≤8`, or `>512` for the last one.
    pub fn label(i: usize) -> String {
        match i {
            i if i + 1 == ANSWER_LENGTH_BOUNDS.len() => format!(">{}", ANSWER_LENGTH_BOUNDS[i - 1]),
            i => format!("≤{}", ANSWER_LENGTH_BOUNDS[i]),
        }
    }
}

/// What `--limit N` left out of a run: it took the first N stream elements (rows) of its shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowLimit {
    /// N.
    pub limit: u64,
    /// Input rows of the shard after the first N (counted by the parquet footers), which the
    /// run did not read: neither input errors nor rows not read (`unread_rows`); 0 when the
    /// shard has no more than N.
    pub left_out_rows: u64,
}

/// Counts of one run (one shard or a merge).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Input rows in this shard, read or not: an unreadable row group counts its rows (from
    /// the parquet footer); a file whose rows cannot be counted counts none
    /// (`unread_files`). With `--limit N`, of the first N only (see `limit`).
    pub input_rows: u64,
    /// `--limit N` of the run and the rows it left out; absent without `--limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<RowLimit>,
    /// Rows of row groups that could not be read (counted by the footer): their questions are
    /// not in `input_items`; each row group is one `errors.jsonl` line.
    #[serde(default)]
    pub unread_rows: u64,
    /// Input files none of whose rows could be read or counted (no readable footer, a link
    /// not followed): one `errors.jsonl` line each, `file unreadable` in the summary.
    #[serde(default)]
    pub unread_files: u64,
    /// `qa` entries of the rows of this shard that were not refused whole (unreadable, or an
    /// image or family that fails its check: one `errors.jsonl` line each): the headline's
    /// "of M questions".
    pub input_items: u64,
    /// Split name → rows written.
    pub split_rows: BTreeMap<String, u64>,
    /// Split name → `qa` entries written.
    pub split_items: BTreeMap<String, u64>,
    /// Split name → the names of the shard files under `data/` that the run wrote: a later
    /// run in this folder replaces these and keeps any other file named like a shard.
    #[serde(default)]
    pub split_files: BTreeMap<String, Vec<String>>,
    /// Shard file name (of [`RunStats::split_files`], under `data/`) → hex SHA-256 of its
    /// content as the run published it: `verify` reports a file edited after the run.
    #[serde(default)]
    pub split_sha256: BTreeMap<String, String>,
    /// Items accepted (each lands in `_RS_nothink`, and in `_RS_think` with reasoning on).
    pub accepted: u64,
    /// Items rejected.
    pub rejected: u64,
    /// How accepted items were accepted (`verifier:alnum:first_line`, `judge`, …) → count.
    pub accepted_by: BTreeMap<String, u64>,
    /// Reject reason → count.
    pub reject_reasons: BTreeMap<String, u64>,
    /// Cleaning drop reason → count.
    pub cleaning_drops: BTreeMap<String, u64>,
    /// Lines of `errors.jsonl`.
    pub errors: u64,
    /// Error field (`image.bytes`, `qa[0].answer`, `generation`, …) → count.
    pub errors_by_field: BTreeMap<String, u64>,
    /// Judge statistics.
    pub judge: JudgeStats,
    /// Calibration agreement, when `--judge-calibrate N > 0`.
    pub calibration: Option<Calibration>,
    /// Throughput.
    pub throughput: Throughput,
    /// Lengths of the answer generations that reached a split (judge generations excluded).
    #[serde(default)]
    pub answer_lengths: AnswerLengths,
    /// Rejection sampling (absent for a greedy run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingStats>,
    /// `--think-budget`: the budget and the answers whose reasoning it ended (absent for a
    /// run without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_budget: Option<ThinkBudgetStats>,
    /// Family → how its questions fared (with K = 1 for a greedy run: pass@1 is its accept
    /// rate): the accept rate per family of the card and chart.
    #[serde(default)]
    pub families: BTreeMap<String, SamplingStats>,
}

/// How a thinking budget fared (`--think-budget N`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkBudgetStats {
    /// N, reasoning tokens.
    pub budget: u64,
    /// Answer generations whose reasoning reached N and was ended by the early-stopping
    /// text (`think_budget_hit` in `generations.jsonl` and `clean_meta`).
    pub hit: u64,
    /// Answer generations routed in all.
    pub answers: u64,
}

/// Live progress of a run, written to stderr.
#[derive(Debug)]
pub struct Progress {
    mode: ProgressMode,
    bar: Option<ProgressBar>,
    start: Instant,
    phase: &'static str,
    phase_start: Instant,
    phase_done: u64,
    total: u64,
    items: u64,
    tokens: u64,
    verified: u64,
    accepted: u64,
    last_line: Instant,
    last_sample: Instant,
    samples: Vec<ThroughputSample>,
}

impl Progress {
    /// Start progress in `mode` (`ProgressMode::None` = silent).
    pub fn new(mode: ProgressMode) -> Progress {
        let now = Instant::now();
        Progress {
            mode,
            bar: None,
            start: now,
            phase: "start",
            phase_start: now,
            phase_done: 0,
            total: 0,
            items: 0,
            tokens: 0,
            verified: 0,
            accepted: 0,
            last_line: now,
            last_sample: now,
            samples: Vec::new(),
        }
    }

    /// Begin a phase (`generate`, `judge`, `write`) of about `total` items.
    pub fn phase(&mut self, name: &'static str, total: u64) {
        self.end_phase();
        self.phase = name;
        self.phase_start = Instant::now();
        self.phase_done = 0;
        self.total = total;
        if self.mode == ProgressMode::Bar {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style =
                ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {msg} ETA {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(name);
            self.bar = Some(bar);
        }
    }

    /// Update the estimated total of the current phase.
    pub fn set_total(&mut self, total: u64) {
        self.total = total;
        if let Some(bar) = &self.bar {
            bar.set_length(total);
        }
    }

    /// Count one finished item of the current phase. `tokens`: generated tokens (0 when
    /// replayed); `accepted`: the verifier's decision, when known.
    pub fn advance(&mut self, tokens: u64, generated: bool, accepted: Option<bool>) {
        self.phase_done += 1;
        if generated {
            self.items += 1;
            self.tokens += tokens;
        }
        if let Some(a) = accepted {
            self.verified += 1;
            self.accepted += u64::from(a);
        }
        let now = Instant::now();
        if now.duration_since(self.last_sample) >= SAMPLE_INTERVAL {
            self.last_sample = now;
            self.push_sample(now);
        }
        match self.mode {
            ProgressMode::Bar => {
                if let Some(bar) = &self.bar {
                    bar.set_position(self.phase_done);
                    bar.set_message(self.rates_message(now));
                }
            }
            ProgressMode::Jsonl => {
                if now.duration_since(self.last_line) >= JSONL_INTERVAL {
                    self.last_line = now;
                    self.emit_line(now);
                }
            }
            ProgressMode::None => {}
        }
    }

    fn push_sample(&mut self, now: Instant) {
        if self.samples.len() >= MAX_SAMPLES {
            let kept: Vec<_> = self.samples.iter().copied().step_by(2).collect();
            self.samples = kept;
        }
        self.samples.push(ThroughputSample {
            t_s: now.duration_since(self.start).as_secs_f64(),
            items: self.items,
            tokens: self.tokens,
        });
    }

    fn rates(&self, now: Instant) -> (f64, f64, Option<f64>, Option<f64>) {
        let secs = now.duration_since(self.phase_start).as_secs_f64().max(1e-9);
        let all = now.duration_since(self.start).as_secs_f64().max(1e-9);
        let items_s = self.phase_done as f64 / secs;
        let tok_s = self.tokens as f64 / all;
        let rate = (self.verified > 0).then(|| self.accepted as f64 / self.verified as f64);
        let eta = (items_s > 0.0 && self.total >= self.phase_done)
            .then(|| (self.total - self.phase_done) as f64 / items_s);
        (items_s, tok_s, rate, eta)
    }

    fn rates_message(&self, now: Instant) -> String {
        let (items_s, tok_s, rate, _) = self.rates(now);
        let rate = rate.map_or("-".to_string(), |r| format!("{:.1}%", 100.0 * r));
        format!("{items_s:.2} it/s {tok_s:.0} tok/s accept {rate}")
    }

    fn emit_line(&self, now: Instant) {
        let (items_s, tok_s, rate, eta) = self.rates(now);
        let line = serde_json::json!({
            "phase": self.phase,
            "done": self.phase_done,
            "total": self.total,
            "items_per_s": items_s,
            "tokens_per_s": tok_s,
            "accept_rate": rate,
            "eta_s": eta,
            "elapsed_s": now.duration_since(self.start).as_secs_f64(),
        });
        let _ = writeln!(std::io::stderr(), "{line}");
    }

    fn end_phase(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.mode == ProgressMode::Jsonl && self.phase != "start" {
            self.emit_line(Instant::now());
        }
    }

    /// Close the bar and return the throughput of the run so far.
    pub fn finish(&mut self, prompt_tokens: u64, replayed_items: u64) -> Throughput {
        self.end_phase();
        let now = Instant::now();
        self.push_sample(now);
        let elapsed_s = now.duration_since(self.start).as_secs_f64();
        let per_s = |n: u64| {
            if elapsed_s > 0.0 {
                n as f64 / elapsed_s
            } else {
                0.0
            }
        };
        Throughput {
            elapsed_s,
            generated_items: self.items,
            generated_tokens: self.tokens,
            prompt_tokens,
            replayed_items,
            items_per_s: per_s(self.items),
            tokens_per_s: per_s(self.tokens),
            samples: self.samples.clone(),
        }
    }
}

fn md_table(title: (&str, &str), map: &BTreeMap<String, u64>) -> String {
    let mut s = format!("| {} | {} |\n| --- | ---: |\n", title.0, title.1);
    if map.is_empty() {
        s.push_str("| (none) | 0 |\n");
    }
    for (k, v) in map {
        s.push_str(&format!("| `{k}` | {v} |\n"));
    }
    s
}

/// The accept rate per family as a Markdown table, from [`RunStats::families`]: a greedy run's
/// accepted questions; with `--samples K` pass@1 and pass@K over the questions and the
/// per-sample rate over the samples.
fn family_table(stats: &RunStats) -> String {
    let sampled = stats.sampling.as_ref().map(|k| k.samples);
    let mut s = match sampled {
        None => "| family | questions | accepted |\n| --- | ---: | ---: |\n".to_string(),
        Some(k) => format!(
            "| family | questions | pass@1 | pass@{k} | accepted samples (per-sample rate) |\n\
             | --- | ---: | ---: | ---: | ---: |\n"
        ),
    };
    for (family, f) in &stats.families {
        let rate = |n: u64, pct: f64| format!("{n} ({pct:.1} %)");
        let pass_1 = rate(f.pass_at_1, f.pass_at_1_percent());
        match sampled {
            None => s.push_str(&format!("| `{family}` | {} | {pass_1} |\n", f.questions)),
            Some(_) => s.push_str(&format!(
                "| `{family}` | {} | {pass_1} | {} | {} of {} ({:.1} %) |\n",
                f.questions,
                rate(f.pass_at_k, f.pass_at_k_percent()),
                f.accepted_samples,
                f.accepted_samples + f.wrong_samples,
                f.per_sample_percent()
            )),
        }
    }
    s
}

/// The statistics section of the dataset card (Markdown), embedding the chart at
/// `chart_file` (relative to the card); `judge`: the run's judge was on; `distinct`:
/// `--distinct-samples on` (only the first sample of each distinct pair was written).
pub fn card_markdown(
    stats: &RunStats,
    chart_file: &str,
    (judge, distinct): (bool, bool),
) -> String {
    let mut s = String::from("## Statistics\n\n");
    s.push_str(&format!(
        "![questions per split, accept rate per family, reject reasons, judge verdicts, throughput and answer lengths]({chart_file})\n\n"
    ));
    // A dataset made with `--limit` says it covers only the first rows of its input.
    let limited = stats
        .limit
        .filter(|l| l.left_out_rows > 0)
        .map_or(String::new(), |l| {
            format!(
                " (the first {} of {}: `--limit {}`)",
                stats.input_rows,
                stats.input_rows + l.left_out_rows,
                l.limit
            )
        });
    s.push_str(&format!(
        "Input: {} rows{limited}, {} questions. Accepted {} and rejected {} questions, cleaning drops {}, input errors {}.\n\n",
        stats.input_rows,
        stats.input_items,
        stats.accepted,
        stats.rejected,
        stats.cleaning_drops.values().sum::<u64>(),
        stats.errors
    ));
    // With `--samples K`, split entries, reasons and acceptances count samples.
    let unit = if stats.sampling.is_some() {
        "samples"
    } else {
        "questions"
    };
    if let Some(b) = &stats.think_budget {
        s.push_str(&format!(
            "Thinking budget: {} tokens. It ended the reasoning of {} of {} answers with the \
             model family's early-stopping text (`think_budget_hit` in `clean_meta` and \
             `generations.jsonl`).\n\n",
            b.budget, b.hit, b.answers
        ));
    }
    if let Some(k) = &stats.sampling {
        s.push_str(&format!(
            "Rejection sampling: {} samples per question. pass@1 {:.1} % ({} of {} questions), \
             pass@{} {:.1} % ({}), {} accepted samples, {} distinct (reasoning, answer) pairs in \
             all (a pair counted once per question){}. Each accepted sample is its own QA item \
             (`clean_meta.sample_index`), and so is each wrong sample in the rejected split.\n\n",
            k.samples,
            k.pass_at_1_percent(),
            k.pass_at_1,
            k.questions,
            k.samples,
            k.pass_at_k_percent(),
            k.pass_at_k,
            k.accepted_samples,
            k.distinct_accepted,
            if distinct {
                format!(
                    " (`--distinct-samples on`: only the first sample of each pair is written, \
                     the {} repeats are not; the tables below count every accepted sample)",
                    k.accepted_samples - k.distinct_accepted
                )
            } else {
                String::new()
            }
        ));
    }
    s.push_str(&format!(
        "| split | rows | {unit} |\n| --- | ---: | ---: |\n"
    ));
    if stats.split_items.is_empty() {
        s.push_str("| (none) | 0 | 0 |\n");
    }
    for (name, n) in &stats.split_items {
        let rows = stats.split_rows.get(name).copied().unwrap_or(0);
        s.push_str(&format!("| `{name}` | {rows} | {n} |\n"));
    }
    s.push('\n');
    s.push_str(&family_table(stats));
    s.push('\n');
    s.push_str(&md_table(("reject reason", unit), &stats.reject_reasons));
    s.push('\n');
    s.push_str(&md_table(("accepted by", unit), &stats.accepted_by));
    s.push('\n');
    s.push_str(&md_table(
        ("cleaning drop", "questions"),
        &stats.cleaning_drops,
    ));
    s.push('\n');
    s.push_str("| answer length (tokens) | accepted | rejected |\n| --- | ---: | ---: |\n");
    let l = &stats.answer_lengths;
    for i in (0..ANSWER_LENGTH_BOUNDS.len()).filter(|&i| l.accepted[i] + l.rejected[i] > 0) {
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            AnswerLengths::label(i),
            l.accepted[i],
            l.rejected[i]
        ));
    }
    s.push('\n');
    if judge {
        s.push_str(&format!(
            "Judge: {} verifier rejects judged, {} moved to accepted, {} `CORRECT` refused by the number guard; {} judge verdict(s) reused from an identical earlier (question, reference, answer) instead of generated.\n",
            stats.judge.judged, stats.judge.overturns, stats.judge.number_guard_blocks, stats.judge.reused
        ));
    } else {
        s.push_str("Judge: off (`--judge off`): verifier rejects stay rejected.\n");
    }
    if let Some(c) = stats.calibration {
        s.push_str(&format!(
            "Calibration: the judge agreed with the string verifier on {}/{} verifier accepts (decisions unchanged).\n",
            c.agreed, c.total
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_shows_the_counts() {
        let stats = RunStats {
            input_rows: 78,
            input_items: 78,
            accepted: 60,
            rejected: 18,
            split_items: BTreeMap::from([
                ("OrandCar_RS_think".to_string(), 60),
                ("OrandCar_rejected".to_string(), 18),
            ]),
            split_rows: BTreeMap::from([
                ("OrandCar_RS_think".to_string(), 58),
                ("OrandCar_rejected".to_string(), 18),
            ]),
            families: BTreeMap::from([(
                "OrandCar".to_string(),
                SamplingStats {
                    samples: 1,
                    questions: 78,
                    pass_at_1: 60,
                    pass_at_k: 60,
                    accepted_samples: 60,
                    distinct_accepted: 60,
                    wrong_samples: 18,
                },
            )]),
            reject_reasons: BTreeMap::from([("wrong_answer".to_string(), 18)]),
            calibration: Some(Calibration {
                agreed: 59,
                total: 60,
            }),
            ..Default::default()
        };
        let mut stats = stats;
        stats.answer_lengths.record(9, true);
        stats.answer_lengths.record(16, false);
        let card = card_markdown(&stats, "chart.svg", (true, false));
        assert!(card.contains("| `wrong_answer` | 18 |"), "{card}");
        assert!(card.contains("| split | rows | questions |"), "{card}");
        assert!(card.contains("| `OrandCar_RS_think` | 58 | 60 |"), "{card}");
        assert!(card.contains("| `OrandCar` | 78 | 60 (76.9 %) |"), "{card}");
        // With `--samples 4`: samples where samples are counted, pass@1, pass@4 and the
        // per-sample rate per family.
        let mut sampled = stats.clone();
        let k = SamplingStats {
            samples: 4,
            questions: 78,
            pass_at_1: 62,
            pass_at_k: 68,
            accepted_samples: 246,
            distinct_accepted: 246,
            wrong_samples: 66,
        };
        sampled.families.insert("OrandCar".into(), k.clone());
        sampled.sampling = Some(k);
        let card_k = card_markdown(&sampled, "chart.svg", (true, false));
        assert!(card_k.contains("| split | rows | samples |"), "{card_k}");
        assert!(
            card_k
                .contains("| `OrandCar` | 78 | 62 (79.5 %) | 68 (87.2 %) | 246 of 312 (78.8 %) |"),
            "{card_k}"
        );
        assert!(card.contains("| ≤16 | 1 | 1 |"), "{card}");
        assert!(
            !card.contains("| ≤8 |"),
            "empty buckets are left out: {card}"
        );
        assert!(card.contains("59/60"));
        assert!(
            card.contains("; 0 judge verdict(s) reused from an identical earlier"),
            "{card}"
        );
        assert!(card.contains("](chart.svg)"));
    }
}
