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
    assert_same_outputs, deterministic_outputs, mixed_rows, model_files, qa, row, settings,
    MemSource,
};
use verisample::engine::generation::GenerationConfig;
use verisample::engine::vl::load_engine;
use verisample::engine::{EngineConfig, EngineModel, KvBudget, VisionMemory};
use verisample::pipeline::{
    prepare, run, BackendError, Backends, EngineGenerator, GenRequest, GenResult, Generator,
    ParquetSink, PipelineError, RunControl, RunReport, StandardDecisions,
};
use verisample::settings::fingerprint;
use verisample::shard::Shard;
use verisample_models::{smart_resize, VlModel};

const MAX_NEW: usize = 12;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/tests/fixtures/qwen2_vl")
}

fn generator() -> Box<dyn Generator> {
    generator_with(EngineConfig::default().vision_memory)
}

fn generator_with(vision_memory: VisionMemory) -> Box<dyn Generator> {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Blocks(256),
        max_batch: 6,
        max_new_tokens: MAX_NEW,
        vision_memory,
        ..Default::default()
    };
    let engine = load_engine(
        &fixture(),
        DType::F32,
        (&Device::Cpu, verisample_models::AttentionPath::Native),
        cfg,
        &GenerationConfig::resolve(&fixture(), true, None).expect("generation_config.json"),
        Default::default(),
    )
    .expect("load fixture");
    Box::new(EngineGenerator::new(engine))
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

    fn check_image(&self, position: u64, width: u32, height: u32) -> Result<(), String> {
        self.inner.check_image(position, width, height)
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

/// A `w`×`h` PNG gradient.
fn png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, 9])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .expect("png");
    out.into_inner()
}

#[test]
fn an_image_over_the_vision_memory_budget_is_an_error_row_and_the_run_goes_on() {
    // The fixture resizes within 3136..=50176 pixels: its 2x2 rows become 56x56 (16 patches),
    // a 1000x800 image 224x196 (16x14 = 224 patches). The budget holds 64 patches.
    let model = VlModel::load(&fixture(), DType::F32, &Device::Cpu).unwrap();
    let pass = |p: usize| model.vision_pass_bytes(p).unwrap();
    let budget = pass(64);
    let patches = |max_pixels: usize| {
        let (h, w) = smart_resize(800, 1000, 28, 3136, max_pixels).unwrap();
        (h / 14) * (w / 14)
    };
    assert_eq!(patches(50176), 224);
    let f = "data/train-00000.parquet";
    let rows = || {
        let mut big = row(f, 1, 1, vec![qa("1", "1")]).unwrap();
        big.image.bytes = Some(png(1000, 800));
        vec![
            row(f, 0, 0, vec![qa("1", "1")]),
            Ok(big),
            row(f, 2, 2, vec![qa("2", "2")]),
        ]
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut s = settings(&out, Shard::WHOLE);
    s.max_new_tokens = MAX_NEW;
    // A run (or a resume) of the rows with a vision budget of `bytes`; how many answers the
    // journal held.
    let run_with_budget = |bytes: u64| {
        let prepared = prepare(&s, fingerprint(s.canonical(), model_files(), Vec::new())).unwrap();
        let replayed = prepared.replayed();
        let mut generator = generator_with(VisionMemory::Gib(bytes as f64 / (1u64 << 30) as f64));
        let report = run(
            prepared,
            Backends {
                source: &MemSource(rows()),
                generator: generator.as_mut(),
                decisions: &StandardDecisions::default(),
                sink: &mut ParquetSink::new(&out),
            },
            &RunControl::default(),
        )
        .expect("the run goes on");
        (report, replayed)
    };
    let (report, _) = run_with_budget(budget);
    // The two small rows were answered; the big one is the only error.
    assert_eq!(
        report.stats.accepted + report.stats.rejected,
        2,
        "{:?}",
        report.stats
    );
    assert_eq!(report.stats.errors, 1);
    let errors: Vec<serde_json::Value> = std::fs::read_to_string(out.join("errors.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!(
        (e["field"].as_str(), e["row"].as_u64()),
        (Some("image.bytes"), Some(1))
    );
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("1000x800 pixels (224 patches once resized)"),
        "{msg}"
    );
    assert!(msg.contains("vision memory budget"), "{msg}");
    // The suggested --max-pixels is the largest whose image fits the budget.
    let suggested: usize = msg
        .split("--max-pixels ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no --max-pixels in {msg}"));
    assert!(pass(patches(suggested)) <= budget, "{msg}");
    assert!(pass(patches(suggested + 1)) > budget, "{msg}");

    // The same run again with a budget that lets the image in resumes (the budget is not part
    // of the run's identity): the two answers come from the journal, only the big row is
    // generated, and nothing is an error any more.
    let (report, replayed) = run_with_budget(pass(256));
    assert_eq!(replayed, 2, "the earlier answers are resumed");
    assert_eq!(
        (
            report.stats.accepted + report.stats.rejected,
            report.stats.errors
        ),
        (3, 0),
        "{:?}",
        report.stats
    );
    assert_eq!(
        report.stats.throughput.generated_items, 1,
        "{:?}",
        report.stats
    );
}
