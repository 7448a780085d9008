//! `verisample merge OUT1 OUT2 ... --out OUT`: join the outputs of `run --shard I/N` into
//! the dataset an unsharded run would have written, byte for byte.
//!
//! How: the shards' journals together hold every generation of the whole input. The merge
//! checks that the shards are complete runs of the same job (same model files, same
//! settings except `--shard`, shards `0/N … N-1/N` each exactly once), imports all their
//! journal records into a fresh journal in OUT, and runs the unsharded pipeline with
//! [`JournalOnly`] in place of the engine: cleaning, verification, judge parsing and routing
//! are pure, so the splits, `errors.jsonl`, `cleaning.jsonl` and `generations.jsonl` come out
//! identical to an unsharded run's. The input dataset must be readable (the path recorded
//! in the shards' `run.json`, or `--data`); no model is loaded.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::journal::{read_each, JournalError};
use crate::out_files::JOURNAL_FILE;
use crate::pipeline::image_refusals;
use crate::pipeline::job::run_parquet;
use crate::pipeline::{
    describe_changes, fold_record, import_results, install_ctrlc, prepare, BackendError,
    GenRequest, GenResult, Generator, JournalEntry, PipelineError, Prepared, RunControl, RunReport,
    Store, STATUS_COMPLETE, STATUS_WRITING,
};
use crate::settings::{fingerprint, hash_input_files, Fingerprint, ProgressMode, Settings};
use crate::shard::Shard;

/// What to merge, as the CLI parsed it from `verisample merge` (`src/cli/merge.rs` holds
/// the flags and their help).
#[derive(Debug, Clone, PartialEq)]
pub struct MergeOptions {
    /// The shard runs' output folders, in any order.
    pub shards: Vec<PathBuf>,
    /// `--out`: the merged dataset's folder.
    pub out: PathBuf,
    /// `--data`: the input dataset, when not at the path recorded in the shards' `run.json`.
    pub data: Option<PathBuf>,
    /// `--force`: write into a non-empty OUT that holds no earlier verisample output.
    pub force: bool,
    /// `--restart`: replace the output of another run (or merge) in OUT.
    pub restart: bool,
    /// `--progress`, `None` = a bar when stderr is a terminal, else none (as `run`; not the
    /// shards' setting, which says where the shards ran).
    pub progress: Option<ProgressMode>,
    /// The CLI's global `-q`: no progress bar (an explicit `--progress jsonl` stays) and no
    /// summary table.
    pub quiet: bool,
}

