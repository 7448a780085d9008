//! The rows of an output folder's splits, read for `view` a page at a time.
//!
//! [`OutputRows::open`] reads only the parquet footers (and offset indexes) of
//! `OUT/data/<split>-*.parquet`: each row group's row count places any row of a split in its
//! file and row group without reading data. A page of an unfiltered listing
//! ([`OutputRows::page`]) reads just the row groups that hold its rows, and of those only the
//! rows it shows, with every column but the image bytes; a filtered or searched page scans the
//! same text columns row group by row group and stops once the page is full and one more match
//! is found (the total is then unknown: "more"). [`OutputRows::image`] reads the image bytes of
//! one row, addressed by split name and row index. Rows are numbered from 0 within their split,
//! in file then row order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::PageIndexPolicy;
use serde::Serialize;

use crate::dataset::card::{kind_of_split, output_split_files};
use crate::dataset::values::{as_struct, get_bytes, get_list, get_string, to_json};
use crate::dataset::DatasetError;
use crate::record::SplitKind;

/// The most rows one page may hold.
pub const MAX_PER_PAGE: usize = 200;

/// The longest extra column value sent as it is, in characters of its JSON text; a longer
/// one (a binary column as hex, a long list) is cut and says how long it was.
const MAX_EXTRA_CHARS: usize = 2000;

/// Why an output folder cannot be viewed or read.
#[derive(Debug, thiserror::Error)]
pub enum RowsError {
    /// The folder is not a verisample output (no such folder, no `data/`, no split files).
    #[error("{path} is not a verisample output folder: {why}")]
    NotOutput {
        /// The folder given.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// A split file cannot be read.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
}

/// Which rows a page shows: the filters (each `None` when unset) and the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowQuery {
    /// Only this split (`OrandCar_rejected`).
    pub split: Option<String>,
    /// Only the splits of this family.
    pub family: Option<String>,
    /// Only rows with a `qa` entry of this `reason` (rejected splits).
    pub reason: Option<String>,
    /// Only rows with a `qa` entry of this `judge_verdict`.
    pub verdict: Option<String>,
    /// Only rows with a `qa` entry of this `accepted_by` (accepted splits).
    pub accepted_by: Option<String>,
    /// Only rows with this text (case-insensitive) in a `qa` field, `clean_meta`, the image
    /// path or hash, or an extra column.
    pub text: Option<String>,
    /// The page, from 0.
    pub page: usize,
    /// Rows per page, 1..=[`MAX_PER_PAGE`].
    pub per_page: usize,
}

impl Default for RowQuery {
    fn default() -> Self {
        Self {
            split: None,
            family: None,
            reason: None,
            verdict: None,
            accepted_by: None,
            text: None,
            page: 0,
            per_page: 25,
        }
    }
}

impl RowQuery {
    /// The `qa` entry filters as (field, wanted value): a row matches when one of its entries
    /// has every one of them.
    fn item_filters(&self) -> Vec<(&'static str, &str)> {
        [
            ("reason", &self.reason),
            ("judge_verdict", &self.verdict),
            ("accepted_by", &self.accepted_by),
        ]
        .into_iter()
        .filter_map(|(field, v)| v.as_deref().map(|v| (field, v)))
        .collect()
    }

    /// Whether the query needs the rows' content to choose them (a scan), not only counts.
    fn scans(&self) -> bool {
        !self.item_filters().is_empty() || self.text.is_some()
    }
}

/// One row as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ViewRow {
    /// The split name.
    pub split: String,
    /// `think`, `nothink` or `rejected`.
    pub kind: &'static str,
    /// The row's index in its split, from 0.
    pub row: u64,
    /// `image.path`.
    pub image_path: Option<String>,
    /// `image_sha256`.
    pub image_sha256: Option<String>,
    /// The `qa` entries: field name → value (`None`: null).
    pub qa: Vec<BTreeMap<String, Option<String>>>,
    /// `clean_meta` as stored (a JSON object's text).
    pub clean_meta: Option<String>,
    /// Any other top-level column, (name, value as JSON), in column order.
    pub extra: Vec<(String, serde_json::Value)>,
}

