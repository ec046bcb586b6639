"""The study "when the state is incomplete" (the documentation page of that name): multi-step models on
observed windows against the window without attention, the attention ablations, state estimation + the true
equations, and parroting.

Systems (``SYSTEMS``): the coupled oscillator observed in q (2 of 4 components; data from the
``coupled_oscillator_box`` spec) and the rigid body observed in (z1, z2) (2 of 3; the ``rigid_body`` spec,
initial conditions on the unit sphere), and the periodic Toda lattice of 50 sites observed in its first 4 PSD
coordinates (``psd:4``, the cotangent-lift basis fitted on the training split; ``toda``: trained on the 11
conditions of ``toda_bump``, scored on ``n_test`` held-out mu between them (``heldout_mu``), its file the exact flow to t = 100;
no estimation and no ``fullstate`` row, its full state the PSD decoder's). Data: ``n_train`` trajectories to ``t_train`` at h = 0.2 (DOP853,
1e-12), and ``n_test`` held-out initial conditions drawn from the file's own sampler with another seed
(``vp-rollout --heldout``; no model, and not the parrot, sees them), their exact flow (DOP853, 1e-12) to
t = 100. Training and rollout see the observed channels only
(``observe``); errors are on the observed channels against the exact flow, per held-out condition,
``‖ŷ(t) − y(t)‖ / ‖y(t)‖`` at t = 10 and t = 100; and in the full state (``full_state_errors``): every row's
full state at t estimated from its last 3 observed states by the estimation rows' least squares on the true
flow (a ``fullstate`` row's own state), against the exact flow: the observation is invertible from 3 states
on both systems, so every row has the column.

Approaches (``APPROACHES``), each at every window length T of ``windows``:

- ``vpt`` (the volume-preserving transformer: window of T to the next T; equivariant under reordering its
  window, as in GML), ``vpt_mix`` (the same with ``positional = "mixing"``: a learned unit-triangular shear
  across window positions before each attention, still volume preserving, not equivariant) and ``st`` (the
  standard transformer, softmax attention), the multi-step models with attention;
- ``delay_mlp``, ``delay_mlp2`` and ``delay_vpff`` (``vpintegrator.models.delay``): the window without
  attention, one step from the concatenated window (``delay_mlp2``: as the second difference
  x_{n+1} − 2x_n + x_{n−1}, Störmer–Verlet's position form, T ≥ 2) and a volume-preserving map of the whole
  window: the control that says whether attention adds anything over the window;
- ``fullstate``: the same MLP as ``delay_mlp`` at T = 1 trained on the **full** state (not observed): the
  one-step flow map, the upper bound of what the data can teach (its rollout observed for the observed columns);
- per trained VPT and ``vpt_mix`` (T > 1) their ablations as rows: ``+noattn`` (every attention the identity,
  ``without_attention``) and ``+meanattn`` (every attention's Λ(X) replaced by the constant Cayley of its
  mean C over the training windows, ``mean_attention``; a ``vpt_mix`` keeps its position mixing in both, so
  its ``+noattn`` row is the mixing without attention);
- ``estimate+gauss_legendre4`` (the full state recovered from the first ``context_len`` observed states by
  least squares on the true flow, then Gauss–Legendre 4 with the true equations: the known-equations
  competitor), ``parrot`` (the nearest training window's continuation) and ``delay_sindy+rk4`` (``sindy`` on
  the delay vectors (x_n, x_{n+1}) of the training file, the chosen field integrated by RK4: ``delay_sindy``),
  which do not depend on the seed.

T = 1 is the one-step map of the observation (no memory): what the window adds is the gap between T = 1
and T > 1.

Training: every learned approach the same recipe (``RECIPE``: Levenberg–Marquardt on subsamples of 2048
windows with 512 check windows, float64; an epoch is 10 iterations: for ``delay_mlp`` at T = 4 on the quick
data, Adam at 3e-3 (batch 256) plateaued at a validation error of 0.096 at t = 10, LM reached 0.0027 in 40 CPU
s) until its validation score (the validation trajectories' observed rollout error at t = 10, ``monitor = val_rollout``)
has not improved for ``patience`` epochs (its plateau) or its step budget is spent: ``budget_seconds`` of CPU as
whole epochs of that training's measured cost (``STEP_COSTS``, ``vpintegrator.studies.step_budget``), so that the
same command trains the same steps on any machine under any load (``--budget cpu`` restores a budget in process CPU
seconds); ``best.pt`` is the best-scoring epoch. Each run's ``summary.json`` says why it stopped (``stopped``:
``early_stopping`` = plateau reached; ``steps`` = the step budget spent first; ``time_limit`` = cut by the safety
valve, 10 times the budget's CPU seconds); the table has that column, every row its ``steps`` and ``stop_rule``. The coupling of each attention model is measured on held-out
windows (``vpintegrator.testing.attention_coupling``).

Numbers per (system, approach, T): per seed the median over held-out conditions (and its 10–90 % interval),
over seeds the median with a percentile-bootstrap 95 % interval (``bootstrap_ci``); the target of the target
(``TARGET``): the best learned model's median at t = 10 on the coupled oscillator is <= 1e-3 on >= 4 of 5
seeds.

    vp-study partial_observation --out runs/partial_observation --quick      # <= 10 min on 2 cores
    vp-study partial_observation --out runs/partial_observation              # the default size (--jobs 2: about 1 h on 2 cores)

Writes ``OUT/partial_observation.json`` (every per-seed number; rows of the same (system, seed, label) are
replaced, others kept) and ``OUT/partial_observation.md`` (the tables); ``--table-only`` rebuilds the tables
from the JSON, ``OUT/partial_observation_plateau.{png,svg}`` the validation plateau curves (drawn from the
JSON). Finished training runs (``complete.json``) are reused: run the same command again to resume. The options
become a frozen ``PartialObservationPlan`` once (``build_plan``); every function below takes it or plain values.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..config import key
from ..errors import VPIntegratorError
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, name_list, number_list
from .runner import StudyError, check_out_dir
from .step_budget import VALVE_FACTOR, StepBudget, nearest_cost, step_budget, stop_keys
from .schema import INTERVAL, Each, Obj, ResultsSchema, check_results
from .stats import (bootstrap_ci, fmt_num, md_table, median_interval, read_json, redraw_from, unplain, write_json,
                    write_text)

__all__ = ["H", "HORIZONS", "SYSTEMS", "APPROACHES", "MIN_T", "FULL_STATE", "DELAY_SINDY", "TARGET", "QUICK",
           "DEFAULTS", "TRAINING", "windows_of", "make_data", "heldout_mu", "heldout_data", "train_run",
           "train_runs", "evaluate_seed", "full_state_errors", "delay_sindy",
           "summarize_rows", "read_rows", "tables", "plateau_figure", "merge_rows", "PartialObservationOptions",
           "PartialObservationPlan", "build_plan", "STUDY", "run"]

#: the data step
H = 0.2
#: the horizons of the tables
HORIZONS = (10.0, 100.0)
#: study system -> its vp-gen spec, the observation, the estimation rows' context length
SYSTEMS: dict[str, dict[str, Any]] = {
    "coupled_oscillator": {"spec": "coupled_oscillator_box", "observe": "q", "context_len": 3},
    "rigid_body": {"spec": "rigid_body", "observe": "z1,z2", "context_len": 3},
    # the periodic Toda lattice, N = 50 sites (100 components), observed in the first 4 PSD coordinates fitted on
    # the training split; its 11 training conditions are toda_bump's mu, the held-out ones (toda_bump_heldout's
    # spec) n_test mu between them (heldout_mu; n_train does not apply)
    "toda": {"spec": "toda_bump", "heldout_spec": "toda_bump_heldout", "params": {"N": 50}, "observe": "psd:4",
             "context_len": 3, "fixed": ("parrot",), "exclude": ("fullstate",),
             "note": "Toda: 11 training conditions (toda_bump's mu = 0.30 ... 0.60, N = 50 sites), n_test held-out "
                     "conditions (mu at the midpoints of n_test equal bins of [0.30, 0.60], none a training mu), "
                     "exact flow (DOP853, "
                     "1e-12) to t = 100; observed in the first 4 PSD coordinates (cotangent lift) fitted on the "
                     "training split. No `estimate` row: recovering the 100 components from observed states by "
                     "least squares needs a window of 25 or more states and a 100-unknown problem per condition "
                     "(not built). No `fullstate` row: its Levenberg-Marquardt Jacobian on 100 components "
                     "(204 800 residuals x 7 400 parameters) does not fit this machine's memory. Full state: the "
                     "observed state decoded by the PSD basis (its projection error included), against the exact "
                     "flow."},
}
#: learned approach -> its [model] table (seq_len added per T)
APPROACHES: dict[str, dict[str, Any]] = {
    "vpt": {"name": "vpt", "n_blocks": 4, "L": 4},
    # the VPT with a learned unit-triangular shear across window positions before each attention (volume
    # preserving, not equivariant under reordering the window: docs/guarantees.md)
    "vpt_mix": {"name": "vpt", "n_blocks": 4, "L": 4, "positional": "mixing"},
    "st": {"name": "st"},
    # GML's symplectic transformer (its tutorial's L = 4, n_sympnet = 2): symplectic on the window's observed
    # coordinates taken as (q | p) halves, a structure of the window, not of the observed system's phase space
    "sympt": {"name": "symplectic_transformer", "L": 4, "n_sympnet": 2},
    "delay_mlp": {"name": "delay_mlp", "width": 32, "depth": 2},
    "delay_mlp2": {"name": "delay_mlp", "width": 32, "depth": 2, "increment": "second"},
    "delay_vpff": {"name": "delay_vpff", "n_blocks": 4},
    "fullstate": {"name": "delay_mlp", "width": 32, "depth": 2},
}
#: learned approach -> training keys besides ``RECIPE`` (the VPT starts from its weights times 0.3, as the
#: coupled-oscillator study's VPT does: at the default scale it starts at a relative one-window error of 4-8 on
#: observed windows and Levenberg-Marquardt stalls there; the symplectic transformer likewise: a 20-s probe on
#: the coupled oscillator at T = 2 ended at 2.2 from the default scale, 1.1 from 0.3)
TRAINING: dict[str, dict[str, Any]] = {"vpt": {"init_scale": 0.3}, "vpt_mix": {"init_scale": 0.3},
                                       "sympt": {"init_scale": 0.3}}
#: the approaches with attention (their coupling measured), and those whose ablations are rows
ATTENTION = ("vpt", "vpt_mix", "st", "sympt")
ABLATED = ("vpt", "vpt_mix")
#: approaches that need a window of at least this many states (``delay_mlp2`` extrapolates the last two)
MIN_T: dict[str, int] = {"delay_mlp2": 2}
#: approaches trained on the full state (one step, T = 1, every window length ignored): the upper bound
FULL_STATE = ("fullstate",)
#: the observed states the full-state error columns estimate a full state from (least squares on the true flow)
FULL_CONTEXT = 3
#: the seed of the held-out initial conditions (the training file's sampler, another stream)
HELDOUT_SEED = 7919
#: the rows that are not trained (the same for every seed)
FIXED_ROWS = ("estimate+gauss_legendre4", "parrot")
#: the target
TARGET: dict[str, Any] = {"system": "coupled_oscillator", "t": 10.0, "error": 1e-3, "seeds_needed": 4, "of": 5}
#: the delay-coordinate SINDy row: its label, the window T of its delay vectors, its integrator
DELAY_SINDY = ("delay_sindy+rk4", 2, "rk4")
#: the recipe every learned approach gets
RECIPE: dict[str, Any] = {"optimizer": "lm", "lm_windows": 2048, "lm_check_windows": 512, "lm_iters_per_epoch": 10,
                          "lm_resample_every": 10, "lm_lambda": 1e-3, "batch_size": 16384, "dtype": "float64",
                          "monitor": "val_rollout", "val_rollout_steps": 50, "val_rollout_error": "final",
                          "val_fraction": 0.15, "test_fraction": 0.0, "epochs": 100000}
#: (system, approach, T) -> CPU seconds of one epoch (10 Levenberg–Marquardt iterations and the validation
#: rollout) of that training, the median over the shipped default-size runs' epochs (``scripts/step_costs.py``,
#: one thread on the 2-core machine that made them): a budget of ``budget_seconds`` is that many whole epochs
#: (``step_budget``), the same steps on any machine under any load
STEP_COSTS: dict[tuple[str, str, int], float] = {
    ('coupled_oscillator', 'delay_mlp', 1): 3.321,
    ('coupled_oscillator', 'delay_mlp', 2): 3.882,
    ('coupled_oscillator', 'delay_mlp', 4): 4.827,
    ('coupled_oscillator', 'delay_mlp', 8): 6.617,
    ('coupled_oscillator', 'delay_mlp2', 2): 3.741,
    ('coupled_oscillator', 'delay_mlp2', 4): 4.802,
    ('coupled_oscillator', 'delay_mlp2', 8): 6.573,
    ('coupled_oscillator', 'delay_vpff', 1): 0.214,
    ('coupled_oscillator', 'delay_vpff', 2): 0.533,
    ('coupled_oscillator', 'delay_vpff', 4): 3.822,
    ('coupled_oscillator', 'fullstate', 1): 7.153,
    ('coupled_oscillator', 'st', 1): 0.389,
    ('coupled_oscillator', 'st', 2): 0.509,
    ('coupled_oscillator', 'st', 4): 1.012,
    ('coupled_oscillator', 'st', 8): 3.506,
    ('coupled_oscillator', 'sympt', 1): 0.389,
    ('coupled_oscillator', 'sympt', 2): 0.726,
    ('coupled_oscillator', 'sympt', 4): 1.4,
    ('coupled_oscillator', 'sympt', 8): 4.668,
    ('coupled_oscillator', 'vpt', 1): 0.839,
    ('coupled_oscillator', 'vpt', 2): 1.485,
    ('coupled_oscillator', 'vpt', 4): 2.736,
    ('coupled_oscillator', 'vpt', 8): 6.885,
    ('coupled_oscillator', 'vpt_mix', 1): 1.008,
    ('coupled_oscillator', 'vpt_mix', 2): 1.733,
    ('coupled_oscillator', 'vpt_mix', 4): 3.932,
    ('rigid_body', 'delay_mlp', 1): 3.081,
    ('rigid_body', 'delay_mlp', 2): 3.777,
    ('rigid_body', 'delay_mlp', 4): 4.526,
    ('rigid_body', 'delay_mlp', 8): 6.466,
    ('rigid_body', 'delay_mlp2', 2): 3.813,
    ('rigid_body', 'delay_mlp2', 4): 4.486,
    ('rigid_body', 'delay_mlp2', 8): 6.47,
    ('rigid_body', 'delay_vpff', 1): 0.274,
    ('rigid_body', 'delay_vpff', 2): 0.532,
    ('rigid_body', 'delay_vpff', 4): 3.75,
    ('rigid_body', 'fullstate', 1): 5.311,
    ('rigid_body', 'st', 1): 0.373,
    ('rigid_body', 'st', 2): 0.622,
    ('rigid_body', 'st', 4): 1.247,
    ('rigid_body', 'st', 8): 2.892,
    ('rigid_body', 'sympt', 1): 0.396,
    ('rigid_body', 'sympt', 2): 0.679,
    ('rigid_body', 'sympt', 4): 1.53,
    ('rigid_body', 'sympt', 8): 4.564,
    ('rigid_body', 'vpt', 1): 1.071,
    ('rigid_body', 'vpt', 2): 1.615,
    ('rigid_body', 'vpt', 4): 2.869,
    ('rigid_body', 'vpt', 8): 7.224,
    ('rigid_body', 'vpt_mix', 1): 1.289,
    ('rigid_body', 'vpt_mix', 2): 1.842,
    ('rigid_body', 'vpt_mix', 4): 4.033,
    ('toda', 'delay_mlp', 1): 3.623,
    ('toda', 'delay_mlp', 2): 4.353,
    ('toda', 'delay_mlp', 4): 5.965,
    ('toda', 'delay_mlp', 8): 11.689,
    ('toda', 'delay_mlp2', 2): 4.174,
    ('toda', 'delay_mlp2', 4): 6.742,
    ('toda', 'delay_mlp2', 8): 11.692,
    ('toda', 'delay_vpff', 1): 0.267,
    ('toda', 'delay_vpff', 2): 1.57,
    ('toda', 'st', 1): 0.463,
    ('toda', 'st', 2): 0.862,
    ('toda', 'st', 4): 1.798,
    ('toda', 'st', 8): 4.769,
    ('toda', 'sympt', 1): 0.515,
    ('toda', 'sympt', 2): 0.939,
    ('toda', 'sympt', 4): 1.891,
    ('toda', 'sympt', 8): 5.688,
    ('toda', 'vpt', 1): 1.601,
    ('toda', 'vpt', 2): 3.292,
    ('toda', 'vpt', 4): 6.272,
    ('toda', 'vpt', 8): 13.385,
    ('toda', 'vpt_mix', 1): 1.674,
    ('toda', 'vpt_mix', 2): 3.375,
    ('toda', 'vpt_mix', 4): 11.03,
}
#: Levenberg–Marquardt iterations (optimiser steps) per epoch of the recipe
STEPS_PER_EPOCH = 10
DEFAULTS: dict[str, Any] = {"n_train": 200, "n_test": 100, "t_train": 20.0, "windows": [1, 2, 4, 8],
                            "budget_seconds": 30.0, "patience": 20, "approaches": list(APPROACHES),
                            "seeds": [0, 1, 2, 3, 4], "systems": ["coupled_oscillator", "rigid_body"]}
QUICK: dict[str, Any] = {"n_train": 60, "n_test": 30, "t_train": 20.0, "windows": [1, 4], "budget_seconds": 10.0,
                         "patience": 5, "approaches": ["vpt", "vpt_mix", "delay_mlp", "delay_mlp2", "delay_vpff",
                                                    "fullstate"],
                         "seeds": [0, 1], "systems": list(SYSTEMS)}


def windows_of(approach: str, windows: Sequence[int]) -> list[int]:
    """The window lengths ``approach`` is trained at out of ``windows``: T = 1 alone for a full-state approach,
    those >= its ``MIN_T`` otherwise."""
    if approach in FULL_STATE:
        return [1]
    return [int(T) for T in windows if int(T) >= MIN_T.get(approach, 1)]


# --------------------------------------------------------------------------- data


def make_data(out: Path, system: str, n_train: int, t_train: float) -> Path:
    """The training file of ``system`` (seed 0, ``n_train`` trajectories to ``t_train``), written once under
    ``OUT/data``. The held-out conditions are drawn by the rollout from the file's own sampler with another seed
    (``vp-rollout --heldout``, ``HELDOUT_SEED``) and integrated by the exact flow to t = 100. A system with fixed
    initial conditions (a ``heldout_spec``: the Toda lattice) has its spec's conditions (``n_train`` does not
    apply) and its held-out file (``heldout_data``)."""
    from ..data import generate, load_spec

    info = SYSTEMS[system]
    folder = out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    if "heldout_spec" in info:
        train = folder / f"{system}_train_N{info['params']['N']}_t{t_train:g}.h5"
        if not train.is_file():
            generate(load_spec(info["spec"], params=info["params"], t_end=t_train, dt=H), out=train, workers=1)
        return train
    train = folder / f"{system}_train_n{n_train}_t{t_train:g}.h5"
    if not train.is_file():
        generate(load_spec(info["spec"], n_traj=n_train, t_end=t_train, dt=H, seed=0), out=train)
    return train


def heldout_mu(system: str, n_test: int) -> list[float]:
    """The ``n_test`` held-out parameters of a system with fixed initial conditions: the midpoints of
    ``n_test`` equal bins of its training values' range (for the Toda bump family, training mu = 0.30, 0.33 ...
    0.60: mu = 0.30 + 0.30 (k + 1/2) / n_test, none of them a training value; ``n_test = 10`` gives
    toda_bump_heldout's midpoints 0.315 ... 0.585)."""
    from ..data import load_spec

    info = SYSTEMS[system]
    mu = [float(m) for m in load_spec(info["spec"], params=info["params"]).sampler_args["mu"]]
    lo, hi = min(mu), max(mu)
    held = [round(lo + (hi - lo) * (k + 0.5) / int(n_test), 12) for k in range(int(n_test))]
    assert not set(held) & set(mu), "a held-out mu is a training mu"
    return held


