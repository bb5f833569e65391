"""The mlx-vlm side of the benchmark: one process = one repetition of every scenario.

    reference_worker.py prepare --model DIR --out PLAN.json [--prefill 512,2048] [--decode 128]
                                [--decode-prompt 512] [--conversation 2000] [--answer 16]
                                [--image-size 960x672]
    reference_worker.py run --plan PLAN.json
    reference_worker.py mtp --plan PLAN.json --drafter DIR [--block 4]
    reference_worker.py batch --plan BATCH_PLAN.json [--dtype float32]

`prepare` writes the plan both engines execute: token ids of every prompt (so both sides see
exactly the same ids), the benchmark image, and the follow-up turn. `run` loads mlx-vlm, runs the
plan the way a user of mlx-vlm would (`load`, `stream_generate`, `PromptCacheState`), and prints
one JSON object on stdout. Timings are wall-clock, taken here around mlx-vlm's public calls.
"""

import argparse
import gc
import json
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests" / "fixtures" / "corpus.txt"
QUESTION = "What is in this picture? Answer in one sentence."
FOLLOW_UP = "Thank you. Can you say that again in one short sentence?"
CURVE_LENGTHS = [1, 2, 8, 38, 64, 128, 512]  # prefill-curve prompt lengths (both engines read the plan)

warnings.filterwarnings("ignore", message="At least one mel filter has all zero values")


def peak_rss_bytes() -> int:
    """The process's high-water resident set (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------------------------- prepare
def corpus_ids(tokenizer, count: int) -> list[int]:
    """`count` ids of ordinary text (the fixture corpus, repeated), without specials."""
    text = CORPUS.read_text()
    ids = tokenizer.encode(text, add_special_tokens=False)
    out = []
    while len(out) < count:
        out.extend(ids)
    return out[:count]


def conversation(processor, target: int) -> tuple[list[dict], list[int]]:
    """A chat of alternating turns from the corpus, rendered with the checkpoint's template,
    grown until it holds at least `target` tokens (generation prompt included)."""
    lines = [line.strip() for line in CORPUS.read_text().splitlines() if line.strip()]
    paragraphs = [" ".join(lines[i : i + 2]) for i in range(0, len(lines), 2)]
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    k = 0
    while True:
        question = paragraphs[k % len(paragraphs)]
        answer = paragraphs[(k + 1) % len(paragraphs)]
        messages.append({"role": "user", "content": f"Please read this and comment: {question}"})
        ids = render(processor, messages)
        if len(ids) >= target:
            return messages, ids
        messages.append({"role": "assistant", "content": answer})
        k += 2


def render(processor, messages: list[dict], generation_prompt: bool = True) -> list[int]:
    text = processor.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    return list(processor.tokenizer.encode(text, add_special_tokens=False))


def make_image(path: Path, width: int, height: int) -> None:
    """A deterministic picture: gradients, a disc and some noise (PNG)."""
    import numpy as np
    from PIL import Image, ImageDraw

    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1)
    noise = np.random.default_rng(7).integers(0, 24, size=pixels.shape)
    image = Image.fromarray(((pixels + noise) % 256).astype("uint8"))
    ImageDraw.Draw(image).ellipse((width // 4, height // 4, width // 2, height // 2), fill=(240, 200, 40))
    image.save(path)


AUDIO_QUESTION = "What is said in this recording?"
AUDIO_SECONDS = (10, 30)


def make_audio(path: Path, seconds: int) -> None:
    """A deterministic 16 kHz mono 16-bit WAV: harmonics of a gliding pitch under a syllable-rate
    envelope, with a little noise (speech-like enough that no frame is silent)."""
    import wave

    import numpy as np

    rate = 16000
    t = np.arange(seconds * rate) / rate
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t) ** 2
    noise = np.random.default_rng(seconds).standard_normal(t.size)
    pcm = np.clip(np.round((0.2 * voice * envelope + 0.01 * noise) * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def cmd_prepare(args) -> None:
    from mlx_vlm.models.gemma4 import Gemma4Processor

    processor = Gemma4Processor.from_pretrained(str(args.model))
    config = json.loads((args.model / "config.json").read_text())
    bos = config["text_config"].get("bos_token_id", config.get("bos_token_id", 2))
    bos = bos[0] if isinstance(bos, list) else bos

    def prompt(n: int) -> list[int]:
        return [bos] + corpus_ids(processor.tokenizer, n - 1)

    width, height = (int(v) for v in args.image_size.lower().split("x"))
    image = args.out.with_suffix(".png")
    make_image(image, width, height)
    from PIL import Image

    _, soft_tokens = processor.image_processor([Image.open(image).convert("RGB")], max_soft_tokens=args.image_budget)

    clips = []
    if args.audio:
        for seconds in AUDIO_SECONDS:
            path = args.out.with_name(f"{args.out.stem}_audio{seconds}s.wav")
            make_audio(path, seconds)
            clips.append({"path": str(path.resolve()), "seconds": seconds})

    _, turn1 = conversation(processor, args.conversation)
    suffix_text = f"<turn|>\n<|turn>user\n{FOLLOW_UP}<turn|>\n<|turn>model\n"
    suffix = list(processor.tokenizer.encode(suffix_text, add_special_tokens=False))
    plan = {
        "model": str(args.model.resolve()),
        "warmup": {"ids": prompt(min(64, args.decode_prompt)), "tokens": 4},
        "prefill": [{"tokens": n, "ids": prompt(n)} for n in args.prefill],
        "decode": {"ids": prompt(args.decode_prompt), "tokens": args.decode},
        "image": {
            "path": str(image.resolve()),
            "question": QUESTION,
            "budget": args.image_budget,
            "soft_tokens": int(soft_tokens[0]),
            "warmup": not args.no_image_warmup,
        },
        "followup": {"turn1": turn1, "answer_tokens": args.answer, "suffix": suffix},
        "curve": CURVE_LENGTHS,
    }
    if clips:
        plan["audio"] = {"question": AUDIO_QUESTION, "clips": clips, "warmup": not args.no_image_warmup}
    args.out.write_text(json.dumps(plan))
    print(
        json.dumps(
            {
                "prefill": args.prefill,
                "decode_prompt": args.decode_prompt,
                "decode": args.decode,
                "image_soft_tokens": int(soft_tokens[0]),
                "conversation_tokens": len(turn1),
                "follow_up_tokens": len(suffix),
            }
        )
    )


# ---------------------------------------------------------------------------------- run
class NeverStop:
    """Stopping criteria that never fire: end-of-sequence is disabled while timing."""

    def __call__(self, token) -> bool:
        return False

    def reset(self, *args, **kwargs) -> None:
        pass

    def add_eos_token_ids(self, *args, **kwargs) -> None:
        pass


def timed_generation(stream, start: float | None = None) -> tuple[list[float], list[int], object]:
    """Consumes a `stream_generate` iterator (which does its work lazily, on iteration); returns
    each token's arrival time in seconds after `start` (default: now), the ids and the last result."""
    start = time.perf_counter() if start is None else start
    times, tokens, last = [], [], None
    for last in stream:
        if last.token is not None:
            times.append(time.perf_counter() - start)
            tokens.append(int(last.token))
    return times, tokens, last


