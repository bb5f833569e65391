#!/usr/bin/env bash
# Speculative decoding (MTP drafter) on a lent NVIDIA machine, both engines side by side
# (method: docs/SPECULATIVE.md "Benchmark").
#
#   bench/cuda/run_mtp_on_device.sh CARRY [REPS] [BLOCK[vROWS]...]
#
# CARRY is the folder `bench/cuda/pack.sh` filled; device_env.sh installs it and generates the
# full-size target. Here the full-size drafter is generated next to it, the plan's decode
# prompt (512 tokens, 128 decoded) written, and each repetition runs our bench binary's `--mtp`
# mode and mlx-vlm's (`reference_worker.py mtp`), alternating which goes first, for each block
# size (default 4). One JSON object per process goes to $OUT/mtp-BLOCK.jsonl;
# `bench/mtp_summary.py` turns each into a results table. Each line carries host_steal_pct; with
# TRACE=1 one more process of ours runs under apitrace.c (see the end).
set -euo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd)
REPS=${2:-3}
shift $(( $# > 1 ? 2 : 1 ))
BLOCKS=${*:-4}
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
DRAFTER=$MODEL-assistant
[ -f "$DRAFTER/config.json" ] || "$PY" tests/fixtures/make_drafter.py --target "$MODEL" --out "$DRAFTER"
"$PY" bench/reference_worker.py prepare --model "$MODEL" --out "$OUT/plan.json" --decode 128 --decode-prompt 512 >/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# One JSON line per process, tagged with its engine and the host's stolen time (bench/last_json.py).
ours() {
  "$PY" bench/last_json.py ours /tmp/gemma-desk-bench --plan "$OUT/plan.json" --mtp "$DRAFTER" \
    --mtp-block "$1"
}
ref() {
  "$PY" bench/last_json.py mlx-vlm "$PY" bench/reference_worker.py mtp --plan "$OUT/plan.json" \
    --drafter "$DRAFTER" --block "$1"
}
for BLOCK in $BLOCKS; do
  LOG=$OUT/mtp-$BLOCK.jsonl
  : > "$LOG"
  for i in $(seq 1 "$REPS"); do
    if [ $(( $(date +%s) - START )) -gt "${BUDGET_S:-500}" ]; then echo "block $BLOCK: budget reached after $((i - 1)) repetitions"; break; fi
    if [ $((i % 2)) -eq 1 ]; then ours "$BLOCK" >> "$LOG"; ref "$BLOCK" >> "$LOG"; else ref "$BLOCK" >> "$LOG"; ours "$BLOCK" >> "$LOG"; fi
    echo "block $BLOCK, repetition $i: $(( $(date +%s) - START )) s"
  done
done
# TRACE=1: one more process of ours (the first block) under apitrace.c, its table in
# $OUT/mtp-trace.tsv and its round's parts summarized (a traced run's times attribute, they do not
# measure: a callback wraps every CUDA call). Each part is called 22 times.
if [ "${TRACE:-0}" = 1 ]; then
  BLOCK=${BLOCKS%% *}
  # Only the worker under the trace (each traced process writes its table at exit).
  # shellcheck disable=SC2086  # APITRACE_ENV is a word list
  env $APITRACE_ENV APITRACE_OUT="$OUT/mtp-trace.tsv" \
    /tmp/gemma-desk-bench --plan "$OUT/plan.json" --mtp "$DRAFTER" --mtp-block "$BLOCK" \
    > "$OUT/mtp-trace.json" 2> "$OUT/mtp-trace.err" || { echo "traced run failed"; tail -5 "$OUT/mtp-trace.err"; }
  "$PY" bench/cuda/summarize.py --trace "$OUT/mtp-trace.tsv" parts- mtp-accept-3 mtp-warm-up
fi
