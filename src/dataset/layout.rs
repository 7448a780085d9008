//! Which input columns hold the image, the question and the reference answer.
//!
//! Contract §2's own layout has an `image` column and a `qa` list of {question, answer}. Most
//! visual-QA datasets on the Hub are flat instead: one question per row, in columns such as
//! `image, question, answer` (or `answers: list<string>`: DocVQA, TextVQA, InfoVQA) or
//! `image, query, label` (ChartQA). [`Layout::resolve`] picks the layout of a file from its
//! column names:
//!
//! - with none of `--image-column`, `--question-column`, `--answer-column` given and a `qa`
//!   column present: the nested layout ([`Layout::Nested`]), which needs an `image` column too;
//! - otherwise the flat layout ([`Layout::Flat`]): each role takes the column named by its
//!   flag, else the one column of the file among the role's common names
//!   ([`IMAGE_NAMES`], [`QUESTION_NAMES`], [`ANSWER_NAMES`]). A role with none of them, or
//!   with several, is an error listing the columns found, so the user can name the column.

use std::path::{Path, PathBuf};

use arrow::datatypes::{DataType, Schema};
use serde::{Deserialize, Serialize};

use crate::record::SourceColumns;

/// Common names of the image column, in the order tried: HF `Image()` feature columns.
pub const IMAGE_NAMES: [&str; 2] = ["image", "img"];
/// Common names of the question column (`query`: ChartQA; `prompt`: instruction sets).
pub const QUESTION_NAMES: [&str; 3] = ["question", "query", "prompt"];
/// Common names of the reference-answer column (`answers`: DocVQA / TextVQA / InfoVQA lists;
/// `label`: ChartQA; `ground_truth`: OCR benchmarks).
pub const ANSWER_NAMES: [&str; 4] = ["answer", "answers", "label", "ground_truth"];

/// The column names given by the user (`--image-column`, `--question-column`,
/// `--answer-column`, or the same keys in the TOML file); `None` = detect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnFlags {
    /// The image column (HF `Image()` struct{bytes, path}).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The question column (string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The reference-answer column (string, or list of strings: several references).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl ColumnFlags {
    /// Whether no column was named.
    pub fn is_empty(&self) -> bool {
        self.image.is_none() && self.question.is_none() && self.answer.is_none()
    }
}

/// How the input reader decodes rows: the column flags and the folder that image paths may
/// point into besides the dataset's own (`--images-root`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOptions {
    /// Column mapping (see [`Layout::resolve`]).
    #[serde(default, skip_serializing_if = "ColumnFlags::is_empty")]
    pub columns: ColumnFlags,
    /// `--images-root DIR`: image `path`s (absolute ones included) are resolved under this
    /// folder instead of the dataset's, and refused when they lead outside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_root: Option<PathBuf>,
    /// The hub-cache dataset `--data OWNER/NAME` resolved to (repo, revision, config, split):
    /// recorded in `run.json` and the fingerprint; the reader reads the input spec it
    /// resolved to (see [`super::hub`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<super::hub::HubDataset>,
    /// `--family` overrides the input's `family` column: the reader leaves it out (every
    /// row's `family` is `None`), so a column of another type is no error. Not recorded: the
    /// flag itself is part of the settings.
    #[serde(skip)]
    pub skip_family_column: bool,
}

impl ReadOptions {
    /// Whether nothing is set (the default reading of contract §2).
    pub fn is_default(&self) -> bool {
        *self == ReadOptions::default()
    }
}

/// The Arrow schema of a parquet file, from its footer (a decoder panic contained); `None`
/// when the footer cannot be read (the reader then reports the file).
pub fn file_schema(path: &Path) -> Option<arrow::datatypes::SchemaRef> {
    let file = std::fs::File::open(path).ok()?;
    let meta = super::isolate::isolate(|| {
        parquet::arrow::arrow_reader::ArrowReaderMetadata::load(
            &file,
            parquet::arrow::arrow_reader::ArrowReaderOptions::new(),
        )
    })
    .ok()?
    .ok()?;
    Some(meta.schema().clone())
}

