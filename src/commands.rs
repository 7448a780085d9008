//! The I/O sides of `verify`, `check` and `bench`: read what they need from disk or
//! arguments, call the library code (`verify_output`, `check`, `bench`), print.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context as _;

use crate::check::{check_with, CheckReport};
use crate::cli::{CheckArgs, UsageError, VerifyArgs};
use crate::dataset::card::{kind_of_split, scan_output_dir};
use crate::dataset::writer::{read_accepted_split, read_rejected_split, split_files};
use crate::record::{AcceptedQa, OutputRow, RejectedQa, SplitKind};
use crate::verify::{Verifier, VerifierRegistry};
use crate::verify_output::{
    row_count_mismatches, verify_family, FamilySplits, VerifyReport, VerifySettings,
};

/// A `verify` that found disagreements (exit code 1, report already printed).
#[derive(Debug, thiserror::Error)]
#[error("verify found {0} disagreement(s)")]
pub struct VerifyFailed(pub usize);

/// `OUT/run.json` as JSON, or `Null` when the output has none (e.g. hand-made).
///
/// Errors: the file exists but is not valid JSON.
fn read_run_json(out: &Path) -> anyhow::Result<serde_json::Value> {
    let run_json = out.join("run.json");
    match std::fs::read(&run_json) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not valid JSON", run_json.display())),
        Err(_) => Ok(serde_json::Value::Null),
    }
}

/// The settings `verify` applies: those recorded in `run.json` (`settings.number_guard`,
/// `settings.verifiers` — a list of `FAMILY=NAME`), then the command-line overrides.
fn verify_settings(a: &VerifyArgs, recorded: &serde_json::Value) -> anyhow::Result<VerifySettings> {
    let settings = &recorded["settings"];
    let mut overrides: Vec<String> = settings["verifiers"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    overrides.extend(a.verifiers.iter().cloned());
    let guard_off = a.no_number_guard || settings["number_guard"].as_bool() == Some(false);
    VerifySettings::from_args(guard_off, &overrides).map_err(|e| UsageError(e.to_string()).into())
}

/// The three splits of one family as read back: think, nothink, rejected.
type ReadSplits = (
    Vec<OutputRow<AcceptedQa>>,
    Vec<OutputRow<AcceptedQa>>,
    Vec<OutputRow<RejectedQa>>,
);

fn read_family(out: &Path, family: &str) -> anyhow::Result<ReadSplits> {
    let accepted = |kind: SplitKind| -> anyhow::Result<Vec<OutputRow<AcceptedQa>>> {
        let mut rows = Vec::new();
        for f in split_files(out, &kind.split_name(family))? {
            rows.extend(read_accepted_split(&f)?);
        }
        Ok(rows)
    };
    let mut rejected = Vec::new();
    for f in split_files(out, &SplitKind::Rejected.split_name(family))? {
        rejected.extend(read_rejected_split(&f)?);
    }
    Ok((
        accepted(SplitKind::Think)?,
        accepted(SplitKind::NoThink)?,
        rejected,
    ))
}

/// `verisample verify OUT`: re-derive every decision of every family in `OUT/data` from the
/// stored fields alone, check the row counts against `run.json`, and print the report.
///
/// Errors: unreadable output ([`anyhow`]), or [`VerifyFailed`] when any decision disagrees.
pub fn verify_dir(a: &VerifyArgs) -> anyhow::Result<()> {
    let recorded = read_run_json(&a.out)?;
    if recorded.is_null() {
        use crate::pipeline::outputs::{JOURNAL_FILE, RUN_FILE};
        if a.out.join(JOURNAL_FILE).exists() {
            anyhow::bail!(
                "{} holds an unfinished run ({JOURNAL_FILE} but no {RUN_FILE}): its data/ is \
                 from an earlier run or incomplete; rerun the same command to finish it",
                a.out.display()
            );
        }
        eprintln!(
            "note: no {RUN_FILE} in {}: decisions are checked, row counts are not",
            a.out.display()
        );
    }
    let settings = verify_settings(a, &recorded)?;
    let splits = scan_output_dir(&a.out)
        .with_context(|| format!("read output directory {}", a.out.display()))?;
    let mut problems = 0;
    if let Some(rows) = recorded["stats"]["split_rows"].as_object() {
        let want: BTreeMap<String, u64> = rows
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
            .collect();
        let found: BTreeMap<String, u64> = splits
            .iter()
            .map(|s| (s.name.clone(), s.num_examples))
            .collect();
        for m in row_count_mismatches(&want, &found) {
            println!("MISMATCH {m}");
            problems += 1;
        }
    }
    let families: BTreeSet<String> = splits
        .iter()
        .filter_map(|s| {
            let kind = kind_of_split(&s.name)?;
            let suffix_len = s.name.len() - kind.split_name("").len();
            Some(s.name[..suffix_len].to_string())
        })
        .collect();
    if families.is_empty() {
        return Err(UsageError(format!(
            "no output splits found in {}/data",
            a.out.display()
        ))
        .into());
    }
    for family in &families {
        let (think, nothink, rejected) = read_family(&a.out, family)?;
        let report: VerifyReport = verify_family(
            &FamilySplits {
                family,
                think: &think,
                nothink: &nothink,
                rejected: &rejected,
            },
            &settings,
        );
        problems += report.disagreements.len();
        if a.json {
            println!("{}", report.to_json());
        } else {
            print!("{}", report.to_human());
        }
    }
    if problems > 0 {
        return Err(VerifyFailed(problems).into());
    }
    Ok(())
}

/// `verisample check`: explain one string decision.
///
/// Errors: an unknown `--verifier` specification (usage error).
pub fn check(a: &CheckArgs) -> anyhow::Result<()> {
    let verifier: Verifier = match &a.verifier {
        Some(spec) => spec
            .parse()
            .map_err(|e: crate::verify::VerifierError| UsageError(e.to_string()))?,
        None => {
            let registry = VerifierRegistry::default();
            if !registry.by_family.contains_key(&a.family) {
                eprintln!(
                    "note: no verifier is registered for family {:?}: using the default ({}), \
                     as `run` would; pass --verifier to choose one",
                    a.family, registry.default
                );
            }
            registry.for_family(Some(&a.family))
        }
    };
    let report: CheckReport = check_with(&a.family, &a.pred, &a.reference, verifier);
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_human());
    }
    Ok(())
}

