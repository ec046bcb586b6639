"""The context study's design: its rows per system (``SETUPS``, ``RECIPES``), horizons and target, its keys
(``ContextOptions``), the plan they resolve to (``build_plan``) and the sizes refused before any training."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...config import Config, key
from ...errors import VPIntegratorError
from ..options import comma_list, name_list, number_list, seed_list
from ..runner import StudyError

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
#: rows trained by another recipe: row name -> (registered model, optimizer, epochs per epoch of the study's
#: --epochs, vp-train --set entries in place of COMMON). The encoder ablation: lpnet_ctx with the attention
#: encoder (2 076 parameters with 10 layers: LM's Jacobian is too large), Adam in float64, 4 Adam epochs per
#: LM epoch (120 at the default 30: about lpnet_ctx's 30 LM epochs in wall time).
RECIPES: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "lpnet_ctx_attention": ("lpnet_ctx", "adam", 4, {**LPNET_CTX, "model.encoder": "attention",
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


SPLITS = ("interpolation", "extrapolation")


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
        Training epochs of every learned row (a RECIPES row trains its own multiple of them).
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
    splits: list[str] | None = key(None, optional=True, check=name_list("splits", SPLITS), metavar="LIST")
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



def check_study_sizes(data: Path, n_test: int, axes: Sequence[tuple[str, int, float]], n_models: int,
                      h: float) -> None:
    """Refuse, before any training, what the evaluation could not hold or cut: the test rollouts of ``n_test``
    pairs (``vpintegrator.resources.check_size``: every method's rollout and the reference, (n_test,
    n_steps + 1, dim) float64 each) and a context length that is not shorter than the rollout (``HORIZONS``)
    or than the data's trajectories (a training window needs the context and a next state)."""
    import h5py

    from ...resources import check_size

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
