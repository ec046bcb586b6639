"""The context study of a family of systems: context-conditioned integrators
against the parameter-blind models, an unstructured in-context model and identification + classical.

The data file's system picks the rows (``SETUPS``): the rigid-body family (below) or the coupled-oscillator
family (``g_sympnet_ctx`` with the finite-difference context of k = 5 states and its oracle context, the
parameter-blind ``g_sympnet``, ``st``; identification and oracle with the symplectic ``gauss_legendre4``;
structure per state: the largest relative energy error, ``structure_per_state``; initial conditions in
``OSCILLATOR_BOX``).

Per seed and split (``parameters_interpolation`` / ``parameters_extrapolation``) each learned model is
trained with ``vp-train`` (Levenberg–Marquardt, float64, the same epochs for every model) on a
``rigid_body_family`` file. Each trained run is then rolled out on ``n_test`` **new** (initial condition,
parameters) pairs drawn from the region its split held out (``heldout_pairs``: the interpolation split's
cube inside the parameter box, or the extrapolation split's ends of the box; initial conditions uniform on
the unit sphere), the same pairs for every method of that seed. Every method reads the same prefix of
``context_len`` exact states (with observation noise σ: one draw per trajectory, the same for every
method; every method, the oracles included, starts from the noisy last prefix state). Errors are relative
to the exact flow (DOP853, 1e-12) at the horizons; a row that blew up counts as an infinite error.

Numbers per (method, split, σ, k, horizon): per seed the median over the pairs and its 10–90 % interval
(``median_interval``); over seeds the median of the per-seed medians with a percentile-bootstrap 95 %
interval (``bootstrap_ci``) and the number of seeds that meet the target (≤ 1e-3 at t = 10). Structure per
state: the largest change of the Casimir ‖z‖² between consecutive predicted states, over pairs that did not
blow up.

Rows: ``lpnet_ctx`` (finite-difference context) and the same trained step with the oracle context (the
true hθ); the parameter-blind ``lpnet`` and ``vpt``; the unstructured in-context ``st`` (standard
transformer, ``seq_len = k``); ``fd+rk4`` and ``shooting+rk4`` (identification, then RK4 with the fitted
parameters); ``oracle rk4`` (RK4 with the true parameters); ``parrot`` (context parroting: the training
trajectories' window nearest to the noisy prefix, its continuation copied; ``vpintegrator.rollout.parrot``;
in the runs made after it was added). The encoder ablation ``lpnet_ctx_attention``
(``--models lpnet_ctx_attention``): the same net with the attention encoder, trained by its recipe
(``RECIPES``: Adam).

    vp-gen rigid_body_family --set n_traj=600 --out datasets/rbf600.h5
    python -m vpintegrator.studies.context --data datasets/rbf600.h5 --out runs/context_study

Writes ``OUT/context_study.json`` (every per-seed number; the per-pair errors to ``ERROR_DIGITS``
significant digits), ``OUT/context_study.md`` (the tables) and the figures ``OUT/context_<axis>.png``/``.svg``
(``context_<system>_<axis>`` for a system other than the rigid body). The json accumulates: an invocation's
rows replace the rows with the same (system, split, k, σ, seed, method) and keep every other, so axes run in
separate invocations (or on both families) are tabulated together; ``--figures-only`` redraws from it (or,
with ``--results FILE``, from a shipped copy such as ``docs/data/context_oscillator.json``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..config import Config, key
from .._signals import run_child
from ..errors import VPIntegratorError
from ..rundir import is_complete, read_own_json
from .options import Study, comma_list, model_list, number_list, seed_list
from .runner import StudyError, check_out_dir
from .schema import Each, Obj, ResultsSchema, Values, check_results
from .stats import bootstrap_ci, median_interval, write_json, write_text
from ..quantiles import median

__all__ = ["H", "TARGET", "SETUPS", "RECIPES", "heldout_pairs", "merge_rows", "data_system", "exact_reference", "evaluate_methods", "train_run", "run_study",
           "summarize_rows", "tables", "figures", "export_best", "SHIPPED", "ContextOptions", "STUDY"]

H = 0.2
#: the issue's target: median error at t = 10 of the context-conditioned Lie–Poisson map
TARGET = (10.0, 1e-3)
HORIZONS = (1.0, 2.0, 5.0, 10.0, 20.0)
#: the learned rows, model name -> extra vp-train --set entries (besides context_len / seq_len)
LEARNED = ("lpnet_ctx", "lpnet", "vpt", "st")
#: vp-train settings of every learned row (besides --optimizer lm --dtype float64 --epochs)
COMMON = {"lm_windows": 4096}
#: the lpnet_ctx configuration the study trains (10 layers of width 4, 430 parameters)
LPNET_CTX = {"model.n_layers": 10, "model.width": 4}
#: rows trained by another recipe: row name -> (registered model, optimizer, epochs (None: the study's
#: --epochs), vp-train --set entries in place of COMMON). The encoder ablation: lpnet_ctx with the attention
#: encoder (2 076 parameters with 10 layers: LM's Jacobian is too large), Adam in float64, 120 epochs (about
#: lpnet_ctx's 30 LM epochs in wall time).
RECIPES: dict[str, tuple[str, str, int | None, dict[str, Any]]] = {
    "lpnet_ctx_attention": ("lpnet_ctx", "adam", 120, {**LPNET_CTX, "model.encoder": "attention",
                                                       "batch_size": 512, "lr": 0.003, "lr_min": 1e-5}),
}
#: the coupled-oscillator family's learned rows: the context-conditioned SympNet, the parameter-blind
#: SympNet, the unstructured in-context standard transformer
LEARNED_OSCILLATOR = ("g_sympnet_ctx", "g_sympnet", "st")
#: per system: the context length of the base axis, the learned rows, the row whose context length varies,
#: the classical integrator of the identification and oracle rows, the per-state structure measure and the
#: vp-train --set entries of each learned row (besides COMMON and context_len / seq_len)
SETUPS: dict[str, dict[str, Any]] = {
    "rigid_body": {"k": 3, "learned": LEARNED, "vary_k": ("lpnet_ctx",), "integrator": "rk4",
                   "structure": "casimir", "sets": {"lpnet_ctx": LPNET_CTX}},
    # gauss_legendre4: symplectic like the system's flow, and of order 4 like the rigid body's RK4
    "coupled_oscillator": {"k": 5, "learned": LEARNED_OSCILLATOR, "vary_k": ("g_sympnet_ctx",),
                           "integrator": "gauss_legendre4", "structure": "energy", "sets": {}},
}
#: the coupled-oscillator family's initial-condition box (q1, q2, p1, p2), as systems/coupled_oscillator_family.toml
OSCILLATOR_BOX = (np.array([-1.0, -1.0, -2.0, -2.0]), np.array([1.0, 1.0, 2.0, 2.0]))


def heldout_pairs(split_by: dict[str, Any], n: int, seed: int = 0,
                  system: str = "rigid_body") -> tuple[list[Any], np.ndarray]:
    """``n`` new (system, initial condition) pairs from the parameter region a run's split held out.

    ``split_by`` is the record ``vp-train`` writes (``summary.json``): the parameter columns' box
    ``low``/``high``, ``center`` and ``radius`` in the box scaled to [0, 1]. Interpolation: parameters
    uniform in the cube ``|u − center|∞ ≤ radius``; extrapolation: uniform in the box with
    ``|u − 0.5|∞ ≥ radius`` (rejection). Initial conditions: rigid body uniform on the unit sphere, coupled
    oscillator uniform in ``OSCILLATOR_BOX``. Returns the systems and y0 (n, dim).
    """
    from ..systems import CoupledOscillator, RigidBody
    from ..systems.family import system_with

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
    from ..data import solve_flow

    t = h * np.arange(n_steps + 1)
    return np.stack([solve_flow(s, y0[i : i + 1], t)[0] for i, s in enumerate(systems)])


def _roll(step, prefix: np.ndarray, sigma: float, n_steps: int, h: float = H) -> np.ndarray:
    """A step map's rollout from the prefix (n, k, 3): a context/identification step reads the whole prefix
    (adding the noise itself); a window model of ``seq_len`` s its last s noisy states."""
    from ..rollout import ContextStep, IdentifiedStep, rollout
    from ..rollout.identify import add_noise

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
    from ..rollout.family import FamilyStep

    n_steps = int(round(max(horizons) / h))
    ref = exact_reference(systems, y0, n_steps, h)
    prefix = ref[:, :k]
    rows = []

    def run(step, rows: slice) -> np.ndarray:
        if isinstance(step, FamilyStep):  # the classical oracle: from the noisy last prefix state
            from ..rollout import rollout
            from ..rollout.identify import add_noise

            start = add_noise(prefix[rows], sigma, 0)[:, -1:]
            return np.concatenate([prefix[rows, :-1], rollout(step, start, h, n_steps - (k - 1)).y], 1)
        return _roll(step, prefix[rows], sigma, n_steps, h)

    for label, make in methods.items():
        tic = time.process_time()
        try:
            y = run(make(), slice(None))
        except VPIntegratorError:
            from ..rollout import IdentifiedStep

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
        errors = {}
        for t in horizons:
            n = int(round(t / h))
            if n < k:
                continue  # inside the prefix: not a prediction
            e = np.linalg.norm(y[:, n] - ref[:, n], axis=-1) / np.linalg.norm(ref[:, n], axis=-1)
            errors[f"{t:g}"] = np.where(np.isfinite(e), e, np.inf).tolist()
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
        registered, optimizer, recipe_epochs, recipe = RECIPES[model]
        epochs = epochs if recipe_epochs is None else recipe_epochs
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
    from ..models import load_model
    from ..rollout import ContextStep, IdentifiedStep, IntegratorStep, ModelStep, ParrotStep
    from ..rollout.steps import is_context_model
    from ..rollout.family import FamilyStep
    from ..rollout.identify import theta_of
    from ..systems import CoupledOscillator, RigidBody
    from ..systems.family import SystemFamily

    family = SystemFamily(list(systems))
    theta = np.stack([theta_of(s) for s in systems])
    base = RigidBody() if system == "rigid_body" else CoupledOscillator()
    how = SETUPS[system]["integrator"]
    methods: dict[str, Any] = {
        f"oracle {how}": lambda: FamilyStep(family, lambda s: IntegratorStep(s, how, h)),
        f"fd+{how}": lambda: IdentifiedStep(base, "fd", how, h, context_len=k, noise=sigma),
        f"shooting+{how}": lambda: IdentifiedStep(base, "shooting", how, h, context_len=k, noise=sigma),
    }
    if parrot_context is not None:  # context parroting over the runs' training trajectories (rollout/parrot.py)
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
    from ..data import read_trajectories

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


#: significant digits of the per-pair errors in ``context_study.json`` (the tables show 2; the file stays ~1 MB)
ERROR_DIGITS = 4


def rounded_errors(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its per-pair errors rounded to ``ERROR_DIGITS`` significant digits (inf, or the "inf" a
    written file holds, stays inf)."""
    errors = {h: [float(f"{float(e):.{ERROR_DIGITS}g}") for e in v] for h, v in row["errors"].items()}
    return {**row, "errors": errors}


