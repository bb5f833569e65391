"""Image preprocessing parity: the app's Rust preprocessing against mlx-vlm's Gemma 4 processor.

    .deps/py/bin/python tests/parity/image_parity.py [--model DIR] [--keep DIR]

Draws test pictures with Pillow (photo-like content; portrait, landscape, tiny, 4000x3000,
slivers, every EXIF orientation, palette, grayscale, 16-bit, CMYK, progressive, WebP, GIF, BMP,
TIFF), preprocesses each with the reference (mlx-vlm 0.7.10's image processor, loaded as
`reference.py pixels` loads it) and with `cargo run -p engine --example preprocess`, and requires
every value of the [3, H, W] tensors to agree within 0.1/255, the sizes and soft-token counts to
be equal.

Where the app deliberately differs from the reference (alpha is composited onto white; 16-bit
grayscale keeps its high byte), the app's output on the original file is compared with the
reference's output on the picture as the app is specified to see it, and the raw difference from
the reference on the original file is printed alongside.

Prints a table; exits 1 when any comparison fails. Honours CARGO_TARGET_DIR.
"""

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors import safe_open

import reference

ROOT = Path(__file__).resolve().parents[2]
MAKE_CHECKPOINT = ROOT / "tests" / "fixtures" / "make_checkpoint.py"
TOLERANCE = 0.1 / 255


def photo(width: int, height: int, seed: int) -> np.ndarray:
    """Smooth shapes, edges and sensor-like noise: resampling differences show up on all of them."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    u, v = x / max(width, 1), y / max(height, 1)
    r = 128 + 110 * np.sin(6.0 * u + 3.0 * v + seed)
    g = 128 + 100 * np.cos(9.0 * u * v + 2.0 * v)
    b = 255 * ((u * 4 + v * 3) % 1.0)
    rgb = np.stack([r, g, b], -1)
    rgb[(x // 23 + y // 31) % 7 == 0] *= 0.35  # hard edges
    rgb += rng.normal(0, 9, rgb.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def png_16bit(pixels: np.ndarray) -> bytes:
    """A 16-bit RGB (or gray) PNG; Pillow writes neither."""
    height, width = pixels.shape[:2]
    color_type = 2 if pixels.ndim == 3 else 0
    rows = b"".join(b"\0" + pixels[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def over_white(rgba: np.ndarray) -> np.ndarray:
    """The app's flattening, in integers: round(c·a/255 + 255·(1 - a/255))."""
    c, a = rgba[..., :3].astype(np.int64), rgba[..., 3:4].astype(np.int64)
    return ((c * a + 255 * (255 - a) + 127) // 255).astype(np.uint8)


@dataclass
class Case:
    name: str
    write: Callable[[Path], None]
    budgets: tuple[int, ...] = (280,)
    # For deliberate differences: writes the picture as the app sees it, for the reference to run on.
    as_specified: Callable[[Path], None] | None = None
    note: str = ""


def save(image: Image.Image, **options):
    return lambda path: image.save(path, **options)


def cases() -> list[Case]:
    portrait = Image.fromarray(photo(600, 900, 1))
    landscape = Image.fromarray(photo(1024, 683, 2))
    oriented = Image.fromarray(photo(300, 200, 3))
    rgba = photo(320, 240, 4)
    alpha = (np.linspace(0, 255, 320)[None, :] * np.ones((240, 1))).astype(np.uint8)
    alpha[:60] = 0
    rgba = np.dstack([rgba, alpha])
    gray = photo(500, 300, 5)[..., 1]
    gray16 = (gray.astype(np.uint16) << 8) | (gray[::-1].astype(np.uint16))
    rgb16 = (photo(400, 300, 6).astype(np.uint16) << 8) | photo(400, 300, 7).astype(np.uint16)
    palette = Image.fromarray(photo(333, 222, 8)).quantize(200)
    palette_trns = palette.copy()
    palette_trns.info["transparency"] = 3

    out = [
        Case("portrait.png", save(portrait)),
        Case("landscape.png", save(landscape), budgets=(70, 140, 280, 560, 1120)),
        Case("tiny.png", save(Image.fromarray(photo(30, 20, 9)))),
        Case("exact_grid.png", save(Image.fromarray(photo(960, 624, 10))), note="already 960x624: no resize"),
        Case("huge.jpg", save(Image.fromarray(photo(4000, 3000, 11)), quality=92), budgets=(280, 1120)),
        Case("phone_screenshot.png", save(Image.fromarray(photo(1170, 2532, 14))), note="height pass first"),
        Case("tall.jpg", save(Image.fromarray(photo(800, 3000, 15)), quality=90), note="height pass first"),
        Case("sliver_wide.png", save(Image.fromarray(photo(5000, 1, 12))), budgets=(280, 1120)),
        Case("sliver_tall.png", save(Image.fromarray(photo(1, 5000, 13)))),
        Case("gray.png", save(Image.fromarray(gray))),
        Case("gray.jpg", save(Image.fromarray(gray), quality=90)),
        Case("palette.png", save(palette)),
        Case("rgb16.png", lambda p: p.write_bytes(png_16bit(rgb16))),
        Case("progressive.jpg", save(landscape, quality=80, progressive=True)),
        Case("subsampled_422.jpg", save(portrait, quality=85, subsampling=1)),
        Case("cmyk.jpg", save(landscape.convert("CMYK"), quality=90)),
        Case("lossy.webp", save(landscape, quality=80)),
        Case("lossless.webp", save(portrait, lossless=True)),
        Case("opaque.gif", save(landscape.quantize(256))),
        Case(
            "animated.gif",
            save(portrait.quantize(128), save_all=True, append_images=[landscape.resize((600, 900)).quantize(128)]),
            note="first frame",
        ),
        Case("plain.bmp", save(portrait)),
        Case("lzw.tiff", save(landscape, compression="tiff_lzw")),
        Case("deflate.tiff", save(portrait, compression="tiff_adobe_deflate")),
        Case("exif6.png", lambda p: oriented.save(p, exif=exif_bytes(6)), note="PNG eXIf orientation"),
        Case(
            "alpha.png",
            save(Image.fromarray(rgba, "RGBA")),
            as_specified=save(Image.fromarray(over_white(rgba))),
            note="alpha onto white",
        ),
        Case(
            "gray_alpha.png",
            save(Image.fromarray(np.dstack([gray, gray[::-1]]), "LA")),
            as_specified=save(Image.fromarray(over_white(np.dstack([gray, gray, gray, gray[::-1]]))[..., 0])),
            note="alpha onto white",
        ),
        Case(
            "palette_transparency.png",
            save(palette_trns, transparency=3),
            as_specified=save(Image.fromarray(over_white(np.array(palette_trns.convert("RGBA"))))),
            note="transparent index onto white",
        ),
        Case(
            "gray16.png",
            lambda p: p.write_bytes(png_16bit(gray16)),
            as_specified=save(Image.fromarray((gray16 >> 8).astype(np.uint8))),
            note="16-bit gray: high byte",
        ),
    ]
    for orientation in range(1, 9):
        out.append(
            Case(f"exif{orientation}.jpg", save(oriented, quality=90, exif=exif_bytes(orientation)), note="EXIF")
        )
    return out


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def build_example() -> Path:
    """Builds `examples/preprocess.rs` and returns the executable's path."""
    command = ["cargo", "build", "-p", "engine", "--example", "preprocess", "--message-format=json"]
    result = subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True)
    for line in result.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "preprocess":
            if message.get("executable"):
                return Path(message["executable"])
    sys.exit("cargo did not report the preprocess example's executable")


