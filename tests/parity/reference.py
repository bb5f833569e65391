"""Reference outputs from mlx-vlm (the Python implementation our Rust port must match).

    reference.py logits   --model DIR --tokens 1,2,3 [--image PATH]... [--max-soft-tokens N]
                          [--dtype float32|bfloat16] [--all-positions] [--prefill N] --out FILE
    reference.py template --model DIR --messages JSON|@FILE [--image PATH]... [--max-soft-tokens N]
                          [--thinking] [--no-generation-prompt]
    reference.py pixels   --model DIR --image PATH [--max-soft-tokens N] --out FILE
    reference.py vision   --model DIR --image PATH [--max-soft-tokens N] [--dtype ...] --out FILE
    reference.py generate --model DIR --prompt TEXT --max-tokens N [--image PATH]... [--dtype ...]

Tensors are written as float32 safetensors. `--dtype float32` (the default) casts every
floating parameter of the loaded model, including quantization scales and biases, to float32:
MLX's CPU quantized matmul accumulates in the activation dtype, so in bfloat16 even two
evaluation orders inside mlx-vlm disagree (tiny: prefill+decode vs one-shot min cosine 0.996,
argmax flips; bfloat16 vs float32 0.98), while in float32 they agree to 1 - 1e-7.
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16}

# mlx-vlm builds its default Gemma 4 audio feature extractor on every load, and transformers
# warns about its mel filter bank; it says nothing about the checkpoint.
warnings.filterwarnings("ignore", message="At least one mel filter has all zero values")


def load(model_dir: Path, dtype: str):
    """mlx-vlm's model and processor for `model_dir`, floats cast to `dtype`."""
    from mlx_vlm import load as vlm_load

    model, processor = vlm_load(str(model_dir))
    target = DTYPES[dtype]
    model.update(
        tree_map(lambda a: a.astype(target) if mx.issubdtype(a.dtype, mx.floating) else a, model.parameters())
    )
    mx.eval(model.parameters())
    return model, processor


def load_processor(model_dir: Path):
    """The processor mlx_vlm.load would return, without loading weights."""
    from mlx_vlm.models.gemma4 import Gemma4Processor

    return Gemma4Processor.from_pretrained(str(model_dir))


def preprocess_images(processor, paths: list[Path], max_soft_tokens: int | None):
    """Pixel values exactly as mlx-vlm's Gemma 4 processor makes them, and soft tokens per image."""
    from mlx_vlm.utils import load_image

    images = [load_image(str(p)) for p in paths]
    kwargs = {"max_soft_tokens": max_soft_tokens} if max_soft_tokens else {}
    data, soft_tokens = processor.image_processor(images, **kwargs)
    pixels = data["pixel_values"]
    pixels = [mx.array(p) for p in pixels] if isinstance(pixels, list) else mx.array(pixels)
    return pixels, soft_tokens


def forward_logits(model, tokens: list[int], pixels, prefill: int | None) -> mx.array:
    """Logits for every position, [T, vocab].

    Without `prefill`: one forward call over all tokens. With `prefill=N`: the first N tokens in
    one call, then one token per call (teacher forcing), all through the model's own KV cache.
    """
    ids = mx.array(tokens, dtype=mx.int32)[None]
    cache = model.make_cache()
    split = len(tokens) if prefill is None else prefill
    out = model(ids[:, :split], pixel_values=pixels, cache=cache).logits[0]
    mx.eval(out)
    rows = [out]
    for t in range(split, len(tokens)):
        step = model(ids[:, t : t + 1], cache=cache).logits[0]
        mx.eval(step)
        rows.append(step)
    return mx.concatenate(rows, axis=0)


def cmd_logits(args) -> None:
    model, processor = load(args.model, args.dtype)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    image_id = model.config.image_token_id
    image_positions = [i for i, t in enumerate(tokens) if t == image_id]
    pixels = None
    if args.image:
        pixels, soft_tokens = preprocess_images(processor, args.image, args.max_soft_tokens)
        if len(image_positions) != sum(soft_tokens):
            sys.exit(f"--tokens hold {len(image_positions)} image tokens, the images give {sum(soft_tokens)}")
    elif image_positions:
        sys.exit("--tokens hold image tokens but no --image was given")
    if args.prefill is not None:
        if not 0 < args.prefill <= len(tokens):
            sys.exit(f"--prefill must be in 1..{len(tokens)}")
        if image_positions and image_positions[-1] >= args.prefill:
            sys.exit("every image token must lie inside the prefill")

    logits = forward_logits(model, tokens, pixels, args.prefill)
    if not (args.all_positions or args.prefill is not None):
        logits = logits[-1]
    metadata = {"model": str(args.model), "dtype": args.dtype, "prefill": str(args.prefill or len(tokens))}
    save(args.out, {"logits": logits}, metadata)


