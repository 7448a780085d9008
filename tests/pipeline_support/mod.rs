//! Test doubles for the pipeline tests: an in-memory input, a deterministic scripted model
//! and a JSON-lines split writer. The decisions are the real ones
//! (`verisample::pipeline::StandardDecisions`).
//!
//! These are doubles, not the product: the real reader/writer (`dataset`) and engine are
//! tested end to end with the real tiny model at integration (tests/pipeline_e2e.rs).
//!
//! The scripted model answers the question text `... [say:TEXT]` with
//! `<think>\nreading\n</think>\n\nTEXT` (and `1990` when there is no `[say:…]`); `[long]`
//! makes it run out of tokens inside the trace; `[engine-fail]` makes the engine refuse the
//! request. As a judge (reading the `Reference answer:` and `Candidate answer:` lines of the
//! judge prompt) it answers `CORRECT` when the digits of candidate and reference agree,
//! `WRONG` otherwise, and `UNSURE` when the reference has no letter or digit; it is lenient
//! (`CORRECT`) about any candidate containing `~`, to exercise the number guard.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Cursor;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use verisample::pipeline::{
    prepare, run, BackendError, Backends, FinishReason, GenRequest, GenResult, Generation,
    Generator, Pass, PipelineError, RowSource, RunControl, RunReport, SplitRow, SplitSink,
    StandardDecisions,
};
use verisample::record::{ImageRef, InputRow, QaItem, RowError, SplitKind};
use verisample::report::card::CardText;
use verisample::settings::{
    fingerprint, DTypeSpec, DeviceSpec, ProgressMode, ResolvedModel, Settings,
};
use verisample::shard::Shard;
use verisample::verifiers::think::AnswerFormat;

/// A tiny PNG whose pixel value depends on `seed` (so image hashes differ per row).
pub fn png(seed: u8) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(2, 2, image::Rgb([seed, 7, 9]));
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .expect("png");
    out.into_inner()
}

/// A question asking the scripted model to say `said`, with reference `reference`.
pub fn qa(said: &str, reference: &str) -> QaItem {
    QaItem {
        question: format!("What is written in the image? [say:{said}]"),
        answer: reference.to_string(),
        ..QaItem::default()
    }
}

/// A readable row.
pub fn row(file: &str, index: usize, seed: u8, qa: Vec<QaItem>) -> Result<InputRow, RowError> {
    Ok(InputRow {
        source_file: file.to_string(),
        row_index: index,
        image: ImageRef {
            bytes: Some(png(seed)),
            path: Some(format!("img{index}.png")),
        },
        qa,
        image_sha256: None,
        family: Some("TestSet".into()),
        ..InputRow::default()
    })
}

/// An input with every kind of item: accepts (several verifier variants), wrong answers a
/// judge rescues or refuses, a truncated trace, blank answers, cleaning drops, a corrupt
/// image, an empty image, a blank question, an unreadable row, an engine refusal.
pub fn mixed_rows() -> Vec<Result<InputRow, RowError>> {
    let mut rows = Vec::new();
    let f = "data/train-00000.parquet";
    for i in 0..24usize {
        let n = 1000 + i * 37;
        let items = match i % 8 {
            0 => vec![qa(&n.to_string(), &n.to_string())],
            1 => vec![qa(&format!("{n}\nbecause I read it"), &n.to_string())],
            2 => vec![
                qa(&format!("{n}.0"), &format!("{n}0")),
                qa("wrong", &n.to_string()),
            ],
            3 => vec![
                qa("ll.850", "11850"),
                qa("~12", "13"),
                qa("it says 12", "12"),
            ],
            4 => vec![
                qa("   ", &n.to_string()),
                QaItem {
                    source: Some("00ff".into()),
                    ..qa("1", "1")
                },
            ],
            5 => vec![QaItem {
                question: "[long] read it".into(),
                answer: n.to_string(),
                ..Default::default()
            }],
            6 => vec![qa("…", "。"), qa(&format!("{n}"), &format!("{n}"))],
            _ => vec![
                qa(&format!("{n}"), &format!("{n}")),
                qa("[engine-fail]", "1"),
            ],
        };
        rows.push(row(f, i, i as u8, items));
    }
    let mut bad = row(f, 24, 200, vec![qa("1", "1")]).expect("row");
    if let Some(b) = bad.image.bytes.as_mut() {
        b.truncate(b.len() / 2);
    }
    rows.push(Ok(bad));
    let mut empty = row(f, 25, 201, vec![qa("1", "1")]).expect("row");
    empty.image.bytes = Some(Vec::new());
    rows.push(Ok(empty));
    rows.push(row(
        f,
        26,
        202,
        vec![
            QaItem {
                question: " ".into(),
                answer: "5".into(),
                ..Default::default()
            },
            qa("6", "6"),
        ],
    ));
    rows.push(Err(RowError {
        file: f.into(),
        row: Some(27),
        rows: None,
        field: "qa[0].question".into(),
        message: "invalid UTF-8".into(),
    }));
    rows.push(Err(RowError {
        file: "data/train-00001.parquet".into(),
        row: None,
        rows: None,
        field: "file".into(),
        message: "not a parquet file".into(),
    }));
    for i in 0..6usize {
        rows.push(row(
            "data/train-00002.parquet",
            i,
            100 + i as u8,
            vec![qa(&format!("{}", 70 + i), &format!("{}", 70 + i))],
        ));
    }
    let orand = QaItem {
        question: verisample::family::ORAND_CAR_QUESTION.into(),
        answer: "1990".into(),
        ..Default::default()
    };
    let mut r = row(
        "data/train-00002.parquet",
        6,
        150,
        vec![orand, qa("5", "5")],
    )
    .expect("row");
    r.family = Some("OrandCar".into());
    rows.push(Ok(r));
    rows
}