def decode_profile(mx, model, prompt: list[int], steps: int) -> dict:
    """Where a decode step's time goes (median ms per token): building the graph in Python,
    dispatching it (`mx.async_eval`), waiting for the previous token. Pipelined like mlx-vlm."""
    from mlx_vlm.models import cache as cache_lib

    lm = model.language_model
    cache = cache_lib.make_prompt_cache(lm)
    logits = lm(mx.array([prompt]), cache=cache, logits_to_keep=1).logits[:, -1, :]
    y = mx.argmax(logits, axis=-1)
    mx.async_eval(y)
    build, dispatch, wait = [], [], []
    start = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        logits = lm(y[None], cache=cache).logits[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        nxt = mx.argmax(logprobs, axis=-1)
        t1 = time.perf_counter()
        mx.async_eval(nxt)
        t2 = time.perf_counter()
        y.item()
        t3 = time.perf_counter()
        build.append((t1 - t0) * 1e3)
        dispatch.append((t2 - t1) * 1e3)
        wait.append((t3 - t2) * 1e3)
        y = nxt
    total = (time.perf_counter() - start) * 1e3 / steps
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"steps": steps, "build_ms": med(build), "dispatch_ms": med(dispatch), "wait_ms": med(wait),
            "per_token_ms": total}


def prefill_curve(mx, model, ids: list[int], lengths: list[int], reps: int = 3) -> list[dict]:
    """Prefill cost against prompt length from an empty cache (ms to evaluated logits and cache):
    the first call per length (one-time work for its shapes) and the median of `reps` more."""
    from mlx_vlm.models import cache as cache_lib

    lm = model.language_model
    rows = []
    for n in [n for n in lengths if n <= len(ids)]:
        times = []
        for _ in range(reps + 1):
            cache = cache_lib.make_prompt_cache(lm)
            t0 = time.perf_counter()
            logits = lm(mx.array([ids[:n]]), cache=cache, logits_to_keep=1).logits
            mx.eval(logits, [c.state for c in cache])
            times.append((time.perf_counter() - t0) * 1e3)
        first = times.pop(0)
        rows.append({"tokens": n, "first_ms": first, "ms": sorted(times)[len(times) // 2]})
    return rows


def step_graph(mx, model, prompt: list[int]) -> dict:
    """Primitives MLX evaluates for one decode step (token and cache updates), by kind."""
    import collections
    import os
    import tempfile

    from mlx_vlm.models import cache as cache_lib

    lm = model.language_model
    cache = cache_lib.make_prompt_cache(lm)
    logits = lm(mx.array([prompt]), cache=cache, logits_to_keep=1).logits[:, -1, :]
    y = mx.argmax(logits, axis=-1)
    mx.eval(y, [c.state for c in cache])
    logits = lm(y[None], cache=cache).logits[:, -1, :]
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    nxt = mx.argmax(logprobs, axis=-1)
    fd, path = tempfile.mkstemp(suffix=".dot")
    os.close(fd)
    mx.export_to_dot(path, nxt, *[a for c in cache for a in c.state])
    kinds = collections.Counter()
    for line in Path(path).read_text().splitlines():
        if "shape=rectangle" in line:
            kinds[line.split('label ="')[1].split('"')[0]] += 1
    os.remove(path)
    mx.eval(nxt)
    return {"primitives": sum(kinds.values()), "kinds": dict(sorted(kinds.items()))}


def cmd_run(args) -> None:
    import mlx.core as mx
    from mlx_vlm import load, stream_generate
    from mlx_vlm.generate import PromptCacheState
    from mlx.utils import tree_map
    from mlx_vlm.prompt_utils import apply_chat_template

    plan = json.loads(args.plan.read_text())
    model_dir = plan["model"]
    result = {"engine": "mlx-vlm", "device": str(mx.default_device())}

    def timed_load():
        start = time.perf_counter()
        model, processor = load(model_dir)
        if args.dtype:
            # As tests/parity/reference.py: every floating parameter (scales and biases too).
            target = getattr(mx, args.dtype)
            model.update(
                tree_map(lambda a: a.astype(target) if mx.issubdtype(a.dtype, mx.floating) else a, model.parameters())
            )
            mx.eval(model.parameters())
        return model, processor, time.perf_counter() - start

    model, processor, result["load_cold_s"] = timed_load()
    del model, processor
    gc.collect()
    mx.clear_cache()
    model, processor, result["load_warm_s"] = timed_load()
    result["dtype"] = str(model.language_model.model.norm.weight.dtype).replace("mlx.core.", "")
    processor.tokenizer.stopping_criteria = NeverStop()

    def generate(ids: list[int], max_tokens: int, **kwargs):
        return timed_generation(
            stream_generate(
                model,
                processor,
                "",
                input_ids=mx.array([ids], dtype=mx.int32),
                max_tokens=max_tokens,
                temperature=0.0,
                **kwargs,
            )
        )

    warm = plan["warmup"]
    generate(warm["ids"], warm["tokens"])
    image = plan["image"]
    # The budget the processor config would set (mlx-vlm forwards no max_soft_tokens argument).
    processor.image_processor.max_soft_tokens = image["budget"]

    def ask_image(start: float):
        prompt = apply_chat_template(processor, model.config, image["question"], num_images=1)
        stream = stream_generate(model, processor, prompt, image=[image["path"]], max_tokens=1, temperature=0.0)
        return timed_generation(stream, start)

    if image["warmup"]:
        ask_image(time.perf_counter())

    result["prefill"] = []
    for case in plan["prefill"]:
        times, _, _ = generate(case["ids"], 1)
        result["prefill"].append({"tokens": case["tokens"], "ttft_s": times[0]})

    decode = plan["decode"]
    times, tokens, _ = generate(decode["ids"], decode["tokens"])
    result["decode"] = {
        "tokens": len(tokens),
        "ttft_s": times[0],
        "decode_s": times[-1] - times[0],
        "ids": tokens,
    }

    result["decode_profile"] = decode_profile(mx, model, decode["ids"], min(decode["tokens"], 64))
    result["decode_graph"] = step_graph(mx, model, decode["ids"])
    result["prefill_curve"] = prefill_curve(mx, model, decode["ids"], plan["curve"])

    # From the request (question text + image path) to the first token, preprocessing included.
    times, _, last = ask_image(time.perf_counter())
    result["image"] = {"ttft_s": times[0], "prompt_tokens": int(last.prompt_tokens)}

    if "audio" in plan:
        audio = plan["audio"]

        def ask_audio(path: str, start: float):
            # The file is read here with the standard library rather than by mlx-audio (which
            # imports scipy, absent on the device); the array goes through mlx-vlm's own path:
            # load_audio (16 kHz: no resampling), the processor's feature extractor, the tower.
            import wave

            import numpy as np

            with wave.open(path, "rb") as f:
                pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
            samples = pcm.astype(np.float32) / 32768.0
            prompt = apply_chat_template(processor, model.config, audio["question"], num_audios=1)
            stream = stream_generate(model, processor, prompt, audio=[samples], max_tokens=1, temperature=0.0)
            return timed_generation(stream, start)

        if audio["warmup"]:  # every clip length once, as the image: one-time kernel work apart
            for clip in audio["clips"]:
                ask_audio(clip["path"], time.perf_counter())
        result["audio"] = []
        for clip in audio["clips"]:
            times, _, last = ask_audio(clip["path"], time.perf_counter())
            result["audio"].append(
                {"seconds": clip["seconds"], "ttft_s": times[0], "prompt_tokens": int(last.prompt_tokens)}
            )

    follow = plan["followup"]
    state = PromptCacheState()
    _, answer, _ = generate(follow["turn1"], follow["answer_tokens"], prompt_cache_state=state)
    turn2 = follow["turn1"] + answer + follow["suffix"]
    times, first, last = generate(turn2, 1, prompt_cache_state=state)
    # The same kind of turn once more, its shapes met once: the difference is one-time work.
    turn3 = turn2 + first + follow["suffix"]
    again, _, last_again = generate(turn3, 1, prompt_cache_state=state)
    result["followup"] = {
        "ttft_s": times[0],
        "prompt_tokens": len(turn2),
        "reused_tokens": int(last.cached_tokens or 0),
        "again_ttft_s": again[0],
        "again_reused_tokens": int(last_again.cached_tokens or 0),
    }
    mx.synchronize()
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["mlx_peak_bytes"] = int(mx.get_peak_memory())
    json.dump(result, sys.stdout)
    print()


# ---------------------------------------------------------------------------------- batch
def cmd_batch(args) -> None:
    """mlx-vlm's continuous batching (`BatchGenerator`, what `mlx_vlm server` batches with) on
    the batch plan `bench/batch.py` writes, measured as our `gemma-desk-bench --batch`: for each
    number of streams, that many prompts inserted at once, greedy, end of sequence disabled;
    aggregate tokens/s from the step after every stream's first token to the last. Each count
    runs once untimed first."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_vlm import load
    from mlx_vlm.generate.ar import BatchGenerator

    plan = json.loads(args.plan.read_text())
    model, processor = load(plan["model"])
    if args.dtype:
        target = getattr(mx, args.dtype)
        model.update(
            tree_map(lambda a: a.astype(target) if mx.issubdtype(a.dtype, mx.floating) else a, model.parameters())
        )
        mx.eval(model.parameters())
    processor.tokenizer.stopping_criteria = NeverStop()

    def together(prompts: list[list[int]], decode: int) -> tuple[int, float]:
        # As mlx-vlm's own `batch_generate` feeds its generator: embeddings of the ids (the
        # prompts are of one length: no padding), split per row.
        from mlx_vlm.generate.ar import _split_prompt_kwargs_per_row

        n = len(prompts)
        input_ids = mx.array(prompts)
        embedded = model.get_input_embeddings(input_ids, None, mask=None)
        kwargs = {k: v for k, v in embedded.to_dict().items() if v is not None}
        generator = BatchGenerator(
            model.language_model, processor, max_tokens=decode, completion_batch_size=n,
            prefill_batch_size=n, compute_logprobs=False,
        )
        generator.insert(input_ids, decode, prompt_kwargs=_split_prompt_kwargs_per_row(kwargs, n))
        counts: dict[int, int] = {}
        start, tokens = None, 0
        while generator.has_work:
            _, responses = generator.next()
            for r in responses:
                counts[r.uid] = counts.get(r.uid, 0) + 1
                if start is not None:
                    tokens += 1
            if start is None and len(counts) == n:
                start = time.perf_counter()
        generator.close()
        return tokens, time.perf_counter() - start

    aggregate = {}
    for n in plan["streams"]:
        together(plan["prompts"][:n], 4)
        tokens, secs = together(plan["prompts"][:n], plan["decode"])
        print(f"mlx-vlm batch: {n} streams: {tokens / secs:.1f} tok/s together", file=sys.stderr)
        aggregate[str(n)] = {"tokens": tokens, "seconds": secs, "tokens_per_second": tokens / secs}
    dtype = str(model.language_model.model.norm.weight.dtype).replace("mlx.core.", "")
    json.dump({"engine": "mlx-vlm", "dtype": dtype, "decode": plan["decode"], "aggregate": aggregate}, sys.stdout)
    print()


# ---------------------------------------------------------------------------------- mtp
def cmd_mtp(args) -> None:
    """mlx-vlm's MTP speculative decoding on the plan's decode prompt, measured as our bench's
    `--mtp` mode measures ours: per-round parts, decode at controlled acceptance (drafter and
    verify run as ever, the acceptance walk takes exactly k drafts), every draft rejected, and
    memory."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_vlm import load
    from mlx_vlm.generate import generate_step
    from mlx_vlm.models import cache as cache_lib
    from mlx_vlm.speculative.drafters import load_drafter
    from mlx_vlm.speculative import mtp
    from mlx_vlm.speculative.mtp import _buffer_mtp_target_cache

    plan = json.loads(args.plan.read_text())
    model, processor = load(plan["model"])
    if args.dtype:
        target = getattr(mx, args.dtype)
        model.update(tree_map(lambda a: a.astype(target) if mx.issubdtype(a.dtype, mx.floating) else a,
                              model.parameters()))
        mx.eval(model.parameters())
    before = mx.get_active_memory()
    start = time.perf_counter()
    drafter, _ = load_drafter(str(args.drafter), kind="mtp")
    if args.dtype:
        drafter.update(tree_map(lambda a: a.astype(target) if mx.issubdtype(a.dtype, mx.floating) else a,
                                drafter.parameters()))
    mx.eval(drafter.parameters())
    drafter_load_s = time.perf_counter() - start
    drafter_bytes = mx.get_active_memory() - before
    prompt = plan["decode"]["ids"]
    ids = mx.array([prompt])
    n = plan["decode"]["tokens"]
    bs = args.block
    vocab = model.language_model.config.vocab_size

    def run(**kw):
        mx.clear_cache()
        first, tokens = None, []
        for token, _ in generate_step(ids, model, None, None, max_tokens=n, temperature=0.0, **kw):
            if first is None:
                first = time.perf_counter()
                mx.reset_peak_memory()  # decode only: prefill's transients are the same either way
            tokens.append(int(token))
        return tokens, time.perf_counter() - first, mx.get_peak_memory()

    def rate(tokens, secs):
        return (len(tokens) - 1) / secs

    spec = dict(draft_model=drafter, draft_kind="mtp", draft_block_size=bs)
    run()
    plain, plain_s, plain_peak = run()
    walk = mtp._mtp_acceptance_walk

    def forced(accepts):
        """The acceptance walk with exactly `accepts` drafts taken (the model's logits are still
        projected row by row up to the first kept row, as the greedy walk does)."""

        def forced_walk(lm, verify, draft_tokens, sampler, budget, row_id=0, base_position=None):
            drafts = [int(x) for x in draft_tokens.reshape(-1).tolist()]
            a = min(accepts, len(drafts))
            token = None
            for pos in range(a + 1):
                logits = mtp._mtp_logits_from_hidden(lm, verify.hidden[:, pos: pos + 1, :])
                token = mx.argmax(logits.reshape(-1), axis=-1)
                mx.eval(token)
            return a, (drafts[:a] + [int(token.item())])[:budget]

        return forced_walk

    controlled, spec_peak = [], 0
    try:
        mtp._mtp_acceptance_walk = forced(1)
        run(**spec)
        for accepts in range(1, bs):
            mtp._mtp_acceptance_walk = forced(accepts)
            tokens, secs, peak = run(**spec)
            lens = drafter.accept_lens
            spec_peak = max(spec_peak, peak)
            controlled.append({"accepted_per_round": accepts,
                               "tokens_per_round": (sum(lens) + len(lens)) / len(lens),
                               "tok_s": rate(tokens, secs)})
    finally:
        mtp._mtp_acceptance_walk = walk
    tokens, secs, _ = run(**spec)
    rejected_same = tokens == plain
    rejected, rejected_accepted = rate(tokens, secs), sum(drafter.accept_lens)

    # Round parts from the state after the prompt, as ours measures them.
    lm = model.language_model
    cache = cache_lib.make_prompt_cache(lm)
    sink = {}
    out = lm(ids, cache=cache, return_hidden=True, return_shared_kv=True)
    hidden = lm.speculative_draft_hidden(out.hidden_states[-1][:, -1:, :])
    shared = out.shared_kv_states
    mx.eval(out.logits, hidden, [c.state for c in cache])
    _buffer_mtp_target_cache(cache, drafter, bs)
    kv = len(prompt)
    drafter.reset(model)
    drafter.set_shared_kv(shared, kv, position=kv - 1, kv_valid_len=kv)
    block_ids = mx.array([[10 + i for i in range(bs)]])

    def timed(f, reps=21):
        f()
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            ms.append((time.perf_counter() - t0) * 1e3)
        return sorted(ms)[len(ms) // 2]

    def step():
        logits = lm(block_ids[:, :1], cache=cache).logits[:, -1, :]
        y = mx.argmax(logits, axis=-1)
        mx.eval(y, [c.state for c in cache])
        for c in cache:
            c.trim(1)

    def verify():
        sink = {}
        h = lm.model(block_ids, cache=cache, shared_kv_sink=sink, skip_final_norm=True)
        y = mx.argmax(lm.speculative_logits_from_hidden(h), axis=-1)
        mx.eval(y, h, [c.state for c in cache])
        for c in cache:
            c.trim(bs)

    def draft():
        d = drafter.draft_block(10, hidden, None, bs, None, greedy=True)
        mx.eval(d)

    del sink
    parts = {"step_ms": timed(step), "verify_ms": timed(verify), "draft_block_ms": timed(draft)}
    print(json.dumps({"mtp": {
        "block_size": bs, "prompt_tokens": len(prompt), "tokens": len(plain),
        "drafter_load_s": drafter_load_s, "drafter_bytes": drafter_bytes,
        "plain_tok_s": rate(plain, plain_s), "controlled": controlled,
        "rejected_tok_s": rejected, "rejected_accepted": rejected_accepted,
        "rejected_same_answer": rejected_same,
        "plain_peak_bytes": plain_peak, "spec_peak_bytes": spec_peak, "parts": parts,
    }}))


def main(argv: list[str] | None = None) -> None:
    root = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = root.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the plan both engines run")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--prefill", type=lambda s: [int(v) for v in s.split(",")], default=[512, 2048])
    p.add_argument("--decode", type=int, default=128, help="tokens to generate when timing decode")
    p.add_argument("--decode-prompt", type=int, default=512, help="prompt tokens before the decode")
    p.add_argument("--conversation", type=int, default=2000, help="tokens of the chat before the follow-up")
    p.add_argument("--answer", type=int, default=16, help="tokens answered before the follow-up")
    p.add_argument("--image-size", default="960x672", help="WIDTHxHEIGHT (960x672 gives 280 soft tokens)")
    p.add_argument("--image-budget", type=int, default=280, choices=[70, 140, 280, 560, 1120],
                   help="max soft tokens per image")
    p.add_argument("--no-image-warmup", action="store_true", help="no uncounted image request first")
    p.add_argument("--audio", action="store_true",
                   help="also time questions about a 10 s and a 30 s clip (the model needs an audio tower)")
    p.set_defaults(run=cmd_prepare)
    p = sub.add_parser("run", help="run the plan with mlx-vlm, print JSON")
    p.add_argument("--plan", required=True, type=Path)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="cast every float parameter after loading")
    p.set_defaults(run=cmd_run)
    p = sub.add_parser("mtp", help="mlx-vlm's MTP speculative decoding on the plan's decode prompt, print JSON")
    p.add_argument("--plan", required=True, type=Path)
    p.add_argument("--drafter", required=True, type=Path)
    p.add_argument("--block", type=int, default=4)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="cast every float parameter after loading")
    p.set_defaults(run=cmd_mtp)
    p = sub.add_parser("batch", help="mlx-vlm's BatchGenerator on a batch plan, print JSON")
    p.add_argument("--plan", required=True, type=Path)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="cast every float parameter after loading")
    p.set_defaults(run=cmd_batch)
    args = root.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
