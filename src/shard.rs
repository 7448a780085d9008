//! `--shard I/N`: which deterministic part of the input one process takes.
//!
//! Rule: the input is read as one ordered stream of row results (files in the reader's
//! order, rows in file order, an unreadable row or file counting as one element). The
//! element at 0-based stream position `p` belongs to shard `p % N`. `I` is 0-based
//! (`0 ≤ I < N`), as Kubernetes' `JOB_COMPLETION_INDEX`; with a Slurm array use
//! `--shard $((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN))/$SLURM_ARRAY_TASK_COUNT`.
//!
//! Why position modulo N and not a content hash: it partitions exactly (each position has
//! one residue), balances to within one row, and depends only on the input order, which the
//! merge restores. All questions of one image (one row) stay in one shard, so an output row
//! is never split between shards.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Shard `index` of `count` (0-based index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Shard {
    /// 0-based shard index, `< count`.
    pub index: usize,
    /// Number of shards, `≥ 1`.
    pub count: usize,
}

/// A `--shard` value that is not `I/N` with `0 ≤ I < N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{spec}`: {why} (expected I/N with 0 <= I < N, e.g. 0/4)")]
pub struct ShardParseError {
    /// The value given.
    pub spec: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Shard {
    /// The whole input: shard `0/1`.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// `true` when the stream element at `position` belongs to this shard.
    pub fn contains(self, position: u64) -> bool {
        // count ≥ 1 is guaranteed by construction (FromStr / WHOLE).
        position % self.count as u64 == self.index as u64
    }

    /// The stream elements of this shard among the first `n` (its share of an input of `n`).
    pub fn share_of(self, n: u64) -> u64 {
        n.saturating_sub(self.index as u64)
            .div_ceil(self.count as u64)
    }

    /// The stream position of this shard's `k`-th element (0-based).
    pub fn position_of(self, k: u64) -> u64 {
        self.index as u64 + k * self.count as u64
    }

    /// `true` for `0/1`.
    pub fn is_whole(self) -> bool {
        self.count == 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardParseError;
    fn from_str(s: &str) -> Result<Self, ShardParseError> {
        let err = |why| ShardParseError {
            spec: s.to_string(),
            why,
        };
        let (i, n) = s.split_once('/').ok_or_else(|| err("missing '/'"))?;
        let index: usize = i.trim().parse().map_err(|_| err("I is not a number"))?;
        let count: usize = n.trim().parse().map_err(|_| err("N is not a number"))?;
        if count == 0 {
            return Err(err("N must be at least 1"));
        }
        if index >= count {
            return Err(err("I must be smaller than N"));
        }
        Ok(Shard { index, count })
    }
}

impl From<Shard> for String {
    fn from(s: Shard) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for Shard {
    type Error = ShardParseError;
    fn try_from(s: String) -> Result<Self, ShardParseError> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases: &[(&str, Option<(usize, usize)>)] = &[
            ("0/1", Some((0, 1))),
            ("3/4", Some((3, 4))),
            (" 1 / 2 ", Some((1, 2))),
            ("4/4", None),
            ("0/0", None),
            ("1", None),
            ("a/2", None),
            ("-1/2", None),
            ("1/2/3", None),
        ];
        for (s, want) in cases {
            let got = s.parse::<Shard>().ok().map(|s| (s.index, s.count));
            assert_eq!(got, *want, "{s}");
        }
    }

    #[test]
    fn shards_partition_positions_exactly() {
        for n in 1..=7usize {
            for p in 0..100u64 {
                let owners: Vec<usize> = (0..n)
                    .filter(|&i| Shard { index: i, count: n }.contains(p))
                    .collect();
                assert_eq!(owners, vec![(p % n as u64) as usize], "p={p} n={n}");
            }
        }
    }
}
