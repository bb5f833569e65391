#!/usr/bin/env bash
# The side-by-side benchmark on a lent NVIDIA machine (see ../../README.md, "Benchmark").
#
#   bench/cuda/run_on_device.sh CARRY [bench.py arguments...]
#
# CARRY is the folder `bench/cuda/pack.sh` filled here (the slimmed libmlx, the rest of the
# mlx-cuda-13 wheel, Python wheels of the reference, our bench binary). The device has Python
# 3.12 with the CUDA 13 runtime wheels in /opt/torch/.venv, no Rust and no network. The
# full-size fixture is generated there (5 GB does not fit the transfer). Results go to $OUT.
# BUDGET_S (default 560): seconds from the start within which the run must end; repetitions that
# would overrun it are not started (the lent machine stops a command at 600 s).
set -euo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd); shift
OUT=${OUT:-/tmp/bench-out}
VENV=/opt/torch/.venv
PY=$VENV/bin/python
NVIDIA=$VENV/lib/python3.12/site-packages/nvidia
SITE=/tmp/site
MODEL=${MODEL:-/tmp/gemma4-full}
mkdir -p "$OUT"

t0=$(date +%s)
# Before anything else creates $SITE/mlx: pip --target skips a package whose folder exists.
"$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$CARRY"/whl/*.whl
mkdir -p "$SITE/mlx/lib"
tar -C "$SITE" -xJf "$CARRY/mlxcuda_rest.tar.xz"
xz -dc "$CARRY/libmlx.so.xz" > "$SITE/mlx/lib/libmlx.so"
ln -sfn "$NVIDIA" "$SITE/nvidia"   # libmlx looks in $ORIGIN/../../nvidia/*/lib
xz -dc "$CARRY/gemma-desk-bench.xz" > /tmp/gemma-desk-bench && chmod +x /tmp/gemma-desk-bench
export PYTHONPATH=$SITE CUDA_HOME=/usr/local/cuda MLX_PTX_CACHE_DIR=/root/mlx_ptx
LD_LIBRARY_PATH=$SITE/mlx/lib:$(ls -d "$NVIDIA"/*/lib | tr '\n' ':')
export LD_LIBRARY_PATH
echo "setup: $(( $(date +%s) - t0 )) s"

if [ ! -f "$MODEL/config.json" ]; then
  t0=$(date +%s)
  rm -rf "$MODEL"
  "$PY" tests/fixtures/make_checkpoint.py --variant "${VARIANT:-full}" --out "$MODEL" > "$OUT/fixture.log" 2>&1 \
    || { tail -20 "$OUT/fixture.log"; exit 1; }
  echo "fixture ${VARIANT:-full}: $(( $(date +%s) - t0 )) s, $(du -sh "$MODEL" | cut -f1)"
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" bench/bench.py --model "$MODEL" --python "$PY" --ours /tmp/gemma-desk-bench \
  --results "$OUT/results.md" --raw "$OUT/raw" --deadline $(( START + ${BUDGET_S:-560} )) "$@"
