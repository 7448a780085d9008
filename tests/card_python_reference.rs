//! The Python reference implementation the dataset card prints for each verifier
//! (`verisample::verifiers::python`) decides as the Rust verifiers do: `python3` runs it on a
//! corpus of hand-picked answers and of answers generated from a fixed seed, and every
//! decision — the variant that passed, or none — must equal [`Verifier::verify_any`]'s.

mod shared_data;

use std::io::Write as _;
use std::process::{Command, Stdio};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use verisample::verifiers::python::{python_call, python_reference};
use verisample::verifiers::Verifier;

/// Hand-picked (prediction, references) pairs: contract §5's and §8's examples and each
/// verifier's edge cases.
const CASES: &[(&str, &[&str])] = &[
    ("HELLO!", &["hello"]),
    ("\n\n11850\n\nThe amount is …", &["11850"]),
    ("ll.850", &["11850"]),
    ("M. Este", &["11956"]),
    ("\u{3000}   ", &["1432"]),
    ("1.990", &["1990"]),
    ("İstanbul", &["istanbul"]),
    ("\u{212A}ilo", &["kilo"]),
    ("１２３", &["123"]),
    ("?!", &["東京"]),
    ("東京", &["東京", "tokyo"]),
    ("B", &["B"]),
    ("(c)", &["C. a cat"]),
    ("The answer is B", &["B"]),
    ("the answer is a cat", &["A"]),
    ("Answer: b.", &["B"]),
    ("Option (C). Because", &["C"]),
    ("answer is B, no, the answer is C", &["B"]),
    ("B. dog", &["B"]),
    ("Because", &["B"]),
    ("42", &["42.0"]),
    ("  1,234.5 ", &["1234.5"]),
    ("\u{2212}7", &["-7"]),
    ("45%", &["0.45"]),
    ("The answer is 42.", &["42"]),
    ("between 3 and 5", &["3"]),
    ("x5", &["5"]),
    ("1e-05", &["0.00001"]),
    ("0", &["-0"]),
    ("104", &["100"]),
    ("twelve", &["Twelve"]),
    ("\u{0663}", &["3"]),
    ("Bridgestone", &["bridgestone"]),
    ("bridgestone ", &["bridgestone"]),
    ("bridgestone\nmore", &["bridgstone"]),
    ("The  Quick\tbrown", &["the quick brown"]),
    ("", &[""]),
    ("", &[]),
    (
        "line one\r\nline two\u{2028}three\n\nrest",
        &["line one\nline two\nthree"],
    ),
];

const ALPHABET: &[&str] = &[
    "a", "B", "k", "1", "0", "9", ".", ",", "%", "-", "+", "\u{2212}", " ", "\n", "\r\n",
    "\u{3000}", "\u{2028}", "\x1c", "(", ")", "[", "]", ":", "İ", "\u{212A}", "é", "東", "e",
    "answer ", "is ", "Option ", "A", "C", "The ", "\t",
];

fn random_text(rng: &mut rand_chacha::ChaCha20Rng) -> String {
    let len = (rng.next_u32() % 9) as usize;
    (0..len)
        .map(|_| ALPHABET[rng.next_u32() as usize % ALPHABET.len()])
        .collect()
}

fn verifiers() -> Vec<Verifier> {
    [
        "alnum",
        "exact",
        "mc_letter",
        "numeric",
        "relaxed",
        "anls",
        "anls:0.3",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect()
}

#[test]
fn the_cards_python_decides_as_the_rust_verifiers() {
    let mut cases: Vec<(String, Vec<String>)> = CASES
        .iter()
        .map(|(p, r)| (p.to_string(), r.iter().map(|s| s.to_string()).collect()))
        .collect();
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(42);
    for _ in 0..1500 {
        let refs: Vec<String> = (0..1 + rng.next_u32() % 2)
            .map(|_| random_text(&mut rng))
            .collect();
        // Half the predictions are a reference re-cased or with text around it, so that
        // every verifier accepts some of them.
        let pred = match rng.next_u32() % 4 {
            0 => refs[0].to_uppercase(),
            1 => format!("{}{}", refs[0], random_text(&mut rng)),
            _ => random_text(&mut rng),
        };
        cases.push((pred, refs));
    }
    let verifiers = verifiers();
    let mut program = python_reference(&verifiers);
    program.push_str("\nimport json, sys\ncases = json.load(sys.stdin)\nout = []\n");
    for v in &verifiers {
        program.push_str(&format!(
            "out.append([{} for pred, references in cases])\n",
            python_call(v, "pred", "references")
        ));
    }
    program.push_str("json.dump(out, sys.stdout)\n");
    let child = Command::new("python3")
        .args(["-c", &program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        shared_data::skip("no python3");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&cases).unwrap().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let python: Vec<Vec<Option<String>>> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(python.len(), verifiers.len());
    let mut accepted = 0;
    for (v, decisions) in verifiers.iter().zip(&python) {
        assert_eq!(decisions.len(), cases.len());
        for ((pred, refs), py) in cases.iter().zip(decisions) {
            let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
            let rust = v.verify_any(pred, &refs);
            let rust = rust
                .accepted_trial()
                .map(|t| t.variant.as_str().to_string());
            assert_eq!(
                &rust,
                py,
                "{} on {pred:?} against {refs:?}: Rust {rust:?}, the card's Python {py:?}",
                v.name()
            );
            accepted += usize::from(rust.is_some());
        }
    }
    // The corpus exercises acceptance and rejection alike, for every verifier.
    assert!(accepted > 200, "only {accepted} accepts");
    for (v, decisions) in verifiers.iter().zip(&python) {
        let n = decisions.iter().filter(|d| d.is_some()).count();
        assert!(n > 10 && n < cases.len(), "{}: {n} accepts", v.name());
    }
}
