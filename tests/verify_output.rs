//! `verify` on hand-made outputs: a run routed by the real routing code verifies clean, and
//! each planted mistake is found at its split, row and qa index.

use sha2::{Digest, Sha256};
use verisample::family::ORAND_CAR_QUESTION;
use verisample::judge::JudgeOutcome;
use verisample::record::{AcceptedQa, ImageRef, OutputRow, QaItem, RejectedQa};
use verisample::route::{route, Assessment, FinishReason, Generation, Routed};
use verisample::verifiers::Verifier;
use verisample::verify_output::{recheck_family, FamilySplits, Problem, RecheckSettings};

const THINK: &str = "OrandCar_RS_think";
const NOTHINK: &str = "OrandCar_RS_nothink";
const REJECTED: &str = "OrandCar_rejected";

/// (reference, raw generation, finish, judge raw output)
type Item = (
    &'static str,
    &'static str,
    FinishReason,
    Option<&'static str>,
);

/// Rows of items: row 0 holds two items so qa indices above 0 are exercised.
fn rows() -> Vec<Vec<Item>> {
    use FinishReason::{Length, Stop};
    vec![
        vec![
            (
                "Bridgestone",
                "brand name\n</think>\n\nbridgestone",
                Stop,
                None,
            ),
            (
                "11850",
                "amount\n</think>\n\n11850\n\nThe amount is 11.850",
                Stop,
                None,
            ),
        ],
        vec![(
            "11850",
            "amount\n</think>\n\nll.850",
            Stop,
            Some("<think>same digits</think>\nCORRECT"),
        )],
        vec![(
            "11956",
            "payee\n</think>\n\nM. Este",
            Stop,
            Some("The candidate names a person.\nWRONG"),
        )],
        vec![(
            "1432",
            "faint\n</think>\n\n\u{200B}\u{200B}\u{200B}\u{200B}",
            Stop,
            None,
        )],
        vec![(
            "2250",
            "amount\n</think>\n\n2 250 dollars",
            Stop,
            Some("**CORRECT**"),
        )],
        vec![("60", "still reading the first digit", Length, None)],
        vec![("100", "amount\n</think>\n\n10O", Stop, Some("UNSURE"))],
    ]
}

struct Splits {
    think: Vec<OutputRow<AcceptedQa>>,
    nothink: Vec<OutputRow<AcceptedQa>>,
    rejected: Vec<OutputRow<RejectedQa>>,
}

fn out_row<Q>(i: usize, qa: Vec<Q>) -> OutputRow<Q> {
    let bytes = format!("image-{i}").into_bytes();
    OutputRow {
        image_sha256: hex::encode(Sha256::digest(&bytes)),
        image: ImageRef {
            bytes: Some(bytes),
            path: Some(format!("train/a_car_{i:06}.jpg")),
        },
        qa,
        clean_meta: "{}".into(),
        carried: None,
    }
}

/// Routes every item with the pipeline's own functions (guard on).
fn routed_run() -> Splits {
    let mut s = Splits {
        think: vec![],
        nothink: vec![],
        rejected: vec![],
    };
    for (i, items) in rows().into_iter().enumerate() {
        let (mut t, mut n, mut r) = (vec![], vec![], vec![]);
        for (reference, raw, finish, judge) in items {
            let qa = QaItem {
                question: ORAND_CAR_QUESTION.into(),
                answer: reference.into(),
                ..QaItem::default()
            };
            let generation = Generation {
                raw: raw.into(),
                finish,
                prefilled_open: true,
                format: Default::default(),
            };
            let a = Assessment::new(&generation, &[reference], &Verifier::Alnum);
            let outcome = judge
                .filter(|_| a.needs_judge())
                .map(JudgeOutcome::from_raw);
            match route(&qa, &a, outcome.as_ref(), true) {
                Routed::Accepted { think, nothink } => {
                    t.push(think);
                    n.push(nothink);
                }
                Routed::Rejected(rej) => r.push(rej),
            }
        }
        if !t.is_empty() {
            s.think.push(out_row(i, t));
            s.nothink.push(out_row(i, n));
        }
        if !r.is_empty() {
            s.rejected.push(out_row(i, r));
        }
    }
    s
}

fn verify(s: &Splits, settings: &RecheckSettings) -> verisample::verify_output::RecheckReport {
    let splits = FamilySplits {
        family: "OrandCar",
        think: &s.think,
        nothink: &s.nothink,
        rejected: &s.rejected,
    };
    recheck_family(&splits, settings)
}

