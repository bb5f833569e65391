#!/usr/bin/env python3
"""Checks the macOS bundle configuration without a Mac (stdlib only; `make check-macos` runs it).

What `cargo tauri build` on a Mac will put into Gemma Desk.app, checked against the files here:
- every `bundle.macOS.frameworks` entry is an arm64 dylib with an `@rpath/` install name, no newer
  than `minimumSystemVersion`, whose own `@rpath/` libraries are bundled too;
- every `bundle.macOS.files` source exists, and each bundled `libmlx.dylib` has `mlx.metallib`
  beside it from the same wheel (MLX looks for the kernels next to the library, README);
- the Info.plist and entitlements the app declares parse, and agree with each other (microphone,
  hardened runtime with an ad-hoc signature); when the UI records from the microphone
  (`getUserMedia` in ui/src), both the usage description and the audio-input entitlement are
  there, and an Entitlements.plist beside the config is the one it names;
- every icon listed exists; the .icns holds each size macOS draws (16 to 512, @1x and @2x).

Every problem is listed, each naming the file or the config entry. Exit status 1 if any.
Usage: python3 .ci/macos/check_bundle.py [src-tauri/tauri.conf.json]
"""

import json
import plistlib
import re
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import macho  # noqa: E402

# icns entry types of a complete macOS icon: pixel edge of each (what iconutil writes for an
# .iconset of 16, 32, 128, 256 and 512 points at @1x and @2x).
ICNS_SLOTS = {
    b"icp4": 16, b"ic11": 32,    # 16 pt, 16 pt @2x
    b"icp5": 32, b"ic12": 64,    # 32 pt, 32 pt @2x
    b"ic07": 128, b"ic13": 256,  # 128 pt, 128 pt @2x
    b"ic08": 256, b"ic14": 512,  # 256 pt, 256 pt @2x
    b"ic09": 512, b"ic10": 1024, # 512 pt, 512 pt @2x
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
METALLIB_MAGIC = b"MTLB"
MICROPHONE_ENTITLEMENT = "com.apple.security.device.audio-input"
DISABLE_LIBRARY_VALIDATION = "com.apple.security.cs.disable-library-validation"
# A usage description shorter than this says nothing about why (macOS shows it in the prompt).
MIN_USAGE_DESCRIPTION = 30


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def png_size(data: bytes) -> tuple[int, int] | None:
    if not data.startswith(PNG_MAGIC) or len(data) < 24:
        return None
    return struct.unpack(">II", data[16:24])


class Check:
    def __init__(self, config_path: Path):
        self.config_path = config_path
        self.base = config_path.parent
        self.problems: list[str] = []
        self.notes: list[str] = []

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def resolve(self, entry: str) -> Path:
        return (self.base / entry).resolve()

    def run(self) -> None:
        try:
            config = json.loads(self.config_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            self.problem(f"{self.config_path}: cannot read the config: {err}")
            return
        bundle = config.get("bundle", {})
        macos = bundle.get("macOS", {})
        minimum = macos.get("minimumSystemVersion")
        if not minimum:
            self.problem("bundle.macOS.minimumSystemVersion is not set (libmlx needs macOS 14+)")
            minimum = "10.13"  # Tauri's default
        frameworks = self.frameworks(macos.get("frameworks", []), version_tuple(minimum))
        self.files(macos.get("files", {}), frameworks)
        self.plists(macos)
        self.icons(bundle.get("icon", []))

    def frameworks(self, entries: list[str], minimum: tuple[int, ...]) -> dict[str, Path]:
        """Checks each bundled dylib; returns them by file name (as they land in Frameworks/)."""
        bundled: dict[str, Path] = {}
        libraries: list[macho.MachO] = []
        for entry in entries:
            where = f"bundle.macOS.frameworks entry {entry!r}"
            if not entry.endswith(".dylib"):
                self.problem(f"{where}: only .dylib paths are expected here")
                continue
            path = self.resolve(entry)
            if not path.is_file():
                hint = "" if path.parent.is_dir() else " (nor does its folder: `make macos-deps`?)"
                self.problem(f"{where}: {path} does not exist{hint}")
                continue
            try:
                lib = macho.read(path)
            except macho.MachOError as err:
                self.problem(f"{where}: {err}")
                continue
            if lib.cpu != "arm64" or lib.file_type != "dylib":
                self.problem(f"{where}: {path} is a {lib.cpu} {lib.file_type}, not an arm64 dylib")
            if lib.install_name != f"@rpath/{path.name}":
                self.problem(
                    f"{where}: install name is {lib.install_name!r}, not '@rpath/{path.name}', so "
                    "the app's @executable_path/../Frameworks rpath would not find it"
                )
            if lib.min_macos and lib.min_macos > minimum[:2]:
                self.problem(
                    f"{where}: needs macOS {'.'.join(map(str, lib.min_macos))}, newer than "
                    f"bundle.macOS.minimumSystemVersion {'.'.join(map(str, minimum))}"
                )
            bundled[path.name] = path
            libraries.append(lib)
        for lib in libraries:
            for name in lib.loads:
                if name.startswith("@rpath/") and name.removeprefix("@rpath/") not in bundled:
                    self.problem(
                        f"{lib.path.name} loads {name}, which bundle.macOS.frameworks does not bundle"
                    )
        return bundled

    def files(self, entries: dict[str, str], frameworks: dict[str, Path]) -> None:
        placed: dict[str, Path] = {}
        for dest, source in entries.items():
            path = self.resolve(source)
            placed[dest] = path
            if not path.is_file():
                self.problem(
                    f"bundle.macOS.files entry {dest!r}: {source!r} resolves to {path}, which "
                    "does not exist"
                )
        for name, lib in frameworks.items():
            if name != "libmlx.dylib":
                continue
            metallib = placed.get("Frameworks/mlx.metallib")
            if metallib is not None and not metallib.is_file():
                continue  # reported above
            if metallib is None:
                self.problem(
                    "libmlx.dylib is bundled but bundle.macOS.files has no 'Frameworks/mlx.metallib' "
                    "(MLX loads its GPU kernels from beside the library)"
                )
                continue
            if metallib.read_bytes()[:4] != METALLIB_MAGIC:
                self.problem(f"{metallib} is not a Metal library (no MTLB header)")
            if metallib.parent != lib.parent:
                self.problem(
                    f"mlx.metallib comes from {metallib.parent} but libmlx.dylib from {lib.parent}: "
                    "both must come from the same wheel"
                )

    def plists(self, macos: dict) -> None:
        """Parses the Info.plist Tauri merges and the entitlements; checks they agree."""
        info: dict = {}
        info_paths = [self.base / "Info.plist"]
        if macos.get("infoPlist"):
            info_paths.append(self.resolve(macos["infoPlist"]))
            if not info_paths[-1].is_file():
                self.problem(f"bundle.macOS.infoPlist: {info_paths[-1]} does not exist")
        for path in info_paths:
            if path.is_file():
                info.update(self.plist(path, "Info.plist"))
        entitlements: dict = {}
        if macos.get("entitlements"):
            path = self.resolve(macos["entitlements"])
            if not path.is_file():
                self.problem(f"bundle.macOS.entitlements: {path} does not exist")
            else:
                entitlements = self.plist(path, "entitlements")
                for key in entitlements:
                    if not key.startswith("com.apple."):
                        self.problem(f"{path}: {key!r} is not an entitlement (com.apple.…)")

        hardened = macos.get("hardenedRuntime", True)  # Tauri's default is on
        if entitlements.get(MICROPHONE_ENTITLEMENT) and not info.get("NSMicrophoneUsageDescription"):
            self.problem(
                f"the entitlements ask for {MICROPHONE_ENTITLEMENT} but no Info.plist has "
                "NSMicrophoneUsageDescription: macOS ends the app when it opens the microphone"
            )
        if info.get("NSMicrophoneUsageDescription") and hardened and not entitlements.get(
            MICROPHONE_ENTITLEMENT
        ):
            self.problem(
                "Info.plist has NSMicrophoneUsageDescription and the hardened runtime is on, but the "
                f"entitlements lack {MICROPHONE_ENTITLEMENT}: the microphone would stay silent"
            )
        if hardened and macos.get("signingIdentity") == "-" and not entitlements.get(
            DISABLE_LIBRARY_VALIDATION
        ):
            self.problem(
                "hardenedRuntime is on with an ad-hoc signature (signingIdentity '-'): library "
                "validation would refuse the bundled libmlx.dylib (no team ID); sign with a "
                f"Developer ID or add {DISABLE_LIBRARY_VALIDATION}"
            )
        self.microphone(macos, info, entitlements)
        declared = [str(p) for p in info_paths if p.is_file()]
        if macos.get("entitlements"):
            declared.append(macos["entitlements"])
        self.notes.append(f"plists: {', '.join(declared) or 'none declared (Tauri writes Info.plist)'}")

    def microphone(self, macos: dict, info: dict, entitlements: dict) -> None:
        """When the UI records (getUserMedia), the bundle must let it: the prompt's text and
        the entitlement both, whatever the hardened-runtime setting of the day."""
        beside = self.base / "Entitlements.plist"
        named = macos.get("entitlements")
        if beside.is_file() and (not named or self.resolve(named) != beside.resolve()):
            self.problem(
                f"{beside} exists but bundle.macOS.entitlements does not name it: the bundle "
                "would be signed without it"
            )
        ui = (self.base / ".." / "ui" / "src").resolve()
        recorders = sorted(
            str(path.relative_to(ui))
            for path in ui.rglob("*.ts")
            if not path.name.endswith(".test.ts") and "getUserMedia" in path.read_text(errors="replace")
        ) if ui.is_dir() else []
        if not recorders:
            self.notes.append("microphone: the UI does not record")
            return
        where = ", ".join(recorders)
        description = info.get("NSMicrophoneUsageDescription")
        if not isinstance(description, str) or len(description.strip()) < MIN_USAGE_DESCRIPTION:
            self.problem(
                f"the UI records from the microphone ({where}) but no Info.plist has an "
                f"NSMicrophoneUsageDescription of at least {MIN_USAGE_DESCRIPTION} characters "
                "saying why: macOS ends an app that opens the microphone without one"
            )
        if entitlements.get(MICROPHONE_ENTITLEMENT) is not True:
            self.problem(
                f"the UI records from the microphone ({where}) but bundle.macOS.entitlements does "
                f"not grant {MICROPHONE_ENTITLEMENT}: under the hardened runtime the microphone "
                "would stay silent and macOS would never ask"
            )
        self.notes.append(f"microphone: recorded by {where}; usage description and entitlement present")

    def plist(self, path: Path, what: str) -> dict:
        try:
            with path.open("rb") as f:
                value = plistlib.load(f)
        except (OSError, plistlib.InvalidFileException, ValueError) as err:
            self.problem(f"{path}: not a valid {what} plist: {err}")
            return {}
        if not isinstance(value, dict):
            self.problem(f"{path}: a {what} plist must be a dictionary at the top")
            return {}
        return value

    def icons(self, entries: list[str]) -> None:
        icns = []
        for entry in entries:
            path = self.resolve(entry)
            if not path.is_file():
                self.problem(f"bundle.icon entry {entry!r}: {path} does not exist")
                continue
            if path.suffix == ".icns":
                icns.append(path)
            sized = re.fullmatch(r"(\d+)x(\d+)(@2x)?\.png", path.name)
            if sized:
                scale = 2 if sized.group(3) else 1
                want = (int(sized.group(1)) * scale, int(sized.group(2)) * scale)
                got = png_size(path.read_bytes())
                if got != want:
                    self.problem(f"bundle.icon entry {entry!r}: is {got}, its name says {want}")
        if not icns:
            self.problem("bundle.icon lists no .icns file (the macOS bundle's icon)")
        for path in icns:
            self.icns(path)

    def icns(self, path: Path) -> None:
        data = path.read_bytes()
        if data[:4] != b"icns" or struct.unpack(">I", data[4:8])[0] != len(data):
            self.problem(f"{path}: not an .icns file (bad header or length)")
            return
        found: dict[bytes, bytes] = {}
        offset = 8
        while offset + 8 <= len(data):
            kind = data[offset : offset + 4]
            (length,) = struct.unpack(">I", data[offset + 4 : offset + 8])
            if length < 8 or offset + length > len(data):
                self.problem(f"{path}: damaged entry {kind!r} at offset {offset}")
                return
            found[kind] = data[offset + 8 : offset + length]
            offset += length
        for kind, edge in ICNS_SLOTS.items():
            if kind not in found:
                self.problem(f"{path}: no {kind.decode()} entry ({edge}x{edge} px)")
                continue
            size = png_size(found[kind])
            if size is not None and size != (edge, edge):
                self.problem(f"{path}: {kind.decode()} is {size[0]}x{size[1]} px, not {edge}x{edge}")


def main() -> int:
    config = Path(sys.argv[1] if len(sys.argv) > 1 else "src-tauri/tauri.conf.json")
    check = Check(config)
    check.run()
    if check.problems:
        print(f"macOS bundle check of {config} failed:", file=sys.stderr)
        for problem in check.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"macOS bundle check of {config}: frameworks, files, icons and plists OK")
    for note in check.notes:
        print(f"  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
