"""What reading the per-layer token table's rows from the file costs decode, on one MLX backend.

    ple_overlap.py --model DIR [--tokens 128] [--prompt 64] [--reps 5]

Gemma Desk reads the PLE table's rows for each step's token ids from the checkpoint file
(docs/MODEL.md, "Where the per-layer rows come from"): the host needs step n's id before it can
build step n + 1, so the next step's graph is no longer built while the device computes step n.
This measures what that costs with the reference's model (mlx-vlm), in one process, the two
ways interleaved, greedy, from the same prompt:

- resident: the table in MLX memory and mlx-lm's pipelined loop (step n + 1 built and
  dispatched before step n's id is read);
- file: the same loop, but each step's rows come from the file: the id is read on the host, the
  packed rows, scales and biases are gathered from a memory map of the safetensors file and
  dequantized in MLX (what `QuantizedEmbedding` does after its gather), then the step is built.

Prints each way's decode tok/s per repetition, the medians and their ratio, and checks that both
ways give the same tokens. Python builds a step's graph slower than our Rust does, so the host
share of a step (and with it what the lost overlap costs) is larger here than in our engine: read
the ratio as an upper bound for this backend.
"""

import argparse
import json
import statistics
import struct
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

TABLE = "language_model.model.embed_tokens_per_layer"


def header(path: Path) -> tuple[dict, int]:
    """A safetensors file's header and the offset where its data starts."""
    with path.open("rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(size)), 8 + size


def table_maps(model_dir: Path) -> dict[str, np.ndarray]:
    """Memory maps of the table's packed weight, scales and biases, as stored."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        where = json.loads(index.read_text())["weight_map"]
    else:
        where = {name: "model.safetensors" for name in header(model_dir / "model.safetensors")[0]}
    maps = {}
    for part in ("weight", "scales", "biases"):
        name = f"{TABLE}.{part}"
        path = model_dir / where[name]
        head, start = header(path)
        info = head[name]
        dtype = {"U32": np.uint32, "BF16": np.uint16, "F16": np.float16, "F32": np.float32}[info["dtype"]]
        begin, end = info["data_offsets"]
        maps[part] = np.memmap(path, dtype=dtype, mode="r", offset=start + begin,
                               shape=tuple(info["shape"]))
        maps[part + "_dtype"] = info["dtype"]
    return maps


def from_file(text_model, maps):
    """A `get_per_layer_inputs` that gathers the rows from the file (the host reads the ids)."""
    embedding = text_model.embed_tokens_per_layer
    group_size, bits = embedding.group_size, embedding.bits
    layers = text_model.config.num_hidden_layers
    width = text_model.hidden_size_per_layer_input
    scale = text_model.embed_tokens_per_layer_scale

    def rows(part, ids):
        got = mx.array(np.ascontiguousarray(maps[part][ids]))
        return got.view(mx.bfloat16) if maps[part + "_dtype"] == "BF16" else got

    def get_per_layer_inputs(input_ids):
        ids = np.array(input_ids.tolist(), dtype=np.int64).reshape(-1)
        table = mx.dequantize(rows("weight", ids), rows("scales", ids), rows("biases", ids),
                              group_size=group_size, bits=bits)
        return (table * scale).reshape(*input_ids.shape, layers, width)

    return get_per_layer_inputs


def decode(language_model, prompt: list[int], tokens: int) -> tuple[list[int], float]:
    """Greedy decode, mlx-lm's pipelined loop: (ids, decode tok/s after the first token)."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(language_model)

    def step(ids):
        logits = language_model(ids, cache=cache).logits[:, -1, :]
        return mx.argmax(logits, axis=-1)

    y = step(mx.array([prompt]))
    mx.eval(y)
    out, start = [], time.perf_counter()
    for _ in range(tokens):
        following = step(y[:, None])
        mx.async_eval(following)
        out.append(int(y.item()))
        y = following
    mx.eval(y)
    return out, (tokens - 1) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    from mlx_vlm import load

    model, _ = load(str(args.model))
    language_model = model.language_model
    text_model = language_model.model
    if not getattr(text_model, "hidden_size_per_layer_input", 0):
        sys.exit("this checkpoint has no per-layer token table")
    resident = text_model.get_per_layer_inputs
    file_rows = from_file(text_model, table_maps(args.model))
    prompt = [(i * 7919) % 2000 + 100 for i in range(args.prompt)]

    speeds = {"resident": [], "file": []}
    answers = {}
    for rep in range(args.reps + 1):  # the first round warms up, uncounted
        for way, fn in (("resident", resident), ("file", file_rows)):
            text_model.get_per_layer_inputs = fn
            ids, speed = decode(language_model, prompt, args.tokens)
            answers.setdefault(way, ids)
            if rep:
                speeds[way].append(speed)
                print(f"rep {rep} {way}: {speed:.1f} tok/s", flush=True)
    same = answers["resident"] == answers["file"]
    r, f = statistics.median(speeds["resident"]), statistics.median(speeds["file"])
    print(f"device: {mx.default_device()}; {args.tokens} tokens after a {args.prompt}-token prompt")
    print(f"median decode: resident {r:.1f} tok/s, file {f:.1f} tok/s, file/resident {f / r:.3f}")
    print(f"same tokens: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