def ours(executable: Path, image: Path, budget: int, out: Path) -> tuple[np.ndarray, int]:
    subprocess.run([executable, image, "--max-soft-tokens", str(budget), "--out", out], check=True)
    with safe_open(str(out), "np") as f:
        return f.get_tensor("pixels"), int(f.metadata()["soft_tokens"])


def theirs(processor, image: Path, budget: int) -> tuple[np.ndarray, int]:
    pixels, soft_tokens = reference.preprocess_images(processor, [image], budget)
    return np.array(pixels)[0], soft_tokens[0]


def max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")


def tiny_checkpoint(work: Path) -> Path:
    existing = ROOT / "tests" / "out" / "self_check" / "tiny"
    if (existing / "processor_config.json").exists():
        return existing
    out = work / "tiny"
    subprocess.run([sys.executable, MAKE_CHECKPOINT, "--variant", "tiny", "--out", out], check=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="any Gemma 4 checkpoint folder (only its processor is used)")
    parser.add_argument("--keep", type=Path, help="write the test images and tensors here instead of a temp folder")
    parser.add_argument("--preprocess", type=Path, help="an already built `preprocess` example (default: cargo build)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temp:
        work = args.keep or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        processor = reference.load_processor(args.model or tiny_checkpoint(work))
        executable = args.preprocess or build_example()

        rows, failures, exact = [], 0, 0
        for case in cases():
            path = work / case.name
            case.write(path)
            size = "x".join(map(str, Image.open(path).size))
            expected_path = path
            if case.as_specified:
                expected_path = work / f"as_specified_{Path(case.name).stem}.png"
                case.as_specified(expected_path)
            for budget in case.budgets:
                mine, mine_tokens = ours(executable, path, budget, work / f"{path.stem}_{budget}.safetensors")
                ref, ref_tokens = theirs(processor, expected_path, budget)
                diff = max_diff(mine, ref)
                note = case.note
                if case.as_specified:
                    raw, _ = theirs(processor, path, budget)
                    note += f"; vs reference on the original file: {max_diff(mine, raw) * 255:.1f}/255"
                ok = diff <= TOLERANCE and mine_tokens == ref_tokens
                failures += not ok
                exact += diff == 0.0
                grid = "x".join(map(str, mine.shape[:0:-1]))
                rows.append((case.name, size, budget, grid, mine_tokens, f"{diff * 255:.3f}", "ok" if ok else "FAIL", note))

    headers = ("image", "size WxH", "budget", "grid WxH", "tokens", "max|d|*255", "result", "note")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    print(f"\n{len(rows) - failures}/{len(rows)} agree within 0.1/255 ({exact} bit for bit)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
