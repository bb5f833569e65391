#!/usr/bin/env bash
# Several answers at once, ours alone under apitrace.c, on a lent NVIDIA machine: where a
# batched decode step's host and GPU time go, per number of streams.
#
#   bench/cuda/trace_batch_on_device.sh CARRY [STREAMS] [DECODE] ["label|worker flags"...]
#
# CARRY is the folder `bench/cuda/pack.sh` filled. Writes bench/batch.py's plan (`--write-plan`;
# STREAMS, default 1,2,4; DECODE tokens per stream, default 64), then runs `gemma-desk-bench --batch` once per
# variant (default: one, "default|") under the trace, its table in $OUT/batch-LABEL.tsv, and
# summarizes the phases `batch-N` (the timed decode of N streams; tools::batch names them).
# A traced run's times attribute, they do not measure: a callback wraps every CUDA call.
set -euo pipefail
CARRY=$(cd "$1" && pwd)
STREAMS=${2:-1,2,4}
DECODE=${3:-64}
shift $(( $# > 3 ? 3 : $# ))
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
PLAN=$OUT/batch-plan.json
"$PY" bench/batch.py --model "$MODEL" --streams "$STREAMS" --decode "$DECODE" --window-reps 1 --write-plan "$PLAN"
phases=$(echo "$STREAMS" | tr ',' '\n' | sed 's/^/batch-/' | tr '\n' ' ')
for variant in "${@:-default|}"; do
  label=${variant%%|*}; args=${variant#*|}
  # shellcheck disable=SC2086  # the flags are a word list
  env $APITRACE_ENV APITRACE_OUT="$OUT/batch-$label.tsv" /tmp/gemma-desk-bench --batch "$PLAN" $args \
    > "$OUT/batch-$label.json" 2> "$OUT/batch-$label.err" \
    || { echo "$label failed"; tail -5 "$OUT/batch-$label.err"; continue; }
  echo "== $label: $(grep '^batch:' "$OUT/batch-$label.err" | tr '\n' ';')"
  # shellcheck disable=SC2086
  "$PY" bench/cuda/summarize.py --trace "$OUT/batch-$label.tsv" $phases
done
