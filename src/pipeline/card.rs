//! The dataset card's inputs gathered at the end of the write phase: the model's
//! `config.json` facts and weight hashes, the input card's Hub metadata, and the example
//! images written beside the card (`OUT/examples/`), replacing an earlier run's.

use std::collections::BTreeMap;
use std::path::Path;

use super::PipelineError;
use crate::atomic::write_atomic;
use crate::out_files::{CARD_FILE, CHART_FILE, EXAMPLES_DIR};
use crate::report::card::{card_text, CardInput, CardText, ExampleRow, JudgeCases, ModelFacts};
use crate::report::RunStats;
use crate::settings::Settings;

/// The model as the card names it: its name, `config.json`'s `architectures` and
/// `_name_or_path` as resolved (recorded in `run.json`, so a merge has them), and the weight
/// files' hashes from `model_files` (name → hex SHA-256).
fn model_facts(settings: &Settings, model_files: &BTreeMap<String, String>) -> ModelFacts {
    ModelFacts {
        name: settings.model_name(),
        architectures: settings.model.architectures.clone(),
        name_or_path: settings
            .model
            .name_or_path
            .as_deref()
            .map(|s| crate::settings::portable_path(Path::new(s))),
        weights: model_files
            .iter()
            .filter(|(name, _)| name.ends_with(".safetensors"))
            .map(|(name, sha)| (name.clone(), sha.clone()))
            .collect(),
    }
}

/// The Hub metadata of the input's own card: the `README.md` of the input folder or of the
/// folder above it (a Hub layout keeps its parquet under `data/`), the first that has any.
fn input_card_meta(settings: &Settings) -> BTreeMap<String, Vec<String>> {
    let folder = if settings.data.is_dir() {
        settings.data.clone()
    } else {
        settings
            .data
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    for dir in folder.ancestors().take(2) {
        let path = dir.join(CARD_FILE);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let (meta, problems) = crate::dataset::hub::card_metadata(&text);
        for p in &problems {
            tracing::warn!(
                "the input's card {}: {p} (the output card marks what is missing as to fill in; \
                 --card-meta KEY=VALUE sets it)",
                path.display()
            );
        }
        if !meta.is_empty() || !problems.is_empty() {
            return meta;
        }
    }
    BTreeMap::new()
}

/// The card of a finished write phase (see [`crate::report::card`]).
pub(super) fn compose(
    settings: &Settings,
    model_files: &BTreeMap<String, String>,
    (stats, judge_cases, examples): (&RunStats, &JudgeCases, &BTreeMap<String, Vec<ExampleRow>>),
) -> CardText {
    card_text(&CardInput {
        settings,
        model: &model_facts(settings, model_files),
        stats,
        judge_cases,
        examples,
        input_meta: &input_card_meta(settings),
        chart_file: CHART_FILE,
    })
}

/// Write the example images under `OUT/examples/` (each atomically) and remove the files an
/// earlier run left there that this card no longer names.
///
/// Errors: the folder cannot be created or listed, or a write or removal fails.
pub(super) fn write_examples(
    out: &Path,
    images: &[(String, Vec<u8>)],
) -> Result<(), PipelineError> {
    let dir = out.join(EXAMPLES_DIR);
    let io = |path: &Path, e: std::io::Error| {
        PipelineError::Sink(crate::dataset::DatasetError::io(path, e).into())
    };
    if !images.is_empty() {
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    }
    for (file, bytes) in images {
        write_atomic(out.join(file), bytes)?;
    }
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(&dir, e)),
    };
    let named: Vec<&str> = images.iter().map(|(f, _)| f.as_str()).collect();
    for entry in entries {
        let path = entry.map_err(|e| io(&dir, e))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !named.contains(&format!("{EXAMPLES_DIR}/{name}").as_str()) && path.is_file() {
            std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
        }
    }
    if images.is_empty() {
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}
