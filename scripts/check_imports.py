#!/usr/bin/env python3
"""Check the module imports of the Rust code against the allowed arrows of docs/DESIGN.md.

The table of docs/DESIGN.md has one row per module: its name in backticks in the first column
(`src/engine/`, `src/judge.rs`, `models/` ...) and, in the last column, the modules that may
import it (backticked names, or `any`). This script reads every `.rs` file of the workspace's
libraries and binary (`#[cfg(test)]` modules inline or in their own files, `tests/`, comments
and strings left out), collects each reference to another module (`use` declarations, groups
expanded, and fully-qualified paths anywhere in the code: `crate::x::y` in an expression, a
type or an attribute, `super::` paths that leave the module, `verisample_models` and
`verisample_kernels` with or without leading `::`, `verisample::` in the binary) and fails when

- an edge is not allowed by the table (or a module is missing from it), or
- the modules import each other in a cycle, or
- the files import each other in a cycle (every such path resolved to the deepest file).

Usage: python3 scripts/check_imports.py [REPO_ROOT] [--edges]   (exit 1 with one line per
problem; `--edges` also lists the module arrows). Pure standard library; runs in CI before
`cargo test` (.ci/run); its own tests are scripts/check_imports_test.py.
"""

import re
import sys
from pathlib import Path

CRATES = {"verisample_models": "models", "verisample_kernels": "kernels"}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text: str) -> str:
    """Drop comments, string and char literals, then every `#[cfg(test)]` module: its body
    up to the matching brace, or its `mod x;` declaration (the file it names is a test file,
    skipped by `main`)."""
    return strip_test_modules(strip_literals(text))


def strip_test_modules(code: str) -> str:
    """`code` (comments and literals already gone) without its `#[cfg(test)]` modules."""
    head = re.compile(r"#\[cfg\((?:all\()?test[^\]]*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*([{;])")
    while True:
        m = head.search(code)
        if m is None:
            return code
        end = m.end()
        if m.group(1) == "{":
            depth = 1
            while end < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[end], 0)
                end += 1
        code = code[: m.start()] + code[end:]


def strip_literals(text: str) -> str:
    """`text` without comments, and with each string literal as `""` and char literal gone."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            j = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if j < 0 else j + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(rel: Path) -> str:
    """The table's module of a file: `models`/`kernels` for those crates, else the top-level
    module under src/ (`src/engine/step.rs` -> `engine`, `src/judge.rs` -> `judge`)."""
    parts = rel.parts
    if parts[0] in ("models", "kernels"):
        return parts[0]
    name = parts[1]
    return name[:-3] if name.endswith(".rs") else name


def module_path(rel: Path) -> list:
    """Rust module path of a file inside its crate (`src/pipeline/mod.rs` -> [pipeline])."""
    parts = list(rel.parts[rel.parts.index("src") + 1 :])
    last = parts.pop()
    if last not in ("mod.rs", "lib.rs", "main.rs"):
        parts.append(last[:-3])
    return parts


def crate_root(rel: Path) -> Path:
    return Path(*rel.parts[: rel.parts.index("src") + 1])


def resolve(root: Path, src: Path, segs: list):
    """The deepest file of `segs` (a module path in the crate at `src`) that exists."""
    for k in range(len(segs), 0, -1):
        base = src.joinpath(*segs[:k])
        for cand in (base.with_suffix(".rs"), base / "mod.rs"):
            if (root / cand).is_file():
                return cand
    return None


def use_paths(code: str):
    """Every path of every `use` declaration, `{a, b::{c}}` groups expanded."""

    def expand(prefix: str, body: str):
        depth, start, items = 0, 0, []
        for i, c in enumerate(body):
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == "," and depth == 0:
                items.append(body[start:i])
                start = i + 1
        items.append(body[start:])
        for item in (x.strip() for x in items):
            if not item:
                continue
            m = re.match(r"^([\w:]*?)::\{([\s\S]*)\}$", item)
            if m:
                yield from expand(prefix + m.group(1) + "::", m.group(2))
            else:
                yield prefix + re.split(r"\s+as\s+", item)[0]

    for m in re.finditer(r"\buse\s+([^;]+);", code):
        body = re.sub(r"\s+", "", m.group(1))
        m2 = re.match(r"^([\w:]*?)::\{([\s\S]*)\}$", body)
        if m2:
            yield from expand(m2.group(1) + "::", m2.group(2))
        else:
            yield body


def absolute(path: str, here: list):
    """(crate, segments) of a path seen in the file with module path `here`, or None."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] in CRATES:
        return CRATES[segs[0]], segs[1:]
    if segs[0] == "crate" or (segs[0] == "verisample" and here == []):
        return None, segs[1:]  # `verisample::` is the library, seen from src/main.rs
    if segs[0] in ("super", "self"):
        base = list(here)
        while segs and segs[0] in ("super", "self"):
            if segs.pop(0) == "super":
                base = base[:-1]
        return None, base + segs
    return None


