#!/usr/bin/env python3
"""Fail if the modules of a crate import each other in a cycle.

The rule: inside a crate, imports between sibling modules (children of the
same parent) go one way only.  Every reference from module A to module B --
``use crate::...``, ``use super::...``, ``self::...``, ``$crate::...`` or a
``crate::a::b`` path written anywhere in code, ``pub use`` re-exports and
grouped imports (``use crate::{a::X, b::Y}``) included -- is lifted to the
pair of siblings just below the lowest common ancestor of A and B, and
counts as an edge between those siblings.  A parent and its descendants may
reference each other freely.  Siblings in a strongly connected component of
more than one module form a cycle.

Why: modules whose siblings are layered read bottom up, and can be split
into crates along the same lines (crates cannot depend on each other in a
circle).  A cycle means two modules are really one, or that something both
need belongs in a module below them.

A path resolves to the deepest module it names (``crate::a::Thing`` is
module ``a``).  Comments, doc comments and string literals are ignored.
Inline ``mod x { ... }`` blocks are modules of their own (so ``super::`` in
a ``mod tests`` block is its file's module); test modules count like any
other: a test of ``a`` importing ``b`` is an edge ``a -> b``.

Usage: module_cycles.py [--workspace DIR] [SRC_DIR ...]
Without SRC_DIRs, checks the ``src/`` of every package among the workspace's
members (the workspace defaults to the directory above this script); each of
lib.rs, main.rs, bin/*.rs and bin/*/main.rs is the root of a crate.  Prints
every cycle with one example reference (file:line) per edge, and exits 1 if
there is any, 0 otherwise.
"""

import argparse
import bisect
import re
import sys
import tomllib
from pathlib import Path

IDENT = r"(?:r#)?[A-Za-z_]\w*"
# A comment, string or char literal (raw strings and block comments are
# finished by hand: they need a matching `#` count / nesting).
LEXEME = re.compile(r"""//[^\n]*|/\*|(?<!\w)b?r(\#*)"|b?"(?:\\.|[^"\\])*"|'(?:\\.[^']*|[^\\'])'""", re.S)
MOD_DECL = re.compile(rf"\bmod\s+({IDENT})\s*([;{{])")
PATH_ATTR = re.compile(r'#\[\s*path\s*=\s*"([^"]*)"\s*\]\s*(?:pub(?:\s*\([^)]*\))?\s*)?$')
PATH_START = re.compile(r"(?<![\w$])(\$crate|crate|super|self)\b(?=\s*::)")
TOKEN = re.compile(rf"\s*(\$crate|{IDENT}|::|\{{|\}}|,|\*)")
RENAME = re.compile(rf"\s*as\s+{IDENT}")


def strip(src):
    """`src` with comments and literals blanked, newlines kept (so offsets
    and line numbers stay the same)."""
    out, pos = [], 0
    while m := LEXEME.search(src, pos):
        end = m.end()
        if m.group() == "/*":
            depth = 1
            while depth and (n := re.compile(r"/\*|\*/").search(src, end)):
                depth, end = depth + (1 if n.group() == "/*" else -1), n.end()
            end = end if not depth else len(src)
        elif m.group(1) is not None:
            close = src.find('"' + m.group(1), end)
            end = len(src) if close < 0 else close + 1 + len(m.group(1))
        out += [src[pos:m.start()], re.sub(r"[^\n]", " ", src[m.start():end])]
        pos = end
    return "".join(out + [src[pos:]])


def expand(code, pos):
    """The paths the (possibly grouped) path at `pos` names, each as its
    segments and where it ends: `crate::{a::X, b::{self, Y}}` gives
    [crate, a, X], [crate, b, self], [crate, b, Y]."""
    paths = []

    def tok(i):
        m = TOKEN.match(code, i)
        return (m.group(1), m.end()) if m else (None, i)

    def tree(i, prefix):
        """Parses one use tree at `i` below `prefix`; returns where it ends."""
        segs = list(prefix)
        t, j = tok(i)
        group = t == "{"
        while t not in (None, "{", "}", ",", "::", "*"):
            segs.append(t.removeprefix("r#"))
            i = j
            t, j = tok(i)
            if t != "::":
                break
            t, j = tok(j)
            if t == "*":
                paths.append((segs, i))
                return j
            if group := t == "{":
                break
        if not group:
            paths.append((segs, i))
            m = RENAME.match(code, i)
            return m.end() if m else i
        i = j
        while True:  # `{tree, tree, ...}`
            t, j = tok(i)
            if t in (None, "}"):
                return j
            i = tree(i, segs)
            t, j = tok(i)
            if t != ",":
                return j if t == "}" else i
            i = j

    tree(pos, [])
    return paths


