//! `verisample verify OUT`: recompute every decision of an output from its stored splits.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;

use super::UsageError;
use crate::dataset::card::{kind_of_split, scan_output_dir};
use crate::dataset::writer::{read_accepted_split, read_rejected_split, split_files};
use crate::out_files::SPLITS_DIR;
use crate::record::{AcceptedQa, OutputRow, RejectedQa, SplitKind};
use crate::run_json::RunJsonView;
use crate::verify_output::generations::RunGenerations;
use crate::verify_output::input::InputItems;
use crate::verify_output::{
    count_mismatches, recheck_family, FamilySplits, RecheckReport, RecheckSettings,
};

/// Recompute every accept/reject decision of an output from its stored splits.
#[derive(Debug, Args)]
#[command(
    long_about = "Recompute every accept/reject decision of an output directory from its stored splits \
and stored judge verdicts, with no model, and report any row whose split disagrees.",
    after_help = "Example:\n  verisample verify verisample-out"
)]
pub struct VerifyArgs {
    /// Output directory written by `run` or `merge`.
    pub out: PathBuf,
    /// Print the report as one JSON object per family instead of text.
    #[arg(long)]
    pub json: bool,
    /// The number guard on or off [default: as recorded in OUT/run.json, else on].
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub number_guard: Option<crate::settings::Switch>,
    /// Verifier override `FAMILY=NAME` or `NAME` (default: as recorded in OUT/run.json).
    #[arg(long = "verifier", value_name = "[FAMILY=]NAME")]
    pub verifiers: Vec<String>,
    /// The run's input, to check each entry's question and reference against it. [default:
    /// the input recorded in OUT/run.json, when it is still there]
    #[arg(long, value_name = "INPUT")]
    pub input: Option<PathBuf>,
}

/// The questions and references of the run's input (`--input`, else the `--data` run.json
/// recorded, read with its recorded column flags), or `None` (said on stderr) when there is
/// none to read.
///
/// Errors: a given `--input` that cannot be read.
fn input_items(
    a: &VerifyArgs,
    recorded: Option<&RunJsonView>,
) -> anyhow::Result<Option<InputItems>> {
    let settings = recorded.map(|r| &r.settings);
    let recorded_data = settings.and_then(|s| s.data.clone()).filter(|d| d.exists());
    let Some(data) = a.input.clone().or(recorded_data) else {
        eprintln!("note: no --input and the run's recorded input is not here: questions and references are not checked against it");
        return Ok(None);
    };
    let mut options: crate::dataset::layout::ReadOptions = settings
        .and_then(|s| s.read.clone())
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    // As the run read it: with `--family` a `family` column is not read.
    options.skip_family_column = settings.is_some_and(|s| s.family.is_some());
    // The input's columns the splits carry, read as the splits' types, to compare with them.
    // (Every split of a run carries the same columns: the first shard's say them.)
    let carried = crate::dataset::card::output_split_files(&a.out)
        .ok()
        .and_then(|files| files.into_values().flatten().next())
        .and_then(|first| crate::dataset::writer::carried_columns(&first));
    let reader = crate::dataset::reader::InputReader::open_with(&data.to_string_lossy(), &options)
        .with_context(|| format!("read the input {}", data.display()))?
        .carrying(carried);
    let mut items = InputItems::default();
    // Positions as the run gave them: each element of the input stream in reader order.
    for (position, element) in (0u64..).zip(reader) {
        match element {
            Ok(row) => items.add(position, &row),
            Err(_) => items.add_unreadable(position),
        }
    }
    if items.unreadable() > 0 {
        eprintln!(
            "note: {} element(s) of the input {} cannot be read now; their split rows are not checked against it",
            items.unreadable(),
            data.display()
        );
    }
    Ok(Some(items))
}

/// A `verify` that found disagreements (exit code 1, report already printed): decisions that
/// do not recompute, and split row counts that differ from `run.json` (the `MISMATCH` lines).
#[derive(Debug, thiserror::Error)]
#[error(
    "verify found {decisions} decision disagreement(s) and {row_counts} MISMATCH line(s) (counts and split file contents against run.json, answers of generations.jsonl in no split)"
)]
pub struct VerifyFailed {
    /// Decisions that do not recompute.
    pub decisions: usize,
    /// `MISMATCH` lines: split row and item counts and split file contents that differ from
    /// `run.json`, and answers of `generations.jsonl` that are in no split.
    pub row_counts: usize,
}

/// The split files of `data` whose content is not what `run.json` recorded at the end of the
/// run (`want`: file name → hex SHA-256): one message per file, edited or gone, in name order.
fn content_mismatches(data: &Path, want: &BTreeMap<String, String>) -> Vec<String> {
    want.iter()
        .filter_map(
            |(name, sha)| match crate::settings::sha256_file(&data.join(name)) {
                Ok(found) if &found == sha => None,
                Ok(_) => Some(format!(
                    "data/{name}: its content is not what run.json recorded at the end of the \
                     run (SHA-256 {}…): the file was changed after the run",
                    sha.chars().take(12).collect::<String>()
                )),
                Err(e) => Some(format!(
                    "data/{name}: run.json recorded it, but it cannot be read: {e}"
                )),
            },
        )
        .collect()
}