/// Why a merge was refused.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A shard's `run.json` is missing or unreadable.
    #[error("{path}: cannot read run.json ({message}); is it the output of a finished `verisample run`?")]
    Report {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A shard's `run.json` says its run stopped while replacing its outputs (status
    /// `writing`): its folder may mix the files of two runs.
    #[error("{}: its run stopped while replacing its outputs (run.json status `writing`), so the folder may mix two runs' files; rerun that shard's command to finish it, then merge", .0.display())]
    Unfinished(PathBuf),
    /// The shards are not parts of one job.
    #[error("{path}: not a shard of the same job as {first}: {what}")]
    Mismatch {
        /// The offending shard folder.
        path: PathBuf,
        /// The first shard folder.
        first: PathBuf,
        /// What differs.
        what: String,
    },
    /// `--out` is one of the shard folders, or lies inside one (`--out SHARD/data`): merging
    /// there would overwrite that shard's journal or splits, an input of the merge.
    #[error(
        "--out {0} is one of the shard folders being merged or lies inside one; writing there \
         would overwrite that shard's output; choose an --out outside every shard folder"
    )]
    OutIsShard(PathBuf),
    /// `--out` is not a folder this merge may write: a file, read-only, inside or around the
    /// input, or a non-empty folder of someone else's without `--force`.
    #[error(transparent)]
    Out(crate::settings::SettingsError),
    /// A shard ran with `--limit`: the rows after its first N have no generations, and the
    /// merge would be an incomplete dataset.
    #[error(
        "{path}: this shard ran with --limit {limit} (the first {limit} rows of shard {shard}; \
         {left_out} rows left out), so the merge would miss the rest; rerun that shard's \
         `verisample run` command without --limit (it resumes and generates only the rest), \
         then merge again"
    )]
    Limited {
        /// The shard folder.
        path: PathBuf,
        /// Its `--limit`.
        limit: usize,
        /// Its shard.
        shard: Shard,
        /// The rows of its shard it left out.
        left_out: u64,
    },
    /// Shards missing or given twice.
    #[error("shards do not cover the input exactly once: {0}")]
    Coverage(String),
    /// The input dataset is not there.
    #[error("input dataset {0} not found; pass --data")]
    DataNotFound(PathBuf),
    /// The input dataset is not the one the shards ran on: merging would pair their answers
    /// with other rows.
    #[error("input dataset {data} is not the input the shards ran on: {what}; pass --data with the shards' input")]
    InputChanged {
        /// The input read by the merge.
        data: PathBuf,
        /// What differs (files changed, added or removed).
        what: String,
    },
    /// A shard's journal ends in bytes that are not whole records (damaged, or cut short):
    /// the generations in them would be missing from the merge.
    #[error(
        "{path}: the last {torn_bytes} bytes are not whole journal records (damaged or cut \
         short); rerun that shard's `verisample run` command, which regenerates what they held, \
         then merge again"
    )]
    DamagedJournal {
        /// The shard's journal.
        path: PathBuf,
        /// Bytes after the last whole record.
        torn_bytes: u64,
    },
    /// Reading a shard journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Preparing the merged journal failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

/// A merge ready to run: the unsharded settings and the journal with every shard's records.
#[derive(Debug)]
pub struct MergePlan {
    /// Settings of the merged (unsharded) run.
    pub settings: Settings,
    /// The prepared journal.
    pub prepared: Prepared,
    /// The shards' engine version.
    pub engine_version: String,
    /// The shards' `image.bytes` errors by stream position ([`image_refusals`]): their
    /// engines' refusals, which the merge repeats instead of loading a model.
    pub refused_images: BTreeMap<u64, String>,
}

fn read_report(dir: &Path) -> Result<RunReport, MergeError> {
    let path = crate::run_json::path(dir);
    let err = |message: String| MergeError::Report {
        path: path.clone(),
        message,
    };
    let report: RunReport = crate::run_json::read(dir).map_err(|e| match e {
        crate::run_json::RunJsonError::Io { source, .. } => err(source.to_string()),
        crate::run_json::RunJsonError::Invalid { message, .. } => err(message),
    })?;
    if report.status == STATUS_WRITING {
        return Err(MergeError::Unfinished(dir.to_path_buf()));
    }
    if report.status != STATUS_COMPLETE {
        return Err(err(format!("status is `{}`", report.status)));
    }
    Ok(report)
}

