//! The arguments of `verisample prepare` ([`PrepareArgs`], parsed by clap) and their
//! validation into the library's [`PrepareOptions`], before anything is read or written: the
//! same place and the same output-folder checks as `run`'s settings.

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};

use super::{canonical_lenient, check_writable, holds_run_output, input_root, SettingsError};
use crate::dataset::prepare::{PrepareOptions, PrepareSource};
use crate::dataset::shards::{is_valid_split_name, ShardOptions, MAX_ROWS_PER_GROUP};
use crate::family::{family_spec, is_valid_family_name};

fn invalid(msg: impl Into<String>) -> SettingsError {
    SettingsError::Prepare(msg.into())
}

/// Build an input dataset (HF parquet) from --labels, --jsonl (QA lines) or --parquet input.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").required(true).args(["labels", "jsonl", "parquet"])),
    long_about = "Build an input dataset in the Hugging Face parquet layout.\n\n\
Input, one of:\n  \
--labels FILE: a labels JSONL, one object per image with `file` (relative to --images) and \
`label` (the reference answer); other fields are kept as provenance columns. Every image gets \
the family's fixed question (built in for OrandCar, else --question).\n  \
--jsonl FILE: a JSONL of {\"image\", \"question\", \"answer\"} with `image` relative to the \
JSONL's folder; lines with the same image become one row; `answer` may be a list of \
references.\n  \
--parquet INPUT: any parquet file, folder or glob `run` reads, flat layouts included \
(`image, question, answer[s]`, `image, query, label`, …: columns detected or named by \
--image-column, --question-column, --answer-column); one row per input row.\n\n\
Output: OUT/data/<split>-00000-of-0000N.parquet with columns image{bytes,path} (bytes unchanged), \
qa[{question, answer, source = image sha256}], image_sha256, family and provenance columns; \
row groups of at most 100 rows.\n\n\
Each row passes `run`'s input check first: a row whose image does not decode is left out, and \
so is a question whose text or answer is blank or null (the image's other questions are kept), \
each named on stderr (file:line or file: row N, and the field) and counted; the exit status \
stays 0 as long as some row is written. With --parquet, so is a row the reader refuses (a null \
image or qa, an answer not UTF-8 or of another type than string), a family that cannot name a \
split, a stored image_sha256 that is not the image's (`run` drops it), and a question whose \
source is neither that hash nor the image's path. With --jsonl and --labels, so is a question whose \
text or reference is no text (a bool, an object, a fraction such as 2.5, which JSON does not keep as written). \
With --jsonl, so is a line without its `question` or `answer`, and the row of a \
line without `image` or whose image file is not there or leads out of its folder (by `..`, a link, \
or an absolute path without --images-root). A line that is not a JSON object ends the prepare \
(exit 1), as does every row being left out.\n\n\
A prepare that was killed leaves hidden staged shards in OUT/data; the next prepare of that split removes them.",
    after_help = "Examples:\n  \
verisample prepare --labels orand-car-a/labels.jsonl --family OrandCar --split train --out orand\n  \
verisample prepare --jsonl my/qa.jsonl --family MyBench --out my-input\n  \
verisample prepare --parquet chartqa/test.parquet --image-column img --family ChartQA --split test --out chartqa-qa"
)]
pub struct PrepareArgs {
    /// Labels JSONL (`file`, `label`, provenance fields).
    #[arg(long, value_name = "FILE")]
    pub labels: Option<PathBuf>,
    /// Folder that the labels' `file` paths are relative to [default: the labels file's folder].
    #[arg(long, value_name = "DIR", requires = "labels")]
    pub images: Option<PathBuf>,
    /// Generic QA JSONL (`image`, `question`, `answer`: a string or a list of references).
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
    /// A parquet file, folder or glob in any layout `run` reads (contract §2's, or flat).
    #[arg(long, value_name = "INPUT")]
    pub parquet: Option<String>,
    /// Image column of a flat --parquet input. [default: detected: image, img]
    #[arg(long, value_name = "COLUMN", requires = "parquet")]
    pub image_column: Option<String>,
    /// Question column of a flat --parquet input. [default: detected: question, query, prompt]
    #[arg(long, value_name = "COLUMN", requires = "parquet")]
    pub question_column: Option<String>,
    /// Answer column of a flat --parquet input (a string or a list of strings).
    /// [default: detected: answer, answers, label, ground_truth]
    #[arg(long, value_name = "COLUMN", requires = "parquet")]
    pub answer_column: Option<String>,
    /// Read images given by path (absolute ones included, as `datasets`' to_parquet writes
    /// them) from under DIR instead of the input's folder; paths leading out of DIR are refused.
    #[arg(long, value_name = "DIR")]
    pub images_root: Option<PathBuf>,
    /// Benchmark family written to the `family` column (required with --labels).
    #[arg(long, value_name = "FAMILY")]
    pub family: Option<String>,
    /// The question for every image with --labels [default: the family's built-in question].
    #[arg(long, value_name = "TEXT", requires = "labels")]
    pub question: Option<String>,
    /// Names the output split [default: train]; with --labels, also keeps only the lines
    /// whose `split` field is this value.
    #[arg(long, value_name = "NAME")]
    pub split: Option<String>,
    /// Output dataset folder.
    #[arg(long, value_name = "OUT")]
    pub out: PathBuf,
    /// Start a new shard once one reaches this many MiB.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_shard_mib: u64,
    /// Replace the files of this split already in OUT/data.
    #[arg(long)]
    pub force: bool,
}

