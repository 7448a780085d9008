//! The `verisample` binary: parse arguments, set up logging, run, map the result to an exit
//! code (0 ok, 1 error, 2 usage, 130 / 143 stopped by SIGINT / SIGTERM).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use verisample::cli::{dispatch, error_message, exit_code, parse_error_hint, Cli, UsageError};

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

/// candle asks for its CPU thread count on every matmul and, unless `RAYON_NUM_THREADS` is
/// set, reads `/proc/cpuinfo` for it each time (about 1,900 opens in a one-second run). Ask
/// once: pin the variable to candle's answer, and size rayon's global pool as rayon would
/// have by default (the available parallelism), so other parallel work is unchanged.
fn pin_cpu_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let candle_threads = candle_core::utils::get_num_threads();
    let rayon_threads = std::thread::available_parallelism().map_or(1, usize::from);
    // First thing in `main`, before any other thread exists to read the environment.
    std::env::set_var("RAYON_NUM_THREADS", candle_threads.to_string());
    // Fails only when a pool exists already, which then keeps its size.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(rayon_threads)
        .build_global();
}

fn main() -> ExitCode {
    pin_cpu_threads();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // As `Cli::parse` (help and version exit 0, errors 2), with a hint after the error.
            let _ = e.print();
            if let Some(hint) = parse_error_hint(&e) {
                eprintln!("\n{hint}");
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    init_tracing(cli.verbose, cli.quiet);
    let result = dispatch(cli);
    if let Err(e) = &result {
        if e.is::<UsageError>() {
            // clap's own usage errors start with `error:` too: one convention for both.
            eprintln!("error: {e}");
        } else {
            eprintln!("error: {}", error_message(e));
        }
    }
    ExitCode::from(exit_code(&result))
}
