//! The outputs of rejection sampling (`--samples K > 1`), beside the greedy ones:
//! - each accepted sample is its own QA item of the accepted splits;
//! - the rejected split keeps a question once, with every wrong sample: `wrong_vlm`, `reason`,
//!   `judge_verdict` and `judge_raw` hold JSON arrays (as text, in sample order; a verdict or
//!   raw text of a sample the judge never saw is `null`), as several references are stored
//!   in `answer`;
//! - each split row's `clean_meta` says `"samples": K` and, in `"sample_index"`, the sample of
//!   each of its QA items (a list of the wrong samples' indices in the rejected split).
//!
//! The format is declared with the rows ([`crate::record::sampled`]); `verisample verify` reads
//! it back ([`crate::verify_output`]) and recomputes every sample's decision. A run with K = 1
//! writes exactly what a greedy run writes.

use crate::record::RejectedQa;
use crate::report::SamplingStats;

/// How the samples of one question were routed.
#[derive(Debug, Default)]
pub(crate) struct QuestionSamples {
    /// Samples accepted (their entries are in the accepted splits already).
    pub accepted: Vec<u32>,
    /// Samples rejected, with their entries (a failed sample is in `errors.jsonl` only).
    pub wrong: Vec<(u32, RejectedQa)>,
}

impl QuestionSamples {
    /// Count this question in `stats` (pass@1: sample 0 accepted; pass@K: any).
    pub fn count(&self, stats: &mut SamplingStats) {
        stats.questions += 1;
        stats.pass_at_1 += u64::from(self.accepted.contains(&0));
        stats.pass_at_k += u64::from(!self.accepted.is_empty());
        stats.accepted_samples += self.accepted.len() as u64;
    }
}
