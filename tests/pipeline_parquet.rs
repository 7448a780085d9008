//! `run` on the real OrandCar val images through the real parquet reader and writer and the
//! real decisions, with the scripted model standing in for the VLM (it "reads" the label of
//! most images, and a wrong or reformatted one for the others). The stored splits must
//! re-derive cleanly (`recheck`), an interrupted run must resume to byte-identical
//! parquet, and two shards merged must equal the unsharded output.
//!
//! Needs the shared data (`$VERISAMPLE_SHARED_DATA`, else `<repo>/../../shared/data`, else
//! `<repo>/../shared/data`); without it prints "skipped: …"
//! (and fails under CI, see tests/shared_data).

mod shared_data;
use shared_data::require_shared_data;

mod pipeline_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pipeline_support::{assert_same_outputs, model_files, settings, ScriptedModel};
use verisample::dataset::prepare::{prepare, PrepareOptions, PrepareSource};
use verisample::dataset::shards::ShardOptions;
use verisample::dataset::writer::{read_accepted_split, read_rejected_split, sha256_hex};
use verisample::family::{ORAND_CAR, ORAND_CAR_QUESTION};
use verisample::merge::{prepare_merge, JournalOnly, MergeOptions};
use verisample::pipeline::{
    prepare as prepare_run, run, Backends, Generator, ParquetSink, ParquetSource, PipelineError,
    RunControl, RunReport, StandardDecisions,
};
use verisample::settings::{fingerprint, hash_input_files};
use verisample::shard::Shard;
use verisample::verify_output::{recheck_family, FamilySplits, RecheckSettings};

/// The val split as an input dataset in `dir`, and the scripted model's answers: the label
/// for most images; for every 5th a wrong digit string, for every 7th the label inside a
/// sentence (`it says 1990`: the verifier rejects it, the judge accepts it).
fn val_input(dir: &Path, data: &Path) -> (PathBuf, BTreeMap<String, String>) {
    let orand = data.join("orand-car-a");
    let input = dir.join("input");
    prepare(
        &PrepareOptions {
            source: PrepareSource::Labels {
                labels: orand.join("labels.jsonl"),
                images: orand.clone(),
                question: ORAND_CAR_QUESTION.to_string(),
                split_filter: Some("val".into()),
            },
            family: Some(ORAND_CAR.into()),
            out: input.clone(),
            split: "val".into(),
            shard: ShardOptions {
                rows_per_group: 10,
                ..ShardOptions::default()
            },
            images_root: None,
        },
        &|_, qa, _| Ok(vec![None; qa.len()]),
    )
    .expect("prepare val");
    let mut oracle = BTreeMap::new();
    let labels = std::fs::read_to_string(orand.join("labels.jsonl")).unwrap();
    for (i, line) in labels.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["split"] != "val" {
            continue;
        }
        let label = v["label"].as_str().unwrap().to_string();
        let bytes = std::fs::read(orand.join(v["file"].as_str().unwrap())).unwrap();
        let said = if i % 5 == 0 {
            format!("{label}9")
        } else if i % 7 == 0 {
            format!("it says {label}")
        } else {
            label
        };
        oracle.insert(sha256_hex(&bytes), said);
    }
    (input, oracle)
}

fn run_parquet(
    input: &Path,
    out: &Path,
    shard: Shard,
    model: &mut dyn Generator,
    control: &RunControl,
) -> Result<RunReport, PipelineError> {
    let mut s = settings(out, shard);
    s.data = input.to_path_buf();
    // The input's hashes as `run` records them (a merge checks them).
    let input_files = hash_input_files(input).expect("hash the input");
    let prepared = prepare_run(&s, fingerprint(s.canonical(), model_files(), input_files))?;
    let mut sink = ParquetSink::new(out);
    run(
        prepared,
        Backends {
            source: &ParquetSource::new(input),
            generator: model,
            decisions: &StandardDecisions::default(),
            sink: &mut sink,
        },
        control,
    )
}

/// `data/*.parquet` plus the pipeline's JSON-lines files.
fn outputs(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = pipeline_support::deterministic_outputs(out);
    files.retain(|k, _| !k.starts_with("data/") || k.ends_with(".parquet"));
    files
}

fn model_with(oracle: &BTreeMap<String, String>) -> ScriptedModel {
    let mut m = ScriptedModel::new();
    m.oracle = oracle.clone();
    m
}

