#!/usr/bin/env python
"""Training-efficiency experiments for the rigid-body study (issue 6, items 3 and 4).

Self-contained: builds the paper data set with :mod:`vpintegrator.data`, the models with
:func:`vpintegrator.models.build_model`, and trains them with a sequence of *phases*, each a
(method, budget) pair, e.g. ``--phases adam:120 lm:600`` (Adam for 120 s, then Levenberg–Marquardt
for 600 s). Budgets are in seconds of process CPU time (``--clock cpu``, the default: this is a
per-thread number on a shared machine) or wall time (``--clock wall``); ``adam`` also accepts a step
count with an ``s`` suffix (``adam:20000s``) so that the learning-rate schedule is reproducible.

Methods
-------
adam    mini-batch Adam (betas 0.9/0.99), lr decaying exponentially (or cosine) from --lr to --lr-min
        over the phase; --batch 0 means full batch.
lbfgs   full-batch (or --lbfgs-n windows) torch.optim.LBFGS with strong Wolfe line search.
lm      Levenberg–Marquardt on the residual vector r = pred − target of --lm-n windows
        (a random subset, redrawn every --lm-resample iterations): J by torch.func (vmap of jacrev,
        per window), solve (JᵀJ + λ D) δ = −Jᵀr with D = diag(JᵀJ) (Marquardt) or I.

Loss: ‖pred − target‖_F / ‖target‖_F over all windows (the paper's). At the end it evaluates the
training loss on all 118 848 windows, a validation loss on 100 held-out random sphere initial
conditions (same integrator), and rollouts of the paper's trajectories 1 and 4 to t = 100 with
non-overlapping windows (first window from the data's integrator), and appends one JSON line to
--json. Monitoring evaluations are not counted in the training time.

Example
-------
    python scripts/explore_training.py --model vpt --data implicit_midpoint --dtype float64 \\
        --phases adam:2000s lm:600 --save /tmp/explore/vpt_im.pt
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from vpintegrator.data import generate, load_spec, solve_flow
from vpintegrator.data import integrate
from vpintegrator.models import build_model, count_parameters, load_model, save_model
from vpintegrator.nn.cayley import cayley_method
from vpintegrator.stepping import iterate_windows
from vpintegrator.systems import get_system
from vpintegrator.training.optim import window_residuals
from vpintegrator.systems.initial_conditions import (
    PAPER_TRAJECTORY_INDEX,
    paper_sphere_points,
    sample_initial_conditions,
)

CACHE = Path(os.environ.get("EXPLORE_CACHE", "/tmp/explore"))
DT = 0.2
T_END_DATA = 20.0
ROLLOUT_STEPS = 500  # t = 100

MODELS = {
    "vpt": dict(name="vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, activation="tanh", skew_sym=True),
    "vpt_arb": dict(name="vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, activation="tanh", skew_sym=False),
    "vpff": dict(name="vpff", dim=3, n_blocks=6, n_linear=1, activation="tanh", seq_len=1),
    "st": dict(name="st", dim=3, n_heads=1, n_blocks=2, L=3, add_connection=False, seq_len=3),
}


# ------------------------------------------------------------------------------------------------
# data

def system():
    return get_system("rigid_body", inertia=(2.0, 1.0, 2.0 / 3.0))


def trajectories(method: str, which: str) -> np.ndarray:
    """(n_traj, 101, 3) float64: the paper set (``which="train"``) or 100 random sphere ICs ("val")."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"data_{which}_{method}.npy"
    if path.exists():
        return np.load(path)
    if which == "train":
        y = generate(load_spec("rigid_body_paper", method=method)).y
    else:
        y0 = sample_initial_conditions(system(), "sphere", 100, rng=np.random.default_rng(7))
        n = round(T_END_DATA / DT)
        if method == "dop853":
            y = solve_flow(system(), y0, DT * np.arange(n + 1))
        else:
            y = integrate(system(), y0, DT, n, method=method).y
    np.save(path, np.asarray(y))
    return np.asarray(y)


