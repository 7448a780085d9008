//! The body of the dataset card `OUT/README.md` a reader needs to use the data: how it was
//! produced (model, decoding, the command that reproduces it), how a match is decided (each
//! verifier's rule and a runnable Python reference), what the judge does and the rows it
//! overturned or was refused on, what each split's fields hold, the cleaning applied, three
//! example rows per split with their images, then the statistics ([`super::card_markdown`]).
//!
//! Everything here is a function of the run's settings, statistics and rows in canonical
//! order, so the same run writes the same card bytes; no absolute local path is written
//! ([`crate::settings::portable_path`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::judge::JUDGE_TEMPLATE;
use crate::out_files::EXAMPLES_DIR;
use crate::record::{AcceptedQa, OutputRow, RejectedQa};
use crate::settings::Settings;
use crate::verifiers::python::{python_reference, rule_markdown};
use crate::verifiers::Verifier;

use super::RunStats;

/// Example rows shown per split.
pub const EXAMPLES_PER_SPLIT: usize = 3;
/// Judge cases shown per kind (overturned, refused by the number guard, calibration
/// disagreements): the first in input order.
pub const JUDGE_CASES_SHOWN: usize = 10;

/// The model as the card describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelFacts {
    /// Hub id or folder name ([`Settings::model_name`]).
    pub name: String,
    /// `architectures` of `config.json`.
    pub architectures: Vec<String>,
    /// `_name_or_path` of `config.json`, when it has one.
    pub name_or_path: Option<String>,
    /// Weight file name → hex SHA-256 (the run's fingerprint), in name order.
    pub weights: Vec<(String, String)>,
}

/// One judged item the card shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgeCase {
    /// The question.
    pub question: String,
    /// The reference(s), as the judge saw them.
    pub reference: String,
    /// The model's answer the judge graded.
    pub answer: String,
    /// The parsed verdict.
    pub verdict: String,
}

/// The judged items the card shows, each list the first [`JUDGE_CASES_SHOWN`] in input order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JudgeCases {
    /// Verifier rejects the judge moved to the accepted splits.
    pub overturned: Vec<JudgeCase>,
    /// `CORRECT` verdicts the number guard refused (`judge_numbers_disagree`).
    pub guard_refused: Vec<JudgeCase>,
    /// Calibration items (verifier accepts) the judge did not call `CORRECT`.
    pub calibration_disagreed: Vec<JudgeCase>,
}

impl JudgeCases {
    /// Add `case` to `list` unless it holds [`JUDGE_CASES_SHOWN`] already.
    pub fn keep(list: &mut Vec<JudgeCase>, case: JudgeCase) {
        if list.len() < JUDGE_CASES_SHOWN {
            list.push(case);
        }
    }
}

/// An example row of one split, as written.
#[derive(Debug, Clone, PartialEq)]
pub enum ExampleRow {
    /// A row of `_RS_think` or `_RS_nothink`.
    Accepted(OutputRow<AcceptedQa>),
    /// A row of `_rejected`.
    Rejected(OutputRow<RejectedQa>),
}

impl ExampleRow {
    /// The row's image, `clean_meta` and carried input columns, whichever split it is of.
    fn parts(
        &self,
    ) -> (
        &crate::record::ImageRef,
        &str,
        Option<&arrow::array::RecordBatch>,
    ) {
        match self {
            ExampleRow::Accepted(r) => (&r.image, &r.clean_meta, r.carried.as_ref()),
            ExampleRow::Rejected(r) => (&r.image, &r.clean_meta, r.carried.as_ref()),
        }
    }
}

/// What the card is made from.
pub struct CardInput<'a> {
    /// The run's settings.
    pub settings: &'a Settings,
    /// The model.
    pub model: &'a ModelFacts,
    /// The run's statistics.
    pub stats: &'a RunStats,
    /// The judged items shown.
    pub judge_cases: &'a JudgeCases,
    /// Split name → its first rows (at most [`EXAMPLES_PER_SPLIT`]).
    pub examples: &'a BTreeMap<String, Vec<ExampleRow>>,
    /// The input card's Hub metadata (`license`, `language`, …), overridden by `--card-meta`.
    pub input_meta: &'a BTreeMap<String, Vec<String>>,
    /// The chart file, relative to the card.
    pub chart_file: &'a str,
}

