"""Several answers at once, Gemma Desk against mlx-vlm's continuous batching, side by side.

    batch.py --model DIR [--streams 1,2,4,8] [--prompt 512] [--decode 128] [--window-words 200]
             [--ours target/release/gemma-desk-bench] [--dtype float32] [--reps 1]
             [--results bench/results.md] [--note TEXT]

Writes one plan (a prompt of `--prompt` token ids per stream: the fixture corpus, each stream
from its own offset, so that no two share a prefix), then runs, alternating which goes first,
`gemma-desk-bench --batch PLAN` and `reference_worker.py batch --plan PLAN` (mlx-vlm's
`BatchGenerator`, what `mlx_vlm server` batches with). Both decode `--decode` tokens per stream,
greedy, end of sequence disabled, at each number of streams. Ours also measures the window's
time to first token through the engine thread, idle and while four API-like answers are
written. Prints the aggregate tokens/s, the scaling against one stream, the ratios against
mlx-vlm, and appends the entry to the results file.
"""

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import HERE, ROOT, append_entry, commit, machine, run_worker, steal_line

REFERENCE = HERE / "reference_worker.py"
# The engines' names in the results entry: ours, the reference, ours with the `--ab` arguments.
LABELS = {"ours": "ours", "ref": "mlx-vlm", "each": "A/B"}
CORPUS = ROOT / "tests" / "fixtures" / "corpus.txt"


