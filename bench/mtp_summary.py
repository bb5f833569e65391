"""Speculative decoding's benchmark table from `run_mtp_on_device.sh`'s mtp.jsonl (medians over
repetitions, ours against mlx-vlm; ratios against plain decode of the same engine and run).

    mtp_summary.py OUT/mtp.jsonl
"""

import json
import statistics
import sys
from pathlib import Path

from bench import steal_line


def med(rows, key):
    values = [key(r) for r in rows]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    records = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
    by = {e: [r["mtp"] for r in records if r.get("engine") == e] for e in ("ours", "mlx-vlm")}
    ours, ref = by["ours"], by["mlx-vlm"]
    print(f"repetitions: ours {len(ours)}, mlx-vlm {len(ref)}; block size {ours[0]['block_size']}, "
          f"prompt {ours[0]['prompt_tokens']} tokens, {ours[0]['tokens']} decoded\n")
    print("| | ours | mlx-vlm | ours / mlx-vlm |")
    print("|---|---|---|---|")

    def row(name, key, unit="", ratio=True):
        a, b = med(ours, key), med(ref, key)
        r = f"{a / b:.2f}" if ratio and b else "—"
        print(f"| {name} | {a:.2f}{unit} | {b:.2f}{unit} | {r} |")

    row("plain decode, tok/s", lambda m: m["plain_tok_s"])
    for k in range(len(ours[0]["controlled"])):
        row(f"{k + 1} accepted/round, tok/s", lambda m, k=k: m["controlled"][k]["tok_s"])
    row("every draft rejected (drafting kept on), tok/s", lambda m: m["rejected_tok_s"])
    a = med(ours, lambda m: m["rejected_with_stop_tok_s"])
    print(f"| every draft rejected, drafting stops itself (ours), tok/s | {a:.2f} | — | — |")
    row("plain step, ms", lambda m: m["parts"]["step_ms"])
    row(f"verify of {ours[0]['block_size']} rows, ms", lambda m: m["parts"]["verify_ms"])
    row(f"draft block ({ours[0]['block_size'] - 1} drafter steps), ms", lambda m: m["parts"]["draft_block_ms"])
    mb = 1e6
    row("drafter weights, MB", lambda m: m["drafter_bytes"] / mb)
    row("added peak while speculating, MB", lambda m: (m["spec_peak_bytes"] - m["plain_peak_bytes"]) / mb)
    print()
    for name, rows in (("ours", ours), ("mlx-vlm", ref)):
        if not rows:
            continue
        # Each process times its plain decode and its speculative decode: the ratio is taken
        # within a process (the host's speed changes from process to process), then the median.
        parts = ", ".join(
            f"{k + 1}: {med(rows, lambda m, k=k: m['controlled'][k]['tok_s'] / m['plain_tok_s']):.2f}×"
            for k in range(len(rows[0]["controlled"])))
        rejected = med(rows, lambda m: m["rejected_tok_s"] / m["plain_tok_s"])
        each = "; ".join(
            f"{m['plain_tok_s']:.0f} → {m['controlled'][-1]['tok_s']:.0f}" for m in rows)
        print(f"- {name}: speculative / its own plain decode at 1, 2, 3 accepted per round, within each "
              f"process, median: {parts}; all rejected {rejected:.2f}× (plain → {len(rows[0]['controlled'])} "
              f"accepted tok/s, each process: {each})")
    same = {e: sum(m.get("rejected_same_answer", False) for m in rows) for e, rows in by.items()}
    print(f"- runs whose answer with every draft rejected equals the plain one: {same} "
          f"(a verify's rows can move a random model's near-ties in bf16)")
    tpr = {e: [round(c["tokens_per_round"], 2) for c in rows[0]["controlled"]]
           for e, rows in by.items() if rows}
    print(f"- tokens per round at controlled acceptance: {tpr}")
    graphs = [(m["parts"]["step_graph"]["primitives"], m["parts"]["verify_graph"]["primitives"])
              for m in ours if m["parts"].get("step_graph") and m["parts"].get("verify_graph")]
    if graphs:
        print(f"- ours, MLX primitives: plain step {graphs[0][0]}, verify of "
              f"{ours[0]['block_size']} rows {graphs[0][1]}")
    print(steal_line({e: [r for r in records if r.get("engine") == e] for e in ("ours", "mlx-vlm")}), end="")
    stopped = {m.get("stopped") for m in ours}
    print(f"- ours, drafting's own stop: {stopped}")


if __name__ == "__main__":
    main()
