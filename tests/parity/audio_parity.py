"""Prompts with sound: our engine against mlx-vlm 0.7.10 (float32, MLX CPU), run by `make test`.

    audio_parity.py --cli target/debug/gemma-desk-cli --model tests/out/fixtures/tiny

The clips are 16-bit WAV files written here: speech-like harmonics with a moving pitch and noise,
one at 16 kHz mono and two at 44.1 kHz stereo (so decoding, downmix and the resampler are in the
path). The reference loads them as mlx-vlm does (`mlx_vlm.utils.load_audio`), renders the prompt
with its own chat template (`apply_chat_template(..., num_audios=k)`: the text, then the clips),
expands and featurizes with its processor and runs one forward over every position. Ours runs
`gemma-desk-cli logits --audio … --prefill P`: the prompt in one prefill, then a continuation
crossing the 32-token sliding window one decode step at a time.

Cases (each: every row cosine >= 0.9999, the same argmax wherever the reference is decisive):
- one clip whose length leaves one placeholder more than the encoder has frames
  (N mod 640 in 1..128): the reference gives that placeholder frame 0 again;
- a clip whose last placeholder falls on a masked frame (N mod 640 in 129..160): a zero row;
- two clips of the same length (the reference pads clips to the longest and scatters their frames
  in one flat run, so clips of different lengths would get each other's frames there; ours
  encodes each clip alone — docs/AUDIO.md);
- an image and a clip in one message.
Then greedy generation of 30 tokens with one clip: the same tokens.
"""

import argparse
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reference  # noqa: E402
from compare import compare  # noqa: E402
from run_all import IMAGE_BUDGET, continuation, greedy_tokens, make_images, run, same_tokens  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

DECODE_STEPS = 45
MIN_COSINE = 0.9999
QUESTION = "What is said in this recording?"


def speech_like(samples: int, rate: int, seed: int) -> np.ndarray:
    """Harmonics of a gliding pitch under a syllable-rate envelope, with a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.7 * t + seed)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t + seed) ** 2
    return 0.2 * voice * envelope + 0.01 * rng.standard_normal(samples)


def write_wav(path: Path, signal: np.ndarray, rate: int) -> None:
    """16-bit PCM; `signal` is [samples] or [samples, channels] in [-1, 1]."""
    frames = np.atleast_2d(signal.T).T
    pcm = np.clip(np.round(frames * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(pcm.shape[1])
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def make_clips(work: Path) -> dict[str, Path]:
    """16 kHz mono clips with the two count quirks, and 44.1 kHz stereo clips of equal length."""
    clips = {}
    for name, samples in (("extra_token", 640 * 40 + 100), ("masked_last", 640 * 30 + 150)):
        clips[name] = work / f"{name}.wav"
        write_wav(clips[name], speech_like(samples, 16000, len(name)), 16000)
    stereo = 44100 * 3 // 2  # 1.5 s: 24 000 samples at 16 kHz, 24 000 mod 640 = 320
    for k in (1, 2):
        left, right = speech_like(stereo, 44100, 10 + k), speech_like(stereo, 44100, 20 + k)
        clips[f"stereo{k}"] = work / f"stereo{k}.wav"
        write_wav(clips[f"stereo{k}"], np.stack([left, 0.6 * right], axis=1), 44100)
    return clips


class Reference:
    """mlx-vlm's model and processor, loaded once."""

    def __init__(self, model_dir: Path):
        import mlx.core as mx

        self.mx = mx
        self.model, self.processor = reference.load(model_dir, "float32")
        self.model_dir = model_dir

    def prompt(self, clips: list[Path], images: list[Path]) -> str:
        from mlx_vlm.prompt_utils import apply_chat_template

        return apply_chat_template(
            self.processor, self.model.config, QUESTION, num_images=len(images), num_audios=len(clips)
        )

    def inputs(self, clips: list[Path], images: list[Path]) -> dict:
        from mlx_vlm.utils import load_audio, load_image

        audio = [load_audio(str(p), sr=16000) for p in clips]
        kwargs = {}
        if images:
            kwargs = {"images": [load_image(str(p)) for p in images], "max_soft_tokens": IMAGE_BUDGET}
        return self.processor(text=self.prompt(clips, images), audio=audio, add_special_tokens=False, **kwargs)

    def logits(self, ids: list[int], inputs: dict) -> np.ndarray:
        mx = self.mx
        kwargs = {"input_features": mx.array(inputs["input_features"]),
                  "input_features_mask": mx.array(inputs["input_features_mask"])}
        if "pixel_values" in inputs:
            pixels = inputs["pixel_values"]
            kwargs["pixel_values"] = [mx.array(p) for p in pixels] if isinstance(pixels, list) else mx.array(pixels)
        out = self.model(mx.array(ids, dtype=mx.int32)[None], **kwargs).logits[0].astype(mx.float32)
        mx.eval(out)
        return np.array(out)

    def greedy(self, clip: Path, count: int) -> list[int]:
        """Greedy decoding with the reference model and its own KV cache.

        Not `mlx_vlm.stream_generate`: for a prompt with media its `process_inputs` calls the
        Gemma 4 processor without `add_special_tokens=False` (the processor's signature does not
        name it), so the tokenizer adds a second `<bos>` in front of the template's own — a
        different prompt from the one its processor and chat template define (docs/QUIRKS.md).
        """
        mx = self.mx
        inputs = self.inputs([clip], [])
        cache = self.model.make_cache()
        ids = mx.array(np.array(inputs["input_ids"]).reshape(1, -1), dtype=mx.int32)
        logits = self.model(ids, cache=cache, input_features=mx.array(inputs["input_features"]),
                            input_features_mask=mx.array(inputs["input_features_mask"])).logits[0, -1]
        tokens = []
        for _ in range(count):
            token = int(mx.argmax(logits).item())
            tokens.append(token)
            logits = self.model(mx.array([[token]], dtype=mx.int32), cache=cache).logits[0, -1]
        return tokens


