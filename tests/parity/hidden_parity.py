"""Hidden-state taps of the Rust engine against mlx-vlm's layer outputs (float32, MLX CPU).

    hidden_parity.py --cli target/debug/gemma-desk-cli --model tests/out/fixtures/tiny

The reference runs one forward over a chat prompt with every decoder layer's call and the final
norm hooked (each layer's output `h`, the norm's output); ours writes the same points with
`gemma-desk-cli hidden --layers 0,…,L-1 --final-norm`, once in one forward and once as a
prefill then single-token decode steps. Every point's every row must pass compare.py's rule
(cosine >= 0.9999, argmax on decisive rows).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import compare  # noqa: E402
from reference import forward_logits, load  # noqa: E402
from run_all import chat_ids, continuation, run  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

MIN_COSINE = 0.9999
DECODE_STEPS = 8


def reference_hidden(model_dir: Path, ids: list[int]) -> np.ndarray:
    """`[layers + 1, T, hidden]`: each decoder layer's output, then the final norm's."""
    model, _ = load(model_dir, "float32")
    text = model.language_model.model
    layers = list(text.layers)
    captured: dict[int, list] = {i: [] for i in range(len(layers) + 1)}
    index = {id(layer): i for i, layer in enumerate(layers)}
    layer_cls, norm_cls = type(layers[0]), type(text.norm)
    layer_call, norm_call = layer_cls.__call__, norm_cls.__call__

    def hooked_layer(self, *args, **kwargs):
        out = layer_call(self, *args, **kwargs)
        if id(self) in index:
            captured[index[id(self)]].append(out[0])
        return out

    def hooked_norm(self, *args, **kwargs):
        out = norm_call(self, *args, **kwargs)
        if self is text.norm:
            captured[len(layers)].append(out)
        return out

    layer_cls.__call__, norm_cls.__call__ = hooked_layer, hooked_norm
    try:
        forward_logits(model, ids, None, None)
    finally:
        layer_cls.__call__, norm_cls.__call__ = layer_call, norm_call
    return np.stack([np.array(mx.concatenate(captured[i], axis=1)[0]) for i in sorted(captured)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    args = parser.parse_args()
    ids = chat_ids(args.model) + continuation(args.model, 20, seed=11)
    ref = reference_hidden(args.model, ids)
    layers = ref.shape[0] - 1
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, prefill in [("full", None), ("prefill+decode", len(ids) - DECODE_STEPS)]:
            out = Path(tmp) / f"{mode}.safetensors"
            extra = ["--prefill", prefill] if prefill else []
            run([args.cli, "hidden", "--model", args.model, "--tokens", ",".join(map(str, ids)), "--dtype", "float32",
                 "--layers", ",".join(map(str, range(layers))), "--final-norm", "--out", out, *extra])
            ours = load_file(out)["hidden"]
            if ours.shape != ref.shape:
                sys.exit(f"{mode}: ours is {ours.shape}, the reference's {ref.shape}")
            worst = min(range(layers + 1), key=lambda p: compare(ref[p], ours[p]).cosine.min())
            reports = [compare(ref[p], ours[p]) for p in range(layers + 1)]
            ok = all(r.passed(MIN_COSINE) for r in reports)
            results.append(ok)
            name = "final norm" if worst == layers else f"layer {worst}"
            print(f"{'PASS' if ok else 'FAIL'}  {args.model.name}/hidden {mode:<15} {layers} layers + final norm,"
                  f" {len(ids)} rows each  min cosine {reports[worst].cosine.min():.7f} ({name})"
                  f"  argmax mismatches {sum(int(r.argmax_mismatch.sum()) for r in reports)}")
    failed = results.count(False)
    print(f"\n{len(results) - failed}/{len(results)} hidden-state parity checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
