//! [`Settings::resolve`]: flags over the `--config` file over defaults, merged once, then
//! validated concern by concern — sizes and bounds ([`Sizes`]), the family name, the device
//! backend, input and output ([`Io`]), the model, decoding, the `--verifier` entries.

use std::path::{Path, PathBuf};

use super::{
    data, default_model_dir, out_dir, rebase, resolve_model, verifiers, DTypeSpec, Decoding,
    DeviceSpec, KernelsSpec, ProgressMode, ResolvedModel, RunOptions, Sampling, SamplingFlags,
    Settings, SettingsError, Switch, AUTO_MAX_BATCH_CAP, DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_NEW_TOKENS, DEFAULT_OUT, MAX_MAX_BATCH,
};
use crate::dataset::layout::{ColumnFlags, ReadOptions};
use crate::shard::Shard;

impl Settings {
    /// Merge flags, the `--config` file and defaults, then validate: shard spec, numeric
    /// ranges, family name, device backend, input existence and model lookup. Loads nothing
    /// but the TOML file, directory listings and `generation_config.json`.
    ///
    /// Errors: [`SettingsError`], one per first problem found.
    pub fn resolve(args: &RunOptions) -> Result<Settings, SettingsError> {
        Self::resolve_for(args, Uses::DataAndOut)
    }

    /// [`Settings::resolve`] for a command that `uses` less than a run: `bench` writes
    /// nothing, so OUT is not checked, and with a folder of images it reads no dataset, so
    /// `--data` is not either (the rest is the same validation, the same defaults).
    ///
    /// Errors: [`SettingsError`], one per first problem found.
    pub fn resolve_for(args: &RunOptions, uses: Uses) -> Result<Settings, SettingsError> {
        let (file, base) = match &args.config {
            Some(path) => {
                let base = path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("."));
                (RunOptions::from_toml_file(path)?, base)
            }
            None => (RunOptions::default(), PathBuf::from(".")),
        };
        for side in [args, &file] {
            if let Some((key, v)) = side.non_finite() {
                return Err(SettingsError::Invalid {
                    key,
                    value: v.to_string(),
                    why: "must be a finite number".into(),
                });
            }
        }
        // One merge: a flag wins over the file's key, a key over the default. Paths given in
        // the file are relative to the file's folder (`model`, `data`, `out`, `images-root`
        // below still ask which side they came from).
        let opts = args.over(&file).map_err(|e| SettingsError::ConfigParse {
            path: args.config.clone().unwrap_or_default(),
            message: e.to_string(),
        })?;
        let device = opts.device.unwrap_or(DeviceSpec::default_for_build());
        let sizes = Sizes::resolve(&opts, device)?;
        check_family_name(opts.family.as_deref())?;
        device.check_built()?;
        let io = Io::resolve(args, &file, &base, &opts, uses)?;
        let input_columns = opts.input_columns.unwrap_or_default();
        // Before anything loads: input columns the splits cannot carry (a split column's
        // name, a type that differs between files or has no `datasets` feature).
        if uses == Uses::DataAndOut && input_columns.is_keep() {
            data::check_carried_columns(&io.data, &io.read)?;
        }
        let model = choose_model(args, &file, &base)?;
        let decoding = Decoding::resolve(
            &model.dir,
            opts.generation_config.unwrap_or(Switch::On),
            opts.repetition_penalty,
        )?;
        let sampling = Sampling::resolve(
            SamplingFlags {
                samples: opts.samples,
                temperature: opts.temperature,
                top_k: opts.top_k,
                top_p: opts.top_p,
                min_p: opts.min_p,
                seed: opts.seed,
                distinct: opts.distinct_samples.map(Switch::is_on),
            },
            decoding.file_sampling.clone(),
        )?;
        verifiers::check_entries(&opts.verifiers)?;
        super::card_meta_entries(&opts.card_meta)?;
        // Before anything loads: a `--verifier` that would decide nothing (a misspelt family).
        for warning in verifiers::idle_verifiers(&opts.verifiers, io.families.as_ref()) {
            tracing::warn!("{warning}");
        }
        if let Some(k) = opts.kernels {
            let runs = match k {
                KernelsSpec::Native => device == DeviceSpec::Cpu,
                KernelsSpec::Portable => true,
                KernelsSpec::Flash => {
                    device == DeviceSpec::Cpu
                        || (matches!(device, DeviceSpec::Cuda(_)) && cfg!(feature = "flash-attn"))
                }
            };
            if !runs {
                return Err(SettingsError::Invalid {
                    key: "kernels",
                    value: k.path().name().into(),
                    why: format!(
                        "not on {device} in this build (native: the CPU only; flash: CUDA in a \
                         build with --features flash-attn)"
                    ),
                });
            }
        }
        let default_dtype = match device {
            DeviceSpec::Cpu => DTypeSpec::F32,
            _ => DTypeSpec::Bf16,
        };
        Ok(Settings {
            model,
            data: io.data,
            data_as_typed: None,
            read: io.read,
            input_columns,
            out: io.out,
            family: opts.family,
            think: opts.think.unwrap_or(Switch::On).is_on(),
            judge: opts.judge.unwrap_or(Switch::On).is_on(),
            judge_calibrate: opts.judge_calibrate.unwrap_or(0),
            number_guard: opts.number_guard.unwrap_or(Switch::On).is_on(),
            verifiers: opts.verifiers,
            card_meta: opts.card_meta,
            dedup: opts.dedup.unwrap_or(Switch::On).is_on(),
            device,
            dtype: opts.dtype.unwrap_or(default_dtype),
            kernels: opts.kernels,
            max_new_tokens: sizes.max_new_tokens,
            think_budget: opts.think_budget,
            decoding,
            sampling,
            max_batch: sizes.max_batch,
            max_batch_auto: sizes.max_batch_auto,
            max_batch_tokens: sizes.max_batch_tokens,
            kv_cache_gib: opts.kv_cache_gib,
            vision_memory_gib: opts.vision_memory_gib,
            min_pixels: opts.min_pixels,
            max_pixels: opts.max_pixels,
            shard: opts.shard.unwrap_or(Shard::WHOLE),
            limit: opts.limit,
            progress: ProgressMode::chosen(opts.progress, args.quiet),
            max_errors: opts.max_errors,
            restart: args.restart,
            verify_weights: args.verify_weights,
            quiet: args.quiet,
        })
    }
}

