//! The end-of-run summary a person reads on stdout (logs and progress stay on stderr): the
//! headline first — accepted N of M questions, by the verifier and by the judge — then the
//! rejects by reason, errors and cleaning drops, time and throughput, whether the run
//! resumed from its journal, and where the output is. `--json` prints the same as one JSON
//! object; `-q` keeps only the line naming where the splits are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Calibration, RowLimit, RunStats};
use crate::route::ACCEPTED_BY_JUDGE;

/// The summary of one run or merge (what `run --json` prints).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The output folder.
    pub out: PathBuf,
    /// Where the splits are (`OUT/data`).
    pub splits_dir: PathBuf,
    /// The dataset card (`OUT/README.md`).
    pub card: PathBuf,
    /// The run report (`OUT/run.json`).
    pub run_report: PathBuf,
    /// Questions (`qa` entries) of readable input rows in this shard.
    pub questions: u64,
    /// Input rows of this shard the run took ([`RunStats::input_rows`]).
    pub input_rows: u64,
    /// `--limit N` and the rows it left out ([`RunStats::limit`]); absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<RowLimit>,
    /// Questions accepted into the training splits.
    pub accepted: u64,
    /// `accepted / questions`, in percent (0 without questions).
    pub accepted_percent: f64,
    /// Accepted by the string verifier.
    pub accepted_by_verifier: u64,
    /// Accepted by the judge (verifier rejects it moved to the accepted splits).
    pub accepted_by_judge: u64,
    /// Questions rejected.
    pub rejected: u64,
    /// Reject reason → questions.
    pub reject_reasons: BTreeMap<String, u64>,
    /// Lines of `errors.jsonl` (unusable input, failed generations).
    pub errors: u64,
    /// Rows of row groups that could not be read ([`RunStats::unread_rows`]).
    pub unread_rows: u64,
    /// Files that could not be read at all ([`RunStats::unread_files`]).
    pub unread_files: u64,
    /// Cleaning drop reason → questions.
    pub cleaning_drops: BTreeMap<String, u64>,
    /// Split name → QA items written: questions, or samples with `--samples K`.
    pub split_items: BTreeMap<String, u64>,
    /// Split name → rows written (what `load_dataset` gives).
    pub split_rows: BTreeMap<String, u64>,
    /// Calibration agreement, when `--judge-calibrate N > 0`.
    pub calibration: Option<Calibration>,
    /// Wall time of this process, seconds.
    pub elapsed_s: f64,
    /// Generations (answers and verdicts) made by this process.
    pub generated: u64,
    /// Generations replayed from the journal instead (a resumed run, a merge).
    pub replayed: u64,
    /// The shard folders a merge joined ([`Summary::of_merge`]); absent for a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_shards: Option<usize>,
    /// Rejection sampling (`--samples K`): pass@1, pass@K, accepted samples; absent for a
    /// greedy run. With it, `accepted` and `rejected` count questions, `accepted_by_*` and
    /// `reject_reasons` samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<super::SamplingStats>,
    /// `--think-budget` and the answers it cut ([`RunStats::think_budget`]); absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_budget: Option<super::ThinkBudgetStats>,
    /// Generations per second in this process.
    pub items_per_s: f64,
    /// Generated tokens per second in this process.
    pub tokens_per_s: f64,
}

