//! Table-driven tests of the routing decision, including the contract §8 rows.

use super::*;
use crate::family::ORAND_CAR_QUESTION;

fn qa(reference: &str) -> QaItem {
    QaItem {
        question: ORAND_CAR_QUESTION.to_string(),
        answer: reference.to_string(),
        ..QaItem::default()
    }
}

fn generation(raw: &str, finish: FinishReason) -> Generation {
    Generation {
        raw: raw.to_string(),
        finish,
        prefilled_open: true,
        format: AnswerFormat::AfterThink,
    }
}

fn run(
    reference: &str,
    raw: &str,
    finish: FinishReason,
    judge: Option<&str>,
    guard: bool,
) -> (Assessment, Routed) {
    let a = Assessment::new(&generation(raw, finish), &[reference], &Verifier::Alnum);
    let outcome = judge.map(JudgeOutcome::from_raw);
    let routed = route(&qa(reference), &a, outcome.as_ref(), guard);
    (a, routed)
}

fn rejected(routed: Routed) -> RejectedQa {
    match routed {
        Routed::Rejected(r) => r,
        other => panic!("expected rejected, got {other:?}"),
    }
}

fn accepted(routed: Routed) -> (AcceptedQa, AcceptedQa) {
    match routed {
        Routed::Accepted { think, nothink } => (think, nothink),
        other => panic!("expected accepted, got {other:?}"),
    }
}

#[test]
fn spec_section_8_rows_are_rejected() {
    use FinishReason::Stop;
    // Row 1: 4 characters that render as nothing.
    let blank = "\u{200B}\u{200B}\u{3164}\u{FEFF}";
    let (a, r) = run(
        "1432",
        &format!("the digits are faint\n</think>\n\n{blank}"),
        Stop,
        Some("WRONG"),
        true,
    );
    assert!(!a.needs_judge());
    let r = rejected(r);
    assert_eq!(
        (r.answer.as_str(), r.wrong_vlm.as_str(), r.reason.as_str()),
        ("1432", blank, "no_answer")
    );
    assert_eq!(r.wrong_vlm.chars().count(), 4);
    assert_eq!((r.judge_verdict, r.judge_raw), (None, None));

    // Row 2: the wrong field.
    let (a, r) = run(
        "11956",
        "payee line\n</think>\n\nM. Este",
        Stop,
        Some("WRONG"),
        true,
    );
    assert!(a.needs_judge());
    let r = rejected(r);
    assert_eq!(
        (r.wrong_vlm.as_str(), r.reason.as_str()),
        ("M. Este", "wrong_answer")
    );
    assert_eq!(r.judge_verdict.as_deref(), Some("WRONG"));

    // Row 3: ll.850 stays rejected even when the judge says CORRECT (number guard).
    let (a, r) = run(
        "11850",
        "amount\n</think>\n\nll.850",
        Stop,
        Some("<think>same</think>\nCORRECT"),
        true,
    );
    assert!(a.needs_judge());
    assert_eq!(a.verification.trials[0].normalised, "ll850");
    let r = rejected(r);
    assert_eq!(
        (r.wrong_vlm.as_str(), r.reason.as_str()),
        ("ll.850", "judge_numbers_disagree")
    );
    assert_eq!(r.judge_verdict.as_deref(), Some("CORRECT"));
    assert_eq!(r.judge_raw.as_deref(), Some("<think>same</think>\nCORRECT"));
}

#[test]
fn guard_off_lets_the_judge_promote() {
    let (_, r) = run(
        "11850",
        "x</think>\n\nll.850",
        FinishReason::Stop,
        Some("CORRECT"),
        false,
    );
    let (think, nothink) = accepted(r);
    assert_eq!(think.answer, "ll.850");
    assert_eq!(think.accepted_by, "judge");
    assert_eq!(think.judge_verdict.as_deref(), Some("CORRECT"));
    assert_eq!(nothink.think, None);
}

#[test]
fn verifier_accepts_with_model_text_not_reference() {
    let (a, r) = run(
        "Bridgestone",
        "it says bridgestone</think>\n\nbridgestone",
        FinishReason::Stop,
        None,
        true,
    );
    assert!(!a.needs_judge());
    let (think, nothink) = accepted(r);
    assert_eq!(think.answer, "bridgestone");
    assert_eq!(think.org_answer, "Bridgestone");
    assert_eq!(think.vlm_answer, "bridgestone");
    assert_eq!(think.think.as_deref(), Some("it says bridgestone"));
    assert_eq!(think.accepted_by, "verifier:alnum:whole");
    assert_eq!(
        (think.judge_verdict.as_ref(), think.judge_raw.as_ref()),
        (None, None)
    );
    assert_eq!(
        nothink,
        AcceptedQa {
            think: None,
            ..think
        }
    );
}