/// What the command resolving the settings reads and writes besides the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uses {
    /// The input dataset and OUT (`run`): both are checked before anything loads.
    DataAndOut,
    /// The input dataset only (`bench --data`).
    Data,
    /// Neither (`bench --images`).
    Nothing,
}

/// The sizes of a run with their defaults applied, each checked against its range; the
/// optional bounds (`--limit`, the pixel bounds, the memory budgets) are checked in place.
struct Sizes {
    max_new_tokens: usize,
    max_batch: usize,
    /// No `--max-batch` on a GPU: the engine picks the batch from its KV pool, up to
    /// [`AUTO_MAX_BATCH_CAP`].
    max_batch_auto: bool,
    max_batch_tokens: usize,
}

impl Sizes {
    /// Errors: [`SettingsError::Invalid`] naming the first setting out of its range.
    fn resolve(opts: &RunOptions, device: DeviceSpec) -> Result<Self, SettingsError> {
        let max_new_tokens = positive(
            "max-new-tokens",
            opts.max_new_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS),
        )?;
        if let (Some(n), Some(Switch::Off)) = (opts.think_budget, opts.think) {
            return Err(SettingsError::Invalid {
                key: "think-budget",
                value: n.to_string(),
                why: "applies only with --think on (it ends the reasoning)".into(),
            });
        }
        let max_batch_auto = opts.max_batch.is_none() && device != DeviceSpec::Cpu;
        let default_max_batch = if max_batch_auto {
            AUTO_MAX_BATCH_CAP
        } else {
            DEFAULT_MAX_BATCH
        };
        let max_batch = positive("max-batch", opts.max_batch.unwrap_or(default_max_batch))?;
        // The engine sizes per-sequence buffers (state slots, sampler rows) by it: a value far
        // beyond any batch a device runs would fail as an allocation abort instead.
        if max_batch > MAX_MAX_BATCH {
            return Err(SettingsError::Invalid {
                key: "max-batch",
                value: max_batch.to_string(),
                why: format!("must be at most {MAX_MAX_BATCH}"),
            });
        }
        let max_batch_tokens = positive(
            "max-batch-tokens",
            opts.max_batch_tokens.unwrap_or(DEFAULT_MAX_BATCH_TOKENS),
        )?;
        for (key, v) in [
            ("limit", opts.limit),
            ("min-pixels", opts.min_pixels),
            ("max-pixels", opts.max_pixels),
        ] {
            if let Some(v) = v {
                positive(key, v)?;
            }
        }
        if let (Some(lo), Some(hi)) = (opts.min_pixels, opts.max_pixels) {
            if lo > hi {
                return Err(SettingsError::Invalid {
                    key: "min-pixels",
                    value: lo.to_string(),
                    why: format!("must not exceed --max-pixels {hi}"),
                });
            }
        }
        for (key, gib) in [
            ("kv-cache-gib", opts.kv_cache_gib),
            ("vision-memory-gib", opts.vision_memory_gib),
        ] {
            if let Some(g) = gib.filter(|g| !(g.is_finite() && *g > 0.0)) {
                return Err(SettingsError::Invalid {
                    key,
                    value: g.to_string(),
                    why: "must be a positive number of GiB".into(),
                });
            }
        }
        Ok(Self {
            max_new_tokens,
            max_batch,
            max_batch_auto,
            max_batch_tokens,
        })
    }
}

