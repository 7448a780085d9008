//! The `verisample` command line, the only layer that knows clap and `anyhow`: the
//! top-level parser, one file per subcommand (its clap arguments and its I/O side: read what
//! it needs, call the library, print), and the one mapping from typed errors to exit codes
//! ([`exit_code`]: 0 ok, 1 error, 2 usage or invalid settings, 130/143 after a stop signal).
//! Each subcommand's clap struct (`*Args`) lives here and is converted into the plain
//! options its library module takes (`run`: [`crate::settings::RunOptions`], `merge`:
//! [`crate::merge::MergeOptions`], ...).

mod bench;
mod check;
mod doctor;
mod inspect;
mod merge;
mod prepare;
mod run;
mod summary;
mod values;
mod verify;
mod view;

use clap::{Parser, Subcommand};

use crate::engine::vl::VlLoadError;
use crate::engine::EngineError;
use crate::pipeline::PipelineError;

pub use bench::BenchArgs;
pub use check::CheckArgs;
pub use doctor::DoctorArgs;
pub use inspect::InspectArgs;
pub use merge::MergeArgs;
pub use prepare::{prepare_options, PrepareArgs};
pub use run::RunArgs;
pub use verify::{VerifyArgs, VerifyFailed};
pub use view::ViewArgs;

/// Turn a visual-QA dataset into verified training data with a vision-language model.
#[derive(Debug, Parser)]
#[command(name = "verisample", version, propagate_version = true)]
#[command(
    about = "Turn a visual-QA dataset into verified training data with a VLM",
    long_about = "Turn a visual-QA dataset into verified training data with a vision-language model: \
batched greedy sampling with reasoning, a string verifier, a judge pass, and Hugging Face parquet \
splits (<Family>_RS_think, <Family>_RS_nothink, <Family>_rejected).\n\n\
Logging goes to stderr: -v for debug, -vv for trace, -q for warnings only; RUST_LOG overrides."
)]
pub struct Cli {
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size of the `run` variant (its many optional flags) costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    // Each variant takes its help (about, long about, examples) from its `*Args` struct, so the
    // variants carry no doc comments (clap would let them override the struct's long help).
    #[allow(missing_docs)]
    Prepare(PrepareArgs),
    #[allow(missing_docs)]
    Inspect(InspectArgs),
    #[allow(missing_docs)]
    Run(RunArgs),
    #[allow(missing_docs)]
    Verify(VerifyArgs),
    #[allow(missing_docs)]
    Check(CheckArgs),
    #[allow(missing_docs)]
    Merge(MergeArgs),
    #[allow(missing_docs)]
    Bench(BenchArgs),
    #[allow(missing_docs)]
    Doctor(DoctorArgs),
    #[allow(missing_docs)]
    View(ViewArgs),
}

/// A usage problem found after parsing (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The process exit code for a command result: 0 ok, else [`error_exit_code`].
pub fn exit_code(result: &anyhow::Result<()>) -> u8 {
    match result {
        Ok(()) => 0,
        Err(e) => error_exit_code(e),
    }
}

/// The exit status for an error of a command, the one mapping from typed errors: 130 after
/// Ctrl-C (143 after SIGTERM), 2 for a usage error or invalid settings (including an engine
/// setting such as a `--kv-cache-gib` that does not fit in memory, pixel bounds that leave no
/// image size, a `--model` folder that cannot be loaded — a file missing, unreadable, not
/// valid JSON or not valid safetensors — an OUT holding a split-named file or folder that is
/// not parquet or that another live `run` or `merge` holds, and a merge whose `--out` is, or lies inside, a shard folder or is not
/// writable, whose shard folders are not finished runs (or left rows out with `--limit`) or do
/// not cover the input once (or stopped while replacing their outputs), or
/// whose input is missing), 1 otherwise (a merge of shards of different jobs or over a changed
/// input among them).
pub fn error_exit_code(err: &anyhow::Error) -> u8 {
    if err.is::<UsageError>() {
        return 2;
    }
    // A merge's pipeline error (a busy OUT, …) keeps the pipeline's exit code.
    let pipeline = err.downcast_ref::<PipelineError>().or_else(|| {
        match err.downcast_ref::<crate::merge::MergeError>() {
            Some(crate::merge::MergeError::Pipeline(p)) => Some(p),
            _ => None,
        }
    });
    if let Some(p) = pipeline {
        return u8::try_from(p.exit_code()).unwrap_or(1);
    }
    if err
        .downcast_ref::<crate::settings::SettingsError>()
        .is_some()
        || matches!(
            err.downcast_ref::<crate::merge::MergeError>(),
            Some(
                crate::merge::MergeError::OutIsShard(_)
                    | crate::merge::MergeError::Out(_)
                    | crate::merge::MergeError::Report { .. }
                    | crate::merge::MergeError::Unfinished(_)
                    | crate::merge::MergeError::Limited { .. }
                    | crate::merge::MergeError::Coverage(_)
                    | crate::merge::MergeError::DataNotFound(_)
            )
        )
        || matches!(
            err.downcast_ref::<VlLoadError>(),
            Some(
                VlLoadError::Engine(EngineError::Config(_))
                    | VlLoadError::Model(_)
                    | VlLoadError::Processor(_)
                    | VlLoadError::Chat(_)
                    | VlLoadError::GenerationConfig(_)
            )
        )
    {
        return 2;
    }
    1
}