/// The card's parts: Hub metadata for the YAML header, the Markdown body after the split
/// table, and the example images to write beside the card (path relative to OUT, bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct CardText {
    /// YAML lines (`license: …`), ending in a newline; keys not known are comments saying
    /// what to fill in.
    pub hub_yaml: String,
    /// Markdown.
    pub body: String,
    /// `examples/<split>-<k>.<ext>` → image bytes.
    pub images: Vec<(String, Vec<u8>)>,
}

/// The Hub's `size_categories` value for `n` rows.
pub fn size_category(n: u64) -> &'static str {
    match n {
        0..=999 => "n<1K",
        1_000..=9_999 => "1K<n<10K",
        10_000..=99_999 => "10K<n<100K",
        100_000..=999_999 => "100K<n<1M",
        1_000_000..=9_999_999 => "1M<n<10M",
        10_000_000..=99_999_999 => "10M<n<100M",
        _ => "100M<n<1B",
    }
}

fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The YAML metadata lines: `--card-meta` values, else the input card's, else (license,
/// language, source_datasets) a comment saying what to fill in.
fn hub_yaml(input: &CardInput<'_>) -> String {
    let mut meta: BTreeMap<String, Vec<String>> = input.input_meta.clone();
    let mut flagged: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Checked when the settings were resolved: an entry that does not parse never gets here.
    for (k, v) in crate::settings::card_meta_entries(&input.settings.card_meta).unwrap_or_default()
    {
        flagged.entry(k).or_default().push(v);
    }
    meta.extend(flagged);
    if let Some(hub) = &input.settings.read.hub {
        meta.entry("source_datasets".into())
            .or_insert_with(|| vec![hub.repo.clone()]);
    }
    meta.entry("task_categories".into())
        .or_insert_with(|| vec!["visual-question-answering".into()]);
    // Each accepted item is in `_RS_nothink` and again in `_RS_think`: counted once.
    let rows: u64 = input
        .stats
        .split_rows
        .iter()
        .filter(|(name, _)| !name.ends_with("_RS_think"))
        .map(|(_, n)| n)
        .sum();
    meta.insert("size_categories".into(), vec![size_category(rows).into()]);
    let mut y = String::new();
    for key in [
        "pretty_name",
        "license",
        "language",
        "task_categories",
        "size_categories",
        "source_datasets",
    ] {
        match meta.get(key) {
            Some(values) if key == "pretty_name" || (key == "license" && values.len() == 1) => {
                let _ = writeln!(y, "{key}: {}", yaml_string(&values[0]));
            }
            Some(values) => {
                let _ = writeln!(y, "{key}:");
                for v in values {
                    let _ = writeln!(y, "- {}", yaml_string(v));
                }
            }
            None if key == "pretty_name" => {}
            None => {
                let _ = writeln!(
                    y,
                    "# {key}: to fill in before publishing (`--card-meta {key}=…`; the input's card gives none)"
                );
            }
        }
    }
    y
}

/// `text` with the characters a reader would not see made visible: C0 controls (but line
/// feed and tab) and DEL as their Unicode control pictures (`␀`, `␍`), direction and
/// zero-width controls as `⟨U+202E⟩`. The card stays text, and shows what the data holds.
pub fn visible(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => s.push(c),
            '\u{0}'..='\u{1f}' => s.push(char::from_u32(0x2400 + c as u32).unwrap_or('?')),
            '\u{7f}' => s.push('\u{2421}'),
            '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{feff}' => {
                s.push_str(&format!("⟨U+{:04X}⟩", c as u32));
            }
            _ => s.push(c),
        }
    }
    s
}

