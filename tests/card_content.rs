//! The dataset card a reader gets from the real `verisample run` on the bundled model and
//! sample: every section with its facts (the model's `config.json`, the weights' hashes, the
//! command that reproduces the run, the verifier's rule and runnable Python, the judge, the
//! fields, the cleaning, three example rows per split with their images beside the card), the
//! Hub metadata from `--card-meta` or the input's own card, no absolute local path, and the
//! same bytes from two runs of the same job.

mod shared_data;
use shared_data::repo;

use std::path::Path;
use std::process::{Command, Output};

use sha2::{Digest, Sha256};
use verisample::dataset::writer::{read_accepted_split, read_rejected_split, split_files};

const BIN: &str = env!("CARGO_BIN_EXE_verisample");

fn run(data: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(repo().join("assets/model"))
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--progress", "none", "-q"])
        .args(extra)
        .env_remove("VERISAMPLE_TEST_KILL_AT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The image links of a Markdown text: `![alt](target)` → target.
fn image_links(card: &str) -> Vec<String> {
    card.match_indices("](")
        .filter(|(i, _)| {
            card[..*i]
                .rfind("![")
                .is_some_and(|j| !card[j..*i].contains('\n'))
        })
        .map(|(i, _)| {
            let rest = &card[i + 2..];
            rest[..rest.find(')').unwrap()].to_string()
        })
        .collect()
}

#[test]
fn the_sample_card_holds_every_section_and_the_same_bytes_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let data = repo().join("assets/sample/data");
    let (a, b) = (tmp.path().join("a/out"), tmp.path().join("b/out"));
    ok(run(&data, &a, &[]));
    ok(run(&data, &b, &["--max-batch", "3"]));
    let card = std::fs::read_to_string(a.join("README.md")).unwrap();
    assert_eq!(
        card,
        std::fs::read_to_string(b.join("README.md")).unwrap(),
        "two runs of the same job (another batch size) write the same card"
    );
    for section in [
        "## Schema",
        "## How the data was produced",
        "## How a match is decided",
        "## The judge",
        "## What the fields hold",
        "## Cleaning",
        "## Examples",
        "## Statistics",
    ] {
        assert_eq!(
            card.matches(&format!("\n{section}\n")).count(),
            1,
            "{section}\n{card}"
        );
    }
    // The model's facts, from its config.json and the weights' bytes.
    assert!(
        card.contains("(`architectures`: `Qwen2VLForConditionalGeneration`)"),
        "{card}"
    );
    let weights = std::fs::read(repo().join("assets/model/model.safetensors")).unwrap();
    assert!(card.contains(&format!(
        "`model.safetensors` `{}`",
        &sha256(&weights)[..12]
    )));
    assert!(
        card.contains("- **Decoding**: greedy (temperature 0)"),
        "{card}"
    );
    assert!(card.contains(
        "```bash\nverisample run \\\n    --model model \\\n    --data data \\\n    --out OUT \\\n    --device cpu \\\n    --dtype f32\n```"
    ), "{card}");
    assert!(card.contains("| `OrandCar` | `alnum` |"), "{card}");
    // The input's `family` column travels with every row: in the schema and in each example.
    assert!(
        card.contains("| `family` | `string` | carried unchanged from the input"),
        "{card}"
    );
    assert_eq!(
        card.matches("The input's own columns:\n\n| field | value |\n| --- | --- |\n| `family` | `OrandCar` |\n").count(),
        9,
        "{card}"
    );
    assert!(
        card.contains("In this run the judge graded 7 verifier rejects"),
        "{card}"
    );
    // No absolute local path: neither the output's nor the checkout's.
    for local in [tmp.path().to_str().unwrap(), repo().to_str().unwrap()] {
        assert!(!card.contains(local), "{local} in the card");
    }
    assert!(!card.contains("](/"), "an absolute link");
    // Hub metadata: task and size known, license, language and sources to fill in.
    assert!(
        card.starts_with("---\n# license: to fill in before publishing"),
        "{card}"
    );
    assert!(card.contains(
        "\ntask_categories:\n- \"visual-question-answering\"\nsize_categories:\n- \"n<1K\"\n"
    ));

    // Three example rows per split, each image beside the card and the split row's own bytes.
    let links = image_links(&card);
    let charted = links.iter().filter(|l| l.as_str() == "chart.svg").count();
    assert_eq!((links.len(), charted), (10, 1), "{links:?}");
    for split in [
        "OrandCar_RS_think",
        "OrandCar_RS_nothink",
        "OrandCar_rejected",
    ] {
        let file = &split_files(&a, split).unwrap()[0];
        let hashes: Vec<String> = if split.ends_with("_rejected") {
            read_rejected_split(file)
                .unwrap()
                .into_iter()
                .map(|r| r.image_sha256)
                .collect()
        } else {
            read_accepted_split(file)
                .unwrap()
                .into_iter()
                .map(|r| r.image_sha256)
                .collect()
        };
        for (k, want) in hashes.iter().take(3).enumerate() {
            let link = format!("examples/{split}-{k}.png");
            assert!(links.contains(&link), "{link} not in the card");
            let bytes = std::fs::read(a.join(&link)).unwrap();
            assert_eq!(&sha256(&bytes), want, "{link}");
        }
    }
    for link in &links {
        assert!(a.join(link).is_file(), "{link} does not resolve");
    }
    assert_eq!(std::fs::read_dir(a.join("examples")).unwrap().count(), 9);
}

#[test]
fn the_cards_python_runs_and_decides_as_the_contract_says() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    ok(run(
        &repo().join("assets/sample/data"),
        &out,
        &["--judge", "off"],
    ));
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("Off for this run (`--judge off`)"), "{card}");
    let start = card.find("```python\n").expect("a python block") + "```python\n".len();
    let code = &card[start..start + card[start..].find("\n```").unwrap()];
    let program = format!(
        "{code}\nprint(alnum('\\n\\n11850\\n\\nThe amount is', ['11850']), alnum('ll.850', ['11850']), alnum('HELLO!', ['hello']))\n"
    );
    let Ok(py) = Command::new("python3").args(["-c", &program]).output() else {
        shared_data::skip("no python3");
        return;
    };
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&py.stdout),
        "first_line None whole\n"
    );
}

