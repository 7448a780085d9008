//! A whole job assembled from its resolved [`Settings`]: fingerprint → journal check → engine
//! → [`run`](super::run) over the parquet input into OUT with the standard decisions. `run`
//! comes here through [`run_job`], `merge` through [`run_parquet`] with its journal in place of
//! the engine; the CLI only parses, calls and maps errors to exit codes.
//!
//! Order matters: the model files are hashed and the journal in OUT is checked against the
//! fingerprint (a changed setting or model is refused before any weight is loaded), then the
//! model loads.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use anyhow::Context as _;

use super::{
    install_ctrlc, prepare_with, run, BackendError, Backends, EngineGenerator, GenRequest,
    GenResult, Generator, LoadedGenerator, ParquetSink, ParquetSource, PipelineError, Prepared,
    RunControl, RunReport, StandardDecisions, ENGINE_VERSION,
};
use crate::engine::vision_budget;
use crate::engine::vl::{load_engine, weights_bytes, LoadedEngine, VlLoadError};
use crate::engine::{EngineConfig, KvBudget, VisionMemory};
use crate::report::start::{gb, Measure, StartStep};
use crate::settings::{
    data_spec, default_cache_file, fingerprint, hash_input_files_with, hash_model_files,
    model_files, DeviceSpec, FileHasher, Fingerprint, Settings,
};
use verisample_models::PixelBounds;

use crate::settings::{DEFAULT_CUDA_KV_FRACTION, DEFAULT_METAL_KV_CACHE_GIB};

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
        auto_max_batch: settings.max_batch_auto,
        max_batch_tokens: settings.max_batch_tokens,
        max_new_tokens: settings.max_new_tokens,
        vision_memory: settings
            .vision_memory_gib
            .map_or(defaults.vision_memory, VisionMemory::Gib),
        ..defaults
    }
}

/// What a finished [`run_job`] reports beyond the run itself.
#[derive(Debug)]
pub struct JobReport {
    /// The run's report (also written to OUT/run.json).
    pub report: RunReport,
    /// The engine's batch cap ([`EngineConfig::max_batch`]), as picked from its KV pool when
    /// `settings.max_batch_auto`; `None` when the run needed no model.
    pub max_batch: Option<usize>,
}

/// The fingerprint of a run with `settings`: its canonical settings, the hashes of its model
/// and input files, the model and data as given. Files are hashed through the user's hash
/// cache ([`FileHasher`]; in full with `settings.verify_weights`), with progress on stderr.
///
/// The model's `config.json` is read and resolved first: a `model_type` no family of
/// [`verisample_models::FAMILIES`] runs, or a field it cannot use, is refused before any
/// weight file is hashed.
///
/// Errors: [`VlLoadError::Model`] for an unreadable or unusable `config.json`; a model or
/// input file cannot be read; a damaged Hugging Face blob with `--verify-weights`.
pub fn job_fingerprint(settings: &Settings) -> anyhow::Result<Fingerprint> {
    let dir = &settings.model.dir;
    verisample_models::ModelConfig::from_dir(dir).map_err(VlLoadError::Model)?;
    let mut hasher = FileHasher::open(default_cache_file(), settings.verify_weights);
    let total = model_files(dir)
        .map(|files| files.values().map(|(_, size)| size).sum())
        .ok();
    let mut step = StartStep::begin(settings.progress, "hash model files", Measure::Bytes(total));
    let model_files = hash_model_files(dir, &mut hasher, &mut |n| step.advance(n))
        .with_context(|| format!("hashing model files in {}", dir.display()))?;
    step.finish();
    let mut step = StartStep::begin(settings.progress, "hash input files", Measure::Bytes(None));
    let input_files = hash_input_files_with(&settings.data, &mut hasher, &mut |n| step.advance(n))?;
    step.finish();
    hasher.save();
    let mut fp = fingerprint(settings.canonical(), model_files, input_files);
    fp.model = Some(settings.model.spec.clone());
    fp.data_spec = Some(data_spec(&settings.data));
    Ok(fp)
}

