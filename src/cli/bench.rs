//! `verisample bench`: the throughput of the engine `run` builds, on `run`'s input.

use std::path::PathBuf;

use clap::Args;

use super::UsageError;
use crate::engine::EngineConfig;
use crate::settings::{RunOptions, Settings, Switch, Uses};

/// Measure the engine `run` builds, on `run`'s input.
#[derive(Debug, Args)]
#[command(
    long_about = "Measure the engine `run` builds (the same settings, flags and --config job file, \
the same defaults) on `run`'s input: the questions of a parquet dataset (--data, --limit, --shard; \
the rows `run` refuses are left out and named) or --question about each image of a folder \
(--images). --warmup requests run first, unmeasured; then --repeat passes over every request, \
each starting with an empty prefix cache. Prints the settings it ran with and a table per pass \
(requests/s, prompt and generated tokens/s, time to first token p50/p99, latency p50, \
preemptions, peak RSS); --json gives every figure (images/s, TTFT, latency and time per output \
token p50/p90/p99, vision, prefill and decode time, prefix-cache hits, device memory: \
definitions in docs/bench.md), every pass, their spread, and each request's tokens. \
scripts/bench_vs_transformers.py runs it side by side with transformers.",
    after_help = "Examples:\n  verisample bench --limit 16 --repeat 3\n  \
verisample bench --model ~/models/Qwen2-VL-2B-Instruct --images ~/data/val-images --question 'What amount is written?' --max-batch 16 --json",
    mut_arg("out", |a| a.hide(true)),
    mut_arg("judge", |a| a.hide(true)),
    mut_arg("judge_calibrate", |a| a.hide(true)),
    mut_arg("number_guard", |a| a.hide(true)),
    mut_arg("verifiers", |a| a.hide(true)),
        mut_arg("progress", |a| a.hide(true)),
    mut_arg("max_errors", |a| a.hide(true)),
    mut_arg("restart", |a| a.hide(true)),
    mut_arg("force", |a| a.hide(true)),
    mut_arg("verify_weights", |a| a.hide(true)),
    mut_arg("distinct_samples", |a| a.hide(true))
)]
pub struct BenchArgs {
    /// `run`'s settings (the flags and job-file keys of `run`; those that only shape `run`'s
    /// output are refused here).
    #[command(flatten)]
    pub options: RunOptions,
    /// A folder of images (`.jpg`, `.jpeg`, `.png`, taken in file-name order) instead of
    /// --data: --question about each.
    #[arg(long, value_name = "DIR", conflicts_with = "data")]
    pub images: Option<PathBuf>,
    /// The question asked about each image of --images. [default: the OrandCar question of
    /// the bundled sample]
    #[arg(long, value_name = "TEXT", requires = "images")]
    pub question: Option<String>,
    /// Requests (the first of the input) run once before measuring, not measured: one-off
    /// costs (thread pools, allocator, device kernels) stay out of the figures.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub warmup: usize,
    /// Measured passes over every request; the report gives each and their spread.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: usize,
    /// Prefix caching on or off (`run` always has it on; off measures without it).
    #[arg(long, value_enum, value_name = "SWITCH", default_value = "on")]
    pub prefix_caching: Switch,
    /// Print one JSON report instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `run` flags that only shape `run`'s output, by their flag names: refused on `bench`'s
/// command line (a job file may hold them, for `run`; `bench` ignores them there).
fn output_only_flags(o: &RunOptions) -> Vec<&'static str> {
    [
        ("out", o.out.is_some()),
        ("judge", o.judge.is_some()),
        ("judge-calibrate", o.judge_calibrate.is_some()),
        ("number-guard", o.number_guard.is_some()),
        ("verifier", !o.verifiers.is_empty()),
        ("progress", o.progress.is_some()),
        ("max-errors", o.max_errors.is_some()),
        ("restart", o.restart),
        ("force", o.force),
        ("verify-weights", o.verify_weights),
        ("distinct-samples", o.distinct_samples.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, given)| given.then_some(name))
    .collect()
}