#[test]
fn val_images_through_parquet_resume_and_merge() {
    let Some(data) = require_shared_data() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (input, oracle) = val_input(tmp.path(), &data);

    let whole = tmp.path().join("whole");
    let report = run_parquet(
        &input,
        &whole,
        Shard::WHOLE,
        &mut model_with(&oracle),
        &RunControl::default(),
    )
    .expect("run");
    let s = &report.stats;
    // The oracle fixes every outcome: of the 78 val lines (1080..=1157 of labels.jsonl), 16
    // have an index divisible by 5 (a wrong digit: rejected, the judge says WRONG) and 8 more
    // one divisible by 7 (the label in a sentence: the verifier rejects, the judge accepts);
    // the other 54 are read exactly. Catches: a decision, judge or count that goes astray on
    // a single item, which `> 50`-style bounds let through.
    assert_eq!((s.input_rows, s.input_items), (78, 78));
    assert_eq!((s.accepted, s.rejected, s.errors), (62, 16, 0), "{s:?}");
    assert_eq!(
        s.accepted_by,
        BTreeMap::from([
            ("judge".to_string(), 8),
            ("verifier:alnum:whole".to_string(), 54)
        ]),
        "{s:?}"
    );
    assert_eq!(
        s.reject_reasons,
        BTreeMap::from([("wrong_answer".to_string(), 16)]),
        "{s:?}"
    );
    assert_eq!(
        (
            s.judge.judged,
            s.judge.overturns,
            s.judge.number_guard_blocks
        ),
        (24, 8, 0),
        "{:?}",
        s.judge
    );
    assert_eq!(
        s.judge.verdicts,
        BTreeMap::from([("CORRECT".to_string(), 8), ("WRONG".to_string(), 16)])
    );

    // The stored splits re-derive cleanly, with no model.
    let split = |name: &str| whole.join(format!("data/{name}-00000-of-00001.parquet"));
    let think = read_accepted_split(&split("OrandCar_RS_think")).unwrap();
    let nothink = read_accepted_split(&split("OrandCar_RS_nothink")).unwrap();
    let rejected = read_rejected_split(&split("OrandCar_rejected")).unwrap();
    let entries: usize = nothink.iter().map(|r| r.qa.len()).sum();
    assert_eq!(entries as u64, s.accepted);
    let v = recheck_family(
        &FamilySplits {
            family: "OrandCar",
            think: &think,
            nothink: &nothink,
            rejected: &rejected,
        },
        &RecheckSettings::default(),
    );
    assert!(v.is_clean(), "{:?}", v.disagreements);
    // The input's own columns (the labels' `width`, `file`, … as `prepare` typed them) travel
    // with every split row, so the resumed and merged outputs below carry them too.
    for carried in think
        .iter()
        .chain(&nothink)
        .map(|r| &r.carried)
        .chain(rejected.iter().map(|r| &r.carried))
    {
        let carried = carried.as_ref().expect("carried columns");
        let width = carried.column_by_name("width").expect("width column");
        assert_eq!(width.data_type(), &arrow::datatypes::DataType::Int64);
        assert_eq!(width.null_count(), 0);
        let file = carried.column_by_name("file").expect("file column");
        assert!(verisample::dataset::values::get_string(file.as_ref(), 0)
            .unwrap()
            .is_some_and(|f| f.starts_with("val/a_car_")));
    }
    let card = std::fs::read_to_string(whole.join("README.md")).unwrap();
    assert!(
        card.starts_with("---\n") && card.contains("\nconfigs:\n- config_name: "),
        "HF card front matter"
    );
    assert!(card.contains("## Statistics"));
    let want = outputs(&whole);

    // Interrupted in the answer pass, then resumed: byte-identical parquet.
    let resumed = tmp.path().join("resumed");
    let control = RunControl::default();
    let mut m = model_with(&oracle);
    m.stop_after = Some((30, control.stop.clone()));
    let err = run_parquet(&input, &resumed, Shard::WHOLE, &mut m, &control).unwrap_err();
    assert!(matches!(err, PipelineError::Interrupted), "{err}");
    run_parquet(
        &input,
        &resumed,
        Shard::WHOLE,
        &mut model_with(&oracle),
        &RunControl::default(),
    )
    .expect("resume");
    assert_same_outputs(&want, &outputs(&resumed));

    // Two shards merged equal the unsharded output.
    let shard_dirs: Vec<PathBuf> = (0..2)
        .map(|i| tmp.path().join(format!("shard{i}")))
        .collect();
    for (i, d) in shard_dirs.iter().enumerate() {
        run_parquet(
            &input,
            d,
            Shard { index: i, count: 2 },
            &mut model_with(&oracle),
            &RunControl::default(),
        )
        .expect("shard run");
    }
    let merged = tmp.path().join("merged");
    let plan = prepare_merge(&MergeOptions {
        shards: shard_dirs.clone(),
        out: merged.clone(),
        data: None,
        force: false,
        restart: false,
        progress: None,
        quiet: true,
    })
    .expect("merge plan");
    let mut sink = ParquetSink::new(&merged);
    let mut engine = JournalOnly {
        engine_version: plan.engine_version.clone(),
        refused_images: plan.refused_images.clone(),
    };
    run(
        plan.prepared,
        Backends {
            source: &ParquetSource::new(&plan.settings.data),
            generator: &mut engine,
            decisions: &StandardDecisions::default(),
            sink: &mut sink,
        },
        &RunControl::default(),
    )
    .expect("merge");
    assert_same_outputs(&want, &outputs(&merged));
}