def windows(y: np.ndarray, seq_len: int, pred_window: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (trajectory, start) window: x (n, seq_len, 3) = y[:, i:i+T], target (n, P, 3) = y[:, i+T:i+T+P]."""
    n_starts = y.shape[1] - seq_len - pred_window + 1
    idx = np.arange(n_starts)[:, None] + np.arange(seq_len + pred_window)[None]  # (n_starts, T+P)
    w = y[:, idx].reshape(-1, seq_len + pred_window, y.shape[-1])  # (n_traj*n_starts, T+P, dim)
    w = torch.as_tensor(w, dtype=dtype)
    return w[:, :seq_len].contiguous(), w[:, seq_len:].contiguous()


def reference(method: str) -> dict[str, np.ndarray]:
    """Trajectories 1 and 4 to t = 100: implicit midpoint and exact flow, (2, 501, 3)."""
    y0 = paper_sphere_points()[[PAPER_TRAJECTORY_INDEX[1], PAPER_TRAJECTORY_INDEX[4]]]
    im = integrate(system(), y0, DT, ROLLOUT_STEPS, method="implicit_midpoint").y
    ex = solve_flow(system(), y0, DT * np.arange(ROLLOUT_STEPS + 1))
    return {"implicit_midpoint": np.asarray(im), "exact": np.asarray(ex),
            "start": np.asarray(ex if method == "dop853" else im)}


# ------------------------------------------------------------------------------------------------
# evaluation

def relative_loss(model, x, y, chunk=32768) -> float:
    num = den = 0.0
    with torch.no_grad():
        for i in range(0, len(x), chunk):
            p = model(x[i:i + chunk])
            num += float((p - y[i:i + chunk]).double().square().sum())
            den += float(y[i:i + chunk].double().square().sum())
    return math.sqrt(num / den)


def evaluate_rollout(model, ref: dict[str, np.ndarray]) -> dict[str, float]:
    """Non-overlapping-window rollout of trajectories 1 and 4 (float64) to step 500."""
    m = build_model(**model.config).double()
    m.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    T = m.seq_len
    start = torch.as_tensor(ref["start"][:, :T])  # (2, T, 3)
    with torch.no_grad():  # the rollout core's window advance
        parts = iterate_windows(m, start, -(-(ROLLOUT_STEPS + 1 - T) // m.pred_window))
    z = torch.cat([start, *parts], 1)[:, : ROLLOUT_STEPS + 1].numpy()  # (2, 501, 3)
    out = {}
    norm = np.linalg.norm(z, axis=-1)
    for j, name in enumerate(("traj1", "traj4")):
        out[f"{name}_norm_min"] = float(np.nanmin(norm[j])) if np.isfinite(norm[j]).all() else float("nan")
        out[f"{name}_norm_max"] = float(np.nanmax(norm[j])) if np.isfinite(norm[j]).all() else float("nan")
        out[f"{name}_norm_dev"] = float(np.max(np.abs(norm[j] - 1.0)))
        for key in ("implicit_midpoint", "exact"):
            r = ref[key][j]
            e = np.linalg.norm(z[j] - r, axis=-1) / np.linalg.norm(r, axis=-1)
            out[f"{name}_err100_{'im' if key == 'implicit_midpoint' else 'ex'}"] = float(e[-1])
    return out


# ------------------------------------------------------------------------------------------------
# training phases

class Unrolled(torch.nn.Module):
    """The model iterated K times with non-overlapping windows: (batch, T, dim) -> (batch, K*P, dim).

    Training on it fits K consecutive windows of a rollout (a multi-step loss) instead of one."""

    def __init__(self, inner: torch.nn.Module, k: int) -> None:
        super().__init__()
        self.inner, self.k = inner, k

    def forward(self, x):
        return torch.cat(iterate_windows(self.inner, x[:, -self.inner.seq_len:], self.k), 1)


class Clock:
    """CPU-time or wall-time stopwatch that can be paused for monitoring."""

    def __init__(self, kind: str) -> None:
        self.now = time.process_time if kind == "cpu" else time.perf_counter
        self.used = 0.0
        self.start = None

    def resume(self):
        self.start = self.now()

    def pause(self):
        self.used += self.now() - self.start
        self.start = None

    def elapsed(self) -> float:
        return self.used + (self.now() - self.start if self.start is not None else 0.0)


class Monitor:
    def __init__(self, model, x, y, clock: Clock, every: float, log: list) -> None:
        self.model, self.x, self.y, self.clock, self.every, self.log = model, x, y, clock, every, log
        self.next = 0.0
        self.wall0 = time.perf_counter()

    def __call__(self, phase: str, step: int, force: bool = False, extra: str = "") -> float | None:
        t = self.clock.elapsed()
        if not force and t < self.next:
            return None
        self.clock.pause()
        loss = relative_loss(self.model, self.x, self.y)
        self.log.append({"phase": phase, "step": step, "t": round(t, 2), "loss": loss})
        print(f"  [{phase} {step:6d}] t={t:7.1f}s wall={time.perf_counter() - self.wall0:7.1f}s "
              f"train loss {loss:.3e} {extra}", flush=True)
        self.next = t + self.every
        self.clock.resume()
        return loss


def parse_budget(text: str) -> tuple[float | None, int | None]:
    if text.endswith("s") and text[:-1].isdigit():
        return None, int(text[:-1])
    return float(text), None


def phase_adam(model, x, y, clock, mon, budget, args, rng):
    seconds, steps = budget
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.99), eps=1e-8)
    n = len(x)
    bs = n if args.batch <= 0 else min(args.batch, n)
    ratio = args.lr_min / args.lr
    t0 = clock.elapsed()
    step = 0
    perm = torch.randperm(n, generator=rng)
    pos = 0
    while True:
        frac = step / steps if steps else (clock.elapsed() - t0) / seconds
        if frac >= 1.0:
            break
        if args.schedule == "exp":
            lr = args.lr * ratio ** frac
        elif args.schedule == "cos":
            lr = args.lr_min + (args.lr - args.lr_min) * 0.5 * (1 + math.cos(math.pi * frac))
        else:
            lr = args.lr
        for g in opt.param_groups:
            g["lr"] = lr
        if pos + bs > n:
            perm = torch.randperm(n, generator=rng)
            pos = 0
        idx = perm[pos:pos + bs]
        pos += bs
        xb, yb = (x, y) if bs == n else (x[idx], y[idx])
        opt.zero_grad(set_to_none=True)
        loss = torch.sqrt((model(xb) - yb).square().sum() / yb.square().sum())
        loss.backward()
        opt.step()
        step += 1
        mon("adam", step, extra=f"lr {lr:.1e}")
    return step


def phase_lbfgs(model, x, y, clock, mon, budget, args, rng):
    seconds, _ = budget
    n = len(x) if args.lbfgs_n <= 0 else min(args.lbfgs_n, len(x))
    idx = torch.randperm(len(x), generator=rng)[:n]
    xs, ys = (x, y) if n == len(x) else (x[idx], y[idx])
    den = ys.square().sum()
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=args.lbfgs_inner, history_size=args.lbfgs_history,
                            tolerance_grad=0.0, tolerance_change=0.0, line_search_fn="strong_wolfe")
    t0 = clock.elapsed()
    evals = [0]

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = (model(xs) - ys).square().sum() / den  # squared relative loss: smooth at the optimum
        loss.backward()
        evals[0] += 1
        return loss

    outer = 0
    while clock.elapsed() - t0 < seconds:
        opt.step(closure)
        outer += 1
        mon("lbfgs", outer, extra=f"evals {evals[0]}")
    return evals[0]


def phase_lm(model, x, y, clock, mon, budget, args, rng):
    seconds, steps = budget
    residual, jac1 = window_residuals(model)

    def jacobian(theta, xs, ys):  # (n*P*dim, n_params)
        parts = [jac1(theta, xs[i:i + args.lm_chunk], ys[i:i + args.lm_chunk]) for i in range(0, len(xs), args.lm_chunk)]
        return torch.cat(parts, 0).flatten(0, 1)

    params = [p for p in model.parameters() if p.requires_grad]  # window_residuals' theta: trainable ones only
    theta = torch.cat([p.detach().flatten() for p in params]).clone()
    lam = args.lm_lambda
    t0 = clock.elapsed()
    it = 0
    xs = ys = None
    while (steps is None and clock.elapsed() - t0 < seconds) or (steps is not None and it < steps):
        if xs is None or (args.lm_resample and it % args.lm_resample == 0):
            idx = torch.randperm(len(x), generator=rng)[: args.lm_n]
            xs, ys = x[idx], y[idx]
            with torch.no_grad():
                cost = float(residual(theta, xs, ys).square().sum())
        J = jacobian(theta, xs, ys)
        with torch.no_grad():
            r = residual(theta, xs, ys).flatten()
            cost = float(r.square().sum())
            H = J.T @ J
            g = J.T @ r
            D = torch.diagonal(H).clamp_min(1e-12) if args.lm_damping == "marquardt" else torch.ones_like(g)
            accepted = False
            for _ in range(20):
                try:
                    delta = torch.linalg.solve(H + lam * torch.diag(D), -g)
                except RuntimeError:
                    lam *= 4
                    continue
                new = theta + delta
                new_cost = float(residual(new, xs, ys).square().sum())
                if math.isfinite(new_cost) and new_cost < cost:
                    theta, accepted = new, True
                    lam = max(lam / args.lm_down, 1e-12)
                    break
                lam *= args.lm_up
            torch.nn.utils.vector_to_parameters(theta, params)
        it += 1
        mon("lm", it, extra=f"lambda {lam:.1e} sub-loss {math.sqrt(cost / float(ys.square().sum())):.3e}"
            + ("" if accepted else " (no decrease)"))
        if not accepted and lam > 1e10:
            break
    return it


PHASES = {"adam": phase_adam, "lbfgs": phase_lbfgs, "lm": phase_lm}


def table(path: Path) -> str:
    """Markdown table of the runs in a results.jsonl file."""
    head = ("| tag | model (params) | recipe | data | dtype | CPU s (train) | wall s | train loss | val loss "
            "| ‖z‖−1 traj1 / traj4 | err t=100 vs IM traj1 / traj4 | vs exact traj1 / traj4 |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        rows.append(
            f"| {r['tag']} | {r['model']} ({r['n_params']}) | {' '.join(r['phases'])} | {r['data']} | {r['dtype']} "
            f"| {r['train_seconds']:.0f} | {r['wall_total']:.0f} | {r['train_loss']:.2e} | {r['val_loss']:.2e} "
            f"| {r['traj1_norm_dev']:.1e} / {r['traj4_norm_dev']:.1e} "
            f"| {r['traj1_err100_im']:.3g} / {r['traj4_err100_im']:.3g} "
            f"| {r['traj1_err100_ex']:.3g} / {r['traj4_err100_ex']:.3g} |"
        )
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="vpt")
    p.add_argument("--data", choices=["implicit_midpoint", "dop853"], default="implicit_midpoint")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--phases", nargs="+", default=["adam:600"], help="method:budget, e.g. adam:120 lm:600 or adam:5000s")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--cayley", choices=["auto", "closed", "solve", "inv"], default="auto")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--lr-min", type=float, default=1e-6)
    p.add_argument("--schedule", choices=["exp", "cos", "const"], default="exp")
    p.add_argument("--batch", type=int, default=16384, help="Adam batch size; 0 = full batch")
    p.add_argument("--lbfgs-n", type=int, default=0, help="windows for LBFGS (0 = all)")
    p.add_argument("--lbfgs-inner", type=int, default=20)
    p.add_argument("--lbfgs-history", type=int, default=50)
    p.add_argument("--lm-n", type=int, default=4096, help="windows in the LM subsample")
    p.add_argument("--lm-resample", type=int, default=10, help="redraw the LM subsample every k iterations (0 never)")
    p.add_argument("--lm-lambda", type=float, default=1e-3)
    p.add_argument("--lm-up", type=float, default=3.0)
    p.add_argument("--lm-down", type=float, default=3.0)
    p.add_argument("--lm-damping", choices=["marquardt", "identity"], default="marquardt")
    p.add_argument("--lm-chunk", type=int, default=2048)
    p.add_argument("--unroll", type=int, default=1, help="fit K consecutive rollout windows (multi-step loss)")
    p.add_argument("--monitor", type=float, default=20.0, help="seconds (of --clock) between full-loss prints")
    p.add_argument("--init", type=Path, default=None, help="start from this model file (save_model format)")
    p.add_argument("--save", type=Path, default=None)
    p.add_argument("--json", type=Path, default=CACHE / "results.jsonl")
    p.add_argument("--tag", default="")
    p.add_argument("--table", action="store_true", help="print the --json runs as a markdown table and exit")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.json))
        return None

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = torch.Generator().manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)

    cfg = MODELS[args.model]
    model = build_model(**cfg).to(dtype)
    if args.init:
        model.load_state_dict(load_model(args.init).to(dtype).state_dict())
    T, P = model.seq_len, model.pred_window
    x, y = windows(trajectories(args.data, "train"), T, P, dtype)
    xv, yv = windows(trajectories(args.data, "val"), T, P, dtype)
    ref = reference(args.data)
    print(f"{args.model}: {count_parameters(model)} parameters, {len(x)} training windows, {len(xv)} validation "
          f"windows, {args.dtype}, data {args.data}, phases {' '.join(args.phases)}", flush=True)

    clock = Clock(args.clock)
    log: list = []
    mon = Monitor(model, x, y, clock, args.monitor, log)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    counts = []
    with cayley_method(args.cayley):
        clock.resume()
        if args.unroll > 1:
            fit_model = Unrolled(model, args.unroll)
            fx, fy = windows(trajectories(args.data, "train"), T, args.unroll * P, dtype)
        else:
            fit_model, fx, fy = model, x, y
        for spec in args.phases:
            method, _, budget = spec.partition(":")
            counts.append(PHASES[method](fit_model, fx, fy, clock, mon, parse_budget(budget), args, rng))
        clock.pause()
        train_seconds = clock.used
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        train_loss = relative_loss(model, x, y)
        val_loss = relative_loss(model, xv, yv)
    result = {
        "tag": args.tag, "model": args.model, "n_params": count_parameters(model), "data": args.data,
        "dtype": args.dtype, "phases": args.phases + ([f"unroll={args.unroll}"] if args.unroll > 1 else [])
        + ([f"init={args.init.name}"] if args.init else []), "steps": counts, "clock": args.clock,
        "train_seconds": round(train_seconds, 1), "wall_total": round(wall, 1), "cpu_total": round(cpu, 1),
        "threads": args.threads, "train_loss": train_loss, "val_loss": val_loss,
        **evaluate_rollout(model, ref),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "log": log,
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("args", "log")}, indent=None))
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        save_model(model, args.save, extra={"train_loss": train_loss, "val_loss": val_loss,
                                            "recipe": " ".join(args.phases), "data": args.data})
        print(f"saved {args.save}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
