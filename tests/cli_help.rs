//! One convention for every subcommand's flags, read from the real `--help` of each: a value
//! name says what kind of value a flag takes and the same kind has one name everywhere; an
//! on/off switch is `--name <SWITCH>` taking `on`/`off` (no `--no-…` flags); `--family` is
//! always `<FAMILY>`; the commands that print a report or summary take `--json`.

use std::collections::BTreeMap;
use std::process::Command;

const COMMANDS: [&str; 9] = [
    "run", "prepare", "inspect", "verify", "check", "merge", "bench", "doctor", "view",
];

/// The value names in use, each for one kind of value.
const VALUE_NAMES: [&str; 22] = [
    "N",             // an integer
    "X",             // a decimal number
    "SWITCH",        // on | off
    "KEEP_OR_DROP",  // --input-columns: keep | drop
    "MODE",          // --progress: bar | jsonl | none
    "DTYPE",         // f32 | bf16 | f16
    "DEVICE",        // cpu | cuda:N | metal
    "KERNELS",       // native | portable | flash
    "FAMILY",        // a family name
    "NAME",          // another name (split, dataset config, verifier)
    "[FAMILY=]NAME", // a verifier override
    "KEY=VALUE",     // a card metadata entry
    "TEXT",          // free text (a question, a prediction, a reference)
    "COLUMN",        // a parquet column
    "DIR",           // a folder
    "FILE",          // a file
    "FILE.toml",     // the job file
    "INPUT",         // a parquet file, folder or glob
    "INPUT_OR_ID",   // … or a dataset id of the local hub cache
    "DIR_OR_ID",     // a model folder or a model id of the local hub cache
    "OUT",           // an output folder
    "I/N",           // a shard
];

/// `(flag, value name or "")` of every long flag in `verisample <command> --help`.
fn flags(command: &str) -> Vec<(String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_verisample"))
        .args([command, "--help"])
        .output()
        .expect("the verisample binary");
    assert!(out.status.success(), "{command} --help");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-")
                .filter(|r| !r.starts_with('-'))
                .map_or(l, |r| r.split_once(", ").map_or(l, |(_, rest)| rest));
            let flag = l.strip_prefix("--")?.split([' ', '\t']).next()?.to_string();
            if flag.is_empty() || !flag.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                return None;
            }
            let value = l
                .split_once(" <")
                .and_then(|(_, v)| v.split_once('>'))
                .map_or(String::new(), |(v, _)| v.to_string());
            Some((flag, value))
        })
        .collect()
}

#[test]
fn every_subcommand_follows_one_flag_convention() {
    let mut family_names = BTreeMap::new();
    for command in COMMANDS {
        let flags = flags(command);
        assert!(flags.len() > 2, "{command}: flags not found in --help");
        for (flag, value) in &flags {
            assert!(
                !flag.starts_with("no-"),
                "{command} --{flag}: use --{} <SWITCH>",
                &flag[3..]
            );
            if !value.is_empty() {
                assert!(
                    VALUE_NAMES.contains(&value.as_str()),
                    "{command} --{flag} <{value}>: not one of the convention's value names"
                );
            }
            if flag == "family" {
                family_names.insert(command, value.clone());
            }
        }
    }
    assert!(family_names.len() >= 3, "{family_names:?}");
    assert!(
        family_names.values().all(|v| v == "FAMILY"),
        "{family_names:?}"
    );
    // Every on/off switch of `run` and of the others shows the same name.
    for (command, flag) in [
        ("run", "think"),
        ("run", "judge"),
        ("run", "number-guard"),
        ("run", "dedup"),
        ("run", "generation-config"),
        ("verify", "number-guard"),
        ("bench", "prefix-caching"),
    ] {
        let value = flags(command)
            .into_iter()
            .find(|(f, _)| f == flag)
            .unwrap_or_else(|| panic!("{command} has no --{flag}"))
            .1;
        assert_eq!(value, "SWITCH", "{command} --{flag}");
    }
}

#[test]
fn commands_with_a_report_take_json() {
    for command in ["run", "merge", "verify", "check", "bench", "doctor"] {
        assert!(
            flags(command)
                .iter()
                .any(|(f, v)| f == "json" && v.is_empty()),
            "{command} has no --json"
        );
    }
}

/// A usage error of our own reads as clap's do: `error: …` on stderr, exit 2.
#[test]
fn usage_errors_start_with_error() {
    for args in [
        &["check", "--pred", "1", "--ref", "1", "--verifier", "bogus"][..],
        &["bench", "--images", "/nonexistent/verisample-images"][..],
        &["run", "--max-batch", "0"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_verisample"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}
