"""Prove the parity harness: it must accept mlx-vlm against itself and reject a broken model.

    self_check.py [--work DIR]

1. Generates the `tiny` and `tiny-optiq` checkpoints.
2. For a chat prompt of >= 80 tokens (crossing the 32-token sliding window several times)
   and an image prompt: logits with --prefill N (one forward, then >= 40 single-token steps
   through the KV cache) must match one-shot --all-positions logits (float32, cosine >= 0.9999,
   argmax wherever the top-2 gap exceeds two bf16 ulps).
3. Deliberate bugs in the reference model (softcap off, sliding window off by one, proportional
   RoPE exponent over the rotated width) must FAIL the comparison.
4. Reports how spread the logits are and how long each step took.
Exits 1 when any expectation does not hold.
"""

import argparse
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_vlm.utils import load_image
from PIL import Image
from safetensors.numpy import load_file

import compare
import reference

ROOT = Path(__file__).resolve().parents[2]
MAKE_CHECKPOINT = ROOT / "tests" / "fixtures" / "make_checkpoint.py"
REFERENCE = Path(__file__).with_name("reference.py")
DECODE_STEPS = 48
IMAGE_SOFT_TOKENS = 70

CHAT = [
    {"role": "system", "content": "Answer in short, plain sentences."},
    {"role": "user", "content": "How do I make bread at home? I have flour, water, salt and yeast. "
                                "How long should it bake?"},
]  # fmt: skip
IMAGE_CHAT = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]}]
REPLY = "Knead the dough for ten minutes, let it rise for an hour, then bake it for forty minutes."

timings: list[tuple[str, float]] = []
failures: list[str] = []


@contextmanager
def timed(label: str):
    start = time.perf_counter()
    yield
    timings.append((label, time.perf_counter() - start))


def run(*args) -> None:
    subprocess.run([sys.executable, *map(str, args)], check=True, stderr=subprocess.DEVNULL)


def expect(ok: bool, what: str) -> None:
    print(f"  [{'ok' if ok else 'FAILED'}] {what}")
    if not ok:
        failures.append(what)