def heldout_data(out: Path, system: str, n_test: int) -> Path | None:
    """The held-out file of a system with fixed initial conditions: its ``heldout_spec`` at the ``n_test``
    parameters of ``heldout_mu``, to t = 100 at ``H`` by DOP853 at 1e-12 (the exact flow), written once under
    ``OUT/data``; None for a system whose held-out conditions are drawn from its sampler."""
    from ..data import generate, load_spec

    info = SYSTEMS[system]
    if "heldout_spec" not in info:
        return None
    path = out / "data" / f"{system}_heldout_N{info['params']['N']}_n{int(n_test)}_t{max(HORIZONS):g}.h5"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        generate(load_spec(info["heldout_spec"], params=info["params"], t_end=max(HORIZONS), dt=H,
                           sampler_args={"mu": heldout_mu(system, n_test)}), out=path, workers=1)
    return path


# --------------------------------------------------------------------------- training


def _run_dir(out: Path, system: str, approach: str, T: int, seed: int) -> Path:
    return out / "runs" / system / f"{approach}_T{T}_seed{seed}"


def train_run(out: Path, train: Path, system: str, approach: str, T: int, seed: int, stop: dict[str, Any],
              patience: int, overwrite: bool = False) -> Path:
    """Train ``approach`` with window ``T`` and ``seed`` on the observed channels of ``train`` (on the full
    state for an approach of ``FULL_STATE``; the recipe of the module docstring), stopped by ``stop`` (the fit
    keys of the plan's budget: ``PartialObservationPlan.stop_keys``) or its plateau (``patience`` epochs), unless
    its run directory is complete already; returns the run directory."""
    from ..training import fit

    run = _run_dir(out, system, approach, T, seed)
    if (run / "complete.json").is_file() and not overwrite:
        return run
    fit({**RECIPE, **TRAINING.get(approach, {}), "data": [str(train)], "model": {**APPROACHES[approach], "seq_len": int(T)},
         "observe": None if approach in FULL_STATE else SYSTEMS[system]["observe"], "seed": int(seed),
         **stop, "patience": int(patience), "out": str(run)},
        overwrite=run.exists())
    return run


