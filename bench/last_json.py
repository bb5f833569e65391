"""Runs one worker and prints its last JSON line, tagged with the engine and the share of the
cores' time the hypervisor stole while it ran (bench.py's `cpu_ticks` / `steal_pct`), for the
shell scripts that collect one line per process (bench/cuda/run_mtp_on_device.sh).

    last_json.py ENGINE COMMAND [ARGS...]
"""

import json
import subprocess
import sys

from bench import cpu_ticks, steal_pct


def main() -> None:
    engine, command = sys.argv[1], sys.argv[2:]
    before = cpu_ticks()
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    stolen = steal_pct(before, cpu_ticks())
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    if result.returncode != 0 or not lines:
        sys.exit(f"{' '.join(command)}: exit {result.returncode}, {len(lines)} JSON line(s)")
    print(json.dumps({"engine": engine, "host_steal_pct": stolen, **json.loads(lines[-1])}))


if __name__ == "__main__":
    main()
