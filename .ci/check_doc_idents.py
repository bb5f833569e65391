#!/usr/bin/env python3
"""Every backticked code name in docs/*.md and README.md must exist in the tree.

`make lint` runs this so that a renamed function, a removed flag or a moved file cannot stay
named in the docs. Python 3 standard library only; it reads the tree once, in about a second.

"The tree" is what git tracks (untracked files that are not ignored too). Each inline code span
outside fenced blocks is read as one of these, and checked so:

  file path       `engine/src/stream.rs`, `tests.rs`, `bench/batch.py --streams 4` (a source
                  extension; a command's first word): a file is that path or ends with `/` + it.
  file:line       `stream.rs:120`, `stream.rs:120-140`: the file has that many lines.
  folder          `src-tauri/src`, `bench/cuda/`: under a tracked top-level folder, holding files.
  file::name      `tests.rs::a_test_name`: such a file defines `name`.
  a::b::c         each segment narrows where the next is defined: a crate (`gemma`,
                  `model_store`), a module (`a.rs` or `a/`, under the scope so far), a type (the
                  files that define or `impl` it); the last must be an item there (fn, struct,
                  enum, variant, field, const, static, type, trait, mod, TS member) or `pub use`d.
  CamelCase       `TokenStream`, `Engine`: a type-like item (struct, enum, variant, trait, class,
                  interface), or a name the code uses.
  snake_case      `next_token`, `embed_tokens_per_layer`: an item, a name the code uses (comments
                  and strings removed: a name called is a name that exists), a string literal or a
                  word inside one (config keys, tensor names, error codes), a file's stem (test
                  binaries, fuzz targets), a dependency, a word of the Makefile or a script.
  camelCase       `sendMessage`, `getUserMedia`: as snake_case.
  Type.member     `ModelInfo.audio`, when `ModelInfo` is a type of the tree: as Type::member.
  lowercase       `attend`, `rope` (three letters or more): as snake_case, but whole string
                  literals only.
  CAPS_NAME       `REWIND_SLACK`, `MLX_WHEEL_DIR`: a word of some tracked non-doc file (a const,
                  or an env var a script or the Makefile reads).
  --flag          `--parallel N`, `--dense-from=N`: the flag's text in a tracked non-doc file, or
                  a field of a clap argument struct (`--queue-depth` is `queue_depth`).
  make target     `make test-api`: a rule of the Makefile.
  A::b(x), A { f } and `A::b: T` are read as A::b and A; `a::{B, C}` as a::B and a::C;
  `Arc<Engine>` checks Engine.

Not checked: fenced blocks, spans with spaces that are none of the above (formulas, commands),
dotted names (tensor names, JSON paths, Python attributes), one- and two-letter words, single
capitalised-only words (`GET`, `MTLB`). Names of other projects (mlx, mlx-lm, mlx-vlm, SciPy,
POSIX, Rust's std) that the tree's code does not use are listed in .ci/doc_idents_allow.txt, one
group per reason.

Usage: check_doc_idents.py [--warn-only DOC,DOC...] [DOC...]
  DOCs default to docs/*.md and README.md. What a --warn-only doc names wrongly is printed but
  does not fail the run. Exit status 1 when anything in another doc is missing.
"""

from __future__ import annotations

import bisect
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOW_FILE = ROOT / ".ci" / "doc_idents_allow.txt"

SOURCE_EXT = (".rs", ".ts", ".py", ".sh", ".mjs", ".js", ".c", ".h", ".md")
CODE_EXT = (".rs", ".ts", ".mjs", ".js", ".py")
TEXT_EXT = CODE_EXT + (".sh", ".c", ".h", ".toml", ".json", ".jinja", ".plist", ".txt", ".html", ".css")
SCRIPT_EXT = (".sh", ".toml", ".json", ".plist", ".jinja", ".c", ".h")
TEXT_NAMES = ("Makefile", "run", "zig-cc", "zig-c++", "zig-ar")

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
CAMEL = re.compile(r"^[A-Z][a-z0-9]+[A-Za-z0-9]*$|^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")
SNAKE = re.compile(r"^_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")
CAPS = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
PATHLIKE = re.compile(r"^[\w.@+-]+(?:/[\w.@+-]*)+$|^[\w.+-]+\.\w+$")
LINE_REF = re.compile(r"^(.+\.\w+):(\d+)(?:[-–](\d+))?$")


