#!/usr/bin/env bash
# The local API's overhead over the engine on a lent NVIDIA machine (method: docs/BENCHMARK.md §7).
#
#   bench/cuda/run_api_overhead_on_device.sh CARRY [REPS] [PROMPT_WORDS] [MAX_TOKENS]
#
# CARRY is the folder `bench/cuda/pack.sh` filled; device_env.sh installs it and generates the
# full-size checkpoint. One process of our bench binary's `--api-overhead` mode, after one
# process that only compiles MLX's kernels; its JSON goes to $OUT/api-overhead.json.
set -euo pipefail
CARRY=$(cd "$1" && pwd)
REPS=${2:-7}
WORDS=${3:-512}
TOKENS=${4:-128}
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# A first short process fills MLX's kernel cache, so the measured one compiles nothing.
/tmp/gemma-desk-bench --api-overhead "$MODEL" --api-reps 1 --api-prompt-words 64 --api-max-tokens 8 \
  > "$OUT/api-overhead-warm.json"
/tmp/gemma-desk-bench --api-overhead "$MODEL" --api-reps "$REPS" --api-prompt-words "$WORDS" \
  --api-max-tokens "$TOKENS" | tee "$OUT/api-overhead.json"
