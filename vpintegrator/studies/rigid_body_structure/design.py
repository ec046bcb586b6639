"""The rigid-body structure study's setup and plan builder: its models, methods and targets, its own keys
(``StructureOptions``), ``build_plan`` and the held-out ICs' spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...config import key
from ...errors import VPIntegratorError
from ..options import BUDGETS, PLATEAU_HELP, StudyOptions, StudyPlan, comma_list, model_list
from ..rigid_body_results import DT, PAPER_T as T_EVAL, write_heldout_spec  # noqa: F401  (the paper data's step, horizon)
from ..runner import StudyError
from ..step_budget import step_budgets

MODELS = ("lpnet", "lpnet_sym", "lp_transformer", "vpt", "vpt_sym")
#: the window models whose attention is measured (``vpintegrator.studies.attention``: coupling, error without it)
ATTENTION_MODELS = ("lp_transformer", "vpt", "vpt_sym")
N_ATTENTION = 20  # held-out ICs of the attention step
CLASSICAL = ("implicit_midpoint", "splitting", "gauss_legendre4")
EQUAL_COST_TITLE = "Work–precision: the classical methods at the models' cost"
SHIPPED_VPT = "pretrained:rigid_body_vpt"
HELDOUT_SEED = 20262  # the held-out ICs' sampler seed (training uses the paper's deterministic 1238 points)
#: the study's targets (held-out ICs, against the exact flow, t = 100)
MEDIAN_TARGET, P90_TARGET = 0.02, 0.05
CASIMIR_TARGET = 1e-12  # relative Casimir drift to long-t-end
ENERGY_GROWTH_TARGET = 3.0  # max energy drift over [0, long-t-end] / over [0, 100]
ROUNDOFF = 1e-12  # a drift below this is round-off: conserved, whatever its ratio or slope
#: the selection score of every model of this study: the error at t = 100 plus 50 x the worst invariant drift
#: (the VPT's config has the old one)
SELECTION = ("--set", "val_rollout_error=final", "--set", "val_rollout_drift_weight=50")
#: CPU seconds of one training epoch (10 Levenberg–Marquardt iterations and the validation rollout with SELECTION)
#: of each model's study config on the exact-flow training data, one thread, epochs 2–4 of a 4-epoch run (measured
#: 2026-11-26 on the 2-core development machine at a load of about 5): ``--budget plateau`` (the default) turns
#: ``--train-seconds`` into that many whole epochs (``vpintegrator.studies.step_budget``), the same steps on any
#: machine under any load
EPOCH_COSTS = {"lpnet": 0.77, "lpnet_sym": 1.44, "lp_transformer": 2.20, "vpt": 1.81, "vpt_sym": 5.15}
LM_STEPS_PER_EPOCH = 10


@dataclass
class StructureOptions(StudyOptions):
    """The structure study's own keys, beside the shared ones of ``StudyOptions``.

    Parameters
    ----------
    models : str
        Comma list of lpnet,lpnet_sym,lp_transformer,vpt,vpt_sym (default: all).
    train_seconds : float
        Seconds of LM per model and seed, one thread (default 240.0): with --budget plateau (the default) that many
        CPU seconds in whole epochs of the model's measured cost (EPOCH_COSTS; --max-steps: the steps themselves),
        the same steps on any machine; CPU seconds with --budget cpu, wall with --budget wall.
    n_heldout : int
        Held-out ICs (default 100).
    n_long : int
        Held-out ICs rolled out to --long-t-end (default 20).
    long_t_end : float
        Long horizon (default 10000.0).
    ship : str
        The model --export-pretrained ships (default lpnet).
    """

    models: str = key(",".join(MODELS), check=lambda v: comma_list(v, "models"))
    train_seconds: float = key(240.0, type=float, low=0.0, open_low=True, expected="a positive number")
    n_heldout: int = key(100, type=int, low=1, expected=">= 1")
    n_long: int = key(20, type=int, low=1, expected=">= 1")
    long_t_end: float = key(10000.0, type=float, low=T_EVAL, open_low=True, expected=f"a number > {T_EVAL:g}")
    ship: str = key("lpnet", type=str)
    #: the shared key, with this study's default: each training stops at its validation plateau or step budget
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)

    def _check_together(self) -> None:
        if self.n_long > self.n_heldout:
            raise VPIntegratorError(f"--n-long ({self.n_long}) must be <= --n-heldout ({self.n_heldout}): the long "
                                    "runs start from held-out ICs", key="n_long")


@dataclass(frozen=True, kw_only=True)
class StructurePlan(StudyPlan):
    """The study's keys, checked once (``build_plan``)."""

    seeds: list[int]
    models: list[str]
    train_seconds: float
    n_heldout: int
    n_long: int
    long_t_end: float
    ship: str
    #: each model's step budget (optimiser steps) under ``budget = "plateau"``: ``train_seconds`` in whole epochs of
    #: ``EPOCH_COSTS``, or ``--max-steps`` for every model
    step_budgets: dict[str, int]


def build_plan(options: StructureOptions, argv: tuple[str, ...] = ()) -> StructurePlan:
    """The study's plan: the checked keys, with the checks that need the file system."""
    o = options
    models = model_list(o.models, "--models", MODELS)  # as given, each once
    steps = (step_budgets(models, o.train_seconds, EPOCH_COSTS, LM_STEPS_PER_EPOCH, o.max_steps)
             if o.budget == "plateau" else {})
    a = StructurePlan(**StudyPlan.shared(o, argv, seeds=[0, 1, 2, 3, 4]), models=models,
                      train_seconds=o.train_seconds, n_heldout=o.n_heldout, n_long=o.n_long,
                      long_t_end=o.long_t_end, ship=o.ship, step_budgets=steps)
    if a.export_pretrained and a.ship not in a.models:
        raise StudyError(f"--ship {a.ship!r} is not one of --models ({', '.join(a.models)}); name a trained model")
    a.check_out()
    return a


def write_spec(run: Path, n: int) -> Path:
    """The held-out ICs' spec (RUN/data/heldout.toml): by the exact flow, seed HELDOUT_SEED."""
    return write_heldout_spec(run / "data" / "heldout.toml", n, HELDOUT_SEED, "dop853",
                              "the rigid-body structure study (vp-study rigid_body_structure)")