def strip_comments_and_strings(src: str, f: str) -> str:
    if f.endswith(".py"):
        src = re.sub(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'', " ", src)
        src = re.sub(r"#[^\n]*", " ", src)
    else:
        src = re.sub(r"/\*[\s\S]*?\*/", " ", src)
        src = re.sub(r"//[^\n]*", " ", src)
    return re.sub(r"\"(?:[^\"\\\n]|\\.)*\"", " ", src)


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout
        return sorted({p for p in out.splitlines() if p and (ROOT / p).is_file()})
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "target", ".deps", "node_modules", "dist", "out"}
        found = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in skip]
            for f in filenames:
                found.append(os.path.relpath(os.path.join(dirpath, f), ROOT))
        return sorted(found)


# ---------------------------------------------------------------------------------- the tree's names

RUST_ITEM = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static|mod|union)\s+(?:r#)?(" + IDENT + r")"
    r"|\bmacro_rules!\s*(" + IDENT + r")"
)
RUST_OWNER = re.compile(r"\b(?:struct|enum|trait|union|type)\s+(" + IDENT + r")")
RUST_IMPL = re.compile(
    r"\bimpl\b(?:\s*<[^{;]*?>)?\s+(?:[\w:]+(?:<[^{;]*?>)?\s+for\s+)?(?:\w+::)*(" + IDENT + r")"
)
RUST_FIELD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:r#)?(" + IDENT + r")\s*:(?!:)", re.M)
RUST_VARIANT = re.compile(r"^\s*([A-Z]" + r"[A-Za-z0-9_]*)\s*(?:[,({=]|$)", re.M)
RUST_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")
TS_ITEM = re.compile(
    r"\b(?:function\*?|class|interface|type|enum|const|let|var|namespace)\s+(" + r"[A-Za-z_$][\w$]*" + r")"
)
TS_MEMBER = re.compile(
    r"^\s*(?:(?:export|public|private|protected|static|readonly|async|get|set|declare|override|abstract)\s+)*"
    r"#?([A-Za-z_$][\w$]*)\s*(?:\?\s*)?(?:[:(<]|=(?!=))",
    re.M,
)
PY_ITEM = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(" + IDENT + r")|^(" + IDENT + r")\s*[:=]", re.M)
STRING_LIT = re.compile(r"\"([A-Za-z_][\w.\-/]*)\"|'([A-Za-z_][\w.\-/]*)'")
COMMENT_RS = re.compile(r"//[^\n]*")


