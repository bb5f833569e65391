"""Compare candidate logits against reference logits; exit 1 when they disagree.

    compare.py REFERENCE.safetensors CANDIDATE.safetensors [--key logits] [--min-cosine 0.9999]

Both files hold a float tensor (`--key`, default "logits") of shape [vocab] or [T, vocab].
A row passes when its cosine similarity is at least --min-cosine and, wherever the
reference's top-1 beats its top-2 by more than two bf16 ulps of the top-1 value (a margin
that evaluation-order noise cannot flip), both pick the same argmax.
"""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

BF16_MANTISSA_BITS = 7


@dataclass(frozen=True)
class Report:
    rows: int
    cosine: np.ndarray  # per row
    eligible: np.ndarray  # rows whose reference top-2 gap exceeds two bf16 ulps
    argmax_mismatch: np.ndarray  # eligible rows whose argmax differs
    max_abs_diff: float
    reference_std: float

    def passed(self, min_cosine: float) -> bool:
        return bool(self.cosine.min() >= min_cosine and not self.argmax_mismatch.any())


def bf16_ulp(x: np.ndarray) -> np.ndarray:
    """Spacing of bfloat16 numbers at |x|."""
    _, exponent = np.frexp(np.abs(x).astype(np.float32))  # |x| = m * 2**exponent, m in [0.5, 1)
    return np.ldexp(np.float32(1.0), exponent - 1 - BF16_MANTISSA_BITS)


def compare(reference: np.ndarray, candidate: np.ndarray) -> Report:
    if reference.shape != candidate.shape:
        raise ValueError(f"shape mismatch: reference {reference.shape}, candidate {candidate.shape}")
    ref = np.atleast_2d(reference).astype(np.float64)
    cand = np.atleast_2d(candidate).astype(np.float64)
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1)
    cosine = (ref * cand).sum(axis=1) / np.maximum(norms, np.finfo(np.float64).tiny)
    top2 = np.sort(ref, axis=1)[:, -2:]
    eligible = (top2[:, 1] - top2[:, 0]) > 2 * bf16_ulp(top2[:, 1])
    mismatch = eligible & (ref.argmax(axis=1) != cand.argmax(axis=1))
    return Report(
        rows=ref.shape[0],
        cosine=cosine,
        eligible=eligible,
        argmax_mismatch=mismatch,
        max_abs_diff=float(np.abs(ref - cand).max()),
        reference_std=float(ref.std()),
    )


def summary(report: Report, min_cosine: float) -> str:
    worst = int(report.cosine.argmin())
    mismatched = np.flatnonzero(report.argmax_mismatch)
    lines = [
        f"{'rows':<28}{report.rows}",
        f"{'min cosine':<28}{report.cosine.min():.9f}  (threshold {min_cosine})",
        f"{'worst row':<28}{worst}",
        f"{'mean cosine':<28}{report.cosine.mean():.9f}",
        f"{'max |diff|':<28}{report.max_abs_diff:.4g}",
        f"{'reference logits std':<28}{report.reference_std:.3f}",
        f"{'argmax mismatches':<28}{len(mismatched)}/{int(report.eligible.sum())} eligible"
        + (f"  rows {mismatched[:10].tolist()}" if len(mismatched) else ""),
        f"{'result':<28}{'PASS' if report.passed(min_cosine) else 'FAIL'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--key", default="logits")
    parser.add_argument("--min-cosine", type=float, default=0.9999)
    args = parser.parse_args(argv)

    report = compare(load_file(args.reference)[args.key], load_file(args.candidate)[args.key])
    print(summary(report, args.min_cosine))
    return 0 if report.passed(args.min_cosine) else 1


if __name__ == "__main__":
    sys.exit(main())
