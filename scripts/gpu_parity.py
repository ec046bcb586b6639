"""CPU/GPU parity of training losses and rollouts: the same runs on the CPU and on ``--device``, side by side.

    python scripts/gpu_parity.py [--device cuda] [--n-traj 64] [--epochs 4] [--ics 256] [--steps 500]

Losses: the paper VPT (Adam, the paper's schedule, batch 256, validation 10 %) trained from the same seed on
the first ``--n-traj`` trajectories of the paper data set (generated here), in float64 and float32, on the
CPU (eager step) and on the device with the eager step (``fast_step = "off"``) and with the device's fast
step (``auto``: the CUDA graph on CUDA); printed: the largest relative difference of the training and
validation losses over the epochs and of the final weights. Rollouts: the shipped ``pretrained:rigid_body_vpt``
(float64, and cast to float32) from ``--ics`` initial conditions on the unit sphere for ``--steps`` steps at
h = 0.2, torch on the CPU (eager, no numba kernel) against the device's host engine (eager) and device
engine (``device_stream_rollout``, the CUDA graph on CUDA); printed: the largest state difference at the
first predicted step, step 50 and the last, and of the Casimir |z|^2 at the last.

Each comparison is one line starting ``parity:`` (``scripts/gpu_report.py`` collects them). Different kernels
round differently, and training and rollouts amplify rounding, so these are measurements, not equalities;
the exit status is 1 only on a gross error: a non-finite figure, or a difference past a guard far above
rounding (float64: 1e-6 relative on losses, 1e-9 on a first rollout step; float32: 1e-2 and 1e-3).
``--device cpu`` compares the CPU with itself (zero differences): the plumbing check run by the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

PAPER_MODEL = {"name": "vpt", "dim": 3, "seq_len": 3, "n_blocks": 2, "n_linear": 1, "L": 3}
DT = 0.2
# gross-error guards (relative loss difference, first-step state difference), far above rounding
GUARD = {"float64": (1e-6, 1e-9), "float32": (1e-2, 1e-3)}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def train_runs(data: Path, tmp: Path, device: str, dtype: str, epochs: int) -> list[tuple[str, dict]]:
    """(label, figures) of the device runs (eager, fast) against the CPU eager run of one dtype."""
    from vpintegrator.training import fit

    def run(name: str, dev: str, fast: str):
        result = fit(dict(data=[str(data)], model=PAPER_MODEL, epochs=epochs, batch_size=256, val_fraction=0.1,
                          device=dev, dtype=dtype, seed=1234, out=str(tmp / name), fast_step=fast),
                     progress=False)
        summary = json.loads((result.run_dir / "summary.json").read_text())
        return result, summary.get("fast_step_used", summary["fast_step"])

    ref, _ = run(f"cpu_{dtype}", "cpu", "off")
    rows = []
    for fast in ("off", "auto"):
        res, ran = run(f"dev_{dtype}_{fast}", device, fast)
        ref_w = ref.model.state_dict()
        weights = max(float((v.cpu() - ref_w[k]).abs().max()) / (float(ref_w[k].abs().max()) or 1.0)
                      for k, v in res.model.state_dict().items())
        figures = dict(
            train=max(_rel(a["train_loss"], b["train_loss"]) for a, b in zip(res.history, ref.history)),
            val=max(_rel(a["val_loss"], b["val_loss"]) for a, b in zip(res.history, ref.history)),
            weights=weights, epochs=len(res.history), steps=res.steps, same_steps=res.steps == ref.steps,
        )
        rows.append((f"fast_step={fast} (ran: {ran})", figures))
    return rows


def rollout_runs(device: str, dtype: torch.dtype, n_ics: int, steps: int) -> list[tuple[str, dict]]:
    """(label, figures) of the device's host and device engines against torch on the CPU."""
    from vpintegrator.models import load_model
    from vpintegrator.rollout import ModelStep, device_stream_rollout, initial_window, rollout

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(n_ics, 3))
    window = initial_window("rigid_body", y0 / np.linalg.norm(y0, axis=1, keepdims=True), DT, 3)

    def model():
        return load_model("pretrained:rigid_body_vpt").to(dtype)

    ref = rollout(ModelStep(model(), "cpu", jit=False, scalar_max_batch=0), window, DT, steps).y
    host = rollout(ModelStep(model(), device, jit=False, scalar_max_batch=0), window, DT, steps).y
    blocks: list[np.ndarray] = []
    stats = device_stream_rollout(ModelStep(model(), device, scalar_max_batch=0), window, DT, steps,
                                  lambda k0, block: blocks.append(block["y"].copy()), jit=True)
    engine = np.concatenate(blocks, axis=1)
    rows = []
    for label, y in ((f"host engine (eager) on {device}", host),
                     (f"device engine ({stats.meta['runner']}) on {device}", engine)):
        diff = np.abs(y - ref)
        casimir = np.abs((y[:, -1] ** 2).sum(-1) - (ref[:, -1] ** 2).sum(-1))
        rows.append((label, dict(first=float(diff[:, 3].max()), step50=float(diff[:, min(50, steps)].max()),
                                 last=float(diff[:, -1].max()), casimir=float(casimir.max()))))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the device compared with the CPU (cpu: the CPU with itself)")
    parser.add_argument("--n-traj", type=int, default=64, help="trajectories of the paper data set to train on")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--ics", type=int, default=256, help="initial conditions rolled out")
    parser.add_argument("--steps", type=int, default=500, help="rollout steps (h = 0.2)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_parity: --device cuda but torch.cuda.is_available() is False: use --device cpu for the "
              "plumbing check", file=sys.stderr)
        return 2
    if args.steps < 4 or args.epochs < 1 or args.n_traj < 2 or args.ics < 1:
        print("gpu_parity: need --steps >= 4, --epochs >= 1, --n-traj >= 2, --ics >= 1", file=sys.stderr)
        return 2
    from vpintegrator.data import generate, load_spec

    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "rb.h5"
        generate(load_spec("rigid_body_paper", n_traj=args.n_traj), out=data)
        for dtype in ("float64", "float32"):
            loss_guard, _ = GUARD[dtype]
            for label, f in train_runs(data, Path(tmp), args.device, dtype, args.epochs):
                worst = max(f["train"], f["val"])
                ok = math.isfinite(worst) and worst <= loss_guard and f["same_steps"]
                bad += [] if ok else [f"losses {dtype} {label}"]
                print(f"parity: losses, paper VPT, Adam, {dtype}, {args.n_traj} trajectories, {f['epochs']} epochs "
                      f"({f['steps']} steps), {args.device} {label} vs cpu eager: largest relative difference "
                      f"train loss {f['train']:.3g}, val loss {f['val']:.3g}, weights {f['weights']:.3g}"
                      f"{'' if ok else ' (past the guard ' + format(loss_guard, 'g') + ')'}")
    for dtype in (torch.float64, torch.float32):
        name = str(dtype).removeprefix("torch.")
        _, step_guard = GUARD[name]
        for label, f in rollout_runs(args.device, dtype, args.ics, args.steps):
            ok = all(math.isfinite(v) for v in f.values()) and f["first"] <= step_guard
            bad += [] if ok else [f"rollout {name} {label}"]
            print(f"parity: rollout, pretrained VPT, {name}, {args.ics} ICs, {args.steps} steps, {label} vs torch "
                  f"on the cpu: largest |dy| {f['first']:.3g} at step 3, {f['step50']:.3g} at step "
                  f"{min(50, args.steps)}, {f['last']:.3g} at step {args.steps}; largest |d |z|^2| "
                  f"{f['casimir']:.3g} at step {args.steps}{'' if ok else ' (past the guard)'}")
    print(f"parity: {'PASS' if not bad else 'FAIL: ' + '; '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
