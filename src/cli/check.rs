//! `verisample check`: explain one string decision.

use clap::Args;

use super::UsageError;
use crate::check::{check_with, CheckReport};
use crate::verifiers::{Verifier, VerifierRegistry};

/// Check one prediction against one or more references (--ref) with a string verifier.
#[derive(Debug, Args)]
#[command(
    long_about = "Explain one string decision: the reasoning split off the prediction, the normalised \
forms, each candidate tried (whole, first line, first paragraph), which matched, and whether the \
item would go to the judge. It decides as `run` does: when every reference is blank, `run`'s input \
check reports the item in errors.jsonl and never generates it, and `check` says so (NOT RUN, \
`input_error` in JSON); a comparison the verifier ignores (an unusable reference) is not called \
matched. Output is text, or one JSON object with --json.",
    after_help = "Examples:\n  verisample check --family OrandCar --pred $'11850\\n\\nThe amount is' --ref 11850\n  \
verisample check --verifier exact --pred Black. --ref white --ref black"
)]
pub struct CheckArgs {
    /// Family whose verifier is used [default: Default, the family of a row without one, as
    /// `run`]; ignored with `--verifier`.
    #[arg(long, value_name = "FAMILY")]
    pub family: Option<String>,
    /// The model's output (a `<think>…</think>` block is split off first).
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub pred: String,
    /// The reference answer; repeat for several references (a list-valued answer: accepted
    /// when any matches, `anls` scores the best; the number guard vetoes only when every
    /// reference's digits differ).
    #[arg(
        long = "ref",
        required = true,
        value_name = "TEXT",
        allow_hyphen_values = true
    )]
    pub references: Vec<String>,
    /// Use this verifier instead of the family's (`alnum`, `exact`, `mc_letter`, `numeric[:tol]`,
    /// `relaxed`, `anls[:tau]`).
    #[arg(long, value_name = "NAME")]
    pub verifier: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `verisample check`: explain one string decision.
///
/// Errors: an unknown `--verifier` specification (usage error).
pub(super) fn run(a: &CheckArgs) -> anyhow::Result<()> {
    let (family, verifier): (Option<&str>, Verifier) = match &a.verifier {
        Some(spec) => {
            if let Some(family) = &a.family {
                eprintln!("note: --verifier {spec} is used, not family {family:?}'s verifier");
            }
            let v = spec
                .parse()
                .map_err(|e: crate::verifiers::VerifierError| UsageError(e.to_string()))?;
            (None, v)
        }
        None => {
            let family = a.family.as_deref().unwrap_or(crate::family::DEFAULT_FAMILY);
            let registry = VerifierRegistry::default();
            if a.family.is_some() && !registry.by_family.contains_key(family) {
                eprintln!(
                    "note: no verifier is registered for family {family:?}: using the default \
                     ({}), as `run` would; pass --verifier to choose one",
                    registry.default
                );
            }
            (Some(family), registry.for_family(Some(family)))
        }
    };
    let references: Vec<&str> = a.references.iter().map(String::as_str).collect();
    let report: CheckReport = check_with(family, &a.pred, &references, verifier);
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_human());
    }
    Ok(())
}