/// `run` flags that apply only to a dataset input, by their flag names: refused with
/// `--images`.
fn dataset_only_flags(o: &RunOptions) -> Vec<&'static str> {
    [
        ("data-config", o.data_config.is_some()),
        ("data-split", o.data_split.is_some()),
        ("image-column", o.image_column.is_some()),
        ("question-column", o.question_column.is_some()),
        ("answer-column", o.answer_column.is_some()),
        ("images-root", o.images_root.is_some()),
        ("family", o.family.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, given)| given.then_some(name))
    .collect()
}

/// The engine configuration `bench` builds for `settings`: `run`'s
/// ([`crate::pipeline::job::engine_config`]) with `bench`'s prefix-caching switch.
pub fn bench_engine_config(settings: &Settings, prefix_caching: Switch) -> EngineConfig {
    EngineConfig {
        prefix_caching: prefix_caching.is_on(),
        ..crate::pipeline::job::engine_config(settings)
    }
}

/// The settings of `a`, resolved as `run` resolves them (OUT unchecked; `--data` too with
/// `--images`).
///
/// Errors: a refused output-only flag, `--repeat 0`, the settings' own errors (usage).
pub fn bench_settings(a: &BenchArgs) -> anyhow::Result<Settings> {
    if let Some(flag) = output_only_flags(&a.options).first() {
        return Err(UsageError(format!(
            "--{flag} is a setting of `run` that `bench` does not use (it writes no output and hashes \
             no file; a job file may keep it for run)"
        ))
        .into());
    }
    if a.repeat == 0 {
        return Err(UsageError("--repeat must be at least 1".into()).into());
    }
    if a.question.as_deref().is_some_and(|q| q.trim().is_empty()) {
        return Err(UsageError("--question is blank (run refuses a blank question)".into()).into());
    }
    if a.images.is_some() {
        if let Some(flag) = dataset_only_flags(&a.options).first() {
            return Err(UsageError(format!(
                "--{flag} applies to a dataset (--data), not to a folder of images (--images)"
            ))
            .into());
        }
    }
    let uses = if a.images.is_some() {
        Uses::Nothing
    } else {
        Uses::Data
    };
    Ok(Settings::resolve_for(&a.options, uses)?)
}