/// `text` as a code span in a Markdown table cell, shown literally (no Markdown, no HTML):
/// control characters visible, line breaks as `⏎`, `|` escaped as GFM tables need, the span's
/// backticks longer than any run inside; cut at 160 characters.
fn cell(text: &str) -> String {
    let mut s: String = text.chars().take(160).collect();
    if text.chars().count() > 160 {
        s.push('…');
    }
    let s = visible(&s.replace("\r\n", "⏎").replace(['\n', '\r'], "⏎")).replace('\t', " ");
    if s.is_empty() {
        return "(empty)".to_string();
    }
    let ticks = "`".repeat(longest_backtick_run(&s) + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{}{pad}{ticks}", s.replace('|', "\\|"))
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// `text` in full as a fenced block (control characters made [`visible`]), the fence longer
/// than any backtick run inside.
fn fenced(text: &str) -> String {
    fenced_lang("text", text)
}

/// [`fenced`] with the block's language `lang` (`python`, `json`).
fn fenced_lang(lang: &str, text: &str) -> String {
    let text = &visible(text);
    let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
    format!("{fence}{lang}\n{text}\n{fence}\n")
}

fn produced(input: &CardInput<'_>, s: &mut String) {
    let st = input.settings;
    let m = input.model;
    s.push_str("## How the data was produced\n\n");
    let _ = write!(s, "- **Model**: {}", cell(&m.name));
    if !m.architectures.is_empty() {
        let names: Vec<String> = m.architectures.iter().map(|a| cell(a)).collect();
        let _ = write!(s, " (`architectures`: {}", names.join(", "));
        if let Some(n) = &m.name_or_path {
            let _ = write!(s, "; `_name_or_path`: {}", cell(n));
        }
        s.push(')');
    }
    s.push_str(".\n");
    if !m.weights.is_empty() {
        let weights: Vec<String> = m
            .weights
            .iter()
            .map(|(f, h)| format!("`{f}` `{}`", &h[..h.len().min(12)]))
            .collect();
        let _ = writeln!(
            s,
            "- **Weights** (SHA-256, first 12 hex digits): {}.",
            weights.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "- **Program**: verisample {} on `{}`, weights and activations in {}.",
        env!("CARGO_PKG_VERSION"),
        st.device.kind(),
        format!("{:?}", st.dtype).to_lowercase()
    );
    match &st.sampling.params {
        None => {
            let penalty = if st.decoding.repetition_penalty == 1.0 {
                String::new()
            } else {
                format!(", repetition penalty {}", st.decoding.repetition_penalty)
            };
            let _ = writeln!(
                s,
                "- **Decoding**: greedy (temperature 0){penalty}; the same bytes at any batch size, thread count, resume or shard layout."
            );
        }
        Some(p) => {
            let mut warpers = Vec::new();
            if let Some(k) = p.top_k {
                warpers.push(format!("top-k {k}"));
            }
            if let Some(v) = p.top_p {
                warpers.push(format!("top-p {v}"));
            }
            if let Some(v) = p.min_p {
                warpers.push(format!("min-p {v}"));
            }
            let _ = writeln!(
                s,
                "- **Decoding**: {} samples per question at temperature {}{}, seed {} (each draw keyed by seed, row, question and sample: reproducible at any batch size).",
                st.sampling.samples,
                p.temperature,
                if warpers.is_empty() { String::new() } else { format!(", {}", warpers.join(", ")) },
                p.seed
            );
        }
    }
    let thinking = if st.think {
        "on (the chat template's thinking mode; the reasoning inside `<think>…</think>` is the `think` field, the answer what follows it)"
    } else {
        "off (the chat template's non-thinking mode)"
    };
    let _ = writeln!(s, "- **Reasoning**: {thinking}.");
    if let Some(b) = st.think_budget {
        let _ = writeln!(
            s,
            "- **Thinking budget**: {b} tokens, after which the model family's early-stopping text closes the reasoning."
        );
    }
    let _ = writeln!(
        s,
        "- **At most {} new tokens** per answer; an answer cut there is rejected as `truncated`.",
        st.max_new_tokens
    );
    s.push_str("- **Prompt**: the image and the stored `question`, byte for byte, through the model's own chat template; no instruction is appended.\n");
    let _ = writeln!(
        s,
        "\nTo reproduce (paths as folder names; the same settings write the same bytes):\n\n```bash\n{}\n```\n",
        st.reproduce_command()
    );
}

fn match_rules(input: &CardInput<'_>, s: &mut String) {
    let registry = input.settings.verifier_registry();
    let mut used: Vec<(String, Verifier)> = input
        .stats
        .families
        .keys()
        .map(|f| (f.clone(), registry.for_family(Some(f))))
        .collect();
    if used.is_empty() {
        used.push(("(every family)".into(), registry.for_family(None)));
    }
    s.push_str("## How a match is decided\n\n");
    s.push_str("Each answer — the text after the model's reasoning, stripped — is checked against the reference by a deterministic string verifier, chosen per family:\n\n| family | verifier |\n| --- | --- |\n");
    for (f, v) in &used {
        let spec = match *v {
            Verifier::Numeric { rel_tol } => format!("numeric:{rel_tol}"),
            Verifier::Anls { threshold } => format!("anls:{threshold}"),
            _ => v.name().to_string(),
        };
        let _ = writeln!(s, "| {} | `{spec}` |", cell(f));
    }
    s.push('\n');
    let mut verifiers: Vec<Verifier> = Vec::new();
    for (_, v) in &used {
        if !verifiers.contains(v) {
            verifiers.push(*v);
            let _ = writeln!(s, "- {}", rule_markdown(v));
        }
    }
    s.push_str("\nThe prediction is tried three ways, in order: whole, its first line, its first paragraph (Python's `str.strip()`, `str.splitlines()`); the first that matches is `accepted_by` (`verifier:<name>:<variant>`) and its text is `answer`, so a model that answers and then explains is not penalised. A list-valued reference matches when any of its values does. A reference the verifier cannot use is never accepted by the string verifier; it goes to the judge.\n\nA runnable reference implementation (Python 3, standard library; `verisample check` explains one decision):\n\n");
    s.push_str(&fenced_lang("python", &python_reference(&verifiers)));
    s.push('\n');
}

fn judge_table(s: &mut String, title: &str, cases: &[JudgeCase], total: u64) {
    if cases.is_empty() {
        return;
    }
    let shown = if total > cases.len() as u64 {
        format!(" (the first {} of {total}, in input order)", cases.len())
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "{title}{shown}:\n\n| question | reference | model answer | verdict |\n| --- | --- | --- | --- |"
    );
    for c in cases {
        let _ = writeln!(
            s,
            "| {} | {} | {} | `{}` |",
            cell(&c.question),
            cell(&c.reference),
            cell(&c.answer),
            c.verdict
        );
    }
    s.push('\n');
}

fn judge(input: &CardInput<'_>, s: &mut String) {
    let st = input.settings;
    let stats = input.stats;
    s.push_str("## The judge\n\n");
    if !st.judge {
        s.push_str("Off for this run (`--judge off`): every verifier reject stays rejected.\n\n");
    } else {
        let _ = writeln!(
            s,
            "Every verifier reject that is not blank or truncated gets a second, text-only look by the same model as a judge: it sees the question, the reference and the model's answer — no image, no regeneration — in this prompt:\n\n{}",
            fenced(JUDGE_TEMPLATE)
        );
        s.push_str("The verdict is read fail-closed: only the judge's final answer (after its own `</think>`), whose last non-empty line must hold exactly one of `CORRECT`, `WRONG`, `UNSURE` as a whole word; anything else is `UNSURE`. Only `CORRECT` moves an item to the accepted splits (`accepted_by` `judge`); `WRONG` and `UNSURE` stay rejected (`wrong_answer`, `judge_unsure`). ");
        if st.number_guard {
            s.push_str("The number guard is on: a `CORRECT` is refused (`judge_numbers_disagree`) when answer and reference both hold digits and their digit sequences differ.\n\n");
        } else {
            s.push_str("The number guard is off (`--number-guard off`).\n\n");
        }
        let _ = writeln!(
            s,
            "In this run the judge graded {} verifier rejects: {} moved to accepted, {} `CORRECT` refused by the number guard.\n",
            stats.judge.judged, stats.judge.overturns, stats.judge.number_guard_blocks
        );
    }
    match stats.calibration {
        Some(c) => {
            let _ = writeln!(
                s,
                "Calibration: the judge also graded the first {} verifier accepts and agreed on {}/{} (decisions unchanged).\n",
                c.total, c.agreed, c.total
            );
        }
        None if input.settings.judge_calibrate > 0 => s.push_str(
            "Calibration: asked for, but the run had no verifier accept to grade.\n\n",
        ),
        None => s.push_str(
            "Calibration: not run (`--judge-calibrate N` grades the first N verifier accepts too and reports the agreement).\n\n",
        ),
    }
    let cases = input.judge_cases;
    judge_table(
        s,
        "Overturned (verifier reject → accepted by the judge)",
        &cases.overturned,
        stats.judge.overturns,
    );
    judge_table(
        s,
        "Refused by the number guard",
        &cases.guard_refused,
        stats.judge.number_guard_blocks,
    );
    judge_table(
        s,
        "Calibration disagreements (verifier accept the judge did not call `CORRECT`)",
        &cases.calibration_disagreed,
        stats.calibration.map_or(0, |c| c.total - c.agreed),
    );
}

fn fields(s: &mut String) {
    s.push_str("## What the fields hold\n\n\
| field | `_RS_think` / `_RS_nothink` | `_rejected` |\n| --- | --- | --- |\n\
| `question` | the user text the model received, byte for byte | the same |\n\
| `answer` | **the model's own verified output**: the text that passed the verifier, or the answer the judge accepted — never the reference | **the official ground truth** |\n\
| `org_answer` | the original reference | — |\n\
| `vlm_answer` | the model's whole answer after its reasoning, stripped | — |\n\
| `wrong_vlm` | — | what the model said instead (its answer after the reasoning, stripped) |\n\
| `think` | the reasoning trace (`_RS_think` only) | — |\n\
| `accepted_by` | `verifier:<name>:<variant>` or `judge` | — |\n\
| `reason` | — | `wrong_answer`, `judge_unsure`, `judge_numbers_disagree`, `no_answer`, `truncated`, `unusable_reference`, … |\n\
| `judge_verdict`, `judge_raw` | the judge's verdict and text when it accepted the item | when the judge ran |\n\n\
`answer` and `org_answer` often differ only in casing, spacing or formatting (`bridgestone` vs `Bridgestone`). Each row is one image (`image`: the original bytes; `image_sha256`) with the `qa` entries of that image that landed in the split; `clean_meta` is a JSON object: where the row came from (`source_file`, `row_index`, `position`), the cleaning policy that admitted it and which input entries it kept (`cleaning.kept_from`).\n\n");
}

fn cleaning(input: &CardInput<'_>, s: &mut String) {
    let drops = &input.stats.cleaning_drops;
    let n = |k: &str| drops.get(k).copied().unwrap_or(0);
    s.push_str("## Cleaning\n\nApplied before sampling; every drop is counted here and listed in `cleaning.jsonl`:\n\n| rule | dropped questions |\n| --- | ---: |\n");
    let _ = writeln!(
        s,
        "| provenance: an entry's `source` is neither its image's hash nor its path | {} |",
        n("provenance_mismatch")
    );
    let _ = writeln!(
        s,
        "| image hash: the row's `image_sha256` is not the hash of its bytes | {} |",
        n("image_sha256_mismatch")
    );
    let _ = writeln!(
        s,
        "| task purity: a question that is not its family's task | {} |",
        n("off_task")
    );
    let dedup = if input.settings.dedup {
        "duplicates: the same image, question and reference again (kept once)"
    } else {
        "duplicates: off (`--dedup off`), repeats kept"
    };
    let _ = writeln!(s, "| {dedup} | {} |", n("duplicate"));
    let known = [
        "provenance_mismatch",
        "image_sha256_mismatch",
        "off_task",
        "duplicate",
    ];
    for (k, v) in drops.iter().filter(|(k, _)| !known.contains(&k.as_str())) {
        let _ = writeln!(s, "| {} | {v} |", cell(k));
    }
    s.push_str("\nMultiple-choice questions whose options were flattened into prose are re-rendered as a lettered block with the reference rewritten to the letter (`clean_meta.cleaning.rewritten` names them). Input rows that could not be read are not dropped silently either: they are in `errors.jsonl`.\n\n");
}

/// The image file extension for `bytes` by their signature.
fn image_ext(bytes: &[u8]) -> &'static str {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => "png",
        [0xFF, 0xD8, ..] => "jpg",
        [b'G', b'I', b'F', ..] => "gif",
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => "webp",
        [b'B', b'M', ..] => "bmp",
        _ => "bin",
    }
}

/// One example row's fields: those of one short line in a table (`value` in code), the
/// others (reasoning, judge text) each in full in a fenced block.
fn example_fields(s: &mut String, fields: &[(&str, Option<&str>)]) {
    let short = |v: &str| {
        v.chars().count() <= 200
            && v.trim() == v
            && !v.contains(['`', '|'])
            && !v.chars().any(char::is_control)
            && visible(v) == v
    };
    s.push_str("| field | value |\n| --- | --- |\n");
    for (name, value) in fields {
        if let Some(v) = value.filter(|v| short(v)) {
            // A code span shows `<script>` as text; `|` and backticks are never short.
            let v = if v.is_empty() {
                "(empty)".to_string()
            } else {
                format!("`{v}`")
            };
            let _ = writeln!(s, "| `{name}` | {v} |");
        }
    }
    s.push('\n');
    for (name, value) in fields {
        if let Some(v) = value.filter(|v| !short(v)) {
            let _ = write!(s, "`{name}`:\n\n{}\n", fenced(v));
        }
    }
}

/// Each carried column of a one-row batch and its value as Arrow displays it (`null` for a
/// null).
fn carried_values(batch: &arrow::array::RecordBatch) -> Vec<(String, String)> {
    use arrow::array::Array;
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::default().with_null("null");
    batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, col)| {
            let value = match ArrayFormatter::try_new(col.as_ref(), &options) {
                Ok(fmt) if !col.is_empty() => fmt.value(0).to_string(),
                _ => "null".to_string(),
            };
            (f.name().clone(), value)
        })
        .collect()
}