/// The input, in memory.
pub struct MemSource(pub Vec<Result<InputRow, RowError>>);

impl RowSource for MemSource {
    fn rows(
        &self,
    ) -> Result<Box<dyn Iterator<Item = Result<InputRow, RowError>> + '_>, BackendError> {
        Ok(Box::new(self.0.iter().cloned()))
    }
    fn len_hint(&self) -> Option<u64> {
        Some(self.0.len() as u64)
    }
}

/// The scripted model. Completes each batch of `max_batch` requests in reverse order (so
/// completion order differs from input order); can raise the stop flag after `stop_after`
/// completions, as Ctrl-C would, and then finishes the current batch (the engine step).
pub struct ScriptedModel {
    /// Image sha256 → what to answer about it when the question has no `[say:…]`.
    pub oracle: BTreeMap<String, String>,
    pub max_batch: usize,
    pub calls: usize,
    pub completed: usize,
    pub stop_after: Option<(usize, Arc<AtomicBool>)>,
    /// As an engine whose KV cache pool is too small for the `[long]` questions' prompts:
    /// they fail with `exceeds_capacity`.
    pub small_kv_cache: bool,
    /// Stream positions whose image the engine refuses for its vision memory budget.
    pub refused_images: std::collections::BTreeSet<u64>,
}

impl ScriptedModel {
    pub fn new() -> ScriptedModel {
        ScriptedModel {
            oracle: BTreeMap::new(),
            max_batch: 5,
            calls: 0,
            completed: 0,
            stop_after: None,
            small_kv_cache: false,
            refused_images: Default::default(),
        }
    }
}

fn digits(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

fn respond(req: &GenRequest, oracle: &BTreeMap<String, String>) -> Result<Generation, String> {
    let text = req.user_text.as_str();
    if text.contains("[engine-fail]") {
        return Err("image processor refused the image".into());
    }
    let mut format = AnswerFormat::AfterThink;
    let (body, finish) = match req.pass {
        Pass::Answer if text.contains("[long]") => {
            ("<think>\nthe strokes are".to_string(), FinishReason::Length)
        }
        Pass::Answer => {
            let said = text
                .split_once("[say:")
                .and_then(|(_, r)| r.rsplit_once(']'))
                .map(|(s, _)| s.to_string())
                .or_else(|| {
                    let image = req.image.as_ref()?;
                    oracle.get(&hex::encode(image.sha256)).cloned()
                })
                .unwrap_or_else(|| "1990".to_string());
            match said.strip_prefix("glm:") {
                // GLM-4.1V's way: the final answer boxed inside `<answer>`, among other words.
                Some(boxed) => {
                    format = AnswerFormat::GlmBox;
                    (
                        format!(
                            "<think>\nreading\n</think><answer>It might be 7, but it reads \
                             <|begin_of_box|>{boxed}<|end_of_box|></answer>"
                        ),
                        FinishReason::Stop,
                    )
                }
                None => (
                    format!("<think>\nreading\n</think>\n\n{said}"),
                    FinishReason::Stop,
                ),
            }
        }
        Pass::Judge => {
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or("")
                    .to_string()
            };
            let (reference, cand) = (field("Reference answer: "), field("Candidate answer: "));
            let verdict = if !reference.chars().any(char::is_alphanumeric) {
                "UNSURE"
            } else if cand.contains('~') || digits(&reference) == digits(&cand) {
                "CORRECT"
            } else {
                "WRONG"
            };
            (
                format!("<think>\ncompare\n</think>\n\n{verdict}"),
                FinishReason::Stop,
            )
        }
    };
    Ok(Generation {
        token_ids: body.bytes().map(u32::from).collect(),
        prompt_tokens: text.len() + if req.image.is_some() { 4 } else { 0 },
        text: body,
        finish,
        prefilled_think: false,
        think_budget_hit: false,
        answer_format: format,
    })
}

