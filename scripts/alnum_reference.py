#!/usr/bin/env python3
"""Python reference of the `alnum` string verifier (contract §5) and the generator of the
differential-test fixtures under tests/fixtures/alnum/.

The functions `alnum_norm`, `candidates` and `match_variant` below are contract §5 verbatim in
Python terms. The Rust implementation (src/verifiers/alnum.rs, src/verifiers/pytext.rs) must agree
with them on every pair of the generated corpus (tests/verify_alnum_differential.rs).

Usage (regenerates both fixture files, deterministically: fixed seed, no network):

    python3 scripts/alnum_reference.py tests/fixtures/alnum

Outputs:
  pairs.jsonl  one JSON array per line:
               [pred, gt, first_line, first_paragraph,
                norm_pred, norm_first_line, norm_first_paragraph, norm_gt, variant]
               where variant is "whole" | "first_line" | "first_paragraph" | null
               (the first candidate, in that order, whose alnum_norm equals alnum_norm(gt);
               the pure reference semantics, so an empty-normalising gt can match).
               To keep the file small, first_line is null when it equals pred, and
               first_paragraph is null when it equals first_line.
  tables.json  exhaustive per-code-point tables of this Python: str.isspace() set,
               str.splitlines() boundaries, and every non-ASCII code point whose
               lower() keeps something under the [a-z0-9] filter.
"""

import json
import random
import re
import sys
import unicodedata
from pathlib import Path

SEED = 20261130
N_PAIRS = 24000


# ---- contract §5, verbatim -------------------------------------------------------------------
def alnum_norm(x):
    return re.sub(r"[^a-z0-9]", "", (x or "").lower())


def candidates(pred):
    s = (pred or "").strip()
    lines = s.splitlines()
    first_line = lines[0] if lines else ""
    para = []
    for line in lines:
        if line.strip() == "":
            break
        para.append(line)
    first_paragraph = "\n".join(para)
    return [pred, first_line, first_paragraph]


VARIANTS = ["whole", "first_line", "first_paragraph"]


def match_variant(pred, gt):
    g = alnum_norm(gt)
    for name, cand in zip(VARIANTS, candidates(pred)):
        if alnum_norm(cand) == g:
            return name
    return None


# ---- corpus --------------------------------------------------------------------------------
ALL_CODEPOINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
SPACES = [chr(cp) for cp in range(0x110000) if chr(cp).isspace()]
LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
# Characters that look like whitespace or separators but are not str.isspace().
NOT_SPACES = ["\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\x1f", "\x00", "\x7f"]

SCRIPT_RANGES = [
    (0x0020, 0x007E),  # ASCII printable
    (0x00A0, 0x00FF),  # Latin-1
    (0x0100, 0x024F),  # Latin Extended-A/B
    (0x0250, 0x02FF),  # IPA, modifiers
    (0x0300, 0x036F),  # combining marks
    (0x0370, 0x03FF),  # Greek
    (0x0400, 0x04FF),  # Cyrillic
    (0x0530, 0x058F),  # Armenian
    (0x0590, 0x05FF),  # Hebrew
    (0x0600, 0x06FF),  # Arabic (incl. Arabic-Indic digits)
    (0x0900, 0x097F),  # Devanagari
    (0x0E00, 0x0E7F),  # Thai
    (0x10A0, 0x10FF),  # Georgian (has case)
    (0x13A0, 0x13FF),  # Cherokee (has case)
    (0x1E00, 0x1EFF),  # Latin Extended Additional (incl. ẞ)
    (0x1F00, 0x1FFF),  # Greek Extended (special casing)
    (0x2000, 0x206F),  # general punctuation, spaces
    (0x2070, 0x209F),  # superscripts and subscripts
    (0x2100, 0x214F),  # letterlike symbols (Kelvin, Angstrom)
    (0x2150, 0x218F),  # number forms, Roman numerals
    (0x2460, 0x24FF),  # enclosed alphanumerics
    (0x3000, 0x303F),  # CJK punctuation
    (0x3040, 0x30FF),  # kana
    (0x4E00, 0x4FFF),  # CJK ideographs (part)
    (0xAC00, 0xAC7F),  # Hangul (part)
    (0xFB00, 0xFB4F),  # ligatures (ﬀ, ﬁ)
    (0xFF00, 0xFFEF),  # full-width forms
    (0x10400, 0x1044F),  # Deseret (astral, has case)
    (0x1D400, 0x1D7FF),  # mathematical alphanumerics (𝐀, 𝟏)
    (0x1F300, 0x1F64F),  # emoji
]

