"""The context study's runs and evaluation: the held-out (system, initial condition) pairs, the exact
reference, the trainings (``vp-train``), the rows (``_methods``) and their errors per horizon."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..._signals import run_child
from ...errors import VPIntegratorError
from ...quantiles import median
from ...rundir import is_complete, read_own_json
from ..stats import relative_errors
from .design import COMMON, H, HORIZONS, LEARNED, OSCILLATOR_BOX, RECIPES, SETUPS


def heldout_pairs(split_by: dict[str, Any], n: int, seed: int = 0,
                  system: str = "rigid_body") -> tuple[list[Any], np.ndarray]:
    """``n`` new (system, initial condition) pairs from the parameter region a run's split held out.

    ``split_by`` is the record ``vp-train`` writes (``summary.json``): the parameter columns' box
    ``low``/``high``, ``center`` and ``radius`` in the box scaled to [0, 1]. Interpolation: parameters
    uniform in the cube ``|u − center|∞ ≤ radius``; extrapolation: uniform in the box with
    ``|u − 0.5|∞ ≥ radius`` (rejection). Initial conditions: rigid body uniform on the unit sphere, coupled
    oscillator uniform in ``OSCILLATOR_BOX``. Returns the systems and y0 (n, dim).
    """
    from ...systems import CoupledOscillator, RigidBody
    from ...systems.family import system_with

    columns = list(split_by.get("columns", []))
    want = {"rigid_body": ["inertia[0]", "inertia[1]", "inertia[2]"],
            "coupled_oscillator": ["m[0]", "m[1]", "k1", "k2", "k"]}.get(system)
    if want is None:
        raise VPIntegratorError(f"heldout_pairs: system must be one of {', '.join(SETUPS)}; got {system!r}",
                                key="system")
    if columns != want:
        what = "the three inertias" if system == "rigid_body" else "the masses and springs " + ", ".join(want)
        raise VPIntegratorError(f"heldout_pairs: the split must hold out {what}; got columns {columns}",
                                key="split_by")
    p = len(columns)
    low, high = np.asarray(split_by["low"]), np.asarray(split_by["high"])
    center, radius = np.asarray(split_by["center"]), float(split_by["radius"])
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 34, 2]))
    if split_by["mode"] == "interpolation":
        u = center + radius * rng.uniform(-1.0, 1.0, size=(n, p))
    else:
        if radius >= 0.5:  # |u - 0.5| <= 0.5 in the box: nothing lies outside the held-in cube
            raise VPIntegratorError(f"heldout_pairs: the extrapolation split's radius {radius:g} leaves no held-out "
                                    "region of the box (it must be below 0.5): generate the family with more "
                                    "trajectories, or split it by interpolation", key="split_by")
        parts: list[np.ndarray] = []
        while sum(len(q) for q in parts) < n:
            cand = rng.uniform(0.0, 1.0, size=(4 * n, p))
            parts.append(cand[np.abs(cand - 0.5).max(1) >= radius])
        u = np.concatenate(parts)[:n]
    values = low + u * (high - low)
    if system == "rigid_body":
        systems = [RigidBody((float(row[0]), float(row[1]), float(row[2]))) for row in values]
        y0 = rng.normal(size=(n, 3))
        return systems, y0 / np.linalg.norm(y0, axis=1, keepdims=True)
    oscillators: list = [system_with(CoupledOscillator(), columns, row) for row in values]
    return oscillators, rng.uniform(OSCILLATOR_BOX[0], OSCILLATOR_BOX[1], size=(n, 4))


def data_system(data: Path) -> tuple[str, float]:
    """The system name and sampling step h of a family data file; a system without a study is a one-line error."""
    import h5py

    try:
        with h5py.File(data, "r") as f:
            name, dt = str(f.attrs["system"]), float(f.attrs["dt"])
    except (OSError, KeyError) as exc:
        raise VPIntegratorError(f"--data {data}: not a trajectory file with 'system' and 'dt' ({exc})",
                                key="data") from None
    if name not in SETUPS:
        raise VPIntegratorError(f"--data {data}: the context study knows the families of {', '.join(SETUPS)}; "
                                f"got {name!r}", key="data")
    return name, dt


def exact_reference(systems: Sequence[Any], y0: np.ndarray, n_steps: int, h: float = H) -> np.ndarray:
    """The exact flow (DOP853, 1e-12) of each pair; (n, n_steps + 1, dim)."""
    from ...data import solve_flow

    t = h * np.arange(n_steps + 1)
    return np.stack([solve_flow(s, y0[i : i + 1], t)[0] for i, s in enumerate(systems)])


def _roll(step, prefix: np.ndarray, sigma: float, n_steps: int, h: float = H) -> np.ndarray:
    """A step map's rollout from the prefix (n, k, 3): a context/identification step reads the whole prefix
    (adding the noise itself); a window model of ``seq_len`` s its last s noisy states."""
    from ...rollout import ContextStep, IdentifiedStep, rollout
    from ...rollout.identify import add_noise

    if isinstance(step, (ContextStep, IdentifiedStep)):
        return rollout(step, prefix, h, n_steps).y
    k, s = prefix.shape[1], int(step.seq_len)
    start = add_noise(prefix, sigma, 0)[:, k - s :]
    return np.concatenate([prefix[:, : k - s], rollout(step, start, h, n_steps - (k - s)).y], 1)


def structure_per_state(kind: str, y: np.ndarray, systems: Sequence[Any], k: int) -> float | None:
    """The largest per-state structure error of rollouts y (n, T, dim) past the prefix's k states, over the
    rows that stayed finite (None if none did).

    ``"casimir"`` (rigid body): the largest |‖z_{n+1}‖² − ‖z_n‖²| between consecutive predicted states.
    ``"energy"`` (coupled oscillator, a symplectic map keeps no exact invariant but bounds the energy error):
    the largest relative energy error |H(z_n) − H(z_k)| / |H(z_k)| of a predicted state against the first
    predicted state, with each pair's true parameters.
    """
    ok = np.isfinite(y).all(axis=(1, 2))
    if not ok.any():
        return None
    if kind == "casimir":
        cas = np.sum(y[ok, k - 1 :] ** 2, axis=-1)
        return float(np.abs(np.diff(cas[:, 1:], axis=1)).max())
    energy = np.stack([systems[int(i)].hamiltonian(y[i, k:]) for i in np.flatnonzero(ok)])
    return float((np.abs(energy - energy[:, :1]) / np.abs(energy[:, :1])).max())


def evaluate_methods(methods: dict[str, Callable[[], Any]], systems: Sequence[Any], y0: np.ndarray, k: int,
                     sigma: float, horizons: Sequence[float] = HORIZONS, h: float = H,
                     structure: str = "casimir") -> list[dict[str, Any]]:
    """Roll out each method (label -> a function making its step map) on the pairs; one row per method with
    per-pair relative errors at the horizons past the prefix, the per-state structure error
    (``structure_per_state``: ``casimir_per_state`` or ``energy_per_state``) and CPU s."""
    from ...rollout.family import FamilyStep

    n_steps = int(round(max(horizons) / h))
    ref = exact_reference(systems, y0, n_steps, h)
    prefix = ref[:, :k]
    rows = []

    def run(step, rows: slice) -> np.ndarray:
        if isinstance(step, FamilyStep):  # the classical oracle: from the noisy last prefix state
            from ...rollout import rollout
            from ...rollout.identify import add_noise

            start = add_noise(prefix[rows], sigma, 0)[:, -1:]
            return np.concatenate([prefix[rows, :-1], rollout(step, start, h, n_steps - (k - 1)).y], 1)
        return _roll(step, prefix[rows], sigma, n_steps, h)

    for label, make in methods.items():
        tic = time.process_time()
        try:
            y = run(make(), slice(None))
        except VPIntegratorError:
            from ...rollout import IdentifiedStep

            if not isinstance(make(), IdentifiedStep):
                raise
            # an identification that fits parameters no system has (a negative mass from a noisy prefix):
            # row by row (the noise draw is per row), a refused row counts as failed (infinite error)
            y = np.full(ref.shape, np.nan)
            for i in range(len(systems)):
                try:
                    y[i] = run(make(), slice(i, i + 1))[0]
                except VPIntegratorError:
                    pass
        cpu = time.process_time() - tic
        ok = np.isfinite(y).all(axis=(1, 2))
        ahead = [t for t in horizons if int(round(t / h)) >= k]  # inside the prefix: not a prediction
        errors = dict(zip((f"{t:g}" for t in ahead), relative_errors(y, ref, [int(round(t / h)) for t in ahead]).values()))
        per_state = structure_per_state(structure, y, systems, k)
        rows.append({"method": label, "errors": errors, f"{structure}_per_state": per_state,
                     "failed": int((~ok).sum()), "cpu_seconds": cpu})
    return rows


def train_run(data: Path, out: Path, model: str, seed: int, epochs: int, k: int, split: str,
              extra: dict[str, Any] | None = None) -> Path:
    """``vp-train`` of one learned row (skipped when its run finished: ``vpintegrator.rundir.is_complete``, the
    completion record, never the presence of ``best.pt``; an interrupted run is trained again); the run
    directory.

    A row of ``RECIPES`` trains its registered model with the recipe's optimizer and settings (in place of
    LM and ``COMMON``); every other row LM in float64 with ``COMMON`` and ``extra``."""
    run = out / "runs" / f"{model}_k{k}_{split}_seed{seed}"
    if is_complete(run):
        return run
    registered, optimizer, sets = model, "lm", {**COMMON, **(extra or {})}
    if model in RECIPES:
        registered, optimizer, per_epoch, recipe = RECIPES[model]
        epochs *= per_epoch
        sets = {**recipe, **(extra or {})}
    cmd = [sys.executable, "-m", "vpintegrator.cli.train", "--data", str(data), "--model", registered, "--optimizer",
           optimizer, "--epochs", str(epochs), "--dtype", "float64", "--seed", str(seed), "--split-by",
           f"parameters_{split}", "-q", "--out", str(run), "--overwrite"]
    if registered.endswith("_ctx"):
        sets["model.context_len"] = k
    elif model == "st":
        sets["model.seq_len"] = k
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    run_child(cmd, check=True, stdout=subprocess.DEVNULL)  # dies with the study
    return run


def _methods(runs: dict, split_by: dict, systems: Sequence, k: int, sigma: float, h: float = H,
             system: str = "rigid_body", parrot_context: np.ndarray | None = None) -> dict:
    """The rows (label -> a function making the step map); ``parrot_context`` (n_train, T, dim): the
    training trajectories of the parrot row (none without them)."""
    from ...models import ParrotStep, load_model
    from ...rollout import ContextStep, IdentifiedStep, IntegratorStep, ModelStep
    from ...rollout.steps import is_context_model
    from ...rollout.family import FamilyStep
    from ...rollout.identify import theta_of
    from ...systems import CoupledOscillator, RigidBody
    from ...systems.family import SystemFamily

    family = SystemFamily(list(systems))
    theta = np.stack([theta_of(s) for s in systems])
    base = RigidBody() if system == "rigid_body" else CoupledOscillator()
    how = SETUPS[system]["integrator"]
    methods: dict[str, Any] = {
        f"oracle {how}": lambda: FamilyStep(family, lambda s: IntegratorStep(s, how, h)),
        f"fd+{how}": lambda: IdentifiedStep(base, "fd", how, h, context_len=k, noise=sigma),
        f"shooting+{how}": lambda: IdentifiedStep(base, "shooting", how, h, context_len=k, noise=sigma),
    }
    if parrot_context is not None:  # context parroting over the runs' training trajectories (models/parrot.py)
        methods["parrot"] = lambda: ParrotStep(parrot_context, context_len=k)
    for name, run in runs.items():
        model = load_model(run / "best.pt").double()
        if is_context_model(model):
            methods[name] = lambda model=model: ContextStep(model, noise=sigma)
            if getattr(model, "oracle_ready", False):
                methods[f"{name} oracle context"] = lambda model=model: ContextStep(model, context="oracle",
                                                                                     theta=theta, dt=h, noise=sigma)
        else:
            methods[name] = lambda model=model: ModelStep(model, device="cpu")
    return methods


def run_study(data: Path, out: Path, seeds: Sequence[int], epochs: int, n_test: int = 100,
              axes: Sequence[tuple[str, int, float]] = (), models: Sequence[str] = LEARNED,
              log: Callable[[str], Any] = print, system: str = "rigid_body",
              h: float = H) -> list[dict[str, Any]]:
    """Train (or reuse) and evaluate every (split, k, σ) of ``axes`` for every seed; the per-seed rows.

    The rows of ``SETUPS[system]["vary_k"]`` (and ``RECIPES`` rows, ``_ctx`` variants) train at every k;
    the other learned rows at the system's base k only."""
    from ...data import read_trajectories

    setup = SETUPS[system]
    rows: list[dict] = []
    for split, k, sigma in axes:
        for seed in seeds:
            runs = {}
            for m in models:
                if m not in setup["vary_k"] and m not in RECIPES and k != setup["k"]:
                    continue  # the other learned rows on the base-k settings only
                runs[m] = train_run(data, out, m, seed, epochs, k, split, setup["sets"].get(m))
            first = next(iter(runs.values()))
            summary = read_own_json(first / "summary.json", "a vp-train summary",
                                    f"delete the run directory {first} (it is trained again)")
            split_by = summary["split_by"]
            systems, y0 = heldout_pairs(split_by, n_test, seed, system)
            train = read_trajectories(data, traj=summary["split"]["train"]).y  # the parrot's context
            methods = _methods(runs, split_by, systems, k, sigma, h, system, parrot_context=train)
            for r in evaluate_methods(methods, systems, y0, k, sigma, HORIZONS, h, setup["structure"]):
                rows.append({"system": system, "split": split, "context_len": k, "noise": sigma, "seed": seed, **r})
                log(f"{system} {split} k={k} σ={sigma:g} seed {seed} {r['method']}: "
                    f"t=10 median {median(r['errors'].get('10', [np.nan])):.3g}, failed {r['failed']}")
    return rows