impl Generator for ScriptedModel {
    fn generate(
        &mut self,
        requests: Vec<GenRequest>,
        on_done: &mut dyn FnMut(GenResult) -> ControlFlow<()>,
    ) -> Result<(), BackendError> {
        self.calls += 1;
        for batch in requests.chunks(self.max_batch) {
            let mut stop = false;
            for req in batch.iter().rev() {
                self.completed += 1;
                if let Some((n, flag)) = &self.stop_after {
                    if self.completed > *n {
                        flag.store(true, Ordering::SeqCst);
                    }
                }
                let too_long = self.small_kv_cache && req.user_text.contains("[long]");
                let r = GenResult {
                    key: req.key,
                    pass: req.pass,
                    outcome: if too_long {
                        Err("prompt of 900 tokens needs 57 KV cache blocks; the pool has 8".into())
                    } else {
                        respond(req, &self.oracle)
                    },
                    exceeds_capacity: too_long,
                };
                if on_done(r).is_break() {
                    stop = true;
                }
            }
            if stop {
                return Ok(());
            }
        }
        Ok(())
    }

    fn check_image(&self, position: u64, width: u32, height: u32) -> Result<(), String> {
        if self.refused_images.contains(&position) {
            return Err(format!(
                "image of {width}x{height} pixels is over the vision budget"
            ));
        }
        Ok(())
    }

    fn version(&self) -> String {
        "scripted-test-model 1".into()
    }
}

/// A split writer that stages rows in memory and publishes `OUT/data/<split>.jsonl` and
/// `OUT/README.md` on finish.
pub struct JsonlSink {
    pub out: PathBuf,
    pub staged: BTreeMap<String, Vec<u8>>,
}

impl JsonlSink {
    pub fn new(out: &Path) -> JsonlSink {
        JsonlSink {
            out: out.to_path_buf(),
            staged: BTreeMap::new(),
        }
    }
}

impl SplitSink for JsonlSink {
    fn write(&mut self, family: &str, kind: SplitKind, row: SplitRow) -> Result<(), BackendError> {
        let buf = self.staged.entry(kind.split_name(family)).or_default();
        match row {
            SplitRow::Accepted(r) => serde_json::to_writer(&mut *buf, &r)?,
            SplitRow::Rejected(r) => serde_json::to_writer(&mut *buf, &r)?,
        }
        buf.push(b'\n');
        Ok(())
    }

    fn finish(&mut self, card: &CardText) -> Result<(), BackendError> {
        let data = self.out.join("data");
        std::fs::create_dir_all(&data)?;
        // This run's splits replace an earlier run's, as the parquet writer's do.
        for e in std::fs::read_dir(&data)? {
            let path = e?.path();
            if path.extension().is_some_and(|x| x == "jsonl") {
                std::fs::remove_file(path)?;
            }
        }
        for (name, bytes) in &self.staged {
            verisample::atomic::write_atomic(data.join(format!("{name}.jsonl")), bytes)?;
        }
        verisample::atomic::write_atomic(
            self.out.join("README.md"),
            format!("# test dataset\n\n{}", card.body).as_bytes(),
        )?;
        Ok(())
    }
}

