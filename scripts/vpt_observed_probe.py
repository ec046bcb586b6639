"""Why the VPT cannot learn a map of observed windows: three measurements on a vp-gen file (issue 55).

1. **The loader's windows.** The training pipeline (``build_plan`` + ``prepare`` with ``observe``) hands the
   model windows ``(x, target)``; they are compared with windows cut by hand from the file's ``/y`` (observed by
   the observation's matrix): the largest difference is printed (0 means the window code path is right).
2. **Time-permutation equivariance.** The VPT (skew-symmetric attention ``X -> X Cayley(C(X))`` with
   ``C(XP) = Pᵀ C(X) P``, position-wise feed-forward layers, no positional encoding) satisfies
   ``f(X P) = f(X) P`` for every permutation ``P`` of the window's T states: it does not know which state of the
   window is the latest. Measured on a random VPT (and, as a control, on ``delay_vpff``, which is not).
3. **What equivariance costs on observed windows.** For a reversible system (``H(q, -p) = H(q, p)``) the time
   reversal ``XR`` of an observed window ``X`` is the observed window of the trajectory through ``(q, -p)``, and the
   next window of ``XR`` is the *previous* window of ``X``, reversed. An equivariant ``f`` then gives
   ``f(XR) = f(X) R``, so on the pair it must match both the next window ``N`` and the previous one ``P``:
   ``|f(X) - N|^2 + |f(X) - P|^2 >= |N - P|^2 / 2``. The relative error of *any* equivariant map on the
   reversal-symmetrised windows is at least ``sqrt(sum |N - P|^2 / 2 / sum (|N|^2 + |P|^2))``: printed per T. On the
   full state the bound is void (the reversed full-state window is no trajectory's window: p is not flipped)
   and the target map ``x_j -> Phi_{T h}(x_j)`` is itself equivariant, which is why the VPT learns there.
4. **Volume of the exact window map.** For ``T * k = d`` (T = 2 observing q of the coupled oscillator) the
   exact T-step window map has ``log|det J|`` = the sum of T consecutive one-step delay-map values
   (``vpintegrator.data.delay.exact_delay_log_det``); for ``T * k > d`` the windows fill a d-dimensional
   manifold of R^{T k} and the map has no determinant of its own (a VP extension off the manifold exists).
5. **Stability of a trained window map off the window manifold** (``--models``, trained checkpoints): its
   one-window error on data windows, the spectral radius of its Jacobian there, and the relative error after
   k window applications from an exact first window. For ``T * k > d`` the data never constrain the
   ``T k - d`` directions normal to the window manifold; a VP map cannot contract them all (the product of all
   multipliers is 1, and on the manifold the exact map keeps volume up to ``exp(3e-4)`` per step), so the
   rollout leaves the manifold unless every normal multiplier is exactly neutral. A one-step map of the window
   (``delay_mlp``: the window shifted, one new state) forgets a perturbation after T steps instead.

6. **Training to the floor** (``--adam-iters N``): the VPT (n_blocks 4, L 4, weights times 0.3), the VPT with a
   learned offset per window position before each unit (translations: still volume preserving, no longer
   equivariant) and ``delay_vpff`` (n_blocks 4), each trained by Adam (N iterations of 1024 windows, lr 1e-2
   decaying to 1e-6) on the windows of the first 85 % of the trajectories; the relative one-window error on them
   and on the rest is printed, to set beside the floor of part 3. ``--full`` trains on the full state instead.
   ``--positional feedforward,mixing`` adds the VPT with each of these ``positional`` options (``feedforward``: one
   VPFF per window position; ``mixing``: a learned unit-triangular linear shear across the window's positions
   before each unit's attention; both volume preserving, neither equivariant; also to part 2's gaps).

7. **The study's recipe** (``--lm-budget S``): the VPT (n_blocks 4, L 4) and, with ``--positional``, the VPT with
   each of those ``positional`` options, trained through ``vpintegrator.training.fit`` with the partial-observation
   study's ``RECIPE`` (Levenberg–Marquardt, float64, best.pt by the validation rollout at t = 10), ``init_scale``
   0.3, S process-CPU seconds or ``--patience`` epochs without improvement, seed ``--seed``, runs under
   ``--runs``. Printed per model, for its best.pt (the best validation rollout) and its last.pt: the relative
   one-window error on the run's training trajectories, on its validation trajectories and on ``--n-heldout``
   held-out initial conditions (the file's sampler, the study's held-out seed; exact flow to the file's t_end),
   and on those the median (10–90 %) relative error of the observed rollout from the exact first window at
   t = 10 and t = 20.

    python scripts/vpt_observed_probe.py DATA.h5 --observe q --windows 1,2,4 [--models RUN/last.pt ...]
        [--adam-iters 3000 [--full]] [--positional feedforward,mixing]
        [--lm-budget 40 --runs DIR --seed 0]
"""

