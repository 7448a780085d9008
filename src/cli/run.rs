//! `verisample run`: its flags ([`RunArgs`], converted into the settings' plain
//! [`RunOptions`]), then settings → fingerprint → journal check → model → run. Errors are
//! `anyhow` here (the CLI edge); [`super::exit_code`] maps them to the process status.
//!
//! Order matters: flags and the config file are validated first (milliseconds), then the
//! model files are hashed and the journal in OUT is checked against the fingerprint (a
//! changed setting or model is refused before any weight is loaded), then the model loads.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context as _;
use clap::Args;

use crate::engine::vl::{load_engine, VlInputs};
use crate::engine::{EngineConfig, KvBudget, VisionMemory};
use crate::pipeline::{
    install_ctrlc, prepare_with, run, Backends, EngineGenerator, Generator, ParquetSink,
    ParquetSource, PipelineError, Prepared, RunControl, RunReport, StandardDecisions,
};
use crate::settings::{
    fingerprint, hash_input_files, hash_model_files, DTypeSpec, DeviceSpec, ProgressMode,
    RunOptions, Settings, Switch,
};
use crate::shard::Shard;
use verisample_models::PixelBounds;
use verisample_models::VlModel;

/// Sample, verify, judge and write the three splits per family.
///
/// The flags of `verisample run`. Every value is optional so that a TOML file can supply it;
/// see [`Settings::resolve`] for precedence and defaults.
#[derive(Args, Debug, Clone, Default, PartialEq)]
#[command(
    long_about = "Run the whole job: read the input dataset, check and clean it, prompt the model with its \
own chat template, decode greedily in batches, verify each answer, judge the rejected ones (and \
optionally calibrate the judge on accepted ones), and write OUT/data/<Family>_{RS_think,RS_nothink,rejected}-*.parquet, \
OUT/README.md, OUT/run.json, OUT/errors.jsonl, OUT/cleaning.jsonl and OUT/generations.jsonl.\n\n\
Settings come from flags, then --config FILE.toml (same keys as the long flags), then defaults. \
Finished work is journaled in OUT/journal.bin: rerunning the same command after a crash, kill or \
Ctrl-C (exit 130; SIGTERM 143) resumes and writes byte-identical splits, card and JSONL files \
(run.json and chart.svg hold timings); a changed setting or model is \
refused unless --restart.",
    after_help = "Examples:\n  verisample run --model Qwen/Qwen3-VL-2B-Thinking --data orand --out out --device cuda:0\n  \
verisample run --data orand --out out --limit 20   (a first try on 20 rows; the same command without --limit then does the rest)\n  \
verisample run --config job.toml --shard 0/4 --out out-0"
)]
pub struct RunArgs {
    /// Model: a local folder or a Hugging Face id looked up in the local HF cache only
    /// (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), safetensors of the
    /// families qwen2_vl (Qwen2-VL), qwen2_5_vl (Qwen2.5-VL), qwen3_vl (Qwen3-VL), qwen3_5
    /// (Qwen3.5/3.6), or the mixtures of experts qwen3_vl_moe (Qwen3-VL-30B-A3B, 235B-A22B)
    /// and qwen3_5_moe (Qwen3.5 MoE). [default: assets/model]
    #[arg(long, value_name = "DIR_OR_ID")]
    pub model: Option<String>,
    /// Input dataset: a parquet folder, file or glob, or a dataset id OWNER/NAME looked up in
    /// the local HF cache only (as --model; the parquet files of one config and split, from
    /// the card's `configs:` or data/<split>-*.parquet). [default: assets/sample/data]
    #[arg(long, value_name = "INPUT_OR_ID")]
    pub data: Option<PathBuf>,
    /// Config of a hub-cache --data OWNER/NAME with several. [default: the only one, or the
    /// card's default]
    #[arg(long, value_name = "NAME")]
    pub data_config: Option<String>,
    /// Split of a hub-cache --data OWNER/NAME with several. [default: the only one]
    #[arg(long, value_name = "NAME")]
    pub data_split: Option<String>,
    /// Image column of a flat input (one question per row, no `qa` column).
    /// [default: detected: image, img]
    #[arg(long, value_name = "COLUMN")]
    pub image_column: Option<String>,
    /// Question column of a flat input. [default: detected: question, query, prompt]
    #[arg(long, value_name = "COLUMN")]
    pub question_column: Option<String>,
    /// Reference-answer column of a flat input: a string, or a list of strings (several
    /// references). [default: detected: answer, answers, label, ground_truth]
    #[arg(long, value_name = "COLUMN")]
    pub answer_column: Option<String>,
    /// Read images given only by path (absolute ones included, as `datasets`' to_parquet
    /// writes them) from under DIR instead of the dataset folder; paths leading out of DIR are
    /// refused.
    #[arg(long, value_name = "DIR")]
    pub images_root: Option<PathBuf>,
    /// Output folder. [default: ./verisample-out]
    #[arg(long, value_name = "OUT")]
    pub out: Option<PathBuf>,
    /// Benchmark family used in split names (overrides the input's `family` column).
    #[arg(long, value_name = "F")]
    pub family: Option<String>,
    /// Reasoning (thinking mode of the chat template). [default: on]
    #[arg(long, value_enum)]
    pub think: Option<Switch>,
    /// Judge pass over the verifier's rejects. [default: on]
    #[arg(long, value_enum)]
    pub judge: Option<Switch>,
    /// Also judge the first N verifier accepts and report the agreement (with `--judge off`
    /// too: the judge then only measures, it rescues no reject). [default: 0]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub judge_calibrate: Option<usize>,
    /// Refuse a judge CORRECT whose digit sequences differ from the reference. [default: on]
    #[arg(long, value_enum)]
    pub number_guard: Option<Switch>,
    /// String verifier of one family (`MyBench=exact`) or, without `FAMILY=`, of every family
    /// that has none of its own; repeatable. Names: alnum, exact, mc_letter, numeric[:tol],
    /// relaxed (numeric, ChartQA's 0.05), anls[:tau]. [default: alnum]
    #[arg(long = "verifier", value_name = "[FAMILY=]NAME")]
    pub verifiers: Vec<String>,
    /// Sample a repeated (image, question, reference) of one family once; `off` keeps the
    /// repeats. [default: on]
    #[arg(long, value_enum)]
    pub dedup: Option<Switch>,
    /// cpu, cuda:N or metal. [default: cuda:0 / metal when built with it, else cpu]
    #[arg(long, value_parser = DeviceSpec::from_str)]
    pub device: Option<DeviceSpec>,
    /// Weight dtype. [default: f32 on cpu, bf16 on a GPU]
    #[arg(long, value_enum)]
    pub dtype: Option<DTypeSpec>,
    /// Generation budget per answer in tokens. [default: 2048]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_new_tokens: Option<usize>,
    /// Honour the checkpoint's generation_config.json in greedy decoding (repetition_penalty,
    /// eos_token_id; other settings that change greedy output are refused). [default: on]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub generation_config: Option<Switch>,
    /// Repetition penalty of greedy decoding, answer and judge pass (transformers'
    /// repetition_penalty; 1.0 = none). [default: the checkpoint's generation_config.json]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub repetition_penalty: Option<f64>,
    /// Most sequences in flight at once, 1 to 65536. [default: 64]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_batch: Option<usize>,
    /// Most tokens scheduled in one engine step. [default: 16384]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_batch_tokens: Option<usize>,
    /// KV cache size in GiB. [default: chosen by the engine from free memory]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub kv_cache_gib: Option<f64>,
    /// Most memory one vision-encoder pass may take, in GiB: a row whose image would need
    /// more is refused (errors.jsonl, `image.bytes`, with the --max-pixels that would fit).
    /// [default: half the memory free after the weights and the KV cache]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub vision_memory_gib: Option<f64>,
    /// Fewest pixels an image is resized to, overriding the checkpoint's
    /// preprocessor_config.json (transformers' `min_pixels`). [default: the checkpoint's]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub min_pixels: Option<usize>,
    /// Most pixels an image is resized to, overriding the checkpoint's
    /// preprocessor_config.json (transformers' `max_pixels`). [default: the checkpoint's]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_pixels: Option<usize>,
    /// Process shard I of N (0-based I): input positions p with p % N == I.
    #[arg(long, value_name = "I/N", value_parser = Shard::from_str)]
    pub shard: Option<Shard>,
    /// Take only the first N input rows (of this shard, with --shard), to try the whole job
    /// on a few rows first; the rows after them are not decoded, generated or written. A
    /// later run in the same --out without --limit (or with a larger one) resumes: it
    /// generates only the rows not generated yet. [default: every row]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<usize>,
    /// Progress on stderr: a bar, JSON lines or none; `-q` keeps only an explicit `jsonl`.
    /// [default: bar on a terminal, else none]
    #[arg(long, value_enum)]
    pub progress: Option<ProgressMode>,
    /// Abort past N input errors; rerunning a finished run, past N new ones (those its
    /// errors.jsonl lists do not count again). [default: unlimited]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_errors: Option<usize>,
    /// Discard an existing journal and outputs in OUT instead of resuming.
    #[arg(long)]
    pub restart: bool,
    /// Write into an existing non-empty OUT that holds no earlier verisample output: its
    /// README.md, the split files in data/, run.json, errors.jsonl, cleaning.jsonl,
    /// generations.jsonl, chart.svg, journal.bin and .verisample.lock are overwritten.
    #[arg(long)]
    pub force: bool,
    /// Print the end-of-run summary as one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read settings from a TOML file (keys as the long flags, e.g. `max-new-tokens = 512`).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
}

