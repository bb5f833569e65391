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
    json.dump(
        {
            "engine": "mlx-vlm",
            "device": str(mx.default_device()),
            "load_seconds": load_s,
            "before_load": before,
            "after_load": after_load,
            "prefills": prefills,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
