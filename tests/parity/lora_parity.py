"""Adapter parity of the Rust engine against mlx-vlm's `apply_lora_layers` (float32, MLX CPU).

    lora_parity.py --cli target/debug/gemma-desk-cli --fixtures tests/out/fixtures

For each base checkpoint, random adapters (rank 4 and 16, LoRA and DoRA) on every projection
the decoder's layers run (attention q/k/v/o, MLP gate/up/down, the per-layer input gate and
projection) are written twice: in mlx-vlm's layout (`adapter_config.json` with
`lora_parameters`, `adapters.safetensors`) and as the same adapter in PEFT's
(`adapter_model.safetensors`, `lora_A/B.weight` transposed, `lora_alpha = scale · r`).
The reference applies the mlx one with `apply_lora_layers` and runs one forward over every
position; ours runs each layout through `gemma-desk-cli logits --adapter`, once in one forward
and once as a prefill then single-token decode steps. Every row must pass compare.py's rule
(cosine >= 0.9999, argmax on decisive rows), and the adapter must move the reference's logits
away from the base's (else the check would prove nothing).
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import compare  # noqa: E402
from reference import forward_logits, load  # noqa: E402
from run_all import chat_ids, continuation, run  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

MIN_COSINE = 0.9999
DECODE_STEPS = 12
TARGETS = [
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    "per_layer_input_gate", "per_layer_projection",
]
PREFIX = "language_model.model.layers"


def base_linears(model) -> dict[str, nn.Module]:
    """Every targeted linear module of the reference's decoder layers, by full name."""
    out = {}
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, nn.QuantizedLinear)) or not name.startswith(PREFIX + "."):
            continue
        tail = name[len(PREFIX) + 1:].split(".", 1)
        if len(tail) == 2 and tail[1] in TARGETS:
            out[name] = module
    return out


def dense_weight(module) -> np.ndarray:
    w = module.weight
    if isinstance(module, nn.QuantizedLinear):
        w = mx.dequantize(w, module.scales, module.biases, group_size=module.group_size, bits=module.bits)
    return np.array(w.astype(mx.float32))


def write_adapter(work: Path, name: str, linears: dict, rank: int, dora: bool, seed: int) -> tuple[Path, Path]:
    """The same random adapter in mlx-vlm's and PEFT's layouts: (mlx dir, peft dir)."""
    rng = np.random.default_rng(seed)
    scale = 2.0
    mlx_tensors, peft_tensors = {}, {}
    for module_name, module in linears.items():
        w = dense_weight(module)
        out_dims, in_dims = w.shape
        a = (rng.standard_normal((in_dims, rank)) / np.sqrt(in_dims)).astype(np.float32)
        # B large enough that the update is a sizeable share of the base output.
        b = (rng.standard_normal((rank, out_dims)) * 0.5 * np.abs(w).mean() * np.sqrt(in_dims / rank))
        b = b.astype(np.float32)
        mlx_tensors[f"{module_name}.lora_a"] = a
        mlx_tensors[f"{module_name}.lora_b"] = b
        peft_name = "base_model.model.model.language_model." + module_name[len("language_model.model."):]
        peft_tensors[f"{peft_name}.lora_A.weight"] = np.ascontiguousarray(a.T)
        peft_tensors[f"{peft_name}.lora_B.weight"] = np.ascontiguousarray(b.T)
        if dora:
            m = (np.linalg.norm(w, axis=1) * rng.uniform(0.5, 1.5, out_dims)).astype(np.float32)
            mlx_tensors[f"{module_name}.m"] = m
            peft_tensors[f"{peft_name}.lora_magnitude_vector"] = m
    mlx_dir, peft_dir = work / f"{name}-mlx", work / f"{name}-peft"
    mlx_dir.mkdir()
    peft_dir.mkdir()
    save_file(mlx_tensors, str(mlx_dir / "adapters.safetensors"))
    (mlx_dir / "adapter_config.json").write_text(json.dumps({
        "fine_tune_type": "dora" if dora else "lora",
        "num_layers": -1,
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": sorted(linears)},
    }))
    save_file(peft_tensors, str(peft_dir / "adapter_model.safetensors"))
    (peft_dir / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": rank, "lora_alpha": scale * rank, "use_dora": dora, "use_rslora": False,
        "target_modules": sorted({t.split(".")[-1] for t in TARGETS}), "bias": "none",
        "base_model_name_or_path": "tiny",
    }))
    return mlx_dir, peft_dir


