#!/usr/bin/env python3
"""Fails when a crate's modules import each other in a circle.

Usage: import_cycles.py CRATE_SRC_DIR...   (e.g. src-tauri/crates/engine/src)

Each `.rs` file is a module (`a/b.rs` and `a/b/mod.rs` are `a::b`). Every `crate::…`,
`super::…` and `self::…` path in code (comments and doc comments left out) is an edge from the
file's module to the longest module that path names. Two graphs are checked for cycles:
- the crate's top-level modules (a submodule counts as its top-level module);
- within each module folder, its child modules (edges to the folder's own module, which
  declares them, are left out: `mod.rs` and its children share one idea).
Prints every cycle found and exits 1, or prints a one-line summary and exits 0.
"""

import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}", re.S)


def module_of(src: Path, file: Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        # Strings rarely hold `crate::`; a `//` inside a string only hides the rest of its line.
        i = line.find("//")
        out.append(line if i < 0 else line[:i])
    return "\n".join(out)


def resolve(modules: set, here: tuple, root: str, rest: list) -> tuple:
    if root == "crate":
        base = ()
    elif root == "self":
        base = here
    else:  # super
        base = here[:-1]
    path = base + tuple(rest)
    # The longest prefix that is a module (the rest names an item inside it).
    for n in range(len(path), -1, -1):
        if path[:n] in modules:
            return path[:n]
    return ()


def edges_of(src: Path, modules: set, file: Path) -> set:
    here = module_of(src, file)
    text = strip_comments(file.read_text(encoding="utf-8"))
    found = set()
    # `use crate::a::{b, c::D}`: each item of the group is a path of its own.
    for m in USE_GROUP.finditer(text):
        root, prefix = m.group(1), [p for p in m.group(2).split("::") if p]
        for item in m.group(3).split(","):
            item = re.sub(r"\s+as\s+\w+", "", item).strip().strip("{}").strip()
            if not item:
                continue
            rest = prefix + [p for p in item.split("::") if p and p != "self" and p != "*"]
            found.add(resolve(modules, here, root, rest))
    for m in PATH.finditer(text):
        root, rest = m.group(1), [p for p in m.group(2).split("::") if p]
        found.add(resolve(modules, here, root, rest))
    return {(here, target) for target in found if target != here and target != ()}


def cycles(graph: dict) -> list:
    """Every elementary cycle's nodes, found by depth-first search (graphs here are small)."""
    seen_cycles, out = set(), []

    def visit(node, stack, on_stack):
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                cycle = stack[stack.index(nxt):]
                key = frozenset(cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    out.append(cycle + [nxt])
            elif len(stack) < 12:
                visit(nxt, stack + [nxt], on_stack | {nxt})

    for start in sorted(graph):
        visit(start, [start], {start})
    return out


def name(module: tuple) -> str:
    return "::".join(module) or "crate"


def check(src: Path) -> list:
    files = sorted(src.rglob("*.rs"))
    modules = {module_of(src, f) for f in files}
    edges = set()
    for f in files:
        edges |= edges_of(src, modules, f)
    problems = []
    # Top-level modules.
    top = {}
    for a, b in edges:
        if a[:1] != b[:1] and a and b:
            top.setdefault(a[:1], set()).add(b[:1])
    for cycle in cycles(top):
        problems.append(f"{src}: " + " -> ".join(name(m) for m in cycle))
    # Siblings inside each module folder.
    for parent in sorted(modules):
        if not parent:
            continue  # the top level, checked above
        children = {m for m in modules if len(m) == len(parent) + 1 and m[:-1] == parent}
        if len(children) < 2:
            continue
        graph = {}
        for a, b in edges:
            ca = next((c for c in children if a[: len(c)] == c), None)
            cb = next((c for c in children if b[: len(c)] == c), None)
            if ca and cb and ca != cb:
                graph.setdefault(ca, set()).add(cb)
        for cycle in cycles(graph):
            problems.append(f"{src}: " + " -> ".join(name(m) for m in cycle))
    return problems, len(modules), len(edges)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    failed = False
    for arg in sys.argv[1:]:
        problems, modules, edges = check(Path(arg))
        for p in problems:
            print("import cycle:", p)
        failed |= bool(problems)
        if not problems:
            print(f"{arg}: {modules} modules, {edges} imports, no import cycle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
