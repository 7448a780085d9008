//! Python `str` semantics that the reference verifier of contract §5 relies on: `isspace`,
//! `strip`, `splitlines` and the part of `lower` that survives an `[a-z0-9]` filter.
//!
//! The tables below are those of CPython 3.11 (Unicode 14.0). They were checked exhaustively
//! over every code point by `scripts/alnum_reference.py` (fixture
//! `tests/fixtures/alnum/tables.json`, test `tests/verify_alnum_differential.rs`).
//! They differ from Rust's standard library: `char::is_whitespace` lacks `\x1c`–`\x1f`, and
//! `str::lines` splits only on `\n` (and strips a `\r` before it).

/// Python's `str.isspace()` for one character: bidirectional class WS, B or S, or category
/// Zs (CPython `_PyUnicode_IsWhitespace`). Exactly 29 code points under Unicode 14.0.
pub fn py_isspace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{0B}'
            | '\u{0C}'
            | '\r'
            | '\u{1C}'..='\u{1F}'
            | ' '
            | '\u{85}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
    )
}

/// Python's `str.strip()` with no argument: removes leading and trailing [`py_isspace`]
/// characters. Returns a sub-slice of `s`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

/// Whether `c` ends a line for Python's `str.splitlines()`: `\n \r \v \f \x1c \x1d \x1e \x85
/// \u2028 \u2029` (`\r\n` counts as one boundary; see [`py_splitlines`]).
pub fn py_is_line_boundary(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\u{0B}'
            | '\u{0C}'
            | '\u{1C}'
            | '\u{1D}'
            | '\u{1E}'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// Python's `str.splitlines()` (without `keepends`): the lines of `s` without their line
/// ends; `\r\n` is one boundary; a trailing boundary does not open an empty last line, and
/// `""` has no lines. Returns sub-slices of `s`.
pub fn py_splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if py_is_line_boundary(c) {
            lines.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' {
                if let Some(&(j, '\n')) = chars.peek() {
                    end = j + 1;
                    chars.next();
                }
            }
            start = end;
        }
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// The characters that `c.lower()` in Python contributes to `re.sub(r"[^a-z0-9]", "", …)`:
/// ASCII letters lower-cased, ASCII digits kept, `İ` (U+0130, lower-cases to `i` + U+0307)
/// gives `i`, the Kelvin sign (U+212A) gives `k`; every other character gives nothing
/// (full-width, superscript and Arabic-Indic digits included; contract §5).
pub fn py_lower_ascii_alnum(c: char) -> Option<char> {
    match c {
        'a'..='z' | '0'..='9' => Some(c),
        'A'..='Z' => Some(c.to_ascii_lowercase()),
        '\u{130}' => Some('i'),
        '\u{212A}' => Some('k'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_uses_python_whitespace() {
        let cases = [
            ("  a b  ", "a b"),
            ("\x1c\x1f12\x1d", "12"),
            ("\u{3000}x\u{2029}", "x"),
            ("\u{200b}x", "\u{200b}x"),
            ("\u{180e}x", "\u{180e}x"),
            ("\u{feff}x\u{feff}", "\u{feff}x\u{feff}"),
            ("", ""),
            (" \t\n", ""),
        ];
        for (input, want) in cases {
            assert_eq!(py_strip(input), want, "{input:?}");
        }
    }

    #[test]
    fn splitlines_matches_python() {
        let cases: [(&str, &[&str]); 10] = [
            ("", &[]),
            ("\n", &[""]),
            ("a\n", &["a"]),
            ("a\r\nb", &["a", "b"]),
            ("a\r\rb", &["a", "", "b"]),
            ("a\n\r\nb", &["a", "", "b"]),
            ("a\x1cb\x1fc", &["a", "b\x1fc"]),
            ("a\u{85}b\u{2028}c\u{2029}", &["a", "b", "c"]),
            ("a\x0bb\x0cc", &["a", "b", "c"]),
            ("\r\n\r\n", &["", ""]),
        ];
        for (input, want) in cases {
            assert_eq!(py_splitlines(input), want, "{input:?}");
        }
    }

    #[test]
    fn lower_keeps_only_ascii_alnum() {
        let cases = [
            ('A', Some('a')),
            ('z', Some('z')),
            ('7', Some('7')),
            ('\u{130}', Some('i')),
            ('\u{212A}', Some('k')),
            ('\u{212B}', None),
            ('\u{FF11}', None),
            ('\u{B9}', None),
            ('\u{661}', None),
            ('\u{131}', None),
            ('_', None),
        ];
        for (c, want) in cases {
            assert_eq!(py_lower_ascii_alnum(c), want, "{c:?}");
        }
    }
}
