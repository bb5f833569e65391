#!/usr/bin/env bash
# Where a decode step's host time goes on MLX-CUDA, and how much of a run's spread is the
# machine's: on the lent NVIDIA machine, with CARRY filled by bench/cuda/pack.sh,
#
#   bench/cuda/run_dispatch_on_device.sh CARRY [ROUNDS] [WORKER_VARIANTS...]
#
# 1. `dispatch_cost.py` (one primitive's host and device cost, by kind) once per MLX setting
#    (default; MLX_MAX_OPS_PER_BUFFER 100 and 250; MLX_USE_CUDA_GRAPHS=0; default pinned to one
#    core with taskset), ROUNDS times in rotating order: the same setting's spread across
#    processes is the machine's noise, the settings' differences beyond it are theirs.
# 2. Our worker (variants.sh) for each WORKER_VARIANT ("label:ENV|--flags", as there).
# The micro results go to $OUT/dispatch.jsonl, a table of them last.
set -uo pipefail
START=$(date +%s)
CARRY=$(cd "$1" && pwd); shift
ROUNDS=${1:-2}; shift || true
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT" /tmp/dispatch
# The micro runs need no checkpoint; our worker's variants do.
[ $# -gt 0 ] || export NO_MODEL=1
# shellcheck source=device_env.sh
source "$(dirname "$0")/device_env.sh"
export PYTHONUNBUFFERED=1
echo "ready: $(( $(date +%s) - START )) s"
SETTINGS=("default:" "ops100:MLX_MAX_OPS_PER_BUFFER=100" "ops250:MLX_MAX_OPS_PER_BUFFER=250"
          "nographs:MLX_USE_CUDA_GRAPHS=0" "pinned:@PIN@")
for round in $(seq 1 "$ROUNDS"); do
  for i in "${!SETTINGS[@]}"; do
    # Rotate the order each round, so no setting always runs first.
    s=${SETTINGS[$(( (i + round - 1) % ${#SETTINGS[@]} ))]}
    label=${s%%:*}; envs=${s#*:}; pin=""
    [ "$envs" = "@PIN@" ] && { envs=""; pin="taskset -c 3"; }
    # Each process bounded (MICRO_S, default 100 s), its lines shown as they come.
    # shellcheck disable=SC2086
    timeout "${MICRO_S:-100}" env $envs $pin "$PY" bench/cuda/dispatch_cost.py --label "$label" \
      --n "${MICRO_N:-1000}" --reps "${MICRO_REPS:-3}" --json "/tmp/dispatch/$label-$round.json" 2>&1 \
      | tee -a "$OUT/micro.log" || echo "$label-$round: exit $?"
  done
done
for f in /tmp/dispatch/*.json; do [ -f "$f" ] && { cat "$f"; echo; }; done > "$OUT/dispatch.jsonl"
"$PY" - "$OUT/dispatch.jsonl" <<'EOF'
import collections, json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
if not runs:
    sys.exit("no micro run finished")
labels = sorted({r["label"] for r in runs}, key=lambda l: ["default", "pinned", "ops100", "ops250", "nographs"].index(l))
kinds = list(dict.fromkeys(k for r in runs for k in r["kinds"]))
by = collections.defaultdict(list)
for r in runs:
    for k, v in r["kinds"].items():
        by[(r["label"], k)].append(v)
print("host us per primitive (each process; total = host + device) by MLX setting")
print(f"{'kind':45}" + "".join(f"{l:>22}" for l in labels))
for k in kinds:
    cells = []
    for l in labels:
        vs = by.get((l, k), [])
        cells.append(" ".join(f"{v['host_us']:.1f}" for v in vs) + " (" + " ".join(f"{v['total_us']:.0f}" for v in vs) + ")")
    print(f"{k:45}" + "".join(f"{c:>22}" for c in cells))
EOF
echo "micro done: $(( $(date +%s) - START )) s"
[ $# -gt 0 ] && BUDGET_S=$(( ${BUDGET_S:-540} - ($(date +%s) - START) )) bash "$(dirname "$0")/variants.sh" "$CARRY" "$@"
