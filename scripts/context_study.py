"""A quick study of context-conditioned integrators on the rigid-body family (issue 34, docs/context.md).

Trains, per seed, the context-conditioned Lie–Poisson net ``lpnet_ctx`` (3-state finite-difference context),
its volume-preserving sibling ``vpff_ctx`` and the parameter-blind ``lpnet`` (Levenberg–Marquardt, float64,
the same epochs for each) on a rigid_body_family file, then rolls out held-out pairs of new initial
conditions **and new inertias** (I_k ~ U[0.5, 3], a stream other than the data's) from the same exact prefix
of ``context_len`` states, next to the identification baselines (finite differences / shooting, then RK4) and
the oracle (RK4 with the true inertia). Errors against the exact flow (DOP853, 1e-12) at t = 2 and t = 10:
medians over the held-out pairs, per seed (a row that failed, i.e. blew up, counts as an infinite error);
the largest Casimir drift |‖z_n‖ − ‖z_k‖| of the rows that did not fail. With observation noise σ (one draw per
trajectory, the same for every method) every method, the oracles included, starts from the noisy last
prefix state.

    vp-gen rigid_body_family --set n_traj=300 --out datasets/rbf300.h5
    python scripts/context_study.py --data datasets/rbf300.h5 --out runs/context_quick --seeds 0,1 --epochs 30 \
        --noise 0,0.001,0.01

    # the context-length axis: lpnet_ctx read from 5 and 10 states (its runs are trained with that context_len)
    python scripts/context_study.py --data datasets/rbf300.h5 --out runs/context_quick_k5 --context-len 5 \
        --models lpnet_ctx --seeds 0,1 --epochs 30 --noise 0,0.001,0.01

Writes ``OUT/context_study.md`` and ``OUT/context_study.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import vpintegrator as vp
from vpintegrator.data import solve_flow
from vpintegrator.rollout import ContextStep, IdentifiedStep, IntegratorStep, ModelStep, rollout
from vpintegrator.rollout.methods import parse_model_entry
from vpintegrator.rollout.family import FamilyStep
from vpintegrator.rollout.identify import add_noise, theta_of
from vpintegrator.systems import RigidBody
from vpintegrator.systems.family import SystemFamily
from vpintegrator.quantiles import median

H = 0.2
T_EVAL = (2.0, 10.0)


def heldout(n: int, seed: int) -> tuple[list[RigidBody], np.ndarray]:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 34, 1]))
    systems = [RigidBody(tuple(float(v) for v in rng.uniform(0.5, 3.0, 3))) for _ in range(n)]
    y0 = rng.normal(size=(n, 3))
    return systems, y0 / np.linalg.norm(y0, axis=1, keepdims=True)


def train(data: Path, out: Path, model: str, seed: int, epochs: int, k: int) -> Path:
    context = model.endswith("_ctx")
    run = out / (f"{model}_k{k}_seed{seed}" if context else f"{model}_seed{seed}")
    if not (run / "best.pt").exists():
        cmd = [sys.executable, "-m", "vpintegrator.cli.train", "--data", str(data), "--model", model, "--optimizer",
               "lm", "--set", f"epochs={epochs}", "--set", "dtype=float64", "--set", f"seed={seed}", "--out", str(run)]
        if context:
            cmd += ["--set", f"model.context_len={k}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return run


def errors(y: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    out = {}
    for t in T_EVAL:
        k = int(round(t / H))
        e = np.linalg.norm(y[:, k] - ref[:, k], axis=-1) / np.linalg.norm(ref[:, k], axis=-1)
        out[f"t={t:g}"] = median(np.ravel(e))  # a failed row counts as inf
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--noise", default="0,0.001,0.01")
    ap.add_argument("--context-len", type=int, default=3, help="prefix states (the context models' context_len)")
    ap.add_argument("--models", default="lpnet_ctx,vpff_ctx,lpnet")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    k = args.context_len
    n_steps = int(round(T_EVAL[-1] / H))
    systems, y0 = heldout(args.n_test, 0)
    family = SystemFamily(systems)
    ref = np.stack([solve_flow(s, y0[i : i + 1], H * np.arange(n_steps + 1))[0] for i, s in enumerate(systems)])
    theta = np.stack([theta_of(s) for s in systems])
    rows = []
    models = args.models.split(",")
    runs = {(m, s): train(args.data, args.out, m, s, args.epochs, k) for s in seeds for m in models}
    for sigma in [float(v) for v in args.noise.split(",")]:
        prefix = ref[:, :k]  # the engine starts every method from these states; each adds the same noise draw
        methods = {
            "oracle rk4 (true inertia)": (None, lambda: FamilyStep(family, lambda s: IntegratorStep(s, "rk4", H))),
            "fd+rk4": (None, lambda: IdentifiedStep(RigidBody(), "fd", "rk4", H, context_len=k, noise=sigma)),
            "shooting+rk4": (None, lambda: IdentifiedStep(RigidBody(), "shooting", "rk4", H, context_len=k,
                                                          noise=sigma)),
        }
        for s in seeds:
            for m in models:
                _, model, _ = parse_model_entry(("m", str(runs[(m, s)])))
                if m == "lpnet":
                    methods[f"{m} (blind) seed {s}"] = (model, lambda model=model: ModelStep(model, device="cpu"))
                else:
                    methods[f"{m} seed {s}"] = (model, lambda model=model: ContextStep(model, noise=sigma))
                    if m == "lpnet_ctx":
                        methods[f"{m} oracle context seed {s}"] = (model, lambda model=model: ContextStep(
                            model, context="oracle", theta=theta, dt=H, noise=sigma))
        for name, (model, make) in methods.items():
            step = make()
            tic = time.process_time()
            if isinstance(step, (ModelStep, FamilyStep)):  # one-state maps: from the (noisy) last prefix state
                start = add_noise(prefix, sigma, 0)[:, -1:]  # the oracle too: it knows θ, not the state
                y = np.concatenate([prefix[:, :-1], rollout(step, start, H, n_steps - (k - 1)).y], 1)
            else:
                y = rollout(step, prefix, H, n_steps).y
            cpu = time.process_time() - tic
            ok = np.isfinite(y).all(axis=(1, 2))
            cas = float(np.abs(np.linalg.norm(y[ok, k:], axis=-1) - np.linalg.norm(y[ok, k : k + 1], axis=-1)).max())
            rows.append({"method": name, "noise": sigma, **errors(y, ref), "casimir_drift": cas,
                         "failed": int((~ok).sum()), "cpu_seconds": cpu})
            print(rows[-1], flush=True)
    for r in rows:
        r["context_len"] = k
    (args.out / "context_study.json").write_text(json.dumps(rows, indent=1))
    lines = ["| method | noise σ | median error t = 2 | median error t = 10 | max Casimir drift | failed | CPU s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['noise']:g} | {r['t=2']:.3g} | {r['t=10']:.3g} | {r['casimir_drift']:.2g} | "
                     f"{r['failed']} | {r['cpu_seconds']:.3g} |")
    (args.out / "context_study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