/// A page of rows, and what reading it took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowsPage {
    /// The rows of the page, in split then row order.
    pub rows: Vec<ViewRow>,
    /// The rows the query selects in all, when known: `None` when a scan stopped early.
    pub total: Option<u64>,
    /// Whether rows after this page match (always known).
    pub more: bool,
    /// Row groups read for this page.
    pub row_groups_read: usize,
    /// Rows decoded for this page.
    pub rows_read: u64,
}

/// A split as the page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SplitInfo {
    /// `OrandCar_RS_think`.
    pub name: String,
    /// `OrandCar`.
    pub family: String,
    /// `think`, `nothink` or `rejected`.
    pub kind: &'static str,
    /// Rows, from the footers.
    pub rows: u64,
}

/// One row group of a split: its file, its index there, its first row in the split, its rows.
#[derive(Debug, Clone, Copy)]
struct Group {
    file: usize,
    index: usize,
    first: u64,
    rows: u64,
}

/// One shard file: its footer, and the leaf columns a page and an image read.
#[derive(Debug)]
struct SplitFile {
    path: PathBuf,
    meta: ArrowReaderMetadata,
    /// Every leaf column but the image bytes.
    text: ProjectionMask,
    /// The image bytes, when the file has them.
    image: Option<ProjectionMask>,
    /// The `qa` entries' field names.
    item_fields: Vec<String>,
}

#[derive(Debug)]
struct Split {
    info: SplitInfo,
    files: Vec<SplitFile>,
    groups: Vec<Group>,
}

impl Split {
    /// Whether an entry of this split can have every one of `fields`: a split whose files all
    /// lack one (`reason` in an accepted split) is not read for such a filter.
    fn has_fields(&self, fields: &[(&str, &str)]) -> bool {
        self.files.iter().any(|f| {
            fields
                .iter()
                .all(|(name, _)| f.item_fields.iter().any(|n| n == name))
        })
    }

    /// The row groups holding rows `from..to` of the split.
    fn groups_for(&self, from: u64, to: u64) -> &[Group] {
        let start = self.groups.partition_point(|g| g.first + g.rows <= from);
        let end = self.groups.partition_point(|g| g.first < to);
        &self.groups[start..end.max(start)]
    }
}

/// The splits of one output folder, open for reading pages and images.
#[derive(Debug)]
pub struct OutputRows {
    splits: Vec<Split>,
}

fn kind_name(kind: SplitKind) -> &'static str {
    match kind {
        SplitKind::Think => "think",
        SplitKind::NoThink => "nothink",
        SplitKind::Rejected => "rejected",
    }
}

/// Whether `parts` (a leaf column's path) is the image bytes: `image.bytes`, or a plain
/// binary `image` column.
fn is_image_bytes(parts: &[String]) -> bool {
    matches!(parts, [a, b] if a == "image" && b == "bytes") || matches!(parts, [a] if a == "image")
}

impl SplitFile {
    /// Read the footer (and the offset index, which lets one row's image be read without the
    /// rest of its row group's pages) of `path`.
    fn open(path: PathBuf) -> Result<Self, DatasetError> {
        let file = std::fs::File::open(&path).map_err(|e| DatasetError::io(&path, e))?;
        let options = ArrowReaderOptions::new()
            .with_column_index_policy(PageIndexPolicy::Skip)
            .with_offset_index_policy(PageIndexPolicy::Optional);
        let meta = DatasetError::isolated(&path, || {
            ArrowReaderMetadata::load(&file, options).map_err(|e| DatasetError::parquet(&path, e))
        })?;
        let descr = meta.metadata().file_metadata().schema_descr();
        let (mut text, mut image, mut item_fields) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..descr.num_columns() {
            let column = descr.column(i);
            let parts = column.path().parts();
            if is_image_bytes(parts) {
                image.push(i);
            } else {
                text.push(i);
            }
            if parts.len() > 1 && parts[0] == "qa" {
                item_fields.extend(parts.last().cloned());
            }
        }
        Ok(Self {
            text: ProjectionMask::leaves(descr, text),
            image: (!image.is_empty()).then(|| ProjectionMask::leaves(descr, image)),
            item_fields,
            meta,
            path,
        })
    }

