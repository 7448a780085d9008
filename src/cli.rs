//! The `verisample` command line: clap definitions, argument validation and the commands
//! implemented here (`prepare`, `inspect`). Errors are `anyhow` at this edge; the binary maps
//! them to exit codes with [`exit_code`] (0 ok, 1 error, 2 usage / not implemented).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{ArgGroup, Args, Parser, Subcommand};

use crate::dataset::prepare::{prepare, PrepareOptions, PrepareSource};
use crate::dataset::shards::{is_valid_split_name, ShardOptions, MAX_ROWS_PER_GROUP};
use crate::family::{family_spec, is_valid_family_name};

/// Turn a visual-QA dataset into verified training data with a vision-language model.
#[derive(Debug, Parser)]
#[command(name = "verisample", version, propagate_version = true)]
#[command(
    about = "Turn a visual-QA dataset into verified training data with a VLM",
    long_about = "Turn a visual-QA dataset into verified training data with a vision-language model: \
batched greedy sampling with reasoning, a string verifier, a judge pass, and Hugging Face parquet \
splits (<Family>_RS_think, <Family>_RS_nothink, <Family>_rejected).\n\n\
Logging goes to stderr: -v for debug, -vv for trace, -q for warnings only; RUST_LOG overrides."
)]
pub struct Cli {
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size of the `run` variant (its many optional flags) costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    // Each variant takes its help (about, long about, examples) from its `*Args` struct, so the
    // variants carry no doc comments (clap would let them override the struct's long help).
    #[allow(missing_docs)]
    Prepare(PrepareArgs),
    #[allow(missing_docs)]
    Inspect(InspectArgs),
    #[allow(missing_docs)]
    Run(crate::settings::RunArgs),
    #[allow(missing_docs)]
    Verify(VerifyArgs),
    #[allow(missing_docs)]
    Check(CheckArgs),
    #[allow(missing_docs)]
    Merge(crate::merge::MergeArgs),
    #[allow(missing_docs)]
    Bench(BenchArgs),
    #[allow(missing_docs)]
    Doctor(DoctorArgs),
}

/// Build an input dataset (HF parquet) from images plus a labels JSONL.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").required(true).args(["labels", "jsonl"])),
    long_about = "Build an input dataset in the Hugging Face parquet layout.\n\n\
Input, one of:\n  \
--labels FILE: a labels JSONL, one object per image with `file` (relative to --images) and \
`label` (the reference answer); other fields are kept as provenance columns. Every image gets \
the family's fixed question (built in for OrandCar, else --question).\n  \
--jsonl FILE: a JSONL of {\"image\", \"question\", \"answer\"} with `image` relative to the \
JSONL's folder; lines with the same image become one row.\n\n\
Output: OUT/data/<split>-00000-of-0000N.parquet with columns image{bytes,path} (bytes unchanged), \
qa[{question, answer, source = image sha256}], image_sha256, family and provenance columns; \
row groups of at most 100 rows.",
    after_help = "Examples:\n  \
verisample prepare --labels orand-car-a/labels.jsonl --family OrandCar --split train --out orand\n  \
verisample prepare --jsonl my/qa.jsonl --family MyBench --out my-input"
)]
pub struct PrepareArgs {
    /// Labels JSONL (`file`, `label`, provenance fields).
    #[arg(long, value_name = "FILE")]
    pub labels: Option<PathBuf>,
    /// Folder that the labels' `file` paths are relative to [default: the labels file's folder].
    #[arg(long, value_name = "DIR", requires = "labels")]
    pub images: Option<PathBuf>,
    /// Generic QA JSONL (`image`, `question`, `answer`).
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
    /// Benchmark family written to the `family` column (required with --labels).
    #[arg(long, value_name = "NAME")]
    pub family: Option<String>,
    /// The question for every image with --labels [default: the family's built-in question].
    #[arg(long, value_name = "TEXT", requires = "labels")]
    pub question: Option<String>,
    /// Keep only labels lines whose `split` field is this value; also names the output split.
    #[arg(long, value_name = "SPLIT", requires = "labels")]
    pub split: Option<String>,
    /// Output dataset folder.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Start a new shard once one reaches this many MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub max_shard_mib: u64,
}

