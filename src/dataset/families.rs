//! The families an input names, read from its `family` column alone, and the pairs of them
//! that differ only in case. Split files are named after the family
//! (`<Family>_RS_think-00000-of-00001.parquet`, contract §7), so two such families (`Cheque`,
//! `cheque`) would write files whose names differ only in case: on a case-insensitive file
//! system (macOS, Windows) one would overwrite the other. `run` refuses such an input before
//! anything loads (`settings`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::PathBuf;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use super::isolate::isolate;
use super::values::get_string;
use crate::family::{is_valid_family_name, split_family, DEFAULT_FAMILY};

/// The families of the rows of `files`: the values of the top-level `family` column that
/// can name a split ([`is_valid_family_name`]; others are row errors of the run), and
/// [`DEFAULT_FAMILY`] for a row without one (null, empty, or no such column). A file or row
/// group that cannot be read is passed over (the reader reports it).
pub fn input_families(files: &[PathBuf]) -> BTreeSet<String> {
    let mut families = BTreeSet::new();
    for path in files {
        let read = isolate(|| -> Option<()> {
            let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).ok()?).ok()?;
            let schema = builder.parquet_schema();
            let Some(index) = schema
                .root_schema()
                .get_fields()
                .iter()
                .position(|f| f.name() == "family")
            else {
                families.insert(DEFAULT_FAMILY.to_string());
                return Some(());
            };
            let mask = ProjectionMask::roots(schema, [index]);
            for batch in builder.with_projection(mask).build().ok()? {
                let Ok(batch) = batch else { break };
                let column = batch.column(0);
                for i in 0..batch.num_rows() {
                    if let Ok(f) = get_string(column.as_ref(), i) {
                        let f = split_family(f.as_deref());
                        if is_valid_family_name(&f) {
                            families.insert(f);
                        }
                    }
                }
            }
            Some(())
        });
        if read.ok().flatten().is_none() {
            tracing::debug!(file = %path.display(), "family column not read: the reader reports the file");
        }
    }
    families
}

/// The groups of `families` whose names differ only in ASCII case (family names are ASCII,
/// [`is_valid_family_name`]), each sorted, in order of their lower-case name.
pub fn case_clashes(families: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut by_lower: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in families {
        by_lower
            .entry(f.to_ascii_lowercase())
            .or_default()
            .push(f.clone());
    }
    by_lower.into_values().filter(|g| g.len() > 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_differing_only_in_case_are_grouped() {
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            case_clashes(&set(&["Cheque", "OrandCar", "cheque", "CHEQUE", "Default"])),
            vec![vec!["CHEQUE", "Cheque", "cheque"]]
        );
        assert!(case_clashes(&set(&["Cheque", "Cheques", "OrandCar"])).is_empty());
        assert_eq!(
            case_clashes(&set(&["Default", "default"])),
            vec![vec!["Default", "default"]],
            "a row without a family is `Default`"
        );
    }
}
