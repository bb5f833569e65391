"""Regenerate the resampler test data of the engine crate from the Python reference.

    .deps/py/bin/python src-tauri/crates/engine/tests/data/make_audio_resample_cases.py

(run from the repository root). Resamples short 16-bit-valued signals with mlx-audio's
`resample_audio` (the function mlx-vlm calls) and stores inputs and outputs as f32 bit patterns
in tests/data/audio_resample_cases.json, read by tests/audio_input.rs.
"""

import json
from pathlib import Path

import numpy as np
from mlx_audio.utils import resample_audio

OUT = Path(__file__).resolve().parent / "audio_resample_cases.json"


def signal(n: int, seed: int) -> np.ndarray:
    # Values k/32768 as decoded 16-bit audio gives: a chirp plus a pseudo-random walk.
    i = np.arange(n)
    k = 12000 * np.sin(0.002 * i * i / 7) + ((i * 7919 + seed * 104729) % 4001 - 2000)
    return (np.round(k).astype(np.int16).astype(np.float32) / 32768.0).astype(np.float32)


def bits(x: np.ndarray) -> list:
    return np.asarray(x, dtype=np.float32).view(np.uint32).tolist()


cases = []
for seed, (rate, n) in enumerate(
    [(8000, 300), (11025, 500), (22050, 700), (24000, 600), (44100, 1500), (48000, 1200), (32000, 900)]
):
    x = signal(n, seed)
    y = resample_audio(x, rate, 16000)
    cases.append({"rate": rate, "input": bits(x), "output": bits(y)})
OUT.write_text(json.dumps(cases) + "\n")
print(f"wrote {len(cases)} cases to {OUT}")