/// `verisample bench`: load the model, run the OrandCar question over a folder of images
/// through the engine, print the throughput table (or the JSON report).
///
/// Errors: invalid settings (usage), model loading, unreadable images, engine errors.
pub fn bench(a: &crate::cli::BenchArgs) -> anyhow::Result<()> {
    use crate::bench::{self, BenchOptions};
    use crate::engine::vl::load_engine;
    use crate::engine::{EngineConfig, KvBudget};

    let cfg = EngineConfig {
        kv_budget: KvBudget::Gib(a.kv_cache_gib),
        max_batch: a.max_batch,
        max_new_tokens: a.max_new_tokens,
        prefix_caching: !a.no_prefix_caching,
        ..Default::default()
    };
    cfg.validate().map_err(|e| UsageError(e.to_string()))?;
    a.device.check_built()?;
    let device = a.device.open().context("opening the device")?;
    let model = a
        .model
        .clone()
        .unwrap_or_else(crate::settings::default_model_dir);
    let mut engine = load_engine(
        &model,
        candle_core::DType::F32,
        &device,
        cfg,
        Some(true),
        Default::default(),
    )
    .with_context(|| format!("loading {}", model.display()))?;

    let all = bench::list_images(&a.images, 0)?.len();
    let taken = if a.num_images == 0 {
        all
    } else {
        a.num_images.min(all)
    };
    if taken < all {
        tracing::info!(
            "bench: {taken} of the {all} images in {} (the first by file name; --num-images {} keeps a run short, --num-images 0 takes all)",
            a.images.display(),
            a.num_images
        );
    } else {
        tracing::info!("bench: all {all} images in {}", a.images.display());
    }
    let opts = BenchOptions {
        images_dir: a.images.clone(),
        num_images: a.num_images,
        question: crate::family::ORAND_CAR_QUESTION.to_string(),
        max_new_tokens: a.max_new_tokens,
    };
    let report = bench::run(&mut engine, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.to_table());
    }
    Ok(())
}

/// `verisample doctor`: run the device checks, print the report; a failed check is an error
/// (exit 1) after the report is printed.
///
/// Errors: a device this binary was not built for (usage), the device not opening, the
/// default model or sample not loading, a failed check.
pub fn doctor(a: &crate::cli::DoctorArgs) -> anyhow::Result<()> {
    use crate::doctor::{self, DoctorOptions};
    use crate::settings::{bundled, DeviceSpec, DEFAULT_DATA};

    let device = a.device.unwrap_or_else(DeviceSpec::default_for_build);
    device.check_built()?;
    let opts = DoctorOptions {
        device,
        model: a
            .model
            .clone()
            .unwrap_or_else(crate::settings::default_model_dir),
        data: a.data.clone().unwrap_or_else(|| bundled(DEFAULT_DATA)),
        max_new_tokens: a.max_new_tokens,
    };
    let report = doctor::run(&opts).with_context(|| format!("doctor on {device}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.to_text());
    }
    if report.failed() {
        anyhow::bail!("doctor: a check failed on {device} (see the report above)");
    }
    Ok(())
}
