//! `verify` catches edits of a finished output that leave every decision recomputable (issue
//! 45 item 5): each split file's SHA-256 as the run published it is in `run.json`
//! (`stats.split_sha256`), and a file whose content differs is named; with run.json's hashes
//! rewritten too, each edit is still named by split, row and field, against the input
//! (`--input`) or the model's outputs (`generations.jsonl`). The edits are the
//! adversarial kit's: a rejected row's reference changed, a reasoning trace edited, the same
//! edit made in both accepted splits, a row dropped with run.json's row count lowered to
//! match, and a value of a column carried from the input (`family`) changed.

#[path = "dataset_util/mod.rs"]
mod dataset_util;

use std::path::{Path, PathBuf};

use dataset_util::{bin, check, repo};
use verisample::dataset::shards::ShardOptions;
use verisample::dataset::writer::{carried_columns, read_split, QaRecord, SplitWriter};
use verisample::record::{OutputRow, SplitKind};

/// Copy the files of `from` and `from/data` into a new folder `to`.
fn copy_out(from: &Path, to: &Path) {
    for sub in ["", "data"] {
        std::fs::create_dir_all(to.join(sub)).unwrap();
        for e in std::fs::read_dir(from.join(sub)).unwrap().flatten() {
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(sub).join(e.file_name())).unwrap();
            }
        }
    }
}

/// The one shard file of split `kind` in `out`.
fn split_file(out: &Path, kind: SplitKind) -> PathBuf {
    out.join("data").join(format!(
        "{}-00000-of-00001.parquet",
        kind.split_name("OrandCar")
    ))
}

/// Rewrite split `kind` of `out` with `edit` applied to its rows (the writer's own format,
/// so the file reads back as any split does).
fn rewrite<Q: QaRecord>(out: &Path, kind: SplitKind, edit: impl FnOnce(&mut Vec<OutputRow<Q>>)) {
    let file = split_file(out, kind);
    let mut rows: Vec<OutputRow<Q>> = read_split(&file).unwrap();
    edit(&mut rows);
    let tmp = tempfile::tempdir().unwrap();
    // The input's columns the splits carry (the sample's `family`), written again as such.
    let carried = carried_columns(&file).map_or_else(Default::default, |s| s.fields().clone());
    let opts = ShardOptions::default();
    let mut w =
        SplitWriter::<Q>::create_carrying(tmp.path(), "OrandCar", kind, opts, carried).unwrap();
    for r in rows {
        w.write_row(r).unwrap();
    }
    let written = w.finish(|_| true).unwrap();
    std::fs::copy(&written.files[0], &file).unwrap();
}