impl From<RunArgs> for RunOptions {
    /// The settings' view of the flags: all but `--json` (a display choice of this layer),
    /// with `quiet` off (the caller sets it from the global `-q`).
    fn from(args: RunArgs) -> RunOptions {
        let RunArgs {
            model,
            data,
            data_config,
            data_split,
            image_column,
            question_column,
            answer_column,
            images_root,
            out,
            family,
            think,
            judge,
            judge_calibrate,
            number_guard,
            verifiers,
            dedup,
            device,
            dtype,
            max_new_tokens,
            generation_config,
            repetition_penalty,
            max_batch,
            max_batch_tokens,
            kv_cache_gib,
            vision_memory_gib,
            min_pixels,
            max_pixels,
            shard,
            limit,
            progress,
            max_errors,
            restart,
            force,
            config,
            json: _,
        } = args;
        RunOptions {
            model,
            data,
            data_config,
            data_split,
            image_column,
            question_column,
            answer_column,
            images_root,
            out,
            family,
            think,
            judge,
            judge_calibrate,
            number_guard,
            verifiers,
            dedup,
            device,
            dtype,
            max_new_tokens,
            generation_config,
            repetition_penalty,
            max_batch,
            max_batch_tokens,
            kv_cache_gib,
            vision_memory_gib,
            min_pixels,
            max_pixels,
            shard,
            limit,
            progress,
            max_errors,
            restart,
            force,
            config,
            quiet: false,
        }
    }
}

