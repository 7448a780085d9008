//! `errors.jsonl`: one line per unreadable row, invalid question or failed answer
//! generation, built by [`error_line`] alone, whether by the write phase or by a
//! `--max-errors` abort before it ([`write_abort_errors`]).

use std::collections::BTreeMap;

use super::backend::{ItemKey, Pass};
use super::outputs::{ErrorLine, JsonlLog};
use super::plan::{ItemPlan, Plans, RowPlan};
use super::store::Store;
use super::{JournalOutcome, PipelineError};
use crate::out_files::ERRORS_FILE;

/// The `image.bytes` errors of an output folder's `errors.jsonl`, by stream position: among
/// them the images its engine refused (for its vision memory budget, or its processor's
/// bounds) before decoding — a decision of that run's engine and machine, which a merge, or a
/// rerun that loads no model, repeats ([`crate::merge::JournalOnly`],
/// [`super::job::run_job`]) instead of asking for generations. An unreadable file or line
/// adds nothing.
pub fn image_refusals(dir: &std::path::Path, into: &mut BTreeMap<u64, String>) {
    let Ok(text) = std::fs::read_to_string(dir.join(ERRORS_FILE)) else {
        return;
    };
    for line in text.lines() {
        if let Ok(e) = serde_json::from_str::<ErrorLine>(line) {
            if e.field == "image.bytes" && e.qa.is_none() {
                into.insert(e.position, e.message);
            }
        }
    }
}

/// The `errors.jsonl` line of `plan`'s row (`qa`: the question, `None` for the whole row):
/// `field` is the field at fault (`image.bytes`, `qa[1].answer`, `generation`, …).
pub(crate) fn error_line(plan: &RowPlan, qa: Option<u32>, field: &str, message: &str) -> ErrorLine {
    ErrorLine {
        file: plan.file.clone(),
        row: plan.row,
        rows: plan.rows,
        position: plan.position,
        qa,
        sample: None,
        field: field.to_string(),
        message: message.to_string(),
    }
}

/// Write `OUT/errors.jsonl` (atomically) for the rows planned so far: unreadable rows,
/// invalid questions and failed answer generations (each of `samples` per question), in
/// input order. Used before a
/// `--max-errors` abort, when the write phase that normally writes it never runs.
///
/// Errors: writing the file.
pub(crate) fn write_abort_errors(
    out: &std::path::Path,
    plans: &mut Plans,
    results: &Store,
    samples: u32,
) -> Result<(), PipelineError> {
    std::fs::create_dir_all(out).map_err(|source| crate::journal::JournalError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let mut lines = JsonlLog::create(&out.join(ERRORS_FILE))?;
    for plan in plans.iter()? {
        let plan = &plan?;
        let line = |qa, field: &str, message: &str| error_line(plan, qa, field, message);
        let body = match &plan.body {
            Ok(body) => body,
            Err(p) => {
                lines.push(&line(None, &p.field, &p.message));
                continue;
            }
        };
        for (qa, item) in body.items.iter().enumerate() {
            let key = ItemKey::question(plan.position, qa as u32);
            match item {
                ItemPlan::Invalid(p) => lines.push(&line(Some(key.qa), &p.field, &p.message)),
                ItemPlan::Keep(_) => {
                    for s in 0..samples {
                        let key = key.with_sample(s);
                        if let Some(JournalOutcome::Failed(m)) =
                            results.result(key, Pass::Answer)?
                        {
                            lines.push(&ErrorLine {
                                sample: (samples > 1).then_some(s),
                                ..line(Some(key.qa), "generation", &m)
                            });
                        }
                    }
                }
                ItemPlan::Dropped { .. } | ItemPlan::Duplicate(_) => {}
            }
        }
    }
    lines.commit()?;
    Ok(())
}
