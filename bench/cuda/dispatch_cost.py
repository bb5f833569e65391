"""What one MLX primitive costs the host and the device, by kind, at a decode step's shapes.

    python bench/cuda/dispatch_cost.py [--n 2000] [--reps 5] [--json OUT.json]

A decode step of E4B is ~1,440 primitives (the bench's `step_graph`), and on MLX-CUDA its host
time (build + dispatch) is about its device time: which primitives cost the host what decides
which cuts pay. For each kind, a chain of N primitives of that kind, each reading the one before
(so none is skipped or runs beside another), is built lazily, then

- `host`: `mx.async_eval` of its end: MLX encodes every primitive (allocations, kernel nodes,
  CUDA-graph commits every MLX_MAX_OPS_PER_BUFFER nodes) and returns;
- `total`: then `mx.synchronize()`: the device has run them all.

Both are per primitive, medians over the repetitions, in microseconds. A view (reshape, slice,
transpose of a row) encodes no kernel: its host cost is MLX's bookkeeping alone. The Python
that builds the graph is not timed. Environment variables of MLX (MLX_MAX_OPS_PER_BUFFER,
MLX_USE_CUDA_GRAPHS) apply per process: run the script once per setting.
"""

import argparse
import json
import os
import statistics
import time

import mlx.core as mx

D = 2560  # E4B hidden size
HEADS, KV_HEADS, HEAD_DIM, WINDOW = 8, 2, 256, 512


def qweight(rows, cols):
    w = mx.random.normal((rows, cols)).astype(mx.bfloat16) * 0.02
    return mx.quantize(w, group_size=64, bits=4)


def chains(n):
    """name -> (start arrays, one step: array -> array, primitives per step)."""
    x = mx.random.normal((1, 1, D)).astype(mx.bfloat16)
    w = mx.ones((D,), dtype=mx.bfloat16)
    s = mx.array([0.5], dtype=mx.bfloat16)
    wq, sq, bq = qweight(D, D)
    wu, su, bu = qweight(4 * D, D)
    wd, sd, bd = qweight(D, 4 * D)
    q = mx.random.normal((1, HEADS, 1, HEAD_DIM)).astype(mx.bfloat16)
    k = mx.random.normal((1, KV_HEADS, WINDOW, HEAD_DIM)).astype(mx.bfloat16)
    v = mx.random.normal((1, KV_HEADS, WINDOW, HEAD_DIM)).astype(mx.bfloat16)
    kt = mx.random.normal((1, HEADS, HEAD_DIM, WINDOW)).astype(mx.bfloat16)
    vh = mx.random.normal((1, HEADS, WINDOW, HEAD_DIM)).astype(mx.bfloat16)
    long = mx.random.normal((1, 1, D + n)).astype(mx.bfloat16)
    buf = mx.zeros((1, KV_HEADS, WINDOW + n, HEAD_DIM), dtype=mx.bfloat16)
    row = mx.random.normal((1, KV_HEADS, 1, HEAD_DIM)).astype(mx.bfloat16)
    mx.eval(long, x, w, s, wq, sq, bq, wu, su, bu, wd, sd, bd, q, k, v, kt, vh, buf, row)

    gelu_mul = mx.compile(lambda a, b: mx.multiply(a * mx.sigmoid(1.702 * a), b))

    def qmm(a, wt, sc, bi):
        return mx.quantized_matmul(a, wt, sc, bi, transpose=True, group_size=64, bits=4)

    counter = {"i": 0}

    def slice_update(b):
        i = counter["i"]
        counter["i"] += 1
        return mx.slice_update(b, row, mx.array([0, 0, i, 0]), axes=(0, 1, 2, 3))

    return {
        "add": (x, lambda a: a + x, 1),
        "multiply": (x, lambda a: a * s, 1),
        "rms_norm": (x, lambda a: mx.fast.rms_norm(a, w, 1e-6), 1),
        "rope": (q, lambda a: mx.fast.rope(a, HEAD_DIM, traditional=False, base=10000.0, scale=1.0, offset=7), 1),
        "compiled gelu*mul": (x, lambda a: gelu_mul(a, x), 1),
        "quantized matmul 2560x2560": (x, lambda a: qmm(a, wq, sq, bq), 1),
        "quantized matmul 2560->10240->2560 (pair)": (x, lambda a: qmm(qmm(a, wu, su, bu), wd, sd, bd), 2),
        "reshape (view)": (x, lambda a: a.reshape(1, D, 1).reshape(1, 1, D), 2),
        "slice (view)": (long, lambda a: a[..., 1:], 1),
        "transpose+reshape to heads": (q, lambda a: a.transpose(0, 2, 1, 3).reshape(1, 1, HEADS * HEAD_DIM)
                                       .reshape(1, 1, HEADS, HEAD_DIM).transpose(0, 2, 1, 3), 4),
        "concatenate": (x, lambda a: mx.concatenate([a[..., : D // 2], a[..., D // 2 :]], axis=-1), 3),
        "slice_update (cache write)": (buf, slice_update, 1),
        "matmul scores+values": (q, lambda a: (a @ kt) @ vh, 2),
        "softmax": (mx.zeros((1, HEADS, 1, WINDOW), dtype=mx.bfloat16),
                    lambda a: mx.softmax(a, axis=-1, precise=True), 1),
        "sdpa, head 256 (MLX composes it on CUDA)": (q, lambda a: mx.fast.scaled_dot_product_attention(a, k, v, scale=1.0), 1),
        "astype f32<->bf16": (x, lambda a: a.astype(mx.float32).astype(mx.bfloat16), 2),
    }


def time_chain(end):
    """Seconds to dispatch the lazy graph ending at `end` (`async_eval`) and to its completion,
    with nothing else in flight."""
    mx.synchronize()
    t0 = time.perf_counter()
    mx.async_eval(end)
    t1 = time.perf_counter()
    mx.synchronize()
    return t1 - t0, time.perf_counter() - t0


def measure(start, step, per, n, reps):
    hosts, totals = [], []
    for _ in range(reps + 1):  # the first is the warm-up (kernel compilation, allocations)
        a = start
        for _ in range(n // per):
            a = step(a)
        host, total = time_chain(a)
        hosts.append(host / (n // per) / per * 1e6)
        totals.append(total / (n // per) / per * 1e6)
    return statistics.median(hosts[1:]), statistics.median(totals[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    env = {k: os.environ[k] for k in ("MLX_MAX_OPS_PER_BUFFER", "MLX_USE_CUDA_GRAPHS") if k in os.environ}
    print(f"{args.label:>10} {mx.default_device()} {env}", flush=True)
    rows = {}
    for name, (start, step, per) in chains(args.n).items():
        t0 = time.perf_counter()
        try:
            host, total = measure(start, step, per, args.n, args.reps)
        except Exception as e:  # one kind's failure leaves the others' numbers
            print(f"{args.label:>10} {name:45} failed: {e}", flush=True)
            continue
        rows[name] = {"host_us": round(host, 2), "total_us": round(total, 2)}
        print(f"{args.label:>10} {name:45} host {host:7.2f} us  total {total:7.2f} us"
              f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": args.label, "env": env, "device": str(mx.default_device()), "kinds": rows}, f)


if __name__ == "__main__":
    main()