LOOKALIKE_DIGITS = {
    str(d): [
        chr(0xFF10 + d),  # full-width
        chr(0x0660 + d),  # Arabic-Indic
        chr(0x06F0 + d),  # Extended Arabic-Indic
        chr(0x0966 + d),  # Devanagari
        chr(0x2080 + d),  # subscript
        chr(0x1D7CE + d),  # mathematical bold digit
        "⁰¹²³⁴⁵⁶⁷⁸⁹"[d],  # superscript
    ]
    for d in range(10)
}
LOOKALIKE_LETTERS = {
    "1": ["l", "I", "|", "i", "!"],
    "0": ["O", "o", "D", "Q"],
    "5": ["S", "s"],
    "2": ["Z", "z"],
    "8": ["B"],
    "6": ["b", "G"],
    "9": ["g", "q"],
    "k": ["\u212a", "K"],
    "i": ["\u0130", "I", "\u0131", "\u00ec"],
    "a": ["\u00c5", "\u212b", "\u0430", "A"],
    "s": ["\u017f", "S", "\u0455"],
}
SEPARATORS = [".", ",", " ", "-", "'", "_", "/", "\u00a0", "\u2009", "\u202f", "\u00b7", "\u066b", "\u066c", "·", ":", "\t"]
SPECIAL = ["\u0130", "\u212a", "\u212b", "\u1e9e", "\u00df", "\u0149", "\u01f0", "\u0390", "\u03a3",
           "\ufb00", "\ufb01", "\u2160", "\u24b6", "\u1f88", "\u0345", "\u0069\u0307"]
WORDS = ["bridgestone", "Bridgestone", "HELLO!", "hello", "Hello.", "M. Este", "ll.850", "11850", "1.990",
         "1990", "The amount is", "Answer:", "STOP", "Caf\u00e9", "na\u00efve", "\u0130stanbul", "\u212aelvin",
         "CUTE80", "IIIT5K", "Total-Text", "WordArt", "\u00a31,250.00", "$ 12,000", "N\u00ba 7", "x\u00b2"]


def rand_char(rng):
    r = rng.random()
    if r < 0.55:
        lo, hi = rng.choice(SCRIPT_RANGES)
        return chr(rng.randint(lo, hi))
    if r < 0.65:
        return rng.choice(SPACES + NOT_SPACES)
    if r < 0.72:
        return rng.choice(LINE_BREAKS)
    if r < 0.80:
        return rng.choice(SPECIAL)
    if r < 0.97:
        return rng.choice(LOOKALIKE_DIGITS[str(rng.randint(0, 9))])
    return chr(rng.choice(ALL_CODEPOINTS))


def rand_text(rng, max_len):
    return "".join(rand_char(rng) for _ in range(rng.randint(0, max_len)))


def digit_string(rng):
    return "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(1, 7)))


def disguise(rng, gt):
    """A rendering of gt that may or may not normalise to the same string."""
    out = []
    for ch in gt:
        r = rng.random()
        if r < 0.15 and ch in LOOKALIKE_DIGITS:
            out.append(rng.choice(LOOKALIKE_DIGITS[ch]))
        elif r < 0.25 and ch in LOOKALIKE_LETTERS:
            out.append(rng.choice(LOOKALIKE_LETTERS[ch]))
        elif r < 0.35:
            out.append(ch.upper() if rng.random() < 0.5 else ch)
        else:
            out.append(ch)
        if rng.random() < 0.2:
            out.append(rng.choice(SEPARATORS))
    return "".join(out)


def ws(rng, max_len=3):
    return "".join(rng.choice(SPACES + LINE_BREAKS) for _ in range(rng.randint(0, max_len)))


def multiline(rng, head):
    """head, then a line break, maybe a blank-looking line, and an explanation."""
    parts = [ws(rng), head]
    for _ in range(rng.randint(1, 3)):
        parts.append(rng.choice(LINE_BREAKS))
        if rng.random() < 0.5:
            parts.append(ws(rng, 2).replace("\n", " "))
            parts.append(rng.choice(LINE_BREAKS))
        parts.append(rng.choice([rand_text(rng, 8), rng.choice(WORDS), disguise(rng, head), ""]))
    parts.append(ws(rng))
    return "".join(parts)


