"""Audio tower parity: the Rust tower and embed_audio against mlx-vlm 0.7.10 on the same checkpoint.

    .deps/py/bin/python tests/parity/audio_tower_parity.py --model DIR [--model DIR]... --bin PATH

For each checkpoint, random log-mel features shaped like the extractor's (column 0 at the
floor ln(1e-3), padding frames zero and masked) go through mlx-vlm's `audio_tower` and
`embed_audio` (the checkpoint's own bf16 weights, no cast) and through the Rust example
`audio_tower` (`AudioTower::tower` and `::encode`). Required, per clip:
  - tower output [T2, output_proj_dims]: cosine >= 0.99999 over valid rows and max abs
    difference <= 1e-4, masked rows zero, the valid flags equal;
  - embed_audio rows: cosine >= 0.99999 on each valid row, max abs difference <= 1e-4;
  - the placeholder mapping: the reference's own `get_input_embeddings` over `soft_tokens`
    audio placeholders (its masked scatter, bf16) equals our `encode` output cast to bf16,
    within one bf16 step (so the wrap-around row T2 -> row 0 and the zero rows are checked).
The first --model is also run with every weight cast to float32 on both sides (as the logits
parity loads the reference), where the reference computes the two bf16 quirks in float32.
Prints one line per clip with the cosines and max abs differences; exits 1 on any failure.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from safetensors.numpy import load_file, save_file

import reference

MIN_COSINE = 0.99999
# Max abs difference allowed (outputs have RMS about 1). Both bf16 quirks reproduced: 0 on MLX's
# CPU backend; either one left out: 7e-4 to 3e-3 on the tiny tower (docs/AUDIO.md).
MAX_ABS = 1e-4
MEL_FLOOR = np.float32(np.log(1e-3))


def clips(short: bool) -> list[tuple[str, int, int, int]]:
    """(name, frames, valid frames, extra placeholders beyond T2)."""
    if short:
        return [("2s, 10 padding frames, wrap-around token", 200, 190, 1)]
    return [
        ("2s, wrap-around token", 200, 199, 1),
        ("1.2s, 37 padding frames", 123, 86, 0),
        ("9 frames", 9, 9, 1),
        ("5s, padding", 502, 480, 0),
    ]


def features(frames: int, valid: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    mel = rng.normal(-3.0, 2.0, (frames, 128)).astype(np.float32)
    mel = np.maximum(mel, MEL_FLOOR)
    mel[:, 0] = MEL_FLOOR
    mask = np.zeros(frames, dtype=bool)
    mask[:valid] = True
    mel[~mask] = 0.0  # the extractor multiplies padding frames by 0
    return mel, mask


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return 1.0 if denom == 0 else float(a @ b / denom)


def check_model(model_dir: Path, binary: Path, work: Path, float32: bool) -> bool:
    if float32:  # every weight cast, as reference.py's float32 runs (the logits parity) do
        model, _ = reference.load(model_dir, "float32")
    else:  # weights as stored: the bf16 quirks depend on it
        from mlx_vlm import load

        model, _ = load(str(model_dir))
    cfg = model.config
    # The released tower's size costs about 30 s per run of MLX's CPU matmuls here: one short
    # clip, and the scatter (which runs the tower again) only on the small tower.
    full_size = cfg.audio_config.hidden_size >= 1024
    cases = clips(short=full_size)
    inputs, expected = {}, []
    for i, (name, frames, valid, extra) in enumerate(cases):
        mel, mask = features(frames, valid, seed=i)
        t2 = -(-(-(-frames // 2)) // 2)
        soft_tokens = t2 + extra
        inputs[f"{i}.features"] = mel
        inputs[f"{i}.valid"] = mask.astype(np.uint8)
        inputs[f"{i}.soft_tokens"] = np.array([soft_tokens], dtype=np.int32)
        enc, enc_mask = model.audio_tower(mx.array(mel)[None], mx.array(~mask)[None])
        embed = model.embed_audio(enc)
        scattered = None
        if not full_size:
            ids = mx.full((1, soft_tokens), cfg.audio_token_id, dtype=mx.int32)
            scattered = model.get_input_embeddings(
                input_ids=ids, input_features=mx.array(mel)[None], input_features_mask=mx.array(mask)[None]
            ).inputs_embeds
        mx.eval(enc, enc_mask, embed)
        expected.append(
            (
                name,
                np.array(enc[0].astype(mx.float32)),
                ~np.array(enc_mask[0]),
                np.array(embed[0].astype(mx.float32)),
                None if scattered is None else np.array(scattered[0].astype(mx.float32)),
                None if scattered is None else scattered.dtype,
            )
        )
    save_file(inputs, str(work / "in.safetensors"))
    started = time.perf_counter()
    command = [str(binary), str(model_dir), str(work / "in.safetensors"), str(work / "out.safetensors")]
    subprocess.run(command + (["float32"] if float32 else []), check=True)
    rust_seconds = time.perf_counter() - started
    ours = load_file(str(work / "out.safetensors"))

    ok = True
    print(f"{model_dir.name}{' (all weights cast to float32)' if float32 else ''}: audio hidden {cfg.audio_config.hidden_size}, {cfg.audio_config.num_hidden_layers} layers "
          f"(Rust example incl. load {rust_seconds:.1f} s)")  # fmt: skip
    for i, (name, ref_tower, ref_valid, ref_embed, ref_scattered, scatter_dtype) in enumerate(expected):
        tower, valid, embed = ours[f"{i}.tower"], ours[f"{i}.tower_valid"].astype(bool), ours[f"{i}.embed"]
        problems = []
        if tower.shape != ref_tower.shape or not np.array_equal(valid, ref_valid):
            problems.append(f"shape {tower.shape} vs {ref_tower.shape} or valid flags differ")
            print(f"  FAIL {name}: {'; '.join(problems)}")
            ok = False
            continue
        t2 = tower.shape[0]
        tower_cos = cosine(tower[valid], ref_tower[valid])
        tower_diff = float(np.abs(tower - ref_tower).max())
        if not np.any(ref_tower[valid]):
            problems.append("the reference's tower output is all zero: nothing is compared")
        if tower_cos < MIN_COSINE or tower_diff > MAX_ABS:
            problems.append(f"tower cosine {tower_cos:.7f}, max abs diff {tower_diff:.1e}")
        if np.any(tower[~valid] != 0):
            problems.append("masked tower rows are not zero")
        order = np.arange(embed.shape[0]) % t2
        ref_mapped = ref_embed[order]
        row_cos = min(cosine(embed[k], ref_mapped[k]) for k in range(embed.shape[0]) if valid[order[k]])
        embed_diff = float(np.abs(embed - ref_mapped).max())
        if row_cos < MIN_COSINE or embed_diff > MAX_ABS:
            problems.append(f"embed row cosine {row_cos:.7f}, max abs diff {embed_diff:.1e}")
        # The reference's scatter (bf16): our rows rounded alike agree within one bf16 step.
        scatter_ok = None
        if ref_scattered is not None:
            ours_bf16 = np.array(mx.array(embed).astype(scatter_dtype).astype(mx.float32))
            step = np.maximum(np.abs(ref_scattered), 1e-30) * 2.0**-7
            scatter_ok = ours_bf16.shape == ref_scattered.shape and bool(
                np.all(np.abs(ours_bf16 - ref_scattered) <= step)
            )
        if scatter_ok is False:
            problems.append("placeholder rows differ from the reference's scatter")
        status = "ok  " if not problems else "FAIL"
        print(
            f"  {status} {name}: T2 {t2} ({int(valid.sum())} valid), {embed.shape[0]} placeholders; "
            f"tower rms {np.sqrt(np.mean(ref_tower[valid] ** 2)):.3f} cos {tower_cos:.8f} max|d| {tower_diff:.2e}; embed min row cos {row_cos:.8f} "
            f"max|d| {embed_diff:.2e}; scatter {({None: 'not run', True: 'equal', False: 'DIFFERENT'})[scatter_ok]}"
            + (f" -- {'; '.join(problems)}" if problems else "")
        )
        ok &= not problems
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--bin", type=Path, required=True, help="the gemma example audio_tower")
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for model_dir in args.model:
            # Weights as stored; on the small tower also all cast to float32 (no bf16 quirks then).
            for float32 in (False, True) if model_dir == args.model[0] else (False,):
                work = Path(tmp) / f"{model_dir.name}-{float32}"
                work.mkdir()
                ok &= check_model(model_dir, args.bin, work, float32)
    print("audio tower parity:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
