//! Each verifier's rule in words, with its constants, and a runnable Python reference
//! implementation of it: what the dataset card prints under "How a match is decided", so a
//! reader can recompute every string decision without this program.
//!
//! The Python follows the Rust code here operation for operation (contract §5's own Python for
//! `alnum` and the three candidates); `tests/card_python_reference.rs` runs it with `python3`
//! on a corpus of answers and holds its decisions equal to [`Verifier::verify_any`]'s.

use super::Verifier;

/// The part every verifier shares: contract §5's three candidates, several references
/// (any match), and an unusable reference never accepted.
const COMMON: &str = r#"import re

VARIANTS = ("whole", "first_line", "first_paragraph")


def candidates(pred):
    """Contract §5: the prediction whole, its first line, its first paragraph."""
    s = (pred or "").strip()
    lines = s.splitlines()
    first_line = lines[0] if lines else ""
    paragraph = []
    for line in lines:
        if line.strip() == "":
            break
        paragraph.append(line)
    return [pred or "", first_line, "\n".join(paragraph)]


def verify(compare, usable, pred, references):
    """The variant that passed ("whole", "first_line", "first_paragraph") or None.

    compare(candidate, reference) -> bool; usable(reference) -> bool. A list-valued answer
    gives several references: any usable one may match. When none is usable the item is
    never accepted by the string verifier (it goes to the judge).
    """
    refs = [r for r in (list(references) or [""]) if usable(r)]
    if not refs:
        return None
    for name, candidate in zip(VARIANTS, candidates(pred)):
        if any(compare(candidate, r) for r in refs):
            return name
    return None
"#;

const ALNUM: &str = r#"

def alnum_norm(x):
    return re.sub(r"[^a-z0-9]", "", (x or "").lower())


def alnum(pred, references):
    return verify(lambda c, r: alnum_norm(c) == alnum_norm(r),
                  lambda r: alnum_norm(r) != "", pred, references)
"#;

const EXACT: &str = r#"

def exact(pred, references):
    return verify(lambda c, r: c.strip() == r.strip(), lambda r: r.strip() != "", pred, references)
"#;

const MC_LETTER: &str = r#"

MC_WHOLE = re.compile(r"^(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Za-z]))[.:)]?\Z")
MC_CUE = re.compile(r"(?i:\b(?:answer|option|choice)\b)(?:\s+(?i:is))?\s*:?\s*"
                    r"(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Za-z]))([^A-Za-z0-9]|\Z)")
MC_LABEL = re.compile(r"^(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Z])[.:)])\s*\S")


def _letter(m):
    return next(g for g in m.groups()[:3] if g).upper()


def reference_letter(reference):
    t = (reference or "").strip()
    m = MC_WHOLE.match(t) or MC_LABEL.match(t)
    return _letter(m) if m else None


def extract_choice(text):
    t = (text or "").strip()
    m = MC_WHOLE.match(t)
    if m:
        return _letter(m)
    cued = None
    for m in MC_CUE.finditer(t):
        bracketed = m.group(1) or m.group(2)
        letter = next(g for g in m.groups()[:3] if g)
        after = m.group(4) or ""
        lower_ok = after == "" or all(ch in ".,;:!?)" for ch in after)
        if letter.islower() and not bracketed and not lower_ok:
            continue
        if cued is not None and cued != letter.upper():
            return None
        cued = letter.upper()
    if cued is not None:
        return cued
    m = MC_LABEL.match(t)
    return _letter(m) if m else None


def mc_letter(pred, references):
    def compare(c, r):
        letter = extract_choice(c)
        return letter is not None and letter == reference_letter(r)
    return verify(compare, lambda r: reference_letter(r) is not None, pred, references)
"#;

const NUMERIC: &str = r#"

NUMBER = re.compile(r"[+\-\u2212]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
                    r"(?:[eE][+\-]?\d+)?%?")


def numeric_parse(text):
    """(lower-cased stripped text, the one number it holds or None)."""
    t = (text or "").strip()
    lowered = t.lower()
    tokens = []
    for m in NUMBER.finditer(t):
        if t[:m.start()][-1:].isalnum() or t[m.end():][:1].isalnum():
            return lowered, None
        tokens.append(m.group())
    if len(tokens) != 1:
        return lowered, None
    token = tokens[0]
    percent = token.endswith("%")
    body = (token[:-1] if percent else token).replace(",", "").replace("+", "")
    body = body.replace("\u2212", "-")
    if not body.isascii():
        return lowered, None
    value = float(body)
    return lowered, value / 100 if percent else value


def numeric(pred, references, rel_tol):
    def compare(c, r):
        (ct, cv), (rt, rv) = numeric_parse(c), numeric_parse(r)
        if cv is not None and rv is not None:
            return cv == 0.0 if rv == 0.0 else abs(cv - rv) <= rel_tol * abs(rv)
        return rt != "" and ct == rt
    return verify(compare, lambda r: numeric_parse(r)[0] != "", pred, references)
"#;

const ANLS: &str = r#"

def anls_norm(s):
    return " ".join(s.split()).lower()