/// The top-level column names of a parquet file, from its footer; `None` when the footer
/// cannot be read (the reader then reports the file).
pub fn file_columns(path: &Path) -> Option<Vec<String>> {
    Some(
        file_schema(path)?
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    )
}

/// The layout of one input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Contract §2: `image` + `qa` list of {question, answer, …}; one row, one or more items.
    Nested,
    /// One item per row, in these columns.
    Flat(SourceColumns),
}

/// A layout that cannot be resolved from a file's columns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}; columns found: {}", found.join(", "))]
pub struct LayoutError {
    /// The field the reader's row errors name: `qa` when no flag was given (the file was
    /// expected in contract §2's layout), else the column a flag names or the role's name.
    pub field: String,
    /// What is missing or ambiguous, with the flag that settles it.
    pub message: String,
    /// The file's column names, in file order.
    pub found: Vec<String>,
}

impl Layout {
    /// The layout of a file with schema `schema` under `flags`: [`Layout::resolve`] of its
    /// top-level column names.
    ///
    /// Errors: as [`Layout::resolve`].
    pub fn of_schema(schema: &Schema, flags: &ColumnFlags) -> Result<Layout, LayoutError> {
        let found: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        Layout::resolve(&found, flags)
    }

    /// The layout of a file with columns `found` under `flags` (see the module docs).
    ///
    /// Errors: a named column that is absent; a role with no column among its common names,
    /// or with several of them (ambiguous); without flags, a `qa` column with no `image`
    /// column (field `image`); a column the layout reads (or `image_sha256`, `family`) that
    /// the file holds more than once (the reader would silently take the first).
    pub fn resolve(found: &[String], flags: &ColumnFlags) -> Result<Layout, LayoutError> {
        let layout = Self::resolve_names(found, flags)?;
        let read: Vec<&str> = match &layout {
            Layout::Nested => vec!["image", "qa"],
            Layout::Flat(c) => vec![&c.image, &c.question, &c.answer],
        };
        let count = |name: &str| found.iter().filter(|c| *c == name).count();
        let twice = read
            .into_iter()
            .chain(["image_sha256", "family"])
            .find(|n| count(n) > 1);
        match twice {
            Some(name) => Err(LayoutError {
                field: name.to_string(),
                message: format!(
                    "column `{name}` appears {} times; drop or rename all but one",
                    count(name)
                ),
                found: found.to_vec(),
            }),
            None => Ok(layout),
        }
    }

    /// [`Layout::resolve`] by the column names alone, before the check for repeated ones.
    fn resolve_names(found: &[String], flags: &ColumnFlags) -> Result<Layout, LayoutError> {
        if flags.is_empty() && found.iter().any(|c| c == "qa") {
            if found.iter().any(|c| c == "image") {
                return Ok(Layout::Nested);
            }
            return Err(LayoutError {
                field: "image".into(),
                message:
                    "missing column `image` (contract §2's layout: `image` struct{bytes, path} \
                          next to `qa`)"
                        .into(),
                found: found.to_vec(),
            });
        }
        let err = |field: &str, message: String| {
            // Without flags the file was expected in contract §2's layout: say so first.
            let (field, message) = if flags.is_empty() {
                ("qa", format!("missing column `qa`, and {message}"))
            } else {
                (field, message)
            };
            LayoutError {
                field: field.to_string(),
                message,
                found: found.to_vec(),
            }
        };
        let pick = |flag: &Option<String>, names: &[&str], role: &str| match flag {
            Some(name) if found.contains(name) => Ok(name.clone()),
            Some(name) => Err(err(
                name,
                format!("--{role}-column `{name}` is not a column"),
            )),
            None => {
                let hits: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|n| found.iter().any(|c| c == n))
                    .collect();
                match hits.as_slice() {
                    [one] => Ok((*one).to_string()),
                    [] => Err(err(
                        role,
                        format!(
                            "no {role} column (looked for {}); name it with --{role}-column",
                            names.join(", ")
                        ),
                    )),
                    many => Err(err(
                        role,
                        format!(
                            "ambiguous {role} column: {} all present; name one with --{role}-column",
                            many.join(", ")
                        ),
                    )),
                }
            }
        };
        Ok(Layout::Flat(SourceColumns {
            image: pick(&flags.image, &IMAGE_NAMES, "image")?,
            question: pick(&flags.question, &QUESTION_NAMES, "question")?,
            answer: pick(&flags.answer, &ANSWER_NAMES, "answer")?,
        }))
    }
}