/// `verify OUT --input` (the bundled sample the run read): its exit status and stdout.
fn verify(out: &Path) -> (Option<i32>, String) {
    let o = bin()
        .arg("verify")
        .arg(out)
        .arg("--input")
        .arg(repo().join("assets/sample/data"))
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn edits_that_keep_every_decision_are_caught_by_the_recorded_file_contents() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    check(
        bin()
            .current_dir(repo())
            .args(["run", "-q", "--out"])
            .arg(&out)
            .output()
            .unwrap(),
        "run",
    );
    let (code, text) = verify(&out);
    assert_eq!(code, Some(0), "{text}");
    let run_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    let recorded = &run_json["stats"]["split_sha256"];
    assert_eq!(recorded.as_object().map(|m| m.len()), Some(3), "{recorded}");
    assert_eq!(
        recorded["OrandCar_rejected-00000-of-00001.parquet"],
        verisample::settings::sha256_file(&split_file(&out, SplitKind::Rejected)).unwrap()
    );

    type Tamper = fn(&Path);
    // (what, the edit, the split files it changes, what verify still names when run.json's
    // file hashes are rewritten to match: the entry and field against the input or
    // generations.jsonl).
    let tampers: [(&str, Tamper, &[SplitKind], &str); 6] = [
        (
            "a rejected row's reference changed",
            |o| {
                rewrite(o, SplitKind::Rejected, |rows| {
                    let e: &mut verisample::record::RejectedQa = &mut rows[0].qa[0];
                    e.answer.push('4');
                })
            },
            &[SplitKind::Rejected],
            "OrandCar_rejected row 0 qa 0: NotTheInput: field answer is",
        ),
        (
            "a reasoning trace edited",
            |o| {
                rewrite(o, SplitKind::Think, |rows| {
                    let e: &mut verisample::record::AcceptedQa = &mut rows[0].qa[0];
                    let t = e.think.get_or_insert_with(String::new);
                    t.push_str(" (edited)");
                })
            },
            &[SplitKind::Think],
            "OrandCar_RS_think row 0 qa 0: NotTheModelOutput: field think is",
        ),
        (
            "the same question edited in both accepted splits",
            |o| {
                for kind in [SplitKind::Think, SplitKind::NoThink] {
                    rewrite(o, kind, |rows| {
                        let e: &mut verisample::record::AcceptedQa = &mut rows[0].qa[0];
                        e.question.push_str(" Answer in words.");
                    });
                }
            },
            &[SplitKind::Think, SplitKind::NoThink],
            "OrandCar_RS_nothink row 0 qa 0: NotTheInput: field question is",
        ),
        (
            "two rows' images and hashes swapped in both accepted splits",
            |o| {
                for kind in [SplitKind::Think, SplitKind::NoThink] {
                    rewrite(
                        o,
                        kind,
                        |rows: &mut Vec<OutputRow<verisample::record::AcceptedQa>>| {
                            let (a, b) = rows.split_at_mut(1);
                            std::mem::swap(&mut a[0].image, &mut b[0].image);
                            std::mem::swap(&mut a[0].image_sha256, &mut b[0].image_sha256);
                        },
                    );
                }
            },
            &[SplitKind::Think, SplitKind::NoThink],
            "OrandCar_RS_nothink row 0: NotTheInput: image_sha256",
        ),
        (
            "a rejected row dropped and run.json's row count lowered to match",
            |o| {
                rewrite(
                    o,
                    SplitKind::Rejected,
                    |rows: &mut Vec<OutputRow<verisample::record::RejectedQa>>| {
                        rows.pop();
                    },
                );
                let path = o.join("run.json");
                let mut j: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                let n = &mut j["stats"]["split_rows"]["OrandCar_rejected"];
                *n = serde_json::json!(n.as_u64().unwrap() - 1);
                std::fs::write(&path, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
            },
            &[SplitKind::Rejected],
            "its answer is in no split",
        ),
        (
            "a value of a column carried from the input changed",
            |o| {
                rewrite(
                    o,
                    SplitKind::NoThink,
                    |rows: &mut Vec<OutputRow<verisample::record::AcceptedQa>>| {
                        let carried = rows[0].carried.as_ref().expect("the sample's family");
                        let family = arrow::array::StringArray::from(vec!["Edited"]);
                        rows[0].carried = Some(
                            arrow::array::RecordBatch::try_new(
                                carried.schema(),
                                vec![std::sync::Arc::new(family)],
                            )
                            .unwrap(),
                        );
                    },
                )
            },
            &[SplitKind::NoThink],
            "OrandCar_RS_nothink row 0: NotTheInput: column `family` is \"Edited\", the input's \
             train-00000-of-00001.parquet row 0 says \"OrandCar\"",
        ),
    ];
    for (what, tamper, edited, named_entry) in tampers {
        let copy = tmp.path().join(what.replace(' ', "-"));
        copy_out(&out, &copy);
        tamper(&copy);
        let (code, text) = verify(&copy);
        assert_eq!(code, Some(1), "{what}: verify said\n{text}");
        let named: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("MISMATCH data/"))
            .collect();
        assert_eq!(named.len(), edited.len(), "{what}:\n{text}");
        for kind in edited {
            let file = kind.split_name("OrandCar");
            assert!(
                named
                    .iter()
                    .any(|l| l.starts_with(&format!("MISMATCH data/{file}-"))
                        && l.contains("changed after the run")),
                "{what}: {file} not named:\n{text}"
            );
        }
        // run.json's hashes rewritten to the edited files: the entries are still checked
        // against the model's outputs in generations.jsonl.
        let path = copy.join("run.json");
        let mut j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for (name, sha) in j["stats"]["split_sha256"].as_object_mut().unwrap() {
            *sha = verisample::settings::sha256_file(&copy.join("data").join(name))
                .unwrap()
                .into();
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
        let (code, text) = verify(&copy);
        assert!(!text.contains("changed after the run"), "{what}:\n{text}");
        assert_eq!(code, Some(1), "{what}: verify said\n{text}");
        assert!(
            text.contains(named_entry),
            "{what}: {named_entry:?} missing:\n{text}"
        );
    }
    // The item counts run.json records are checked against the splits too.
    let copy = tmp.path().join("items");
    copy_out(&out, &copy);
    let path = copy.join("run.json");
    let mut j: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let n = j["stats"]["split_items"]["OrandCar_RS_think"]
        .as_u64()
        .unwrap();
    j["stats"]["split_items"]["OrandCar_RS_think"] = (n + 1).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
    let (code, text) = verify(&copy);
    assert_eq!(code, Some(1), "{text}");
    let want = format!(
        "MISMATCH OrandCar_RS_think: run.json records {} items, found {n}",
        n + 1
    );
    assert!(text.contains(&want), "{want:?} missing:\n{text}");
}

/// Two input files of the same name in two folders (one folder per part of a dataset): each
/// split entry is matched with its input item by stream position, not by file name, so an
/// untouched output verifies against its input.
#[test]
fn input_files_of_the_same_name_are_told_apart() {
    use dataset_util::{png, write_input, InputSpec};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for (part, seed) in [("a", 1u8), ("b", 40)] {
        std::fs::create_dir_all(data.join(part)).unwrap();
        let rows: Vec<InputSpec> = (0..3)
            .map(|i| {
                let answer = format!("{}", 100 * u32::from(seed) + i);
                InputSpec::new(png(24, 12, seed + i as u8), &[("How many?", &answer)])
            })
            .collect();
        write_input(&data.join(part).join("train.parquet"), &rows, 10);
    }
    let out = tmp.path().join("out");
    check(
        bin()
            .args(["run", "-q", "--max-new-tokens", "8", "--data"])
            .arg(&data)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap(),
        "run",
    );
    let o = bin()
        .arg("verify")
        .arg(&out)
        .arg("--input")
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(!text.contains("NotTheInput"), "{text}");
}