/// Run the job `settings` describe, end to end: fingerprint, journal check (resume or
/// refuse), engine start, the run, `run.json`.
///
/// A rerun over a finished output ([`deferred_load`]) loads the model only when a request
/// needs it: with nothing left to generate or judge it rewrites the same outputs from the
/// journal without reading the weights.
///
/// Errors: hashing, a refused resume ([`PipelineError`]), the device, the model, the run.
pub fn run_job(settings: &Settings) -> anyhow::Result<JobReport> {
    let fingerprint = job_fingerprint(settings)?;
    let control = RunControl::from_env();
    let deferred = deferred_load(settings);
    // A start that fails leaves nothing behind that would block the corrected command, and
    // a `--restart` discards the earlier output only once the model has loaded.
    let (prepared, mut generator) = prepare_with(settings, fingerprint, || {
        let mut lazy = LazyEngine {
            settings,
            control: &control,
            engine: None,
            refused_images: deferred.clone().unwrap_or_default(),
        };
        if deferred.is_none() {
            lazy.load()?;
        } else {
            install_ctrlc(&control).context("installing the Ctrl-C handler")?;
        }
        anyhow::Ok(lazy)
    })?;
    if let Some(refused) = &deferred {
        tracing::info!(
            "OUT holds a finished run of this job: the model loads only if something is left \
             to generate ({} image refusals of that run repeated until then)",
            refused.len()
        );
    }
    let report = run_parquet(prepared, settings, &mut generator, &control)?;
    Ok(JobReport {
        report,
        max_batch: generator
            .engine
            .as_ref()
            .map(|g| g.engine().config().max_batch),
    })
}

/// Whether the model may load only when a request needs it, with the image refusals to repeat
/// until then: when OUT holds a finished run that took every row of its shard
/// ([`super::passes::finished_run`]), not `--restart`, and none of its refusals came from the
/// vision memory budget (a rerun with another budget must decide those again, which needs the
/// engine). `None`: load before the run, as a first run does.
fn deferred_load(settings: &Settings) -> Option<BTreeMap<u64, String>> {
    if settings.restart || super::passes::finished_run(&settings.out) != Some(None) {
        return None;
    }
    let mut refused = BTreeMap::new();
    super::image_refusals(&settings.out, &mut refused);
    let budget = refused.values().any(|m| vision_budget::is_refusal(m));
    (!budget).then_some(refused)
}

/// The engine of a run, loaded before the run or at the first request that needs it
/// ([`deferred_load`]). Until it loads, an image is refused exactly where the finished run in
/// OUT refused it (as a merge does), and the version is the engine's own.
struct LazyEngine<'a> {
    settings: &'a Settings,
    control: &'a RunControl,
    engine: Option<LoadedGenerator>,
    refused_images: BTreeMap<u64, String>,
}

impl LazyEngine<'_> {
    /// The engine, loaded now if it is not yet.
    ///
    /// Errors: from [`start_engine`].
    fn load(&mut self) -> anyhow::Result<&mut LoadedGenerator> {
        if self.engine.is_none() {
            self.engine = Some(start_engine(self.settings, self.control)?);
        }
        Ok(self.engine.as_mut().expect("loaded above"))
    }
}

impl Generator for LazyEngine<'_> {
    fn generate(
        &mut self,
        requests: Vec<GenRequest>,
        on_done: &mut dyn FnMut(GenResult) -> ControlFlow<()>,
    ) -> Result<(), BackendError> {
        if requests.is_empty() {
            return Ok(());
        }
        let engine = self.load().map_err(|e| format!("{e:#}"))?;
        engine.generate(requests, on_done)
    }

    fn check_image(&self, position: u64, width: u32, height: u32) -> Result<(), String> {
        match &self.engine {
            Some(engine) => engine.check_image(position, width, height),
            None => self
                .refused_images
                .get(&position)
                .map_or(Ok(()), |m| Err(m.clone())),
        }
    }

    fn version(&self) -> String {
        ENGINE_VERSION.to_string()
    }

    fn stats(&self) -> Option<serde_json::Value> {
        self.engine.as_ref()?.stats()
    }

    fn metrics(&self) -> Option<serde_json::Value> {
        self.engine.as_ref()?.metrics()
    }
}