/// Settings for a test run writing to `out` (model folder and data path are placeholders:
/// the doubles do not read them).
pub fn settings(out: &Path, shard: Shard) -> Settings {
    Settings {
        model: ResolvedModel {
            spec: "test-model".into(),
            dir: out.join("no-model"),
            from_hub_cache: false,
            architectures: Vec::new(),
            name_or_path: None,
        },
        data: PathBuf::from("mem://mixed"),
        data_as_typed: None,
        read: Default::default(),
        input_columns: Default::default(),
        out: out.to_path_buf(),
        family: None,
        think: true,
        judge: true,
        judge_calibrate: 3,
        number_guard: true,
        verifiers: Vec::new(),
        card_meta: Vec::new(),
        dedup: true,
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        kernels: None,
        max_new_tokens: 64,
        think_budget: None,
        decoding: Default::default(),
        sampling: Default::default(),
        max_batch: 5,
        max_batch_auto: false,
        max_batch_tokens: 1024,
        kv_cache_gib: None,
        min_pixels: None,
        max_pixels: None,
        vision_memory_gib: None,
        shard,
        limit: None,
        progress: ProgressMode::None,
        max_errors: None,
        restart: false,
        verify_weights: false,
        quiet: true,
    }
}

/// Model file hashes standing in for a real model's.
pub fn model_files() -> BTreeMap<String, String> {
    BTreeMap::from([("model.safetensors".to_string(), "ab".repeat(32))])
}

/// Files whose bytes must not depend on interruption, completion order or sharding.
pub const DETERMINISTIC_FILES: [&str; 3] = ["errors.jsonl", "cleaning.jsonl", "generations.jsonl"];

/// Every deterministic output of `out`: the split files and [`DETERMINISTIC_FILES`], as
/// relative name → bytes.
pub fn deterministic_outputs(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(out.join("data")) {
        for e in entries.flatten() {
            let name = format!("data/{}", e.file_name().to_string_lossy());
            files.insert(name, std::fs::read(e.path()).unwrap_or_default());
        }
    }
    for f in DETERMINISTIC_FILES {
        files.insert(
            f.to_string(),
            std::fs::read(out.join(f)).unwrap_or_default(),
        );
    }
    files
}

/// Assert two output sets are byte-identical, naming the first differing file.
pub fn assert_same_outputs(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "file sets differ"
    );
    for (name, bytes) in a {
        assert!(
            bytes == &b[name],
            "{name} differs:\n--- a\n{}\n--- b\n{}",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&b[name])
        );
    }
}

/// Generations the mixed input needs: 47 answers + 10 judge generations — its 15 rescue
/// judgements and 3 calibrations hold 10 distinct judge prompts; each repeat reuses its
/// first item's verdict.
pub const TOTAL_GENERATIONS: usize = 57;

pub fn run_with(
    s: &Settings,
    model: &mut dyn verisample::pipeline::Generator,
    control: &RunControl,
) -> Result<RunReport, PipelineError> {
    run_hashing(s, model, control, Vec::new())
}

/// [`run_with`], recording `input_files` as the input's hashes in the fingerprint (as `run`
/// does for its parquet files), for a merge that checks them.
pub fn run_hashing(
    s: &Settings,
    model: &mut dyn verisample::pipeline::Generator,
    control: &RunControl,
    input_files: Vec<(String, String)>,
) -> Result<RunReport, PipelineError> {
    run_rows(s, &mixed_rows(), (model, control), input_files)
}

/// Run `rows` with `model` into `s.out` under `control`, `input_files` recorded as the
/// input's hashes in the fingerprint.
pub fn run_rows(
    s: &Settings,
    rows: &[Result<InputRow, RowError>],
    (model, control): (&mut dyn verisample::pipeline::Generator, &RunControl),
    input_files: Vec<(String, String)>,
) -> Result<RunReport, PipelineError> {
    let prepared = prepare(s, fingerprint(s.canonical(), model_files(), input_files))?;
    let source = MemSource(rows.to_vec());
    let mut sink = JsonlSink::new(&s.out);
    run(
        prepared,
        Backends {
            source: &source,
            generator: model,
            decisions: &StandardDecisions::default(),
            sink: &mut sink,
        },
        control,
    )
}

pub fn run_job(out: &Path, shard: Shard) -> RunReport {
    let mut model = ScriptedModel::new();
    run_with(&settings(out, shard), &mut model, &RunControl::default()).expect("run")
}

pub fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

pub fn positions_in(out: &Path) -> Vec<u64> {
    let mut p: Vec<u64> = ["errors.jsonl", "cleaning.jsonl", "generations.jsonl"]
        .iter()
        .flat_map(|f| lines(&out.join(f)))
        .map(|l| l["position"].as_u64().unwrap())
        .collect();
    p.sort_unstable();
    p.dedup();
    p
}
