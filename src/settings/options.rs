//! The flags of `verisample run` and the keys of its TOML job file: one all-optional layer
//! ([`RunOptions`]) that clap fills from the command line and serde from the file (`--config
//! FILE.toml`, keys as the long flags), merged once ([`RunOptions::over`]: flags win), then
//! resolved into [`super::Settings`]. Adding a flag is one field here, with its doc (the help
//! text) and its clap attribute.

use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{
    DTypeSpec, DeviceSpec, InputColumns, KernelsSpec, ProgressMode, SettingsError, Switch,
};
use crate::shard::Shard;

/// Every setting of `verisample run`, each `None` (empty, false) when not given. The doc
/// comments are `run --help`'s texts, defaults included; see [`super::Settings::resolve`].
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RunOptions {
    /// Model: a local folder or a Hugging Face id looked up in the local HF cache only, of a
    /// family of `verisample_models::FAMILIES` (the help text lists them).
    #[arg(long, value_name = "DIR_OR_ID", help = model_help())]
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
    #[arg(long, value_name = "FAMILY")]
    pub family: Option<String>,
    /// Reasoning (thinking mode of the chat template). [default: on]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub think: Option<Switch>,
    /// Judge pass over the verifier's rejects. [default: on]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub judge: Option<Switch>,
    /// Also judge the first N verifier accepts and report the agreement (with `--judge off`
    /// too: the judge then only measures, it rescues no reject). [default: 0]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub judge_calibrate: Option<usize>,
    /// Refuse a judge CORRECT whose digit sequences differ from the reference. [default: on]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub number_guard: Option<Switch>,
    /// String verifier of one family (`MyBench=exact`) or, without `FAMILY=`, of every family
    /// that has none of its own; repeatable. Names: alnum, exact, mc_letter, numeric[:tol],
    /// relaxed (numeric, ChartQA's 0.05), anls[:tau]. [default: alnum]
    #[arg(long = "verifier", value_name = "[FAMILY=]NAME")]
    #[serde(rename = "verifier")]
    pub verifiers: Vec<String>,
    /// Hub metadata for the dataset card's YAML header, `KEY=VALUE`, repeatable (a list key
    /// once per value): license, language, task_categories, source_datasets, pretty_name. A
    /// key not given is taken from the input's own card (its README.md) where it has one,
    /// else marked in the card as to fill in. Changes only the card.
    #[arg(long = "card-meta", value_name = "KEY=VALUE")]
    #[serde(default)]
    pub card_meta: Vec<String>,
    /// Sample a repeated (image, question, reference) of one family once; `off` keeps the
    /// repeats. [default: on]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub dedup: Option<Switch>,
    /// cpu, cuda:N or metal. [default: cuda:0 / metal when built with it, else cpu]
    #[arg(long, value_name = "DEVICE", value_parser = DeviceSpec::from_str)]
    pub device: Option<DeviceSpec>,
    /// Weight dtype. [default: f32 on cpu, bf16 on a GPU]
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub dtype: Option<DTypeSpec>,
    /// Implementation of attention, the projections and the recurrent layers: native (the
    /// CPU's own kernels), portable (candle ops, any device), flash (FlashAttention-2, CUDA in
    /// a flash-attn build). Every one is batch-invariant. [default: native on cpu, portable on
    /// a GPU]
    #[arg(long, value_enum, value_name = "KERNELS")]
    pub kernels: Option<KernelsSpec>,
    /// Generation budget per answer in tokens. [default: 2048]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_new_tokens: Option<usize>,
    /// End an answer's reasoning after N tokens with the model family's early-stopping text
    /// (Qwen3's "Considering the limited time by the user, …" and `</think>`), then let it
    /// answer; the items that hit it are recorded. Needs --think on. [default: no budget]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub think_budget: Option<usize>,
    /// Honour the checkpoint's generation_config.json in greedy decoding (repetition_penalty,
    /// eos_token_id; other settings that change greedy output are refused). [default: on]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub generation_config: Option<Switch>,
    /// Repetition penalty of greedy decoding, answer and judge pass (transformers'
    /// repetition_penalty; 1.0 = none). [default: the checkpoint's generation_config.json]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub repetition_penalty: Option<f64>,
    /// Answers per question (rejection sampling: every one verified, judged and routed on its
    /// own). More than 1 samples at a temperature. [default: 1]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub samples: Option<usize>,
    /// Sampling temperature; above 0 samples even with --samples 1, 0 is greedy. [default:
    /// greedy; when sampling, the checkpoint's generation_config.json, else 1.0]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    /// Sample among the N most likely tokens only; 0 is off. [default when sampling: the
    /// checkpoint's generation_config.json, else 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub top_k: Option<usize>,
    /// Sample among the most likely tokens whose probabilities add up to X (nucleus), in
    /// (0, 1]. [default when sampling: the checkpoint's generation_config.json, else 1.0: off]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    /// Drop tokens less likely than X times the most likely one, in [0, 1]. [default when
    /// sampling: the checkpoint's generation_config.json, else off]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub min_p: Option<f64>,
    /// Seed of the samples' random streams: each sample's tokens depend only on it, the row,
    /// the question and the sample index, whatever the batch, threads or interruptions.
    /// [default: 0]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// With --samples K > 1: write only the first sample (by sample index) of each distinct
    /// (reasoning, answer) pair a question accepted; the repeats are counted, not written.
    /// [default: off]
    #[arg(long, value_enum, value_name = "SWITCH")]
    pub distinct_samples: Option<Switch>,
    /// The input's other top-level columns (ids, provenance, `family`: all but the image, the
    /// questions and answers, `image_sha256`) in every split after its own, with their
    /// types; `drop` leaves them out. An input column named image, qa, clean_meta or
    /// image_sha256 is refused unless dropped. [default: keep]
    #[arg(long, value_enum, value_name = "KEEP_OR_DROP")]
    pub input_columns: Option<InputColumns>,
    /// Most sequences in flight at once, 1 to 65536. [default: 64 on the CPU; on a GPU picked
    /// from the KV cache pool, at most 256]
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
    #[arg(long, value_enum, value_name = "MODE")]
    pub progress: Option<ProgressMode>,
    /// Abort past N input errors; rerunning a finished run, past N new ones (those its
    /// errors.jsonl lists do not count again). [default: unlimited]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_errors: Option<usize>,
    /// Discard an existing journal and outputs in OUT instead of resuming.
    #[arg(long)]
    #[serde(skip)]
    pub restart: bool,
    /// Write into an existing non-empty OUT that holds no earlier verisample output: its
    /// README.md, the split files in data/, run.json, errors.jsonl, cleaning.jsonl,
    /// generations.jsonl, chart.svg, journal.bin and .verisample.lock are overwritten.
    #[arg(long)]
    #[serde(skip)]
    pub force: bool,
    /// Hash every model and input file in full for the fingerprint, and check each weight file
    /// of the Hugging Face cache against the SHA-256 its blob is named by (otherwise the name
    /// is trusted, and other files are hashed once, then known by size, time and inode).
    #[arg(long)]
    #[serde(skip)]
    pub verify_weights: bool,
    /// Read settings from a TOML file (keys as the long flags, e.g. `max-new-tokens = 512`).
    #[arg(long, value_name = "FILE.toml")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The CLI's global `-q`: no progress bar (an explicit `--progress jsonl` stays) and no
    /// summary table (set by the caller from `-q`; neither a flag of `run` nor a file key).
    #[arg(skip)]
    #[serde(skip)]
    pub quiet: bool,
}