fn examples(input: &CardInput<'_>, s: &mut String, images: &mut Vec<(String, Vec<u8>)>) {
    s.push_str("## Examples\n\nThe first rows of each split, in full.\n\n");
    for (split, rows) in input.examples {
        let _ = writeln!(s, "### `{split}`\n");
        for (k, row) in rows.iter().enumerate() {
            let (image, clean_meta, carried) = row.parts();
            let _ = writeln!(s, "#### Row {k}\n");
            if let Some(bytes) = &image.bytes {
                let ext = image_ext(bytes);
                let file = format!("{EXAMPLES_DIR}/{split}-{k}.{ext}");
                if ext == "bin" {
                    let _ = writeln!(
                        s,
                        "The image, in a format browsers do not show: [{file}]({file})\n"
                    );
                } else {
                    let _ = writeln!(s, "![{split} row {k}]({file})\n");
                }
                images.push((file, bytes.clone()));
            }
            match row {
                ExampleRow::Accepted(r) => {
                    for q in &r.qa {
                        example_fields(
                            s,
                            &[
                                ("question", Some(&q.question)),
                                ("answer", Some(&q.answer)),
                                ("org_answer", Some(&q.org_answer)),
                                ("vlm_answer", Some(&q.vlm_answer)),
                                ("accepted_by", Some(&q.accepted_by)),
                                ("judge_verdict", q.judge_verdict.as_deref()),
                                ("think", q.think.as_deref()),
                                ("judge_raw", q.judge_raw.as_deref()),
                            ],
                        );
                    }
                }
                ExampleRow::Rejected(r) => {
                    for q in &r.qa {
                        example_fields(
                            s,
                            &[
                                ("question", Some(&q.question)),
                                ("answer", Some(&q.answer)),
                                ("wrong_vlm", Some(&q.wrong_vlm)),
                                ("reason", Some(&q.reason)),
                                ("judge_verdict", q.judge_verdict.as_deref()),
                                ("judge_raw", q.judge_raw.as_deref()),
                            ],
                        );
                    }
                }
            }
            if let Some(batch) = carried {
                let values = carried_values(batch);
                let fields: Vec<(&str, Option<&str>)> = values
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect();
                s.push_str("The input's own columns:\n\n");
                example_fields(s, &fields);
            }
            let _ = write!(s, "`clean_meta`:\n\n{}\n", fenced_lang("json", clean_meta));
        }
    }
}

