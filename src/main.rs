//! The `verisample` binary: parse arguments, set up logging, run, map the result to an exit
//! code (0 ok, 1 error, 2 usage, 130 interrupted).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use verisample::cli::{dispatch, error_message, exit_code, Cli, UsageError};

/// Log to stderr. `RUST_LOG` wins when set; else -q → warn, default info, -v debug, -vv trace.
fn init_tracing(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose, cli.quiet);
    let result = dispatch(cli);
    if let Err(e) = &result {
        if e.is::<UsageError>() {
            eprintln!("{e}");
        } else {
            eprintln!("error: {}", error_message(e));
        }
    }
    ExitCode::from(exit_code(&result))
}
