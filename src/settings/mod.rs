//! Settings of `verisample run`: one all-optional layer that the command line and the TOML job
//! file (`--config FILE.toml`) both fill ([`RunOptions`]), and the validated result
//! ([`Settings`]).
//!
//! Precedence: a flag given on the command line wins over the same key in the TOML file,
//! which wins over the built-in default. Everything is validated by [`Settings::resolve`]
//! before any weight or image is loaded, so a bad `--shard` or a missing model fails in
//! milliseconds (ripgrep's low-args → high-args split, STYLE §11).
//!
//! The [`fingerprint`] of a run (sha256 of the canonical settings JSON plus the hashes of the
//! model files) is written into the journal header and `run.json`; a resumed run with a
//! different fingerprint is refused unless `--restart`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::layout::{LayoutError, ReadOptions};
use crate::shard::{Shard, ShardParseError};
use crate::verifiers::VerifierRegistry;

mod canonical;
mod data;
mod decoding;
mod device;
mod file_hash;
mod fingerprint;
mod model;
mod options;
pub mod prepare;
mod reproduce;
mod resolve;
mod sampling;
pub use canonical::CanonicalSettings;
pub use decoding::{CanonicalDecoding, Decoding};
pub use device::DeviceSpec;
pub use options::RunOptions;
pub use reproduce::{card_meta_entries, portable_path, CARD_META_KEYS};
pub use resolve::Uses;
pub use sampling::{CanonicalSampling, Sampling, SamplingFlags, MAX_SAMPLES};
mod out_dir;
mod switch;
mod verifiers;
pub use file_hash::{default_cache_file, sha256_file, FileHasher};
pub use fingerprint::{
    data_spec, fingerprint, hash_input_files, hash_input_files_with, input_identity, Fingerprint,
};
pub use model::{hash_model_files, hf_cache_dir, model_files, resolve_model, ResolvedModel};
pub use out_dir::{check_out, check_writable, holds_run_output, input_root, is_verisample_output};

/// Default output folder (relative to the working directory).
pub const DEFAULT_OUT: &str = "verisample-out";
/// Default model folder: the bundled tiny model (relative to the working directory, falling
/// back to the source checkout the binary was built from).
pub const DEFAULT_MODEL: &str = "assets/model";
/// Default input dataset: the bundled sample (same lookup as [`DEFAULT_MODEL`]).
pub const DEFAULT_DATA: &str = "assets/sample/data";

/// Default generation budget per answer, in tokens (reasoning trace + answer).
pub const DEFAULT_MAX_NEW_TOKENS: usize = 2048;
/// Default number of sequences the engine may run at once on the CPU.
pub const DEFAULT_MAX_BATCH: usize = 64;
/// On a GPU without `--max-batch`, the engine picks the batch from its KV cache pool (device
/// memory and the model's KV size: `engine::config::auto_max_batch`), at most this: vLLM's
/// default `max_num_seqs`.
pub const AUTO_MAX_BATCH_CAP: usize = 256;

/// Default KV cache size on Metal when `--kv-cache-gib` is not given (its free memory is not
/// measured).
pub const DEFAULT_METAL_KV_CACHE_GIB: f64 = 4.0;

/// Default share of a CUDA device's free memory (after the weights) for the KV cache pool
/// when `--kv-cache-gib` is not given; the rest is headroom for activations (vLLM's
/// `gpu_memory_utilization` plays the same role, as a share of the total).
pub const DEFAULT_CUDA_KV_FRACTION: f64 = 0.8;
/// The largest `--max-batch` accepted: 2¹⁶ sequences (vLLM's default `max_num_seqs` is 256).
pub const MAX_MAX_BATCH: usize = 1 << 16;
/// Default number of tokens (prefill + decode) the engine may schedule in one step.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 16384;

/// An on/off switch as written on the command line and in the TOML file (where `true` and
/// `false` work too, see `switch.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

impl Switch {
    /// `true` for [`Switch::On`].
    pub fn is_on(self) -> bool {
        self == Switch::On
    }
}

/// How progress is shown on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// An indicatif bar (default when stderr is a terminal).
    Bar,
    /// One JSON object per interval on stderr (only when asked for: `--progress jsonl`).
    Jsonl,
    /// Nothing (default when stderr is not a terminal).
    None,
}

