"""Reference parity of the Rust engine against mlx-vlm, run by `make test` (float32, MLX CPU).

    run_all.py --cli target/debug/gemma-desk-cli --fixtures tests/out/fixtures

For each checkpoint variant: teacher-forced logits of a chat prompt plus a continuation long
enough to cross the 32-token sliding window several times. Ours runs one prefill forward then
>= 40 single-token decode steps (so the cache code is what is checked); the reference runs one
forward over all positions. Every row must reach cosine >= 0.9999 and the same argmax wherever
the reference's top-2 gap exceeds two bf16 ulps. Image prompts (one and two images) are checked
the same way when the fixture has a vision tower.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import compare  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

REFERENCE = HERE / "reference.py"
DECODE_STEPS = 45
MIN_COSINE = 0.9999


def run(args: list) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(map(str, args))}\n{result.stderr}")
    return result.stdout


def chat_ids(model: Path) -> list[int]:
    messages = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Tell me a long story about bread, mountains and rivers."},
    ]
    out = run([sys.executable, REFERENCE, "template", "--model", model, "--messages", json.dumps(messages)])
    return json.loads(out)["input_ids"]


def continuation(model: Path, count: int, seed: int) -> list[int]:
    vocab = json.loads((model / "config.json").read_text())["text_config"]["vocab_size"]
    rng = random.Random(seed)
    return [rng.randrange(5, vocab - 64) for _ in range(count)]


IMAGE_BUDGET = 70  # soft tokens per image: keeps the tiny model's image runs short


def make_images(work: Path) -> list[Path]:
    """A smooth landscape gradient with shapes, and a noisy portrait (different grids)."""
    import numpy as np
    from PIL import Image, ImageDraw

    first = Image.new("RGB", (260, 180))
    pixels = np.array(first)
    pixels[..., 0] = np.linspace(0, 255, 260)[None, :]
    pixels[..., 1] = np.linspace(255, 0, 180)[:, None]
    first = Image.fromarray(pixels)
    ImageDraw.Draw(first).ellipse((60, 40, 160, 140), fill=(250, 240, 30))
    second = Image.fromarray((np.random.default_rng(3).random((300, 140, 3)) * 255).astype("uint8"))
    paths = [work / "landscape.png", work / "portrait.jpg"]
    first.save(paths[0])
    second.save(paths[1], quality=92)
    return paths


def image_chat_ids(model: Path, images: list[Path]) -> list[int]:
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": "What do these show?"}]
    messages = [{"role": "user", "content": content}]
    image_args = [a for p in images for a in ("--image", p)]
    out = run([sys.executable, REFERENCE, "template", "--model", model, "--messages", json.dumps(messages),
               "--max-soft-tokens", IMAGE_BUDGET, *image_args])
    return json.loads(out)["input_ids"]


def check(name: str, model: Path, ids: list[int], cli: Path, work: Path, images: list[Path] = ()) -> bool:
    tokens = ",".join(map(str, ids))
    image_args = [a for p in images for a in ("--image", p)]
    if images:
        image_args += ["--max-soft-tokens", IMAGE_BUDGET]
    ref_out, ours_out = work / f"{name}.ref.safetensors", work / f"{name}.ours.safetensors"
    run([sys.executable, REFERENCE, "logits", "--model", model, "--tokens", tokens, "--dtype", "float32",
         "--all-positions", "--out", ref_out, *image_args])
    prefill = len(ids) - DECODE_STEPS
    run([cli, "logits", "--model", model, "--tokens", tokens, "--dtype", "float32", "--prefill", prefill,
         "--out", ours_out, *image_args])
    report = compare(load_file(ref_out)["logits"], load_file(ours_out)["logits"])
    ok = report.passed(MIN_COSINE)
    worst = int(report.cosine.argmin())
    print(f"{'PASS' if ok else 'FAIL'}  {name:<28} {report.rows:>4} rows (prefill {prefill} + {DECODE_STEPS} decode)"
          f"  min cosine {report.cosine.min():.7f} (row {worst})  argmax mismatches "
          f"{int(report.argmax_mismatch.sum())}/{int(report.eligible.sum())}  max|diff| {report.max_abs_diff:.2e}")
    return ok


def check_greedy(name: str, model: Path, cli: Path) -> bool:
    """Greedy float32 generation: both engines pick the same tokens."""
    prompt, count = "How do I make bread at home?", 30
    ref = json.loads(run([sys.executable, REFERENCE, "generate", "--model", model, "--prompt", prompt,
                          "--max-tokens", count, "--dtype", "float32"]))["tokens"]
    return same_tokens(name, ref, greedy_tokens(cli, model, prompt, count))


def greedy_tokens(cli: Path, model: Path, prompt: str, count: int, *extra) -> list[int]:
    """Our greedy float32 answer to `prompt` (`extra`: more `generate` arguments), as token ids."""
    lines = run([cli, "generate", "--model", model, "--prompt", prompt, "--max-tokens", count,
                 "--temperature", "0", "--dtype", "float32", "--json", *extra]).splitlines()
    return [json.loads(line)["token"] for line in lines if '"token"' in line]


def same_tokens(name: str, ref: list[int], ours: list[int]) -> bool:
    """Prints how far the two token lists agree; true when they are equal."""
    same = next((i for i, (a, b) in enumerate(zip(ref, ours)) if a != b), min(len(ref), len(ours)))
    ok = ours == ref
    print(f"{'PASS' if ok else 'FAIL'}  {name:<28} greedy tokens equal for {same}/{len(ref)} steps")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", type=Path, required=True)
    parser.add_argument("--fixtures", type=Path, required=True)
    parser.add_argument("--images", type=Path, default=HERE.parent.parent / "assets" / "samples")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for variant in ["tiny", "tiny-optiq", "tiny-plmp-bf16"]:
            model = args.fixtures / variant
            ids = chat_ids(model) + continuation(model, 80, seed=len(variant))
            results.append(check(f"{variant}/text", model, ids, args.cli, work))
        results.append(check_greedy("tiny/greedy-generate", args.fixtures / "tiny", args.cli))
        images = make_images(work)
        tiny = args.fixtures / "tiny"
        for count in (1, 2):
            ids = image_chat_ids(tiny, images[:count]) + continuation(tiny, 50, seed=count)
            results.append(check(f"tiny/{count}-image prompt", tiny, ids, args.cli, work, images[:count]))
    failed = results.count(False)
    print(f"\n{len(results) - failed}/{len(results)} parity checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