/// The one-line message printed for an error: each context and cause, joined by `": "`,
/// leaving out a cause whose text the line already holds (typed errors often repeat their
/// source in their own message, which `{:#}` would then print twice or three times).
pub fn error_message(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// A hint for a command line clap refused because a shell expanded an unquoted glob
/// (`--data out/*.parquet` → `--data out/a.parquet out/b.parquet`): the unexpected argument
/// is an existing path, not a flag. `None` for every other parse error.
pub fn parse_error_hint(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    (!arg.starts_with('-') && std::path::Path::new(arg).exists()).then(|| {
        format!(
            "hint: {arg} is a file or folder given where no value was expected, as when the \
             shell expands an unquoted glob into several paths: quote the pattern (--data \
             'folder/*.parquet') so that verisample expands it, or give the folder"
        )
    })
}

pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Run a parsed command line.
///
/// Errors: [`UsageError`] (exit 2), pipeline errors (see [`exit_code`]), anything else (exit 1).
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Prepare(a) => prepare::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Run(a) => run::run_command(a, cli.quiet).map(|_| ()),
        Command::Verify(a) => verify::run(&a),
        Command::Check(a) => check::run(&a),
        Command::Merge(a) => merge::merge_command(a, cli.quiet).map(|_| ()),
        Command::Bench(a) => bench::run(&a, cli.quiet),
        Command::Doctor(a) => doctor::run(&a),
        Command::View(a) => view::run(&a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn error_message_keeps_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("config: {0}")]
        struct Config(#[source] std::io::Error);
        let io = std::io::Error::other("EOF while parsing");
        let err = anyhow::Error::new(Config(io)).context("loading the model from m");
        assert_eq!(
            error_message(&err),
            "loading the model from m: config: EOF while parsing"
        );
        let plain = anyhow::Error::new(std::io::Error::other("disk full")).context("writing o");
        assert_eq!(error_message(&plain), "writing o: disk full");
    }

    /// A negative number is a prediction or reference like any other (`--ref -5`, not only
    /// `--ref=-5`).
    #[test]
    fn check_takes_values_that_start_with_a_hyphen() {
        use clap::Parser;
        let cli =
            Cli::try_parse_from(["verisample", "check", "--pred", "-5", "--ref", "-5"]).unwrap();
        let Command::Check(a) = cli.command else {
            panic!("not check")
        };
        assert_eq!(
            (a.pred.as_str(), a.references),
            ("-5", vec!["-5".to_string()])
        );
    }

    #[test]
    fn an_unquoted_glob_gets_a_hint_other_parse_errors_do_not() {
        use clap::Parser;
        let tmp = tempfile::tempdir().unwrap();
        let [a, b] = ["a.parquet", "b.parquet"].map(|n| {
            let p = tmp.path().join(n);
            std::fs::write(&p, b"x").unwrap();
            p.display().to_string()
        });
        let err = Cli::try_parse_from(["verisample", "run", "--data", &a, &b]).unwrap_err();
        let hint = parse_error_hint(&err).expect("a hint");
        assert!(hint.starts_with(&format!("hint: {b} is a file")), "{hint}");
        let missing = tmp.path().join("c.parquet").display().to_string();
        let err = Cli::try_parse_from(["verisample", "run", "--data", &a, &missing]).unwrap_err();
        assert_eq!(parse_error_hint(&err), None, "not an existing path");
        let err = Cli::try_parse_from(["verisample", "run", "--nosuch"]).unwrap_err();
        assert_eq!(parse_error_hint(&err), None, "a misspelt flag");
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(&Ok(())), 0);
        assert_eq!(exit_code(&Err(usage("x"))), 2);
        assert_eq!(exit_code(&Err(anyhow::anyhow!("io"))), 1);
    }

    #[test]
    fn model_and_engine_setting_errors_exit_2_through_context_internal_errors_exit_1() {
        let kv = anyhow::Error::from(VlLoadError::Engine(EngineError::Config(
            "the KV cache of 900 GiB does not fit".into(),
        )))
        .context("loading the model from m");
        assert_eq!(error_exit_code(&kv), 2);
        let internal = anyhow::Error::from(VlLoadError::Engine(EngineError::Internal("x".into())))
            .context("loading the model from m");
        assert_eq!(error_exit_code(&internal), 1);
        let bounds = anyhow::Error::from(VlLoadError::Processor(
            verisample_models::ProcessorError::PixelBounds {
                min_pixels: 9408,
                max_pixels: 1,
            },
        ))
        .context("loading the model from m");
        assert_eq!(
            error_exit_code(&bounds),
            2,
            "--max-pixels below the checkpoint's min_pixels"
        );
        assert_eq!(error_exit_code(&anyhow::anyhow!("anything else")), 1);
        // A model folder the loader cannot use is the `--model` argument's problem, like a
        // missing model: every file's failure exits 2, not just some.
        let weights = anyhow::Error::from(VlLoadError::Model(
            verisample_models::LoadError::Weights("m: no model.safetensors".into()),
        ))
        .context("loading the model from m");
        assert_eq!(error_exit_code(&weights), 2);
    }
}