/// Check the shard folders and build the merged journal in `args.out`.
///
/// Errors: [`MergeError`].
pub fn prepare_merge(args: &MergeOptions) -> Result<MergePlan, MergeError> {
    let out = crate::settings::canonical_lenient(&args.out);
    if args
        .shards
        .iter()
        .any(|d| out.starts_with(crate::settings::canonical_lenient(d)))
    {
        return Err(MergeError::OutIsShard(args.out.clone()));
    }
    let mut reports = Vec::new();
    for dir in &args.shards {
        let report = read_report(dir)?;
        // A limit that left no row of its shard out made a complete shard (and a generation
        // missing all the same is the merge's own refusal, `JournalOnly`).
        if let (Some(limit), Some(l)) = (report.settings.limit, report.stats.limit) {
            if l.left_out_rows > 0 {
                return Err(MergeError::Limited {
                    path: dir.clone(),
                    limit,
                    shard: report.settings.shard,
                    left_out: l.left_out_rows,
                });
            }
        }
        reports.push((dir.clone(), report));
    }
    let (first_dir, first) = &reports[0];
    let count = first.settings.shard.count;
    let mut seen = vec![None::<PathBuf>; count];
    for (dir, r) in &reports {
        let mismatch = |what: String| MergeError::Mismatch {
            path: dir.clone(),
            first: first_dir.clone(),
            what,
        };
        if r.fingerprint.model_files != first.fingerprint.model_files {
            return Err(mismatch("model files differ".into()));
        }
        if r.fingerprint.input_files != first.fingerprint.input_files {
            return Err(mismatch("input files differ".into()));
        }
        let mut a = r.fingerprint.settings.clone();
        let mut b = first.fingerprint.settings.clone();
        a.shard = String::new();
        b.shard = String::new();
        let diff = b.diff(&a);
        if !diff.is_empty() {
            return Err(mismatch(diff.join("; ")));
        }
        let s = r.settings.shard;
        if s.count != count {
            return Err(mismatch(format!("shard {s} vs {}", first.settings.shard)));
        }
        if let Some(other) = &seen[s.index] {
            return Err(MergeError::Coverage(format!(
                "shard {s} given twice ({} and {})",
                other.display(),
                dir.display()
            )));
        }
        seen[s.index] = Some(dir.clone());
    }
    let missing: Vec<String> = (0..count)
        .filter(|&i| seen[i].is_none())
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Coverage(format!(
            "missing {}",
            missing.join(", ")
        )));
    }

    let mut settings = first.settings.clone();
    settings.shard = Shard::WHOLE;
    settings.out = args.out.clone();
    settings.restart = args.restart;
    settings.quiet = args.quiet;
    // Every error a merge finds is a shard's, recorded by that shard under its own
    // `--max-errors`: the merge finds no new one (nor must the shards' sum stop it).
    settings.max_errors = None;
    settings.limit = None;
    settings.data_as_typed = Some(settings.data.clone());
    match &args.data {
        Some(d) => settings.data = d.clone(),
        // run.json holds `--data` as typed, relative to where the shards ran: the absolute
        // spec the shards' fingerprint recorded finds the same input from any folder (a
        // relative spec could name another folder's input here); runs of earlier versions
        // recorded only the canonical folder of their input, tried when `--data` as typed
        // does not resolve.
        None => {
            let fp = &first.fingerprint;
            let resolves = |p: &Path| crate::settings::input_root(p).is_ok();
            match &fp.data_spec {
                Some(spec) if resolves(Path::new(spec)) => settings.data = PathBuf::from(spec),
                None if !resolves(&settings.data) && resolves(Path::new(&fp.settings.data)) => {
                    settings.data = PathBuf::from(&fp.settings.data);
                }
                _ => {}
            }
        }
    }
    // A glob (`--data DIR/*.parquet`, or the snapshot pattern `--data OWNER/NAME` resolved
    // to) is not a path that exists: `input_root` resolves it as the reader does.
    let data_root = match crate::settings::input_root(&settings.data) {
        Err(crate::settings::SettingsError::DataNotFound(d)) => {
            return Err(MergeError::DataNotFound(d))
        }
        other => other.map_err(MergeError::Out)?,
    };
    crate::settings::check_out(&args.out, data_root.as_deref(), args.force)
        .map_err(MergeError::Out)?;
    settings.progress = ProgressMode::chosen(args.progress, args.quiet);
    // The shards' answers belong to the rows of the input they hashed: the input read now must
    // be the same files, byte for byte (named alike however `--data` is spelt).
    let input_files = hash_input_files(&settings.data).map_err(MergeError::Out)?;
    if input_files != first.fingerprint.input_files {
        let now = Fingerprint {
            input_files: input_files.clone(),
            ..first.fingerprint.clone()
        };
        return Err(MergeError::InputChanged {
            data: settings.data.clone(),
            what: describe_changes(&first.fingerprint, &now).join("; "),
        });
    }
    let mut fp = fingerprint(
        settings.canonical(),
        first.fingerprint.model_files.clone(),
        input_files,
    );
    fp.data_spec = Some(crate::settings::data_spec(&settings.data));
    // Every shard journal is read (and a damaged one refused) before OUT is touched; then,
    // one shard at a time, folded into a temporary index and appended to the merged journal.
    // A shard's last record of a request is its outcome, as its resume replays it (a retried
    // request that did not fit the KV cache may have a later record).
    let journals: Vec<PathBuf> = reports.iter().map(|(d, _)| d.join(JOURNAL_FILE)).collect();
    for journal in &journals {
        let torn_bytes = read_each(journal, |_: JournalEntry| Ok::<_, JournalError>(()))?;
        if torn_bytes > 0 {
            return Err(MergeError::DamagedJournal {
                path: journal.clone(),
                torn_bytes,
            });
        }
    }
    let mut prepared = prepare(&settings, fp)?;
    settings.restart = false;
    for journal in &journals {
        let shard = Store::temporary(&settings.out).map_err(PipelineError::from)?;
        read_each(journal, |rec| {
            fold_record(&shard, rec, false).map_err(|e| MergeError::Pipeline(e.into()))
        })?;
        import_results(&mut prepared, &shard)?;
    }
    let mut refused_images = BTreeMap::new();
    for (dir, _) in &reports {
        image_refusals(dir, &mut refused_images);
    }
    Ok(MergePlan {
        settings,
        prepared,
        engine_version: first.engine_version.clone(),
        refused_images,
    })
}

