//! Table-driven tests of the judge prompt, verdict parser and number guard.

use super::*;

/// `JUDGE_TEMPLATE` of scripts/tiny_tokenizer.py, the text the bundled judge was trained on,
/// as Python's `json.dumps` printed it (`python3 -c "import json, tiny_tokenizer as t;
/// print(json.dumps(t.JUDGE_TEMPLATE))"` in scripts/).
const TRAINED_JUDGE_TEMPLATE: &str = "You are grading an answer to a question about an image. You cannot see the image. Do not solve the question yourself: only compare the candidate answer with the reference answer.\n\nQuestion: {question}\nReference answer: {reference}\nCandidate answer: {candidate}\n\nThe candidate is CORRECT if it gives the same answer as the reference, ignoring case, spacing, punctuation and formatting. Numbers must agree exactly: every digit must match. It is WRONG if it gives a different answer. Say UNSURE only if the reference itself is empty, unreadable or ambiguous.\nReply with one word: CORRECT, WRONG or UNSURE.";

#[test]
fn template_is_byte_identical() {
    // Catches: any edit of the template (a word, a space, a trailing newline) that makes the
    // judge see a prompt it was not trained on.
    assert_eq!(JUDGE_TEMPLATE, TRAINED_JUDGE_TEMPLATE);
    // The prompt is the trained one with the three fields substituted (Python `str.replace`).
    assert_eq!(
        build_judge_prompt("Q?", "11850", "ll.850"),
        "You are grading an answer to a question about an image. You cannot see the image. Do not solve the question yourself: only compare the candidate answer with the reference answer.\n\nQuestion: Q?\nReference answer: 11850\nCandidate answer: ll.850\n\nThe candidate is CORRECT if it gives the same answer as the reference, ignoring case, spacing, punctuation and formatting. Numbers must agree exactly: every digit must match. It is WRONG if it gives a different answer. Say UNSURE only if the reference itself is empty, unreadable or ambiguous.\nReply with one word: CORRECT, WRONG or UNSURE."
    );
}

#[test]
fn prompt_substitutes_in_one_pass() {
    let p = build_judge_prompt("What is written?", "11850", "{reference} {question} {x}");
    assert!(p.contains("Question: What is written?\nReference answer: 11850\nCandidate answer: {reference} {question} {x}\n\n"));
    assert!(!p.contains("{candidate}"));
    let q = build_judge_prompt("{candidate}", "{question}", "c");
    assert!(
        q.contains("Question: {candidate}\nReference answer: {question}\nCandidate answer: c\n")
    );
    assert_eq!(
        build_judge_prompt("", "", "").len(),
        JUDGE_TEMPLATE.len() - "{question}{reference}{candidate}".len()
    );
}

/// Realistic judge outputs: (raw output, expected verdict, what it exercises).
const CASES: &[(&str, Verdict, &str)] = &[
    ("CORRECT", Verdict::Correct, "bare word"),
    ("WRONG", Verdict::Wrong, "bare word"),
    ("UNSURE", Verdict::Unsure, "bare word"),
    ("CORRECT\n", Verdict::Correct, "trailing newline"),
    ("  **CORRECT**  ", Verdict::Correct, "markdown bold"),
    ("Verdict: WRONG.", Verdict::Wrong, "label and full stop"),
    ("`UNSURE`", Verdict::Unsure, "code span"),
    ("INCORRECT", Verdict::Unsure, "INCORRECT is not CORRECT"),
    ("The candidate is INCORRECT.", Verdict::Unsure, "INCORRECT inside a sentence"),
    ("Correct", Verdict::Unsure, "not upper-case"),
    ("correct.", Verdict::Unsure, "lower-case"),
    ("CORRECTLY graded", Verdict::Unsure, "prefix of a longer word"),
    ("CORRECT_ANSWER", Verdict::Unsure, "underscore joins words"),
    ("CORRECT or WRONG", Verdict::Unsure, "two different verdict words"),
    ("CORRECT, WRONG or UNSURE", Verdict::Unsure, "the instruction echoed"),
    ("The answer is CORRECT. Final: CORRECT", Verdict::Correct, "same word twice"),
    ("The candidate reads 'll.850', the reference 11850.\nThe digits differ.\nWRONG", Verdict::Wrong, "explanation then verdict"),
    ("At first glance this looks CORRECT, but 1 and l differ.\n\nWRONG", Verdict::Wrong, "earlier quoted verdict ignored"),
    ("WRONG\n\nOn reflection the amounts agree.", Verdict::Unsure, "last line has no verdict"),
    ("CORRECT\nWRONG", Verdict::Wrong, "last non-empty line wins"),
    ("WRONG\n \u{3000}\n\x1c", Verdict::Wrong, "trailing Python-whitespace lines"),
    ("CORRECT\u{2028}UNSURE", Verdict::Unsure, "U+2028 is a line boundary"),
    ("<think>\nThe candidate says 11850 and the reference says 11850. That would be CORRECT.\n</think>\n\nCORRECT", Verdict::Correct, "think block then verdict"),
    ("<think>\nMaybe CORRECT? No: 11956 vs M. Este differ.\n</think>\nWRONG", Verdict::Wrong, "verdict quoted in think differs"),
    ("<think>\nThey match, so CORRECT.\n</think>\n\n", Verdict::Unsure, "nothing after think"),
    ("The reference is 1432 and the candidate is empty.\n</think>\n\nWRONG", Verdict::Wrong, "only closing tag (pre-filled open)"),
    ("<think>\nThe digits are the same, so the answer is CORRECT", Verdict::Unsure, "unterminated think"),
    ("<think>a</think>CORRECT</think>\nWRONG", Verdict::Wrong, "text after the last closing tag"),
    ("Candidate answer: CORRECT\nReference answer: 42\nWRONG", Verdict::Wrong, "candidate text CORRECT echoed back"),
    ("Candidate answer: CORRECT", Verdict::Correct, "an echo alone cannot be told from a verdict"),
    ("The candidate is NOT CORRECT.", Verdict::Unsure, "negated verdict fails closed"),
    ("It isn't WRONG", Verdict::Unsure, "negated with n't"),
    ("Not **CORRECT**", Verdict::Unsure, "negation across markdown"),
    ("Answer: UNSURE (the reference is empty)", Verdict::Unsure, "UNSURE with reason"),
    ("", Verdict::Unsure, "empty output"),
    ("   \n\n  ", Verdict::Unsure, "whitespace only"),
    ("I cannot grade this.", Verdict::Unsure, "no verdict word"),
    ("✅ CORRECT", Verdict::Correct, "emoji before"),
    ("CORRECT✅", Verdict::Correct, "emoji after"),
    ("ÉCORRECT", Verdict::Unsure, "non-ASCII letter joins the word"),
    ("Final verdict - WRONG!", Verdict::Wrong, "dash and exclamation"),
];

