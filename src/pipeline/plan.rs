//! The plan of a run: what the generate phase decided for each input stream element of the
//! shard (readable or not, each question kept, dropped, a duplicate or invalid) and why the
//! judge looks at an item. Made by the generate phase, marked by [`super::dedup`], read by
//! the write phase and by the `--max-errors` abort ([`super::errors`]).

use super::input_check::FieldProblem;
use super::outputs::DuplicateOf;
use crate::record::QaItem;

/// What happens to one `qa` entry of a readable row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ItemPlan {
    /// Cleaned question to generate for.
    Keep(QaItem),
    /// Dropped by cleaning.
    Dropped {
        /// Why (`off_task`, `provenance_mismatch`, …), counted in the report.
        reason: String,
        /// What exactly failed, for `cleaning.jsonl` (see [`super::backend::CleanedItem::Drop`]).
        detail: Option<String>,
    },
    /// A repeat of an earlier kept question of the same family ([`super::dedup`]), dropped as
    /// a duplicate.
    Duplicate(DuplicateOf),
    /// Blank question or reference.
    Invalid(FieldProblem),
}

/// A readable row of the shard.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowOk {
    pub family: String,
    pub clean_meta: String,
    pub image_sha256: String,
    pub items: Vec<ItemPlan>,
}

/// The plan of one input stream element of the shard (images are not kept).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowPlan {
    pub position: u64,
    pub file: String,
    pub row: Option<usize>,
    /// Input rows an unreadable element stands for when not one (`RowError::rows`).
    pub rows: Option<u64>,
    pub body: Result<RowOk, FieldProblem>,
}

impl RowPlan {
    /// The input rows this element is: `Some(1)` for a row, the row group's count for an
    /// unreadable row group, `None` for a file whose rows cannot be counted.
    pub(crate) fn input_rows(&self) -> Option<u64> {
        match (self.row, self.rows) {
            (_, Some(n)) => Some(n),
            (Some(_), None) => Some(1),
            (None, None) => None,
        }
    }
}

/// Why the judge looks at an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JudgeRole {
    /// A verifier reject: the verdict can move it to the accepted splits.
    Rescue,
    /// A verifier accept (calibration): the verdict is only reported.
    Calibration,
}

impl JudgeRole {
    pub(crate) fn name(self) -> &'static str {
        match self {
            JudgeRole::Rescue => "rescue",
            JudgeRole::Calibration => "calibration",
        }
    }
}
