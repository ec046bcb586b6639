"""Structure audit: det J of the window map of every layer and model, float32 and float64.

For each entry: |det J − 1| median and max over random input windows N(0, scale²) of shape (seq, dim),
the range of det J, and the largest condition number of J. ``full`` differentiates the whole window map;
``chain`` multiplies the layers' determinants, each at its actual input (see vpintegrator.testing). Weights
are the default initialisation with ``torch.manual_seed(seed)`` before each entry is built.

    python scripts/structure_audit.py            # 256 inputs, dim 3, seq 3
    python scripts/structure_audit.py --check    # exit 1 if a volume-preserving float64 entry > 1e-10
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import torch
from torch import nn

from vpintegrator.models import build_model, count_parameters
from vpintegrator.nn import (
    MultiHeadAttention,
    VolumePreservingAttention,
    VolumePreservingLowerLayer,
    VolumePreservingUpperLayer,
)
from vpintegrator.testing import audit_volume, random_inputs, window_jacobian

CHECK_ATOL = 1e-10


def entries(dim: int, seq_len: int) -> list[tuple[str, Callable[[], nn.Module], bool, tuple[str, ...]]]:
    """(label, factory, volume preserving?, methods)."""
    paper = dict(dim=dim, seq_len=seq_len, n_blocks=2, n_linear=1, L=3)
    return [
        ("VP attention, skew", lambda: VolumePreservingAttention(dim, skew_sym=True), True, ("full",)),
        ("VP attention, arbitrary", lambda: VolumePreservingAttention(dim, skew_sym=False), False, ("full",)),
        ("lower linear, no bias", lambda: VolumePreservingLowerLayer(dim, "identity", bias=False), True, ("full",)),
        ("upper linear + bias", lambda: VolumePreservingUpperLayer(dim, "identity", bias=True), True, ("full",)),
        ("lower tanh + bias", lambda: VolumePreservingLowerLayer(dim, "tanh", bias=True), True, ("full",)),
        ("upper tanh + bias", lambda: VolumePreservingUpperLayer(dim, "tanh", bias=True), True, ("full",)),
        ("VPFF (n_blocks 6), seq 1", lambda: build_model("vpff", dim=dim, n_blocks=6), True, ("full", "chain")),
        ("VPT skew (paper)", lambda: build_model("vpt", **paper), True, ("full", "chain")),
        ("VPT arbitrary (paper)", lambda: build_model("vpt", **paper, skew_sym=False), False, ("full", "chain")),
        ("ST (paper)", lambda: build_model("st", dim=dim, seq_len=seq_len), False, ("full",)),
        ("MHA gml, 1 head", lambda: MultiHeadAttention(dim, 1), False, ("full",)),
        ("MHA gml, 1 head, add", lambda: MultiHeadAttention(dim, 1, add_connection=True), False, ("full",)),
        ("MHA standard, 1 head", lambda: MultiHeadAttention(dim, 1, form="standard"), False, ("full",)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="random input windows per entry")
    parser.add_argument("--dim", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="standard deviation of the inputs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if a VP float64 entry exceeds {CHECK_ATOL:g}")
    args = parser.parse_args()

    print(f"structure audit: {args.n} inputs N(0, {args.scale}^2) per entry, dim {args.dim}, "
          f"seq {args.seq_len} (VPFF: seq 1), seed {args.seed}, torch {torch.__version__}")
    header = (f"{'entry':<26} {'params':>6} {'VP':>3} {'dtype':>7} {'method':>6} {'median|detJ-1|':>15} "
              f"{'max|detJ-1|':>12} {'min det J':>11} {'max det J':>11} {'max cond J':>10}")
    print(header)
    print("-" * len(header))
    failures = []
    for label, factory, vp, methods in entries(args.dim, args.seq_len):
        torch.manual_seed(args.seed)
        model = factory().double()
        seq = getattr(model, "seq_len", None) or args.seq_len
        for dtype in (torch.float32, torch.float64):
            work = model.to(dtype)
            x = random_inputs(work, args.n, seq=seq, dtype=dtype, scale=args.scale, seed=args.seed)
            cond = float(torch.linalg.cond(window_jacobian(work, x).detach().double()).max())
            for method in methods:
                audit = audit_volume(work, x, dtype=None, method=method)
                det = audit.det.double()
                print(f"{label:<26} {count_parameters(model):>6} {'yes' if vp else 'no':>3} "
                      f"{str(dtype).removeprefix('torch.'):>7} {method:>6} {audit.median_error:>15.3e} "
                      f"{audit.max_error:>12.3e} {float(det.min()):>11.4g} {float(det.max()):>11.4g} {cond:>10.2e}")
                if vp and dtype == torch.float64 and method == methods[-1] and not audit.max_error <= CHECK_ATOL:
                    failures.append(f"{label} ({method}): max |det J - 1| = {audit.max_error:.3e}")
        model.double()
    if failures:
        print(f"volume-preserving float64 entries above {CHECK_ATOL:g}: " + "; ".join(failures))
    else:
        print(f"every volume-preserving float64 entry (chain where given) is within {CHECK_ATOL:g}")
    return 1 if (args.check and failures) else 0


if __name__ == "__main__":
    sys.exit(main())
