"""One decode query's attention, composed several ways, timed in one process (MLX, any backend).

    python bench/cuda/attention_variants.py [--n 500] [--reps 5]

Where MLX has no fused single-query kernel for the head size (MLX-CUDA 0.32.2: 256 and 512,
E4B's sliding and full layers), a decode step composes attention from primitives. The two
products as matrix products go to cuBLAS on CUDA (~11 us of host time each, the costliest
primitive of a step: bench/cuda/dispatch_cost.py). Compositions, for q `[1, 8, 1, d]` and
K/V `[1, 2, L, d]` (E4B: 8 query heads over 2 K/V heads):

- grouped:     scores and values as matrix products, a K/V head's 4 query heads as rows
               (the model's `DecodeAttention::GroupedRows`);
- head-scores: scores one query head per row (a matrix-vector product), values as grouped;
- head-scores, summed values: values as a broadcast product summed over the positions;
- summed:      both as broadcast products and sums (no matrix product at all).

Each composition runs as a chain of N attentions (each query the previous output), timed as in
dispatch_cost.py (host: `async_eval`; total: until the device is done), interleaved in one
process so the host's speed is the same for all; also the largest difference from `grouped`.
"""

import argparse
import statistics

import mlx.core as mx

from dispatch_cost import time_chain  # (this folder: python puts a script's folder on the path)


def compositions():
    def grouped(q, k, v):
        b, h, _, d = q.shape
        kv = k.shape[1]
        s = q.reshape(b, kv, h // kv, d) @ k.swapaxes(-1, -2)
        return mx.softmax(s, axis=-1, precise=True) @ v

    def head_scores(q, k, v):
        b, h, _, d = q.shape
        kv, n = k.shape[1], k.shape[2]
        s = (q.reshape(b, kv, h // kv, 1, d) @ mx.expand_dims(k.swapaxes(-1, -2), 2)).reshape(b, kv, h // kv, n)
        return mx.softmax(s, axis=-1, precise=True) @ v

    def head_scores_summed(q, k, v):
        b, h, _, d = q.shape
        kv, n = k.shape[1], k.shape[2]
        s = (q.reshape(b, kv, h // kv, 1, d) @ mx.expand_dims(k.swapaxes(-1, -2), 2)).reshape(b, kv, h // kv, n, 1)
        p = mx.softmax(s, axis=-2, precise=True)
        return (p * mx.expand_dims(v, 2)).sum(axis=-2)

    def summed(q, k, v):
        b, h, _, d = q.shape
        kv = k.shape[1]
        s = (q.reshape(b, kv, h // kv, 1, d) * mx.expand_dims(k, 2)).sum(axis=-1, keepdims=True)
        p = mx.softmax(s, axis=-2, precise=True)
        return (p * mx.expand_dims(v, 2)).sum(axis=-2)

    return {"grouped": grouped, "head-scores": head_scores,
            "head-scores, summed values": head_scores_summed, "summed": summed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    comps = compositions()
    print(f"{mx.default_device()}; us per attention, host / total, medians of {args.reps}", flush=True)
    for name, (length, d) in {"sliding": (512, 256), "full": (2048, 512)}.items():
        q0 = mx.random.normal((1, 8, 1, d)).astype(mx.bfloat16)
        k = (mx.random.normal((1, 2, length, d)) / d ** 0.5).astype(mx.bfloat16)
        v = mx.random.normal((1, 2, length, d)).astype(mx.bfloat16)
        mx.eval(q0, k, v)
        # Agreement with the grouped composition, in float32 (the compositions' own math).
        ref = comps["grouped"](q0.astype(mx.float32), k.astype(mx.float32), v.astype(mx.float32))
        times = {c: ([], []) for c in comps}
        for rep in range(args.reps + 1):
            for c, f in comps.items():
                a = q0
                for _ in range(args.n):
                    a = f(a, k, v).reshape(1, 8, 1, d)
                host, total = time_chain(a)
                if rep:
                    times[c][0].append(host / args.n * 1e6)
                    times[c][1].append(total / args.n * 1e6)
        for c, f in comps.items():
            out = f(q0.astype(mx.float32), k.astype(mx.float32), v.astype(mx.float32))
            err = mx.abs(out.reshape(ref.shape) - ref).max().item()
            low = f(q0, k, v).astype(mx.float32)
            err_bf16 = mx.abs(low.reshape(ref.shape) - ref).max().item()
            host, total = statistics.median(times[c][0]), statistics.median(times[c][1])
            print(f"{name:8} L={length:5} d={d}: {c:28} host {host:6.1f}  total {total:6.1f}  "
                  f"max |diff| vs grouped in f32: f32 {err:.1e}, bf16 {err_bf16:.1e}", flush=True)


if __name__ == "__main__":
    main()
