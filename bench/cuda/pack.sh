#!/usr/bin/env bash
# Packs what bench/cuda/run_on_device.sh needs into one folder under 64 MiB (the transfer limit).
#
#   bench/cuda/pack.sh BENCH_BINARY OUT_DIR
#
# BENCH_BINARY is gemma-desk-bench built with MLX_FLAVOR=cuda (MLX_WHEEL_DIR=.deps/mlx-cuda-13).
# libmlx.so is slimmed to its sm_90 kernels by bench/cuda/slim_libmlx.py (or the script $SLIM names;
# docs/BENCHMARK.md §6 says what it does: measurement only, the result runs on Hopper alone) and
# xz-compressed; the reference's pure-Python wheels and the mlx bindings for CPython 3.12 come from PyPI.
# The binary's commit goes along (COMMIT, default this checkout's HEAD, `-dirty` with local changes)
# for the results entries: the device's copy of the tree has no history to name it.
set -euo pipefail
BIN=$1
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEEL=$ROOT/.deps/mlx-cuda-13
SLIM=${SLIM:-$ROOT/bench/cuda/slim_libmlx.py}
mkdir -p "$OUT/whl"
if [ -z "${COMMIT:-}" ]; then
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
  [ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ] || COMMIT=$COMMIT-dirty
fi
echo "$COMMIT" > "$OUT/commit"

python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_x86_64 \
  --python-version 3.12 -d "$OUT/whl" mlx==0.32.2 mlx-vlm==0.7.10 mlx-lm==0.32.2 transformers==5.23.0
python3 "$SLIM" "$WHEEL/mlx/lib/libmlx.so" "$OUT/libmlx.so"
xz -9 -T0 -f "$OUT/libmlx.so"
tar -C "$WHEEL" --exclude=mlx/lib/libmlx.so -cJf "$OUT/mlxcuda_rest.tar.xz" \
  mlx mlx_cuda_13.libs mlx_cuda_13-0.32.2.dist-info
# Symbols stay (function names in backtraces: ~3 MB after xz); debug info goes.
strip --strip-debug -o "$OUT/gemma-desk-bench" "$BIN"
xz -9 -T0 -f "$OUT/gemma-desk-bench"
# The tracer of variants.sh, in case the device cannot compile it.
gcc -O2 -shared -fPIC -o "$OUT/libapitrace.so" "$ROOT/bench/cuda/apitrace.c" -ldl -lpthread
du -sh "$OUT"