def _train_task(args: tuple[Any, ...]) -> Path:
    """``train_run(*args)`` in a worker; a library or file error comes back as one picklable line."""
    try:
        return train_run(*args)
    except (VPIntegratorError, OSError) as err:
        raise StudyError(f"training {args[3]} T = {args[4]} seed {args[5]} on {args[2]}: {err}") from None


def train_runs(plan: PartialObservationPlan,
               trains: dict[str, Path]) -> Iterator[tuple[str, int, dict[tuple[str, int], Path]]]:
    """Train every (approach, T) of every system and seed of ``plan`` (``train_run``: a finished run is
    reused), ``plan.jobs`` processes at a time (one thread each; each run's budget is its own process's CPU
    seconds, which other runs beside it do not bend); yields ``(system, seed, {(approach, T): run directory})``
    in the plan's order as soon as that seed's runs are done, while the later ones train."""
    tasks = [(system, seed, [(approach, T) for approach, T in plan.training_runs(system)])
             for system in plan.systems for seed in plan.seeds]

    def args(system: str, seed: int, approach: str, T: int) -> tuple[Any, ...]:
        return (plan.out, trains[system], system, approach, T, seed, plan.stop_keys(system, approach, T),
                plan.patience, plan.overwrite)

    if plan.jobs <= 1:
        for system, seed, pairs in tasks:
            yield system, seed, {(a, T): _train_task(args(system, seed, a, T)) for a, T in pairs}
        return
    from ..jobs.executors import worker_pool

    # the package's one pool: its workers die with the study (a kill -9 of it leaves none training); spawn: torch
    with worker_pool(plan.jobs, start="spawn", threads=1) as pool:
        futures = [(system, seed, {(a, T): pool.submit(_train_task, args(system, seed, a, T)) for a, T in pairs})
                   for system, seed, pairs in tasks]
        try:
            for system, seed, runs in futures:
                yield system, seed, {pair: future.result() for pair, future in runs.items()}
        except BaseException:
            for _, _, runs in futures:
                for future in runs.values():
                    future.cancel()
            raise