/// Show schema, row count and the first rows of an input or output dataset.
#[derive(Debug, Args)]
#[command(
    long_about = "Show what a dataset holds: per split, the Arrow schema, whether the `huggingface` \
feature metadata is present, the row count, and the first rows (image size in bytes, decoded \
width x height, SHA-256 check, qa entries).\n\nPATH is a parquet file, a folder (an input \
dataset or an output directory) or a quoted glob.",
    after_help = "Example:\n  verisample inspect verisample-out --rows 2"
)]
pub struct InspectArgs {
    /// Parquet file, dataset folder, output directory or glob.
    pub path: String,
    /// Rows to show per split.
    #[arg(long, default_value_t = 3)]
    pub rows: usize,
}

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
    /// Treat the number guard as off (default: as recorded in OUT/run.json, else on).
    #[arg(long)]
    pub no_number_guard: bool,
    /// Verifier override `FAMILY=NAME` or `NAME` (default: as recorded in OUT/run.json).
    #[arg(long = "verifier", value_name = "[FAMILY=]NAME")]
    pub verifiers: Vec<String>,
}

/// Check one prediction against one reference with a string verifier.
#[derive(Debug, Args)]
#[command(
    long_about = "Explain one string decision: the reasoning split off the prediction, the normalised \
forms, each candidate tried (whole, first line, first paragraph), which matched, and whether the \
item would go to the judge. Output is text, or one JSON object with --json.",
    after_help = "Example:\n  verisample check --family OrandCar --pred $'11850\\n\\nThe amount is' --ref 11850"
)]
pub struct CheckArgs {
    /// Family whose verifier is used.
    #[arg(long, default_value = crate::family::ORAND_CAR)]
    pub family: String,
    /// The model's output (a `<think>…</think>` block is split off first).
    #[arg(long)]
    pub pred: String,
    /// The reference answer.
    #[arg(long = "ref")]
    pub reference: String,
    /// Use this verifier instead of the family's (`alnum`, `exact`, `mc_letter`, `numeric[:tol]`,
    /// `relaxed`, `anls[:tau]`).
    #[arg(long)]
    pub verifier: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Measure engine throughput on a folder of images.
#[derive(Debug, Args)]
#[command(
    long_about = "Measure the engine on a folder of images: the OrandCar question about each image, \
greedy, batched with continuous batching. Prints images/s, prefill and decode tokens/s and peak \
RSS as a table, or one JSON report (with every image's generated tokens) with --json. \
scripts/bench_vs_transformers.py runs it side by side with transformers.",
    after_help = "Example:\n  verisample bench --model assets/model --images ../shared/data/orand-car-a/val --max-batch 16"
)]
pub struct BenchArgs {
    /// Checkpoint directory (config.json, safetensors, tokenizer, chat template).
    /// [default: the bundled model, found as `run` finds it]
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Folder of images (`.jpg`, `.jpeg`, `.png`), taken in file-name order.
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    /// Images to run, the first by file name (0 = all); the default keeps a CPU run short.
    #[arg(long, default_value_t = 32)]
    pub num_images: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 16)]
    pub max_batch: usize,
    /// Generation limit per image.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// KV cache pool in GiB.
    #[arg(long, default_value_t = 1.0)]
    pub kv_cache_gib: f64,
    /// Turn prefix caching off.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Device: cpu, cuda:N or metal.
    #[arg(long, default_value = "cpu")]
    pub device: crate::settings::DeviceSpec,
    /// Print one JSON report instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Check this machine's device: kernels against the CPU, batch invariance, the default model.
