#!/usr/bin/env bash
# Where the memory goes (docs/BENCHMARK.md "Memory") on a lent NVIDIA machine: our engine and
# mlx-vlm on the full-size E4B 4-bit random-weight checkpoint, one process each, in one run.
#
#   bench/cuda/run_memory_on_device.sh CARRY [PREFILLS]
#
# CARRY is the folder `bench/cuda/pack.sh` filled; device_env.sh installs it and generates the
# checkpoint. A first short run of each engine compiles MLX's kernels into MLX_PTX_CACHE_DIR
# (memory is the same either way; the times printed are then those of a warm machine). Then
# `bench/memory.py` with the drafter listed (default prefills 2048 and 8192, an image question
# and a 30 s clip question), and, while the budget lasts, ours again with the PLE table held in
# MLX memory (`--ple-resident`). Tables go to $OUT/memory.md.
set -euo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd)
PREFILLS=${2:-2048,8192}
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
DRAFTER=$MODEL-assistant
[ -f "$DRAFTER/config.json" ] || "$PY" tests/fixtures/make_drafter.py --target "$MODEL" --out "$DRAFTER" > /dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "checkpoint and drafter ready: $(( $(date +%s) - START )) s"
"$PY" bench/memory.py --model "$MODEL" --ours /tmp/gemma-desk-bench --prefill 128 > "$OUT/warm-up.md" 2>&1 \
  || { tail -20 "$OUT/warm-up.md"; exit 1; }
echo "warm-up (kernels compiled): $(( $(date +%s) - START )) s"
"$PY" bench/memory.py --model "$MODEL" --ours /tmp/gemma-desk-bench --drafter "$DRAFTER" \
  --prefill "$PREFILLS" --results "$OUT/memory.md" > /dev/null
echo "ours and mlx-vlm: $(( $(date +%s) - START )) s"
if [ $(( $(date +%s) - START )) -lt "${BUDGET_S:-420}" ]; then
  "$PY" bench/memory.py --model "$MODEL" --ours /tmp/gemma-desk-bench --prefill "$PREFILLS" \
    --ours-arg=--ple-resident --no-reference --results "$OUT/memory.md" > /dev/null
  echo "ours with the PLE table resident: $(( $(date +%s) - START )) s"
fi
cat "$OUT/memory.md"