#[test]
fn hub_metadata_comes_from_the_flags_else_the_inputs_card() {
    let tmp = tempfile::tempdir().unwrap();
    // An input folder with a card of its own: its license and language carry over.
    let data = tmp.path().join("orand");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(
        repo().join("assets/sample/data/train-00000-of-00001.parquet"),
        data.join("train-00000-of-00001.parquet"),
    )
    .unwrap();
    std::fs::write(
        data.join("README.md"),
        "---\nlicense: cc-by-nc-4.0\nlanguage:\n- es\n- en\n---\n# ORAND-CAR\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    ok(run(
        &data,
        &out,
        &[
            "--card-meta",
            "source_datasets=orand-car-a",
            "--judge",
            "off",
        ],
    ));
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        card.starts_with(
            "---\nlicense: \"cc-by-nc-4.0\"\nlanguage:\n- \"es\"\n- \"en\"\ntask_categories:\n"
        ),
        "{card}"
    );
    assert!(
        card.contains("source_datasets:\n- \"orand-car-a\"\n"),
        "{card}"
    );
    // A flag wins over the input's card.
    let out2 = tmp.path().join("out2");
    ok(run(
        &data,
        &out2,
        &["--card-meta", "license=mit", "--judge", "off"],
    ));
    let card = std::fs::read_to_string(out2.join("README.md")).unwrap();
    assert!(
        card.starts_with("---\nlicense: \"mit\"\nlanguage:\n- \"es\""),
        "{card}"
    );
    // A misspelt key is refused before anything runs, naming the keys.
    let bad = run(
        &data,
        &tmp.path().join("out3"),
        &["--card-meta", "licence=mit"],
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--card-meta licence=mit") && err.contains("license, language"),
        "{err}"
    );
}

#[test]
fn two_shards_merged_elsewhere_write_the_single_runs_card() {
    let tmp = tempfile::tempdir().unwrap();
    let run_here = |out: &Path, extra: &[&str]| {
        // From the checkout, with the input and model spelt relative to it, as a user types.
        let out = Command::new(BIN)
            .current_dir(repo())
            .args([
                "run",
                "--data",
                "assets/sample/data",
                "--model",
                "assets/model",
            ])
            .arg("--out")
            .arg(out)
            .args(["--device", "cpu", "--progress", "none", "-q"])
            .args(extra)
            .env_remove("VERISAMPLE_TEST_KILL_AT")
            .output()
            .unwrap();
        ok(out);
    };
    let (single, sh0, sh1) = (
        tmp.path().join("single"),
        tmp.path().join("sh0"),
        tmp.path().join("sh1"),
    );
    run_here(&single, &[]);
    run_here(&sh0, &["--shard", "0/2"]);
    run_here(&sh1, &["--shard", "1/2"]);
    // The merge runs in another folder: the card still names the input and the model's
    // config.json as the shards saw them.
    let merged = tmp.path().join("merged");
    ok(Command::new(BIN)
        .current_dir(tmp.path())
        .args(["merge", "-q", "--out"])
        .arg(&merged)
        .arg(&sh0)
        .arg(&sh1)
        .output()
        .unwrap());
    let card = std::fs::read_to_string(single.join("README.md")).unwrap();
    assert!(
        card.contains("    --data assets/sample/data \\\n"),
        "{card}"
    );
    assert!(card.contains("`Qwen2VLForConditionalGeneration`"), "{card}");
    assert_eq!(
        card,
        std::fs::read_to_string(merged.join("README.md")).unwrap()
    );
    for k in 0..3 {
        let f = format!("examples/OrandCar_rejected-{k}.png");
        assert_eq!(
            std::fs::read(single.join(&f)).unwrap(),
            std::fs::read(merged.join(&f)).unwrap()
        );
    }
}