/// `verisample bench`: resolve the settings, load the engine as `run` does, build the
/// requests, measure, print the table (or the JSON report).
///
/// Errors: invalid settings (usage), model loading, an unreadable input, engine errors.
pub(super) fn run(a: &BenchArgs, quiet: bool) -> anyhow::Result<()> {
    use crate::bench::{self, BenchPlan};
    use crate::pipeline::input_check::check_image;
    use crate::pipeline::EngineGenerator;
    use sha2::Digest as _;

    let settings = bench_settings(a)?;
    // A missing folder is a usage error found in milliseconds, before the model loads.
    if let Some(dir) = &a.images {
        bench::list_images(dir).map_err(|e| UsageError(format!("--images: {e}")))?;
    }
    let cfg = bench_engine_config(&settings, a.prefix_caching);
    let engine = crate::pipeline::job::load_engine_with(&settings, cfg)?;
    let mut generator = EngineGenerator::new(engine);
    let s = &settings;
    let question = a
        .question
        .as_deref()
        .unwrap_or(crate::family::ORAND_CAR_QUESTION);
    let input = match &a.images {
        Some(dir) => {
            let engine = generator.engine();
            let admit = |bytes: &[u8]| {
                check_image(Some(bytes), |w, h| engine.check_image(w, h))
                    .map(|rgb| {
                        let sha: [u8; 32] = sha2::Sha256::digest(bytes).into();
                        crate::engine::ImageInput::decoded(std::sync::Arc::new(rgb), sha)
                    })
                    .map_err(|p| p.message)
            };
            let request = |position, image| answer_requests(s, position, 0, question, image);
            bench::folder_input(dir, (s.shard, s.limit), &admit, &request)?
        }
        None => dataset_input(s, &generator)?,
    };
    for skipped in &input.skipped {
        tracing::warn!("left out, as run refuses it: {skipped}");
    }
    let plan = BenchPlan {
        warmup: a.warmup,
        repeat: a.repeat,
    };
    let engine = generator.engine_mut();
    let summary = format!(
        "bench: {} requests, warm-up {}, {} pass(es); {} {} {}, kernels {}, max batch {}{}, \
         {} KV blocks of {} tokens, prefix caching {}, max new tokens {}, {}",
        input.requests.len(),
        a.warmup.min(input.requests.len()),
        a.repeat,
        s.model.dir.display(),
        s.device,
        s.dtype.to_dtype().as_str(),
        s.attention_path().name(),
        engine.config().max_batch,
        if s.max_batch_auto { " (auto)" } else { "" },
        engine.num_blocks(),
        engine.config().block_size,
        if engine.config().prefix_caching {
            "on"
        } else {
            "off"
        },
        s.max_new_tokens,
        match s.sampling.params {
            Some(p) => format!(
                "{} sample(s) at T={} seed {}",
                s.sampling.samples, p.temperature, p.seed
            ),
            None => "greedy".to_string(),
        },
    );
    let engine_block = serde_json::json!({
        "max_batch": engine.config().max_batch,
        "max_batch_auto": s.max_batch_auto,
        "max_batch_tokens": engine.config().max_batch_tokens,
        "kv_blocks": engine.num_blocks(),
        "block_size": engine.config().block_size,
        "prefix_caching": engine.config().prefix_caching,
        "kernels": s.attention_path().name(),
    });
    let report = bench::run(engine, input, plan)?;
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(top) = v.as_object_mut() {
            top.insert("settings".into(), serde_json::to_value(s)?);
            top.insert("engine".into(), engine_block);
            top.insert(
                "input".into(),
                match &a.images {
                    Some(dir) => serde_json::json!({"images": dir, "question": question}),
                    None => serde_json::json!({"data": s.data}),
                },
            );
        }
        println!("{}", serde_json::to_string(&v)?);
    } else {
        // The settings line heads the table, printed once the passes ran (a failed bench
        // leaves stdout empty, as with --json).
        if !quiet {
            println!("{summary}");
        }
        println!("{}", report.to_table());
    }
    Ok(())
}

/// The answer requests of `run` for question `text` (input position `position`, `qa` index)
/// about `image`: one per sample, each with its label suffix (` sample K` when sampling).
fn answer_requests(
    s: &Settings,
    position: u64,
    qa: u32,
    text: &str,
    image: crate::engine::ImageInput,
) -> Vec<(String, crate::engine::Request)> {
    (0..s.sampling.samples as u32)
        .map(|k| {
            let suffix = if s.sampling.samples > 1 {
                format!(" sample {k}")
            } else {
                String::new()
            };
            let request = crate::engine::Request {
                image: Some(image.clone()),
                text: text.to_string(),
                max_new_tokens: Some(s.max_new_tokens),
                enable_thinking: Some(s.think),
                sampling: s.sampling.stream(position, qa, k),
                ..Default::default()
            };
            (suffix, request)
        })
        .collect()
}