impl RunOptions {
    /// These options (the command line) over `file`'s (the job file): every value given here
    /// wins, every other comes from the file; the command-line-only ones (`restart`, `force`,
    /// `verify-weights`, `config`, `quiet`) are these.
    ///
    /// Errors: none in practice (both sides are values of this type); a serialisation error
    /// is reported as a config parse error of `file`.
    pub fn over(&self, file: &RunOptions) -> Result<RunOptions, serde_json::Error> {
        // JSON has no NaN or infinity (serde_json writes them as null, which would read as
        // "not given"): [`RunOptions::non_finite`] refuses them before this merge.
        let mut merged = serde_json::to_value(file)?;
        if let (Some(base), serde_json::Value::Object(top)) =
            (merged.as_object_mut(), serde_json::to_value(self)?)
        {
            for (key, value) in top {
                let given = !(value.is_null() || value.as_array().is_some_and(Vec::is_empty));
                if given {
                    base.insert(key, value);
                }
            }
        }
        Ok(RunOptions {
            restart: self.restart,
            force: self.force,
            verify_weights: self.verify_weights,
            config: self.config.clone(),
            quiet: self.quiet,
            ..serde_json::from_value(merged)?
        })
    }

    /// The first decimal setting that is NaN or infinite, by its flag name (they would be lost
    /// as "not given" by [`RunOptions::over`]'s JSON merge, and no setting accepts them).
    pub fn non_finite(&self) -> Option<(&'static str, f64)> {
        [
            ("repetition-penalty", self.repetition_penalty),
            ("kv-cache-gib", self.kv_cache_gib),
            ("vision-memory-gib", self.vision_memory_gib),
            ("temperature", self.temperature),
            ("top-p", self.top_p),
            ("min-p", self.min_p),
        ]
        .into_iter()
        .find_map(|(key, v)| v.filter(|v| !v.is_finite()).map(|v| (key, v)))
    }