from __future__ import annotations

import argparse

import h5py
import numpy as np
import torch

from vpintegrator.data import read_trajectories
from vpintegrator.data.delay import exact_delay_log_det
from vpintegrator.data.observation import resolve_observation
from vpintegrator.models.delay import DelayVolumeNet
from vpintegrator.models.volume import VolumePreservingTransformer
from vpintegrator.training.plan import build_plan, prepare


def hand_windows(y_obs: np.ndarray, traj: np.ndarray, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (window, next window) pair of trajectories ``traj``, starts 0, 1, ..., trajectory by trajectory."""
    n_states = y_obs.shape[1]
    xs, ts = [], []
    for i in traj:
        for s in range(n_states - 2 * T + 1):
            xs.append(y_obs[i, s:s + T])
            ts.append(y_obs[i, s + T:s + 2 * T])
    return np.stack(xs), np.stack(ts)


def loader_mismatch(path: str, observe: str | None, matrix: np.ndarray | None, T: int) -> float:
    """Largest |loader window - hand window| over every training window (inputs and targets)."""
    plan = build_plan({"data": [path], "model": {"name": "vpt", "seq_len": T}, "observe": observe,
                       "val_fraction": 0.15, "test_fraction": 0.0, "dtype": "float64", "epochs": 1})
    prep = prepare(plan, torch.device("cpu"))
    x, target = (t.numpy() for t in prep.train_set.windows())
    with h5py.File(path, "r") as f:
        y = np.asarray(f["y"], dtype=np.float64)
    if matrix is not None:
        y = y @ matrix.T
    hx, ht = hand_windows(y, prep.train_set.traj_indices.numpy(), T)
    return float(max(np.abs(x - hx).max(), np.abs(target - ht).max()))


def equivariance_gap(model: torch.nn.Module, T: int, dim: int) -> float:
    """max |f(X P) - f(X) P| / max |f(X)| for a random permutation P of the window's states."""
    g = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.data.normal_(0.0, 0.5, generator=g)
    x = torch.randn(8, T, dim, dtype=torch.float64, generator=g)
    perm = torch.roll(torch.arange(T), 1)
    with torch.no_grad():
        y = model(x)
        return float((model(x[:, perm]) - y[:, perm]).abs().max() / y.abs().max())


def reversal_bound(y_obs: np.ndarray, T: int) -> float:
    """The relative error every time-permutation-equivariant map of windows makes at least (module docstring)."""
    n_states = y_obs.shape[1]
    num = den = 0.0
    for s in range(T, n_states - 2 * T + 1):
        prev, nxt = y_obs[:, s - T:s], y_obs[:, s + T:s + 2 * T]
        num += 0.5 * float(np.sum((nxt - prev) ** 2))
        den += float(np.sum(nxt ** 2) + np.sum(prev ** 2))
    return float(np.sqrt(num / den))


def window_map_stability(path: str, y_obs: np.ndarray, n_windows: int = 20, start: int = 10, horizon: int = 40
                         ) -> str:
    """One line on a trained window-to-window model (``pred_window = seq_len``): one-window error, Jacobian
    spectral radius at ``n_windows`` data windows, relative rollout error after each window application."""
    from vpintegrator.models import load_model

    model = load_model(path).double().eval()
    T, k = int(model.seq_len), y_obs.shape[-1]
    if int(model.pred_window) != T:
        return f"{path}: pred_window {model.pred_window} != seq_len {T}: not a window-to-window map, skipped"
    x = torch.as_tensor(y_obs[:n_windows, start:start + T])
    radius = []
    for w in x:
        J = torch.autograd.functional.jacobian(lambda v: model(v.reshape(1, T, k)).reshape(-1), w.reshape(-1))
        radius.append(float(torch.linalg.eigvals(J).abs().max()))
    errs = []
    with torch.no_grad():
        w = x.clone()
        for a in range(1, horizon // T + 1):
            w = model(w)
            ref = torch.as_tensor(y_obs[:n_windows, start + a * T:start + (a + 1) * T])
            errs.append(float(torch.linalg.vector_norm(w - ref) / torch.linalg.vector_norm(ref)))
    return (f"{path}: T = {T}, one-window relative error {errs[0]:.3g}; Jacobian spectral radius median "
            f"{np.median(radius):.3g}, max {max(radius):.3g}; relative error after a window applications: "
            + " ".join(f"{a + 1}:{e:.2g}" for a, e in enumerate(errs)))


class PositionalVPT(torch.nn.Module):
    """The VPT with a learned offset per window position before each unit (zero at the start)."""

    def __init__(self, vpt: VolumePreservingTransformer) -> None:
        super().__init__()
        self.vpt = vpt
        self.offsets = torch.nn.Parameter(torch.zeros(len(vpt.blocks), vpt.seq_len, vpt.dim, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for offset, block in zip(self.offsets, self.vpt.blocks):
            x = block(x + offset)
        return x


def lm_fit(path: str, observe: str, T: int, positional: str, seed: int, budget: float, patience: int, runs: str,
           n_heldout: int) -> str:
    """Train the VPT with ``positional`` (``"none"``: the plain one) by the study's recipe (module docstring,
    part 7) and score its best.pt and last.pt (``score_run``); lines."""
    import json
    from pathlib import Path

    from vpintegrator.studies.partial_observation import RECIPE
    from vpintegrator.training import fit

    model_cfg = {"name": "vpt", "n_blocks": 4, "L": 4, "seq_len": T, "positional": positional}
    run = Path(runs) / f"vpt_{positional}_T{T}_seed{seed}"
    cfg = {**RECIPE, "data": [path], "model": model_cfg, "observe": observe, "seed": seed, "init_scale": 0.3,
           "cpu_time_limit": float(budget), "time_limit": 20.0 * budget + 60.0, "patience": patience,
           "out": str(run)}
    result = fit(cfg, overwrite=run.exists())
    head = (f"{result.n_params} parameters, stopped {result.stopped} after {result.epochs} epochs (best "
            f"{result.best_epoch}), {json.loads((run / 'summary.json').read_text())['cpu_time']:.0f} CPU s")
    return "\n".join([head] + [f"  {ckpt}: {score_run(run / ckpt, cfg, n_heldout)}" for ckpt in ("best.pt", "last.pt")])


def score_run(checkpoint, cfg: dict, n_heldout: int) -> str:
    """One line on a window-to-window checkpoint trained with ``cfg`` (data, observe, split): the relative
    one-window error on the run's training and validation trajectories and on ``n_heldout`` held-out initial
    conditions (the file's sampler, the study's held-out seed, exact flow to the file's t_end), and the median
    (10–90 %) relative error of the observed rollout from the exact first window on those at t = 10 and t_end."""
    from vpintegrator.data import solve_flow
    from vpintegrator.models import load_model
    from vpintegrator.rollout.splits import draw_heldout
    from vpintegrator.studies.partial_observation import H, HELDOUT_SEED

    model = load_model(checkpoint).double().eval()
    T = int(model.seq_len)
    path = cfg["data"][0]
    prep = prepare(build_plan({**cfg, "epochs": 1}), torch.device("cpu"))
    data = read_trajectories(path)
    obs = resolve_observation(cfg["observe"], data.dim, data.system.state_names, data.system.name)
    assert obs is not None
    y_obs = np.asarray(data.y) @ obs.matrix.T
    y0 = draw_heldout(data.meta, data.system, n_heldout, HELDOUT_SEED, np.asarray(data.y)[:, 0], path)
    held = np.asarray(solve_flow(data.system, y0, H * np.arange(data.n_states))) @ obs.matrix.T

    def one_window(y: np.ndarray) -> float:
        x, t = (torch.as_tensor(a) for a in hand_windows(y, np.arange(len(y)), T))
        with torch.no_grad():
            return float(torch.linalg.vector_norm(model(x) - t) / torch.linalg.vector_norm(t))

    steps = [int(round(10.0 / H)), data.n_states - 1]
    with torch.no_grad():
        w, states = torch.as_tensor(held[:, :T]), [torch.as_tensor(held[:, :T])]
        while sum(s.shape[1] for s in states) <= max(steps):
            w = model(w)
            states.append(w)
        roll = torch.cat(states, dim=1).numpy()
    rollout = []
    for k in steps:
        with np.errstate(invalid="ignore", over="ignore"):  # a blown-up rollout counts as inf
            e = np.linalg.norm(roll[:, k] - held[:, k], axis=-1) / np.linalg.norm(held[:, k], axis=-1)
        e = np.where(np.isfinite(e), e, np.inf)
        rollout.append(f"t = {k * H:g}: {np.median(e):.3g} ({np.quantile(e, 0.1):.3g}-{np.quantile(e, 0.9):.3g})")
    train_traj, val_traj = prep.train_set.traj_indices.numpy(), prep.val_set.traj_indices.numpy()
    return (f"one-window relative error: training trajectories {one_window(y_obs[train_traj]):.3g}, validation "
            f"{one_window(y_obs[val_traj]):.3g}, {n_heldout} held-out conditions {one_window(held):.3g}; held-out "
            f"rollout median (10-90 %) {', '.join(rollout)}")


def adam_fit(model: torch.nn.Module, y: np.ndarray, T: int, iters: int, seed: int = 0) -> str:
    """Train ``model`` (window of T to the next T) by Adam on ``y`` (module docstring, part 6); one line."""
    import time

    torch.manual_seed(seed)
    n_fit = int(round(0.85 * len(y)))
    fit_x, fit_t = (torch.as_tensor(a) for a in hand_windows(y, np.arange(n_fit), T))
    val_x, val_t = (torch.as_tensor(a) for a in hand_windows(y, np.arange(n_fit, len(y)), T))

    def rel(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(model(x) - t) / torch.linalg.vector_norm(t)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "offsets":
                p.mul_(0.3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 1e-4 ** (1.0 / iters))
    cpu = time.process_time()
    for _ in range(iters):
        batch = torch.randint(0, len(fit_x), (1024,))
        opt.zero_grad()
        loss = rel(fit_x[batch], fit_t[batch])
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        return (f"relative one-window error: fitted trajectories {float(rel(fit_x, fit_t)):.3g}, the other "
                f"{len(y) - n_fit} {float(rel(val_x, val_t)):.3g} ({iters} Adam iterations, "
                f"{time.process_time() - cpu:.0f} CPU s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a vp-gen file with the full state (coupled oscillator)")
    ap.add_argument("--observe", default="q")
    ap.add_argument("--windows", default="1,2,4")
    ap.add_argument("--models", nargs="*", default=[], help="trained window-to-window checkpoints (part 5)")
    ap.add_argument("--adam-iters", type=int, default=0, help="train the VPTs and delay_vpff by Adam (part 6)")
    ap.add_argument("--full", action="store_true", help="part 6 on the full state instead of the observation")
    ap.add_argument("--positional", default="",
                    help="comma list of the VPT's positional options to add (feedforward, mixing; parts 2, 6, 7)")
    ap.add_argument("--lm-budget", type=float, default=0.0, help="part 7: CPU seconds per run of the study's recipe")
    ap.add_argument("--patience", type=int, default=20, help="part 7: epochs without improvement")
    ap.add_argument("--seed", type=int, default=0, help="part 7: training seed")
    ap.add_argument("--runs", default="runs/vpt_observed_probe", help="part 7: where the run directories go")
    ap.add_argument("--n-heldout", type=int, default=100, help="part 7: held-out initial conditions")
    a = ap.parse_args(argv)
    windows = [int(t) for t in a.windows.split(",")]
    positionals = [v for v in a.positional.split(",") if v]
    data = read_trajectories(a.data)
    system = data.system
    obs = resolve_observation(a.observe, data.dim, system.state_names, system.name)
    assert obs is not None
    y_obs = np.asarray(data.y) @ obs.matrix.T
    print(f"{a.data}: {system.name} observed in {obs.describe()}, h = {data.dt:g}, {data.n_traj} trajectories x "
          f"{data.n_states} states")
    for T in windows:
        print(f"T = {T}: loader vs hand-cut windows, max |diff|: observed {loader_mismatch(a.data, a.observe, obs.matrix, T):.3g}, "
              f"full state {loader_mismatch(a.data, None, None, T):.3g}")
    for T in windows:
        vpt = VolumePreservingTransformer(obs.dim, T, n_blocks=4, L=4).double()
        dvp = DelayVolumeNet(obs.dim, T, n_blocks=4).double()
        pos = "".join(f", vpt positional={v} "
                      f"{equivariance_gap(VolumePreservingTransformer(obs.dim, T, 4, L=4, positional=v).double(), T, obs.dim):.3g}"
                      for v in positionals)
        print(f"T = {T}: relative equivariance gap |f(XP) - f(X)P| / |f(X)|: vpt {equivariance_gap(vpt, T, obs.dim):.3g}"
              f", delay_vpff {equivariance_gap(dvp, T, obs.dim):.3g}{pos}")
    for T in windows:
        print(f"T = {T}: relative error floor of any time-permutation-equivariant window map on observed "
              f"{obs.spec} (reversal-symmetrised windows): {reversal_bound(y_obs, T):.4g}")
    k = obs.dim
    for T in windows:
        if T * k != data.dim:
            print(f"T = {T}: window of {T * k} numbers for a state of {data.dim}: "
                  + ("not a function of the window (not Markovian)" if T * k < data.dim else
                     "windows fill a manifold of lower dimension; the window map has no determinant of its own"))
            continue
        ld = exact_delay_log_det(system, obs, np.asarray(data.y), data.dt, T)  # one-step delay map, per step
        ldT = np.lib.stride_tricks.sliding_window_view(ld, T, axis=1).sum(-1)  # T-step window map
        a_ld = np.abs(ldT)
        print(f"T = {T}: exact T-step window map |log det J|: median {np.median(a_ld):.3g}, p90 "
              f"{np.quantile(a_ld, 0.9):.3g}, max {a_ld.max():.3g} (one-step delay map: median "
              f"{np.median(np.abs(ld)):.3g})")
    for path in a.models:
        print(window_map_stability(path, y_obs))
    if a.adam_iters > 0:
        y = np.asarray(data.y, dtype=np.float64) if a.full else y_obs
        what = "the full state" if a.full else f"observed {obs.spec}"
        for T in windows:
            dim = y.shape[-1]
            rows = [("vpt", VolumePreservingTransformer(dim, T, n_blocks=4, L=4).double()),
                    ("vpt+offsets", PositionalVPT(VolumePreservingTransformer(dim, T, n_blocks=4, L=4).double())),
                    ("delay_vpff", DelayVolumeNet(dim, T, n_blocks=4).double())]
            rows += [(f"vpt positional={v}", VolumePreservingTransformer(dim, T, n_blocks=4, L=4, positional=v).double())
                     for v in positionals]
            for label, model in rows:
                print(f"T = {T}, {what}, {label}: {adam_fit(model, y, T, a.adam_iters)}", flush=True)
    if a.lm_budget > 0:
        for T in windows:
            for positional in ["none", *positionals]:
                label = "vpt" if positional == "none" else f"vpt positional={positional}"
                line = lm_fit(a.data, a.observe, T, positional, a.seed, a.lm_budget, a.patience, a.runs, a.n_heldout)
                print(f"T = {T}, observed {obs.spec}, {label}, study recipe (init_scale 0.3, seed {a.seed}), {line}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