/// The requests of `run`'s answer pass over the dataset of `s`, planned as `run` plans them
/// ([`crate::pipeline::RowPlanner`]: `--shard`, `--limit`, checks, cleaning, duplicates); the
/// rows and questions it refuses left out, with their errors.jsonl message.
fn dataset_input(
    s: &Settings,
    generator: &dyn crate::pipeline::Generator,
) -> anyhow::Result<crate::bench::BenchInput> {
    use crate::pipeline::{ParquetSource, RowPlanner, RowSource, Select, StandardDecisions};
    let source = ParquetSource {
        // The questions are what bench measures: no column is carried into a split.
        carry: false,
        ..ParquetSource::with_options(
            &s.data,
            crate::dataset::layout::ReadOptions {
                skip_family_column: s.family.is_some(),
                ..s.read.clone()
            },
        )
    };
    let decisions = StandardDecisions {
        verifiers: s.verifier_registry(),
        ..StandardDecisions::default()
    };
    let mut input = crate::bench::BenchInput::default();
    // The duplicate marker's keys go to an unlinked file in the system's temporary folder
    // (bench writes no output folder).
    let mut planner = RowPlanner::new(s, &std::env::temp_dir())?;
    let rows = source
        .rows()
        .map_err(|e| UsageError(format!("--data {}: {e}", s.data.display())))?;
    for (position, element) in rows.enumerate() {
        let position = position as u64;
        let mine = match planner.select(position, s) {
            Select::Stop => break,
            Select::Skip => continue,
            Select::Plan { mine } => mine,
        };
        let label = match &element {
            Ok(row) => format!(
                "{} row {}",
                std::path::Path::new(&row.source_file)
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                row.row_index
            ),
            Err(e) => e.file.clone(),
        };
        let row = (position, element);
        let Some(planned) = planner.plan(mine, row, s, &decisions, generator)? else {
            continue;
        };
        let (image, questions, problems) = planned.questions();
        input.skipped.extend(problems);
        let Some(image) = image else { continue };
        for (qa, q) in questions {
            for (suffix, request) in answer_requests(s, position, qa, &q, image.clone()) {
                input.requests.push(crate::bench::BenchRequest {
                    label: format!("{label} qa {qa}{suffix}"),
                    request,
                });
            }
        }
    }
    Ok(input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct RunCli {
        #[command(flatten)]
        args: crate::cli::run::RunArgs,
    }

    #[derive(Parser)]
    struct BenchCli {
        #[command(flatten)]
        args: BenchArgs,
    }

    /// `bench` and `run` given the same flags and job file build the same engine
    /// configuration, defaults included; a setting of the job file reaches both.
    #[test]
    fn bench_and_run_build_the_same_engine() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("job.toml");
        std::fs::write(
            &job,
            "max-new-tokens = 77\nmax-batch-tokens = 999\nout = \"o\"\n",
        )
        .unwrap();
        let out = dir.path().join("out");
        let job = job.to_string_lossy().into_owned();
        for flags in [
            vec![],
            vec![
                "--max-batch",
                "7",
                "--kv-cache-gib",
                "0.5",
                "--vision-memory-gib",
                "1",
            ],
            vec!["--config", job.as_str(), "--max-batch", "3"],
        ] {
            let run_args =
                RunCli::try_parse_from(["x", "--out", out.to_str().unwrap()].iter().chain(&flags))
                    .unwrap()
                    .args;
            let bench_args = BenchCli::try_parse_from(["x"].iter().chain(&flags))
                .unwrap()
                .args;
            let run = Settings::resolve(&run_args.options).unwrap();
            let bench = bench_settings(&bench_args).unwrap();
            let run_cfg = crate::pipeline::job::engine_config(&run);
            let bench_cfg = bench_engine_config(&bench, bench_args.prefix_caching);
            assert_eq!(run_cfg, bench_cfg, "{flags:?}");
            if flags.contains(&"--config") {
                assert_eq!(
                    (bench_cfg.max_new_tokens, bench_cfg.max_batch_tokens),
                    (77, 999)
                );
                assert_eq!(bench_cfg.max_batch, 3);
            }
        }
    }

    /// A flag that only shapes `run`'s output is refused by name; `--repeat 0` too.
    #[test]
    fn output_only_flags_are_refused() {
        for (flag, value) in [("--out", "o"), ("--judge", "off"), ("--verifier", "exact")] {
            let args = BenchCli::try_parse_from(["x", flag, value]).unwrap().args;
            let err = bench_settings(&args).unwrap_err().to_string();
            assert!(err.contains(&flag[2..]) && err.contains("bench"), "{err}");
        }
        let args = BenchCli::try_parse_from(["x", "--repeat", "0"])
            .unwrap()
            .args;
        assert!(bench_settings(&args)
            .unwrap_err()
            .to_string()
            .contains("--repeat"));
    }
}