impl ProgressMode {
    /// The default of `run` and `merge`: [`ProgressMode::Bar`] when stderr is a terminal,
    /// else [`ProgressMode::None`].
    pub fn for_stderr() -> Self {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            ProgressMode::Bar
        } else {
            ProgressMode::None
        }
    }

    /// The progress of `run` and `merge`: `requested` (`--progress`, or the config file's),
    /// else [`ProgressMode::for_stderr`]. With `quiet` (the CLI's `-q`, which silences what is
    /// meant for people) only an explicitly requested [`ProgressMode::Jsonl`] stays: it is
    /// meant for a program, which asked for it.
    pub fn chosen(requested: Option<ProgressMode>, quiet: bool) -> Self {
        match requested {
            Some(ProgressMode::Jsonl) => ProgressMode::Jsonl,
            _ if quiet => ProgressMode::None,
            requested => requested.unwrap_or_else(ProgressMode::for_stderr),
        }
    }
}

/// Floating-point type of the weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DTypeSpec {
    /// 32-bit float (CPU default).
    F32,
    /// bfloat16 (CUDA / Metal default).
    Bf16,
    /// IEEE half.
    F16,
}

impl DTypeSpec {
    /// The candle dtype.
    pub fn to_dtype(self) -> candle_core::DType {
        match self {
            DTypeSpec::F32 => candle_core::DType::F32,
            DTypeSpec::Bf16 => candle_core::DType::BF16,
            DTypeSpec::F16 => candle_core::DType::F16,
        }
    }
}

/// Which implementation runs attention, and with it the projections and the recurrent
/// layers ([`verisample_models::AttentionPath`]), when `--kernels` chooses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelsSpec {
    /// The CPU's own kernels: packed linears, native attention (CPU only; its default).
    Native,
    /// candle ops on any device, batch-invariant by construction (the GPU default).
    Portable,
    /// FlashAttention-2 on CUDA in a `flash-attn` build (its CPU oracle on the CPU).
    Flash,
}

impl KernelsSpec {
    /// The attention path.
    pub fn path(self) -> verisample_models::AttentionPath {
        use verisample_models::AttentionPath;
        match self {
            KernelsSpec::Native => AttentionPath::Native,
            KernelsSpec::Portable => AttentionPath::Portable,
            KernelsSpec::Flash => AttentionPath::Flash,
        }
    }

    /// The device's default: native on the CPU, portable elsewhere
    /// ([`verisample_models::AttentionPath::for_device`]).
    pub fn default_for(device: DeviceSpec) -> Self {
        match device {
            DeviceSpec::Cpu => KernelsSpec::Native,
            _ => KernelsSpec::Portable,
        }
    }
}

/// Whether the splits carry the input's other top-level columns (`--input-columns`):
/// every column but the image, the questions and answers and `image_sha256`, with its Arrow
/// type ([`crate::dataset::carry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputColumns {
    /// Carry them, after the split's own columns (the default).
    #[default]
    Keep,
    /// Leave them out: the splits hold only their own columns.
    Drop,
}

impl InputColumns {
    /// Whether the columns are carried (the default).
    pub fn is_keep(&self) -> bool {
        *self == InputColumns::Keep
    }
}

