#!/usr/bin/env python3
"""Checks how the macOS binaries find libmlx (stdlib only; `make check-macos` runs it last).

- the CLI linked for aarch64-apple-darwin is an arm64 executable that loads `@rpath/libmlx.dylib`
  and has an rpath (from tools/build.rs) to the wheel folder holding it;
- the app, which only a Mac can link, gets `@executable_path/../Frameworks` as an rpath: read from
  what its build script (src-tauri/build.rs) printed in the macOS build, where the bundle puts
  libmlx.dylib and mlx.metallib.

Usage: python3 .ci/macos/check_link.py TARGET_DIR WHEEL_LIB_DIR   (TARGET_DIR: e.g. target)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import macho  # noqa: E402

TRIPLE = "aarch64-apple-darwin"
BUNDLE_RPATH = "@executable_path/../Frameworks"
LIBMLX = "@rpath/libmlx.dylib"


def check_cli(binary: Path, wheel_lib: Path) -> list[str]:
    if not binary.is_file():
        return [f"{binary} does not exist: the CLI was not linked"]
    try:
        cli = macho.read(binary)
    except macho.MachOError as err:
        return [str(err)]
    problems = []
    if (cli.cpu, cli.file_type) != ("arm64", "executable"):
        problems.append(f"{binary} is a Mach-O {cli.cpu} {cli.file_type}, not an arm64 executable")
    if LIBMLX not in cli.loads:
        problems.append(f"{binary} does not load {LIBMLX}; it loads: {', '.join(cli.loads)}")
    if not any(Path(rpath).resolve() == wheel_lib.resolve() for rpath in cli.rpaths):
        problems.append(
            f"{binary} has no rpath to {wheel_lib} (where libmlx.dylib is); rpaths: "
            f"{', '.join(cli.rpaths) or 'none'}"
        )
    if not problems:
        minos = ".".join(map(str, cli.min_macos)) if cli.min_macos else "?"
        print(f"{binary}: Mach-O arm64 executable for macOS {minos}+, loads {LIBMLX}")
        for rpath in cli.rpaths:
            print(f"  rpath {rpath}")
    return problems


def check_app_rpath(target_dir: Path) -> list[str]:
    """The newest run of the app's build script for the macOS target (cargo's `output` file)."""
    outputs = sorted(
        (target_dir / TRIPLE / "debug" / "build").glob("gemma-desk-*/output"),
        key=lambda p: p.stat().st_mtime,
    )
    if not outputs:
        return [
            f"no run of the app's build script under {target_dir}/{TRIPLE}: "
            f"cargo clippy --target {TRIPLE} first"
        ]
    lines = outputs[-1].read_text().splitlines()
    wanted = f"-Wl,-rpath,{BUNDLE_RPATH}"
    prefixes = ("cargo:rustc-link-arg=", "cargo::rustc-link-arg=")
    args = [line.split("=", 1)[1] for line in lines if line.startswith(prefixes)]
    if wanted not in args:
        return [
            f"src-tauri/build.rs does not give the macOS app the rpath {BUNDLE_RPATH} "
            f"(link args in {outputs[-1]}: {', '.join(args) or 'none'}); the bundled "
            "libmlx.dylib in Contents/Frameworks would not be found"
        ]
    print(f"app (src-tauri/build.rs for {TRIPLE}): rpath {BUNDLE_RPATH}")
    return []


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    target_dir, wheel_lib = Path(sys.argv[1]), Path(sys.argv[2])
    problems = check_cli(target_dir / TRIPLE / "debug" / "gemma-desk-cli", wheel_lib)
    problems += check_app_rpath(target_dir)
    if problems:
        print("macOS link check failed:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
