"""Speculative decoding with Gemma 4's MTP drafter against mlx-vlm 0.7.10, round by round.

    mtp_parity.py --cli target/debug/gemma-desk-cli --model DIR --drafter DIR

float32, greedy, on a random-weight target + drafter pair. For each prompt (a short one that
the answer grows past the 32-token sliding window, one longer than the window, and one with an
image when given): mlx-vlm's `generate_step` with `draft_kind="mtp"` and ours
(`gemma-desk-cli generate --draft-model … --draft-always --json`) must draft the same tokens in
every round, accept the same number of them, and answer with the same tokens as plain greedy
decoding. Random drafters are almost never right, so the accepting paths are driven by the
engine's own tests (scripted drafts); here it is the drafter's forward, the donor K/V each round
reads (the sliding-window quirks of docs/SPECULATIVE.md) and the verify that are checked.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_map

warnings.filterwarnings("ignore", message="At least one mel filter has all zero values")

MAX_TOKENS = 64
BLOCK = 4
IMAGE_BUDGET = 70
PROMPTS = {
    "short text prompt": "Count slowly.",
    "text prompt longer than the window": "Tell me a long story about bread, mountains, rivers, "
    "old bridges, the sea, a lighthouse keeper and her dog, in many careful words.",
}


def to_float32(model) -> None:
    model.update(tree_map(lambda a: a.astype(mx.float32) if mx.issubdtype(a.dtype, mx.floating) else a,
                          model.parameters()))
    mx.eval(model.parameters())


def reference(model, processor, drafter, text: str, image: Path | None):
    from mlx_vlm.generate import generate_step
    from mlx_vlm.utils import load_image

    content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]
    prompt = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
    if image:
        inputs = processor(text=prompt, images=[load_image(str(image))], add_special_tokens=False,
                           max_soft_tokens=IMAGE_BUDGET)
        ids = mx.array(inputs["input_ids"])
        pixels = inputs["pixel_values"]
        pixels = mx.array(pixels) if not isinstance(pixels, list) else [mx.array(p) for p in pixels]
        pixels = pixels.astype(mx.float32)
    else:
        ids = mx.array([processor.tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        pixels = None

    def run(**kw):
        return [int(t) for t, _ in generate_step(ids, model, pixels, None, max_tokens=MAX_TOKENS,
                                                 temperature=0.0, **kw)]

    plain = run()
    drafts = []
    block = drafter.draft_block

    def recording(*args, **kwargs):
        out = block(*args, **kwargs)
        drafts.append([int(x) for x in out.reshape(-1).tolist()])
        return out

    drafter.draft_block = recording
    try:
        spec = run(draft_model=drafter, draft_kind="mtp", draft_block_size=BLOCK)
    finally:
        drafter.draft_block = block
    return plain, spec, drafts, list(drafter.accept_lens), ids.shape[1]


def ours(cli: Path, model: Path, drafter: Path, text: str, image: Path | None):
    args = [cli, "generate", "--model", model, "--prompt", text, "--max-tokens", MAX_TOKENS,
            "--temperature", "0", "--dtype", "float32", "--json", "--draft-model", drafter,
            "--draft-block-size", BLOCK, "--draft-always"]
    if image:
        args += ["--image", image, "--max-soft-tokens", IMAGE_BUDGET]
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"gemma-desk-cli failed: {result.stderr}")
    tokens, usage = [], None
    for line in result.stdout.splitlines():
        record = json.loads(line)
        if "token" in record:
            tokens.append(record["token"])
        if "usage" in record:
            usage = record["usage"]
    spec = usage["speculative"]
    return tokens, spec["drafts"], spec["acceptedPerRound"], usage["promptTokens"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--drafter", type=Path, required=True)
    args = parser.parse_args()

    from mlx_vlm import load
    from mlx_vlm.speculative.drafters import load_drafter

    model, processor = load(str(args.model))
    to_float32(model)
    drafter, _ = load_drafter(str(args.drafter), kind="mtp")
    to_float32(drafter)

    cases = [(name, text, None) for name, text in PROMPTS.items()]
    with tempfile.TemporaryDirectory() as work:
        image = Path(work) / "gradient.png"
        draw_image(image)
        cases.append(("image prompt", "What does this show?", image))
        failures = sum(check(args, model, processor, drafter, *case) for case in cases)
    sys.exit(1 if failures else 0)


def draw_image(path: Path) -> None:
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:96, 0:128]
    rgb = np.stack([x * 2, y * 2, (x + y) % 256], axis=-1).astype(np.uint8)
    Image.fromarray(rgb).save(path)


def check(args, model, processor, drafter, name: str, text: str, image: Path | None) -> bool:
    plain, spec, ref_drafts, ref_accepts, prompt_len = reference(model, processor, drafter, text, image)
    tokens, our_drafts, our_accepts, our_prompt_len = ours(args.cli, args.model, args.drafter, text, image)
    n = len(tokens)
    problems = []
    if our_prompt_len != prompt_len:
        problems.append(f"prompt has {our_prompt_len} tokens, reference {prompt_len}")
    if spec[:n] != plain[:n]:
        problems.append("the reference's speculative answer differs from its plain one")
    if tokens != plain[:n]:
        first = next(i for i, (a, b) in enumerate(zip(tokens, plain)) if a != b)
        problems.append(f"answer differs from the reference's plain greedy at token {first}")
    rounds = min(len(our_drafts), len(ref_drafts))
    for r in range(rounds):
        if our_drafts[r] != ref_drafts[r] or our_accepts[r] != ref_accepts[r]:
            problems.append(f"round {r}: drafted {our_drafts[r]} accepted {our_accepts[r]}, "
                            f"reference {ref_drafts[r]} accepted {ref_accepts[r]}")
            break
    if n < 60 or rounds < 30:
        problems.append(f"only {n} tokens / {rounds} rounds compared")
    status = "ok" if not problems else "FAIL"
    print(f"{status:4} {name}: prompt {prompt_len} tokens, {n} generated, {rounds} rounds compared, "
          f"drafts accepted {sum(our_accepts)} (reference {sum(ref_accepts)})")
    for p in problems:
        print(f"       {p}")
    return bool(problems)


if __name__ == "__main__":
    main()