#[test]
fn decision_table() {
    use FinishReason::{Length, Stop};
    // (reference, raw, finish, judge raw, guard, expected reason or accepted_by, stored answer)
    type Case = (
        &'static str,
        &'static str,
        FinishReason,
        Option<&'static str>,
        bool,
        &'static str,
        &'static str,
    );
    let cases: [Case; 14] = [
        (
            "11850",
            "r</think>\n\n11850\n\nThe amount is 11.850",
            Stop,
            None,
            true,
            "verifier:alnum:first_line",
            "11850",
        ),
        (
            "11850",
            "r</think>\n11\n850\n\nsplit over two lines",
            Stop,
            None,
            true,
            "verifier:alnum:first_paragraph",
            "11\n850",
        ),
        (
            "11850",
            "r</think>11850",
            Length,
            None,
            true,
            "truncated",
            "11850",
        ),
        (
            "11850",
            "still reading the digits",
            Stop,
            None,
            true,
            "truncated",
            "",
        ),
        (
            "11850",
            "r</think>\n\n \u{3000}",
            Stop,
            Some("CORRECT"),
            true,
            "no_answer",
            "",
        ),
        (
            "11850",
            "r</think>11 850 dollars",
            Stop,
            Some("CORRECT"),
            true,
            "judge",
            "11 850 dollars",
        ),
        (
            "11850",
            "r</think>1185O",
            Stop,
            Some("WRONG"),
            true,
            "wrong_answer",
            "1185O",
        ),
        (
            "11850",
            "r</think>1185O",
            Stop,
            Some("**UNSURE**"),
            true,
            "judge_unsure",
            "1185O",
        ),
        (
            "11850",
            "r</think>1185O",
            Stop,
            Some("INCORRECT"),
            true,
            "judge_unsure",
            "1185O",
        ),
        (
            "11850",
            "r</think>1185O",
            Stop,
            None,
            true,
            "wrong_answer",
            "1185O",
        ),
        (
            "\u{4E2D}\u{6587}",
            "r</think>\u{4E2D}\u{6587}!",
            Stop,
            Some("UNSURE"),
            true,
            "unusable_reference",
            "\u{4E2D}\u{6587}!",
        ),
        (
            "\u{4E2D}\u{6587}",
            "r</think>??",
            Stop,
            None,
            true,
            "unusable_reference",
            "??",
        ),
        (
            "\u{4E2D}\u{6587}",
            "r</think>\u{4E2D}\u{6587}",
            Stop,
            Some("CORRECT"),
            true,
            "judge",
            "\u{4E2D}\u{6587}",
        ),
        (
            "1990",
            "r</think>1.990",
            Stop,
            Some("WRONG"),
            true,
            "verifier:alnum:whole",
            "1.990",
        ),
    ];
    for (reference, raw, finish, judge, guard, want, stored) in cases {
        let (_, routed) = run(reference, raw, finish, judge, guard);
        let (got, text) = match routed {
            Routed::Accepted { think, .. } => (think.accepted_by, think.answer),
            Routed::Rejected(r) => {
                assert_eq!(r.answer, reference, "{raw:?}");
                (r.reason, r.wrong_vlm)
            }
        };
        assert_eq!(
            (got.as_str(), text.as_str()),
            (want, stored),
            "{raw:?} vs {reference:?}"
        );
    }
}

#[test]
fn blank_table() {
    let cases = [
        ("", true),
        (" \t\n\x1c", true),
        ("\u{200B}\u{200D}\u{2060}\u{FEFF}\u{AD}", true),
        ("\u{3164}\u{2800}\u{FE0F}", true),
        (".", false),
        ("\u{4E2D}", false),
        ("0", false),
    ];
    for (text, want) in cases {
        assert_eq!(is_blank(text), want, "{text:?}");
    }
}

#[test]
fn reasons_round_trip() {
    for r in RejectReason::ALL {
        assert_eq!(RejectReason::parse(r.as_str()), Some(r));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            format!("\"{}\"", r.as_str())
        );
    }
    assert!(!RejectReason::Truncated.is_judged());
    assert!(RejectReason::UnusableReference.is_judged());
}

/// GLM-4.1V writes its final answer boxed inside `<answer>`: the verifier checks the box, not
/// the words around it; `vlm_answer` keeps the whole text after the reasoning.
#[test]
fn glm_boxed_answer_is_what_the_verifier_checks() {
    let raw = "<think>The amount reads one thousand four hundred thirty-two.</think>\
               <answer>It could be 1482 but it is <|begin_of_box|>1432<|end_of_box|></answer>";
    let glm = Generation {
        format: AnswerFormat::GlmBox,
        prefilled_open: false,
        ..generation(raw, FinishReason::Stop)
    };
    let a = Assessment::new(&glm, &["1432"], &Verifier::Alnum);
    assert_eq!(a.answer, "1432");
    assert!(!a.needs_judge());
    let (think, _) = accepted(route(&qa("1432"), &a, None, true));
    assert_eq!(think.answer, "1432");
    assert_eq!(
        think.vlm_answer,
        "<answer>It could be 1482 but it is <|begin_of_box|>1432<|end_of_box|></answer>"
    );
    assert_eq!(
        think.think.as_deref(),
        Some("The amount reads one thousand four hundred thirty-two.")
    );
    // Read as the text after the reasoning, the same output is wrong: the surrounding words
    // are not the amount.
    let plain = Generation {
        format: AnswerFormat::AfterThink,
        ..glm.clone()
    };
    let a = Assessment::new(&plain, &["1432"], &Verifier::Alnum);
    assert!(!a.verification.accepted());
    // A wrong box is rejected whatever the words around it say; the judge grades the box.
    let wrong = Generation {
        raw: raw.replace("<|begin_of_box|>1432", "<|begin_of_box|>1482"),
        ..glm
    };
    let a = Assessment::new(&wrong, &["1432"], &Verifier::Alnum);
    assert!(a.needs_judge());
    assert_eq!(a.judge_candidate(), "1482");
    let r = rejected(route(&qa("1432"), &a, None, true));
    assert_eq!(
        r.wrong_vlm,
        wrong.raw[wrong.raw.find("<answer>").unwrap()..]
    );
}