fn counts(map: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = map.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sampling line of the summary: K, pass@1, pass@K and the accepted samples.
fn sampling_line(k: &super::SamplingStats) -> String {
    if k.samples == 1 {
        return format!(
            "sampling: 1 sample per question; pass@1 {:.1} %\n",
            k.pass_at_1_percent()
        );
    }
    format!(
        "sampling: {} samples per question; pass@1 {:.1} %, pass@{} {:.1} % of the {} questions \
         sampled; {} accepted samples \
         ({:.2} per question), {} distinct (reasoning, answer) pairs; the rejected split also \
         keeps accepted questions' wrong samples\n",
        k.samples,
        k.pass_at_1_percent(),
        k.samples,
        k.pass_at_k_percent(),
        k.questions,
        k.accepted_samples,
        if k.questions == 0 {
            0.0
        } else {
            k.accepted_samples as f64 / k.questions as f64
        },
        k.distinct_accepted
    )
}

impl Summary {
    /// The summary of `stats` for the output folder `out`.
    pub fn new(stats: &RunStats, out: &Path) -> Summary {
        let by_judge = stats
            .accepted_by
            .get(ACCEPTED_BY_JUDGE)
            .copied()
            .unwrap_or(0);
        let t = &stats.throughput;
        Summary {
            out: out.to_path_buf(),
            splits_dir: out.join(crate::out_files::SPLITS_DIR),
            card: out.join(crate::out_files::CARD_FILE),
            run_report: crate::run_json::path(out),
            questions: stats.input_items,
            input_rows: stats.input_rows,
            limit: stats.limit,
            accepted: stats.accepted,
            accepted_percent: if stats.input_items == 0 {
                0.0
            } else {
                100.0 * stats.accepted as f64 / stats.input_items as f64
            },
            accepted_by_verifier: match &stats.sampling {
                Some(s) => s.accepted_samples.saturating_sub(by_judge),
                None => stats.accepted.saturating_sub(by_judge),
            },
            accepted_by_judge: by_judge,
            rejected: stats.rejected,
            reject_reasons: stats.reject_reasons.clone(),
            errors: stats.errors,
            unread_rows: stats.unread_rows,
            unread_files: stats.unread_files,
            cleaning_drops: stats.cleaning_drops.clone(),
            split_items: stats.split_items.clone(),
            split_rows: stats.split_rows.clone(),
            calibration: stats.calibration,
            elapsed_s: t.elapsed_s,
            generated: t.generated_items,
            replayed: t.replayed_items,
            merged_shards: None,
            sampling: stats.sampling.clone(),
            think_budget: stats.think_budget.clone(),
            items_per_s: t.items_per_s,
            tokens_per_s: t.tokens_per_s,
        }
    }

    /// The summary of a merge of `shards` shard folders: its generations are the shards',
    /// taken from their journals, which the text says instead of calling it a resume.
    pub fn of_merge(mut self, shards: usize) -> Summary {
        self.merged_shards = Some(shards);
        self
    }

    /// What `-q` warns about besides [`Self::where_line`]: input the run could not use (rows
    /// of `errors.jsonl`, rows and files not read), which its full summary shows; `None` when
    /// there is none. A quiet run must not lose input without a word.
    pub fn losses_warning(&self) -> Option<String> {
        (self.errors > 0 || self.unread_rows > 0 || self.unread_files > 0).then(|| {
            format!(
                "{} input errors, {} rows and {} file(s) not read: see errors.jsonl next to {}",
                self.errors,
                self.unread_rows,
                self.unread_files,
                self.run_report.display()
            )
        })
    }

    /// The line `-q` keeps: where the splits, the card and the report are; a run that wrote
    /// no split (an empty shard) has neither splits nor card, and says so.
    pub fn where_line(&self) -> String {
        if self.split_items.is_empty() {
            return format!(
                "no split written (no question of this run reached one), so no dataset card; run report {}",
                self.run_report.display()
            );
        }
        format!(
            "splits in {}, dataset card {}, run report {}",
            self.splits_dir.display(),
            self.card.display(),
            self.run_report.display()
        )
    }

    /// The line under the headline of a run with `--limit`: which rows it took, and how the
    /// rest is done.
    fn limit_line(&self, l: RowLimit) -> String {
        let rows = self.input_rows;
        if l.left_out_rows == 0 {
            return format!("--limit {}: every input row taken ({rows})\n", l.limit);
        }
        format!(
            "--limit {}: the first {rows} of {} input rows; {} left out (not read, not errors): \
             the same command without the limit resumes and does them\n",
            l.limit,
            rows + l.left_out_rows,
            l.left_out_rows
        )
    }

    /// The summary as text lines, headline first (with sampling, the headline counts
    /// questions with an accepted sample, and its "by the verifier / judge" samples).
    pub fn text(&self) -> String {
        let samples = self.sampling.as_ref().map_or(String::new(), |k| {
            format!(", {} samples", k.accepted_samples)
        });
        let mut s = format!(
            "accepted {} of {} questions ({:.1} %){samples}: {} by the verifier, {} by the judge\n",
            self.accepted,
            self.questions,
            self.accepted_percent,
            self.accepted_by_verifier,
            self.accepted_by_judge
        );
        if let Some(l) = self.limit {
            s.push_str(&self.limit_line(l));
        }
        if let Some(k) = &self.sampling {
            s.push_str(&sampling_line(k));
        }
        if let Some(b) = &self.think_budget {
            s.push_str(&format!(
                "thinking budget {} tokens: it ended the reasoning of {} of {} answers\n",
                b.budget, b.hit, b.answers
            ));
        }
        s.push_str(&format!("rejected {}", self.rejected));
        if !self.reject_reasons.is_empty() {
            let what = if self.sampling.is_some() {
                " questions (no sample accepted); wrong samples by reason"
            } else {
                ""
            };
            s.push_str(&format!("{what}: {}", counts(&self.reject_reasons)));
        }
        s.push_str(&format!(
            "\nerrors {}, cleaning drops {}",
            self.errors,
            self.cleaning_drops.values().sum::<u64>()
        ));
        if !self.cleaning_drops.is_empty() {
            s.push_str(&format!(" ({})", counts(&self.cleaning_drops)));
        }
        s.push('\n');
        if self.unread_rows > 0 || self.unread_files > 0 {
            s.push_str(&format!(
                "not read: {} rows (damaged row groups, or a column missing or of the wrong type; their questions are not counted, see errors.jsonl), {} file(s) unreadable\n",
                self.unread_rows, self.unread_files
            ));
        }
        if let Some(c) = self.calibration {
            s.push_str(&format!(
                "calibration: the judge agreed on {} of {} verifier accepts\n",
                c.agreed, c.total
            ));
        }
        // Rates of nothing generated (a merge, a fully replayed resume) would read as a
        // stalled engine ("0.00 items/s"): say there was no generation instead.
        if self.generated == 0 {
            s.push_str(&format!(
                "time {:.1} s, no new generations\n",
                self.elapsed_s
            ));
        } else {
            s.push_str(&format!(
                "time {:.1} s, {:.2} items/s, {:.1} tokens/s, {} new generations\n",
                self.elapsed_s, self.items_per_s, self.tokens_per_s, self.generated
            ));
        }
        if let Some(shards) = self.merged_shards {
            s.push_str(&format!(
                "merged: {} generations from {shards} shard{}\n",
                self.replayed + self.generated,
                if shards == 1 { "" } else { "s" }
            ));
        } else if self.replayed > 0 {
            s.push_str(&format!(
                "resumed: {} of {} generations replayed from the journal\n",
                self.replayed,
                self.replayed + self.generated
            ));
        }
        if !self.split_items.is_empty() {
            let unit = if self.sampling.is_some() {
                "samples"
            } else {
                "questions"
            };
            let splits: Vec<String> = self
                .split_items
                .iter()
                .map(|(name, n)| {
                    let rows = self.split_rows.get(name).copied().unwrap_or(0);
                    format!("{name} {n} {unit} in {rows} rows")
                })
                .collect();
            s.push_str(&format!("splits: {}\n", splits.join(", ")));
        }
        s.push_str(&self.where_line());
        s.push('\n');
        s
    }

    /// The summary as one JSON object (one line).
    pub fn json(&self) -> String {
        // Plain data: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headline_comes_first_and_counts_add_up() {
        let mut stats = RunStats {
            input_rows: 78,
            input_items: 80,
            accepted: 62,
            rejected: 16,
            errors: 2,
            accepted_by: BTreeMap::from([
                ("verifier:alnum:whole".to_string(), 60),
                ("judge".to_string(), 2),
            ]),
            reject_reasons: BTreeMap::from([
                ("wrong_answer".to_string(), 3),
                ("judge_wrong".to_string(), 13),
            ]),
            split_items: BTreeMap::from([("OrandCar_RS_think".to_string(), 62)]),
            split_rows: BTreeMap::from([("OrandCar_RS_think".to_string(), 60)]),
            ..Default::default()
        };
        stats.throughput.elapsed_s = 10.0;
        stats.throughput.generated_items = 25;
        stats.throughput.items_per_s = 2.5;
        stats.throughput.replayed_items = 75;
        let s = Summary::new(&stats, Path::new("o"));
        let text = s.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "accepted 62 of 80 questions (77.5 %): 60 by the verifier, 2 by the judge"
        );
        assert_eq!(lines[1], "rejected 16: judge_wrong 13, wrong_answer 3");
        assert_eq!(lines[2], "errors 2, cleaning drops 0");
        // The generations of this process (not tokens): 100 in all, 75 replayed.
        assert!(
            lines[3].starts_with("time 10.0 s, 2.50 items/s")
                && lines[3].ends_with("tokens/s, 25 new generations"),
            "{text}"
        );
        assert_eq!(
            lines[4],
            "resumed: 75 of 100 generations replayed from the journal"
        );
        assert!(text.ends_with("run report o/run.json\n"), "{text}");
        assert_eq!(
            lines[5],
            "splits: OrandCar_RS_think 62 questions in 60 rows"
        );
        // Nothing generated (a merge, a fully replayed resume): no rates of zero.
        stats.throughput.generated_items = 0;
        stats.throughput.items_per_s = 0.0;
        let replayed = Summary::new(&stats, Path::new("o")).text();
        assert!(
            replayed.contains("time 10.0 s, no new generations\n") && !replayed.contains("items/s"),
            "{replayed}"
        );
        assert!(
            replayed.contains("resumed: 75 of 75 generations replayed"),
            "{replayed}"
        );
        // A merge took its generations from the shards' journals: no resume to speak of.
        let merged = Summary::new(&stats, Path::new("o")).of_merge(3);
        let text = merged.text();
        assert!(
            text.contains("\nmerged: 75 generations from 3 shards\n"),
            "{text}"
        );
        assert!(!text.contains("resumed"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&merged.json()).unwrap();
        assert_eq!(json["merged_shards"], 3);
        let one = Summary::new(&stats, Path::new("o")).of_merge(1).text();
        assert!(
            one.contains("merged: 75 generations from 1 shard\n"),
            "{one}"
        );
        assert_eq!(
            s.losses_warning().as_deref(),
            Some("2 input errors, 0 rows and 0 file(s) not read: see errors.jsonl next to o/run.json")
        );
        let clean = RunStats::default();
        assert_eq!(Summary::new(&clean, Path::new("o")).losses_warning(), None);
        assert_eq!(
            s.where_line(),
            "splits in o/data, dataset card o/README.md, run report o/run.json"
        );
        // An empty shard wrote no split and so no card: the line does not name them.
        let empty = Summary::new(&RunStats::default(), Path::new("o-1")).where_line();
        assert_eq!(
            empty,
            "no split written (no question of this run reached one), so no dataset card; run report o-1/run.json"
        );
        let json: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(json["accepted_by_judge"], 2);
        assert_eq!(json["accepted_percent"], 77.5);
    }

    #[test]
    fn a_limited_run_says_which_rows_it_took_under_the_headline() {
        let stats = RunStats {
            input_rows: 3,
            input_items: 4,
            limit: Some(RowLimit {
                limit: 3,
                left_out_rows: 45,
            }),
            ..Default::default()
        };
        let s = Summary::new(&stats, Path::new("o"));
        let text = s.text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("accepted 0 of 4 questions"), "{text}");
        assert_eq!(
            lines[1],
            "--limit 3: the first 3 of 48 input rows; 45 left out (not read, not errors): the \
             same command without the limit resumes and does them"
        );
        // Left out is not lost: -q has nothing to warn about.
        assert_eq!(s.losses_warning(), None);
        let json: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(json["limit"]["left_out_rows"], 45);
        // A limit the input did not reach.
        let all = RunStats {
            input_rows: 7,
            limit: Some(RowLimit {
                limit: 10,
                left_out_rows: 0,
            }),
            ..Default::default()
        };
        let text = Summary::new(&all, Path::new("o")).text();
        assert_eq!(
            text.lines().nth(1),
            Some("--limit 10: every input row taken (7)")
        );
        // Without --limit: no such line, no key.
        let plain = Summary::new(&RunStats::default(), Path::new("o"));
        assert!(plain.text().lines().nth(1).unwrap().starts_with("rejected"));
        assert!(!plain.json().contains("\"limit\""));
    }
}