#[test]
fn verdict_table() {
    assert!(CASES.len() >= 30);
    for &(raw, want, what) in CASES {
        assert_eq!(parse_verdict(raw), want, "{what}: {raw:?}");
    }
}

#[test]
fn outcome_keeps_raw() {
    let out = JudgeOutcome::from_raw("<think>x</think>\nWRONG");
    assert_eq!(out.verdict, Verdict::Wrong);
    assert_eq!(out.raw, "<think>x</think>\nWRONG");
}

#[test]
fn prefilled_think_is_kept_in_raw() {
    // Cut off while reasoning: the last line of the reasoning must not count.
    let cut = JudgeOutcome::from_generation("The digits match, so CORRECT", true);
    assert_eq!(cut.verdict, Verdict::Unsure);
    assert_eq!(cut.raw, "<think>\nThe digits match, so CORRECT");
    assert_eq!(parse_verdict(&cut.raw), Verdict::Unsure);
    let done = JudgeOutcome::from_generation("1 vs l differ.\n</think>\n\nWRONG", true);
    assert_eq!(done.verdict, Verdict::Wrong);
    assert_eq!(done.raw, "<think>\n1 vs l differ.\n</think>\n\nWRONG");
    let plain = JudgeOutcome::from_generation("CORRECT", false);
    assert_eq!(
        (plain.verdict, plain.raw.as_str()),
        (Verdict::Correct, "CORRECT")
    );
}

#[test]
fn number_guard_table() {
    // (candidate, reference, disagree)
    let cases = [
        ("ll.850", "11850", true),
        ("11.850", "11850", false),
        ("$11,850.00", "11850", true),
        ("M. Este", "11956", false),
        ("twelve", "12", false),
        ("12", "twelve", false),
        ("\u{FF11}\u{FF12}", "12", false),
        ("1990", "1.990", false),
        ("1 990", "1990", false),
        ("", "1432", false),
    ];
    for (cand, reference, want) in cases {
        assert_eq!(
            numbers_disagree(cand, reference),
            want,
            "{cand:?} vs {reference:?}"
        );
    }
    assert!(guard_vetoes(Verdict::Correct, "ll.850", "11850", true));
    assert!(!guard_vetoes(Verdict::Correct, "ll.850", "11850", false));
    assert!(!guard_vetoes(Verdict::Wrong, "ll.850", "11850", true));
}

#[test]
fn calibration_rate() {
    let mut c = Calibration::default();
    assert_eq!(c.agreement(), None);
    for _ in 0..59 {
        c.record(Verdict::Correct);
    }
    c.record(Verdict::Unsure);
    assert_eq!((c.agreed, c.judged), (59, 60));
    assert_eq!(c.agreement(), Some(59.0 / 60.0));
}

#[test]
fn stored_words_round_trip() {
    for v in Verdict::ALL {
        assert_eq!(Verdict::parse_stored(v.as_str()), Some(v));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            format!("\"{}\"", v.as_str())
        );
    }
    assert_eq!(Verdict::parse_stored("correct"), None);
}

#[test]
fn the_judge_sees_every_reference() {
    // One reference is inserted as it is (the prompt the judge was trained on).
    assert_eq!(reference_text(&["11850"]), "11850");
    // Several: each quoted, so a reference holding " or " or a quote stays one reference.
    assert_eq!(
        reference_text(&["black", "Black", "a \"b\" or c"]),
        r#""black" or "Black" or "a \"b\" or c""#
    );
    assert_eq!(reference_text(&[]), "");
    let p = build_judge_prompt("Colour?", &reference_text(&["black", "dark"]), "Black.");
    assert!(p.contains("\nReference answer: \"black\" or \"dark\"\nCandidate answer: Black.\n"));
}