fn guard_on() -> RecheckSettings {
    RecheckSettings::from_args(true, &[]).expect("default settings")
}

/// Asserts the report holds `problem` at `(split, row, qa)`.
fn assert_found(
    s: &Splits,
    settings: &RecheckSettings,
    split: &str,
    row: usize,
    qa: Option<usize>,
    problem: Problem,
) {
    let report = verify(s, settings);
    assert!(
        report
            .disagreements
            .iter()
            .any(|d| d.split == split && d.row == row && d.qa == qa && d.problem == problem),
        "{problem:?} at {split} row {row} qa {qa:?} not found in:\n{}",
        report.to_human(0)
    );
}

#[test]
fn routed_run_verifies_clean() {
    let s = routed_run();
    // Rows 0 (two items) and 4 accepted; rows 1, 2, 3, 5, 6 rejected.
    assert_eq!(
        (s.think.len(), s.nothink.len(), s.rejected.len()),
        (2, 2, 5)
    );
    assert_eq!(s.think[0].qa[1].accepted_by, "verifier:alnum:first_line");
    assert_eq!(s.think[1].qa[0].accepted_by, "judge");
    let reasons: Vec<&str> = s.rejected.iter().map(|r| r.qa[0].reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "judge_numbers_disagree",
            "wrong_answer",
            "no_answer",
            "truncated",
            "judge_unsure"
        ]
    );
    assert_eq!(guard_on(), RecheckSettings::default());
    assert!(RecheckSettings::default().number_guard);
    let report = verify(&s, &guard_on());
    assert!(report.is_clean(), "{}", report.to_human(0));
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("json");
    assert_eq!(json["disagreements"].as_array().map(Vec::len), Some(0));
    assert_eq!(report.entries.get(THINK), Some(&3));
    assert_eq!(report.entries.get(REJECTED), Some(&5));
    assert_eq!(report.taken_as_stored, 1);
}

#[test]
fn finds_reference_in_accepted_answer_slot() {
    let mut s = routed_run();
    assert_eq!(s.think[0].qa[0].answer, "bridgestone");
    s.think[0].qa[0].answer = "Bridgestone".into();
    assert_found(
        &s,
        &guard_on(),
        THINK,
        0,
        Some(0),
        Problem::AnswerNotModelText,
    );
    // Same in the nothink split, for a judge-accepted entry.
    let mut s = routed_run();
    s.nothink[1].qa[0].answer = "2250".into();
    assert_found(
        &s,
        &guard_on(),
        NOTHINK,
        1,
        Some(0),
        Problem::AnswerNotModelText,
    );
}

#[test]
fn finds_wrong_split() {
    // An accepted item stored as rejected.
    let mut s = routed_run();
    let e = s.think[0].qa.remove(1);
    s.nothink[0].qa.remove(1);
    s.rejected[0].qa.push(RejectedQa {
        question: e.question,
        answer: e.org_answer,
        wrong_vlm: e.vlm_answer,
        reason: "wrong_answer".into(),
        judge_verdict: None,
        judge_raw: None,
    });
    assert_found(&s, &guard_on(), REJECTED, 0, Some(1), Problem::WrongSplit);
    // A rejected item stored as accepted by the judge.
    let mut s = routed_run();
    let r = s.rejected[1].qa[0].clone();
    let planted = AcceptedQa {
        question: r.question,
        answer: r.wrong_vlm.clone(),
        org_answer: r.answer,
        vlm_answer: r.wrong_vlm,
        think: None,
        accepted_by: "judge".into(),
        judge_verdict: r.judge_verdict,
        judge_raw: r.judge_raw,
    };
    // Same image as the rejected row it was copied from (image 2).
    s.nothink.push(out_row(2, vec![planted]));
    assert_found(&s, &guard_on(), NOTHINK, 2, Some(0), Problem::WrongSplit);
    assert_found(
        &s,
        &guard_on(),
        REJECTED,
        1,
        Some(0),
        Problem::AcceptedAndRejected,
    );
}

