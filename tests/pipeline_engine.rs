//! `run` with the real batch engine on the tiny Qwen2-VL fixture checkpoint
//! (models/tests/fixtures/qwen2_vl, random weights: the answers are gibberish, which is fine
//! here), the real decisions and the real parquet writer, over the in-memory mixed input.
//! An interrupted run resumed with a fresh engine must give byte-identical outputs.
//! The tiny *trained* model and the real binary are exercised by tests/pipeline_e2e.rs.

mod pipeline_support;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use candle_core::{DType, Device};
use pipeline_support::{
    assert_same_outputs, deterministic_outputs, mixed_rows, model_files, settings, MemSource,
};
use verisample::engine::vl::load_engine;
use verisample::engine::{EngineConfig, KvBudget};
use verisample::pipeline::{
    prepare, prompt_prefills_think, run, BackendError, Backends, EngineGenerator, GenRequest,
    GenResult, Generator, ParquetSink, PipelineError, RunControl, RunReport, StandardDecisions,
};
use verisample::settings::fingerprint;
use verisample::shard::Shard;

const MAX_NEW: usize = 12;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/tests/fixtures/qwen2_vl")
}

fn generator() -> Box<dyn Generator> {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Blocks(256),
        max_batch: 6,
        max_new_tokens: MAX_NEW,
        ..Default::default()
    };
    let engine = load_engine(
        &fixture(),
        DType::F32,
        &Device::Cpu,
        cfg,
        Some(true),
        Default::default(),
    )
    .expect("load fixture");
    let prefilled =
        prompt_prefills_think(engine.processor().prompts().template(), true).expect("template");
    Box::new(EngineGenerator::new(engine, prefilled))
}

/// Raises the stop flag after `n` completions, as a Ctrl-C would.
struct StopAfter {
    inner: Box<dyn Generator>,
    n: usize,
    seen: usize,
    flag: Arc<AtomicBool>,
}

impl Generator for StopAfter {
    fn generate(
        &mut self,
        requests: Vec<GenRequest>,
        on_done: &mut dyn FnMut(GenResult) -> ControlFlow<()>,
    ) -> Result<(), BackendError> {
        let (n, seen, flag) = (self.n, &mut self.seen, self.flag.clone());
        self.inner.generate(requests, &mut |r| {
            *seen += 1;
            if *seen > n {
                flag.store(true, Ordering::SeqCst);
            }
            on_done(r)
        })
    }

    fn version(&self) -> String {
        self.inner.version()
    }
}

fn run_engine(
    out: &Path,
    generator: &mut dyn Generator,
    control: &RunControl,
) -> Result<RunReport, PipelineError> {
    let mut s = settings(out, Shard::WHOLE);
    s.max_new_tokens = MAX_NEW;
    let prepared = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new()))?;
    let mut sink = ParquetSink::new(out);
    run(
        prepared,
        Backends {
            source: &MemSource(mixed_rows()),
            generator,
            decisions: &StandardDecisions::default(),
            sink: &mut sink,
        },
        control,
    )
}

#[test]
fn real_engine_run_resumes_to_identical_outputs() {
    // The fixture is part of the repository: its absence is a failure, not a skip.
    assert!(
        fixture().join("config.json").is_file(),
        "no models/tests/fixtures/qwen2_vl"
    );
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole");
    let report = run_engine(&whole, generator().as_mut(), &RunControl::default()).expect("run");
    let s = &report.stats;
    // Every question is accounted for (the run's own check passed); the numbers add up.
    let drops: u64 = s.cleaning_drops.values().sum();
    assert_eq!(s.accepted + s.rejected + drops + s.errors, 56, "{s:?}");
    assert!(report.engine_version.starts_with("verisample-engine"));
    assert!(s.throughput.generated_tokens > 0);

    let resumed = tmp.path().join("resumed");
    let control = RunControl::default();
    let mut stopping = StopAfter {
        inner: generator(),
        n: 9,
        seen: 0,
        flag: control.stop.clone(),
    };
    let err = run_engine(&resumed, &mut stopping, &control).unwrap_err();
    assert!(matches!(err, PipelineError::Interrupted), "{err}");
    let report =
        run_engine(&resumed, generator().as_mut(), &RunControl::default()).expect("resume");
    assert!(report.replayed_results >= 10, "{}", report.replayed_results);
    assert_same_outputs(
        &deterministic_outputs(&whole),
        &deterministic_outputs(&resumed),
    );
}
