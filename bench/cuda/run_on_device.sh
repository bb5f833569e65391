#!/usr/bin/env bash
# The side-by-side benchmark on a lent NVIDIA machine (method: docs/BENCHMARK.md).
#
#   bench/cuda/run_on_device.sh CARRY [bench.py arguments...]
#
# CARRY is the folder `bench/cuda/pack.sh` filled here (the slimmed libmlx, the rest of the
# mlx-cuda-13 wheel, Python wheels of the reference, our bench binary); device_env.sh installs
# it and generates the checkpoint. Results go to $OUT.
# BUDGET_S (default 560): seconds from the start within which the run must end; repetitions that
# would overrun it are not started (the lent machine stops a command at 600 s).
set -euo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd); shift
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
t0=$(date +%s)
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
echo "setup: $(( $(date +%s) - t0 )) s"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" bench/bench.py --model "$MODEL" --python "$PY" --ours /tmp/gemma-desk-bench \
  --results "$OUT/results.md" --raw "$OUT/raw" --deadline $(( START + ${BUDGET_S:-560} )) "$@"