/// The card's parts for `input` (see [`CardText`]).
pub fn card_text(input: &CardInput<'_>) -> CardText {
    let mut body = String::new();
    produced(input, &mut body);
    match_rules(input, &mut body);
    judge(input, &mut body);
    fields(&mut body);
    cleaning(input, &mut body);
    let mut images = Vec::new();
    examples(input, &mut body, &mut images);
    body.push_str(&super::card_markdown(
        input.stats,
        input.chart_file,
        (input.settings.judge, input.settings.sampling.distinct),
    ));
    CardText {
        hub_yaml: hub_yaml(input),
        body,
        images,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_in_a_table_cell_is_literal_and_visible() {
        // Markdown, HTML and a pipe stay text in a code span; a backtick lengthens the span.
        assert_eq!(
            cell("![x](https://e.example/p.png)"),
            "`![x](https://e.example/p.png)`"
        );
        assert_eq!(cell("a|b <script>"), "`a\\|b <script>`");
        assert_eq!(cell("`2760`"), "`` `2760` ``");
        assert_eq!(cell("two\nlines\r\nend"), "`two⏎lines⏎end`");
        assert_eq!(cell(""), "(empty)");
        // Control and direction characters are shown, not written raw.
        assert_eq!(visible("NUL\u{0}byte\r"), "NUL\u{2400}byte\u{240d}");
        assert_eq!(visible("a\u{202e}b"), "a⟨U+202E⟩b");
        assert!(!fenced("x\u{0}y").contains('\u{0}'));
        let long: String = "9".repeat(200);
        assert_eq!(cell(&long), format!("`{}…`", "9".repeat(160)));
    }

    #[test]
    fn size_categories_follow_the_hubs_bounds() {
        assert_eq!(size_category(999), "n<1K");
        assert_eq!(size_category(1_000), "1K<n<10K");
        assert_eq!(size_category(250_000), "100K<n<1M");
        assert_eq!(size_category(1_000_000), "1M<n<10M");
    }
}