    /// Rows `skip..skip + take` of row group `group`, the columns of `mask`.
    fn read(
        &self,
        group: usize,
        skip: usize,
        take: usize,
        mask: &ProjectionMask,
    ) -> Result<Vec<RecordBatch>, DatasetError> {
        let path = &self.path;
        DatasetError::isolated(path, || {
            let file = std::fs::File::open(path).map_err(|e| DatasetError::io(path, e))?;
            let mut selectors = Vec::new();
            if skip > 0 {
                selectors.push(RowSelector::skip(skip));
            }
            selectors.push(RowSelector::select(take));
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
                .with_row_groups(vec![group])
                .with_projection(mask.clone())
                .with_row_selection(RowSelection::from(selectors))
                .with_batch_size(take.max(1))
                .build()
                .map_err(|e| DatasetError::parquet(path, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(DatasetError::Arrow)
        })
    }
}

/// The string of row `i` of `arr`, or a non-string value as its JSON text.
fn text_of(arr: &dyn Array, i: usize) -> Option<String> {
    get_string(arr, i).unwrap_or_else(|_| Some(to_json(arr, i).to_string()))
}

/// The `qa` entries of row `i`.
fn qa_entries(col: &dyn Array, i: usize) -> Vec<BTreeMap<String, Option<String>>> {
    let Ok(Some(items)) = get_list(col, i) else {
        return Vec::new();
    };
    let Ok(items) = as_struct(items.as_ref()) else {
        return Vec::new();
    };
    (0..items.len())
        .filter(|&j| !items.is_null(j))
        .map(|j| {
            items
                .fields()
                .iter()
                .zip(items.columns())
                .map(|(f, c)| (f.name().clone(), text_of(c.as_ref(), j)))
                .collect()
        })
        .collect()
}

/// An extra column's value, cut to [`MAX_EXTRA_CHARS`] characters of JSON.
fn extra_value(arr: &dyn Array, i: usize) -> serde_json::Value {
    let v = to_json(arr, i);
    let text = v.to_string();
    let chars = text.chars().count();
    if chars <= MAX_EXTRA_CHARS {
        return v;
    }
    let cut: String = text.chars().take(MAX_EXTRA_CHARS).collect();
    serde_json::Value::String(format!("{cut}… ({chars} characters in all)"))
}

/// The rows of `batch` (a text projection), numbered from `first`.
fn decode(batch: &RecordBatch, info: &SplitInfo, first: u64) -> Vec<ViewRow> {
    let schema = batch.schema();
    let column = |name: &str| batch.column_by_name(name).map(|c| c.as_ref());
    let (image, qa, meta, sha) = (
        column("image"),
        column("qa"),
        column("clean_meta"),
        column("image_sha256"),
    );
    let extras: Vec<(&String, &dyn Array)> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| {
            !["image", "qa", "clean_meta", "image_sha256"].contains(&f.name().as_str())
        })
        .map(|(f, c)| (f.name(), c.as_ref()))
        .collect();
    (0..batch.num_rows())
        .map(|i| ViewRow {
            split: info.name.clone(),
            kind: info.kind,
            row: first + i as u64,
            image_path: image
                .and_then(|c| as_struct(c).ok())
                .and_then(|s| s.column_by_name("path"))
                .and_then(|p| text_of(p.as_ref(), i)),
            image_sha256: sha.and_then(|c| text_of(c, i)),
            qa: qa.map(|c| qa_entries(c, i)).unwrap_or_default(),
            clean_meta: meta.and_then(|c| text_of(c, i)),
            extra: extras
                .iter()
                .map(|(name, c)| ((*name).clone(), extra_value(*c, i)))
                .collect(),
        })
        .collect()
}

/// Whether `row` passes the `qa` entry filters and holds `needle` (lowercase).
fn matches(row: &ViewRow, filters: &[(&str, &str)], needle: Option<&str>) -> bool {
    let items_ok = filters.is_empty()
        || row.qa.iter().any(|item| {
            filters
                .iter()
                .all(|(field, want)| item.get(*field).and_then(Option::as_deref) == Some(*want))
        });
    let Some(needle) = needle else {
        return items_ok;
    };
    let has = |s: &str| s.to_lowercase().contains(needle);
    items_ok
        && (row
            .qa
            .iter()
            .flat_map(|item| item.values())
            .flatten()
            .any(|s| has(s))
            || [&row.clean_meta, &row.image_path, &row.image_sha256]
                .into_iter()
                .flatten()
                .any(|s| has(s))
            || row.extra.iter().any(|(_, v)| match v {
                serde_json::Value::String(s) => has(s),
                v => has(&v.to_string()),
            }))
}

impl OutputRows {
    /// Open the splits of output folder `out` (`out/data/<split>-NNNNN-of-NNNNN.parquet`),
    /// reading their footers only. Splits are listed by family, then think, nothink, rejected.
    ///
    /// Errors: [`RowsError::NotOutput`] when `out` is no folder, has no `data/` or no split
    /// file there; [`RowsError::Dataset`] when a split file's footer cannot be read.
    pub fn open(out: &Path) -> Result<Self, RowsError> {
        let not_output = |why: &str| RowsError::NotOutput {
            path: out.to_path_buf(),
            why: why.to_string(),
        };
        if !out.is_dir() {
            return Err(not_output(if out.exists() {
                "a file, not a folder: give the folder `run --out` wrote"
            } else {
                "no such folder"
            }));
        }
        if !out.join(crate::out_files::SPLITS_DIR).is_dir() {
            return Err(not_output(
                "it has no data/ folder of splits: give the folder `run --out` or `merge --out` wrote",
            ));
        }
        let mut splits = Vec::new();
        for (name, mut paths) in output_split_files(out)? {
            let Some(kind) = kind_of_split(&name) else {
                continue;
            };
            paths.sort();
            let family = name[..name.len() - kind.split_name("").len()].to_string();
            let mut split = Split {
                info: SplitInfo {
                    name,
                    family,
                    kind: kind_name(kind),
                    rows: 0,
                },
                files: Vec::new(),
                groups: Vec::new(),
            };
            for path in paths {
                let file = SplitFile::open(path)?;
                for (index, rg) in file.meta.metadata().row_groups().iter().enumerate() {
                    let rows = u64::try_from(rg.num_rows()).unwrap_or(0);
                    split.groups.push(Group {
                        file: split.files.len(),
                        index,
                        first: split.info.rows,
                        rows,
                    });
                    split.info.rows += rows;
                }
                split.files.push(file);
            }
            splits.push((kind, split));
        }
        if splits.is_empty() {
            return Err(not_output(
                "no split files in data/ (<Family>_RS_think, <Family>_RS_nothink, <Family>_rejected)",
            ));
        }
        let order = |k: SplitKind| SplitKind::ALL.iter().position(|&x| x == k);
        splits.sort_by(|(ka, a), (kb, b)| {
            (&a.info.family, order(*ka)).cmp(&(&b.info.family, order(*kb)))
        });
        Ok(Self {
            splits: splits.into_iter().map(|(_, s)| s).collect(),
        })
    }