class Tree:
    def __init__(self, files: list[str]):
        self.files = files
        self.file_set = set(files)
        self.by_name: dict[str, list[str]] = defaultdict(list)  # basename -> paths
        for f in files:
            self.by_name[f.rsplit("/", 1)[-1]].append(f)
        self.dirs = set()
        for f in files:
            parts = f.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
        self.top = {f.split("/", 1)[0] for f in files}
        self.stems = {f.rsplit("/", 1)[-1].split(".", 1)[0] for f in files} | {d.rsplit("/", 1)[-1] for d in self.dirs}
        self.items: dict[str, set[str]] = defaultdict(set)  # name -> files defining it
        self.types: set[str] = set()  # type-like names (struct/enum/trait/class/variant ...)
        self.owners: dict[str, set[str]] = defaultdict(set)  # Type -> files defining or impl'ing it
        self.strings: set[str] = set()  # whole string literals of source files
        self.string_parts: set[str] = set()  # snake/camelCase words inside string literals
        self.code_words: set[str] = set()  # identifiers the code uses, comments and strings removed
        self.deps: set[str] = set()  # dependency names of Cargo.toml and package.json files
        self.clap_fields: set[str] = set()
        self.script_words: set[str] = set()  # words of the Makefile, shell scripts, TOML and JSON  # fields of clap argument structs (`--queue-depth`)
        self.words: set[str] = set()  # every word of every non-doc text file
        self.text: list[str] = []  # non-doc text, for flags
        self.lines: dict[str, int] = {}
        self.crates: dict[str, str] = {}  # crate ident -> src dir
        self._read()

    def _read(self) -> None:
        for f in self.files:
            name = f.rsplit("/", 1)[-1]
            if not (f.endswith(TEXT_EXT) or name in TEXT_NAMES or f.endswith(".md")):
                continue
            try:
                src = (ROOT / f).read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            self.lines[f] = src.count("\n") + (0 if src.endswith("\n") or not src else 1)
            if f.endswith(".md"):
                continue
            if name in ("package-lock.json", "Cargo.lock"):
                continue
            self.text.append(src)
            self.words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src))
            if f.endswith(CODE_EXT):
                for a, b in STRING_LIT.findall(src):
                    self.strings.add(a or b)
                for lit in re.findall(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'", src):
                    self.string_parts.update(
                        w for w in re.findall(IDENT, lit) if "_" in w.strip("_") or re.search(r"[a-z][A-Z]", w)
                    )
                if not f.startswith("fuzz/"):  # built by `make fuzz` alone: a name there may be stale
                    self.code_words.update(re.findall(IDENT, strip_comments_and_strings(src, f)))
            if f.endswith(SCRIPT_EXT) or name in TEXT_NAMES:
                self.script_words.update(re.findall(IDENT, src))
            if name in ("Cargo.toml", "package.json"):
                self.deps.update(re.findall(r'^\s*"?([A-Za-z0-9_@/.-]+)"?\s*[=:]\s*[\"{]', src, re.M))
            if f.endswith(".rs") and "#[arg(" in src:
                self.clap_fields.update(m.group(1) for m in RUST_FIELD.finditer(src))
            if f.endswith(".rs"):
                self._rust(f, COMMENT_RS.sub("", src))
            elif f.endswith((".ts", ".mjs", ".js")):
                self._ts(f, src)
            elif f.endswith(".py"):
                for a, b in PY_ITEM.findall(src):
                    self._add(a or b, f, type_like=(a or b)[:1].isupper())
            if name == "Cargo.toml":
                m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', src, re.M | re.S)
                if m:
                    self.crates[m.group(1).replace("-", "_")] = f.rsplit("/", 1)[0] + "/src" if "/" in f else "src"

    def _add(self, name: str, f: str, type_like: bool = False) -> None:
        self.items[name].add(f)
        if type_like:
            self.types.add(name)

    def _rust(self, f: str, src: str) -> None:
        for m in RUST_ITEM.finditer(src):
            name = m.group(1) or m.group(2)
            kw = src[m.start(): m.start() + 6]
            self._add(name, f, type_like=kw.startswith(("struct", "enum", "trait", "type ", "union")))
        for m in RUST_OWNER.finditer(src):
            self.owners[m.group(1)].add(f)
        for m in RUST_IMPL.finditer(src):
            self.owners[m.group(1)].add(f)
        for m in RUST_FIELD.finditer(src):
            self._add(m.group(1), f)
        for m in RUST_VARIANT.finditer(src):
            self._add(m.group(1), f, type_like=True)
        for m in RUST_USE.finditer(src):  # `pub use x::{A, b}` makes A and b names of this file
            for name in re.findall(IDENT, m.group(1)):
                self.items.setdefault(name, set())
                self.items[name].add(f)

    def _ts(self, f: str, src: str) -> None:
        for m in TS_ITEM.finditer(src):
            kw = src[m.start(): m.start() + 9]
            self._add(m.group(1), f, type_like=kw.startswith(("class", "interface", "type", "enum")))
        for m in TS_MEMBER.finditer(src):
            self._add(m.group(1), f)
        for m in re.finditer(r"\b(?:class|interface)\s+([A-Za-z_$][\w$]*)", src):
            self.owners[m.group(1)].add(f)

    # ------------------------------------------------------------------------------ look-ups
    def files_for(self, path: str) -> list[str]:
        path = path[2:] if path.startswith("./") else path
        if path in self.file_set:
            return [path]
        name = path.rsplit("/", 1)[-1]
        return [f for f in self.by_name.get(name, []) if f == path or f.endswith("/" + path)]

    def module_files(self, module: str, within: set[str] | None) -> set[str]:
        """Files of a crate or module called `module` (optionally under the files `within`)."""
        if module in self.crates:
            d = self.crates[module]
            return {f for f in self.files if f.startswith(d + "/") and f.endswith(".rs")}
        if module in ("crate", "self", "super"):
            return set(within) if within else set()
        found = set()
        for f in self.files:
            if not f.endswith((".rs", ".ts")):
                continue
            stem = f.rsplit(".", 1)[0]
            if stem.endswith("/" + module) or f"/{module}/" in f:
                found.add(f)
        if within:
            dirs = {w.rsplit("/", 1)[0] for w in within}
            dirs |= {w.rsplit(".", 1)[0] for w in within}
            found = {f for f in found if any(f.startswith(d + "/") for d in dirs)}
        return found

    def defined_in(self, name: str, files: set[str]) -> bool:
        return bool(self.items.get(name, set()) & files)


# ---------------------------------------------------------------------------------- the docs' spans

def spans(doc: Path):
    """(line number, span text) for each inline code span outside fenced blocks. A span may run
    over a line break (not over a blank line); its whitespace is then read as one space."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    fence = None
    for n, line in enumerate(lines):
        stripped = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if m or fence is not None:
            if m and fence is None:
                fence = m.group(1)
            elif m and stripped.startswith(fence):
                fence = None
            lines[n] = ""
    text = "\n".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    for m in re.finditer(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n)[\s\S])+?)(?<!`)\1(?!`)", text):
        n = bisect.bisect_right(starts, m.start())
        yield n, re.sub(r"\s+", " ", m.group(2)).strip()


def load_allow() -> set[str]:
    allow = set()
    if ALLOW_FILE.exists():
        for line in ALLOW_FILE.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                allow.update(line.split())
    return allow


def strip_call(s: str) -> str:
    """`A::b(x, y)` -> `A::b`; `A { f }` -> `A`; `A::b: T` -> `A::b`; `…::x` -> `x`."""
    s = s.strip()
    s = re.sub(r"^(?:…|\.\.\.)(?:::)?", "", s)
    s = re.sub(r"\s*\{[^{}]*\}$", "", s) if not re.search(r"::\{", s) else s
    s = re.sub(r"\([^()]*\)$", "", s)
    s = re.sub(r"^(" + IDENT + r"(?:::" + IDENT + r")+):\s.*$", r"\1", s)
    return s.strip()


class Checker:
    def __init__(self, tree: Tree, allow: set[str]):
        self.t = tree
        self.allow = allow

    def check(self, span: str) -> str | None:
        """None when fine or not a name of this tree; else the reason."""
        t = self.t
        if span in self.allow:
            return None
        # make targets
        m = re.match(r"^make\s+(.*)$", span)
        if m:
            for word in m.group(1).split():
                if "=" in word or word.startswith("-") or word in ("…", "..."):
                    continue
                if not re.search(r"^" + re.escape(word) + r"\s*:", self.makefile, re.M) and not re.search(
                    r"^\.PHONY:.*\b" + re.escape(word) + r"\b", self.makefile, re.M
                ):
                    return f"no Makefile target `{word}`"
            return None
        # flags
        if span.startswith("--") and re.match(r"^--[a-z]", span):
            flag = re.match(r"^--[a-z0-9][a-z0-9-]*", span).group(0)
            clap = flag[2:].replace("-", "_") in t.clap_fields
            if clap or flag in self.allow or any(flag in text for text in t.text):
                return None
            return f"flag `{flag}` not found in the tree"
        first = span.split()[0] if span.split() else span
        # file:line
        m = LINE_REF.match(first)
        if m and m.group(1).endswith(SOURCE_EXT):
            files = t.files_for(m.group(1))
            if not files:
                return None if m.group(1) in self.allow else f"no file `{m.group(1)}`"
            hi = int(m.group(3) or m.group(2))
            if not any(t.lines.get(f, 0) >= hi for f in files):
                return f"`{m.group(1)}` has {max(t.lines.get(f, 0) for f in files)} lines, not {hi}"
            return None
        # file::test_name
        m = re.match(r"^(?:…/)?([\w./-]+\.(?:rs|ts|py))::(" + IDENT + r")$", span)
        if m:
            files = t.files_for(m.group(1))
            if not files:
                return f"no file `{m.group(1)}`"
            if not t.defined_in(m.group(2), set(files)):
                return f"`{m.group(2)}` is not defined in {', '.join(files)}"
            return None
        # a file path (possibly the first word of a command)
        if PATHLIKE.match(first) and first.rstrip("/").endswith(SOURCE_EXT):
            path = first.rstrip("/")
            if path in self.allow or path.split("/")[0] in ("target", ".deps", "tests/out"):
                return None
            if path.startswith("tests/out/"):
                return None
            return None if t.files_for(path) else f"no file `{path}`"
        if " " in span:
            return self.check_braces(span)
        # a folder
        if "/" in span and PATHLIKE.match(span):
            path = span.rstrip("/")
            top = path.split("/")[0]
            if top in t.top and not path.startswith("tests/out"):
                found = path in t.dirs or path in t.file_set or (re.search(r"\.\w+$", path) and t.files_for(path))
                return None if found else f"no folder or file `{path}`"
            return None
        return self.check_name(strip_call(span))

    def check_braces(self, span: str) -> str | None:
        s = strip_call(span)
        if " " in s and "::{" not in s:
            return None
        return self.check_name(s)

    def check_name(self, s: str) -> str | None:
        t = self.t
        if s in self.allow:
            return None
        # Type<Inner>: check each name
        m = re.match(r"^(" + IDENT + r")<(.+)>$", s)
        if m:
            for name in re.findall(IDENT, s):
                if CAMEL.match(name) and name not in self.allow and name not in t.items and name not in t.code_words:
                    return f"no item `{name}`"
            return None
        # a::{b, c}
        m = re.match(r"^((?:" + IDENT + r"::)+)\{([^{}]*)\}$", s)
        if m:
            for part in m.group(2).split(","):
                part = part.strip()
                if part:
                    why = self.check_path(m.group(1) + part)
                    if why:
                        return why
            return None
        if re.match(r"^" + IDENT + r"(?:::" + IDENT + r")+$", s):
            return self.check_path(s)
        m = re.match(r"^([A-Z]\w*)\.([a-z_]\w*)$", s)  # `ModelInfo.audio`: a type of ours, a member
        if m and m.group(1) in t.owners:
            return self.check_path(m.group(1) + "::" + m.group(2))
        if not re.match(r"^" + IDENT + r"$", s):
            return None
        if CAPS.match(s):
            return None if s in t.words else f"`{s}` appears in no source, script or Makefile"
        known = (
            s in t.items or s in t.code_words or s in t.strings or s in t.stems or s in t.crates or s in t.deps
            or s in t.script_words
        )
        if SNAKE.match(s):
            return None if known or s in t.string_parts else f"no item, use or string `{s}`"
        if re.match(r"^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$", s):  # `sendMessage`: a TS function, a key
            return None if known or s in t.string_parts else f"no item, use or string `{s}`"
        if re.match(r"^[a-z][a-z0-9]{2,}$", s):  # `attend`, `rope`: a function, module, key or file
            return None if known else f"no item, use, string or file `{s}`"
        if CAMEL.match(s) and re.search(r"[a-z]", s):
            return None if known or s in t.types else f"no type `{s}`"
        return None

    def check_path(self, s: str) -> str | None:
        t = self.t
        if s in self.allow:
            return None
        segs = s.split("::")
        scope: set[str] | None = None
        for i, seg in enumerate(segs):
            last = i == len(segs) - 1
            prefix = "::".join(segs[: i + 1])
            if prefix in self.allow:
                return None
            if last:
                if scope is None:
                    ok = seg in t.items or seg in t.types
                else:
                    ok = t.defined_in(seg, scope)
                    if not ok and seg in t.owners:  # a type re-exported or aliased
                        ok = bool(t.owners[seg] & scope)
                return None if ok else f"`{seg}` is not defined where `{s}` says" if scope else f"no item `{seg}`"
            if seg[:1].isupper():
                owners = t.owners.get(seg, set())
                if scope is not None:
                    owners = owners or (t.items.get(seg, set()) & scope)
                if not owners:
                    if seg in t.items:  # an enum variant holding data, or a re-export
                        owners = t.items[seg]
                    else:
                        return f"no type `{seg}` (in `{s}`)"
                scope = set(owners)
            else:
                files = t.module_files(seg, scope)
                if not files:
                    return f"no crate or module `{seg}` (in `{s}`)"
                scope = files
        return None

    @property
    def makefile(self) -> str:
        if not hasattr(self, "_mk"):
            self._mk = (ROOT / "Makefile").read_text(encoding="utf-8")
        return self._mk


def main(argv: list[str]) -> int:
    warn_only: set[str] = set()
    docs: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--warn-only":
            warn_only.update(p for p in next(it, "").split(",") if p)
        elif a.startswith("--warn-only="):
            warn_only.update(p for p in a.split("=", 1)[1].split(",") if p)
        else:
            docs.append(a)
    if not docs:
        docs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")) + ["README.md"]
    tree = Tree(tracked_files())
    checker = Checker(tree, load_allow())
    failed = warned = 0
    for doc in docs:
        path = ROOT / doc
        if not path.is_file():
            print(f"{doc}: no such document", file=sys.stderr)
            failed += 1
            continue
        soft = doc in warn_only
        for n, span in spans(path):
            why = checker.check(span)
            if why:
                print(f"{doc}:{n}: {'warning: ' if soft else ''}`{span}`: {why}")
                if soft:
                    warned += 1
                else:
                    failed += 1
    if failed:
        print(
            f"check_doc_idents: {failed} name(s) in the docs are not in the tree: rename them in the doc,"
            " or list a name of another project in .ci/doc_idents_allow.txt.",
            file=sys.stderr,
        )
    if warned:
        print(
            f"check_doc_idents: {warned} more in docs that only warn ({', '.join(sorted(warn_only))}).",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