# --------------------------------------------------------------------------- evaluation


def _errors(y: np.ndarray, ref: np.ndarray, steps: Sequence[int]) -> dict[int, list[float]]:
    """Relative errors per held-out condition at each step of ``steps`` (inf where a rollout failed)."""
    out = {}
    for k in steps:
        num = np.linalg.norm(y[:, k] - ref[:, k], axis=-1)
        den = np.linalg.norm(ref[:, k], axis=-1)
        e = num / den
        out[k] = [float(v) if np.isfinite(v) else math.inf for v in e]
    return out


def full_state_errors(system: Any, observation: Any, y_obs: np.ndarray, ref_full: np.ndarray,
                      steps: Sequence[int]) -> dict[int, list[float]]:
    """The full-state relative error of an observed rollout ``y_obs`` (n, K, k) at each step of ``steps``:
    the full state at step k estimated from its observed states k − 2, k − 1, k by least squares on the true
    flow (``estimate_states``, the estimation rows' estimator), against ``ref_full`` (n, K, d), the exact flow
    in the full state; inf where the rollout failed or left the data's scale (|y| above 1e3 times the
    reference's largest)."""
    from ..rollout.observed import estimate_states

    out = {}
    bound = 1e3 * float(np.max(np.abs(ref_full)))
    for k in steps:
        w = y_obs[:, k - FULL_CONTEXT + 1:k + 1]
        ok = np.all(np.isfinite(w), axis=(1, 2)) & (np.max(np.abs(w), axis=(1, 2)) < bound)
        e = np.full(len(w), math.inf)
        if ok.any():
            z, _ = estimate_states(system, observation, w[ok], H)
            e[ok] = np.linalg.norm(z - ref_full[ok, k], axis=-1) / np.linalg.norm(ref_full[ok, k], axis=-1)
        out[k] = [float(v) if np.isfinite(v) else math.inf for v in e]
    return out


def delay_sindy(train_obs: np.ndarray, first: np.ndarray, n_steps: int, T: int = DELAY_SINDY[1],
                method: str = DELAY_SINDY[2]) -> tuple[np.ndarray, dict[str, Any]]:
    """Delay-coordinate SINDy: ``select_sindy`` (the ``sindy+METHOD`` rows' fit and selection by validation
    rollout) on the delay vectors z_n = (x_n, …, x_{n+T−1}) of the observed training trajectories ``train_obs``
    (n, K, k; the first 15 % of them the validation set), the chosen field integrated by ``method`` at ``H``
    from each held-out condition's first delay vector (its first T observed states, ``first`` (m, ≥ T, k)).

    Returns the observed rollout (m, n_steps + 1, k): the first T − 1 states as given, then the delay
    vector's last block; NaN where the fit has no skill or a trajectory's integration failed), and what was
    chosen (library, threshold, terms, validation score). The row is the rollout row ``delay_sindy+METHOD``
    ([`DelaySindyStep`][vpintegrator.rollout.delay_sindy.DelaySindyStep], its NumPy integrator path), run by
    the rollout engine with no blow-up bound; a held-out condition whose integration fails is NaN from its
    first delay vector on."""
    from ..rollout.delay_sindy import DelaySindyStep
    from ..rollout.engine import rollout

    train_obs = np.asarray(train_obs, dtype=np.float64)
    n_val = max(1, int(round(0.15 * len(train_obs))))
    step = DelaySindyStep(train_obs[n_val:], train_obs[:n_val], method, H, context_len=T, compiled=False)
    fit = step.fit_now()
    m, k = first.shape[0], first.shape[-1]
    pred = np.full((m, n_steps + 1, k), np.nan)
    pred[:, :T - 1] = first[:, :T - 1]
    if fit is None or fit.field is None:
        return pred, {"fit": None}
    out = rollout(step, np.ascontiguousarray(first[:, :T], dtype=np.float64), H, n_steps, blowup=math.inf)
    ok = np.ones(m, dtype=bool) if out.failed_step is None else out.failed_step < 0
    pred[ok, T - 1:] = out.y[ok, T - 1:]
    return pred, {"fit": {"library": fit.library, "threshold": fit.threshold, "n_terms": fit.n_terms,
                          "val_score": fit.score}}