def paragraph(rng):
    """gt broken over several non-blank lines, then a blank line and more text: only the first
    paragraph (or nothing) can match."""
    gt = digit_string(rng) + digit_string(rng)
    cuts = sorted(rng.sample(range(1, len(gt)), k=min(len(gt) - 1, rng.randint(1, 2))))
    pieces = [gt[i:j] for i, j in zip([0] + cuts, cuts + [len(gt)])]
    body = ""
    for k, piece in enumerate(pieces):
        if k:
            body += rng.choice(LINE_BREAKS)
        body += disguise(rng, piece) if rng.random() < 0.3 else piece
    blank = rng.choice(LINE_BREAKS) + ws(rng, 2).replace("\n", "") + rng.choice(LINE_BREAKS)
    return ws(rng) + body + blank + rng.choice(WORDS + [rand_text(rng, 6)]) + ws(rng), gt


def make_pair(rng):
    kind = rng.random()
    if kind < 0.20:
        gt = digit_string(rng)
        return disguise(rng, gt), gt
    if kind < 0.45:
        gt = digit_string(rng) if rng.random() < 0.6 else rng.choice(WORDS)
        head = disguise(rng, gt) if rng.random() < 0.7 else gt
        return multiline(rng, head), gt
    if kind < 0.60:
        gt = rand_text(rng, 8)
        return (rand_text(rng, 14) if rng.random() < 0.7 else disguise(rng, gt)), gt
    if kind < 0.70:
        w = rng.choice(WORDS)
        return disguise(rng, w), rng.choice(WORDS) if rng.random() < 0.3 else w
    if kind < 0.80:
        gt = rand_text(rng, 6)
        return ws(rng) + gt + ws(rng), gt
    if kind < 0.87:
        return ws(rng, 5), rng.choice(["", " ", "\u4e2d\u6587", "!!", digit_string(rng), "\u3000"])
    if kind < 0.90:
        gt = rng.choice(SPECIAL) + rng.choice(WORDS)
        return multiline(rng, gt.lower() if rng.random() < 0.5 else gt), gt
    if kind < 0.96:
        return paragraph(rng)
    sep = rng.choice(LINE_BREAKS)
    a, b = rand_text(rng, 5), rand_text(rng, 5)
    return a + sep + b, rng.choice([a, b, a + b])


def fixture_line(pred, gt):
    _, first_line, first_paragraph = candidates(pred)
    row = [
        pred,
        gt,
        None if first_line == pred else first_line,
        None if first_paragraph == first_line else first_paragraph,
        alnum_norm(pred),
        alnum_norm(first_line),
        alnum_norm(first_paragraph),
        alnum_norm(gt),
        match_variant(pred, gt),
    ]
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


def tables():
    lower_ascii = {}
    for cp in ALL_CODEPOINTS:
        if cp < 128:
            continue
        kept = alnum_norm(chr(cp))
        if kept:
            lower_ascii[str(cp)] = kept
    boundaries = [cp for cp in ALL_CODEPOINTS if len(("a" + chr(cp) + "b").splitlines()) == 2]
    return {
        "python": sys.version.split()[0],
        "unicode": unicodedata.unidata_version,
        "isspace": [cp for cp in ALL_CODEPOINTS if chr(cp).isspace()],
        "line_boundaries": boundaries,
        "crlf_is_one_boundary": ("a\r\nb".splitlines() == ["a", "b"]),
        "lower_keeps_ascii": lower_ascii,
    }


def main():
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/alnum")
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    fixed = [
        ("HELLO!", "hello"), ("Hello.", "hello"), ("\n\n11850\n\nThe amount is \u2026", "11850"),
        ("ll.850", "11850"), ("M. Este", "11956"), ("\u3000\u2002 \u200a", "1432"), ("bridgestone", "Bridgestone"),
        ("1.990", "1990"), ("\u0130", "i"), ("\u212a", "k"), ("\uff11\uff12", "12"), ("\u00b9\u00b2", "12"),
        ("\u0661\u0662", "12"), ("anything", "\u4e2d\u6587"), ("", ""), ("!!", "??"), ("a\x1cb", "a"),
        ("a\x1fb", "ab"), ("\x1f12\x1f", "12"), ("12\r\n\r\nx", "12"), ("12\u2028x", "12"), ("12\x85x", "12"),
        ("1\n2\n\n3", "12"), ("1\n2\n \n3", "12"), ("1\n2\n\x1f\n3", "12"), ("1\n2\n\u200b\n3", "12"),
    ]
    lines = [fixture_line(p, g) for p, g in fixed]
    while len(lines) < N_PAIRS:
        pred, gt = make_pair(rng)
        lines.append(fixture_line(pred, gt))
    (out_dir / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_dir / "tables.json").write_text(json.dumps(tables(), separators=(",", ":")) + "\n", encoding="utf-8")
    rows = [json.loads(line) for line in lines]
    counts = {}
    for row in rows:
        counts[row[8]] = counts.get(row[8], 0) + 1
    print(f"{len(rows)} pairs; variants: {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
