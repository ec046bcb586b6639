"""The coupled-oscillator study's setup and plan builder: its models and steps, its own keys
(``CoupledOscillatorOptions``), ``build_plan`` and its plan (``CoupledOscillatorPlan``, the settings a run records)."""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass
from pathlib import Path

from ..._shipped import shipped_file
from ...config import key
from ...errors import VPIntegratorError
from ..options import BUDGETS, PLATEAU_HELP, StudyOptions, StudyPlan, comma_list, model_list
from ..runner import REPO, Budget, StudyError, check_out_dir, check_study_out
from ..step_budget import step_budgets

#: every model the study knows, in table order; ``configs/study/coupled_oscillator_<model>.toml`` each
MODELS = ("vpt", "st", "symplectic_transformer", "g_sympnet", "la_sympnet")
DEFAULT_MODELS = ("vpt", "st", "symplectic_transformer", "g_sympnet")
SYMPLECTIC_MODELS = ("symplectic_transformer", "g_sympnet", "la_sympnet")
INTEGRATORS = ("stormer_verlet", "stormer_verlet_y6", "rk4")  # Yoshida 6 of Störmer–Verlet: the strong classical method at the same step
DT = 0.4  # the specs' step (coupled_oscillator, coupled_oscillator_box)
EVAL_SETS = ("default", "heldout")
#: the window models whose attention is measured (``vpintegrator.studies.attention``), on N_PROBE held-out ICs to T_PROBE
ATTENTION_MODELS = ("vpt", "st", "symplectic_transformer")
N_PROBE, T_PROBE = 20, 400.0  # also the work-precision run's ICs and horizon (1000 steps)
#: the initial weights times this are each config's ``init_scale`` (--init-scale overrides it for every
#: model). From the default Glorot init the paper-sized dim-4 VPT starts at a relative loss of 9-97 (seeds
#: 0-7) and Levenberg-Marquardt stalls near 1.2; from 0.3x it reaches about 1e-3 in a CPU minute.
INIT_SCALE = 0.3
#: CPU seconds of one training epoch (10 Levenberg–Marquardt iterations and the validation rollout of 500 steps)
#: of each model's shipped config on the study's training data, one thread, epochs 2–4 of a 4-epoch run (measured
#: 2026-11-26 on the 2-core development machine at a load of about 5): ``--budget plateau`` (the default) turns
#: ``train_seconds`` into that many whole epochs (``vpintegrator.studies.step_budget``), the same steps on any
#: machine under any load
EPOCH_COSTS = {"vpt": 3.32, "st": 2.75, "symplectic_transformer": 4.33, "g_sympnet": 0.92, "la_sympnet": 0.66}
LM_STEPS_PER_EPOCH = 10


def _default_config(model: str) -> str:
    return f"configs/study/coupled_oscillator_{model}.toml"


#: what ``RUN/settings.json`` records of the plan, in its order (``max_steps``: each model's step budget)
SETTINGS = ("out", "seeds", "train_seconds", "jobs", "n_steps", "heldout", "train_n_traj", "quick", "skip_existing",
            "overwrite", "models", "configs", "init_scale", "export_pretrained", "budget", "wall_ceiling", "patience",
            "max_steps")


@dataclass(frozen=True, kw_only=True)
class CoupledOscillatorPlan(StudyPlan):
    """The study's keys resolved once (``build_plan``: the --quick defaults filled in, the configs checked); what
    stops a training is the shared ``budget``: "plateau" (its validation plateau, ``patience`` epochs, or the
    model's step budget), "cpu" (CPU seconds, ``wall_ceiling`` x as a wall ceiling) or "wall"."""

    seeds: list[int]
    train_seconds: float
    n_steps: int
    heldout: int
    train_n_traj: int
    quick: bool
    models: list[str]
    configs: dict[str, str]
    init_scale: float | None
    #: each model's step budget (optimiser steps) under ``budget = "plateau"``: ``train_seconds`` in whole epochs of
    #: ``EPOCH_COSTS``, or ``--max-steps`` for every model
    step_budgets: dict[str, int]

    @property
    def t_end(self) -> float:
        return round(self.n_steps * DT, 10)

    @property
    def settings(self) -> dict[str, Any]:
        """The plan's ``SETTINGS`` (``RUN/settings.json``)."""
        return {k: self.step_budgets if k == "max_steps" else getattr(self, k) for k in SETTINGS}

    def model_budget(self, model: str) -> Budget:
        """What stops ``model``'s trainings (``runner.budget_flags``)."""
        return Budget(self.budget, self.wall_ceiling, self.patience, self.step_budgets.get(model))


#: the study's settings are its plan
Settings = CoupledOscillatorPlan


# --------------------------------------------------------------------------- arguments