/// Whether `run.json` (`recorded`) says that its run wrote no split: its `stats.split_rows`
/// is empty (status `no_split`, or an empty shard of several).
fn no_splits_recorded(recorded: Option<&RunJsonView>) -> bool {
    recorded
        .and_then(|r| r.stats.split_rows.as_ref())
        .is_some_and(BTreeMap::is_empty)
}

/// The settings `verify` applies: those recorded in `run.json` (`settings.number_guard`,
/// `settings.think`, `settings.verifiers` — a list of `FAMILY=NAME`), then the command-line
/// overrides.
fn verify_settings(
    a: &VerifyArgs,
    recorded: Option<&RunJsonView>,
) -> anyhow::Result<RecheckSettings> {
    let settings = recorded.map(|r| r.settings.clone()).unwrap_or_default();
    let mut overrides = settings.verifiers.unwrap_or_default();
    overrides.extend(a.verifiers.iter().cloned());
    let guard = match a.number_guard {
        Some(switch) => switch.is_on(),
        None => settings.number_guard != Some(false),
    };
    let mut v =
        RecheckSettings::from_args(guard, &overrides).map_err(|e| UsageError(e.to_string()))?;
    v.thinking = settings.think != Some(false);
    v.samples = settings.sampling.and_then(|s| s.samples).unwrap_or(1);
    // A run that records its split files' hashes lists `kept_from` per split row.
    v.kept_from_per_row = recorded.is_some_and(|r| r.stats.split_sha256.is_some());
    Ok(v)
}

/// The three splits of one family as read back: think, nothink, rejected.
type ReadSplits = (
    Vec<OutputRow<AcceptedQa>>,
    Vec<OutputRow<AcceptedQa>>,
    Vec<OutputRow<RejectedQa>>,
);

fn read_family(out: &Path, family: &str) -> anyhow::Result<ReadSplits> {
    let accepted = |kind: SplitKind| -> anyhow::Result<Vec<OutputRow<AcceptedQa>>> {
        let mut rows = Vec::new();
        for f in split_files(out, &kind.split_name(family))? {
            rows.extend(read_accepted_split(&f)?);
        }
        Ok(rows)
    };
    let mut rejected = Vec::new();
    for f in split_files(out, &SplitKind::Rejected.split_name(family))? {
        rejected.extend(read_rejected_split(&f)?);
    }
    Ok((
        accepted(SplitKind::Think)?,
        accepted(SplitKind::NoThink)?,
        rejected,
    ))
}