    /// The splits, in listing order.
    pub fn splits(&self) -> Vec<SplitInfo> {
        self.splits.iter().map(|s| s.info.clone()).collect()
    }

    /// The splits a query's split and family filters select, in listing order.
    fn selected<'a>(&'a self, q: &'a RowQuery) -> impl Iterator<Item = &'a Split> + 'a {
        self.splits.iter().filter(move |s| {
            q.split.as_ref().is_none_or(|n| *n == s.info.name)
                && q.family.as_ref().is_none_or(|f| *f == s.info.family)
        })
    }

    /// The page `q` asks for. Without entry filters or text, its rows are found from the
    /// footers' row counts and only the row groups holding them are read; otherwise the
    /// selected splits are scanned (text columns only) until the page is full and one more
    /// match is found.
    ///
    /// Errors: a split file cannot be read.
    pub fn page(&self, q: &RowQuery) -> Result<RowsPage, RowsError> {
        let per = q.per_page.clamp(1, MAX_PER_PAGE);
        let mut page = RowsPage {
            rows: Vec::new(),
            total: None,
            more: false,
            row_groups_read: 0,
            rows_read: 0,
        };
        if q.scans() {
            self.scan(q, per, &mut page)?;
            return Ok(page);
        }
        let total: u64 = self.selected(q).map(|s| s.info.rows).sum();
        let from = (q.page as u64).saturating_mul(per as u64);
        let to = from.saturating_add(per as u64).min(total);
        page.total = Some(total);
        page.more = to < total;
        let mut offset = 0;
        for split in self.selected(q) {
            let (a, b) = (
                from.saturating_sub(offset).min(split.info.rows),
                to.saturating_sub(offset).min(split.info.rows),
            );
            offset += split.info.rows;
            for g in split.groups_for(a, b) {
                let skip = a.saturating_sub(g.first);
                let take = b.min(g.first + g.rows) - g.first - skip;
                let batches = split.files[g.file].read(
                    g.index,
                    usize::try_from(skip).unwrap_or(usize::MAX),
                    usize::try_from(take).unwrap_or(usize::MAX),
                    &split.files[g.file].text,
                )?;
                page.row_groups_read += 1;
                let mut first = g.first + skip;
                for batch in &batches {
                    page.rows_read += batch.num_rows() as u64;
                    page.rows.extend(decode(batch, &split.info, first));
                    first += batch.num_rows() as u64;
                }
            }
        }
        Ok(page)
    }

