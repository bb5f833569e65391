"""Audio feature parity: the app's Rust audio input against mlx-vlm's Gemma 4 audio path.

    .deps/py/bin/python tests/parity/audio_features_parity.py [--features EXE] [--keep DIR]

Generates test recordings (a phrase spoken by espeak-ng, a speech-like harmonic mixture with
noise, white noise, a pure two-tone) at 8, 16, 22.05, 44.1 and 48 kHz, mono and stereo, and
writes them as 16-bit WAV, FLAC and MP3 (ffmpeg), plus 24-bit and float WAV, AIFF, Ogg Vorbis and
M4A (AAC), a file with the wrong extension and a 40 s recording that the app cuts into two clips.

The reference reads each file exactly as `mlx_vlm.generate --audio` does: mlx-vlm 0.7.10's
`load_audio` (mlx-audio 0.6.2: miniaudio or ffmpeg to 16-bit, channel mean, scipy resample_poly),
its own `Gemma4AudioFeatureExtractor`, and `Gemma4Processor._compute_audio_num_tokens`. The app's
side is `examples/audio_features.rs` (engine::audio::prepare_path).

Requires equal frame counts, masks and token counts everywhere, and the features within:
1e-5 on PCM sources (WAV, FLAC, AIFF) and the pure tone (measured: 4.8e-7, the reference's
float32 FFT against our f64 one; the decoding, resampling and window are bit for bit); for
lossy sources (MP3, Vorbis, AAC), decoded by different decoders on each side, a mean difference
of at most 5e-3 and 99 % of values within 5e-2. Prints a table; exits 1 when any comparison
fails.
Honours CARGO_TARGET_DIR.
"""

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from safetensors import safe_open

ROOT = Path(__file__).resolve().parents[2]
RATES = [8000, 16000, 22050, 44100, 48000]
PCM_TOL = 1e-5
TONE_TOL = 1e-5
LOSSY_MEAN_TOL = 5e-3
LOSSY_P99_TOL = 5e-2
LOSSY = {"mp3", "ogg", "m4a"}


# ------------------------------------------------------------------ signals (float64, [-1, 1])


