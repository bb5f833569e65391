#!/usr/bin/env python3
"""Every integration-test file is compiled (stdlib only; `make lint` runs it).

A crate whose Cargo.toml says `autotests = false` gathers its tests/*.rs files into one test
binary (tests/main.rs: `#[path = "x.rs"] mod x;`) and names the few that need a process of their
own as `[[test]]` targets. Cargo then no longer finds test files by itself, so a new tests/x.rs
that is in neither place would never be compiled or run, silently. This lists each such file,
and each `#[path]` or `[[test]]` that names a file that is not there. Exit status 1 if any.
Usage: python3 .ci/check_tests.py [workspace root]
"""

import re
import sys
from pathlib import Path

SECTION = re.compile(r"^\s*\[\[?([^\]]+)\]\]?\s*$")
KEY = re.compile(r'^\s*([A-Za-z_-]+)\s*=\s*"?([^"#]*?)"?\s*(#.*)?$')
MODULE_PATH = re.compile(r'^\s*#\[path\s*=\s*"([^"]+)"\]\s*$')


def test_targets(manifest: Path) -> tuple[bool, list[str]]:
    """(autotests is off, the paths of the `[[test]]` targets) of one Cargo.toml."""
    autotests_off, paths, section = False, [], None
    for line in manifest.read_text().splitlines():
        if m := SECTION.match(line):
            section = m.group(1).strip()
            continue
        if not (m := KEY.match(line)):
            continue
        key, value = m.group(1), m.group(2).strip()
        if section == "package" and key == "autotests" and value == "false":
            autotests_off = True
        elif section == "test" and key == "path":
            paths.append(value)
    return autotests_off, paths


def problems_of(crate: Path) -> list[str]:
    autotests_off, targets = test_targets(crate / "Cargo.toml")
    tests = crate / "tests"
    if not autotests_off or not tests.is_dir():
        return []
    problems, covered = [], set()
    for target in targets:
        path = crate / target
        if not path.is_file():
            problems.append(f"{crate / 'Cargo.toml'}: [[test]] path {target} does not exist")
            continue
        covered.add(path.resolve())
        for line in path.read_text().splitlines():
            if m := MODULE_PATH.match(line):
                module = (path.parent / m.group(1)).resolve()
                if not module.is_file():
                    problems.append(f"{path}: #[path = \"{m.group(1)}\"] does not exist")
                covered.add(module)
    for file in sorted(tests.glob("*.rs")):
        if file.resolve() not in covered:
            problems.append(
                f"{file}: not compiled (autotests = false): add `#[path = \"{file.name}\"] "
                f"mod {file.stem};` to the crate's tests/main.rs, or a [[test]] to its Cargo.toml"
            )
    return problems


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    manifests = sorted(root.glob("src-tauri/crates/*/Cargo.toml")) + [root / "src-tauri/Cargo.toml"]
    problems = [p for m in manifests if m.is_file() for p in problems_of(m.parent)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
