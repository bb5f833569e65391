"""mlx-vlm's side of the memory table (`bench/memory.py`): one process, one JSON object.

    memory_reference.py --model DIR [--prefill 2048,8192] [--dtype float32]

MLX's active and peak bytes and the process's resident set after `mlx_vlm.load` (every weight
evaluated) and after each prefill from empty caches through `stream_generate` (mlx-vlm's own
chunked prefill, one token generated), as `gemma-desk-bench --memory` measures ours.
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def rss_bytes() -> int | None:
    status = Path("/proc/self/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


CLIP_SECONDS = 30  # tools::memory::CLIP_SECONDS


def tone_sweep(seconds: int):
    """tools::memory::tone_sweep: 16 kHz mono, a 220→880 Hz glide under a quieter 330 Hz tone."""
    import numpy as np

    t = np.arange(seconds * 16000, dtype=np.float64) / 16000.0
    glide = 2 * np.pi * (220.0 * t + 660.0 * t * t / (2.0 * seconds))
    return (0.3 * np.sin(glide) + 0.1 * np.sin(2 * np.pi * 330.0 * t)).astype(np.float32)


def gradient_image():
    """tools::memory::gradient_bmp(640, 480) as a PIL image."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:480, 0:640]
    rgb = np.stack([x * 255 // 640, y * 255 // 480, (x + y) % 256], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb[::-1].copy(), "RGB")  # a BMP's rows run bottom-up


def media_question(model, processor, kind: str) -> int:
    """A first question about a 640×480 picture (280 soft tokens, as the app sends it) or a 30 s
    clip, prefilled whole through the model with a fresh cache and one token taken: what
    mlx-vlm does for a prompt with media (its processor's inputs, then the model's forward).
    Returns the prompt's length in tokens."""
    import mlx.core as mx
    import numpy as np
    from mlx_vlm.prompt_utils import apply_chat_template

    if kind == "image_question":
        prompt = apply_chat_template(processor, model.config, "Describe this picture.", num_images=1)
        inputs = processor(text=prompt, images=[gradient_image()], max_soft_tokens=280, add_special_tokens=False)
        pixels = inputs["pixel_values"]
        media = {"pixel_values": [mx.array(p) for p in pixels] if isinstance(pixels, list) else mx.array(pixels)}
    else:
        prompt = apply_chat_template(processor, model.config, "What do you hear?", num_audios=1)
        inputs = processor(text=prompt, audio=[tone_sweep(CLIP_SECONDS)], add_special_tokens=False)
        media = {
            "input_features": mx.array(inputs["input_features"]),
            "input_features_mask": mx.array(inputs["input_features_mask"]),
        }
    ids = np.array(inputs["input_ids"]).reshape(1, -1)
    cache = model.make_cache()
    logits = model(mx.array(ids, dtype=mx.int32), cache=cache, **media).logits[0, -1]
    mx.eval(mx.argmax(logits))
    return int(ids.shape[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--prefill", default="2048")
    parser.add_argument("--dtype")
    args = parser.parse_args()

    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_vlm import load, stream_generate

    def snapshot() -> dict:
        return {
            "mlx_active_bytes": int(mx.get_active_memory()),
            "mlx_peak_bytes": int(mx.get_peak_memory()),
            "mlx_cache_bytes": int(mx.get_cache_memory()),
            "rss_bytes": rss_bytes(),
        }

    mx.clear_cache()
    mx.reset_peak_memory()
    before = snapshot()
    start = time.perf_counter()
    model, processor = load(args.model)
    if args.dtype:
        target = getattr(mx, args.dtype)
        model.update(
            tree_map(lambda a: a.astype(target) if mx.issubdtype(a.dtype, mx.floating) else a, model.parameters())
        )
    mx.eval(model.parameters())
    load_s = time.perf_counter() - start
    after_load = snapshot()
    vocab = model.language_model.config.vocab_size
    config = model.config
    media = {getattr(config, k, None) for k in ("image_token_id", "audio_token_id", "video_token_id")}
    prefills = []
    for length in [int(n) for n in args.prefill.split(",") if n]:
        mx.clear_cache()
        mx.reset_peak_memory()
        first = snapshot()
        ids, state = [2], 7
        while len(ids) < length:
            state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
            token = 10 + (state >> 33) % (vocab - 10)
            if token not in media:
                ids.append(token)
        start = time.perf_counter()
        for _ in stream_generate(
            model, processor, "", input_ids=mx.array([ids], dtype=mx.int32), max_tokens=1, temperature=0.0
        ):
            pass
        seconds = time.perf_counter() - start
        prefills.append({"tokens": length, "seconds": seconds, "before": first, "after": snapshot()})
    media_questions = {}
    for kind, present in (("image_question", "vision_tower"), ("audio_question", "audio_tower")):
        if getattr(model, present, None) is None:
            continue
        mx.clear_cache()
        mx.reset_peak_memory()
        first = snapshot()
        start = time.perf_counter()
        prompt_tokens = media_question(model, processor, kind)
        media_questions[kind] = {
            "prompt_tokens": prompt_tokens,
            "seconds_to_first_token": time.perf_counter() - start,
            "before": first,
            "after": snapshot(),
        }
    json.dump(
        {
            "engine": "mlx-vlm",
            "device": str(mx.default_device()),
            "load_seconds": load_s,
            "before_load": before,
            "after_load": after_load,
            "prefills": prefills,
            **media_questions,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
