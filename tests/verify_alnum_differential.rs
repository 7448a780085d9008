//! Differential test of the `alnum` verifier against the Python reference of contract §5.
//!
//! Fixtures from `scripts/alnum_reference.py` (see `tests/fixtures/alnum/README.md`):
//! `pairs.jsonl` (24,000 generated pairs with the reference's results) and `tables.json`
//! (per-code-point tables of the Python that generated them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use verisample::verifiers::alnum::{alnum_match, alnum_norm, first_line, first_paragraph};
use verisample::verifiers::pytext::{
    py_is_line_boundary, py_isspace, py_lower_ascii_alnum, py_splitlines,
};
use verisample::verifiers::{Variant, Verifier};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/alnum")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text(v: &Value) -> Option<&str> {
    v.as_str()
}

#[test]
fn every_pair_agrees_with_python() {
    let data = fixture("pairs.jsonl");
    let mut failures = Vec::new();
    let mut n = 0usize;
    let mut variants: BTreeMap<String, usize> = BTreeMap::new();
    for (lineno, line) in data.lines().enumerate() {
        let row: Vec<Value> = serde_json::from_str(line).expect("fixture line is a JSON array");
        assert_eq!(row.len(), 9, "line {}", lineno + 1);
        let pred = text(&row[0]).expect("pred");
        let gt = text(&row[1]).expect("gt");
        let want_line = text(&row[2]).unwrap_or(pred);
        let want_para = text(&row[3]).unwrap_or(want_line);
        let want_norms =
            [&row[4], &row[5], &row[6], &row[7]].map(|v| text(v).expect("norm").to_string());
        let want_variant = text(&row[8]).map(|s| Variant::parse(s).expect("variant name"));
        *variants.entry(format!("{want_variant:?}")).or_default() += 1;
        n += 1;

        let got_line = first_line(pred);
        let got_para = first_paragraph(pred);
        let got_norms = [
            alnum_norm(pred),
            alnum_norm(got_line),
            alnum_norm(&got_para),
            alnum_norm(gt),
        ];
        let got_variant = alnum_match(pred, gt);
        let v = Verifier::Alnum.verify(pred, gt);
        let unusable = want_norms[3].is_empty();
        let ok = got_line == want_line
            && got_para == want_para
            && got_norms == want_norms
            && got_variant == want_variant
            && v.matched == want_variant
            && v.unusable_reference == unusable
            && v.accepted() == (want_variant.is_some() && !unusable)
            && v.reference_normalised == want_norms[3]
            && v.trials
                .iter()
                .map(|t| t.normalised.clone())
                .collect::<Vec<_>>()
                == want_norms[..3];
        if !ok {
            failures.push(format!(
                "line {}: pred {pred:?} gt {gt:?}: want ({want_line:?}, {want_para:?}, {want_norms:?}, {want_variant:?}) got ({got_line:?}, {got_para:?}, {got_norms:?}, {got_variant:?}, accepted {})",
                lineno + 1,
                v.accepted()
            ));
        }
    }
    assert!(n >= 20_000, "only {n} pairs");
    assert!(
        failures.is_empty(),
        "{} of {n} pairs disagree:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The corpus exercises every outcome.
    for key in [
        "Some(Whole)",
        "Some(FirstLine)",
        "Some(FirstParagraph)",
        "None",
    ] {
        assert!(
            variants.get(key).copied().unwrap_or(0) >= 100,
            "{key}: {variants:?}"
        );
    }
}

#[test]
fn per_code_point_tables_agree_with_python() {
    let tables: Value = serde_json::from_str(&fixture("tables.json")).expect("tables.json");
    let set = |key: &str| -> BTreeSet<u32> {
        tables[key]
            .as_array()
            .expect(key)
            .iter()
            .map(|v| v.as_u64().expect("code point") as u32)
            .collect()
    };
    let spaces = set("isspace");
    let boundaries = set("line_boundaries");
    let lower: BTreeMap<u32, String> = tables["lower_keeps_ascii"]
        .as_object()
        .expect("lower_keeps_ascii")
        .iter()
        .map(|(k, v)| {
            (
                k.parse().expect("code point"),
                v.as_str().expect("kept").to_string(),
            )
        })
        .collect();
    assert_eq!(spaces.len(), 29);
    assert_eq!(lower.len(), 2);
    assert_eq!(tables["crlf_is_one_boundary"], Value::Bool(true));
    assert_eq!(py_splitlines("a\r\nb"), ["a", "b"]);
    let mut checked = 0u32;
    for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
        let cp = c as u32;
        assert_eq!(py_isspace(c), spaces.contains(&cp), "isspace U+{cp:04X}");
        assert_eq!(
            py_is_line_boundary(c),
            boundaries.contains(&cp),
            "line boundary U+{cp:04X}"
        );
        let s = format!("a{c}b");
        assert_eq!(
            py_splitlines(&s).len(),
            if boundaries.contains(&cp) { 2 } else { 1 },
            "splitlines U+{cp:04X}"
        );
        let want = if cp >= 128 {
            lower.get(&cp).cloned().unwrap_or_default()
        } else if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase().to_string()
        } else {
            String::new()
        };
        assert_eq!(
            py_lower_ascii_alnum(c)
                .map(String::from)
                .unwrap_or_default(),
            want,
            "lower U+{cp:04X}"
        );
        checked += 1;
    }
    assert_eq!(checked, 0x110000 - 0x800);
}

/// Rust's `char::to_lowercase` + the same filter gives the same result as Python on every
/// code point (the differences between the two lower-casings never reach ASCII `a-z0-9`);
/// `char::is_whitespace` does differ from Python's `isspace`, exactly on `\x1c`–`\x1f`.
#[test]
fn differences_from_rust_std_are_known() {
    let mut whitespace_diff = Vec::new();
    for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
        let std_kept: String = c
            .to_lowercase()
            .filter(|x| x.is_ascii_lowercase() || x.is_ascii_digit())
            .collect();
        assert_eq!(std_kept, alnum_norm(&c.to_string()), "U+{:04X}", c as u32);
        if c.is_whitespace() != py_isspace(c) {
            whitespace_diff.push(c as u32);
        }
    }
    assert_eq!(whitespace_diff, [0x1C, 0x1D, 0x1E, 0x1F]);
}