/// Validated settings of one run (serialised into `run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The model folder.
    pub model: ResolvedModel,
    /// Input dataset path.
    pub data: PathBuf,
    /// `--data` as the shards typed it, when a merge reads the input by another path (the
    /// absolute one the shards recorded): the card names the input as the shards did.
    #[serde(skip)]
    pub data_as_typed: Option<PathBuf>,
    /// Column flags and `--images-root`.
    #[serde(default)]
    pub read: ReadOptions,
    /// Whether the splits carry the input's other columns (`--input-columns`); absent in
    /// `run.json` when kept (the default, and what runs before the setting did not do).
    #[serde(default, skip_serializing_if = "InputColumns::is_keep")]
    pub input_columns: InputColumns,
    /// Output folder.
    pub out: PathBuf,
    /// Family override for split names.
    pub family: Option<String>,
    /// Thinking mode on.
    pub think: bool,
    /// Judge pass over verifier rejects on.
    pub judge: bool,
    /// Number of verifier accepts to also judge (calibration); 0 = off.
    pub judge_calibrate: usize,
    /// Number guard on the judge's CORRECT (contract §6).
    pub number_guard: bool,
    /// Verifier overrides, `[FAMILY=]NAME`, applied in order to the default registry.
    #[serde(default)]
    pub verifiers: Vec<String>,
    /// `--card-meta KEY=VALUE` entries, checked (the card's Hub metadata; not part of the
    /// run's identity).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub card_meta: Vec<String>,
    /// Duplicate questions dropped (contract §3; `false`: `--dedup off`).
    #[serde(default = "switch_on")]
    pub dedup: bool,
    /// Device to run on.
    pub device: DeviceSpec,
    /// Weight dtype.
    pub dtype: DTypeSpec,
    /// The kernels `--kernels` chose; `None`: the device's default
    /// ([`KernelsSpec::default_for`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelsSpec>,
    /// Generation budget per answer, tokens.
    pub max_new_tokens: usize,
    /// Reasoning tokens before the early-stopping text ends an answer's reasoning
    /// (`--think-budget`); absent in `run.json` of runs without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_budget: Option<usize>,
    /// Greedy decoding settings, effective values (absent in `run.json` of older runs).
    #[serde(default)]
    pub decoding: Decoding,
    /// Samples per question and the sampling warpers (absent in `run.json` of greedy runs).
    #[serde(default, skip_serializing_if = "Sampling::is_greedy")]
    pub sampling: Sampling,
    /// Most sequences in flight (with `max_batch_auto`, the cap of the engine's pick).
    pub max_batch: usize,
    /// Whether the engine picks `max_batch` from its KV pool: a GPU run without
    /// `--max-batch` (absent, false, in `run.json` of CPU runs and older runs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_batch_auto: bool,
    /// Most tokens per engine step.
    pub max_batch_tokens: usize,
    /// KV cache size in GiB, `None` = engine default.
    pub kv_cache_gib: Option<f64>,
    /// Vision memory budget in GiB, `None` = engine default.
    #[serde(default)]
    pub vision_memory_gib: Option<f64>,
    /// Pixel bounds of the image resize over the checkpoint's (`None` = the checkpoint's).
    #[serde(default)]
    pub min_pixels: Option<usize>,
    /// See [`Settings::min_pixels`].
    #[serde(default)]
    pub max_pixels: Option<usize>,
    /// Which part of the input this process takes.
    pub shard: Shard,
    /// Only the first N stream elements (rows) of this shard are taken (`--limit N`); not part
    /// of the run's identity, so a later run without it (or with a larger one) resumes. Left
    /// out of `run.json` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Progress display.
    pub progress: ProgressMode,
    /// Abort past this many input errors (see [`RunOptions::max_errors`]).
    pub max_errors: Option<usize>,
    /// Discard an existing journal instead of resuming.
    pub restart: bool,
    /// Hash every file in full for the fingerprint ([`RunOptions::verify_weights`]); not
    /// recorded in `run.json`.
    #[serde(skip)]
    pub verify_weights: bool,
    /// Silence the progress bar and the summary table.
    pub quiet: bool,
}