def prompts(model: Path, count: int, length: int) -> list[list[int]]:
    """`count` prompts of `length` ids: BOS, then the corpus from a different offset each."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = tokenizer.encode(CORPUS.read_text(), add_special_tokens=False).ids
    bos = tokenizer.token_to_id("<bos>")
    out = []
    for k in range(count):
        body: list[int] = []
        start = (k * 997) % max(1, len(ids))
        while len(body) < length - 1:
            body.extend(ids[start:])
            start = 0
        out.append(([bos] if bos is not None else []) + body[: length - 1])
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--streams", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 4, 8])
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens per stream")
    p.add_argument("--decode", type=int, default=128, help="tokens each stream decodes")
    p.add_argument("--window-words", type=int, default=200, help="words of the window's message")
    p.add_argument("--window-reps", type=int, default=3)
    p.add_argument("--ours", type=Path, default=ROOT / "target" / "release" / "gemma-desk-bench")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="both engines compute in this dtype")
    p.add_argument("--reps", type=int, default=1, help="repetitions of each engine (medians)")
    p.add_argument("--results", type=Path, default=HERE / "results.md")
    p.add_argument("--note", default="")
    p.add_argument("--ab", default="",
                   help="also run ours with these extra arguments (e.g. '--rows-each' or "
                        "'--decode-attention head-scores'), for A/B in the same run")
    p.add_argument("--deadline", type=float,
                   help="Unix time by which the run must end: a repetition that would overrun it is not started")
    p.add_argument("--write-plan", type=Path,
                   help="only write the plan to this file and exit (for a worker run by hand or traced)")
    args = p.parse_args(argv)

    raw = Path(tempfile.mkdtemp(prefix="gemma-desk-batch-"))
    plan = {
        "model": str(args.model.resolve()),
        "prompts": prompts(args.model, max(args.streams), args.prompt),
        "streams": args.streams,
        "decode": args.decode,
        "window_words": args.window_words,
        "window_reps": args.window_reps,
    }
    plan_path = args.write_plan or raw / "plan.json"
    plan_path.write_text(json.dumps(plan))
    if args.write_plan:
        return
    dtype = ["--dtype", args.dtype] if args.dtype else []
    ours_cmd = [str(args.ours), "--batch", str(plan_path), *dtype]
    ref_cmd = [sys.executable, str(REFERENCE), "batch", "--plan", str(plan_path), *dtype]
    runs: dict[str, list[dict]] = {"ours": [], "ref": []}
    engines = [("ours", ours_cmd), ("ref", ref_cmd)]
    if args.ab:
        runs["each"] = []
        engines.append(("each", [*ours_cmd, *args.ab.split()]))
    longest = 0.0
    for rep in range(args.reps):
        began = time.time()
        if rep > 0 and args.deadline is not None and began + longest > args.deadline:
            print(f"deadline: stopping after {rep} of {args.reps} repetitions", file=sys.stderr)
            break
        order = engines
        for name, cmd in order if rep % 2 == 0 else order[::-1]:
            runs[name].append(run_worker(cmd, raw, f"{name}{rep}", "ref" if name == "ref" else "ours"))
        longest = max(longest, time.time() - began)

    def tps(name: str, n: int) -> float:
        return statistics.median(r["aggregate"][str(n)]["tokens_per_second"] for r in runs[name])

    def scaling(name: str, n: int) -> float:
        """× the first stream count, taken within each process (which cancels the host's speed,
        that changes from process to process) and then the median over processes."""
        first = str(args.streams[0])
        return statistics.median(
            r["aggregate"][str(n)]["tokens_per_second"] / r["aggregate"][first]["tokens_per_second"]
            for r in runs[name]
        )

    rows = ["| streams | ours tok/s | × ours at 1 | mlx-vlm tok/s | × mlx-vlm at 1 | ours / mlx-vlm |",
            "|---:|---:|---:|---:|---:|---:|"]
    for n in args.streams:
        rows.append(
            f"| {n} | {tps('ours', n):.1f} | {scaling('ours', n):.2f} "
            f"| {tps('ref', n):.1f} | {scaling('ref', n):.2f} "
            f"| {tps('ours', n) / tps('ref', n):.2f} |"
        )
    if args.ab:
        rows[0] += f" ours with `{args.ab}` tok/s | ours / that |"
        rows[1] += "---:|---:|"
        for k, n in enumerate(args.streams):
            rows[k + 2] += f" {tps('each', n):.1f} | {tps('ours', n) / tps('each', n):.2f} |"
    def per_streams(r: dict) -> str:
        return "/".join(f"{r['aggregate'][str(n)]['tokens_per_second']:.0f}" for n in args.streams)

    def tuning(r: dict) -> str:
        return (f"batched_rows {r.get('batched_rows')}, "
                f"attention {r.get('decode_attention')}")

    idle = statistics.median(r["window_ttft_idle_ms"] for r in runs["ours"])
    loaded = statistics.median(r["window_ttft_loaded_ms"] for r in runs["ours"])
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    entry = (
        f"## {when} — several answers at once (batching), {args.model.name}\n\n"
        f"- machine: {machine()}\n- commit: {commit()}\n"
        f"- dtype: ours {runs['ours'][0]['dtype']}, mlx-vlm {runs['ref'][0]['dtype']}; "
        f"{args.prompt}-token prompt per stream, {args.decode} tokens each, greedy, end of sequence "
        f"disabled; {len(runs['ours'])} repetition(s), medians (`bench/batch.py`)\n"
        f"- the window's time to first token ({args.window_words}-word message): idle {idle:,.0f} ms, "
        f"while four API answers are written {loaded:,.0f} ms (× {loaded / idle:.2f})\n"
        + f"- × at {args.streams[0]}: within each process, then the median over processes. Each "
        f"process's aggregate tok/s by streams, in the order they ran: "
        + "; ".join(f"{LABELS[name]} " + ", ".join(map(per_streams, results)) for name, results in runs.items())
        + "\n- our tuning as the worker reported it (an A/B flag must change it): "
        + "; ".join(f"{LABELS[name]} {tuning(results[0])}" for name, results in runs.items() if name != "ref")
        + "\n"
        + steal_line({LABELS[name]: results for name, results in runs.items()})
        + (f"- note: {args.note}\n" if args.note else "")
        + "\n" + "\n".join(rows) + "\n"
    )
    print(entry)
    (raw / "runs.json").write_text(json.dumps(runs, indent=1))
    if args.results:
        append_entry(args.results, entry)


if __name__ == "__main__":
    main()