def _config_pairs(value: Any) -> list[str]:
    """``config``: a list of MODEL=TOML strings (each checked by ``_configs``)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise VPIntegratorError(f"config must be a list of MODEL=TOML strings; got {value!r}", key="config")
    return value


@dataclass
class CoupledOscillatorOptions(StudyOptions):
    """The coupled-oscillator study's own keys, beside the shared ones of ``StudyOptions``.

    Parameters
    ----------
    train_seconds : float
        Training budget per model (default 120; --quick: 30): with --budget plateau (the default) that many CPU
        seconds in whole epochs of the model's measured cost (EPOCH_COSTS; --max-steps: the steps themselves), the
        same steps on any machine; CPU seconds with --budget cpu, wall with --budget wall.
    n_steps : int
        Rollout steps of dt = 0.4 (default 10000; --quick: 2500).
    heldout : int
        Held-out initial conditions (default 100; --quick: 3; 0: none).
    train_n_traj : int
        Training initial conditions (default 1000; --quick: 300).
    models : str
        Comma list out of vpt,st,symplectic_transformer,g_sympnet,la_sympnet (default
        vpt,st,symplectic_transformer,g_sympnet).
    config : list of str
        vp-train TOML of MODEL, as MODEL=TOML (default: the shipped config study/coupled_oscillator_<model>,
        vp-train --list); repeatable.
    vpt_config : str
        Same as --config vpt=TOML.
    st_config : str
        Same as --config st=TOML.
    init_scale : float
        Multiply every model's initial weights by this (default: each config's init_scale; 1: the package's
        Glorot init).
    quick : bool
        One seed, 30-s trainings, 2500 steps: about 2 minutes.
    """

    train_seconds: float | None = key(None, optional=True, type=float, low=0.0, open_low=True,
                                      expected="a positive number of seconds")
    n_steps: int | None = key(None, optional=True, type=int, low=6,
                              expected=">= 6 (two model windows of 3 states)")
    heldout: int | None = key(None, optional=True, type=int, low=0,
                              expected=">= 0 (0: only the default initial condition)")
    train_n_traj: int | None = key(None, optional=True, type=int, low=2,
                                   expected=">= 2 (training and validation trajectories)")
    models: str | None = key(None, optional=True, check=lambda v: comma_list(v, "models"))
    config: list[str] = key(default_factory=list, check=_config_pairs, metavar="MODEL=TOML")
    vpt_config: str | None = key(None, optional=True, type=str)
    st_config: str | None = key(None, optional=True, type=str)
    init_scale: float | None = key(None, optional=True, type=float, low=0.0, open_low=True,
                                   expected="a positive number (1: the package's init)")
    quick: bool = key(False, type=bool)
    #: the shared key, with this study's default: each training stops at its validation plateau or step budget
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)


def build_plan(options: CoupledOscillatorOptions, argv: tuple[str, ...] = ()) -> CoupledOscillatorPlan:
    """The study's plan: the checked keys with the --quick defaults filled in, the configs checked."""
    a = options
    quick = a.quick
    train_seconds = a.train_seconds if a.train_seconds is not None else (30.0 if quick else 120.0)
    models = _models(a.models)
    s = CoupledOscillatorPlan(
        **StudyPlan.shared(a, argv, seeds=[0] if quick else [0, 1, 2, 3, 4]),
        train_seconds=train_seconds,
        n_steps=a.n_steps if a.n_steps is not None else (2500 if quick else 10_000),
        heldout=a.heldout if a.heldout is not None else (3 if quick else 100),
        train_n_traj=a.train_n_traj if a.train_n_traj is not None else (300 if quick else 1000),
        quick=quick,
        models=models,
        configs=_configs(list(a.config) + [f"vpt={a.vpt_config}"] * bool(a.vpt_config)
                         + [f"st={a.st_config}"] * bool(a.st_config)),
        init_scale=a.init_scale,
        step_budgets=step_budgets(models, train_seconds, EPOCH_COSTS, LM_STEPS_PER_EPOCH, a.max_steps)
        if a.budget == "plateau" else {},
    )
    for model in s.models:
        if not a.table_only and not _resolve(s.configs[model]).is_file():
            flag = {"vpt": "--vpt-config", "st": "--st-config"}.get(model) if getattr(a, f"{model}_config", None) \
                else None
            given = f"{flag} {s.configs[model]}" if flag else f"--config {model}={s.configs[model]}"
            raise StudyError(f"{given}: no such file; give a vp-train TOML")
    out = Path(s.out)
    check_out_dir(out)
    if a.results is not None and a.export_pretrained:
        raise StudyError("--export-pretrained copies the best checkpoints of a RUN; a results file has none: leave out "
                         "--results")
    if a.table_only:
        if a.results is None and not out.is_dir():
            raise StudyError(f"--table-only: --out {out} is not a run directory; run the study first (or draw a "
                             "results file with --results)")
    else:
        check_study_out(out, s.skip_existing, s.overwrite)
    return s


def _models(text: str | None) -> list[str]:
    if text is None:
        return list(DEFAULT_MODELS)
    return model_list(text, "--models", MODELS, in_valid_order=True)  # table order, no duplicates


def _configs(pairs: list[str]) -> dict[str, str]:
    """Each model's training config: the shipped one, or the TOML of its ``MODEL=TOML`` pair."""
    configs = {m: _default_config(m) for m in MODELS}
    for pair in pairs:
        model, sep, path = pair.partition("=")
        if not sep or model not in MODELS or not path:
            raise StudyError(f"--config must be MODEL=TOML with MODEL one of {', '.join(MODELS)}; got {pair!r}")
        configs[model] = path
    from ...config import distinct

    try:  # one config per model (the one rule of list options; --vpt-config counts as a --config vpt=...)
        distinct([pair.partition("=")[0] for pair in pairs], "config", label="--config")
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None
    return configs


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    return REPO / p if (REPO / p).exists() else shipped_file(p)  # configs/...: the installed package's copy