/// `v` when it is at least 1.
///
/// Errors: [`SettingsError::Invalid`] for 0, naming `key`.
fn positive(key: &'static str, v: usize) -> Result<usize, SettingsError> {
    if v == 0 {
        Err(SettingsError::Invalid {
            key,
            value: v.to_string(),
            why: "must be at least 1".into(),
        })
    } else {
        Ok(v)
    }
}

/// `--family`, when given, must be able to name the splits.
///
/// Errors: [`SettingsError::Invalid`].
fn check_family_name(family: Option<&str>) -> Result<(), SettingsError> {
    match family {
        Some(f) if !crate::family::is_valid_family_name(f) => Err(SettingsError::Invalid {
            key: "family",
            value: f.to_string(),
            why: format!(
                "must be {} (it names the splits)",
                crate::family::FAMILY_NAME_RULE
            ),
        }),
        _ => Ok(()),
    }
}

/// Where a run reads and writes: the input (a local path or a hub dataset), how it is read,
/// OUT, and the families its rows name (`None` when not known without reading every row).
struct Io {
    data: PathBuf,
    read: ReadOptions,
    out: PathBuf,
    families: Option<std::collections::BTreeSet<String>>,
}

impl Io {
    /// Paths of the flags are taken as given, those of the file relative to its folder `base`.
    ///
    /// Errors: the input is missing or unreadable, OUT cannot be written (or holds another
    /// tool's files, or the input), column flags that do not fit the layout, family names that
    /// differ only in case.
    fn resolve(
        args: &RunOptions,
        file: &RunOptions,
        base: &Path,
        opts: &RunOptions,
        uses: Uses,
    ) -> Result<Self, SettingsError> {
        let out = match (&args.out, &file.out) {
            (Some(o), _) => o.clone(),
            (None, Some(o)) => rebase(base, o.clone()),
            (None, None) => PathBuf::from(DEFAULT_OUT),
        };
        if uses == Uses::Nothing {
            return Ok(Self {
                data: PathBuf::new(),
                read: ReadOptions::default(),
                out,
                families: None,
            });
        }
        let (data, hub) = data::resolve_data(&data::DataChoice {
            flag: args.data.as_deref(),
            file: file.data.as_deref(),
            base,
            config: opts.data_config.as_deref(),
            split: opts.data_split.as_deref(),
        })?;
        let data_root = super::input_root(&data)?;
        if uses == Uses::DataAndOut {
            out_dir::check_out(&out, data_root.as_deref(), args.force)?;
        }
        let read = ReadOptions {
            columns: ColumnFlags {
                image: opts.image_column.clone(),
                question: opts.question_column.clone(),
                answer: opts.answer_column.clone(),
            },
            images_root: match (&args.images_root, &file.images_root) {
                (Some(r), _) => Some(r.clone()),
                (None, Some(r)) => Some(rebase(base, r.clone())),
                (None, None) => None,
            },
            hub,
            skip_family_column: false,
        };
        data::check_read_options(&data, &read)?;
        let families = data::input_families(&data, opts.family.as_deref());
        if let (None, Some(families)) = (&opts.family, &families) {
            data::check_family_case(&data, families)?;
        }
        Ok(Self {
            data,
            read,
            out,
            families,
        })
    }
}

/// The model of the flag, else of the file (relative to its folder `base`), else the bundled
/// default.
///
/// Errors: [`SettingsError`] from the lookup (not a folder, not in the local HF cache).
fn choose_model(
    args: &RunOptions,
    file: &RunOptions,
    base: &Path,
) -> Result<ResolvedModel, SettingsError> {
    match (&args.model, &file.model) {
        (Some(m), _) => resolve_model(m, Path::new(".")),
        (None, Some(m)) => resolve_model(m, base),
        (None, None) => resolve_model(&default_model_dir().to_string_lossy(), Path::new(".")),
    }
}