/// Refuse an `--out` that `prepare` would spoil or cannot write: a file, a folder this
/// process cannot write (or create: [`crate::settings::check_writable`]), the folder the
/// images (or the JSONL) are read from or one holding it, the output of a `verisample run`
/// (its splits and card would mix with an input dataset), or a folder already holding files
/// of this split (`data/<split>-*.parquet`, replaced only with `--force`). Other splits in
/// `data/` are left alone, so `prepare --split train` and `--split val` can fill one dataset.
pub fn check_out(out: &Path, source: &Path, split: &str, force: bool) -> Result<(), SettingsError> {
    let (out_c, source_c) = (canonical_lenient(out), canonical_lenient(source));
    if source_c.starts_with(&out_c) {
        return Err(invalid(format!(
            "--out {}: the images are read from {}; write the dataset into a folder of its own",
            out.display(),
            source.display()
        )));
    }
    if out.exists() && !out.is_dir() {
        return Err(invalid(format!(
            "--out {}: exists and is not a folder",
            out.display()
        )));
    }
    // `run`'s and `merge`'s check (and message), before the lock file is created in OUT.
    check_writable(out)?;
    if holds_run_output(out) {
        return Err(invalid(format!(
            "--out {} holds the output of a `verisample run`; prepare writes an input dataset: choose another folder",
            out.display()
        )));
    }
    check_split_free(out, split, force)
}

/// Refuse an `--out` whose `data/` already holds files of `split` (without `--force`); checked
/// again once `prepare` holds OUT's lock, so that of two prepares of one split into one folder
/// the second is refused rather than replacing the first's shards.
pub fn check_split_free(out: &Path, split: &str, force: bool) -> Result<(), SettingsError> {
    let existing: Vec<String> = std::fs::read_dir(out.join(crate::out_files::SPLITS_DIR))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("{split}-")) && n.ends_with(".parquet"))
        .collect();
    if !force && !existing.is_empty() {
        return Err(invalid(format!(
            "--out {}: data/ already holds split {split} ({}); add --force to replace it, or choose another --out or --split",
            out.display(),
            existing.join(", ")
        )));
    }
    Ok(())
}