def _has_pysindy() -> bool:
    import importlib.util

    return importlib.util.find_spec("pysindy") is not None


def _curve(run: Path) -> dict[str, list[float]]:
    """The validation-rollout score per epoch of a run (its ``log.csv``) against process CPU seconds."""
    import csv

    cpu, val = [], []
    log = run / "log.csv"
    if log.is_file():
        with open(log, newline="") as f:
            for rec in csv.DictReader(f):
                try:
                    cpu.append(float(rec["cpu_seconds"]))
                    val.append(float(rec["val_rollout"]))
                except (KeyError, TypeError, ValueError):
                    continue
    return {"cpu": cpu, "val": val}


def evaluate_seed(out: Path, train: Path, n_test: int, system: str, seed: int, runs: dict[tuple[str, int], Path],
                  with_fixed: bool) -> list[dict[str, Any]]:
    """Roll out every trained run of one seed (and its VPT ablations; the fixed rows when ``with_fixed``) from
    ``n_test`` held-out conditions (drawn from ``train``'s sampler, seed ``HELDOUT_SEED``) to t = 100, observed;
    one row per label with the per-condition medians at ``HORIZONS``, on the observed channels and in the full
    state (``full_state_errors``; a full-state model's directly). The parrot learns from ``train``'s training
    split (the models'), never from a held-out condition."""
    import torch

    from ..data import read_rollout, read_trajectories, solve_flow
    from ..data.observation import observation_from_record, resolve_observation
    from ..models import load_model, mean_attention, without_attention
    from ..rollout import RolloutConfig, run_rollouts
    from ..rollout.splits import draw_heldout
    from ..testing import attention_coupling

    info = SYSTEMS[system]
    train_data = read_trajectories(train)
    full: Any = train_data.system
    steps = [int(round(t / H)) for t in HORIZONS]
    held = heldout_data(out, system, n_test)
    obs: Any = None
    if held is None:
        obs = resolve_observation(info["observe"], int(train_data.y.shape[-1]), full.state_names, full.name)
        assert obs is not None  # every study system observes part of its state
        heldout_y0 = draw_heldout(train_data.meta, full, int(n_test), HELDOUT_SEED, train_data.y[:, 0], train)
        ref_full = np.asarray(solve_flow(full, heldout_y0, H * np.arange(max(steps) + 1)))  # type: ignore[arg-type]
    else:  # fixed held-out conditions: their file is the exact flow (DOP853 at 1e-12) to t = 100
        ref_full = np.asarray(read_trajectories(held).y)
    entries: list[tuple[str, Any]] = []
    full_entries: list[tuple[str, Any]] = []
    meta: dict[str, dict[str, Any]] = {}
    for (approach, T), run in sorted(runs.items()):
        model = load_model(run).double()
        summary = read_json(run / "summary.json") or {}
        base = {"approach": approach, "T": int(T), "n_params": summary.get("n_params"),
                "train_cpu": summary.get("cpu_time"), "epochs": summary.get("epochs"),
                "best_epoch": summary.get("best_epoch"), "stopped": summary.get("stopped"),
                "best_val": summary.get("best_loss"), "run": str(run.relative_to(out)), "curve": _curve(run),
                "steps": summary.get("steps"), "stop_rule": summary.get("stop_rule")}
        label = f"{approach}_T{T}"
        if approach in FULL_STATE:
            full_entries.append((label, model))
            meta[label] = {**base, "kind": "full_state", "coupling": None}
            continue
        model_obs = observation_from_record(getattr(model, "trained_on")["observation"])
        assert model_obs is not None
        if held is not None:  # a basis fitted on the training split: the same split, hence the same, for every run
            if obs is None:
                obs = model_obs
            np.testing.assert_allclose(model_obs.matrix, obs.matrix, rtol=0, atol=1e-12)
        windows = torch.as_tensor(model_obs.apply(ref_full[:, :T]))
        coupling = None
        if approach in ATTENTION and T > 1:
            coupling = float(attention_coupling(model, windows).median)
        entries.append((label, model))
        meta[label] = {**base, "kind": "model", "coupling": coupling}
        if approach in ABLATED and T > 1:
            ref_windows = torch.as_tensor(model_obs.apply(train_data.y[:, :T]))
            entries.append((f"{label}+noattn", without_attention(model)))
            entries.append((f"{label}+meanattn", mean_attention(model, ref_windows)))
            meta[f"{label}+noattn"] = {**base, "approach": f"{approach}+noattn", "kind": "ablation", "curve": None}
            meta[f"{label}+meanattn"] = {**base, "approach": f"{approach}+meanattn", "kind": "ablation",
                                         "curve": None}
    integrators = list(info.get("fixed", FIXED_ROWS)) if with_fixed else []
    for name in integrators:
        meta[name] = {"approach": name, "T": int(info["context_len"]), "kind": "known" if "estimate" in name else
                      "fitted"}
    folder = out / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    observed: dict[str, np.ndarray] = {}
    full_y: dict[str, np.ndarray] = {}
    common: dict[str, Any] = dict(data=str(train), t_end=max(HORIZONS), heldout=int(n_test),
                                  heldout_seed=HELDOUT_SEED, volume=False, workers=1, device="cpu")
    observe = info["observe"]
    if held is not None:  # the held-out file's conditions, the fitted rows fitted on the training file
        common = dict(data=str(held), fit_data=str(train), t_end=max(HORIZONS), volume=False, workers=1, device="cpu")
        observe = None  # the basis the models recorded
        if obs is None:
            raise StudyError(f"partial_observation: {system} needs at least one learned approach on the observation "
                             "(its basis is fitted by training)")
    if entries or integrators:
        path = folder / f"{system}_seed{seed}.h5"
        run_rollouts(RolloutConfig(out=str(path), models=entries, integrators=integrators, observe=observe,
                                   context_len=int(info["context_len"]), **common), overwrite=True)
        ro = read_rollout(path)
        assert ro.reference is not None  # a run of the exact flow writes its reference
        # the held-out conditions here are the rollout's: the same sampler, the same seed
        np.testing.assert_allclose(np.asarray(ro.reference.y), obs.apply(ref_full[:, :ro.reference.y.shape[1]]),
                                   rtol=1e-8, atol=1e-8)
        observed = {label: np.asarray(ro.methods[label].y) for label in meta if label in ro.methods}
    if full_entries:
        path = folder / f"{system}_seed{seed}_full_state.h5"
        run_rollouts(RolloutConfig(out=str(path), models=full_entries, integrators=[], **common), overwrite=True)
        ro = read_rollout(path)
        for label, _ in full_entries:
            full_y[label] = np.asarray(ro.methods[label].y)
            observed[label] = obs.apply(full_y[label])
    ref = obs.apply(ref_full)
    if with_fixed and not _has_pysindy():
        from ..rollout.sindy_library import INSTALL

        print(f"partial_observation: {DELAY_SINDY[0]} left out: it needs pysindy, an optional extra: {INSTALL}",
              flush=True)
    elif with_fixed:
        label, T_sindy, _ = DELAY_SINDY
        # the training file's trajectories (the models' training and validation split together, as here its
        # own 15 % validate); no held-out condition
        observed[label], chosen = delay_sindy(obs.apply(train_data.y), ref, max(steps))
        meta[label] = {"approach": label, "T": T_sindy, "kind": "fitted", "sindy": chosen}
    rows = []
    for label, row in meta.items():
        errs = _errors(observed[label], ref, steps)
        if label in full_y:
            ferrs = _errors(full_y[label], ref_full, steps)
        elif held is not None:  # decoded by the reduction's basis
            ferrs = _errors(obs.decode(observed[label]), ref_full, steps)
        else:
            ferrs = full_state_errors(full, obs, observed[label], ref_full, steps)
        rows.append({"system": system, "observe": info["observe"], "seed": None if row["kind"] in ("known", "fitted")
                     else int(seed), "label": label, **row,
                     **{f"err_t{t:g}": median_interval(errs[k]) for t, k in zip(HORIZONS, steps)},
                     **{f"full_err_t{t:g}": median_interval(ferrs[k]) for t, k in zip(HORIZONS, steps)}})
    return rows