#[derive(Debug, Args)]
#[command(
    long_about = "Check this machine's device: report it, its memory and dtypes; run the \
paged-attention ops of every attention path it has on random inputs against the CPU kernels \
(max abs error per kernel and dtype); check batch invariance (one sequence alone and inside \
batches of 2..64); run the default model on the bundled sample on the device and on the CPU \
and compare the greedy tokens. Exits 1 when a check fails.",
    after_help = "Examples:\n  verisample doctor\n  verisample doctor --device cuda:0 --json"
)]
pub struct DoctorArgs {
    /// Device: cpu, cuda:N or metal. [default: cuda:0 in a CUDA build, metal in a Metal build,
    /// else cpu]
    #[arg(long)]
    pub device: Option<crate::settings::DeviceSpec>,
    /// Checkpoint for the end-to-end check. [default: the bundled model, found as `run` finds it]
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Dataset for the end-to-end check. [default: the bundled sample]
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// New tokens per image in the end-to-end check.
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// Print one JSON report instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A usage problem found after parsing (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The process exit code for a command result: 0 ok, 2 usage or invalid settings, 130 after
/// Ctrl-C (143 after SIGTERM), 1 otherwise (see [`crate::pipeline::command::exit_code`]).
pub fn exit_code(result: &anyhow::Result<()>) -> u8 {
    match result {
        Ok(()) => 0,
        Err(e) if e.is::<UsageError>() => 2,
        Err(e) => crate::pipeline::command::exit_code(e),
    }
}

/// The one-line message printed for an error: each context and cause, joined by `": "`,
/// leaving out a cause whose text the line already holds (typed errors often repeat their
/// source in their own message, which `{:#}` would then print twice or three times).
pub fn error_message(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Run a parsed command line.
///
/// Errors: [`UsageError`] (exit 2), pipeline errors (see [`exit_code`]), anything else (exit 1).
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Prepare(a) => run_prepare(a),
        Command::Inspect(a) => run_inspect(a),
        Command::Run(a) => crate::pipeline::command::run_command(&a, cli.quiet).map(|_| ()),
        Command::Verify(a) => crate::commands::verify_dir(&a),
        Command::Check(a) => crate::commands::check(&a),
        Command::Merge(a) => crate::pipeline::command::merge_command(&a, cli.quiet).map(|_| ()),
        Command::Bench(a) => crate::commands::bench(&a),
        Command::Doctor(a) => crate::commands::doctor(&a),
    }
}

/// Validate `prepare` arguments into options, touching nothing on disk but existence checks.
///
/// Errors: [`UsageError`] naming the bad argument.
pub fn prepare_options(a: PrepareArgs) -> anyhow::Result<PrepareOptions> {
    if let Some(f) = &a.family {
        if !is_valid_family_name(f) {
            return Err(usage(format!(
                "--family {f:?}: use letters, digits and _ only (it becomes part of split names)"
            )));
        }
    }
    if a.max_shard_mib == 0 {
        return Err(usage("--max-shard-mib must be at least 1"));
    }
    let split = a.split.clone().unwrap_or_else(|| "train".to_string());
    if !is_valid_split_name(&split) {
        return Err(usage(format!(
            "--split {split:?}: a split name must match ^\\w+(\\.\\w+)*$"
        )));
    }
    let source = match (a.labels, a.jsonl) {
        (Some(labels), None) => {
            if !labels.is_file() {
                return Err(usage(format!(
                    "--labels {}: no such file",
                    labels.display()
                )));
            }
            let Some(family) = a.family.as_deref() else {
                return Err(usage("--labels needs --family (e.g. --family OrandCar)"));
            };
            let question = match (a.question, family_spec(family).and_then(|f| f.question)) {
                (Some(q), _) if q.trim().is_empty() => return Err(usage("--question is empty")),
                (Some(q), _) => q,
                (None, Some(q)) => q.to_string(),
                (None, None) => {
                    return Err(usage(format!(
                        "family {family} has no built-in question: pass --question"
                    )))
                }
            };
            let images = match a.images {
                Some(d) => d,
                None => labels
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or_else(|| PathBuf::from("."), PathBuf::from),
            };
            if !images.is_dir() {
                return Err(usage(format!(
                    "--images {}: no such folder",
                    images.display()
                )));
            }
            PrepareSource::Labels {
                labels,
                images,
                question,
                split_filter: a.split,
            }
        }
        (None, Some(jsonl)) => {
            if !jsonl.is_file() {
                return Err(usage(format!("--jsonl {}: no such file", jsonl.display())));
            }
            PrepareSource::QaJsonl { jsonl }
        }
        _ => return Err(usage("give exactly one of --labels or --jsonl")),
    };
    let shard = ShardOptions {
        max_shard_bytes: a.max_shard_mib.saturating_mul(1024 * 1024),
        rows_per_group: MAX_ROWS_PER_GROUP,
    };
    Ok(PrepareOptions {
        source,
        family: a.family,
        out: a.out,
        split,
        shard,
    })
}