def check(name: str, ref: Reference, cli: Path, work: Path, clips: list[Path], images: list[Path] = ()) -> bool:
    inputs = ref.inputs(clips, list(images))
    prompt = np.array(inputs["input_ids"]).reshape(-1).tolist()
    ids = prompt + continuation(ref.model_dir, DECODE_STEPS, seed=len(name))
    expected = ref.logits(ids, inputs)
    out = work / f"{name.replace('/', '_')}.ours.safetensors"
    media = [a for p in clips for a in ("--audio", p)] + [a for p in images for a in ("--image", p)]
    if images:
        media += ["--max-soft-tokens", IMAGE_BUDGET]
    run([cli, "logits", "--model", ref.model_dir, "--tokens", ",".join(map(str, ids)), "--dtype", "float32",
         "--prefill", len(prompt), "--out", out, *media])
    report = compare(expected, load_file(out)["logits"])
    audio_id = ref.model.config.audio_token_id
    placeholders = sum(1 for t in prompt if t == audio_id)
    ok = report.passed(MIN_COSINE)
    print(f"{'PASS' if ok else 'FAIL'}  {name:<22} {report.rows:>4} rows ({placeholders} audio placeholders, "
          f"prefill {len(prompt)} + {DECODE_STEPS} decode)  min cosine {report.cosine.min():.7f}  argmax "
          f"mismatches {int(report.argmax_mismatch.sum())}/{int(report.eligible.sum())}  "
          f"max|diff| {report.max_abs_diff:.2e}")
    return ok


def check_greedy(ref: Reference, cli: Path, clip: Path, count: int = 30) -> bool:
    ours = greedy_tokens(cli, ref.model_dir, QUESTION, count, "--audio", clip)
    return same_tokens("greedy, one clip", ref.greedy(clip, count), ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="a checkpoint with an audio tower")
    parser.add_argument("--keep", type=Path, help="write the clips and tensors here instead of a temp folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        work = args.keep or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        clips = make_clips(work)
        ref = Reference(args.model)
        results = [
            check("one clip, extra token", ref, args.cli, work, [clips["extra_token"]]),
            check("one clip, masked last", ref, args.cli, work, [clips["masked_last"]]),
            check("two clips", ref, args.cli, work, [clips["stereo1"], clips["stereo2"]]),
            check("image and clip", ref, args.cli, work, [clips["stereo1"]], make_images(work)[:1]),
            check_greedy(ref, args.cli, clips["extra_token"]),
        ]
    failed = results.count(False)
    print(f"\n{len(results) - failed}/{len(results)} audio parity checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
