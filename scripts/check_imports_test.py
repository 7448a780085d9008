#!/usr/bin/env python3
"""Tests of scripts/check_imports.py on small made-up trees: which references it sees (`use`
declarations, fully-qualified paths in expressions, `::verisample_models::…`, `verisample::…`
in the binary) and what it leaves out (comments, strings, `#[cfg(test)]` modules).

Usage: python3 scripts/check_imports_test.py   (stdlib unittest; run by .ci/run)
"""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "check_imports.py"

DESIGN = """# design
| module | owns | may be imported by |
| --- | --- | --- |
| `models/` | m | `src/b.rs` |
| `src/a.rs` | a | `src/b.rs`, `src/main.rs` |
| `src/b.rs` | b | `src/c.rs` |
| `src/c.rs` | c | nothing |
| `src/main.rs` | the binary | nothing |
"""


def check(files: dict) -> tuple:
    """(exit status, output lines) of check_imports.py over a tree of `files`."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "docs").mkdir()
        (root / "docs" / "DESIGN.md").write_text(DESIGN)
        base = {"src/lib.rs": "pub mod a; pub mod b; pub mod c;", "src/c.rs": "pub fn h() {}"}
        for rel, text in {**base, **files}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (root / "models" / "src").mkdir(parents=True, exist_ok=True)
        (root / "kernels" / "src").mkdir(parents=True, exist_ok=True)
        run = subprocess.run(
            [sys.executable, str(SCRIPT), str(root), "--edges"], capture_output=True, text=True
        )
        return run.returncode, run.stdout.splitlines()


class CheckImports(unittest.TestCase):
    def test_allowed_use_passes(self):
        status, out = check({"src/b.rs": "use crate::a::f;", "src/a.rs": "pub fn f() {}"})
        self.assertEqual(status, 0, out)
        self.assertIn("  b -> a", out)

    def test_a_path_in_an_expression_is_an_import(self):
        status, out = check({"src/a.rs": "fn g() { crate::c::h(); }", "src/c.rs": "pub fn h() {}"})
        self.assertEqual(status, 1)
        self.assertIn("a -> c: not an allowed arrow of docs/DESIGN.md", out)

    def test_a_path_in_a_type_or_attribute_is_an_import(self):
        files = {"src/a.rs": "#[arg(default_value = crate::c::X)]\nstruct S(crate::c::T);"}
        self.assertIn("a -> c: not an allowed arrow of docs/DESIGN.md", check(files)[1])

    def test_leading_colons_before_a_workspace_crate(self):
        status, out = check({"src/a.rs": "fn g() { ::verisample_models::f(); }"})
        self.assertEqual(status, 1)
        self.assertIn("a -> models: not an allowed arrow of docs/DESIGN.md", out)

    def test_the_binary_names_the_library_verisample(self):
        out = check({"src/main.rs": "fn main() { verisample::c::run(); }"})[1]
        self.assertIn("main -> c: not an allowed arrow of docs/DESIGN.md", out)

    def test_file_cycle_through_inline_paths(self):
        files = {
            "src/b.rs": "mod x; mod y;",
            "src/b/x.rs": "pub fn f() { super::y::g() }",
            "src/b/y.rs": "pub fn g() { crate::b::x::f() }",
        }
        status, out = check(files)
        self.assertEqual(status, 1)
        self.assertIn("file cycle: src/b/x.rs <-> src/b/y.rs", out)

    def test_comments_strings_and_test_modules_are_left_out(self):
        files = {
            "src/a.rs": '// crate::c::x\nconst S: &str = "crate::c::y";\n'
            "#[cfg(test)]\nmod tests {\n    fn t() { crate::c::z(); }\n}\n"
            "#[cfg(test)]\nmod more;\n",
            "src/a/more.rs": "use crate::c::w;",
        }
        status, out = check(files)
        self.assertEqual(status, 0, out)

    def test_code_after_a_test_module_is_still_read(self):
        files = {"src/a.rs": "#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn g() { crate::c::h(); }\n"}
        self.assertIn("a -> c: not an allowed arrow of docs/DESIGN.md", check(files)[1])


if __name__ == "__main__":
    unittest.main()