def levenshtein(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a):
        cur = [i + 1]
        for j, cb in enumerate(b):
            cur.append(min(prev[j] + (ca != cb), prev[j + 1] + 1, cur[j] + 1))
        prev = cur
    return prev[len(b)]


def anls_score(pred, reference, tau):
    a, b = anls_norm(pred), anls_norm(reference)
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    nl = levenshtein(a, b) / longest
    return 1.0 - nl if nl < tau else 0.0


def anls(pred, references, tau):
    return verify(lambda c, r: anls_score(c, r, tau) > 0.0,
                  lambda r: anls_norm(r) != "", pred, references)
"#;

/// The verifier's rule in words (Markdown), with its constants: what it compares and how, the
/// source of the rule, and when a reference is unusable for it.
pub fn rule_markdown(v: &Verifier) -> String {
    match *v {
        Verifier::Alnum => "`alnum` (the scene-text-recognition protocol of IIIT5K, SVT, IC13/15 \
            and ORAND-CAR): both sides lower-cased (Python's `str.lower()`), then every character \
            outside ASCII `a-z0-9` deleted, and the two compared for equality: `HELLO!`, `hello` \
            and `Hello.` are the same answer. No Unicode normalisation; full-width and other \
            non-ASCII digits are deleted. A reference that normalises to the empty string is \
            unusable."
            .to_string(),
        Verifier::Exact => "`exact`: byte equality after Python's `str.strip()` of both sides; \
            case-sensitive. An empty reference is unusable."
            .to_string(),
        Verifier::McLetter => "`mc_letter`: the option letter the answer chooses, extracted from \
            free text (the whole text one letter, bracketed or followed by `.`, `:` or `)`; else \
            a cue word `answer`/`option`/`choice` before a letter — all cued letters must agree —; \
            else the text opens with an option label), compared case-insensitively with the \
            reference's letter (the MMMU / MMBench / ScienceQA conventions, made fail-closed: a \
            letter inside a word never counts). A reference naming no letter is unusable."
            .to_string(),
        Verifier::Numeric { rel_tol } => format!(
            "`numeric` with relative tolerance {rel_tol} (ChartQA's relaxed accuracy, Masry et \
             al. 2022, is 0.05): each side's single number (thousands separators, a leading \
             `+`/`-`/`−`, scientific notation understood; a value ending in `%` divided by 100; \
             a number touching a letter or digit outside it is no number) must satisfy \
             `|pred − ref| ≤ {rel_tol} · |ref|` (a zero reference exactly); when either side \
             holds no single number the lower-cased stripped texts must be equal. An empty \
             reference is unusable."
        ),
        Verifier::Anls { threshold } => format!(
            "`anls` with τ = {threshold} (Biten et al., ICCV 2019; DocVQA): both sides \
             whitespace-collapsed and lower-cased (`\" \".join(s.split()).lower()`), \
             `NL = levenshtein(a, b) / max(len(a), len(b))` over characters, score `1 − NL` \
             when `NL < τ` else 0; accepted when the score is above 0. An empty reference is \
             unusable."
        ),
    }
}

/// The call of `verifier`'s Python function on `pred` and `references` (Python expressions),
/// e.g. `numeric(pred, references, 0.05)`.
pub fn python_call(v: &Verifier, pred: &str, references: &str) -> String {
    match *v {
        Verifier::Numeric { rel_tol } => format!("numeric({pred}, {references}, {rel_tol:?})"),
        Verifier::Anls { threshold } => format!("anls({pred}, {references}, {threshold:?})"),
        _ => format!("{}({pred}, {references})", v.name()),
    }
}

/// A runnable Python 3 module implementing `verifiers` (each function once, in the given
/// order, after the shared candidates and `verify`): call e.g. `alnum(pred, [reference])`; it
/// returns the variant that passed, as `accepted_by` records it, or `None`.
pub fn python_reference(verifiers: &[Verifier]) -> String {
    let mut s = String::from(COMMON);
    let mut written: Vec<&str> = Vec::new();
    for v in verifiers {
        if written.contains(&v.name()) {
            continue;
        }
        written.push(v.name());
        s.push_str(match v {
            Verifier::Alnum => ALNUM,
            Verifier::Exact => EXACT,
            Verifier::McLetter => MC_LETTER,
            Verifier::Numeric { .. } => NUMERIC,
            Verifier::Anls { .. } => ANLS,
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_is_written_once_and_only_those_asked_for() {
        let py = python_reference(&[
            Verifier::Numeric { rel_tol: 0.0 },
            Verifier::Alnum,
            Verifier::Numeric { rel_tol: 0.05 },
        ]);
        assert_eq!(py.matches("\ndef numeric(").count(), 1);
        assert_eq!(py.matches("\ndef alnum(").count(), 1);
        assert!(!py.contains("def anls(") && !py.contains("def mc_letter("));
        assert_eq!(
            python_call(&Verifier::Numeric { rel_tol: 0.05 }, "p", "[r]"),
            "numeric(p, [r], 0.05)"
        );
        assert_eq!(python_call(&Verifier::Alnum, "p", "[r]"), "alnum(p, [r])");
        assert!(rule_markdown(&Verifier::Anls { threshold: 0.5 }).contains("τ = 0.5"));
    }
}
