//! The outputs of rejection sampling (`--samples K > 1`), beside the greedy ones:
//! - each sample is its own QA item: an accepted one in the accepted splits, a wrong one in
//!   the rejected split (in sample order; an accepted question's wrong samples too);
//! - each split row's `clean_meta` says `"samples": K` and, in `"sample_index"`, the sample of
//!   each of its QA items.
//!
//! The format is declared with the rows ([`crate::record::split_meta`]); `verisample verify` reads
//! it back ([`crate::verify_output`]) and recomputes every sample's decision. A run with K = 1
//! writes exactly what a greedy run writes.

use sha2::{Digest, Sha256};

use crate::record::RejectedQa;
use crate::report::SamplingStats;

/// How the samples of one question were routed.
#[derive(Debug, Default)]
pub(crate) struct QuestionSamples {
    /// Samples accepted (their entries are in the accepted splits already, unless
    /// `--distinct-samples` left a repeated pair out).
    pub accepted: Vec<u32>,
    /// Samples rejected, with their entries (a failed sample is in `errors.jsonl` only).
    pub wrong: Vec<(u32, RejectedQa)>,
    /// The distinct (reasoning, answer) pairs of the accepted samples, as SHA-256 digests.
    pairs: Vec<[u8; 32]>,
}

impl QuestionSamples {
    /// Record an accepted sample's (reasoning, answer) pair; `true` when no earlier accepted
    /// sample of the question (by sample index: samples are routed in order) had it.
    pub fn first_of_pair(&mut self, think: Option<&str>, answer: &str) -> bool {
        let mut h = Sha256::new();
        match think {
            Some(t) => {
                h.update([1]);
                h.update((t.len() as u64).to_le_bytes());
                h.update(t.as_bytes());
            }
            None => h.update([0]),
        }
        h.update(answer.as_bytes());
        let pair: [u8; 32] = h.finalize().into();
        let first = !self.pairs.contains(&pair);
        if first {
            self.pairs.push(pair);
        }
        first
    }

    /// Count this question in `stats` (pass@1: sample 0 accepted; pass@K: any).
    pub fn count(&self, stats: &mut SamplingStats) {
        stats.questions += 1;
        stats.pass_at_1 += u64::from(self.accepted.contains(&0));
        stats.pass_at_k += u64::from(!self.accepted.is_empty());
        stats.accepted_samples += self.accepted.len() as u64;
        stats.distinct_accepted += self.pairs.len() as u64;
        stats.wrong_samples += self.wrong.len() as u64;
    }
}