/// A column that cannot hold its values in any row, from the file's types alone: the reader
/// then reports the file once (naming `field`), not each of its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnProblem {
    /// The field the per-row errors would name (`qa`, `image.bytes`, `question`, …).
    pub field: String,
    /// The type found and the types wanted.
    pub message: String,
}

/// Whether a value of type `t` reads as bytes (`values::get_bytes`); a column of type `Null`
/// reads as null in every row, which is no type error.
fn reads_as_bytes(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Null | Binary | LargeBinary | BinaryView | FixedSizeBinary(_)
    )
}

/// Whether a value of type `t` reads as a string (`values::get_string`: string types,
/// binary holding UTF-8, a dictionary of these).
fn reads_as_text(t: &DataType) -> bool {
    use DataType::*;
    match t {
        Utf8 | LargeUtf8 | Utf8View => true,
        Dictionary(_, values) => reads_as_text(values),
        t => reads_as_bytes(t),
    }
}

/// Whether a value of type `t` reads as a reference answer (`reader::decode_answer`: a string,
/// an integer or a float, or a list of these).
fn reads_as_answer(t: &DataType) -> bool {
    let one = |t: &DataType| t.is_integer() || t.is_floating() || reads_as_text(t);
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            one(f.data_type())
        }
        t => one(t),
    }
}

/// Want-texts of the checks, as the per-row errors word them.
const WANT_TEXT: &str = "want a string";
const WANT_ANSWER: &str = "want a string or a list of strings";

fn problem(field: &str, message: String) -> Option<ColumnProblem> {
    Some(ColumnProblem {
        field: field.to_string(),
        message,
    })
}

/// Why the image column `name` of type `t` cannot hold an image: not a struct with `bytes`
/// (binary) and/or `path` (string).
fn image_problem(name: &str, t: &DataType) -> Option<ColumnProblem> {
    let DataType::Struct(fields) = t else {
        return (t != &DataType::Null).then(|| ColumnProblem {
            field: name.to_string(),
            message: format!("column `{name}` is {t}, want struct{{bytes, path}}"),
        });
    };
    let bytes = fields.find("bytes").map(|(_, f)| f.data_type());
    let path = fields.find("path").map(|(_, f)| f.data_type());
    match (bytes, path) {
        (None, None) => problem(
            name,
            format!("column `{name}` is a struct with neither `bytes` nor `path` ({t})"),
        ),
        (Some(b), _) if !reads_as_bytes(b) => problem(
            &format!("{name}.bytes"),
            format!("column `{name}`: its `bytes` are {b}, want binary"),
        ),
        (_, Some(p)) if !reads_as_text(p) => problem(
            &format!("{name}.path"),
            format!("column `{name}`: its `path` is {p}, {WANT_TEXT}"),
        ),
        _ => None,
    }
}

/// Why a column of the file (`schema`) that `layout` reads cannot hold its values, from its
/// type alone (see [`ColumnProblem`]): the image column, not a struct{bytes: binary, path:
/// string}; in contract §2's layout the `qa` column, not a list of structs with a string
/// `question` and an `answer`; in a flat layout the question column, not a string, or the
/// answer column, not a string, number or list of them. The types accepted are those the
/// row decoders read ([`super::values`]); a column of type `Null` (every value null) passes,
/// its rows are reported as blank.
pub fn column_type_problem(schema: &Schema, layout: &Layout) -> Option<ColumnProblem> {
    let type_of = |name: &str| schema.field_with_name(name).ok().map(|f| f.data_type());
    let (image, texts): (&str, Vec<(&str, &str, bool)>) = match layout {
        Layout::Nested => ("image", Vec::new()),
        Layout::Flat(c) => (
            c.image.as_str(),
            vec![
                (c.question.as_str(), WANT_TEXT, false),
                (c.answer.as_str(), WANT_ANSWER, true),
            ],
        ),
    };
    if let Some(p) = type_of(image).and_then(|t| image_problem(image, t)) {
        return Some(p);
    }
    if matches!(layout, Layout::Nested) {
        return qa_shape_problem(schema);
    }
    for (name, want, answer) in texts {
        let Some(t) = type_of(name) else { continue };
        let ok = if answer {
            reads_as_answer(t)
        } else {
            reads_as_text(t)
        };
        if !ok {
            return problem(name, format!("column `{name}` is {t}, {want}"));
        }
    }
    None
}