    /// A filtered page: the selected splits read row group by row group (text columns),
    /// skipping the matches of earlier pages, until `per` rows and one more match are found.
    fn scan(&self, q: &RowQuery, per: usize, page: &mut RowsPage) -> Result<(), RowsError> {
        let filters = q.item_filters();
        let needle = q.text.as_deref().map(str::to_lowercase);
        let skip = (q.page as u64).saturating_mul(per as u64);
        let mut found = 0u64;
        for split in self.selected(q).filter(|s| s.has_fields(&filters)) {
            for g in &split.groups {
                let file = &split.files[g.file];
                let take = usize::try_from(g.rows).unwrap_or(usize::MAX);
                let batches = file.read(g.index, 0, take, &file.text)?;
                page.row_groups_read += 1;
                let mut first = g.first;
                for batch in &batches {
                    page.rows_read += batch.num_rows() as u64;
                    for row in decode(batch, &split.info, first) {
                        if !matches(&row, &filters, needle.as_deref()) {
                            continue;
                        }
                        if page.rows.len() == per {
                            page.more = true;
                            return Ok(());
                        }
                        if found >= skip {
                            page.rows.push(row);
                        }
                        found += 1;
                    }
                    first += batch.num_rows() as u64;
                }
            }
        }
        page.total = Some(found);
        Ok(())
    }

    /// The image bytes of row `row` of split `split`: `None` when there is no such split or
    /// row, or the row has no image bytes. Reads that row's image only.
    ///
    /// Errors: the split file cannot be read.
    pub fn image(&self, split: &str, row: u64) -> Result<Option<Vec<u8>>, RowsError> {
        let Some(split) = self.splits.iter().find(|s| s.info.name == split) else {
            return Ok(None);
        };
        let Some(g) = split.groups_for(row, row + 1).first() else {
            return Ok(None);
        };
        let file = &split.files[g.file];
        let Some(mask) = &file.image else {
            return Ok(None);
        };
        let skip = usize::try_from(row - g.first).unwrap_or(usize::MAX);
        let batches = file.read(g.index, skip, 1, mask)?;
        let Some(col) = batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .and_then(|b| b.column_by_name("image").cloned())
        else {
            return Ok(None);
        };
        let bytes = match as_struct(col.as_ref()) {
            Ok(s) => s
                .column_by_name("bytes")
                .and_then(|b| get_bytes(b.as_ref(), 0).ok().flatten()),
            Err(_) => get_bytes(col.as_ref(), 0).ok().flatten(),
        };
        Ok(bytes)
    }
}

#[cfg(test)]
pub(super) mod tests;
