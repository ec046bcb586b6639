#!/usr/bin/env python
"""The symplectic autoencoder against PSD on the Toda bump family: prints a Markdown table.

The shipped specs ``toda_bump`` (training, mu = 0.30, 0.33 ... 0.60) and ``toda_bump_heldout`` (the midpoints),
N = 200, dt = 0.1, T = 120, generated here by DOP853 at rtol = atol = 1e-12. For each 2n: the cotangent-lift PSD
basis fitted on every training state, and ``fit_symplectic_autoencoder`` on the same states (its defaults: GML's
architecture, the PSD start, Adam on minibatches of 4096 evenly spaced snapshots, the plateau rule). The errors
are the reconstruction errors ``|y - decode(encode(y))| / |y|`` of held-out states, median over the 10 held-out
mu, at T and over every held-out state; ``fit s`` is the autoencoder's CPU seconds (``fit_seconds``: every
thread of the process), with torch on one thread.

Usage::

    OMP_NUM_THREADS=1 python scripts/reproduce_autoencoder_table.py [--dims 4 8 16 32] [--seed 0] [--max-steps N]

About 5 minutes of CPU at the defaults.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from vpintegrator.data import generate, load_spec
from vpintegrator.reduction import fit_psd, psd_floor
from vpintegrator.training import fit_symplectic_autoencoder
from vpintegrator.quantiles import median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train = generate(load_spec("toda_bump"), workers=1)
    held = generate(load_spec("toda_bump_heldout"), workers=1)
    print("| 2n | PSD at T | autoencoder at T | PSD, all held-out states | autoencoder, all | fit s (CPU) | steps | "
          "best epoch |")
    print("|---|---|---|---|---|---|---|---|")
    for k in args.dims:
        basis = fit_psd(train, k)
        model = fit_symplectic_autoencoder(train, k, seed=args.seed, max_steps=args.max_steps)
        row = [median(np.ravel(psd_floor(basis, held.y[:, -1]))), median(np.ravel(model.reconstruction_error(held.y[:, -1]))),
               median(np.ravel(psd_floor(basis, held.y))), median(np.ravel(model.reconstruction_error(held.y)))]
        print(f"| {k} | " + " | ".join(f"{v:.3g}" for v in row)
              + f" | {model.fit_seconds:.0f} | {model.fitted_on['steps']} | {model.fitted_on['best_epoch']} |",
              flush=True)


if __name__ == "__main__":
    main()