class Crate:
    def __init__(self, name, root):
        self.name, self.root = name, root
        self.modules = {()}
        self.refs = []  # (from module, path segments, file, line, line text)

    def load(self, file, module, child_dir):
        """Adds the module in `file` and, recursively, its submodules."""
        try:
            src = file.read_text(encoding="utf-8")
        except OSError as e:
            print(f"warning: {self.name}: module {'::'.join(module)}: {e}", file=sys.stderr)
            return
        code = strip(src)
        lines, starts = src.splitlines(), [0] + [m.end() for m in re.finditer("\n", src)]
        # Inline modules: the brace span of each `mod x { ... }`.
        opens = {m.end() - 1: m.group(1).removeprefix("r#") for m in MOD_DECL.finditer(code) if m.group(2) == "{"}
        spans, stack = [], []
        for i, c in enumerate(code):
            if c == "{":
                stack.append(i)
            elif c == "}" and stack and (start := stack.pop()) in opens:
                spans.append((start, i, opens[start]))
        spans.sort()

        def inline_path(pos):
            return tuple(name for a, b, name in spans if a < pos < b)

        for a, b, name in spans:
            self.modules.add(module + inline_path(a) + (name,))
        for m in MOD_DECL.finditer(code):
            if m.group(2) == ";":
                inner, name = inline_path(m.start()), m.group(1).removeprefix("r#")
                self.modules.add(module + inner + (name,))
                if attr := PATH_ATTR.search(src[max(0, m.start() - 300):m.start()].rstrip()):
                    found = file.parent / attr.group(1)
                    self.load(found, module + inner + (name,), found.parent)
                    continue
                base = child_dir.joinpath(*inner)
                found = base / f"{name}.rs"
                if not found.is_file() and (base / name / "mod.rs").is_file():
                    found = base / name / "mod.rs"
                self.load(found, module + inner + (name,), base / name)
        for m in PATH_START.finditer(code):
            if code[max(0, m.start() - 40):m.start()].rstrip().endswith("::"):
                continue  # the second `super` of `super::super`
            here = module + inline_path(m.start())
            for segs, end in expand(code, m.start()):
                line = bisect.bisect_right(starts, end - 1)
                self.refs.append((here, segs, file, line, lines[line - 1].strip()))

    def resolve(self, here, segs):
        """The deepest module the path `segs`, written in module `here`, names."""
        head, *rest = segs
        path = {"crate": (), "$crate": (), "self": here}.get(head, here[:-1])
        while head == "super" and rest and rest[0] == "super":
            path, rest = path[:-1], rest[1:]
        for seg in rest:
            if seg != "self":
                if path + (seg,) not in self.modules:
                    break
                path += (seg,)
        return path


def sccs(nodes, edges):
    """Tarjan's strongly connected components, each sorted."""
    index, low, stack, out = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = stack[stack.index(v):]
            del stack[stack.index(v):]
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def crates_of(src_dir):
    """The crates rooted in a `src/` directory."""
    name = src_dir.resolve().parent.name
    if (manifest := src_dir.parent / "Cargo.toml").is_file():
        name = tomllib.loads(manifest.read_text()).get("package", {}).get("name", name)
    roots = [("lib", src_dir / "lib.rs"), ("bin", src_dir / "main.rs")]
    roots += [(f"bin {p.stem}", p) for p in sorted(src_dir.glob("bin/*.rs"))]
    roots += [(f"bin {p.parent.name}", p) for p in sorted(src_dir.glob("bin/*/main.rs"))]
    return [Crate(f"{name} ({kind})", root) for kind, root in roots if root.is_file()]


def workspace_src_dirs(ws):
    members = tomllib.loads((ws / "Cargo.toml").read_text())["workspace"].get("members", [])
    return [d / "src" for pattern in members for d in sorted(ws.glob(pattern))
            if (d / "Cargo.toml").is_file() and "package" in tomllib.loads((d / "Cargo.toml").read_text())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, default=Path(__file__).resolve().parent.parent,
                    metavar="DIR", help="the workspace whose members to check (default: %(default)s)")
    ap.add_argument("src_dirs", nargs="*", type=Path, metavar="SRC_DIR",
                    help="a package's src/ directory to check instead of the workspace's")
    args = ap.parse_args()
    base = (Path.cwd() if args.src_dirs else args.workspace).resolve()
    crates = [c for d in args.src_dirs or workspace_src_dirs(args.workspace) for c in crates_of(d)]
    modules = cycles = 0
    for crate in crates:
        crate.load(crate.root, (), crate.root.parent)
        modules += len(crate.modules)
        edges = {}  # parent module -> {(sibling, sibling): example}
        for here, segs, file, line, text in crate.refs:
            there = crate.resolve(here, segs)
            k = 0
            while k < min(len(here), len(there)) and here[k] == there[k]:
                k += 1
            if k == len(here) or k == len(there):
                continue  # the same module, or a parent/child reference
            where = file.resolve()
            where = where.relative_to(base) if where.is_relative_to(base) else where
            edges.setdefault(here[:k], {}).setdefault((here[k], there[k]), f"{where}:{line}  {text}")
        for parent, pairs in sorted(edges.items()):
            graph = {}
            for a, b in pairs:
                graph.setdefault(a, set()).add(b)
            for comp in sccs({x for pair in pairs for x in pair}, graph):
                if len(comp) > 1:
                    cycles += 1
                    under = "::".join(("crate",) + parent)
                    print(f"{crate.name}: import cycle under `{under}`: {', '.join(comp)}")
                    for (a, b), example in sorted(pairs.items()):
                        if a in comp and b in comp:
                            print(f"  {a} -> {b}: {example}")
    summary = f"{cycles} import cycle{'s' if cycles > 1 else ''}" if cycles else "no import cycles"
    print(f"{len(crates)} crates, {modules} modules, {summary}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
