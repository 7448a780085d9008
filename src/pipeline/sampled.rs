//! The outputs of rejection sampling (`--samples K > 1`), beside the greedy ones:
//! - each sample is its own QA item: an accepted one in the accepted splits, a wrong one in
//!   the rejected split (in sample order; an accepted question's wrong samples too);
//! - each split row's `clean_meta` says `"samples": K` and, in `"sample_index"`, the sample of
//!   each of its QA items.
//!
//! The format is declared with the rows ([`crate::record::split_meta`]); `verisample verify` reads
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
        stats.wrong_samples += self.wrong.len() as u64;
    }
}