/// `verisample verify OUT`: re-derive every decision of every family in `OUT/data` from the
/// stored fields alone, check the row counts against `run.json`, and print the report. A run
/// whose `run.json` records no split, and that left none, has no decision to disagree: a
/// note says so and the verify succeeds (the run's own exit status reported its failure).
///
/// Errors: a folder that is not a verisample output (no `run.json`, no output splits) or
/// that holds no output splits ([`UsageError`]), unreadable output ([`anyhow`]), or
/// [`VerifyFailed`] when any decision disagrees.
pub(super) fn run(a: &VerifyArgs) -> anyhow::Result<()> {
    if !a.out.is_dir() {
        let why = if a.out.exists() {
            "a file: give the folder `run --out` wrote"
        } else {
            "no such folder"
        };
        return Err(super::usage(format!(
            "{} is not an output folder ({why})",
            a.out.display()
        )));
    }
    let recorded = RunJsonView::read_strict(&a.out)?;
    if recorded.as_ref().is_some_and(RunJsonView::is_writing) {
        anyhow::bail!(
            "{} holds an unfinished run (run.json status `{}`: it stopped while replacing its \
             outputs, so data/ may mix the files of two runs); rerun the same command to finish it",
            a.out.display(),
            crate::run_json::STATUS_WRITING
        );
    }
    // A run that wrote no split may have no data/ at all.
    let splits = if a.out.join(SPLITS_DIR).exists() {
        scan_output_dir(&a.out)
            .with_context(|| format!("read output directory {}", a.out.display()))?
    } else {
        Vec::new()
    };
    if recorded.is_none() {
        use crate::out_files::{JOURNAL_FILE, RUN_FILE};
        if a.out.join(JOURNAL_FILE).exists() {
            anyhow::bail!(
                "{} holds an unfinished run ({JOURNAL_FILE} but no {RUN_FILE}): its data/ is \
                 from an earlier run or incomplete; rerun the same command to finish it",
                a.out.display()
            );
        }
        if splits.is_empty() {
            return Err(super::usage(format!(
                "{} is not a verisample output: it has no {RUN_FILE} and no output splits in \
                 data/ (<Family>_RS_think, <Family>_RS_nothink, <Family>_rejected); give the \
                 folder `run --out` or `merge --out` wrote",
                a.out.display()
            )));
        }
        eprintln!(
            "note: no {RUN_FILE} in {}: decisions are checked, row counts are not",
            a.out.display()
        );
    }
    if no_splits_recorded(recorded.as_ref()) && splits.is_empty() {
        eprintln!(
            "note: {}: this run produced no splits (run.json status `{}`: no item reached a split; \
             errors.jsonl and cleaning.jsonl say why), so there is no decision to verify",
            a.out.display(),
            recorded
                .as_ref()
                .and_then(|r| r.status.as_deref())
                .unwrap_or("?")
        );
        return Ok(());
    }
    let settings = verify_settings(a, recorded.as_ref())?;
    let mut problems = 0;
    if let Some(want) = recorded.as_ref().and_then(|r| r.stats.split_rows.as_ref()) {
        let found: BTreeMap<String, u64> = splits
            .iter()
            .map(|s| (s.name.clone(), s.num_examples))
            .collect();
        for m in count_mismatches("rows", want, &found) {
            println!("MISMATCH {m}");
            problems += 1;
        }
    }
    if let Some(want) = recorded
        .as_ref()
        .and_then(|r| r.stats.split_sha256.as_ref())
    {
        for m in content_mismatches(&a.out.join(SPLITS_DIR), want) {
            println!("MISMATCH {m}");
            problems += 1;
        }
    }
    let families: BTreeSet<String> = splits
        .iter()
        .filter_map(|s| {
            let kind = kind_of_split(&s.name)?;
            let suffix_len = s.name.len() - kind.split_name("").len();
            Some(s.name[..suffix_len].to_string())
        })
        .collect();
    if families.is_empty() && problems > 0 {
        // run.json records splits that are all gone: row count mismatches (exit 1), not a
        // folder that is no output.
        return Err(VerifyFailed {
            decisions: 0,
            row_counts: problems,
        }
        .into());
    }
    if families.is_empty() {
        return Err(UsageError(format!(
            "no output splits found in {}/data",
            a.out.display()
        ))
        .into());
    }
    // The model outputs the run recorded, when OUT has them (a folder copied without its
    // logs is checked from the splits alone).
    let generations_file = a.out.join(crate::out_files::GENERATIONS_FILE);
    let mut generations = if !settings.kept_from_per_row {
        eprintln!(
            "note: {} was written by an earlier version (no per-row kept_from): the entries are \
             not checked against the model's outputs or the input",
            a.out.display()
        );
        None
    } else if generations_file.exists() {
        Some(RunGenerations::read(&generations_file).map_err(anyhow::Error::msg)?)
    } else {
        eprintln!(
            "note: no {} in {}: the entries are not checked against the model's outputs",
            crate::out_files::GENERATIONS_FILE,
            a.out.display()
        );
        None
    };
    let input = if settings.kept_from_per_row {
        input_items(a, recorded.as_ref())?
    } else {
        None
    };
    let mut reports = Vec::new();
    for family in &families {
        let (think, nothink, rejected) = read_family(&a.out, family)?;
        let splits = FamilySplits {
            family,
            think: &think,
            nothink: &nothink,
            rejected: &rejected,
        };
        let mut report: RecheckReport = recheck_family(&splits, &settings);
        if let Some(items) = &input {
            report.disagreements.extend(items.check_family(&splits));
        }
        if let Some(g) = generations.as_mut() {
            report
                .disagreements
                .extend(g.check_family(&splits, &settings));
        }
        report
            .disagreements
            .sort_by(|a, b| (&a.split, a.row, a.qa).cmp(&(&b.split, b.row, b.qa)));
        reports.push(report);
    }
    let distinct = recorded
        .as_ref()
        .and_then(|r| r.settings.sampling.as_ref())
        .and_then(|s| s.distinct)
        .unwrap_or(false);
    for m in generations.iter().flat_map(|g| g.unplaced(distinct)) {
        println!("MISMATCH {m}");
        problems += 1;
    }
    if let Some(want) = recorded.as_ref().and_then(|r| r.stats.split_items.as_ref()) {
        let found: BTreeMap<String, u64> = reports
            .iter()
            .flat_map(|r| r.entries.iter().map(|(k, &n)| (k.clone(), n as u64)))
            .collect();
        for m in count_mismatches("items", want, &found) {
            println!("MISMATCH {m}");
            problems += 1;
        }
    }
    let row_problems = problems;
    for report in reports {
        problems += report.disagreements.len();
        if a.json {
            println!("{}", report.to_json());
        } else {
            print!("{}", report.to_human(row_problems));
        }
    }
    if problems > 0 {
        return Err(VerifyFailed {
            decisions: problems - row_problems,
            row_counts: row_problems,
        }
        .into());
    }
    Ok(())
}