/// Why settings were refused. Every variant names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML or has unknown keys / wrong types.
    #[error("invalid config file {path}: {message}")]
    ConfigParse {
        /// The file.
        path: PathBuf,
        /// The TOML error.
        message: String,
    },
    /// A bad `--shard`.
    #[error("invalid shard: {0}")]
    Shard(#[from] ShardParseError),
    /// A value out of its range.
    #[error("invalid --{key} {value}: {why}")]
    Invalid {
        /// The flag name.
        key: &'static str,
        /// The given value.
        value: String,
        /// What is expected.
        why: String,
    },
    /// The input path does not exist.
    #[error("input dataset not found: {0}")]
    DataNotFound(PathBuf),
    /// The input files could not be listed or hashed.
    #[error("cannot read the input dataset: {0}")]
    DataUnreadable(String),
    /// `--model` is neither a local folder nor in the local HF cache.
    #[error("model `{spec}` not found; looked in: {}{}", looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "), model::fetch_hint(spec))]
    ModelNotFound {
        /// What the user wrote.
        spec: String,
        /// Every place looked at.
        looked: Vec<PathBuf>,
    },
    /// `--model` is a folder, but holds no `config.json`.
    #[error("--model {}: no config.json in this folder (a model folder holds config.json, the safetensors weights and the tokenizer)", .0.display())]
    NotAModel(PathBuf),
    /// `--model` is a folder whose `config.json` is a folder or a link to nothing.
    #[error("--model {}: its config.json is not a readable file (a folder, or a link to a file that does not exist)", .0.display())]
    ConfigNotAFile(PathBuf),
    /// `--model` names a file (often the checkpoint's `config.json`), not its folder.
    #[error("--model {}: is a file; pass the folder that holds config.json, the safetensors weights and the tokenizer", .0.display())]
    ModelIsAFile(PathBuf),
    /// The model's `generation_config.json` is invalid or asks for a setting not implemented.
    #[error(transparent)]
    GenerationConfig(#[from] crate::engine::generation::GenerationConfigError),
    /// The input's other columns cannot be carried into the splits (a name of a split
    /// column, a type that differs between files or has no `datasets` feature).
    #[error("--data: {0}")]
    Carry(Box<crate::dataset::carry::CarryError>),
    /// The input's columns do not say which hold the image, question and answer.
    #[error("--data {file}: {source}")]
    Columns {
        /// The first input file.
        file: PathBuf,
        /// What is missing or ambiguous, with the columns found.
        source: LayoutError,
    },
    /// `--data OWNER/NAME` did not resolve in the local hub cache.
    #[error("--data: {0}")]
    Hub(#[from] crate::dataset::hub::HubError),
    /// The binary lacks the backend for the requested device.
    #[error(
        "--device {0}: this binary was built without {1} support (rebuild with --features {1})"
    )]
    DeviceNotBuilt(DeviceSpec, &'static str),
    /// An invalid `prepare` argument, named in the message.
    #[error("{0}")]
    Prepare(String),
}

/// Resolve `p` against `base` unless absolute; a leading `~/` is the home folder (the shell
/// expands it on the command line, but not inside the TOML file).
pub(crate) fn rebase(base: &Path, p: PathBuf) -> PathBuf {
    let p = match (p.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => p,
    };
    if p.is_absolute() {
        p
    } else {
        base.join(p)
    }
}

/// A bundled asset: `rel` under the working directory, else under the source checkout.
/// `p` made absolute and canonical as far as it exists: the longest existing ancestor is
/// canonicalized (symlinks resolved) and the missing rest appended.
pub(crate) fn canonical_lenient(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            return rest
                .iter()
                .rev()
                .fold(c, |acc: PathBuf, part| acc.join(part));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// The bundled default model folder ([`DEFAULT_MODEL`], looked up like `run` does: under
/// the current folder, else under the source checkout the binary was built from).
pub fn default_model_dir() -> PathBuf {
    bundled(DEFAULT_MODEL)
}

/// A bundled asset at `rel` ([`DEFAULT_MODEL`], [`DEFAULT_DATA`]): under the current folder,
/// else under the source checkout the binary was built from.
pub fn bundled(rel: &str) -> PathBuf {
    let local = PathBuf::from(rel);
    if local.exists() {
        return local;
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if built.exists() {
        built
    } else {
        local
    }
}

impl Settings {
    /// The settings that determine the output bytes, in canonical form for the fingerprint.
    /// Included: the pixel bounds (they change what the model sees). Excluded on purpose: `out`,
    /// scheduling knobs (`max_batch`, `max_batch_tokens`, `kv_cache_gib`: greedy results do
    /// not depend on them), the memory budgets (`kv_cache_gib`, `vision_memory_gib`: they decide
    /// only which rows are refused or retried, and every run plans its rows afresh, so a rerun
    /// with a larger budget resumes and generates only what it now lets in), display
    /// (`progress`, `quiet`),
    /// `max_errors`, `restart`, the device ordinal (only the device kind can change numerics)
    /// and `limit` (it decides only how many rows this invocation takes: a later run with a
    /// larger limit or none resumes and generates only the rows not generated yet).
    pub fn canonical(&self) -> CanonicalSettings {
        CanonicalSettings {
            data: fingerprint::input_identity(&self.data),
            family: self.family.clone(),
            think: self.think,
            judge: self.judge,
            judge_calibrate: self.judge_calibrate,
            number_guard: self.number_guard,
            device: self.device.kind().to_string(),
            dtype: self.dtype,
            kernels: self
                .kernels
                .filter(|&k| k != KernelsSpec::default_for(self.device)),
            max_new_tokens: self.max_new_tokens,
            think_budget: self.think_budget,
            shard: self.shard.to_string(),
            verifiers: verifiers::effective_verifiers(&self.verifiers),
            dedup: self.dedup,
            min_pixels: self.min_pixels,
            max_pixels: self.max_pixels,
            read: self.read.clone(),
            input_columns: self.input_columns,
            decoding: CanonicalDecoding::from(&self.decoding),
            sampling: CanonicalSampling::of(&self.sampling),
        }
    }

    /// The attention path of this run: `--kernels`, else the device's default.
    pub fn attention_path(&self) -> verisample_models::AttentionPath {
        self.kernels
            .unwrap_or_else(|| KernelsSpec::default_for(self.device))
            .path()
    }

    /// The verifier registry of this run: the default one with [`Settings::verifiers`]
    /// applied in order (validated by [`Settings::resolve`]; an invalid entry is skipped).
    pub fn verifier_registry(&self) -> VerifierRegistry {
        let mut registry = VerifierRegistry::default();
        for v in &self.verifiers {
            if let Err(e) = registry.apply_override(v) {
                tracing::warn!("--verifier {v:?}: {e}");
            }
        }
        registry
    }
}

pub(crate) fn switch_on() -> bool {
    true
}

#[cfg(test)]
mod tests;
