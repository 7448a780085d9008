//! `verisample view OUT`: browse an output folder's rows in a local, read-only web page.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use crate::view::{RowsError, ViewError, Viewer};

/// Browse the rows of an output folder in a local, read-only web page.
#[derive(Debug, Args)]
#[command(
    long_about = "Browse the rows of an output folder in a local, read-only web page: per row the \
image, each question with its reference, the model's answer and reasoning, how it was accepted or \
why it was rejected, the judge's verdict and raw text, clean_meta and any other column; filters \
(split, family, reason, verdict, accepted_by), text search and pages, kept in the page's address \
so that a link reproduces a view.\n\nThe server listens on 127.0.0.1 only and prints its address \
on stdout; it serves the page, its rows and their images, never another file. A page reads only \
the row groups it shows (images only for the rows shown), so a large output opens at once; a \
filter or a search reads the text columns until the page is full. Ctrl-C stops it.",
    after_help = "Example:\n  verisample view verisample-out\n  verisample view verisample-out --port 0   # any free port"
)]
pub struct ViewArgs {
    /// Output folder written by `run` or `merge`.
    pub out: PathBuf,
    /// The port on 127.0.0.1; 0 takes a free one.
    #[arg(long, value_name = "N", default_value_t = 8000)]
    pub port: u16,
}

/// Open `a.out`, print the address and serve until the process stops.
///
/// Errors: a folder that is not an output (usage, exit 2), an unreadable split footer or a
/// port that cannot be bound (exit 1).
pub(super) fn run(a: &ViewArgs) -> anyhow::Result<()> {
    let viewer = Viewer::open(&a.out, a.port).map_err(|e| match e {
        ViewError::Rows(e @ RowsError::NotOutput { .. }) => super::usage(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "view: {} (Ctrl-C stops)", viewer.url())
        .and_then(|()| stdout.flush())
        .context("writing the address to stdout")?;
    drop(stdout);
    viewer.serve().context("serving the page")?;
    Ok(())
}