def reference_logits(model_dir: Path, adapter: Path, ids: list[int]) -> np.ndarray:
    """The reference's logits with `adapter` applied as `apply_lora_layers` applies it.

    `apply_lora_layers` itself first freezes the model, which fails on mlx-vlm 0.7.10's Gemma 4
    audio tower (`AudioRelativePositionEmbedding` has no `_no_grad`); freezing only matters for
    training, so its other steps run here as it runs them.
    """
    from mlx_vlm.trainer.common.model import _read_checkpoint
    from mlx_vlm.trainer.peft.utils import _apply_lora_layers

    model, _ = load(model_dir, "float32")
    weights, config = _read_checkpoint(adapter)
    _apply_lora_layers(model, config)
    model.load_weights(str(weights), strict=False)
    mx.eval(model.parameters())
    return np.array(forward_logits(model, ids, None, None))


def ours(cli: Path, model: Path, adapter: Path, ids: list[int], prefill: int | None, out: Path) -> np.ndarray:
    args = [cli, "logits", "--model", model, "--tokens", ",".join(map(str, ids)), "--dtype", "float32",
            "--adapter", adapter, "--out", out]
    args += ["--prefill", prefill] if prefill else ["--all-positions"]
    run(args)
    return load_file(out)["logits"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", type=Path, required=True)
    parser.add_argument("--fixtures", type=Path, required=True)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for variant in ["tiny", "tiny-plmp-bf16"]:
            model_dir = args.fixtures / variant
            ids = chat_ids(model_dir) + continuation(model_dir, 30, seed=7)
            base_model, _ = load(model_dir, "float32")
            linears = base_linears(base_model)
            kinds = sorted({n[len(PREFIX) + 1:].split(".", 1)[1] for n in linears})
            missing = sorted(set(TARGETS) - set(kinds))
            if missing:
                sys.exit(f"{variant}: the reference has no {missing} to adapt")
            base = np.array(forward_logits(base_model, ids, None, None))
            # Every rank and method on the 4-bit base; the two that differ most on the other.
            combos = [(4, False), (16, True), (16, False), (4, True)] if variant == "tiny" else [(4, False), (16, True)]
            for rank, dora in combos:
                name = f"{variant}-r{rank}-{'dora' if dora else 'lora'}"
                mlx_dir, peft_dir = write_adapter(work, name, linears, rank, dora, seed=rank * 10 + dora)
                ref = reference_logits(model_dir, mlx_dir, ids)
                moved = compare(ref, base).cosine.min()
                if moved > 0.999:
                    print(f"FAIL  {name:<28} the adapter barely moves the logits (cosine to base {moved:.5f})")
                    results.append(False)
                    continue
                for layout, adapter in [("mlx", mlx_dir), ("peft", peft_dir)]:
                    for mode, prefill in [("full", None), ("prefill+decode", len(ids) - DECODE_STEPS)]:
                        cand = ours(args.cli, model_dir, adapter, ids, prefill, work / f"{name}.{layout}.st")
                        report = compare(ref, cand)
                        ok = report.passed(MIN_COSINE)
                        results.append(ok)
                        print(f"{'PASS' if ok else 'FAIL'}  {name + '/' + layout:<28} {mode:<15} {report.rows} rows"
                              f"  min cosine {report.cosine.min():.7f}  argmax mismatches"
                              f" {int(report.argmax_mismatch.sum())}/{int(report.eligible.sum())}"
                              f"  (base vs adapter cosine {moved:.4f})")
    failed = results.count(False)
    print(f"\n{len(results) - failed}/{len(results)} adapter parity checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