fn run_prepare(a: PrepareArgs) -> anyhow::Result<()> {
    let opts = prepare_options(a)?;
    let started = std::time::Instant::now();
    let summary = prepare(&opts).with_context(|| format!("prepare into {}", opts.out.display()))?;
    tracing::info!(
        rows = summary.shards.num_rows,
        qa = summary.qa_items,
        shards = summary.shards.files.len(),
        bytes = summary.shards.file_bytes,
        secs = started.elapsed().as_secs_f64(),
        "prepared"
    );
    for f in &summary.shards.files {
        println!("{}", f.display());
    }
    Ok(())
}

fn run_inspect(a: InspectArgs) -> anyhow::Result<()> {
    let found = crate::dataset::inspect::inspect(&a.path, a.rows).map_err(|e| match e {
        crate::dataset::DatasetError::Invalid(m) => usage(m),
        other => anyhow::Error::new(other),
    })?;
    print!("{}", found.text);
    match found.unreadable.as_slice() {
        [] => Ok(()),
        bad => anyhow::bail!(
            "{} parquet file(s) unreadable, first {} (details above)",
            bad.len(),
            bad[0].display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn error_message_keeps_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("config: {0}")]
        struct Config(#[source] std::io::Error);
        let io = std::io::Error::other("EOF while parsing");
        let err = anyhow::Error::new(Config(io)).context("loading the model from m");
        assert_eq!(
            error_message(&err),
            "loading the model from m: config: EOF while parsing"
        );
        let plain = anyhow::Error::new(std::io::Error::other("disk full")).context("writing o");
        assert_eq!(error_message(&plain), "writing o: disk full");
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(&Ok(())), 0);
        assert_eq!(exit_code(&Err(usage("x"))), 2);
        assert_eq!(exit_code(&Err(anyhow::anyhow!("io"))), 1);
    }

    #[test]
    fn prepare_validation() {
        let parse = |args: &[&str]| -> anyhow::Result<PrepareOptions> {
            let cli = Cli::try_parse_from(["verisample", "prepare"].iter().chain(args))
                .map_err(|e| anyhow::anyhow!(e.to_string()))?;
            match cli.command {
                Command::Prepare(a) => prepare_options(a),
                _ => unreachable!(),
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let labels = dir.path().join("labels.jsonl");
        std::fs::write(&labels, "").unwrap();
        let l = labels.to_str().unwrap();
        let ok = parse(&[
            "--labels", l, "--family", "OrandCar", "--split", "val", "--out", "o",
        ])
        .unwrap();
        assert_eq!(ok.split, "val");
        match ok.source {
            PrepareSource::Labels {
                question,
                split_filter,
                ..
            } => {
                assert_eq!(question, crate::family::ORAND_CAR_QUESTION);
                assert_eq!(split_filter.as_deref(), Some("val"));
            }
            other => panic!("{other:?}"),
        }
        for (args, want) in [
            (vec!["--labels", l, "--out", "o"], "needs --family"),
            (
                vec!["--labels", l, "--family", "Other", "--out", "o"],
                "no built-in question",
            ),
            (
                vec!["--labels", l, "--family", "Or-and", "--out", "o"],
                "--family",
            ),
            (
                vec![
                    "--labels",
                    "/nonexistent.jsonl",
                    "--family",
                    "OrandCar",
                    "--out",
                    "o",
                ],
                "no such file",
            ),
            (
                vec![
                    "--labels", l, "--family", "OrandCar", "--split", "a b", "--out", "o",
                ],
                "split name",
            ),
            (
                vec!["--labels", l, "--jsonl", l, "--out", "o"],
                "cannot be used with",
            ),
        ] {
            let e = parse(&args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }
}