    /// The options of the TOML job file at `path`: its keys as the long flags (kebab-case),
    /// an unknown key an error (a typo is not silently ignored).
    ///
    /// Errors: [`SettingsError::ConfigRead`], [`SettingsError::ConfigParse`], and
    /// [`SettingsError::Shard`] for a `shard` that is not `I/N` with `I < N`.
    pub fn from_toml_file(path: &std::path::Path) -> Result<RunOptions, SettingsError> {
        use std::io::Read;
        let read = |source| SettingsError::ConfigRead {
            path: path.to_path_buf(),
            source,
        };
        // A job file is a small regular file: a device, a FIFO or a file past the limit
        // (`--config /dev/zero`) is refused before it is read, or read no further than it.
        let file = std::fs::File::open(path).map_err(read)?;
        if !file.metadata().map_err(read)?.is_file() {
            return Err(read(std::io::Error::other("not a regular file")));
        }
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(read(std::io::Error::other(format!(
                "larger than {MAX_CONFIG_BYTES} bytes: not a job file"
            ))));
        }
        let parse = |message: String| SettingsError::ConfigParse {
            path: path.to_path_buf(),
            message,
        };
        let table: toml::Table = toml::from_str(&text).map_err(|e| parse(e.to_string()))?;
        // A bad shard is its own error, as on the command line.
        if let Some(shard) = table.get("shard").and_then(toml::Value::as_str) {
            Shard::from_str(shard)?;
        }
        table
            .try_into()
            .map_err(|e: toml::de::Error| parse(e.to_string()))
    }
}

/// Largest `--config` file read (1 MiB): a job file is a few dozen lines.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// `--model`'s help: where a model is looked up, and the families of
/// [`verisample_models::FAMILIES`].
fn model_help() -> String {
    format!(
        "Model: a local folder or a Hugging Face id looked up in the local HF cache only \
         (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), safetensors of a \
         family with its config.json's model_type: {}. [default: assets/model]",
        verisample_models::listing()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, Command, Parser};

    /// Every long flag of `run` is the key of the same name in the job file, but the
    /// command-line-only ones: one declaration serves both. Catches: a flag added without
    /// its file key (or named differently there).
    #[test]
    fn every_flag_is_a_file_key_of_the_same_name() {
        let command = RunOptions::augment_args(Command::new("run"));
        let flags: std::collections::BTreeSet<String> = command
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .filter(|l| !["restart", "force", "verify-weights", "config"].contains(&l.as_str()))
            .collect();
        let keys: std::collections::BTreeSet<String> =
            match serde_json::to_value(RunOptions::default()).unwrap() {
                serde_json::Value::Object(m) => m.keys().cloned().collect(),
                other => panic!("{other}"),
            };
        assert_eq!(flags, keys);
        assert!(flags.contains("max-new-tokens") && flags.contains("verifier"));
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: RunOptions,
    }

    /// Flags win over the file key by key; a list given on the command line replaces the
    /// file's; the command-line-only settings come from the command line.
    #[test]
    fn flags_over_file() {
        let flags = Cli::try_parse_from([
            "x",
            "--think",
            "off",
            "--verifier",
            "A=exact",
            "--restart",
            "--limit",
            "3",
        ])
        .unwrap()
        .options;
        let file: RunOptions = toml::from_str(
            "think = true\nlimit = 9\nmax-new-tokens = 7\nverifier = [\"B=anls\"]\n",
        )
        .unwrap();
        let merged = flags.over(&file).unwrap();
        assert_eq!(merged.think, Some(Switch::Off));
        assert_eq!(merged.limit, Some(3));
        assert_eq!(merged.max_new_tokens, Some(7));
        assert_eq!(merged.verifiers, ["A=exact"]);
        assert!(merged.restart);
        let bare = Cli::try_parse_from(["x"]).unwrap().options;
        assert_eq!(bare.over(&file).unwrap().verifiers, ["B=anls"]);
        assert_eq!(bare.over(&file).unwrap().think, Some(Switch::On));
    }
}