def cmd_template(args) -> None:
    processor = load_processor(args.model)
    source = args.messages
    messages = json.loads(Path(source[1:]).read_text() if source.startswith("@") else source)
    prompt = processor.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=not args.no_generation_prompt, enable_thinking=args.thinking
    )
    if args.image:
        from mlx_vlm.utils import load_image

        images = [load_image(str(p)) for p in args.image]
        kwargs = {"max_soft_tokens": args.max_soft_tokens} if args.max_soft_tokens else {}
        ids = processor(text=prompt, images=images, add_special_tokens=False, **kwargs)["input_ids"]
    else:
        ids = processor.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = np.array(ids).reshape(-1).tolist()
    print(json.dumps({"prompt": prompt, "input_ids": ids}, ensure_ascii=False))


def cmd_pixels(args) -> None:
    processor = load_processor(args.model)
    pixels, soft_tokens = preprocess_images(processor, [args.image], args.max_soft_tokens)
    save(args.out, {"pixel_values": pixels}, {"soft_tokens": str(soft_tokens[0])})


def cmd_vision(args) -> None:
    model, processor = load(args.model, args.dtype)
    pixels, _ = preprocess_images(processor, [args.image], args.max_soft_tokens)
    tower = model.vision_tower(pixels)
    features = model.embed_vision(tower)
    save(args.out, {"vision_tower": tower[0], "features": features[0]}, {"dtype": args.dtype})


def cmd_generate(args) -> None:
    from mlx_vlm import stream_generate
    from mlx_vlm.prompt_utils import apply_chat_template

    model, processor = load(args.model, args.dtype)
    images = [str(p) for p in args.image]
    prompt = apply_chat_template(processor, model.config, args.prompt, num_images=len(images))
    text, last = [], None
    for last in stream_generate(
        model, processor, prompt, image=images or None, max_tokens=args.max_tokens, temperature=0.0
    ):
        text.append(last.text)
    result = {"prompt": prompt, "tokens": last.token_ids, "finish_reason": last.finish_reason, "text": "".join(text)}
    print(json.dumps(result, ensure_ascii=False))


def save(path: Path, tensors: dict, metadata: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(path), {k: v.astype(mx.float32) for k, v in tensors.items()}, metadata=metadata)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(description="Reference outputs from mlx-vlm for Gemma 4 parity tests.")
    sub = root.add_subparsers(dest="command", required=True)

    def command(name: str, run, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
        p.set_defaults(run=run)
        return p

    def dtype(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")

    def soft_tokens(p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-soft-tokens", type=int, help="image token budget (default: processor_config.json)")

    p = command("logits", cmd_logits, "logits of a token sequence")
    p.add_argument("--tokens", required=True, help="comma-separated ids; image tokens already expanded")
    p.add_argument("--image", type=Path, action="append", default=[], help="image for the image tokens, in order")
    soft_tokens(p)
    dtype(p)
    p.add_argument("--all-positions", action="store_true", help="write [T, vocab] instead of the last row")
    p.add_argument("--prefill", type=int, help="first N tokens in one call, the rest one by one (all rows)")
    p.add_argument("--out", required=True, type=Path)

    p = command("template", cmd_template, "rendered chat prompt and its token ids (JSON on stdout)")
    p.add_argument("--messages", required=True, help="JSON list of messages, or @FILE")
    p.add_argument("--image", type=Path, action="append", default=[], help="images, to expand <|image|> runs")
    soft_tokens(p)
    p.add_argument("--thinking", action="store_true", help="enable_thinking=True")
    p.add_argument("--no-generation-prompt", action="store_true")

    p = command("pixels", cmd_pixels, "the processor's pixel tensor [1, 3, H, W]")
    p.add_argument("--image", required=True, type=Path)
    soft_tokens(p)
    p.add_argument("--out", required=True, type=Path)

    p = command("vision", cmd_vision, "vision tower output and projected image features")
    p.add_argument("--image", required=True, type=Path)
    soft_tokens(p)
    dtype(p)
    p.add_argument("--out", required=True, type=Path)

    p = command("generate", cmd_generate, "greedy generation from a chat prompt (JSON on stdout)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--image", type=Path, action="append", default=[])
    dtype(p)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