#[test]
fn finds_changed_verdicts() {
    // Verdict changed, raw text left: M. Este WRONG -> CORRECT.
    let mut s = routed_run();
    assert_eq!(s.rejected[1].qa[0].wrong_vlm, "M. Este");
    s.rejected[1].qa[0].judge_verdict = Some("CORRECT".into());
    assert_found(
        &s,
        &guard_on(),
        REJECTED,
        1,
        Some(0),
        Problem::VerdictMismatch,
    );
    assert_found(&s, &guard_on(), REJECTED, 1, Some(0), Problem::WrongSplit);
    // Verdict and raw changed together: the stored reason no longer follows.
    let mut s = routed_run();
    s.rejected[4].qa[0].judge_verdict = Some("WRONG".into());
    s.rejected[4].qa[0].judge_raw = Some("WRONG".into());
    assert_found(&s, &guard_on(), REJECTED, 4, Some(0), Problem::WrongReason);
    // A lower-case verdict word is not a verdict.
    let mut s = routed_run();
    s.rejected[1].qa[0].judge_verdict = Some("wrong".into());
    assert_found(&s, &guard_on(), REJECTED, 1, Some(0), Problem::UnknownValue);
}

#[test]
fn number_guard_setting_is_applied() {
    let s = routed_run();
    let off = RecheckSettings::from_args(false, &[]).expect("settings");
    // With the guard off, the ll.850 CORRECT would have been accepted.
    assert_found(&s, &off, REJECTED, 0, Some(0), Problem::WrongSplit);
    // A judge-accepted ll.850 under guard on is a wrong split.
    let mut s = routed_run();
    let r = s.rejected[0].qa[0].clone();
    for split in [&mut s.think, &mut s.nothink] {
        split[1].qa.push(AcceptedQa {
            question: r.question.clone(),
            answer: r.wrong_vlm.clone(),
            org_answer: r.answer.clone(),
            vlm_answer: r.wrong_vlm.clone(),
            think: None,
            accepted_by: "judge".into(),
            judge_verdict: r.judge_verdict.clone(),
            judge_raw: r.judge_raw.clone(),
        });
    }
    assert_found(&s, &guard_on(), THINK, 1, Some(1), Problem::WrongSplit);
}

#[test]
fn finds_field_level_mistakes() {
    let settings = guard_on();
    let mut s = routed_run();
    s.think[0].qa[1].accepted_by = "verifier:alnum:whole".into();
    assert_found(&s, &settings, THINK, 0, Some(1), Problem::WrongAcceptedBy);

    let mut s = routed_run();
    s.rejected[2].qa[0].reason = "wrong_answer".into();
    assert_found(&s, &settings, REJECTED, 2, Some(0), Problem::WrongReason);

    let mut s = routed_run();
    s.rejected[2].qa[0].judge_verdict = Some("WRONG".into());
    assert_found(&s, &settings, REJECTED, 2, Some(0), Problem::JudgeFields);

    let mut s = routed_run();
    s.nothink[0].qa[0].think = Some("brand name".into());
    assert_found(&s, &settings, NOTHINK, 0, Some(0), Problem::ThinkField);

    let mut s = routed_run();
    s.nothink[0].qa.remove(0);
    assert_found(
        &s,
        &settings,
        THINK,
        0,
        Some(0),
        Problem::ThinkNothinkMismatch,
    );

    let mut s = routed_run();
    s.rejected[3].image_sha256 = "00".repeat(32);
    assert_found(&s, &settings, REJECTED, 3, None, Problem::ImageHashMismatch);

    let mut s = routed_run();
    s.rejected[3].qa.clear();
    assert_found(&s, &settings, REJECTED, 3, None, Problem::EmptyRow);
}

#[test]
fn a_run_with_reasoning_off_has_no_think_split_to_pair() {
    // With reasoning off a run writes `_RS_nothink` and `_rejected` only.
    let mut s = routed_run();
    let think = std::mem::take(&mut s.think);
    let off = RecheckSettings {
        thinking: false,
        ..guard_on()
    };
    let report = verify(&s, &off);
    assert!(report.is_clean(), "{}", report.to_human(0));
    // Read as a reasoning-on output, the nothink entries are answers given without a
    // reasoning trace, which a run accepts into `_RS_nothink` only: no disagreement.
    let report = verify(&s, &guard_on());
    assert!(report.is_clean(), "{}", report.to_human(0));
    // A think split in a reasoning-off output is itself a disagreement.
    s.think = think;
    assert_found(&s, &off, THINK, 1, Some(0), Problem::ThinkNothinkMismatch);
}