/// Default KV cache size on Metal when `--kv-cache-gib` is not given (its free memory is not
/// measured).
pub const DEFAULT_METAL_KV_CACHE_GIB: f64 = 4.0;

/// Default share of a CUDA device's free memory (after the weights) for the KV cache pool
/// when `--kv-cache-gib` is not given; the rest is headroom for activations (vLLM's
/// `gpu_memory_utilization` plays the same role, as a share of the total).
pub const DEFAULT_CUDA_KV_FRACTION: f64 = 0.8;

/// The engine settings of a run.
pub fn engine_config(settings: &Settings) -> EngineConfig {
    let defaults = EngineConfig::default();
    let kv_budget = match (settings.kv_cache_gib, settings.device) {
        (Some(g), _) => KvBudget::Gib(g),
        (None, DeviceSpec::Cpu) => defaults.kv_budget,
        (None, DeviceSpec::Cuda(_)) => KvBudget::FreeFraction(DEFAULT_CUDA_KV_FRACTION),
        (None, DeviceSpec::Metal) => KvBudget::Gib(DEFAULT_METAL_KV_CACHE_GIB),
    };
    EngineConfig {
        kv_budget,
        max_batch: settings.max_batch,
        max_batch_tokens: settings.max_batch_tokens,
        max_new_tokens: settings.max_new_tokens,
        repetition_penalty: Some(settings.decoding.repetition_penalty),
        generation_config: settings.decoding.generation_config,
        vision_memory: settings
            .vision_memory_gib
            .map_or(defaults.vision_memory, VisionMemory::Gib),
        ..defaults
    }
}

