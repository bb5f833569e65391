"""Gemma Desk against mlx-vlm, side by side, on one checkpoint and one MLX backend.

    bench.py --model DIR [--reps 5] [--prefill 512,2048] [--decode 128] [--decode-prompt 512]
             [--conversation 2000] [--answer 16] [--ours target/release/gemma-desk-bench]
             [--ours-arg=--dtype=float32 ...] [--results bench/results.md] [--note TEXT]
             [--deadline UNIX_SECONDS]

Each repetition starts one fresh process per engine, alternating which goes first, after
evicting the checkpoint's files from the page cache (posix_fadvise DONTNEED), so that each
process measures a cold load and then a warm one. Both engines run the same plan (the same
token ids), greedy, with end-of-sequence disabled, after an uncounted warm-up run of each.
Prints medians and ratios (ours / mlx-vlm) and appends the table to the results file.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REFERENCE = HERE / "reference_worker.py"


def sh(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> str:
    """One line: CPU, cores, memory, GPU (if any), OS."""
    cpu = platform.processor() or platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    if sys.platform == "darwin":
        cpu = sh(["sysctl", "-n", "machdep.cpu.brand_string"]) or cpu
    memory = ""
    if Path("/proc/meminfo").exists():
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kb / 2**20:.0f} GiB RAM"
    gpu = sh(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]).replace("\n", "; ")
    gpu = f", GPU {gpu}" if gpu else ""
    return f"{cpu}, {os.cpu_count()} cores{memory}{gpu}, {platform.system()} {platform.release()}"


def commit() -> str:
    """The checked-out commit (`-dirty` with local changes); BENCH_COMMIT names it where the tree
    is a copy without its history (the lent GPU machine)."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    rev = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    if not rev:
        return "unknown"
    dirty = sh(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return rev + ("-dirty" if dirty else "")


def evict(model: Path) -> None:
    """Drops the checkpoint's files from the page cache (cold load for the next process)."""
    for path in model.iterdir():
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


FAILURES: dict[str, list[str]] = {}


def append_entry(results: Path, entry: str) -> None:
    """Appends `entry` to the results file (made with its title when missing)."""
    existing = results.read_text() if results.exists() else "# Benchmark results\n"
    results.write_text(existing.rstrip("\n") + "\n\n" + entry)


def cpu_ticks() -> tuple[int, int] | None:
    """(stolen, all) clock ticks of every core so far, from /proc/stat's first line; None where
    there is none (macOS). "Stolen" is time the hypervisor gave this machine's cores to others."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of all cores' time stolen by the hypervisor between two `cpu_ticks` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


def steal_line(runs: dict[str, list[dict]]) -> str:
    """The results entry's line of the time stolen by the hypervisor during each process, in the
    order they ran within each engine; empty where the host does not report it."""
    parts = []
    for name, results in runs.items():
        values = [r.get("host_steal_pct") for r in results]
        if values and all(v is not None for v in values):
            parts.append(f"{name} " + ", ".join(f"{v:.1f}" for v in values))
    if not parts:
        return ""
    return "- cores' time stolen by the hypervisor during each process (%): " + "; ".join(parts) + "\n"


def run_worker(command: list[str], raw: Path, tag: str, engine: str, attempts: int = 3) -> dict:
    """Runs one worker process; a process that fails is started again (at most `attempts` in
    all), and every failure is kept for the results entry: a crash is reported, never hidden.
    The result gains `host_steal_pct`: the cores' time stolen by the hypervisor while it ran
    (this host's speed changes from process to process; docs/BENCHMARK.md §10)."""
    for attempt in range(attempts):
        before = cpu_ticks()
        result = subprocess.run(command, capture_output=True, text=True)
        stolen = steal_pct(before, cpu_ticks())
        (raw / f"{tag}.stderr").write_text(result.stderr)
        if result.returncode == 0:
            line = [ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1]
            (raw / f"{tag}.json").write_text(line)
            parsed = json.loads(line)
            parsed["host_steal_pct"] = stolen
            return parsed
        (raw / f"{tag}.failed{attempt}.stderr").write_text(result.stderr)
        cause = next((ln for ln in result.stderr.splitlines() if ln.startswith("Error")), "")
        FAILURES.setdefault(engine, []).append(f"{tag}: exit {result.returncode} {cause[:200]}")
        print(f"{tag} failed ({result.returncode}): {result.stderr[-2000:]}", file=sys.stderr)
    sys.exit(f"{' '.join(command)} failed {attempts} times")


def metrics(r: dict) -> dict:
    """Numbers of one run, in table units."""
    out = {
        "load_cold_s": r["load_cold_s"],
        "load_warm_s": r["load_warm_s"],
        "peak_rss_gb": r["peak_rss_bytes"] / 1e9,
        "mlx_peak_gb": r["mlx_peak_bytes"] / 1e9,
    }
    for p in r["prefill"]:
        out[f"prefill_{p['tokens']}"] = p["tokens"] / p["ttft_s"]
    d = r["decode"]
    out["decode"] = (d["tokens"] - 1) / d["decode_s"] if d["decode_s"] > 0 else float("nan")
    out["image_ttft_ms"] = r["image"]["ttft_s"] * 1000
    out["followup_ttft_ms"] = r["followup"]["ttft_s"] * 1000
    if "again_ttft_s" in r["followup"]:
        out["followup_again_ttft_ms"] = r["followup"]["again_ttft_s"] * 1000
    for clip in r.get("audio", []):
        out[f"audio_{clip['seconds']}s_ttft_ms"] = clip["ttft_s"] * 1000
    return out


# (key, label, higher is better, target ratio or None)
def rows(prefill: list[int], decode: int, decode_prompt: int, conversation: int, image_tokens: int, gpu: bool,
         audio_seconds: tuple[int, ...] = ()):
    decode_target = 1.5 if gpu else 1.15
    out = [
        ("load_cold_s", "load, cold page cache (s)", False, 1.0),
        ("load_warm_s", "load, warm page cache (s)", False, 1.0),
        ("peak_rss_gb", "peak RSS (GB)", False, 0.9),
        ("mlx_peak_gb", "MLX peak memory (GB)", False, None),
    ]
    for n in prefill:
        out.append((f"prefill_{n}", f"prefill {n} tokens (tok/s)", True, 1.3 if n == 512 else None))
    out += [
        ("decode", f"decode {decode} after {decode_prompt} (tok/s)", True, decode_target),
        ("image_ttft_ms", f"image TTFT, {image_tokens} soft tokens + question (ms)", False, 0.8),
        ("followup_ttft_ms", f"follow-up TTFT in a {conversation}-token chat (ms)", False, 0.3),
        ("followup_again_ttft_ms", "the next follow-up, its shapes met once (ms)", False, None),
    ]
    out += [(f"audio_{s}s_ttft_ms", f"audio TTFT, a {s} s clip + question (ms)", False, 0.7) for s in audio_seconds]
    return out


def fmt(value: float) -> str:
    if value != value:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(runs: dict[str, list[dict]], spec) -> tuple[str, list[dict]]:
    lines = [
        "| metric | Gemma Desk | mlx-vlm | ratio | target | met |",
        "|---|---:|---:|---:|---:|:-:|",
    ]
    summary = []
    for key, label, higher, target in spec:
        ours = [metrics(r)[key] for r in runs["ours"]]
        ref = [metrics(r)[key] for r in runs["ref"]]
        mo, mr = statistics.median(ours), statistics.median(ref)
        ratio = mo / mr if mr else float("nan")
        if target is None:
            goal, met = "", ""
        else:
            goal = f"≥ {target}" if higher else f"≤ {target}"
            met = "yes" if (ratio >= target if higher else ratio <= target) else "**no**"
        spread = lambda xs: f" ({fmt(min(xs))}–{fmt(max(xs))})" if len(xs) > 1 else ""  # noqa: E731
        lines.append(f"| {label} | {fmt(mo)}{spread(ours)} | {fmt(mr)}{spread(ref)} | {ratio:.2f} | {goal} | {met} |")
        summary.append({"metric": key, "ours": mo, "ref": mr, "ratio": ratio, "target": target})
    return "\n".join(lines), summary


def agreement(runs: dict[str, list[dict]]) -> str:
    a = runs["ours"][0]["decode"]["ids"]
    b = runs["ref"][0]["decode"]["ids"]
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"{same}/{min(len(a), len(b))}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--prefill", default="512,2048", help="prompt lengths whose prefill is timed")
    p.add_argument("--decode", type=int, default=128, help="tokens generated when timing decode")
    p.add_argument("--decode-prompt", type=int, default=512, help="prompt length before the decode")
    p.add_argument("--conversation", type=int, default=2000, help="chat length before the follow-up")
    p.add_argument("--answer", type=int, default=16, help="tokens answered before the follow-up")
    p.add_argument("--image-budget", type=int, default=280, help="max soft tokens of the image (70 … 1120)")
    p.add_argument("--no-image-warmup", action="store_true", help="skip each process's uncounted image request")
    p.add_argument("--audio", action="store_true",
                   help="also time questions about a 10 s and a 30 s clip (the model needs an audio tower)")
    p.add_argument("--ours", type=Path, default=ROOT / "target/release/gemma-desk-bench")
    p.add_argument("--ours-arg", action="append", default=[], help="extra argument for our worker")
    p.add_argument("--ab", default="",
                   help="also run ours with these extra arguments (e.g. --ab=--ple-resident or --ab=--decode-attention=head-scores; the = is needed) in every "
                        "repetition: its decode, step profile and primitives are reported beside ours")
    p.add_argument("--ref-dtype", choices=["float32", "bfloat16"],
                   help="cast mlx-vlm's float parameters after loading (default: as loaded)")
    p.add_argument("--python", default=sys.executable, help="Python with mlx-vlm")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--results", type=Path, default=HERE / "results.md")
    p.add_argument("--raw", type=Path, help="folder for every run's JSON and stderr (default: a temp dir)")
    p.add_argument("--note", default="", help="a line to add to the results entry")
    p.add_argument("--deadline", type=float,
                   help="wall-clock time (Unix seconds) by which to finish: no repetition is started that "
                        "would end after it, judging by the longest one so far (at least one always runs)")
    args = p.parse_args(argv)

    prefill = [int(v) for v in args.prefill.split(",")]
    raw = args.raw or Path(tempfile.mkdtemp(prefix="gemma-bench-"))
    raw.mkdir(parents=True, exist_ok=True)
    plan = raw / "plan.json"
    prepared = subprocess.run(
        [args.python, REFERENCE, "prepare", "--model", args.model, "--out", plan, "--prefill", args.prefill,
         "--decode", str(args.decode), "--decode-prompt", str(args.decode_prompt),
         "--conversation", str(args.conversation), "--answer", str(args.answer),
         "--image-budget", str(args.image_budget), *(["--no-image-warmup"] if args.no_image_warmup else []),
         *(["--audio"] if args.audio else [])],
        capture_output=True, text=True,
    )
    if prepared.returncode != 0:
        sys.exit(f"prepare failed:\n{prepared.stderr[-4000:]}")
    sizes = json.loads(prepared.stdout.strip().splitlines()[-1])

    engines = {
        "ours": [str(args.ours), "--plan", str(plan), *args.ours_arg],
        "ref": [args.python, str(REFERENCE), "run", "--plan", str(plan),
                *(["--dtype", args.ref_dtype] if args.ref_dtype else [])],
    }
    if args.ab:
        engines["ab"] = [*engines["ours"], *args.ab.split()]
    host = machine()
    print(f"machine: {host}", file=sys.stderr)
    print(f"plan: {json.dumps(sizes)}; raw output in {raw}", file=sys.stderr)
    if not args.no_warmup:
        for name, command in engines.items():
            print(f"warm-up: {name}", file=sys.stderr)
            run_worker(command, raw, f"warmup-{name}", name)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    longest = 0.0
    for rep in range(args.reps):
        began = time.time()
        if rep > 0 and args.deadline is not None and began + longest > args.deadline:
            print(f"deadline: stopping after {rep} of {args.reps} repetitions", file=sys.stderr)
            break
        order = list(engines) if rep % 2 == 0 else list(reversed(engines))
        for name in order:
            evict(args.model)
            result = run_worker(engines[name], raw, f"rep{rep}-{name}", name)
            runs[name].append(result)
            m = metrics(result)
            print(f"rep {rep + 1}/{args.reps} {name}: " + ", ".join(f"{k} {fmt(v)}" for k, v in m.items()),
                  file=sys.stderr)
        longest = max(longest, time.time() - began)

    device = runs["ref"][0].get("device", "")
    gpu = "gpu" in device.lower()
    text, summary = table(runs, rows(prefill, args.decode, args.decode_prompt, sizes["conversation_tokens"],
                                     sizes["image_soft_tokens"], gpu,
                                     tuple(c["seconds"] for c in runs["ours"][0].get("audio", []))))
    ours_dtype, ref_dtype = runs["ours"][0]["dtype"], runs["ref"][0]["dtype"]
    header = (
        f"### {datetime.date.today().isoformat()} · {args.model.name} · MLX {device}\n\n"
        f"- machine: {host}\n"
        f"- commit: {commit()}\n"
        f"- command: `{' '.join(['bench/bench.py', *(argv if argv is not None else sys.argv[1:])])}`\n"
        f"- {len(runs['ours'])} repetitions, medians (min–max); compute dtype: ours {ours_dtype}, mlx-vlm {ref_dtype}; "
        f"image prompt {runs['ours'][0]['image']['prompt_tokens']} tokens (mlx-vlm "
        f"{runs['ref'][0]['image']['prompt_tokens']}); follow-up reused {runs['ours'][0]['followup']['reused_tokens']} "
        f"of {runs['ours'][0]['followup']['prompt_tokens']} tokens (mlx-vlm "
        f"{runs['ref'][0]['followup']['reused_tokens']}); greedy decode agreement {agreement(runs)} tokens\n"
    )
    def profile(name: str) -> str:
        parts = [[r["decode_profile"][k] for r in runs[name]] for k in ("build_ms", "dispatch_ms", "wait_ms", "per_token_ms")]
        return " / ".join(f"{statistics.median(p):.2f}" for p in parts)

    graph = lambda name: runs[name][0]["decode_graph"]["primitives"]  # noqa: E731
    header += f"- MLX primitives per decode step: ours {graph('ours')}, mlx-vlm {graph('ref')}\n"
    header += (
        f"- decode step, ms per token (build graph / dispatch / wait for the device / total): "
        f"ours {profile('ours')}, mlx-vlm {profile('ref')}\n"
    )
    def first_step(name: str) -> str:
        steps = [r["decode_first_step"] for r in runs[name] if "decode_first_step" in r]
        if not steps:
            return "not measured"
        first = statistics.median(s["first_ms"] for s in steps)
        replay = statistics.median(s["replay_ms"] for s in steps)
        return f"{first:.1f} ms, then {replay:.2f} ms replayed ({steps[0]['traces']} trace(s))"

    header += (
        f"- our first decode step of a shape not met before (MLX's compile cache cleared: the "
        f"compiled step traced and compiled again): {first_step('ours')}"
        + (f"; with `{args.ab}`: {first_step('ab')}" if args.ab else "") + "\n"
    )
    if args.ab:
        decode = lambda name: statistics.median(metrics(r)["decode"] for r in runs[name])  # noqa: E731
        header += (
            f"- A/B, ours with `{args.ab}` in the same repetitions: decode {decode('ab'):.1f} tok/s against ours "
            f"{decode('ours'):.1f} (ours / that {decode('ours') / decode('ab'):.2f}x); its decode step "
            f"{profile('ab')} ms; {graph('ab')} primitives per step\n"
        )
    warm_ups = [r["warm_up_s"] for r in runs["ours"] if r.get("warm_up_s") is not None]
    if warm_ups:
        header += (
            f"- our warm-up after loading (the two-turn chat the app runs once the model is loaded, its "
            f"first message of {runs['ours'][0].get('warm_up_history', 0):,} tokens; not counted in the load "
            f"time): {statistics.median(warm_ups) * 1000:,.0f} ms\n"
        )
    def curve(name: str) -> dict[int, float]:
        rows = [r.get("prefill_curve") or [] for r in runs[name]]
        lengths = [row["tokens"] for row in rows[0]]
        return {n: statistics.median(row[i]["ms"] for row in rows) for i, n in enumerate(lengths)}

    ours_curve, ref_curve = curve("ours"), curve("ref")
    if ours_curve and ref_curve:
        header += "- prefill from an empty cache, ms by prompt length (ours / mlx-vlm): " + ", ".join(
            f"{n}: {ours_curve[n]:.1f} / {ref_curve[n]:.1f}" for n in ours_curve if n in ref_curve
        ) + "\n"
    header += steal_line({"ours": runs["ours"], "mlx-vlm": runs["ref"], **({"A/B": runs["ab"]} if args.ab else {})})
    for name, failures in FAILURES.items():
        header += f"- {name}: {len(failures)} worker process(es) failed and were run again: {'; '.join(failures)}\n"
    clips = runs["ours"][0].get("audio", [])
    if clips and all("prepare_s" in c for c in clips):
        header += "- audio TTFT, of which reading and featurizing the file on the CPU (ours, median): " + ", ".join(
            f"{c['seconds']} s clip {statistics.median(r['audio'][i]['prepare_s'] for r in runs['ours']) * 1000:.1f} ms"
            for i, c in enumerate(clips)
        ) + "\n"
    if args.note:
        header += f"- note: {args.note}\n"
    entry = f"{header}\n{text}\n"
    print(entry)
    (raw / "summary.json").write_text(json.dumps(summary, indent=1))
    if args.results:
        append_entry(args.results, entry)


if __name__ == "__main__":
    main()
