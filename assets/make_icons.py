#!/usr/bin/env python3
"""Draws the app icon with ImageMagick and writes every size Tauri bundles into assets/icons/.

Usage: python3 assets/make_icons.py   (needs ImageMagick's `convert`; output is deterministic)
"""

import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ICONS = Path(__file__).resolve().parent / "icons"

# macOS layout: an 824 px rounded square centred on a 1024 px transparent canvas.
CANVAS = 1024
TILE = 824
RADIUS = 185
GRADIENT = ("#6A5AF9", "#14B1D8")  # violet at the top left to cyan at the bottom right

# The "G": an open ring with round caps, closed by a bar that runs in towards the centre.
G_PATH = "M 522,268 A 170,170 0 1 0 582,412 L 452,412"
G_STROKE = 84

PNG_STRIP = ["-strip", "-define", "png:exclude-chunks=date,time"]

# icns entry type for each PNG edge length (the @2x types reuse the larger images).
ICNS_TYPES = [
    (b"icp4", 16),
    (b"icp5", 32),
    (b"ic11", 32),
    (b"icp6", 64),
    (b"ic12", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic13", 256),
    (b"ic09", 512),
    (b"ic14", 512),
    (b"ic10", 1024),
]
ICO_SIZES = [16, 24, 32, 48, 64, 256]


def convert(*args: str) -> None:
    subprocess.run(["convert", *args], check=True)


def draw_master(work: Path) -> Path:
    tile = work / "tile.png"
    convert(
        "-size", f"{TILE}x{TILE}", "-define", "gradient:direction=SouthEast",
        f"gradient:{GRADIENT[0]}-{GRADIENT[1]}",
        "(", "-size", f"{TILE}x{TILE}", "xc:black", "-fill", "white",
        "-draw", f"roundrectangle 0,0,{TILE - 1},{TILE - 1},{RADIUS},{RADIUS}", ")",
        "-alpha", "off", "-compose", "CopyOpacity", "-composite",
        "-compose", "Over", "-fill", "none", "-stroke", "white", "-strokewidth", str(G_STROKE),
        "-draw", f"stroke-linecap round stroke-linejoin round path '{G_PATH}'",
        str(tile),
    )
    master = work / "master.png"
    convert(
        "-size", f"{CANVAS}x{CANVAS}", "xc:none",
        "(", str(tile), "-background", "#1B1B3A", "-shadow", "28x14+0+10", ")",
        "-gravity", "center", "-geometry", "+0+10", "-composite",
        str(tile), "-gravity", "center", "-composite",
        *PNG_STRIP, f"PNG32:{master}",
    )
    return master


def resize(master: Path, size: int, out: Path) -> None:
    convert(str(master), "-filter", "Lanczos", "-resize", f"{size}x{size}", *PNG_STRIP, f"PNG32:{out}")


def write_icns(pngs: dict[int, bytes], out: Path) -> None:
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES)
    out.write_bytes(b"icns" + struct.pack(">I", 8 + len(body)) + body)


def write_ico(pngs: dict[int, bytes], out: Path) -> None:
    header = struct.pack("<HHH", 0, 1, len(ICO_SIZES))
    offset = len(header) + 16 * len(ICO_SIZES)
    entries, images = b"", b""
    for size in ICO_SIZES:
        data = pngs[size]
        edge = 0 if size >= 256 else size  # 0 means 256 in the ICO directory
        entries += struct.pack("<BBBBHHII", edge, edge, 0, 0, 1, 32, len(data), offset)
        images += data
        offset += len(data)
    out.write_bytes(header + entries + images)


def main() -> int:
    if shutil.which("convert") is None:
        print("make_icons.py: ImageMagick `convert` is not installed", file=sys.stderr)
        return 1
    ICONS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        master = draw_master(work)
        sizes = sorted({size for _, size in ICNS_TYPES} | set(ICO_SIZES))
        pngs = {}
        for size in sizes:
            path = work / f"{size}.png"
            resize(master, size, path)
            pngs[size] = path.read_bytes()

    for name, size in [("32x32.png", 32), ("128x128.png", 128), ("128x128@2x.png", 256), ("icon.png", 512)]:
        (ICONS / name).write_bytes(pngs[size])
    write_icns(pngs, ICONS / "icon.icns")
    write_ico(pngs, ICONS / "icon.ico")
    return 0


if __name__ == "__main__":
    sys.exit(main())