/// Merge the shards `args` names into `args.out`: check them, build the merged journal, and
/// run the unsharded pipeline with [`JournalOnly`] in place of the engine. Returns the merged
/// run's report and its settings.
///
/// Errors: [`MergeError`] from the checks; the Ctrl-C handler; [`PipelineError`] from the run.
pub fn run_merge(args: &MergeOptions) -> anyhow::Result<(RunReport, Settings)> {
    use anyhow::Context as _;
    let plan = prepare_merge(args)?;
    let control = RunControl::from_env();
    install_ctrlc(&control).context("installing the Ctrl-C handler")?;
    let mut generator = JournalOnly {
        engine_version: plan.engine_version,
        refused_images: plan.refused_images,
    };
    let report = run_parquet(plan.prepared, &plan.settings, &mut generator, &control)?;
    Ok((report, plan.settings))
}

/// The engine stand-in of a merge: every generation must come from the shard journals, so
/// any request is an error (the shards were incomplete or of another input); an image is
/// refused exactly where its shard refused it.
#[derive(Debug, Clone)]
pub struct JournalOnly {
    /// Reported as the engine version (the shards' engine).
    pub engine_version: String,
    /// The shards' `image.bytes` errors by position ([`MergePlan::refused_images`]).
    pub refused_images: BTreeMap<u64, String>,
}

impl Generator for JournalOnly {
    fn generate(
        &mut self,
        requests: Vec<GenRequest>,
        _on_done: &mut dyn FnMut(GenResult) -> ControlFlow<()>,
    ) -> Result<(), BackendError> {
        match requests.first() {
            None => Ok(()),
            Some(r) => Err(format!(
                "{} generations are missing from the shard journals (first: position {} qa {}, {:?} pass); \
                 were the shards run on this input?",
                requests.len(),
                r.key.position,
                r.key.qa,
                r.pass
            )
            .into()),
        }
    }

    fn check_image(&self, position: u64, _width: u32, _height: u32) -> Result<(), String> {
        self.refused_images
            .get(&position)
            .map_or(Ok(()), |m| Err(m.clone()))
    }

    fn version(&self) -> String {
        self.engine_version.clone()
    }
}
