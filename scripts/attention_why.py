#!/usr/bin/env python
"""Why is the trained VPT's attention inert on the rigid body, and is there a training set-up where it is not?
(issue 20, item 4)

Hypotheses: (a) the initial weights × 0.1 of the study config start the attention near Cayley(0) = I and
Levenberg–Marquardt never leaves; (b) the optimiser; (c) the flow is autonomous: the exact window map
(z₁, z₂, z₃) ↦ (φ₃ₕ(z₁), φ₃ₕ(z₂), φ₃ₕ(z₃)) is position-wise, so nothing in the data rewards coupling the
states; a task where the other states *do* carry information about a state's future — noisy observations,
where the window's states average the noise out — should then make the attention carry information.

Each case trains the study VPT (``configs/study/rigid_body_vpt.toml``, seed 0) with ``vp-train`` for
``--seconds`` of wall time on the exact-flow paper data (``--data``; noisy copies are written beside ``--out``),
then runs the studies' attention step (:mod:`vpintegrator.studies.attention`) on clean held-out exact-flow
trajectories (``--heldout``): the coupling ‖cross-state Jacobian blocks‖ / ‖own-state blocks‖ at the start of
training (the initial weights × init_scale) and after it, and the error at ``--t-end`` with and without the
attention. Prints a Markdown table and writes ``OUT/results.json``.

    OMP_NUM_THREADS=1 python scripts/attention_why.py --data RUN/data/exact.h5 --heldout RUN/data/heldout.h5 \\
        --out runs/attention_why --seconds 120 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CONFIG = "study/rigid_body_vpt"  # the shipped study config (vp-train --list): found from any directory
#: name -> (vp-train arguments, noise standard deviation added to every training state)
CASES = {
    "lm_init0.1": ([], 0.0),
    "lm_init1": (["--set", "init_scale=1.0"], 0.0),
    "adam_init0.1": (["--optimizer", "adam", "--lr", "1e-3", "--batch-size", "1024"], 0.0),
    "lm_init0.1_noise1e-2": ([], 1e-2),
    "lm_init1_noise1e-2": (["--set", "init_scale=1.0"], 1e-2),
}


def noisy_copy(src: Path, dst: Path, sigma: float, seed: int = 0) -> Path:
    """``src`` with N(0, sigma²) added to every state of /y (a new file; ``src`` is only read)."""
    import h5py
    import numpy as np

    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        y = f["y"][...]
        f["y"][...] = y + np.random.default_rng(seed).normal(0.0, sigma, y.shape)
    return dst


def initial_coupling(run: Path, windows_from: Path) -> float:
    """The median coupling of the run's model at its initial weights (seed, × init_scale), on held-out windows."""
    import numpy as np
    import torch

    from vpintegrator.data import read_trajectories
    from vpintegrator.models import build_model, load_model
    from vpintegrator.testing import attention_coupling
    from vpintegrator._toml import tomllib

    trained = load_model(run)
    with open(run / "config.toml", "rb") as fh:
        scale = float(tomllib.load(fh).get("init_scale", 1.0))  # the resolved config vp-train wrote
    torch.manual_seed(0)
    model = build_model(**trained.config).double()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    ref = read_trajectories(windows_from).y[:20, :101]
    w = np.stack([ref[:, k : k + 3] for k in range(0, 98, 10)], 1).reshape(-1, 3, 3)
    return float(attention_coupling(model, torch.as_tensor(w)).median)


def run_case(name: str, a: argparse.Namespace) -> dict:
    args, sigma = CASES[name]
    out = Path(a.out)
    data = Path(a.data) if not sigma else noisy_copy(Path(a.data), out / f"data_noise{sigma:g}.h5", sigma)
    run = out / name
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if not (run / "best.pt").exists():
        subprocess.run(["vp-train", CONFIG, "--data", str(data), "--out", str(run), "--seed", "0", "--time-limit",
                        f"{a.seconds:g}", "--quiet", "--overwrite", *args], check=True, env=env)
    probe = out / f"{name}.json"
    subprocess.run([sys.executable, "-m", "vpintegrator.studies.attention", "--model", str(run), "--data", a.heldout,
                    "--n-traj", "20", "--t-end", f"{a.t_end:g}", "--out", str(probe)], check=True, env=env)
    res = json.loads(probe.read_text())
    summary = json.loads((run / "summary.json").read_text())
    return {"case": name, "noise": sigma, "args": args, "train_loss": summary.get("train_loss"),
            "coupling_start": initial_coupling(run, Path(a.heldout)), **res}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="Exact-flow paper data (vp-gen rigid_body_paper).")
    p.add_argument("--heldout", required=True, help="Held-out exact-flow trajectories to t >= --t-end.")
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--t-end", type=float, default=100.0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cases", default=",".join(CASES))
    a = p.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    names = [c for c in a.cases.split(",") if c]
    with ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda n: run_case(n, a), names))
    (Path(a.out) / "results.json").write_text(json.dumps(rows, indent=2))
    f = lambda v: f"{float(v):.3g}"  # noqa: E731  (strict JSON writes inf as "inf")
    print("| case | train loss | coupling at start | coupling trained (median / max) | error t = "
          f"{a.t_end:g} (median [10–90 %]) | without attention |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        e, w = r["error"], r["error_without_attention"]
        print(f"| {r['case']} | {f(r['train_loss'])} | {f(r['coupling_start'])} | {f(r['coupling']['median'])} / "
              f"{f(r['coupling']['max'])} | {f(e['median'])} [{f(e['lo'])}, {f(e['hi'])}] | "
              f"{f(w['median'])} [{f(w['lo'])}, {f(w['hi'])}] |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