def synthetic_image(path: Path) -> None:
    """A 300x420 RGB test card: gradients plus a stripe pattern (deterministic, no asset file)."""
    y, x = np.mgrid[0:300, 0:420]
    pixels = np.stack([x * 255 // 420, y * 255 // 300, ((x // 12 + y // 12) % 2) * 200 + 20], axis=-1)
    Image.fromarray(pixels.astype(np.uint8)).save(path)


def prompt_ids(model_dir: Path, messages: list, image: Path | None = None) -> list[int]:
    """Chat-template ids followed by a model reply, so the sequence continues past the prompt."""
    processor = reference.load_processor(model_dir)
    prompt = processor.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt += REPLY
    if image is None:
        return processor.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    images = [load_image(str(image))]
    ids = processor(text=prompt, images=images, add_special_tokens=False, max_soft_tokens=IMAGE_SOFT_TOKENS)
    return np.array(ids["input_ids"]).reshape(-1).tolist()


def logits_cli(model_dir: Path, ids: list[int], out: Path, dtype: str, prefill: int | None, image: Path | None):
    args = [REFERENCE, "logits", "--model", model_dir, "--tokens", ",".join(map(str, ids)), "--dtype", dtype,
            "--out", out]  # fmt: skip
    args += ["--prefill", prefill] if prefill is not None else ["--all-positions"]
    if image is not None:
        args += ["--image", image, "--max-soft-tokens", IMAGE_SOFT_TOKENS]
    run(*args)
    return load_file(out)["logits"]


def check_prefill_matches_one_shot(
    name: str, model_dir: Path, ids: list[int], work: Path, image: Path | None = None, show_bf16: bool = False
) -> np.ndarray:
    prefill = len(ids) - DECODE_STEPS
    stem = name.replace("/", "_")
    print(f"{name}: {len(ids)} tokens, prefill {prefill} + {DECODE_STEPS} decode steps")
    with timed(f"{name}: one-shot logits (float32)"):
        one_shot = logits_cli(model_dir, ids, work / f"{stem}_one_shot.safetensors", "float32", None, image)
    with timed(f"{name}: prefill + decode logits (float32)"):
        stepped = logits_cli(model_dir, ids, work / f"{stem}_prefill.safetensors", "float32", prefill, image)
    report = compare.compare(one_shot, stepped)
    print(compare.summary(report, 0.9999))
    expect(report.passed(0.9999), f"{name}: prefill+decode equals one-shot in float32")
    expect(report.reference_std > 2.0, f"{name}: logits std {report.reference_std:.2f} > 2")
    eligible = report.eligible.mean()
    expect(eligible > 0.75, f"{name}: {eligible:.0%} of rows have a top-2 gap > 2 bf16 ulps")
    if not show_bf16:
        return one_shot

    with timed(f"{name}: one-shot + prefill logits (bfloat16)"):
        bf_one = logits_cli(model_dir, ids, work / f"{stem}_one_shot_bf16.safetensors", "bfloat16", None, image)
        bf_step = logits_cli(model_dir, ids, work / f"{stem}_prefill_bf16.safetensors", "bfloat16", prefill, image)
    bf = compare.compare(bf_one, bf_step)
    print(f"  [info] bfloat16 prefill vs one-shot: min cosine {bf.cosine.min():.5f}, "
          f"argmax mismatches {int(bf.argmax_mismatch.sum())}/{int(bf.eligible.sum())}")  # fmt: skip
    bf_vs_f32 = compare.compare(one_shot, bf_one)
    print(f"  [info] bfloat16 vs float32 one-shot: min cosine {bf_vs_f32.cosine.min():.5f}")
    return one_shot


def softcap_off(model) -> None:
    model.language_model.final_logit_softcapping = None


def sliding_window_plus_one(model) -> None:
    model.language_model.model.window_size += 1
    model.language_model.config.sliding_window += 1


def rope_exponent_over_rotated_dims(model) -> None:
    """Full layers' inverse frequencies computed as theta^(-2j/rotated) instead of theta^(-2j/head_dim)."""
    for layer in model.language_model.model.layers:
        rope = layer.self_attn.rope
        if hasattr(rope, "rope_angles"):
            head_dim, angles = rope.dims, rope.rope_angles
            exponents = mx.arange(0, 2 * angles, 2, dtype=mx.float32) / (2 * angles)
            rotating = mx.power(1000000.0, exponents)
            rope._freqs = mx.concatenate([rotating, mx.full((head_dim // 2 - angles,), mx.inf)])


def check_bugs_fail(model_dir: Path, ids: list[int], good: np.ndarray) -> None:
    for bug in (softcap_off, sliding_window_plus_one, rope_exponent_over_rotated_dims):
        model, _ = reference.load(model_dir, "float32")
        bug(model)
        with timed(f"tiny: one-shot logits with bug {bug.__name__}"):
            broken = np.array(reference.forward_logits(model, ids, None, None))
        report = compare.compare(good, broken)
        expect(
            not report.passed(0.9999),
            f"bug {bug.__name__} is caught: min cosine {report.cosine.min():.6f}, "
            f"argmax mismatches {int(report.argmax_mismatch.sum())}/{int(report.eligible.sum())}",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "tests" / "out" / "self_check")
    work: Path = parser.parse_args().work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    image = work / "test_card.png"
    synthetic_image(image)

    for variant in ("tiny", "tiny-optiq"):
        with timed(f"{variant}: generate checkpoint"):
            run(MAKE_CHECKPOINT, "--variant", variant, "--out", work / variant)

    tiny = work / "tiny"
    chat_ids = prompt_ids(tiny, CHAT)
    good = check_prefill_matches_one_shot("tiny/text", tiny, chat_ids, work, show_bf16=True)
    check_prefill_matches_one_shot("tiny/image", tiny, prompt_ids(tiny, IMAGE_CHAT, image), work, image)
    optiq = work / "tiny-optiq"
    check_prefill_matches_one_shot("tiny-optiq/text", optiq, prompt_ids(optiq, CHAT), work)
    check_bugs_fail(tiny, chat_ids, good)

    print("\ntimings")
    for label, seconds in timings:
        print(f"  {seconds:7.2f} s  {label}")
    print(f"\n{'FAIL' if failures else 'PASS'}: {len(failures)} expectation(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
