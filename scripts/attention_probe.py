"""Does the attention of the shipped transformers carry information? (issue 20, item 4)

    OMP_NUM_THREADS=1 python scripts/attention_probe.py [--n-ics 100] [--t-end 100] [--seed 2026]

For every shipped transformer (rigid-body VPT and ST, coupled-oscillator symplectic transformer) on
``--n-ics`` NEW initial conditions (the data's own sampler with a fresh seed: uniform on the unit sphere
for the rigid body, the box of the oscillator's data spec for the oscillator; none of them in any training
file), prints:

- the attention coupling (``vpintegrator.testing.attention_coupling``: ‖cross-state Jacobian blocks‖ /
  ‖own-state block‖, median and max) on the windows of the exact flow along those trajectories;
- the same for a freshly initialised model of the same configuration (seed 0), on the same windows;
- the relative error ‖z − z_exact‖ / ‖z_exact‖ at ``--t-end`` against the EXACT flow (DOP853, rtol = atol = 1e-12; first window from
  the exact flow) of the model and of ``without_attention(model)`` (median and 10–90 % over the ICs).

Everything is float64 on the CPU.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from vpintegrator.models import build_model, load_model, without_attention
from vpintegrator.rollout import ExactFlowStep, ModelStep, initial_window, rollout
from vpintegrator.systems import get_system, sample_initial_conditions
from vpintegrator.testing import attention_coupling
from vpintegrator.quantiles import percentiles

CASES = [
    # shipped model, system, dt of its data, sampler and its arguments (the data's own)
    ("rigid_body_vpt", "rigid_body", 0.2, "sphere", {}),
    ("rigid_body_st", "rigid_body", 0.2, "sphere", {}),
    ("coupled_oscillator_symplectic_transformer", "coupled_oscillator", 0.4, "box",
     {"low": [-1.0, -1.0, -2.0, -2.0], "high": [1.0, 1.0, 2.0, 2.0]}),
]


def _relative_error(y, yref):
    return np.linalg.norm(y - yref, axis=-1) / np.linalg.norm(yref, axis=-1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-ics", type=int, default=100)
    p.add_argument("--t-end", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=2026)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"# attention probe: {a.n_ics} new ICs (seed {a.seed}), errors at t = {a.t_end:g} vs the exact flow")
    print("| model | coupling trained: median / max | coupling fresh init: median / max | "
          "error (median, 10–90 %) | error without attention (median, 10–90 %) |")
    print("|---|---|---|---|---|")
    for name, system_name, dt, sampler, kw in CASES:
        model = load_model(f"pretrained:{name}").double()
        system = get_system(system_name)
        y0 = sample_initial_conditions(system, sampler, a.n_ics, rng=a.seed, **kw)
        n_steps = int(round(a.t_end / dt))
        ref = rollout(ExactFlowStep(system, dt), y0[:, None], dt, n_steps).y  # (n, n_steps + 1, dim)
        T = model.seq_len
        windows = np.stack([ref[:, k : k + T] for k in range(0, n_steps - T, max(1, n_steps // 10))], 1)
        windows = torch.as_tensor(windows.reshape(-1, T, model.dim))
        trained = attention_coupling(model, windows)
        torch.manual_seed(0)
        fresh = attention_coupling(build_model(**model.config).double(), windows)
        w0 = initial_window(system, y0, dt, T, method="exact_flow")
        cells = []
        for m in (model, without_attention(model)):
            y = rollout(ModelStep(m, device="cpu"), w0, dt, n_steps).y
            err = _relative_error(y[:, -1], ref[:, -1])
            err[~np.isfinite(err)] = np.inf  # a failed (blown-up) rollout counts as an infinite error
            lo, med, hi = percentiles(np.ravel(err), [10, 50, 90])
            failed = int(np.isinf(err).sum())
            cells.append(f"{med:.4g} ({lo:.3g}–{hi:.3g})" + (f", {failed} of {len(err)} failed" if failed else ""))
        print(f"| {name} | {trained.median:.2g} / {trained.max:.2g} | {fresh.median:.2g} / {fresh.max:.2g} | "
              f"{cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
