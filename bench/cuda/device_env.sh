# Sourced by run_on_device.sh and variants.sh on the lent NVIDIA machine, from the repository
# root, with CARRY set to the folder bench/cuda/pack.sh filled: installs the carried MLX CUDA
# wheel and the reference's wheels into $SITE (once per machine), unpacks our bench binary to
# /tmp/gemma-desk-bench and exports what both need. The device has Python 3.12 with the CUDA 13
# runtime wheels in /opt/torch/.venv, no Rust and no network.
VENV=/opt/torch/.venv
PY=$VENV/bin/python
NVIDIA=$VENV/lib/python3.12/site-packages/nvidia
SITE=/tmp/site
if [ ! -f "$SITE/.installed" ]; then
  # Before anything else creates $SITE/mlx: pip --target skips a package whose folder exists.
  "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$CARRY"/whl/*.whl
  mkdir -p "$SITE/mlx/lib"
  tar -C "$SITE" -xJf "$CARRY/mlxcuda_rest.tar.xz"
  xz -dc "$CARRY/libmlx.so.xz" > "$SITE/mlx/lib/libmlx.so"
  ln -sfn "$NVIDIA" "$SITE/nvidia"   # libmlx looks in $ORIGIN/../../nvidia/*/lib
  touch "$SITE/.installed"
fi
xz -dc "$CARRY/gemma-desk-bench.xz" > /tmp/gemma-desk-bench && chmod +x /tmp/gemma-desk-bench
# MLX compiles its JIT kernels into this cache; a machine's first process pays ~100 s for it.
export MLX_PTX_CACHE_DIR=/root/mlx_ptx
# A cache saved by `variants.sh` with PTX_SAVE=1, carried back: no compilation on this machine.
if [ -f "$CARRY/mlx_ptx.tar.xz" ] && [ ! -d "$MLX_PTX_CACHE_DIR" ]; then
  mkdir -p "$MLX_PTX_CACHE_DIR" && tar -C "$MLX_PTX_CACHE_DIR" -xJf "$CARRY/mlx_ptx.tar.xz"
fi
export PYTHONPATH=$SITE CUDA_HOME=/usr/local/cuda
# The bench binary's commit, for the results entries (bench/bench.py `commit()`).
if [ -z "${BENCH_COMMIT:-}" ] && [ -f "$CARRY/commit" ]; then
  BENCH_COMMIT=$(cat "$CARRY/commit"); export BENCH_COMMIT
fi
# apitrace.c (CUPTI tracing by phase), built here or carried: a traced process runs with
# `env $APITRACE_ENV APITRACE_OUT=TABLE.tsv …` (variants.sh, run_mtp_on_device.sh TRACE=1,
# trace_batch_on_device.sh).
[ -f /tmp/libapitrace.so ] || gcc -O2 -shared -fPIC -o /tmp/libapitrace.so bench/cuda/apitrace.c -ldl -lpthread 2>/dev/null \
  || cp "$CARRY/libapitrace.so" /tmp/libapitrace.so
APITRACE_ENV="LD_PRELOAD=/tmp/libapitrace.so CUDA_INJECTION64_PATH=/tmp/libapitrace.so APITRACE_PHASES=/tmp/apitrace-phase"
LD_LIBRARY_PATH=$SITE/mlx/lib:$(ls -d "$NVIDIA"/*/lib | tr '\n' ':')
export LD_LIBRARY_PATH

# The checkpoint: generated here (5 GB does not fit the transfer), once per machine; not with
# NO_MODEL=1 (runs that need MLX alone).
MODEL=${MODEL:-/tmp/gemma4-${VARIANT:-full}}
if [ -z "${NO_MODEL:-}" ] && [ ! -f "$MODEL/config.json" ]; then
  fixture_start=$(date +%s)
  rm -rf "$MODEL"
  "$PY" tests/fixtures/make_checkpoint.py --variant "${VARIANT:-full}" --out "$MODEL" > "$OUT/fixture.log" 2>&1 \
    || { tail -20 "$OUT/fixture.log"; exit 1; }
  echo "fixture ${VARIANT:-full}: $(( $(date +%s) - fixture_start )) s, $(du -sh "$MODEL" | cut -f1)"
fi