def referenced_paths(code: str):
    """Every module path `code` names: each path of each `use` declaration (groups expanded)
    and each fully-qualified path anywhere else (`crate::x::y` in an expression, a type or
    an attribute, `::verisample_models::…`, `verisample::…` in the binary)."""
    yield from use_paths(code)
    code = re.sub(r"(?<![\w:])::(?=" + "|".join(CRATES) + r"\b)", "", code)
    for m in re.finditer(
        r"(?<![\w:$])((?:\$?crate|super|self|verisample_models|verisample_kernels|verisample)"
        r"(?:::" + IDENT + r")*)",
        code,
    ):
        yield m.group(1).lstrip("$")


def test_module_files(rel: Path, code: str):
    """The files of the `#[cfg(test)] mod x;` declarations in the file `rel`."""
    here = rel.parent if rel.name in ("mod.rs", "lib.rs", "main.rs") else rel.with_suffix("")
    for m in re.finditer(r"#\[cfg\((?:all\()?test[^\]]*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
        yield here / f"{m.group(1)}.rs"
        yield here / m.group(1) / "mod.rs"


def read_table(design: Path):
    """{module: set of importers or {'any'}} from the DESIGN.md table."""
    allowed = {}
    for line in design.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.lstrip().startswith("|"):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        if not names or set(cells[0]) <= set("-: "):
            continue
        importers = set()
        for who in re.findall(r"`([^`]+)`", cells[-1]) + re.findall(r"\bany\b", cells[-1]):
            importers.add(norm(who))
        for name in names:
            allowed[norm(name)] = importers
    return allowed


def norm(name: str) -> str:
    name = name.strip().rstrip("/")
    for prefix in ("src/",):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    name = name.split(" ")[0]
    return name[:-3] if name.endswith(".rs") else name


def cycles(graph: dict):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(args[0] if args else Path(__file__).resolve().parent.parent)
    allowed = read_table(root / "docs" / "DESIGN.md")
    files = sorted(
        p.relative_to(root)
        for d in ("src", "models/src", "kernels/src")
        for p in (root / d).rglob("*.rs")
    )
    codes = {rel: strip_literals((root / rel).read_text()) for rel in files}
    test_files = {f for rel, code in codes.items() for f in test_module_files(rel, code)}
    problems, module_edges, file_edges = [], {}, {}
    for rel in files:
        if rel in test_files or (rel.name == "lib.rs" and rel.parts[0] == "src"):
            continue  # test modules; the crate root declares every module
        code = strip_test_modules(codes[rel])
        here, src, mod = module_path(rel), crate_root(rel), module_of(rel)
        for path in referenced_paths(code):
            target = absolute(path, here)
            if target is None:
                continue
            crate, segs = target
            if crate is None:
                dst_file = resolve(root, src, segs)
                if dst_file is not None and dst_file != rel:
                    file_edges.setdefault(str(rel), set()).add(str(dst_file))
            if crate is not None:
                dst = crate
            elif src.parts[0] == "src" and segs:
                dst = segs[0]
            else:
                continue  # inside models/ or kernels/: one module each
            is_module = crate is not None or (root / src / f"{dst}.rs").is_file()
            if dst != mod and (is_module or (root / src / dst).is_dir()):
                module_edges.setdefault(mod, set()).add(dst)
    for mod, dsts in sorted(module_edges.items()):
        for dst in sorted(dsts):
            if dst not in allowed:
                problems.append(f"{mod} imports {dst}, which docs/DESIGN.md's table does not list")
            elif not ({"any", mod} & allowed[dst]):
                problems.append(f"{mod} -> {dst}: not an allowed arrow of docs/DESIGN.md")
    for comp in cycles(module_edges):
        problems.append("module cycle: " + " <-> ".join(comp))
    for comp in cycles(file_edges):
        problems.append("file cycle: " + " <-> ".join(comp))
    for p in problems:
        print(p)
    print(
        f"check_imports: {len(files)} files, "
        f"{sum(len(v) for v in module_edges.values())} module arrows, "
        f"{sum(len(v) for v in file_edges.values())} file arrows, {len(problems)} problems"
    )
    if "--edges" in sys.argv:
        for mod, dsts in sorted(module_edges.items()):
            print(f"  {mod} -> {', '.join(sorted(dsts))}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