/// Run `prepared` with `generator` over the parquet input of `settings` into its OUT, with
/// the standard decisions and `settings`' verifiers (a run's engine, or a merge's journal).
///
/// Errors: [`PipelineError`] from the run.
pub fn run_parquet(
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
    let source = ParquetSource {
        carry: settings.input_columns.is_keep(),
        ..ParquetSource::with_options(&settings.data, read)
    };
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
fn start_engine(settings: &Settings, control: &RunControl) -> anyhow::Result<LoadedGenerator> {
    install_ctrlc(control).context("installing the Ctrl-C handler")?;
    let what = match weights_bytes(&settings.model.dir, settings.dtype.to_dtype()) {
        Ok(bytes) => format!("load the model ({} of weights)", gb(bytes)),
        Err(_) => "load the model".to_string(),
    };
    let step = StartStep::begin(settings.progress, what, Measure::Time);
    let mut engine = load_engine_with(settings, engine_config(settings))?;
    step.finish();
    let think = crate::engine::InputProcessor::think_tokens(engine.processor());
    if let (Some(budget), Some(t)) = (settings.think_budget, think) {
        if budget + t.stop.len() + BUDGET_ANSWER_ROOM > settings.max_new_tokens {
            tracing::warn!(
                "--think-budget {budget} plus the {} tokens of the early-stopping text leave no \
                 room for an answer (fewer than {BUDGET_ANSWER_ROOM} tokens) within \
                 --max-new-tokens {}: an answer the budget cuts may end truncated",
                t.stop.len(),
                settings.max_new_tokens
            );
        }
    }
    if settings.think_budget.is_some() && think.is_none() {
        anyhow::bail!(
            "--think-budget needs the closing reasoning tag `</think>` as one token of {}, and \
             the family's early-stopping text to hold it; this tokenizer has no such token",
            settings.model.dir.join("tokenizer.json").display()
        );
    }
    engine.set_stop_flag(control.stop.clone());
    if settings.max_batch_auto {
        tracing::info!("{}", auto_batch_line(engine.config().max_batch, settings));
    }
    Ok(EngineGenerator::new(engine))
}

/// Tokens a `--think-budget` run should leave for the answer after the reasoning and the
/// early-stopping text; fewer is warned about at start (a short answer, as the tasks here
/// take, and its end-of-turn token).
const BUDGET_ANSWER_ROOM: usize = 16;

/// Open the device of `settings` and load its model into an engine of configuration `cfg`
/// (a run's is [`engine_config`]), as a run does: its dtype, kernels, generation config and
/// pixel bounds. `run` and `bench` both start here.
///
/// Errors: the device, the model, the chat template, the engine's settings.
pub fn load_engine_with(settings: &Settings, cfg: EngineConfig) -> anyhow::Result<LoadedEngine> {
    let device = settings.device.open().context("opening the device")?;
    let dir = &settings.model.dir;
    load_engine(
        dir,
        settings.dtype.to_dtype(),
        (&device, settings.attention_path()),
        cfg,
        &settings.decoding.generation(),
        PixelBounds {
            min_pixels: settings.min_pixels,
            max_pixels: settings.max_pixels,
        },
    )
    .with_context(|| format!("loading the model from {}", dir.display()))
}

/// The sentence naming the batch the engine picked from its KV pool (a GPU run without
/// `--max-batch`), logged at start and ending the summary.
pub fn auto_batch_line(max_batch: usize, settings: &Settings) -> String {
    format!(
        "max batch {max_batch}: picked from the KV cache pool (sequences of {} new + {} prompt \
         tokens that fit, {}..={}); set --max-batch to choose",
        settings.max_new_tokens,
        crate::engine::config::AUTO_PROMPT_TOKENS,
        crate::engine::config::AUTO_MIN_BATCH,
        settings.max_batch
    )
}