# --------------------------------------------------------------------------- the tables


def merge_rows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with the rows of the same (system, seed, label) as a new one replaced by it."""
    keyed = {(r["system"], r.get("seed"), r["label"]): r for r in old}
    keyed.update({(r["system"], r.get("seed"), r["label"]): r for r in new})
    return list(keyed.values())


def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (system, approach, T): the per-seed medians at each horizon (``tH``; in the full state ``full_tH``,
    None in rows from before those columns), their median over seeds with its bootstrap interval, the
    training's stop reasons and CPU, the coupling."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], r["approach"], int(r["T"])), []).append(r)
    out = []
    for (system, approach, T), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: -1 if r.get("seed") is None else r["seed"])
        entry: dict[str, Any] = {"system": system, "approach": approach, "T": T, "kind": rs[0]["kind"],
                                 "seeds": [r.get("seed") for r in rs]}
        for t in HORIZONS:
            for prefix, name in (("err", "t"), ("full_err", "full_t")):
                per_seed = [(r.get(f"{prefix}_t{t:g}") or {}).get("median") for r in rs]
                finite = [v for v in per_seed if v is not None]
                entry[f"{name}{t:g}"] = {"per_seed": per_seed,
                                         "median": float(np.median(finite)) if finite else None,
                                         "ci": list(bootstrap_ci(finite)) if len(finite) > 1 else [None, None]}
        entry["stopped"] = sorted({str(r.get("stopped")) for r in rs if r.get("stopped") is not None})
        cpu = [float(r["train_cpu"]) for r in rs if r.get("train_cpu") is not None]
        entry["train_cpu"] = float(np.median(cpu)) if cpu else None
        coupling = [float(r["coupling"]) for r in rs if r.get("coupling") is not None]
        entry["coupling"] = float(np.median(coupling)) if coupling else None
        out.append(entry)
    return out


def _target(summary: list[dict[str, Any]]) -> str:
    """The verdict of ``TARGET`` from the summary: the best learned approach and T by median, its seeds <= the bound."""
    t = f"t{TARGET['t']:g}"
    learned = [e for e in summary if e["system"] == TARGET["system"] and e["kind"] == "model"
               and e[t]["median"] is not None]
    if not learned:
        return "no learned model on the coupled oscillator in these results"
    best = min(learned, key=lambda e: e[t]["median"])
    seeds = [v for v in best[t]["per_seed"] if v is not None]
    hits = sum(1 for v in seeds if v <= TARGET["error"])
    verdict = "met" if hits >= TARGET["seeds_needed"] and len(seeds) >= TARGET["of"] else "not met"
    return (f"Target (coupled oscillator observed in q, best learned model on windows, median <= {TARGET['error']:g} at "
            f"t = {TARGET['t']:g} on >= {TARGET['seeds_needed']} of {TARGET['of']} seeds): **{verdict}** here: the best "
            f"is {best['approach']} at T = {best['T']}, median {fmt_num(best[t]['median'])}, "
            f"{hits} of {len(seeds)} seeds <= {TARGET['error']:g}.")


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: per system, every (approach, T) at each horizon, best first at t = 10."""
    lines = ["# Partial observation: results", "", _target(summary), ""]
    for system in dict.fromkeys(e["system"] for e in summary):
        info = SYSTEMS.get(system, {})
        lines += [f"## {system}, observed in {info.get('observe', '?')}", "",
                  "Relative error on the observed channels against the exact flow, per held-out condition: the median "
                  "over conditions per seed, then the median over seeds [95 % bootstrap interval]; per-seed medians in "
                  "the last columns. `stopped`: why training ended (`early_stopping`: its validation plateau; `steps`: "
                  "its step budget, whole epochs of its measured cost, the same on any machine; `time_limit`: the CPU "
                  "budget first, or under a step budget **cut** by the safety valve). Full state: the relative error of the full state estimated "
                  "from each row's last 3 observed states by least squares on the true flow (the `estimate` rows' "
                  "estimator; a `full_state` row's own state), against the exact flow; — where the run predates the "
                  "column.", ""] + ([f"{info['note']}", ""] if info.get("note") else [])
        rows = [e for e in summary if e["system"] == system]
        rows.sort(key=lambda e: math.inf if e["t10"]["median"] is None else e["t10"]["median"])
        head = ["approach", "T", "kind", "t = 10", "t = 100", "per seed, t = 10", "per seed, t = 100",
                "full state, t = 10", "full state, t = 100", "coupling", "train CPU s", "stopped"]
        body = []
        for e in rows:
            def cell(t: str) -> str:
                m, (lo, hi) = e[t]["median"], e[t]["ci"]
                return fmt_num(m) + (f" [{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None and hi is not None and
                                     not (isinstance(lo, float) and math.isnan(lo)) else "")

            body.append([e["approach"], e["T"], e["kind"], cell("t10"), cell("t100"),
                         " ".join(fmt_num(v) for v in e["t10"]["per_seed"]),
                         " ".join(fmt_num(v) for v in e["t100"]["per_seed"]),
                         cell("full_t10"), cell("full_t100"),
                         fmt_num(e["coupling"]), fmt_num(e["train_cpu"]), ", ".join(e["stopped"]) or "—"])
        lines += md_table(head, body) + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