/// Why an optional provenance column (`image_sha256`, `family`: contract §2, strings) of the file
/// (`schema`) cannot hold its values, from its type alone (as [`column_type_problem`]; type
/// `Null` passes). `run` reports such a column as an error on each row, except a `family`
/// column that `--family` replaces (not read).
pub fn provenance_type_problem(schema: &Schema) -> Option<ColumnProblem> {
    ["image_sha256", "family"].into_iter().find_map(|name| {
        let t = schema.field_with_name(name).ok()?.data_type();
        (t != &DataType::Null && !reads_as_text(t)).then(|| ColumnProblem {
            field: name.to_string(),
            message: format!("column `{name}` is {t}, {WANT_TEXT}"),
        })
    })
}

/// Why the `qa` column of a file in contract §2's layout cannot hold questions, from its type
/// alone: not a list (`list`, `large_list`, `fixed_size_list`) of structs with a `question`
/// (string) and an `answer` (string, number or list of them).
fn qa_shape_problem(schema: &Schema) -> Option<ColumnProblem> {
    const WANT: &str = "want list<struct{question, answer, …}>";
    let field = schema.field_with_name("qa").ok()?;
    let item = match field.data_type() {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => f,
        DataType::Null => return None,
        other => return problem("qa", format!("column `qa` is {other}, {WANT}")),
    };
    let DataType::Struct(fields) = item.data_type() else {
        return problem(
            "qa",
            format!("column `qa` is a list of {}, {WANT}", item.data_type()),
        );
    };
    let missing: Vec<&str> = ["question", "answer"]
        .into_iter()
        .filter(|n| fields.find(n).is_none())
        .collect();
    if !missing.is_empty() {
        return problem(
            "qa",
            format!(
                "column `qa`: its items have no field `{}`, {WANT}",
                missing.join("`, `")
            ),
        );
    }
    let of = |n: &str| fields.find(n).map(|(_, f)| f.data_type().clone());
    match (of("question"), of("answer")) {
        (Some(q), _) if !reads_as_text(&q) => problem(
            "qa",
            format!("column `qa`: its `question` is {q}, {WANT_TEXT}"),
        ),
        (_, Some(a)) if !reads_as_answer(&a) => problem(
            "qa",
            format!("column `qa`: its `answer` is {a}, {WANT_ANSWER}"),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qa_column_of_the_wrong_shape_is_named_from_its_type() {
        use arrow::datatypes::{Field, Fields};
        use std::sync::Arc;
        let schema = |qa: DataType| Schema::new(vec![Field::new("qa", qa, true)]);
        let list_of = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        let text = |names: &[&str]| {
            DataType::Struct(Fields::from(
                names
                    .iter()
                    .map(|n| Field::new(*n, DataType::Utf8, true))
                    .collect::<Vec<_>>(),
            ))
        };
        let message = |s: &Schema| qa_shape_problem(s).map(|p| p.message);
        assert_eq!(
            qa_shape_problem(&schema(list_of(text(&["question", "answer", "x"])))),
            None
        );
        assert_eq!(
            message(&schema(DataType::Utf8)).as_deref(),
            Some("column `qa` is Utf8, want list<struct{question, answer, …}>")
        );
        assert_eq!(
            message(&schema(list_of(DataType::Utf8))).as_deref(),
            Some("column `qa` is a list of Utf8, want list<struct{question, answer, …}>")
        );
        assert_eq!(
            message(&schema(list_of(text(&["q", "a"])))).as_deref(),
            Some("column `qa`: its items have no field `question`, `answer`, want list<struct{question, answer, …}>")
        );
        assert_eq!(
            qa_shape_problem(&Schema::empty()),
            None,
            "no qa column: the layout's business"
        );
    }

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn flat(image: &str, question: &str, answer: &str) -> Layout {
        Layout::Flat(SourceColumns {
            image: image.into(),
            question: question.into(),
            answer: answer.into(),
        })
    }

    #[test]
    fn common_names_are_detected() {
        let none = ColumnFlags::default();
        let cases = [
            (&["image", "qa", "family"][..], Layout::Nested),
            (
                &["image", "question", "answers", "question_id"][..],
                flat("image", "question", "answers"),
            ),
            (
                &["query", "label", "image"][..],
                flat("image", "query", "label"),
            ),
            (
                &["img", "prompt", "ground_truth"][..],
                flat("img", "prompt", "ground_truth"),
            ),
        ];
        for (found, want) in cases {
            assert_eq!(
                Layout::resolve(&cols(found), &none).unwrap(),
                want,
                "{found:?}"
            );
        }
    }

    /// `qa` without `image` is contract §2's layout missing its image: refused naming `image`,
    /// not taken as nested (every row would fail alike).
    #[test]
    fn qa_without_image_is_a_missing_image_column() {
        let e = Layout::resolve(&cols(&["qa", "id"]), &ColumnFlags::default()).unwrap_err();
        assert_eq!(e.field, "image");
        assert_eq!(
            e.to_string(),
            "missing column `image` (contract §2's layout: `image` struct{bytes, path} next to \
             `qa`); columns found: qa, id"
        );
    }

    /// A column the layout reads, twice (pyarrow writes such files): refused, not the first
    /// one taken silently (newcomer finding: a second `qa` holding other answers).
    #[test]
    fn a_column_the_layout_reads_twice_is_refused() {
        let e =
            Layout::resolve(&cols(&["image", "qa", "qa"]), &ColumnFlags::default()).unwrap_err();
        assert_eq!(e.field, "qa");
        assert_eq!(
            e.to_string(),
            "column `qa` appears 2 times; drop or rename all but one; columns found: image, \
             qa, qa"
        );
        let flat = cols(&["img", "query", "label", "label"]);
        let e = Layout::resolve(&flat, &ColumnFlags::default()).unwrap_err();
        assert_eq!(e.field, "label");
        // A repeated column the layout does not read is no obstacle.
        let other = cols(&["image", "qa", "id", "id"]);
        assert_eq!(
            Layout::resolve(&other, &ColumnFlags::default()),
            Ok(Layout::Nested)
        );
    }

    #[test]
    fn flags_win_over_detection_and_over_qa() {
        let flags = ColumnFlags {
            answer: Some("label".into()),
            ..ColumnFlags::default()
        };
        let found = cols(&["image", "qa", "question", "answer", "label"]);
        assert_eq!(
            Layout::resolve(&found, &flags).unwrap(),
            flat("image", "question", "label")
        );
    }

    #[test]
    fn ambiguous_or_missing_columns_are_errors_listing_the_columns() {
        let none = ColumnFlags::default();
        let found = cols(&["image", "question", "answer", "label"]);
        let e = Layout::resolve(&found, &none).unwrap_err();
        assert_eq!(
            e.to_string(),
            "missing column `qa`, and ambiguous answer column: answer, label all present; \
             name one with --answer-column; columns found: image, question, answer, label"
        );
        assert_eq!(e.field, "qa");
        let e = Layout::resolve(&cols(&["image", "text"]), &none).unwrap_err();
        assert!(e.message.contains("no question column"), "{e}");
        assert_eq!(e.found, cols(&["image", "text"]));
        let flags = ColumnFlags {
            image: Some("picture".into()),
            ..ColumnFlags::default()
        };
        let e = Layout::resolve(&cols(&["image", "question", "answer"]), &flags).unwrap_err();
        assert_eq!(e.field, "picture");
        assert_eq!(
            e.message, "--image-column `picture` is not a column",
            "with a flag given, no word about `qa`"
        );
        let flags = ColumnFlags {
            image: Some("image".into()),
            ..ColumnFlags::default()
        };
        let e = Layout::resolve(&cols(&["image", "qa"]), &flags).unwrap_err();
        assert_eq!(e.field, "question");
    }
}