/// `verisample run`. `quiet` is the CLI's global `-q` (it also silences the progress bar, not an
/// explicit `--progress jsonl`).
///
/// Errors: settings, model lookup, a refused resume, model loading, the run itself.
pub fn run_command(args: RunArgs, quiet: bool) -> anyhow::Result<RunReport> {
    let json = args.json;
    let options = RunOptions {
        quiet,
        ..RunOptions::from(args)
    };
    let settings = Settings::resolve(&options)?;
    if !settings.judge && settings.judge_calibrate > 0 {
        tracing::info!(
            "--judge off with --judge-calibrate {n}: the judge grades the first {n} verifier \
             accepts to measure its agreement, and rescues no reject",
            n = settings.judge_calibrate
        );
    }
    let model_files = hash_model_files(&settings.model.dir)
        .with_context(|| format!("hashing model files in {}", settings.model.dir.display()))?;
    let input_files = hash_input_files(&settings.data)?;
    let mut fingerprint = fingerprint(settings.canonical(), model_files, input_files);
    fingerprint.model = Some(settings.model.spec.clone());
    fingerprint.data_spec = Some(crate::settings::data_spec(&settings.data));
    let control = RunControl::from_env();
    // A start that fails leaves nothing behind that would block the corrected command, and
    // a `--restart` discards the earlier output only once the model has loaded.
    let (prepared, mut generator) =
        prepare_with(&settings, fingerprint, || start_engine(&settings, &control))?;
    let report = run_parquet(prepared, &settings, &mut generator, &control)?;
    print_summary(&report, &settings.out, settings.quiet, json, None);
    Ok(report)
}

/// Run `prepared` with `generator` over the parquet input of `settings` into its OUT, with
/// the standard decisions and `settings`' verifiers (shared by `run` and `merge`).
///
/// Errors: [`PipelineError`] from the run.
pub(super) fn run_parquet(
    prepared: Prepared,
    settings: &Settings,
    generator: &mut dyn Generator,
    control: &RunControl,
) -> Result<RunReport, PipelineError> {
    // Decided here, where `run` and `merge` both read (a merge's settings come from run.json,
    // which does not record the flag).
    let read = crate::dataset::layout::ReadOptions {
        skip_family_column: settings.family.is_some(),
        ..settings.read.clone()
    };
    let source = ParquetSource::with_options(&settings.data, read);
    let mut sink = ParquetSink::new(&settings.out);
    let decisions = StandardDecisions {
        verifiers: settings.verifier_registry(),
        ..StandardDecisions::default()
    };
    run(
        prepared,
        Backends {
            source: &source,
            generator,
            decisions: &decisions,
            sink: &mut sink,
        },
        control,
    )
}

/// Install the stop handler, open the device and load the model (the steps after the
/// journal check that can still fail before the first generation).
///
/// Errors: the handler, the device, the model, the chat template.
fn start_engine(
    settings: &Settings,
    control: &RunControl,
) -> anyhow::Result<EngineGenerator<VlModel, VlInputs>> {
    install_ctrlc(control).context("installing the Ctrl-C handler")?;
    let device = settings.device.open().context("opening the device")?;
    let mut engine = load_engine(
        &settings.model.dir,
        settings.dtype.to_dtype(),
        &device,
        engine_config(settings),
        Some(settings.think),
        PixelBounds {
            min_pixels: settings.min_pixels,
            max_pixels: settings.max_pixels,
        },
    )
    .with_context(|| format!("loading the model from {}", settings.model.dir.display()))?;
    engine.set_stop_flag(control.stop.clone());
    EngineGenerator::new(engine).context("rendering the chat template")
}

/// Print the end-of-run summary on stdout: one JSON object with `json`, else the text
/// summary, or with `quiet` only the line naming where the splits are (none without splits).
/// With `quiet` (JSON or not), input that could not be used is also a warning on stderr,
/// since no text summary says so. `merged`: the number of shard folders of a merge.
pub(super) fn print_summary(
    report: &RunReport,
    out: &std::path::Path,
    quiet: bool,
    json: bool,
    merged: Option<usize>,
) {
    let summary = crate::report::summary::Summary::new(&report.stats, out);
    let summary = match merged {
        Some(shards) => summary.of_merge(shards),
        None => summary,
    };
    if quiet {
        if let Some(warning) = summary.losses_warning() {
            tracing::warn!("{warning}");
        }
    }
    if json {
        println!("{}", summary.json());
    } else if !quiet {
        print!("{}", summary.text());
    } else if !report.stats.split_rows.is_empty() {
        println!("{}", summary.where_line());
    }
}
