//! The plan of a run: what the generate phase decided for each input stream element of the
//! shard (readable or not, each question kept, dropped, a duplicate or invalid) and why the
//! judge looks at an item. Made by the generate phase, marked by [`super::dedup`], read by
//! the write phase and by the `--max-errors` abort ([`super::errors`]). The plans of a run go
//! to disk as they are made ([`Plans`]) and are read back in order by the later phases.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::PipelineError;
use super::input_check::FieldProblem;
use super::outputs::DuplicateOf;
use crate::record::QaItem;

/// What happens to one `qa` entry of a readable row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RowOk {
    pub family: String,
    pub clean_meta: String,
    pub image_sha256: String,
    pub items: Vec<ItemPlan>,
}

/// The plan of one input stream element of the shard (images are not kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// The plans of a run in stream order, one JSON line each in an unlinked temporary file in
/// OUT (gone with the process), so that memory does not grow with the input; what the phases
/// ask of the whole (how many, whether every element is an unreadable file, the first) kept
/// aside.
pub(crate) struct Plans {
    writer: BufWriter<File>,
    file: File,
    dir: PathBuf,
    len: usize,
    /// Whether every plan so far is a file that could not be read at all.
    all_unreadable_files: bool,
    first: Option<RowPlan>,
}

impl Plans {
    /// An empty log in `dir`.
    ///
    /// Errors: the temporary file cannot be created.
    pub(crate) fn temporary(dir: &Path) -> Result<Plans, PipelineError> {
        let io = |e: std::io::Error| Self::io_error(dir, e);
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = tempfile::tempfile_in(dir).map_err(io)?;
        Ok(Plans {
            writer: BufWriter::with_capacity(1 << 16, file.try_clone().map_err(io)?),
            file,
            dir: dir.to_path_buf(),
            len: 0,
            all_unreadable_files: true,
            first: None,
        })
    }

    fn io_error(dir: &Path, source: std::io::Error) -> PipelineError {
        crate::journal::JournalError::Io {
            path: dir.join("(the run's temporary plan file)"),
            source,
        }
        .into()
    }

    /// Append the plan of the next stream element.
    ///
    /// Errors: writing the temporary file.
    pub(crate) fn push(&mut self, plan: RowPlan) -> Result<(), PipelineError> {
        let io = |e| Self::io_error(&self.dir, e);
        serde_json::to_writer(&mut self.writer, &plan)
            .map_err(std::io::Error::from)
            .map_err(io)?;
        self.writer.write_all(b"\n").map_err(io)?;
        self.all_unreadable_files &= plan.row.is_none() && plan.body.is_err();
        self.len += 1;
        if self.first.is_none() {
            self.first = Some(plan);
        }
        Ok(())
    }

    /// Plans so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there is at least one plan and every one is a file that could not be read.
    pub(crate) fn all_unreadable_files(&self) -> bool {
        self.len > 0 && self.all_unreadable_files
    }

    /// The first plan.
    pub(crate) fn first(&self) -> Option<&RowPlan> {
        self.first.as_ref()
    }

    /// The plans in stream order (the file read from its start; later pushes are not seen).
    ///
    /// Errors: flushing the file; each item: reading or decoding a line.
    pub(crate) fn iter(
        &mut self,
    ) -> Result<impl Iterator<Item = Result<RowPlan, PipelineError>> + '_, PipelineError> {
        self.writer
            .flush()
            .map_err(|e| Self::io_error(&self.dir, e))?;
        let dir = &self.dir;
        let reader = BufReader::with_capacity(
            1 << 16,
            ReadAt {
                file: &self.file,
                offset: 0,
            },
        );
        Ok(reader.lines().take(self.len).map(move |line| {
            let line = line.map_err(|e| Self::io_error(dir, e))?;
            serde_json::from_str(&line).map_err(|e| Self::io_error(dir, std::io::Error::from(e)))
        }))
    }
}

/// Reads a file from `offset` on with positioned reads, leaving the file's own offset (where
/// the writer appends) alone.
struct ReadAt<'f> {
    file: &'f File,
    offset: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Why the judge looks at an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::outputs::DuplicateOf;
    use crate::record::QaItem;

    fn unreadable(position: u64) -> RowPlan {
        RowPlan {
            position,
            file: "broken.parquet".into(),
            row: None,
            rows: None,
            body: Err(FieldProblem {
                field: "file".into(),
                message: "not a parquet file".into(),
            }),
        }
    }

    fn readable(position: u64) -> RowPlan {
        RowPlan {
            position,
            file: "train.parquet".into(),
            row: Some(position as usize),
            rows: None,
            body: Ok(RowOk {
                family: "OrandCar".into(),
                clean_meta: r#"{"position":1,"t":"\u202e"}"#.into(),
                image_sha256: "ab".repeat(32),
                items: vec![
                    ItemPlan::Keep(QaItem {
                        question: "Wie viel?\n\u{0}".into(),
                        answer: "12.5".into(),
                        answer_list: Some(vec!["12.5".into(), "12,5".into()]),
                        ..QaItem::default()
                    }),
                    ItemPlan::Dropped {
                        reason: "off_task".into(),
                        detail: None,
                    },
                    ItemPlan::Duplicate(DuplicateOf {
                        file: "train.parquet".into(),
                        row: 0,
                        position: 0,
                        qa: 0,
                    }),
                ],
            }),
        }
    }

    #[test]
    fn plans_are_read_back_equal_and_in_order_as_often_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let mut plans = Plans::temporary(dir.path()).unwrap();
        let written: Vec<RowPlan> = (0..3000)
            .map(|p| {
                if p % 7 == 3 {
                    unreadable(p)
                } else {
                    readable(p)
                }
            })
            .collect();
        for p in &written {
            plans.push(p.clone()).unwrap();
        }
        for _ in 0..2 {
            let read: Vec<RowPlan> = plans.iter().unwrap().map(Result::unwrap).collect();
            assert_eq!(read, written);
        }
        assert_eq!(plans.len(), 3000);
        assert_eq!(plans.first(), Some(&written[0]));
        assert!(!plans.all_unreadable_files());
        // Nothing is left in the folder: the file is unlinked.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn only_a_log_of_unreadable_files_is_all_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let mut plans = Plans::temporary(dir.path()).unwrap();
        assert!(!plans.all_unreadable_files(), "an empty log is not");
        plans.push(unreadable(0)).unwrap();
        plans.push(unreadable(1)).unwrap();
        assert!(plans.all_unreadable_files());
        plans.push(readable(2)).unwrap();
        assert!(!plans.all_unreadable_files());
    }
}
