#!/usr/bin/env python3
"""A minimal reader of the Mach-O load commands our macOS checks need (stdlib only).

Reads a thin 64-bit Mach-O file (or the arm64 slice of a universal one): its CPU and file type, its
install name, the libraries it loads, its rpaths and its minimum macOS version.

Usage: python3 .ci/macos/macho.py FILE...   (prints a summary, like a small `otool -L -l`)
"""

import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

MH_MAGIC_64 = 0xFEEDFACF
FAT_MAGIC = 0xCAFEBABE
CPU_TYPE_ARM64 = 0x0100000C
CPU_NAMES = {CPU_TYPE_ARM64: "arm64", 0x01000007: "x86_64"}
FILE_TYPES = {1: "object", 2: "executable", 6: "dylib", 8: "bundle"}

LC_LOAD_DYLIB = 0xC
LC_ID_DYLIB = 0xD
LC_LOAD_WEAK_DYLIB = 0x80000018
LC_RPATH = 0x8000001C
LC_REEXPORT_DYLIB = 0x8000001F
LC_BUILD_VERSION = 0x32
PLATFORM_MACOS = 1


class MachOError(Exception):
    """The file is not a Mach-O file this reader understands."""


@dataclass
class MachO:
    path: Path
    cpu: str
    file_type: str
    install_name: str | None = None
    loads: list[str] = field(default_factory=list)
    rpaths: list[str] = field(default_factory=list)
    min_macos: tuple[int, int] | None = None


def _version(packed: int) -> tuple[int, int]:
    return packed >> 16, (packed >> 8) & 0xFF


def _cstring(data: bytes, start: int, end: int) -> str:
    raw = data[start:end]
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def read(path: Path) -> MachO:
    data = path.read_bytes()
    if len(data) < 32:
        raise MachOError(f"{path}: too short to be a Mach-O file")
    if struct.unpack_from(">I", data)[0] == FAT_MAGIC:
        data = _arm64_slice(path, data)
    magic, cputype, _sub, filetype, ncmds, _size, _flags, _res = struct.unpack_from("<8I", data)
    if magic != MH_MAGIC_64:
        raise MachOError(f"{path}: not a 64-bit Mach-O file (magic {magic:#x})")
    macho = MachO(
        path=path,
        cpu=CPU_NAMES.get(cputype, f"cpu {cputype:#x}"),
        file_type=FILE_TYPES.get(filetype, f"type {filetype}"),
    )
    offset = 32
    for _ in range(ncmds):
        cmd, cmdsize = struct.unpack_from("<2I", data, offset)
        if cmdsize < 8 or offset + cmdsize > len(data):
            raise MachOError(f"{path}: damaged load command at offset {offset}")
        if cmd in (LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB, LC_ID_DYLIB):
            (name_at,) = struct.unpack_from("<I", data, offset + 8)
            name = _cstring(data, offset + name_at, offset + cmdsize)
            if cmd == LC_ID_DYLIB:
                macho.install_name = name
            else:
                macho.loads.append(name)
        elif cmd == LC_RPATH:
            (path_at,) = struct.unpack_from("<I", data, offset + 8)
            macho.rpaths.append(_cstring(data, offset + path_at, offset + cmdsize))
        elif cmd == LC_BUILD_VERSION:
            platform, minos = struct.unpack_from("<2I", data, offset + 8)
            if platform == PLATFORM_MACOS:
                macho.min_macos = _version(minos)
        offset += cmdsize
    return macho


def _arm64_slice(path: Path, data: bytes) -> bytes:
    (count,) = struct.unpack_from(">I", data, 4)
    for i in range(count):
        cputype, _sub, start, size, _align = struct.unpack_from(">5I", data, 8 + 20 * i)
        if cputype == CPU_TYPE_ARM64:
            return data[start : start + size]
    raise MachOError(f"{path}: universal file without an arm64 slice")


def main() -> int:
    for arg in sys.argv[1:]:
        try:
            m = read(Path(arg))
        except (OSError, MachOError) as err:
            print(err, file=sys.stderr)
            return 1
        minos = ".".join(map(str, m.min_macos)) if m.min_macos else "?"
        print(f"{m.path}: Mach-O {m.cpu} {m.file_type}, macOS {minos}+")
        if m.install_name:
            print(f"  install name  {m.install_name}")
        for name in m.loads:
            print(f"  loads         {name}")
        for rpath in m.rpaths:
            print(f"  rpath         {rpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