@dataclass
class PartialObservationOptions(StudyOptions):
    """The partial-observation study's keys (besides the shared ones of ``StudyOptions``).

    Parameters
    ----------
    quick : bool
        A small run (seeds 0,1; T in 1,4; vpt, vpt_mix, delay_mlp, delay_mlp2, delay_vpff, fullstate; 60 training and 30
        held-out trajectories; 10 CPU s per training run): the same code path in under ten minutes.
    systems : list of str
        Comma list out of coupled_oscillator, rigid_body, toda (default coupled_oscillator,rigid_body; --quick
        all three; toda: the Toda lattice of 50 sites observed in 4 PSD coordinates, its 11 training and 10
        held-out conditions fixed by its specs, no ``fullstate`` row; it adds about 45 min to the default size).
    windows : list of int
        The window lengths T (default 1,2,4,8).
    approaches : list of str
        Comma list out of vpt, vpt_mix, st, delay_mlp, delay_mlp2, delay_vpff, fullstate (default all).
    n_train : int
        Training trajectories per system (to t_train; default 200).
    n_test : int
        Held-out initial conditions per system (default 100).
    t_train : float
        The training trajectories' horizon (default 20).
    budget_seconds : float
        The CPU seconds every training run may cost on its way to the plateau (default 30: the default size's 200
        training runs then fit about 2 hours of one core, 1 hour on 2 cores with ``--jobs 2``). With ``--budget
        plateau`` (the default) they become a step budget per run, whole epochs of its measured cost
        (``STEP_COSTS``; ``--max-steps`` gives the steps instead), the same on any machine under any load; with
        ``--budget cpu`` they are process CPU seconds, with a wall ceiling of ``--wall-ceiling`` times them.
    patience : int
        Epochs (of 10 Levenberg–Marquardt iterations) without a better validation score that count as the plateau
        (default 20).
    """

    quick: bool = key(False, type=bool)
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)
    systems: list[str] | None = key(None, optional=True, check=name_list("systems", list(SYSTEMS)), metavar="LIST")
    windows: list[int] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(int, "windows", 1, "window lengths >= 1"))
    approaches: list[str] | None = key(None, optional=True, check=name_list("approaches", list(APPROACHES)),
                                       metavar="LIST")
    n_train: int | None = key(None, optional=True, type=int, low=5)
    n_test: int | None = key(None, optional=True, type=int, low=1)
    t_train: float | None = key(None, optional=True, type=float, low=1.0)
    budget_seconds: float | None = key(None, optional=True, type=float, low=0.5)
    patience: int | None = key(None, optional=True, type=int, low=1)  # type: ignore[assignment]


@dataclass(frozen=True)
class PartialObservationPlan:
    """The study's options resolved once (``build_plan``): what every function below reads.

    Attributes
    ----------
    out : Path
    table_only, overwrite : bool
    systems, approaches : tuple of str
    seeds, windows : tuple of int
    n_train, n_test, patience : int
    jobs : int
        Training processes at a time (``--jobs``; ``train_runs``).
    t_train, budget_seconds : float
    command : str
        The command line, recorded in the JSON.
    budget : str
        What stops a training (``--budget``: ``plateau``, the default: its plateau or its step budget, with a
        safety valve; ``cpu``; ``wall``; ``vpintegrator.studies.step_budget``).
    wall_ceiling : float
        ``--wall-ceiling``: the wall limit as a multiple of the CPU one.
    max_steps : int or None
        ``--max-steps``: every run's step budget (None: each run's from ``STEP_COSTS``).
    results : Path or None
        With ``table_only``: the results file to draw the tables from (``--results``: a shipped
        ``docs/data/partial_observation/*.json``) into a new OUT (``redraw_from``: ``OUT/results.md``,
        ``OUT/results.json`` and the plateau figure) instead of OUT's own JSON.
    """

    out: Path
    table_only: bool
    overwrite: bool
    systems: tuple[str, ...]
    approaches: tuple[str, ...]
    seeds: tuple[int, ...]
    windows: tuple[int, ...]
    n_train: int
    n_test: int
    t_train: float
    budget_seconds: float
    patience: int
    jobs: int
    command: str
    results: Path | None = None
    budget: str = "plateau"
    wall_ceiling: float = 4.0
    max_steps: int | None = None

    def training_runs(self, system: str | None = None) -> list[tuple[str, int]]:
        """The (approach, T) pairs trained per system and seed (``windows_of``); for ``system``, without the
        approaches it leaves out (its ``exclude``: the Toda lattice has no ``fullstate``)."""
        skip = SYSTEMS[system].get("exclude", ()) if system is not None else ()
        return [(approach, T) for approach in self.approaches if approach not in skip
                for T in windows_of(approach, self.windows)]

    def step_budget(self, system: str, approach: str, T: int) -> StepBudget | None:
        """The step budget of one training under ``--budget plateau`` (None under another budget):
        ``budget_seconds`` as whole epochs of its ``STEP_COSTS`` (a window never measured: the nearest shorter
        one's cost scaled by the windows' ratio), or ``--max-steps``."""
        if self.budget != "plateau":
            return None
        cost, source = nearest_cost(STEP_COSTS, (system, approach), int(T))
        return step_budget(self.budget_seconds, cost, STEPS_PER_EPOCH, given=self.max_steps, source=source,
                           what=f"{approach} T = {T} on {system}")

    def stop_keys(self, system: str, approach: str, T: int) -> dict[str, Any]:
        """The ``fit`` keys that stop that training (``vpintegrator.studies.step_budget.stop_keys``)."""
        return stop_keys(self.budget, self.budget_seconds, self.wall_ceiling, self.step_budget(system, approach, T))

    def budget_line(self) -> str:
        """How the trainings are stopped, in one sentence (the tables and the JSON say it)."""
        if self.budget == "plateau":
            steps = (f"{self.max_steps} optimiser steps" if self.max_steps is not None else
                     f"a step budget of {self.budget_seconds:g} CPU s in whole epochs of each run's measured cost "
                     f"(STEP_COSTS)")
            return (f"each training stops at its plateau ({self.patience} epochs without improvement) or after "
                    f"{steps}; a CPU limit of {VALVE_FACTOR * self.budget_seconds:g} s and a wall limit of "
                    f"{VALVE_FACTOR * self.wall_ceiling * self.budget_seconds:g} s are a safety valve only")
        if self.budget == "cpu":
            return (f"each training stops at its plateau ({self.patience} epochs) or after {self.budget_seconds:g} "
                    f"process CPU s (wall ceiling {self.wall_ceiling:g} x)")
        return f"each training stops at its plateau ({self.patience} epochs) or after {self.budget_seconds:g} wall s"


def build_plan(options: PartialObservationOptions, argv: Sequence[str] = ()) -> PartialObservationPlan:
    """The plan of the checked ``options``: the size's values (``QUICK`` or ``DEFAULTS``) where an option is not
    given; ``argv``, the command line as given, is recorded in the JSON."""
    a = options
    if a.out is None:
        raise StudyError("--out is required (the flag, or out in the --plan file)")
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the partial_observation study ships no pretrained model (its runs are "
                         "under OUT/runs)")
    if a.skip_existing:
        raise StudyError("--skip-existing: the partial_observation study always keeps the finished training runs in "
                         "OUT (those with a complete.json); run the same command again to resume, without the flag")
    size = QUICK if a.quick else DEFAULTS

    def pick(name: str) -> Any:
        return getattr(a, name) if getattr(a, name, None) is not None else size[name]

    return _check_windows(PartialObservationPlan(
        out=Path(a.out), table_only=bool(a.table_only), overwrite=bool(a.overwrite),
        systems=tuple(a.systems or size["systems"]), approaches=tuple(pick("approaches")),
        seeds=tuple(int(s) for s in (a.seeds or size["seeds"])), windows=tuple(int(T) for T in pick("windows")),
        n_train=int(pick("n_train")), n_test=int(pick("n_test")), t_train=float(pick("t_train")),
        budget_seconds=float(pick("budget_seconds")), patience=int(pick("patience")), jobs=int(a.jobs),
        results=None if a.results is None else Path(a.results),
        command=" ".join(["vp-study partial_observation", *argv]) if argv else
        " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        budget=str(a.budget), wall_ceiling=float(a.wall_ceiling),
        max_steps=None if a.max_steps is None else int(a.max_steps)))