def harmonic_mix(rate: int, seconds: float, seed: int) -> np.ndarray:
    """Voiced-speech-like: a gliding fundamental with harmonics, syllable-rate envelope, noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 16) if k * 180 < rate / 2)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t) ** 2
    return 0.25 * voiced * envelope + 0.02 * rng.standard_normal(t.size)


def noise(rate: int, seconds: float, seed: int) -> np.ndarray:
    return 0.1 * np.random.default_rng(seed).standard_normal(int(rate * seconds))


def two_tone(rate: int, seconds: float, _seed: int) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return 0.5 * np.sin(2 * np.pi * 440 * t) + 0.25 * np.sin(2 * np.pi * 3000 * t)


def to_pcm16(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)


def write_wav16(path: Path, x: np.ndarray, rate: int) -> None:
    frames = x if x.ndim == 2 else x[:, None]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(to_pcm16(frames).tobytes())


def stereo(x: np.ndarray) -> np.ndarray:
    """Two different channels: the right one delayed and quieter, so the mean matters."""
    right = np.roll(x, 37) * 0.6
    return np.stack([x, right], axis=1)


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *args], check=True)


# ------------------------------------------------------------------ cases


@dataclass
class Case:
    name: str
    path: Path
    kind: str  # tolerance class: "pcm", "tone" or "lossy"
    clips: int = 1


def make_cases(work: Path) -> list[Case]:
    cases: list[Case] = []
    spoken = work / "spoken_src.wav"
    subprocess.run(
        ["espeak-ng", "-w", str(spoken), "What does this voicemail say? Call me back at five."],
        check=True,
    )
    with wave.open(str(spoken)) as w:
        speech_rate = w.getframerate()
        speech = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16) / 32768.0

    def source(signal: str, rate: int) -> np.ndarray:
        if signal == "speech":
            # Read through the reference resampler's own kind of step: ffmpeg (soxr) resampling is
            # fine here, the file is simply what both sides read.
            src = work / f"speech_{rate}.wav"
            if not src.exists():
                ffmpeg("-i", str(spoken), "-ar", str(rate), str(src))
            with wave.open(str(src)) as w:
                return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16) / 32768.0
        return {"mix": harmonic_mix, "noise": noise}[signal](rate, 2.5, rate)

    for signal in ["speech", "mix"]:
        for rate in RATES:
            for channels in [1, 2]:
                x = source(signal, rate)
                if channels == 2:
                    x = stereo(x)
                stem = f"{signal}_{rate // 1000 if rate % 1000 == 0 else rate / 1000}k_{'stereo' if channels == 2 else 'mono'}"
                wav = work / f"{stem}.wav"
                write_wav16(wav, x, rate)
                cases.append(Case(f"{stem}.wav", wav, "pcm"))
                flac = work / f"{stem}.flac"
                ffmpeg("-i", str(wav), "-sample_fmt", "s16", str(flac))
                cases.append(Case(f"{stem}.flac", flac, "pcm"))
                if rate in (8000, 16000, 22050, 44100, 48000):
                    mp3 = work / f"{stem}.mp3"
                    ffmpeg("-i", str(wav), "-c:a", "libmp3lame", "-b:a", "128k", str(mp3))
                    cases.append(Case(f"{stem}.mp3", mp3, "lossy"))

    for rate in [16000, 44100]:
        x = noise(rate, 2.0, 7)
        path = work / f"noise_{rate}.wav"
        write_wav16(path, x, rate)
        cases.append(Case(path.name, path, "pcm"))
        tone = work / f"two_tone_{rate}.wav"
        write_wav16(tone, two_tone(rate, 1.0, 0), rate)
        cases.append(Case(tone.name, tone, "tone"))

    base = work / "mix_44.1k_stereo.wav"
    for name, extra in [
        ("mix_44.1k_stereo_s24.wav", ["-c:a", "pcm_s24le"]),
        ("mix_44.1k_stereo_f32.wav", ["-c:a", "pcm_f32le"]),
        ("mix_48k_s24.flac", ["-ar", "48000", "-sample_fmt", "s32", "-c:a", "flac"]),
        ("mix_44.1k_stereo.aiff", []),
        ("mix_44.1k_stereo.ogg", ["-c:a", "libvorbis", "-q:a", "6"]),
        ("mix_44.1k_stereo.m4a", ["-c:a", "aac", "-b:a", "192k"]),
        ("speech_22.05k_mono.m4a", ["-c:a", "aac", "-b:a", "128k"]),
    ]:
        src = work / "speech_22.05k_mono.wav" if name.startswith("speech") else base
        path = work / name
        ffmpeg("-i", str(src), *extra, str(path))
        kind = "lossy" if path.suffix.lstrip(".") in LOSSY else "pcm"
        cases.append(Case(name, path, kind))

    # The content decides, not the name: an MP3 named .wav.
    misnamed = work / "really_an_mp3.wav"
    shutil.copy(work / "speech_16k_mono.mp3", misnamed)
    cases.append(Case(misnamed.name, misnamed, "lossy"))

    # 40 s: the reference hears the first 30 s; the app makes that its first clip, and a second.
    long = work / "mix_40s_22.05k.wav"
    write_wav16(long, harmonic_mix(22050, 40.0, 3), 22050)
    cases.append(Case(long.name, long, "pcm", clips=2))
    return cases


# ------------------------------------------------------------------ the two sides


def reference(path: Path):
    from mlx_vlm.models.gemma4.audio_feature_extractor import Gemma4AudioFeatureExtractor
    from mlx_vlm.models.gemma4.processing_gemma4 import Gemma4Processor
    from mlx_vlm.utils import load_audio

    audio = load_audio(str(path), sr=16000)
    out = Gemma4AudioFeatureExtractor()([audio])
    config = SimpleNamespace(audio_ms_per_token=40, audio_seq_length=750)
    tokens = Gemma4Processor._compute_audio_num_tokens(config, audio, 16000)
    return np.asarray(out["input_features"][0]), np.asarray(out["input_features_mask"][0]), tokens


def ours(executable: Path, path: Path, out: Path):
    subprocess.run([str(executable), str(path), str(out)], check=True)
    with safe_open(str(out), "np") as f:
        meta = f.metadata()
        clips = [
            (f.get_tensor(f"clip{i}.features"), f.get_tensor(f"clip{i}.valid").astype(bool))
            for i in range(int(meta["clips"]))
        ]
    return clips, [int(t) for t in meta["soft_tokens"].split(",")]


def build_example() -> Path:
    command = ["cargo", "build", "-p", "engine", "--example", "audio_features", "--message-format=json"]
    result = subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True)
    for line in result.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "audio_features":
            if message.get("executable"):
                return Path(message["executable"])
    sys.exit("cargo did not report the audio_features example's executable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", type=Path, help="an already built `audio_features` example")
    parser.add_argument("--keep", type=Path, help="write the recordings and tensors here instead of a temp folder")
    args = parser.parse_args()
    for tool in ["ffmpeg", "espeak-ng"]:
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (make system-deps installs it)")

    with tempfile.TemporaryDirectory() as temp:
        work = args.keep or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        executable = args.features or build_example()
        rows, failures = [], 0
        worst = {"pcm": 0.0, "tone": 0.0, "lossy": 0.0}
        for case in make_cases(work):
            ref_features, ref_valid, ref_tokens = reference(case.path)
            clips, tokens = ours(executable, case.path, work / f"{case.path.name}.safetensors")
            features, valid = clips[0]
            same_shape = features.shape == ref_features.shape and np.array_equal(valid, ref_valid)
            diff = np.abs(features - ref_features) if same_shape else np.array([math.inf])
            max_d, mean_d, p99 = float(diff.max()), float(diff.mean()), float(np.quantile(diff, 0.99))
            if case.kind == "lossy":
                ok = mean_d <= LOSSY_MEAN_TOL and p99 <= LOSSY_P99_TOL
            else:
                ok = max_d <= (TONE_TOL if case.kind == "tone" else PCM_TOL)
            ok = ok and same_shape and tokens[0] == ref_tokens and len(clips) == case.clips
            if case.clips > 1:
                # Later clips: frames and tokens follow their own length.
                rest = sum(c[0].shape[0] for c in clips[1:])
                ok = ok and rest > 0 and all(t > 0 for t in tokens[1:])
            failures += not ok
            if same_shape:
                worst[case.kind] = max(worst[case.kind], max_d)
            rows.append(
                (
                    case.name,
                    case.kind,
                    f"{features.shape[0]}",
                    "/".join(map(str, tokens)) + f" ({ref_tokens})",
                    f"{max_d:.2e}",
                    f"{mean_d:.2e}",
                    f"{p99:.2e}",
                    "ok" if ok else "FAIL",
                )
            )

    headers = ("file", "class", "frames", "tokens (ref)", "max|d|", "mean|d|", "p99|d|", "result")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    print(
        f"\n{len(rows) - failures}/{len(rows)} agree; worst max|d|: PCM {worst['pcm']:.2e} "
        f"(tolerance {PCM_TOL:g}), tone {worst['tone']:.2e} ({TONE_TOL:g}), lossy {worst['lossy']:.2e}"
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
