#!/usr/bin/env bash
# Several answers at once on a lent NVIDIA machine, beside mlx-vlm's BatchGenerator (method:
# docs/BENCHMARK.md §8).
#
#   bench/cuda/run_batch_on_device.sh CARRY [bench/batch.py arguments...]
#
# CARRY is the folder `bench/cuda/pack.sh` filled (with a bench binary that has `--batch`);
# device_env.sh installs it and generates the full-size checkpoint. The entry goes to
# $OUT/results.md; bench/batch.py's defaults are the issue's: 1, 2, 4 and 8 streams, a 512-token
# prompt each, 128 tokens decoded.
# BUDGET_S (default 560): seconds from the start within which the run must end; repetitions that
# would overrun it are not started (the lent machine stops a command at 600 s).
set -euo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd); shift
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" bench/batch.py --model "$MODEL" --ours /tmp/gemma-desk-bench --results "$OUT/results.md" \
  --deadline $(( START + ${BUDGET_S:-560} )) "$@" \
  | tee "$OUT/batch.txt"