def _check_windows(plan: PartialObservationPlan) -> PartialObservationPlan:
    """``plan``, once every window it trains fits the training trajectories (to ``t_train`` at ``H``): a window of
    T states and the model's prediction window after it (T for a VPT, 1 for a delay model). Refused at plan time,
    before any data is generated, in one line naming ``--windows``."""
    if plan.table_only:
        return plan
    for system in plan.systems:  # every run's step budget known before anything runs (a config never measured: one line)
        for approach, T in plan.training_runs(system):
            plan.step_budget(system, approach, T)
    from ..models import build_model

    n_states = int(round(plan.t_train / H)) + 1
    for approach in plan.approaches:
        for T in ([] if approach in FULL_STATE else windows_of(approach, plan.windows)):
            span = T + int(getattr(build_model(**{**APPROACHES[approach], "dim": 2, "seq_len": T}), "pred_window", 1))
            if span > n_states:
                raise StudyError(f"--windows: T = {T} for {approach} needs {span} states per training window (T and "
                                 f"the {span - T} it predicts) but the training trajectories (--t-train "
                                 f"{plan.t_train:g} at h = {H:g}) have {n_states}; give shorter windows or a longer "
                                 "--t-train")
    return plan


def plateau_figure(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """The validation plateau curves (validation rollout score at t = 10 against training CPU seconds, per
    epoch; the best epoch ringed) of the first seed's learned runs, one panel per system, written as
    ``OUT/partial_observation_plateau.{png,svg}``; drawn from the rows (the JSON) alone. No figure (``[]``)
    when no row has a curve (rows from before the curves were recorded)."""
    with_curve = [r for r in rows if r.get("curve") and r["curve"].get("val")]
    if not with_curve:
        return []
    from ..plotting.style import figure, save_figure, styled

    systems = list(dict.fromkeys(r["system"] for r in with_curve))

    @styled
    def draw(style: Any = None) -> Any:
        fig = figure(3.4 * len(systems), 3.0)
        axes = fig.subplots(1, len(systems), squeeze=False)[0]
        for ax, system in zip(axes, systems):
            mine = [r for r in with_curve if r["system"] == system]
            seed = min(r["seed"] for r in mine)
            for r in sorted((r for r in mine if r["seed"] == seed), key=lambda r: (r["approach"], r["T"])):
                cpu, val = np.asarray(r["curve"]["cpu"]), np.asarray(r["curve"]["val"], dtype=float)
                val = np.where(np.isfinite(val) & (val > 0), val, np.nan)
                line, = ax.plot(cpu, val, marker=".", label=f"{r['approach']} T={r['T']}")
                if r.get("best_epoch") is not None and 0 < int(r["best_epoch"]) <= len(val):
                    k = int(r["best_epoch"]) - 1
                    ax.plot(cpu[k], val[k], "o", color=line.get_color(), markerfacecolor="none", markersize=7)
            ax.axhline(TARGET["error"], color="0.5", linestyle=":", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_xlabel("training CPU s")
            ax.set_ylabel("validation rollout error at t = 10")
            ax.set_title(f"{system} observed in {SYSTEMS.get(system, {}).get('observe', '?')}, seed {seed}")
            ax.legend(fontsize=5, ncols=2)
        return fig

    return save_figure(draw(), out / "partial_observation_plateau", formats=("png", "svg"), overwrite=True)


#: a row of partial_observation.json (``vpintegrator.studies.schema``): what the tables and the figure read
ROW = Obj(required={"system": "str", "approach": "str", "T": "int", "label": "str", "kind": "str", "seed": "int?"},
          optional={"observe": "str?", "n_params": "int?", "train_cpu": "number?", "epochs": "int?",
                    "best_epoch": "int?", "stopped": "str?", "best_val": "number?", "run": "str?",
                    "curve": Obj(optional={"cpu": Each("number?"), "val": Each("number?")}, null=True),
                    "coupling": "number?", "sindy": "object?",
                    **{f"{prefix}_t{t:g}": INTERVAL for t in HORIZONS for prefix in ("err", "full_err")}})
#: what partial_observation.json holds
SCHEMA = ResultsSchema("partial_observation", {"rows": Each(ROW)})


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a study JSON at ``path``, checked against ``SCHEMA`` before any table is drawn; a missing file,
    another study's JSON, a row without a key or with a string for a number is one line naming the file, row and
    key."""
    data = read_json(path)
    if data is None:
        raise StudyError(f"--table-only: {path} not found; give the --out of an earlier partial_observation study "
                         "or --results FILE (a partial_observation.json)")
    return unplain(check_results(data, path, SCHEMA)["rows"])


def _run(plan: PartialObservationPlan) -> int:
    out = plan.out
    check_out_dir(out)
    path = out / "partial_observation.json"
    if plan.table_only and plan.results is not None:  # a results file's tables, no run (never drawn over one)
        _, rows, text = redraw_from(out, str(plan.results), read_rows, lambda r: tables(summarize_rows(r)),
                                    figures="partial_observation_plateau")
        plateau_figure(rows, out)
        print(text)
        return 0
    if plan.table_only:
        rows = read_rows(path)
    else:
        n_runs = len(plan.seeds) * sum(len(plan.training_runs(system)) for system in plan.systems)
        print(f"partial_observation: {n_runs} training runs (systems {', '.join(plan.systems)}; "
              f"T {list(plan.windows)}; {', '.join(plan.approaches)}; seeds {list(plan.seeds)}): "
              f"{plan.budget_line()}", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        earlier = read_json(path)  # merged with the new rows: checked first (a foreign file is never written over)
        previous = {} if earlier is None else unplain(check_results(earlier, path, SCHEMA))
        rows = previous.get("rows", [])
        import torch

        torch.set_num_threads(1)
        trains = {system: make_data(out, system, plan.n_train, plan.t_train) for system in plan.systems}
        for system in plan.systems:
            heldout_data(out, system, plan.n_test)  # written once, before the workers start
        for system, seed, runs in train_runs(plan, trains):
            new = evaluate_seed(out, trains[system], plan.n_test, system, seed, runs,
                                with_fixed=(seed == plan.seeds[0]))
            rows = merge_rows(rows, new)
            write_json(path, {"commands": [*previous.get("commands", []), plan.command],
                              "budgets": [*previous.get("budgets", []), plan.budget_line()], "rows": rows})
            print(f"partial_observation: {system} seed {seed} done", flush=True)
    summary = summarize_rows(rows)
    text = tables(summary)
    write_text(out / "partial_observation.md", text)
    plateau_figure(rows, out)
    print(text)
    return 0


def run(plan: PartialObservationPlan) -> int:
    """The study from its plan (``STUDY``, built once by ``build_plan``); bad input is a one-line
    ``StudyError``."""
    try:
        return _run(plan)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


#: the study as the runner runs it (``vp-study partial_observation``, ``python -m vpintegrator.studies.partial_observation``)
STUDY = Study(PartialObservationOptions, run, build_plan, doc=__doc__, required=("out",), prog="vp-study partial_observation",
              error_prefix="partial_observation study: error: ",
              interrupted="partial_observation study: interrupted; run the same command again (finished training "
                          "runs, those with a complete.json, are kept)")


if __name__ == "__main__":
    from .driver import main as _main

    raise SystemExit(_main(STUDY))
