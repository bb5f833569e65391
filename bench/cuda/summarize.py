"""One worker run of bench/cuda/variants.sh in a few lines: summarize.py RUN.json LABEL SECONDS.
An apitrace.c table alone, for the phases whose names start with the prefixes given:
summarize.py --trace RUN.tsv PREFIX... (run_mtp_on_device.sh's traced run: parts-step, …).

With RUN.tsv beside it (an apitrace.c table), also, in the main steps: the host's time in
CUDA's runtime (r) and driver (d), cuBLASLt (l) and NVRTC (n) with the five costliest functions;
the GPU's kernel time (k) with the four costliest kernels; and the GEMM shapes whose cuBLASLt
heuristic query took over a millisecond (h).
"""
import collections
import csv
import json
import sys
from pathlib import Path

STEPS = ("warm-up", "prefill-512", "decode", "follow-up", "sweep-0", "sweep-1")


def main() -> None:
    if sys.argv[1] == "--trace":
        trace_summary(Path(sys.argv[2]), tuple(sys.argv[3:]))
        return
    path, label, seconds = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    r = json.loads(path.read_text().strip().splitlines()[-1])
    d, f = r["decode"], r["followup"]
    p = f["profile"]
    print(f"== {label} ({seconds} s) dense from {r.get('dense_from')}, decode attention "
          f"{r.get('decode_attention')}, warm-up {r.get('warm_up_s')}")
    print(f"  load {r['load_cold_s']:.2f}/{r['load_warm_s']:.2f} s, peak RSS {r['peak_rss_bytes'] / 1e9:.3f} GB, "
          f"MLX peak {r['mlx_peak_bytes'] / 1e9:.3f} GB")
    print("  prefill " + ", ".join(f"{x['tokens']}: {x['tokens'] / x['ttft_s']:.0f} tok/s" for x in r["prefill"]))
    print(f"  decode {(d['tokens'] - 1) / d['decode_s']:.1f} tok/s; step {json.dumps(r['decode_profile'])}")
    graph = r.get("decode_graph") or {}
    kinds = sorted(graph.get("kinds", {}).items(), key=lambda kv: -kv[1])
    print(f"  decode step primitives {graph.get('primitives')}: " + ", ".join(f"{k} {n}" for k, n in kinds))
    print(f"  image {r['image']['ttft_s'] * 1e3:.1f} ms; follow-up {f['ttft_s'] * 1e3:.1f}, again "
          f"{f['again_ttft_s'] * 1e3:.1f} ms")
    print(f"  follow-up profile: eval {[round(x, 1) for x in p['eval_ms']]}, build {[round(x, 1) for x in p['build_ms']]}, "
          f"no history {[round(x, 1) for x in p['no_history_ms']]}")
    print("  sweep " + " ".join(f"{x['tokens']}:{x['ms']:.1f}" for x in p.get("sweep", [])))
    print("  curve " + " ".join(f"{c['tokens']}:{c['ms']:.1f} (first {c['first_ms']:.0f})" for c in r["prefill_curve"]))
    trace = path.with_suffix(".tsv")
    if trace.exists():
        trace_summary(trace, STEPS)


def trace_summary(trace: Path, steps: tuple[str, ...]) -> None:
    """Per phase starting with one of `steps`: the host's time by domain with its costliest
    functions, the GPU's costliest kernels, and slow cuBLASLt heuristic queries."""
    by_step = collections.defaultdict(list)
    for row in csv.DictReader(trace.open(), delimiter="\t"):
        by_step[(int(row["order"]), row["phase"])].append(row)
    for (_, step), rows in sorted(by_step.items()):
        if not step.startswith(steps):
            continue
        rows.sort(key=lambda row: -float(row["total_ms"]))
        # By domain (a runtime call's own driver calls are also counted under d:).
        domains = collections.Counter()
        for row in rows:
            domains[row["function"][0]] += float(row["total_ms"])
        total = ", ".join(f"{k} {v:.1f}" for k, v in sorted(domains.items()))
        host = [row for row in rows if row["function"][0] in "rdln"]
        print(f"  [{step}] ms by domain {total}: {top(host, 5)}")
        kernels = [row for row in rows if row["function"][0] == "k"]
        if kernels:
            print(f"    gpu: {top(kernels, 4, 90)}")
        slow = [row for row in rows if row["function"][0] == "h" and float(row["max_ms"]) > 1]
        if slow:
            print(f"    slow heuristics: {top(slow, 4)}")


def top(rows: list, n: int, width: int = 0) -> str:
    """The first n rows as "function calls x total ms (max)", names cut to width if set."""
    def name(row):
        return row["function"][:width] if width else row["function"]
    return " | ".join(f"{name(row)} {row['calls']}x {float(row['total_ms']):.1f} ms "
                      f"(max {float(row['max_ms']):.1f})" for row in rows[:n])


if __name__ == "__main__":
    main()
