"""Where the memory goes: Gemma Desk against mlx-vlm on one checkpoint, in one run.

    memory.py --model DIR --ours PATH/gemma-desk-bench [--drafter DIR] [--prefill 2048]
              [--dtype float32] [--ours-arg=--ple-resident ...] [--results bench/results.md]

Runs `gemma-desk-bench --memory` (`tools::memory`) and `memory_reference.py` (mlx-vlm) one
after the other, each in a fresh process, and prints one markdown table (appended to the
results file with --results): the checkpoint's weights by part and which of them each engine
holds in MLX memory, one conversation's KV caches at 4k/32k/128k positions, and MLX's active
and peak bytes and the resident set after loading and after each prefill. How to read it:
docs/BENCHMARK.md, "Memory".
"""

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import commit, machine  # noqa: E402


def gb(value) -> str:
    return "—" if value is None else f"{value / 1e9:.3f}"


def mb(value) -> str:
    return "—" if value is None else f"{value / 1e6:.1f}"


def run_json(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--drafter")
    parser.add_argument("--prefill", default="2048")
    parser.add_argument("--dtype")
    parser.add_argument("--ours-arg", action="append", default=[])
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--results")
    args = parser.parse_args()

    ours_cmd = [args.ours, "--memory", args.model, "--memory-prefill", args.prefill, *args.ours_arg]
    if args.drafter:
        ours_cmd += ["--memory-drafter", args.drafter]
    if args.dtype:
        ours_cmd += ["--dtype", args.dtype]
    ours = run_json(ours_cmd)
    ref = None
    if not args.no_reference:
        ref_cmd = [sys.executable, str(HERE / "memory_reference.py"), "--model", args.model, "--prefill", args.prefill]
        if args.dtype:
            ref_cmd += ["--dtype", args.dtype]
        ref = run_json(ref_cmd)

    lines = [
        f"## Memory — {datetime.date.today()} — {Path(args.model).name}",
        "",
        f"- machine: {machine()}",
        f"- commit: {commit()}; backend {ours['backend']}, dtype {ours['dtype']}; "
        f"PLE rows from the file: {ours['ple_from_file']}",
        f"- command: `{' '.join(sys.argv)}`",
        "",
        "| weights by part | stored (MB) | ours in MLX | mlx-vlm in MLX |",
        "|---|---|---|---|",
    ]
    for part in ours["weights_by_part"]:
        if part["stored_bytes"] == 0:
            continue
        drafter = part["part"] == "drafter"
        note = " (loaded with speculation)" if drafter else ""
        if part.get("on_demand"):
            note = " (read by the first question that needs it)"
        lines.append(
            f"| {part['part']} | {mb(part['stored_bytes'])} | {'yes' if part['in_mlx'] else 'no'}"
            f"{note} | {'—' if drafter else 'yes'} |"
        )
    lines += [
        "",
        "| one conversation's KV cache | activation dtype (MB) | bf16 (MB) | 8-bit KV (MB) | 4-bit KV (MB) |",
        "|---|---|---|---|---|",
    ]
    for kv in ours["kv_caches"]:
        lines.append(
            f"| {kv['positions'] // 1024}k positions | {mb(kv['activation_dtype_bytes'])} | {mb(kv['bf16_bytes'])} "
            f"| {mb(kv['kv8_bytes'])} | {mb(kv['kv4_bytes'])} |"
        )

    def rows(side: dict | None, key: str, pick) -> str:
        return "—" if side is None else pick(side[key])

    lines += [
        "",
        "| GB | ours MLX active | ours MLX peak | ours RSS | mlx-vlm MLX active | mlx-vlm MLX peak | mlx-vlm RSS | active ours / mlx-vlm |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def line(label: str, o: dict, r: dict | None) -> str:
        ratio = "—"
        if r and r["mlx_active_bytes"]:
            ratio = f"{o['mlx_active_bytes'] / r['mlx_active_bytes']:.2f}"
        return (
            f"| {label} | {gb(o['mlx_active_bytes'])} | {gb(o['mlx_peak_bytes'])} | {gb(o['rss_bytes'])} "
            f"| {gb(r and r['mlx_active_bytes'])} | {gb(r and r['mlx_peak_bytes'])} | {gb(r and r['rss_bytes'])} | {ratio} |"
        )

    lines.append(line("after load", ours["after_load"], ref and ref["after_load"]))
    for i, p in enumerate(ours["prefills"]):
        r = ref["prefills"][i]["after"] if ref else None
        lines.append(line(f"after a {p['tokens']}-token prefill (peak: during it)", p["after"], r))
    notes = []
    for key, what, tower in (("image_question", "image", "vision"), ("audio_question", f"{30} s clip", "audio")):
        media = ours.get(key)
        if not media:
            continue
        r = ref.get(key) if ref else None
        lines.append(line(f"after a first {what} question (peak: during it)", media["after"], r and r["after"]))
        lines.append(line(f"after the {tower} tower's idle release", media["after_idle_release"], None))
        load = media["tower_load_seconds"]
        theirs = "" if not r else (
            f"; mlx-vlm {r['prompt_tokens']} prompt tokens, {r['seconds_to_first_token']:.3f} s to the first token"
        )
        notes.append(
            f"First {what} question ({media['prompt_tokens']} prompt tokens): time to the first token "
            f"{media['seconds_to_first_token']:.3f} s, of which reading the {tower} tower "
            f"{'—' if load is None else f'{load:.3f}'} s; the tower holds {mb(media['tower_bytes'])} MB "
            f"while in use (released after {ours['tower_idle_seconds']:.0f} s idle){theirs}."
        )
    if notes:
        lines += ["", *notes, f"MLX buffer cache limit {mb(ours['cache_limit_bytes'])} MB."]
    lines.append("")
    table = "\n".join(lines)
    print(table)
    if args.results:
        results = Path(args.results)
        existing = results.read_text() if results.exists() else "# Benchmark results\n"
        results.write_text(existing.rstrip("\n") + "\n\n" + table)


if __name__ == "__main__":
    main()