def write_compact_json(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as strict JSON on one line (no indentation: 100 errors per row), atomically."""
    import json

    from .stats import plain

    write_text(path, json.dumps(plain(doc), allow_nan=False, separators=(",", ":")) + "\n")


def _row_key(row: dict) -> tuple:
    return (row.get("system", "rigid_body"), row["split"], int(row["context_len"]), float(row["noise"]),
            int(row["seed"]), row["method"])


def merge_rows(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``old`` whose key (system, split, k, σ, seed, method) no row of ``new`` has, then ``new``:
    a re-run replaces its own rows and keeps every other (rows without ``system`` are the rigid body's)."""
    fresh = {_row_key(r) for r in new}
    return [r for r in old if _row_key(r) not in fresh] + list(new)


def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (split, k, σ, method, horizon): the per-seed medians and 10–90 % intervals, their median over
    seeds with a bootstrap 95 % interval, the seeds within the target and the largest per-state Casimir change."""
    def key(r: dict) -> tuple:
        return (r.get("system", "rigid_body"), r["split"], r["context_len"], r["noise"], r["method"])

    out = []
    for system, split, k, sigma, method in sorted({key(r) for r in rows}):
        mine = [r for r in rows if key(r) == (system, split, k, sigma, method)]
        horizons = sorted({h for r in mine for h in r["errors"]}, key=float)
        for h in horizons:
            per_seed = [median_interval(r["errors"][h]) for r in mine]
            medians = [p["median"] for p in per_seed]
            lo, hi = bootstrap_ci(medians)
            kind = SETUPS[system]["structure"]
            cas = [r[f"{kind}_per_state"] for r in mine if r.get(f"{kind}_per_state") is not None]
            out.append({"system": system, "split": split, "context_len": k, "noise": sigma, "method": method, "t": float(h),
                        "seeds": [r["seed"] for r in mine], "per_seed": per_seed,
                        "median": median(medians), "boot_lo": lo, "boot_hi": hi,
                        "within_target": int(sum(m <= TARGET[1] for m in medians)),
                        f"{kind}_per_state": max(cas) if cas else None,
                        "failed": int(sum(r["failed"] for r in mine))})
    return out


def _g(x) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.2g}"


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: one per (system, split, k, σ), a row per method at each horizon (the rigid body's
    headings without the system's name)."""
    lines = []
    settings = sorted({(s.get("system", "rigid_body"), s["split"], s["context_len"], s["noise"]) for s in summary})
    for system, split, k, sigma in settings:
        mine = [s for s in summary
                if (s.get("system", "rigid_body"), s["split"], s["context_len"], s["noise"]) == (system, split, k, sigma)]
        hs = sorted({s["t"] for s in mine})
        kind = SETUPS[system]["structure"]
        label = "max ΔCasimir per state" if kind == "casimir" else "max relative energy error"
        title = "" if system == "rigid_body" else f"{system}: "
        lines += ["", f"### {title}{split}, context_len {k}, noise σ = {sigma:g}", "",
                  "| method | " + " | ".join(f"t = {h:g}" for h in hs) + f" | seeds ≤ 1e-3 at t = 10 | {label} | failed |",
                  "|---|" + "---|" * (len(hs) + 3)]
        for method in sorted({s["method"] for s in mine}, key=_order):
            cells = []
            row10 = None
            for h in hs:
                s = next((x for x in mine if x["method"] == method and x["t"] == h), None)
                if s is None:
                    cells.append("—")
                    continue
                row10 = s if h == TARGET[0] else row10
                p10 = min(p["lo"] for p in s["per_seed"])
                p90 = max(p["hi"] for p in s["per_seed"])
                cells.append(f"{_g(s['median'])} [{_g(s['boot_lo'])}, {_g(s['boot_hi'])}] ({_g(p10)}–{_g(p90)})")
            last = row10 or next(x for x in mine if x["method"] == method)
            lines.append(f"| {method} | " + " | ".join(cells) +
                         f" | {last['within_target']}/{len(last['seeds'])} | {_g(last.get(kind + '_per_state'))} | {last['failed']} |")
    head = ("Cells: the median over seeds of the per-seed median error [bootstrap 95 % interval over seeds] "
            "(the smallest 10 % and largest 90 % quantile over pairs of any seed).")
    return head + "\n" + "\n".join(lines) + "\n"


_ORDER = ["lpnet_ctx", "lpnet_ctx oracle context", "lpnet_ctx_attention", "lpnet", "vpt", "g_sympnet_ctx",
          "g_sympnet_ctx oracle context", "g_sympnet", "st", "parrot", "fd+rk4", "shooting+rk4", "oracle rk4",
          "fd+gauss_legendre4", "shooting+gauss_legendre4", "oracle gauss_legendre4"]


def _order(method: str) -> int:
    return _ORDER.index(method) if method in _ORDER else len(_ORDER)


def figures(summary: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per system, one figure per axis: error vs horizon (interpolation, the base k, σ = 0), error at t = 10
    vs noise and vs context length; PNG and SVG under ``out`` (``context_<axis>`` for the rigid body,
    ``context_<system>_<axis>`` for another)."""
    paths: list[Path] = []
    for system in sorted({s.get("system", "rigid_body") for s in summary}):
        mine = [s for s in summary if s.get("system", "rigid_body") == system]
        paths += _system_figures(mine, out, "context" if system == "rigid_body" else f"context_{system}",
                                 SETUPS[system]["k"])
    return paths


def _system_figures(summary: list[dict], out: Path, prefix: str, k0: int) -> list[Path]:
    from ..plotting.style import figure, save_figure, styled

    paths: list[Path] = []

    @styled
    def draw(xkey: str, select, xlabel: str, stem: str, logx: bool = True, style=None):
        fig = figure(4.5, 3.0)
        ax = fig.add_subplot()
        rows = [s for s in summary if select(s)]
        for method in sorted({s["method"] for s in rows}, key=_order):
            pts = sorted((s[xkey], s["median"], s["boot_lo"], s["boot_hi"]) for s in rows if s["method"] == method)
            if not pts:
                continue
            x = np.array([p[0] for p in pts], dtype=float)
            if xkey == "noise":
                x = np.where(x == 0, 1e-4, x)  # σ = 0 drawn at 1e-4 (labelled)
            y = np.array([p[1] for p in pts])
            lo = np.array([p[2] if np.isfinite(p[2]) else p[1] for p in pts])
            hi = np.array([p[3] if np.isfinite(p[3]) else p[1] for p in pts])
            line, = ax.plot(x, y, marker="o", label=method)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median relative error")
        ax.axhline(TARGET[1], color="0.5", linestyle=":", linewidth=0.8)
        ax.legend(fontsize=6, ncols=2)
        return fig

    specs = [
        ("t", lambda s: s["split"] == "interpolation" and s["context_len"] == k0 and s["noise"] == 0, "t",
         f"{prefix}_horizon", True),
        ("noise", lambda s: s["split"] == "interpolation" and s["context_len"] == k0 and s["t"] == 10.0,
         "observation noise σ (σ = 0 at 1e-4)", f"{prefix}_noise", True),
        ("context_len", lambda s: s["split"] == "interpolation" and s["noise"] == 0 and s["t"] == 10.0,
         "context length k (error at t = 10)", f"{prefix}_length", False),
    ]
    for xkey, select, xlabel, stem, logx in specs:
        if len({s[xkey] for s in summary if select(s)}) < 2:
            continue
        fig = draw(xkey, select, xlabel, stem, logx)
        paths += save_figure(fig, out / stem, formats=("png", "svg"), overwrite=True)
    return paths


#: per system: the learned row ``--export`` ships and the name it is shipped under (``pretrained:<name>``)
SHIPPED = {"rigid_body": ("lpnet_ctx", "rigid_body_family_lpnet"),
           "coupled_oscillator": ("g_sympnet_ctx", "coupled_oscillator_family_g_sympnet_ctx")}


def _shipped_system(out: Path, split: str) -> str:
    """The system whose shipped row has finished runs under ``out/runs`` (``--export`` without ``--data``)."""
    found = [s for s, (model, _) in SHIPPED.items()
             if any(is_complete(d) for d in (out / "runs").glob(f"{model}_k{SETUPS[s]['k']}_{split}_seed*"))]
    if len(found) != 1:
        what = "no finished run of " + " or ".join(m for m, _ in SHIPPED.values()) if not found else \
            "runs of both families"
        raise VPIntegratorError(f"--export: {what} in {out / 'runs'}; give the --out of a context study (and --data "
                                "to pick the family when it holds both)", key="export")
    return found[0]


def _shown(path: Path | None, placeholder: str) -> str:
    """``path`` as a shipped record may show it: relative as given, else (absolute, or none) ``placeholder``."""
    return placeholder if path is None or Path(path).is_absolute() else Path(path).as_posix()


def _data_facts(data: Path | None) -> dict[str, Any] | None:
    """What ``pretrained_info(name)["data"]`` says of the training file: its spec, the ``vp-gen`` command that
    makes it again (from the file's own attributes: spec, dt, t_end, n_traj) and its description."""
    if data is None:
        return None
    import h5py

    with h5py.File(data, "r") as f:
        spec, dt, t_end, n = (str(f.attrs["spec"]), float(f.attrs["dt"]), float(f.attrs["t_end"]),
                              int(f.attrs["n_traj"]))
        description = str(f.attrs.get("description", ""))
    return {"spec": spec, "overrides": {"dt": dt, "t_end": t_end, "n_traj": n},
            "command": f"vp-gen {spec} --dt {dt:g} --t-end {t_end:g} --n-traj {n} --out {_shown(data, 'DATA.h5')}",
            "description": description}


def _seed_metric(out: Path, system: str, model: str, split: str, k: int, seed: int) -> float | None:
    """The shipped seed's median relative error at t = 10 over its held-out pairs (σ = 0), from the study's
    ``context_study.json`` (None before the study evaluated it)."""
    path = out / "context_study.json"
    if not path.is_file():
        return None
    for r in read_study_json(path)["rows"]:
        if (r.get("system", "rigid_body"), r["split"], int(r["context_len"]), float(r["noise"]), int(r["seed"]),
                r["method"]) == (system, split, k, 0.0, seed, model):
            return median_interval(r["errors"][f"{TARGET[0]:g}"])["median"]
    return None


def export_best(out: Path, out_dir: Path, name: str | None = None, split: str = "interpolation",
                k: int | None = None, system: str | None = None, data: Path | None = None) -> dict[str, Any]:
    """Ship the seed of the system's shipped row (``SHIPPED``: ``lpnet_ctx`` for the rigid body,
    ``g_sympnet_ctx`` for the coupled oscillator) in ``OUT/runs`` with the lowest validation score
    (``summary.json`` ``best_loss``: validation data only) as ``out_dir/<name>.pt``; its entry merged into
    ``out_dir/provenance.json`` (paths relative to ``out``): the selection, how it was trained (``recipe``, the
    split and, with ``data``, the ``vp-gen`` command of the training file) and its median error at t = 10 on
    its seed's held-out pairs (``metrics``, when ``OUT/context_study.json`` has it). ``system`` None: the one
    whose runs ``out`` holds (or ``data``'s)."""
    import json
    import math
    import shutil

    from .._io import atomic_path
    from ..provenance import provenance_record
    from .stats import read_json

    if system is None:
        system = data_system(data)[0] if data is not None else _shipped_system(out, split)
    model, default_name = SHIPPED[system]
    name = name or default_name
    k = SETUPS[system]["k"] if k is None else k
    scores, summaries = {}, {}
    for d in sorted((out / "runs").glob(f"{model}_k{k}_{split}_seed*")):
        summary = read_json(d / "summary.json")
        if d.is_dir() and summary is not None and is_complete(d) and (d / "best.pt").exists() \
                and math.isfinite(summary["best_loss"]):
            seed = int(d.name.rsplit("seed", 1)[1])
            scores[seed], summaries[seed] = float(summary["best_loss"]), summary
    if not scores:
        raise VPIntegratorError(f"--export: no finished {model} run in {out / 'runs'}", key="export")
    seed = min(scores, key=scores.__getitem__)
    source = out / "runs" / f"{model}_k{k}_{split}_seed{seed}" / "best.pt"
    summary = summaries[seed]
    sets = {**COMMON, **SETUPS[system]["sets"].get(model, {})}
    epochs = summary.get("epochs")
    info: dict[str, Any] = {
        "file": f"{name}.pt", "study": "python -m vpintegrator.studies.context --out RUN --export DIR",
        "source": str(source.relative_to(out)), "seed": seed, "monitor": summary.get("monitor"),
        "best_val": scores[seed], "val_by_seed": {str(s): v for s, v in sorted(scores.items())},
        "best_epoch": summary.get("best_epoch"), "train_loss_last": summary.get("train_loss"),
        "wall_time": summary.get("wall_time"), "n_params": summary.get("n_params"),
        "split_by": summary.get("split_by"),
        "phases": f"LM (float64) on a {system}_family file, split parameters_{split}, vp-train settings "
                  f"{json.dumps(sets)}, context_len {k}"}
    split_by = summary.get("split_by") or {}
    info["trained_on"] = {
        "data": _data_facts(data),
        "parametric": True,
        "split": {"seed": seed, "val_fraction": split_by.get("val_fraction"),
                  "test_fraction": split_by.get("test_fraction"), "split_by": f"parameters_{split}"},
        "recorded": "by the context study's export (the .pt file carries dt, system and split as vp-train wrote them)",
    }
    info["recipe"] = {
        "config": f"python -m vpintegrator.studies.context ({model}, LM float64, {epochs} epochs, "
                  f"lm_windows {COMMON['lm_windows']})",
        "command": f"python -m vpintegrator.studies.context --data {_shown(data, 'DATA')} --out {_shown(out, 'RUN')} "
                   f"--seeds {','.join(map(str, sorted(scores)))} "
                   f"--epochs {epochs} --models {model} --context-lens {k} --splits {split}"}
    metric = _seed_metric(out, system, model, split, k, seed)
    if metric is not None:
        info["metrics"] = {
            "protocol": f"100 held-out (initial condition, parameters) pairs inside seed {seed}'s held-out "
                        f"parameter region ({split}), prefix of {k} exact states, against the exact flow (DOP853, "
                        "1e-12)",
            "rel_error_t10_median": metric,
            "command": info["recipe"]["command"],
            "source": "context_study.json of the study (vp-study context)"}
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / info["file"]) as tmp:
        shutil.copyfile(source, tmp)
    info["provenance"] = provenance_record([source], relative_to=out)
    previous = read_json(out_dir / "provenance.json") or {}
    models = {m: v for m, v in (previous.get("models") or {}).items() if m != name}
    write_json(out_dir / "provenance.json", {"rule": previous.get("rule"), "models": {**models, name: info}})
    return info


SPLITS = ("interpolation", "extrapolation")


def _splits(value: Any) -> list[str]:
    names = [n.strip() for n in comma_list(value, "splits").split(",") if n.strip()]
    if not names or any(n not in SPLITS for n in names):
        raise VPIntegratorError(f"splits must be a comma list out of {', '.join(SPLITS)}; got {value!r}", key="splits")
    from ..config import distinct

    return distinct(names, "splits")


@dataclass
class ContextOptions(Config):
    """The context study's keys. Its trainings count epochs and run one after another, so it takes none of the
    budget and job keys the other studies share (``StudyOptions``).

    Parameters
    ----------
    data : str
        A rigid_body_family or coupled_oscillator_family file (its system picks the rows); needed unless
        --figures-only or --export.
    out : str
        Run directory (created): runs/, context_study.json, .md and the figures.
    seeds : list of int
        Comma list of training seeds (default 0,1,2,3,4).
    epochs : int
        Training epochs of every learned row (a RECIPES row may set its own).
    n_test : int
        Held-out (initial condition, parameters) pairs per seed and axis.
    models : str
        Comma list of learned rows (default: the system's, SETUPS; lpnet_ctx_attention: the encoder ablation).
    noise : list of float
        Observation noise values σ on the interpolation split at the system's base context length (default
        0,0.001,0.01).
    context_lens : list of int
        Context lengths k on the interpolation split at σ = 0 (default 3,5,10,20; 5,10,20 for the oscillator).
    splits : list of str
        Comma list out of interpolation, extrapolation (default both).
    figures_only : bool
        Redraw the tables and figures from OUT's context_study.json (or from --results).
    table_only : bool
        The same as --figures-only (the flag of every study).
    results : str
        With --figures-only: the results file to redraw from in place of OUT's context_study.json, the name of
        one shipped with the package (vp-study --list names them: context_oscillator) or a path; the tables
        and figures are written to OUT.
    export : str
        Ship the best validation seed of the family's context model (lpnet_ctx, g_sympnet_ctx) to this directory
        (with its provenance; --data adds the training file's vp-gen command) and exit.
    """

    _source_in_messages = False

    data: str | None = key(None, optional=True, type=str, metavar="H5")
    out: str | None = key(None, optional=True, type=str, metavar="RUN")
    seeds: list[int] | None = key(None, optional=True, check=seed_list, metavar="LIST")
    epochs: int = key(30, type=int, low=1)
    n_test: int = key(100, type=int, low=1)
    models: str | None = key(None, optional=True, check=lambda v: comma_list(v, "models"), metavar="LIST")
    noise: list[float] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(float, "noise", 0.0, "noise values >= 0"))
    context_lens: list[int] | None = key(None, optional=True, metavar="LIST",
                                         check=number_list(int, "context_lens", 3, "integers >= 3"))
    splits: list[str] | None = key(None, optional=True, check=_splits, metavar="LIST")
    figures_only: bool = key(False, type=bool)
    table_only: bool = key(False, type=bool)
    results: str | None = key(None, optional=True, type=str, metavar="NAME|JSON")
    export: str | None = key(None, optional=True, type=str, metavar="DIR")


@dataclass(frozen=True)
class ContextPlan:
    """The context study's keys, resolved once (``build_plan``): ``figures_only`` is --figures-only or
    --table-only; a None axis is the system's default (known once --data is read)."""

    out: str
    data: str | None
    seeds: list[int]
    epochs: int
    n_test: int
    models: str | None
    noise: list[float] | None
    context_lens: list[int] | None
    splits: list[str] | None
    figures_only: bool
    results: str | None
    export: str | None


def build_plan(options: ContextOptions, argv: tuple[str, ...] = ()) -> ContextPlan:
    """The study's plan from its checked keys (``--out`` required)."""
    o = options
    if o.out is None:
        raise StudyError("--out is required (the flag, or out in the --plan file)")
    return ContextPlan(o.out, o.data, o.seeds or [0, 1, 2, 3, 4], o.epochs, o.n_test, o.models, o.noise,
                       o.context_lens, o.splits, o.figures_only or o.table_only, o.results, o.export)


def _run(a: ContextPlan) -> int:
    out = Path(a.out)
    check_out_dir(out)
    path = out / "context_study.json"
    if a.export is not None:
        info = export_best(out, Path(a.export), data=Path(a.data) if a.data is not None else None)
        print(f"pretrained: {Path(a.export) / info['file']} <- {info['source']} (seed {info['seed']}, "
              f"validation {info['best_val']:.4g})")
        return 0
    if a.figures_only:  # --results without it: refused when parsed (options.parse_command)
        if a.results is not None:
            from .._shipped import results_path

            path = results_path(a.results, key="results")  # a file, or a shipped results file by name
        elif not path.is_file():
            raise StudyError(f"--figures-only: {path} not found; give the --out of an earlier study (or --results)")
        rows = read_study_json(path)["rows"]
        out.mkdir(parents=True, exist_ok=True)
    else:
        if a.data is None:
            raise StudyError("--data is required (the flag, or data in the --plan file) unless --figures-only or "
                             "--export")
        system, h = data_system(Path(a.data))
        k0 = SETUPS[system]["k"]
        context_lens = a.context_lens or ([3, 5, 10, 20] if system == "rigid_body" else [5, 10, 20])
        from ..models import list_models

        # the learned rows: registered models, RECIPES rows or module:Class paths
        models = model_list(a.models, "--models", [*list_models(), *RECIPES], paths=True) if a.models \
            else list(SETUPS[system]["learned"])
        axes: list[tuple[str, int, float]] = [(split, k0, 0.0) for split in (a.splits or SPLITS)]
        axes += [("interpolation", k0, s) for s in (a.noise if a.noise is not None else [0.0, 0.001, 0.01])
                 if s != 0]
        axes += [("interpolation", k, 0.0) for k in context_lens if k != k0]
        check_study_sizes(Path(a.data), a.n_test, axes, len(models), h)  # before any training
        out.mkdir(parents=True, exist_ok=True)
        try:
            new = run_study(Path(a.data), out, a.seeds, a.epochs, a.n_test, axes, models,
                            system=system, h=h)
        except subprocess.CalledProcessError as exc:
            run = exc.cmd[exc.cmd.index("--out") + 1]
            raise StudyError(f"vp-train of {run} failed (exit {exc.returncode}; its message is above); fix it and "
                             f"run the same command again (finished runs are kept)") from None
        previous = read_study_json(path) if path.exists() else {}
        commands = previous.get("commands") or ([previous["command"]] if "command" in previous else [])
        rows = [rounded_errors(r) for r in merge_rows(previous.get("rows", []), new)]
        command = " ".join(["python -m vpintegrator.studies.context", *sys.argv[1:]])  # no path of this machine
        write_compact_json(path, {"commands": [*commands, command], "rows": rows})
    summary = summarize_rows(rows)
    write_text(out / "context_study.md", tables(summary))
    figures(summary, out)
    print(tables(summary))
    return 0


def check_study_sizes(data: Path, n_test: int, axes: Sequence[tuple[str, int, float]], n_models: int,
                      h: float) -> None:
    """Refuse, before any training, what the evaluation could not hold or cut: the test rollouts of ``n_test``
    pairs (``vpintegrator.resources.check_size``: every method's rollout and the reference, (n_test,
    n_steps + 1, dim) float64 each) and a context length that is not shorter than the rollout (``HORIZONS``)
    or than the data's trajectories (a training window needs the context and a next state)."""
    import h5py

    from ..resources import check_size

    with h5py.File(data, "r") as f:
        n_states, dim = (int(n) for n in f["y"].shape[1:]) if "y" in f else (0, 3)
    n_steps = int(round(max(HORIZONS) / h))
    check_size("n_test", int(n_test) * (n_steps + 1) * dim, 8, f"the test rollouts ({n_test} pairs × {n_steps + 1} "
               f"states × {dim}, per method)", copies=n_models + 6)
    for _, k, _ in axes:
        if k >= n_steps:
            raise VPIntegratorError(f"context_lens: a context of {k} states is not shorter than the test rollout "
                                    f"({n_steps} steps to t = {max(HORIZONS):g}); give context lengths < {n_steps}",
                                    key="context_lens")
        if n_states and k >= n_states:
            raise VPIntegratorError(f"context_lens: a context of {k} states is not shorter than the trajectories of "
                                    f"--data {data} ({n_states} states); give context lengths < {n_states} or longer "
                                    "trajectories", key="context_lens")


#: a row of context_study.json (``vpintegrator.studies.schema``): one method, split, context length, noise, seed
ROW = Obj(required={"system": "str", "split": "str", "context_len": "int", "noise": "number", "seed": "int?",
                    "method": "str", "errors": Values(Each("number?"))},
          optional={"energy_per_state": "number?", "failed": "int?", "cpu_seconds": "number?"})
#: what context_study.json holds
SCHEMA = ResultsSchema("context", {"rows": Each(ROW)})


def read_study_json(path: Path) -> dict[str, Any]:
    """``context_study.json`` as this study wrote it (``{"commands": [...], "rows": [{...}, ...]}``), checked
    against ``SCHEMA``: a missing, empty, damaged or foreign file, a row without a key or with a string for a
    number, is a one-line error naming it (and the row and key) and saying to delete it."""
    fix = (f"delete it and run the study again without --figures-only (the finished runs in {path.parent / 'runs'} "
           "are kept)")
    doc = read_own_json(path, "the context study's results", fix)
    try:
        return check_results(doc, path, replace(SCHEMA, fix=fix))
    except StudyError as err:
        raise VPIntegratorError(str(err)) from None


def run(a: ContextPlan) -> int:
    try:
        return _run(a)
    except VPIntegratorError as err:
        raise StudyError(err.render(lambda key: "--" + key.replace("_", "-"))) from None


#: the study as the runner runs it (``vp-study context``, ``python -m vpintegrator.studies.context``)
STUDY = Study(ContextOptions, run, build_plan, doc=__doc__, required=("out",),
              prog="python -m vpintegrator.studies.context", error_prefix="context study: error: ",
              interrupted="context study: interrupted; run the same command again: the finished runs (those with a "
                          "complete.json) are kept, an unfinished one is trained again")


if __name__ == "__main__":
    from .driver import main

    sys.exit(main(STUDY))