/// Validate `prepare` arguments into options and the warnings to show (a `--question` that
/// the family's task purity would drop), touching nothing on disk but existence checks and
/// the probe file of `--out`'s writability check.
///
/// Errors: [`SettingsError::Prepare`] naming the bad argument, or another [`SettingsError`]
/// for an `--out` that cannot be written.
pub fn prepare_options(a: PrepareArgs) -> Result<(PrepareOptions, Vec<String>), SettingsError> {
    let mut warnings = Vec::new();
    if let Some(f) = &a.family {
        if !is_valid_family_name(f) {
            return Err(invalid(format!(
                "--family {f:?}: use {} (it becomes part of split names)",
                crate::family::FAMILY_NAME_RULE
            )));
        }
    }
    if a.max_shard_mib == 0 {
        return Err(invalid("--max-shard-mib must be at least 1"));
    }
    let split = a.split.clone().unwrap_or_else(|| "train".to_string());
    if !is_valid_split_name(&split) {
        return Err(invalid(format!(
            "--split {split:?}: a split name must match ^\\w+(\\.\\w+)*$"
        )));
    }
    let source = match (a.labels, a.jsonl, a.parquet) {
        (None, None, Some(input)) => {
            crate::dataset::reader::resolve_inputs(&input)
                .map_err(|e| invalid(format!("--parquet {e}")))?;
            PrepareSource::Parquet {
                input,
                columns: crate::dataset::layout::ColumnFlags {
                    image: a.image_column,
                    question: a.question_column,
                    answer: a.answer_column,
                },
            }
        }
        (Some(labels), None, None) => {
            if !labels.is_file() {
                return Err(invalid(format!(
                    "--labels {}: no such file",
                    labels.display()
                )));
            }
            let Some(family) = a.family.as_deref() else {
                return Err(invalid("--labels needs --family (e.g. --family OrandCar)"));
            };
            let question = match (a.question, family_spec(family).and_then(|f| f.question)) {
                (Some(q), _) if q.trim().is_empty() => return Err(invalid("--question is empty")),
                (Some(q), Some(fixed)) if q != fixed => {
                    warnings.push(format!(
                        "family {family} asks its own fixed question (contract §4); `run` \
                         drops every item with another question as off_task: leave out \
                         --question, or choose another --family"
                    ));
                    q
                }
                (Some(q), _) => q,
                (None, Some(q)) => q.to_string(),
                (None, None) => {
                    return Err(invalid(format!(
                        "family {family} has no built-in question: pass --question"
                    )))
                }
            };
            let images = match a.images {
                Some(d) => d,
                None => labels
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or_else(|| PathBuf::from("."), PathBuf::from),
            };
            if !images.is_dir() {
                return Err(invalid(format!(
                    "--images {}: no such folder",
                    images.display()
                )));
            }
            PrepareSource::Labels {
                labels,
                images,
                question,
                split_filter: a.split,
            }
        }
        (None, Some(jsonl), None) => {
            if !jsonl.is_file() {
                return Err(invalid(format!(
                    "--jsonl {}: no such file",
                    jsonl.display()
                )));
            }
            PrepareSource::QaJsonl { jsonl }
        }
        _ => {
            return Err(invalid(
                "give exactly one of --labels, --jsonl or --parquet",
            ))
        }
    };
    let source_folder = match &source {
        PrepareSource::Labels { images, .. } => images.clone(),
        PrepareSource::QaJsonl { jsonl } => jsonl
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), PathBuf::from),
        PrepareSource::Parquet { input, .. } => input_root(Path::new(input))
            .ok()
            .flatten()
            .unwrap_or_else(|| PathBuf::from(input)),
    };
    check_out(&a.out, &source_folder, &split, a.force)?;
    // A parquet folder or glob read again later (`prepare` or `run --data` of the same spec)
    // would take the prepared files inside it as input too.
    if let PrepareSource::Parquet { input, .. } = &source {
        let out_c = canonical_lenient(&a.out);
        if !Path::new(input).is_file() && out_c.starts_with(canonical_lenient(&source_folder)) {
            return Err(invalid(format!(
                "--out {} is inside the input {input}: reading that input again would read the \
                 prepared files too; write the dataset into a folder outside it",
                a.out.display()
            )));
        }
    }
    let shard = ShardOptions {
        max_shard_bytes: a.max_shard_mib.saturating_mul(1024 * 1024),
        rows_per_group: MAX_ROWS_PER_GROUP,
    };
    Ok((
        PrepareOptions {
            source,
            family: a.family,
            out: a.out,
            split,
            shard,
            images_root: a.images_root,
        },
        warnings,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::dataset::prepare::{PrepareOptions, PrepareSource};
    use clap::Parser;

    /// `verisample prepare ARGS` parsed and validated into options.
    fn parse<S: AsRef<str>>(args: &[S]) -> anyhow::Result<PrepareOptions> {
        let argv = ["verisample", "prepare"]
            .into_iter()
            .chain(args.iter().map(AsRef::as_ref));
        match Cli::try_parse_from(argv)?.command {
            Command::Prepare(a) => Ok(prepare_options(a).map(|(o, _)| o)?),
            _ => unreachable!(),
        }
    }

    #[test]
    fn prepare_validation() {
        let dir = tempfile::tempdir().unwrap();
        let labels = dir.path().join("labels.jsonl");
        std::fs::write(&labels, "").unwrap();
        let l = labels.to_str().unwrap();
        let ok = parse(&[
            "--labels", l, "--family", "OrandCar", "--split", "val", "--out", "o",
        ])
        .unwrap();
        assert_eq!(ok.split, "val");
        match ok.source {
            PrepareSource::Labels {
                question,
                split_filter,
                ..
            } => {
                assert_eq!(question, crate::family::ORAND_CAR_QUESTION);
                assert_eq!(split_filter.as_deref(), Some("val"));
            }
            other => panic!("{other:?}"),
        }
        for (args, want) in [
            (vec!["--labels", l, "--out", "o"], "needs --family"),
            (
                vec!["--labels", l, "--family", "Other", "--out", "o"],
                "no built-in question",
            ),
            (
                vec!["--labels", l, "--family", "Or-and", "--out", "o"],
                "--family",
            ),
            (
                vec![
                    "--labels",
                    "/nonexistent.jsonl",
                    "--family",
                    "OrandCar",
                    "--out",
                    "o",
                ],
                "no such file",
            ),
            (
                vec![
                    "--labels", l, "--family", "OrandCar", "--split", "a b", "--out", "o",
                ],
                "split name",
            ),
            (
                vec!["--labels", l, "--jsonl", l, "--out", "o"],
                "cannot be used with",
            ),
        ] {
            let e = parse(&args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn prepare_out_inside_a_parquet_input_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir(&input).unwrap();
        std::fs::write(input.join("a.parquet"), b"rows").unwrap();
        let inside = input.join("prepared");
        let (folder, file, out) = (
            input.to_str().unwrap(),
            input.join("a.parquet"),
            inside.to_str().unwrap(),
        );
        let err = parse(&["--parquet", folder, "--out", out]).unwrap_err();
        assert!(err.to_string().contains("is inside the input"), "{err}");
        assert!(matches!(
            err.downcast_ref::<SettingsError>(),
            Some(SettingsError::Prepare(_))
        ));
        // A single file is read alone: a folder beside it is no harm.
        parse(&["--parquet", file.to_str().unwrap(), "--out", out]).unwrap();
        let outside = dir.path().join("prepared");
        parse(&["--parquet", folder, "--out", outside.to_str().unwrap()]).unwrap();
    }

    #[test]
    fn prepare_refuses_an_out_it_would_spoil() {
        let dir = tempfile::tempdir().unwrap();
        let labels = dir.path().join("labels.jsonl");
        std::fs::write(&labels, "").unwrap();
        let l = labels.to_str().unwrap();
        let out = dir.path().join("ds");
        let o = out.to_str().unwrap();
        let args = |split: &'static str, o: &str| {
            vec![
                "--labels".to_string(),
                l.to_string(),
                "--family".into(),
                "OrandCar".into(),
                "--split".into(),
                split.into(),
                "--out".into(),
                o.to_string(),
            ]
        };
        // A file is not a folder.
        let e = parse(&args("val", l)).unwrap_err().to_string();
        assert!(e.contains("not a folder"), "{e}");
        // This split's shards already there: refused, --force replaces them; another split
        // of the same dataset is fine.
        std::fs::create_dir_all(out.join("data")).unwrap();
        std::fs::write(out.join("data/val-00000-of-00001.parquet"), "mine").unwrap();
        let e = parse(&args("val", o)).unwrap_err().to_string();
        assert!(e.contains("already holds split val"), "{e}");
        let mut forced = args("val", o);
        forced.push("--force".into());
        assert!(parse(&forced).is_ok());
        assert!(parse(&args("train", o)).is_ok());
        // Nor the folder the images are read from (here the labels' folder).
        let e = parse(&args("val", dir.path().to_str().unwrap()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the images are read from"), "{e}");
        // The output of a run is not an input dataset.
        std::fs::write(out.join("journal.bin"), "").unwrap();
        let e = parse(&args("train", o)).unwrap_err().to_string();
        assert!(e.contains("output of a `verisample run`"), "{e}");
    }
}
