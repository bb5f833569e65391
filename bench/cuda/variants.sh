#!/usr/bin/env bash
# Our bench worker alone, once per variant, on the lent NVIDIA machine: for A/B runs of engine
# settings (flags, MLX environment variables) and traces, without the reference in between.
#
#   bench/cuda/variants.sh CARRY "label:ENV=1 ENV2=x|--worker-flag value" ...
#
# Each variant runs `gemma-desk-bench --plan` (the plan of bench.py's defaults, prepared once per
# machine) with the environment before `|` and the flags after it, and prints a summary; its JSON
# and stderr land in $WORK/label.* (default /tmp/variants; the device returns at most 8 files,
# so only traces and the kernel cache go to $OUT). `@TRACE@` in the environment runs it under
# apitrace.c (its table in $OUT/label.tsv, the main steps summarized). BUDGET_S (default 540): variants that
# would start later than that many seconds after the start are skipped. VARIANT=mid uses the
# mid-size checkpoint. PTX_SAVE=1 leaves MLX's kernel cache in $OUT/mlx_ptx.tar.xz: carried back
# as CARRY/mlx_ptx.tar.xz it spares the next machine's first process ~100 s of compilation.
set -uo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd); shift
OUT=${OUT:-/tmp/bench-out}
WORK=${WORK:-/tmp/variants}
mkdir -p "$OUT" "$WORK"
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
PLAN=/tmp/plan-$(basename "$MODEL").json
[ -f "$PLAN" ] || "$PY" bench/reference_worker.py prepare --model "$MODEL" --out "$PLAN" > "$OUT/prepare.log" 2>&1 \
  || { tail "$OUT/prepare.log"; exit 1; }
TRACE=$APITRACE_ENV
echo "ready: $(( $(date +%s) - START )) s"

for variant in "$@"; do
  label=${variant%%:*}; rest=${variant#*:}; envs=${rest%%|*}; args=${rest#*|}
  if [ $(( $(date +%s) - START )) -gt "${BUDGET_S:-540}" ]; then echo "budget: $label skipped"; continue; fi
  t0=$(date +%s)
  envs=${envs//@TRACE@/$TRACE APITRACE_OUT=$OUT/$label.tsv}
  # shellcheck disable=SC2086  # the environment and flags are word lists
  env $envs /tmp/gemma-desk-bench --plan "$PLAN" $args > "$WORK/$label.json" 2> "$WORK/$label.err" \
    || { tail -5 "$WORK/$label.err"; continue; }
  [ -f "$OUT/$label.tsv" ] && cp "$OUT/$label.tsv" "$WORK/"
  "$PY" bench/cuda/summarize.py "$WORK/$label.json" "$label" $(( $(date +%s) - t0 ))
done
if [ "${PTX_SAVE:-0}" = 1 ]; then
  tar -C "$MLX_PTX_CACHE_DIR" -cf - . | xz -6 -T0 > "$OUT/mlx_ptx.tar.xz"
  ls -la "$OUT/mlx_ptx.tar.xz"
fi
