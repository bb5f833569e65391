"""What n decode rows cost in one quantized layer of E4B's size on this MLX build: the rows as
n vectors (`[n, 1, in]`, what our decode rows and mlx-vlm's BatchGenerator pass) or as one
n-row matrix (`[1, n, in]`), against one row. Prints ms per product (median of 200, after
warm-up) and the ratio to one row.

    python bench/cuda/qmv_rows.py
"""
import statistics
import time

import mlx.core as mx

SHAPES = [(2560, 10240), (10240, 2560), (2560, 2048)]  # mlp up/gate, mlp down, q|k|v-ish


def timed(f, reps=200):
    for _ in range(20):
        mx.eval(f())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        mx.eval(f())
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


for k, n_out in SHAPES:
    w = mx.random.normal((n_out, k)).astype(mx.bfloat16)
    wq, s, b = mx.quantize(w, group_size=64, bits=4)
    mx.eval(wq, s, b)
    base = None
    for n in [1, 2, 4, 8]:
        for layout, shape in [("vectors", (n, 1, k)), ("matrix", (1, n, k))]:
            if n == 1 and layout == "matrix":
                continue
            x = mx.random.normal(shape).astype(mx.bfloat16)
            # 16 products per eval so launch latency does not hide the kernel.
            ms = timed(lambda: [mx.quantized_matmul(x, wq, s, b, True, 64, 4) for _ in range(16)]) / 16
            base = base or ms
            print(f"in {k:5d} out {n_out:5d} rows {n} as {layout:7s}: {ms:.4f} ms  x{ms / base:.2f}")
