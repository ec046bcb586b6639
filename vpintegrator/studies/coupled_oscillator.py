"""The coupled-oscillator study: VPT against the standard transformer, Störmer–Verlet and RK4, energy drift
over 10⁴ steps (dt = 0.4, t in [0, 4000]), with figures and a results table.

Runs the package's CLIs (with the task runner of ``vpintegrator.studies.runner``), everything under
``--out RUN``:

1. ``vp-gen``: ``RUN/data/train.h5`` (``coupled_oscillator_box``: initial conditions uniform in
   q in [-1, 1]², p in [-2, 2]², DOP853, t in [0, 100]); ``RUN/data/eval_default.h5`` (GeometricProblems'
   default initial condition q0 = (1, 0), p0 = (2, 0)) and ``RUN/data/eval_heldout.h5`` (``--heldout``
   further initial conditions from the same box, another seed), both by DOP853 to the full horizon.
2. ``vp-train`` per seed: ``configs/study/coupled_oscillator_vpt.toml`` and ``..._st.toml``
   (Levenberg–Marquardt, float64) into ``RUN/train/{vpt,st}_s<seed>`` (``--jobs`` at a time, one thread each).
3. ``vp-rollout``: every model (its first window from the reference) next to Störmer–Verlet and RK4 into
   ``RUN/rollout/{default,heldout}.h5`` (+ ``.csv``/``.md`` metrics per method and seed).
4. ``vp-plot``: energy, relative error and volume figures into ``RUN/figures/{default,heldout}/``.
5. ``RUN/results.md`` and ``RUN/results.json``: one row per method, models as mean ± std over seeds.

Every command is logged to ``RUN/study.log`` (wall and CPU seconds) and its output to ``RUN/logs/<step>.log``.

Usage::

    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator
    python scripts/reproduce_coupled_oscillator.py --out runs/co_quick --quick          # about 2 minutes
    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator --table-only

Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import math
import re
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import _rollouts, attention, export
from .._shipped import shipped_file
from ..rundir import read_log
from ..config import key
from ..errors import VPIntegratorError
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, StudyPlan, comma_list, model_list
from .runner import PLATEAU_PATIENCE, REPO, WALL_CEILING, Budget, Runner, StudyError, Task, budget_flags, check_out_dir, check_study_out, study_lock
from .schema import INTERVAL, Each, Obj, ResultsSchema, Values, numbers, read_results as read_checked
from .step_budget import step_budgets
from .stats import (bootstrap_ci, fmt_num, md_table, mean_std, median_interval, read_json, results_provenance,
                    redraw_from, unplain, write_json, write_text)
from .work_precision import equal_cost_section
from ..quantiles import median

ROOT = REPO
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
_LABEL = re.compile(r"^(?P<model>[a-z0-9_]+)_s(?P<seed>\d+)$")
_NAMES = {
    "vpt": "VPT (volume-preserving transformer)",
    "st": "standard transformer",
    "symplectic_transformer": "symplectic transformer",
    "g_sympnet": "G-SympNet",
    "la_sympnet": "LA-SympNet",
    "stormer_verlet": "Störmer–Verlet",
    "stormer_verlet_y6": "Yoshida 6 (Störmer–Verlet)",
    "rk4": "RK4",
}


#: CPU seconds of one training epoch (10 Levenberg–Marquardt iterations and the validation rollout of 500 steps)
#: of each model's shipped config on the study's training data, one thread, epochs 2–4 of a 4-epoch run (measured
#: 2026-11-26 on the 2-core development machine at a load of about 5): ``--budget plateau`` (the default) turns
#: ``train_seconds`` into that many whole epochs (``vpintegrator.studies.step_budget``), the same steps on any
#: machine under any load
EPOCH_COSTS = {"vpt": 3.32, "st": 2.75, "symplectic_transformer": 4.33, "g_sympnet": 0.92, "la_sympnet": 0.66}
LM_STEPS_PER_EPOCH = 10


def _default_config(model: str) -> str:
    return f"configs/study/coupled_oscillator_{model}.toml"


def _budget_text(settings: dict) -> str:
    """How each model's training was budgeted (a study from before the CPU budget had wall seconds)."""
    if settings.get("budget") == "plateau":
        steps = ", ".join(f"{m} {n}" for m, n in (settings.get("max_steps") or {}).items())
        return (f"each training to its validation plateau (patience {settings.get('patience')} epochs) or a step "
                f"budget of {settings.get('train_seconds')} CPU s in measured epoch costs ({steps} optimiser steps)")
    if settings.get("budget", "wall") == "wall":
        return f"vp-train --time-limit {settings.get('train_seconds')} s each"
    return (f"vp-train --cpu-time-limit {settings.get('train_seconds')} s each (CPU seconds; wall ceiling "
            f"{settings.get('wall_ceiling')}x)")


@dataclass(frozen=True)
class Settings:
    """The study's settings (written to ``RUN/settings.json``), resolved once by ``build_plan``."""

    out: str
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    train_seconds: float = 120.0
    jobs: int = 2
    n_steps: int = 10_000
    heldout: int = 100
    train_n_traj: int = 1000
    quick: bool = False
    skip_existing: bool = False
    overwrite: bool = False
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    configs: dict[str, str] = field(default_factory=lambda: {m: _default_config(m) for m in MODELS})
    init_scale: float | None = None
    export_pretrained: str | None = None
    #: what stops a training: "plateau" (its validation plateau, ``patience`` epochs, or the model's step budget
    #: ``max_steps``), "cpu" (CPU seconds, ``wall_ceiling`` x as a wall ceiling) or "wall"
    budget: str = "plateau"
    wall_ceiling: float = WALL_CEILING
    patience: int = PLATEAU_PATIENCE
    #: each model's step budget (optimiser steps) under ``budget = "plateau"``: ``train_seconds`` in whole epochs of
    #: ``EPOCH_COSTS``, or ``--max-steps`` for every model
    max_steps: dict[str, int] = field(default_factory=dict)

    @property
    def t_end(self) -> float:
        return round(self.n_steps * DT, 10)

    def training_budget(self, model: str) -> Budget:
        """What stops ``model``'s trainings (``runner.budget_flags``)."""
        return Budget(self.budget, self.wall_ceiling, self.patience, self.max_steps.get(model))


class CoupledOscillatorPlan(NamedTuple):
    """The study's plan (``build_plan``): its ``Settings`` and the shared keys (``--table-only``, ``--results``,
    the command line as given)."""

    settings: Settings
    shared: StudyPlan


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
    """The study's plan: the checked keys as the study's ``Settings`` (the --quick defaults filled in, the
    configs checked), and the shared keys (``table_only``, ``results``, ``argv``)."""
    a = options
    quick = a.quick
    if a.out is None:
        raise StudyError("--out is required (the flag, or out in the --plan file)")
    train_seconds = a.train_seconds if a.train_seconds is not None else (30.0 if quick else 120.0)
    models = _models(a.models)
    s = Settings(
        out=a.out,
        seeds=a.seeds if a.seeds is not None else ([0] if quick else [0, 1, 2, 3, 4]),
        train_seconds=train_seconds,
        jobs=a.jobs,
        n_steps=a.n_steps if a.n_steps is not None else (2500 if quick else 10_000),
        heldout=a.heldout if a.heldout is not None else (3 if quick else 100),
        train_n_traj=a.train_n_traj if a.train_n_traj is not None else (300 if quick else 1000),
        quick=quick,
        skip_existing=a.skip_existing,
        overwrite=a.overwrite,
        models=models,
        configs=_configs(list(a.config) + [f"vpt={a.vpt_config}"] * bool(a.vpt_config)
                         + [f"st={a.st_config}"] * bool(a.st_config)),
        init_scale=a.init_scale,
        budget=a.budget,
        wall_ceiling=a.wall_ceiling,
        patience=a.patience,
        max_steps=step_budgets(models, train_seconds, EPOCH_COSTS, LM_STEPS_PER_EPOCH, a.max_steps)
        if a.budget == "plateau" else {},
        export_pretrained=a.export_pretrained,
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
    return CoupledOscillatorPlan(s, StudyPlan(**StudyPlan.shared(a, argv)))


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
    from ..config import distinct

    try:  # one config per model (the one rule of list options; --vpt-config counts as a --config vpt=...)
        distinct([pair.partition("=")[0] for pair in pairs], "config", label="--config")
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None
    return configs


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    return ROOT / p if (ROOT / p).exists() else shipped_file(p)  # configs/...: the installed package's copy


# --------------------------------------------------------------------------- the plan


def _paths(run: Path) -> dict[str, Path]:
    return {
        "train": run / "data" / "train.h5",
        "default": run / "data" / "eval_default.h5",
        "heldout": run / "data" / "eval_heldout.h5",
    }


def _run_dir(run: Path, model: str, seed: int) -> Path:
    return run / "train" / f"{model}_s{seed}"


def plan(s: Settings) -> Runner:
    """Every step of the study as a ``vpintegrator.studies.runner.Task`` of one ``vpintegrator.studies.runner.Runner``: the data
    (vp-gen), the trainings (vp-train, ``s.jobs`` at a time), the rollouts (vp-rollout), the figures (vp-plot)."""
    run = Path(s.out)
    runner = Runner(run, jobs=s.jobs, skip_existing=s.skip_existing, overwrite=s.overwrite)
    p = _paths(run)
    gens = [
        ("train", ["coupled_oscillator_box", "--n-traj", str(s.train_n_traj), "--seed", "0"]),
        ("default", ["coupled_oscillator", "--t-end", f"{s.t_end:g}"]),
    ]
    if s.heldout:
        gens.append(("heldout", ["coupled_oscillator_box", "--n-traj", str(s.heldout), "--seed", "1",
                                 "--t-end", f"{s.t_end:g}"]))
    for name, args in gens:
        runner.add(Task(f"gen_{name}", ["vp-gen", *args, "--out", p[name], "--quiet"], [p[name]]))

    trains = []
    scale = [] if s.init_scale is None else ["--set", f"init_scale={s.init_scale!r}"]
    for seed in s.seeds:
        for model in s.models:
            out = _run_dir(run, model, seed)
            name = f"train_{model}_s{seed}"
            done = runner.stamp(name).exists() and (out / "summary.json").exists() and (out / "log.csv").exists()
            if out.exists() and not done:
                shutil.rmtree(out)  # an unfinished run from an interrupted study: start it again
            runner.add(Task(name, ["vp-train", _resolve(s.configs[model]), "--data", p["train"], "--out", out,
                                   "--seed", str(seed), *budget_flags(s.training_budget(model), s.train_seconds), *scale,
                                   "--quiet"],
                            [out / "summary.json", out / "log.csv"], ["gen_train"]))
            trains.append(name)

    models = [x for seed in s.seeds for m in s.models for x in ("--model", f"{m}_s{seed}={_run_dir(run, m, seed)}")]
    for name in EVAL_SETS:
        if name == "heldout" and not s.heldout:
            continue
        out = run / "rollout" / f"{name}.h5"
        runner.add(Task(f"rollout_{name}",
                        ["vp-rollout", "--data", p[name], "--integrators", ",".join(INTEGRATORS), *models,
                         "--t-end", f"{s.t_end:g}", "--init", "reference", "--device", "cpu", "--out", out, "--quiet"],
                        [out, out.with_suffix(".csv"), out.with_suffix(".md")], [f"gen_{name}", *trains]))
        fig = run / "figures" / name
        runner.add(Task(f"plot_{name}",
                        ["vp-plot", out, "--kind", "invariants", "--kind", "error", "--kind", "volume", "--out", fig,
                         *(["--traj", "all"] if name == "heldout" else [])],
                        [fig], [f"rollout_{name}"]))
    if s.heldout:
        _probes(s, runner, p["heldout"], trains)
    return runner


def _probes(s: Settings, runner: Runner, heldout: Path, trains: list[str]) -> None:
    """The work–precision run (first seed's models as points; every classical method over its step ladder)
    and the attention step of every window model, on the first N_PROBE held-out ICs to T_PROBE."""
    run, n = Path(s.out), min(N_PROBE, s.heldout)
    t_end = min(s.t_end, T_PROBE)
    wp = run / "rollout" / "work_precision.h5"
    csv = wp.with_name("work_precision_work_precision.csv")
    s0 = s.seeds[0]
    models = [x for m in s.models for x in ("--model", f"{m}_s{s0}={_run_dir(run, m, s0)}")]
    runner.add(Task("rollout_work_precision",
                    ["vp-rollout", "--data", heldout, "--traj", ",".join(str(i) for i in range(n)), *models,
                     "--t-end", f"{t_end:g}", "--init", "reference", "--device", "cpu", "--no-volume",
                     "--work-precision", "--out", wp, "--quiet"],
                    [wp, csv], ["gen_heldout", *trains]))
    fig = run / "figures" / "work_precision"
    runner.add(Task("plot_work_precision", ["vp-plot", csv, "--kind", "work_precision", "--out", fig], [fig],
                    ["rollout_work_precision"]))
    for seed in s.seeds:
        for m in (m for m in s.models if m in ATTENTION_MODELS):
            out = run / "attention" / f"{m}_s{seed}.json"
            runner.add(Task(f"attention_{m}_s{seed}",
                            ["python", "-m", "vpintegrator.studies.attention", "--model", _run_dir(run, m, seed),
                             "--data", heldout, "--n-traj", str(n), "--t-end", f"{t_end:g}", "--out", out],
                            [out], ["gen_heldout", f"train_{m}_s{seed}"]))


# --------------------------------------------------------------------------- the table

#: (results key, metrics column in rollout CSV, header)
ROLLOUT_COLUMNS = (
    ("max_rel_energy_drift", "max_rel_drift_energy", "max rel. energy drift"),
    ("energy_drift_slope", "drift_slope_energy", "energy drift slope (1/t)"),
    ("final_rel_error", "final_rel_error", "rel. error at t_end"),
    ("valid_time", "valid_time", "valid prediction time"),
    ("max_abs_cum_log_det_J", "max_abs_cum_log_det_J", "max abs cum. log det J"),
)
TRAIN_COLUMNS = (
    ("train_loss", "train loss"),
    ("val_loss", "best validation score"),
    ("train_seconds", "training s"),
)


def training_info(run_dir: Path) -> dict[str, Any]:
    """Losses and time of one vp-train run: the train loss at the best (validation) epoch, whose weights
    (best.pt) are rolled out, the best validation score (summary.json best_loss: the validation loss or,
    with monitor = val_rollout, the validation rollout error), the wall time, epochs, parameters."""
    summary = read_json(run_dir / "summary.json") or {}
    best_epoch = int(summary.get("best_epoch") or 0)
    train_loss = summary.get("train_loss")
    if best_epoch:
        for r in read_log(run_dir / "log.csv"):
            if r["epoch"] == best_epoch:
                train_loss = r["train_loss"]
    num = lambda v: math.nan if v is None else float(v)  # noqa: E731
    return {
        "train_loss": num(train_loss),
        "val_loss": num(summary.get("best_loss")),
        "train_seconds": num(summary.get("wall_time")),
        "epochs": int(summary.get("epochs") or 0),
        "best_epoch": best_epoch,
        "n_params": int(summary.get("n_params") or 0),
        "stopped": summary.get("stopped"),
    }


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and std (ddof = 1) over seeds: ``vpintegrator.studies.stats.mean_std``."""
    return mean_std(values)


def build_rows(run: Path, eval_set: str) -> list[dict[str, Any]]:
    """One row per method of ``RUN/rollout/<eval_set>.csv``: integrators as they are, models aggregated
    over seeds (``<key>`` mean and ``<key>_std``, ddof = 1) with their training numbers; ``blowup_t``:
    the earliest blow-up time of each (seed's) rollout over its trajectories (NaN: none blew up)."""
    path = run / "rollout" / f"{eval_set}.csv"
    if not path.exists():
        return []
    blowups = _rollouts.blowup_times(path.with_suffix(".h5"))
    groups: dict[str, list[tuple[int | None, dict]]] = {}
    for r in _rollouts.metrics_table(path):
        m = _LABEL.match(r["method"])
        method, seed = (m["model"], int(m["seed"])) if m else (r["method"], None)
        groups.setdefault(method, []).append((seed, r))
    rows = []
    for method, members in groups.items():
        is_model = members[0][0] is not None
        row: dict = {"method": method, "kind": "model" if is_model else "integrator",
                     "seeds": [s for s, _ in members] if is_model else [], "n_traj": int(members[0][1].get("n_traj", 0)),
                     "failed": int(sum(r.get("failed", 0) or 0 for _, r in members)),
                     "blowup_t": [min(blowups.get(r["method"], [math.nan]), default=math.nan) for _, r in members]}
        for key, col, _ in ROLLOUT_COLUMNS:
            row[key], row[f"{key}_std"] = mean_std([r.get(col, math.nan) for _, r in members])
        if is_model:
            infos = []
            for seed, _ in members:
                rd = run / "train" / f"{method}_s{seed}"
                infos.append(training_info(rd) if (rd / "summary.json").exists() else {})
            for key, _ in TRAIN_COLUMNS:
                row[key], row[f"{key}_std"] = mean_std([i.get(key, math.nan) for i in infos])
            row["n_params"] = max((i.get("n_params", 0) for i in infos), default=0)
            row["per_seed"] = [
                {"seed": seed, **{key: r.get(col, math.nan) for key, col, _ in ROLLOUT_COLUMNS}, **info}
                for (seed, r), info in zip(members, infos)
            ]
        rows.append(row)
    return rows


def _fmt(v: float, blowup: bool = False) -> str:
    text = fmt_num(v, 3, small=1e-2, missing="–")
    return "inf (blew up)" if blowup and text == "inf" else text


def _cell(row: dict[str, Any], key: str) -> str:
    mean, std = row.get(key, math.nan), row.get(f"{key}_std", math.nan)
    text = _fmt(mean, blowup=key in ("max_rel_energy_drift", "final_rel_error"))
    if std is not None and isinstance(std, float) and math.isfinite(std):
        text += f" ± {_fmt(std)}"
    return text


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: one row per method; models mean ± std over seeds (ddof = 1)."""
    head = ["method", "seeds"] + [h for _, _, h in ROLLOUT_COLUMNS] + [h for _, h in TRAIN_COLUMNS] + ["params"]
    body = []
    for r in rows:
        cells = [_NAMES.get(r["method"], r["method"]), str(len(r["seeds"])) if r["seeds"] else "–"]
        cells += [_cell(r, k) for k, _, _ in ROLLOUT_COLUMNS]
        if r["kind"] == "model":
            cells += [_cell(r, k) for k, _ in TRAIN_COLUMNS] + [str(r.get("n_params", ""))]
        else:
            cells += ["–"] * (len(TRAIN_COLUMNS) + 1)
        if r.get("failed"):
            times = ", ".join(_fmt(t) for t in r.get("blowup_t", []) if not math.isnan(t))
            cells[0] += f" ({r['failed']} of {r['n_traj'] * max(1, len(r['seeds']))} rollouts blew up" + (
                f"; first at t = {times})" if times else ")")
        body.append(cells)
    return "\n".join(md_table(head, body)) + "\n"


def heldout_statistics(run: Path) -> list[dict[str, Any]]:
    """Per method of ``rollout/heldout.h5``, over the held-out ICs: the relative error at t_end and the maximum
    relative energy drift, median and 10–90 % interval (models: over every (seed, IC) pair); for models also
    each seed's median error and a bootstrap 95 % interval over seeds of that median. A blown-up rollout
    counts as an infinite error and drift."""
    import numpy as np

    from vpintegrator.metrics import relative_drift

    r = _rollouts.read(run / "rollout" / "heldout.h5")
    if r is None:
        return []
    groups: dict[str, list] = {}
    for label in r.methods:
        m = _LABEL.match(label)
        method, seed = (m["model"], int(m["seed"])) if m else (label, None)
        met = r.metrics[label]
        err = met.rel_error[:, -1]
        with np.errstate(invalid="ignore", over="ignore"):
            drift = np.max(np.abs(relative_drift(met.invariants["energy"])), axis=1)
        groups.setdefault(method, []).append((seed, np.where(np.isfinite(err), err, np.inf),
                                              np.where(np.isfinite(drift), drift, np.inf)))
    rows = []
    for method, members in groups.items():
        medians = [median(e) for _, e, _ in members]
        rows.append({"method": method, "kind": "integrator" if members[0][0] is None else "model",
                     "seeds": [s for s, _, _ in members if s is not None], "n_ics": int(members[0][1].size),
                     "error": median_interval(np.concatenate([e for _, e, _ in members])),
                     "drift": median_interval(np.concatenate([d for _, _, d in members])),
                     "seed_medians": medians, "seed_ci": bootstrap_ci(medians)})
    return rows


def _statistics_section(rows: list[dict], t_end: float) -> list[str]:
    f = lambda v: _fmt(v, blowup=True)  # noqa: E731
    body = []
    for r in rows:
        e, d = r["error"], r["drift"]
        lo, hi = r["seed_ci"]
        body.append([_NAMES.get(r["method"], r["method"]), str(len(r["seeds"])) if r["seeds"] else "–",
                     f"{f(e['median'])} [{f(e['lo'])}, {f(e['hi'])}]",
                     f"[{f(lo)}, {f(hi)}]" if r["seeds"] and len(r["seeds"]) > 1 else "–",
                     f"{f(d['median'])} [{f(d['lo'])}, {f(d['hi'])}]"])
    return ["### Over the held-out initial conditions", "",
            f"Relative error at t = {t_end:g} against the exact flow and maximum relative energy drift on [0, {t_end:g}], "
            "median [10–90 %] over the ICs (models: over every seed and IC); 'seeds CI': bootstrap 95 % interval "
            "over seeds of each seed's median error.", "",
            *md_table(["method", "seeds", "error median [10–90 %]", "seeds CI (median error)",
                       "energy drift median [10–90 %]"], body), ""]


#: a row of results.json's tables (``vpintegrator.studies.schema``): a method's metrics over seeds
_METRICS = ("max_rel_energy_drift", "energy_drift_slope", "final_rel_error", "valid_time", "max_abs_cum_log_det_J")
TABLE_ROW = numbers(*_METRICS, optional=(*(f"{m}_std" for m in _METRICS), "train_loss", "train_loss_std", "val_loss",
                                         "val_loss_std", "train_seconds", "train_seconds_std"),
                    method="str", kind="str", seeds="list", n_traj="int?", failed="int?", n_params="int?",
                    blowup_t=Each("number?"), per_seed="list")
#: what results.json holds: the settings, the tables (default, held-out) and the held-out statistics
SCHEMA = ResultsSchema("coupled_oscillator", {
    "settings": "object", "tables": Values(Each(Obj(required={"method": "str", **TABLE_ROW.required},
                                                    optional=TABLE_ROW.optional))),
    "heldout_statistics": Each(Obj(required={"method": "str", "error": INTERVAL, "drift": INTERVAL},
                                   optional={"kind": "str", "seeds": "list", "n_ics": "int?",
                                             "seed_medians": Each("number?"), "seed_ci": Each("number?")}))},
    fix="give the results.json of a vp-study coupled_oscillator run")


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` this study wrote (the shipped one: ``docs/data/coupled_oscillator_study.json``) with
    its numbers as the study computed them (±inf restored, ``null`` the NaN it was), so that
    [`format_table`][vpintegrator.studies.coupled_oscillator.format_table] and the held-out statistics draw
    its tables without the run directory."""
    doc = read_checked(path, ("settings", "tables", "heldout_statistics"), "vp-study coupled_oscillator", SCHEMA)
    return {**doc, "tables": unplain(doc["tables"], math.nan),
            "heldout_statistics": unplain(doc["heldout_statistics"], math.nan)}


def write_results(run: Path, commands: list[str] | None = None) -> str:
    """Build RUN/results.json and RUN/results.md from the rollout tables and training runs; return the
    Markdown."""
    run = Path(run)
    settings = read_json(run / "settings.json") or {}
    if commands is not None:
        settings = {**settings, "commands": commands}
    tables = {name: build_rows(run, name) for name in EVAL_SETS}
    if not any(tables.values()):
        raise StudyError(f"{run}: no rollout tables (rollout/default.csv); run the study first (without --table-only)")
    doc = {"settings": settings, "tables": tables, "heldout_statistics": heldout_statistics(run)}
    text = format_results(doc, run)
    write_text(run / "results.md", text)
    write_json(run / "results.json", {**doc, "provenance": results_provenance(run)})
    return text


def format_results(doc: dict[str, Any], run: Path | None = None) -> str:
    """The Markdown of a results document (``read_results``: ``settings``, ``tables``, ``heldout_statistics``);
    with ``run``, its run directory, also the sections drawn from its files alone (the attention records,
    the work-precision table)."""
    settings, tables, stats = doc["settings"], doc["tables"], doc["heldout_statistics"]
    commands = settings.get("commands", [])
    n_steps = settings.get("n_steps")
    t_end = settings.get("t_end")
    titles = {
        "default": "GeometricProblems' default initial condition q0 = (1, 0), p0 = (2, 0)",
        "heldout": f"{settings.get('heldout', '?')} held-out initial conditions (box, seed 1; drift: worst, "
                   "error and valid time: mean over them)",
    }
    md = [
        "# Coupled oscillator: learned integrators (" + ", ".join(
            _NAMES.get(m, m) for m in settings.get("models", ["vpt", "st"])) + ") vs Störmer–Verlet and RK4",
        "",
        f"{n_steps} steps of dt = {DT} (t in [0, {t_end}]); reference: DOP853 (rtol = atol = 1e-12). Models: "
        f"seeds {settings.get('seeds')}, {_budget_text(settings)} "
        f"({settings.get('jobs')} at a time, one thread), Levenberg–Marquardt, float64, best.pt = the epoch with the best validation score (the study configs: monitor = val_rollout, the mean relative error of a free rollout of the validation trajectories to t = 200); "
        "first window (3 states) from the reference; non-overlapping windows. Models: mean ± std over seeds "
        "(ddof = 1). Energy drift: max_t |H(t) − H(0)| / |H(0)|; slope: linear fit of the relative drift against t. "
        "Valid prediction time: first t with relative error > 0.1. log det J: per step (integrators) or per "
        "window map (models), cumulated (inf: a singular map, log|det J| = −inf somewhere). A blown-up rollout "
        "(|z| > 1000 |z0| or not finite) makes its drift and error inf; its slope is then meaningless.",
        "",
    ]
    for name in EVAL_SETS:
        if tables[name]:
            md += [f"## {titles[name]}", "", format_table(tables[name]).rstrip("\n"), "",
                   f"Figures: `figures/{name}/` (invariants = energy, error, volume).", ""]
    if stats:
        md += _statistics_section(stats, float(t_end if t_end is not None else math.nan))
    if run is not None:
        md += attention.section((p.stem, read_json(p)) for p in sorted((run / "attention").glob("*_s*.json")))
    wp = None if run is None else run / "rollout" / "work_precision_work_precision.csv"
    if wp is not None and wp.exists():
        md += equal_cost_section(wp, title="Work–precision: the classical methods at the models' cost")
        md += ["Figure: `figures/work_precision/` (error and invariant drift against cost, every classical method "
               "over its step ladder, the first seed's models as points).", ""]
    md += ["## Commands", "", "```sh", *commands, "```", ""]
    return "\n".join(md)


# --------------------------------------------------------------------------- main


def run_study(s: Settings, argv: list[str] | None = None) -> str:
    """All steps; returns the results Markdown."""
    run = Path(s.out)
    with study_lock(run):
        return _run(s, run, argv)


def _run(s: Settings, run: Path, argv: list[str] | None) -> str:
    """``run_study`` once RUN is locked."""
    run.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runner = plan(s)
    ok = runner.execute()
    invocation = "vp-study coupled_oscillator " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    previous = (read_json(run / "settings.json") or {}) if s.skip_existing else {}
    record = {**asdict(s), "t_end": s.t_end, "wall_seconds": round(time.perf_counter() - t0, 1),
              "invocation": invocation, "commands": previous.get("commands", []) + runner.commands}
    write_json(run / "settings.json", record)
    if not ok:
        raise runner.failure()
    return write_results(run)


def run(plan: CoupledOscillatorPlan) -> int:
    """The study from its plan (``build_plan``): the runs, or the tables of a run or results file."""
    s, a = plan
    if a.results is not None:  # the tables of a results file (a shipped one by name), no run directory
        print(redraw_from(Path(s.out), a.results, read_results, format_results)[2])
        return 0
    text = write_results(Path(s.out)) if a.table_only else run_study(s, list(a.argv))
    print(text)
    print(f"Results: {Path(s.out) / 'results.md'} and results.json")
    if s.export_pretrained:
        picks = {f"coupled_oscillator_{m}": m for m in s.models if m in SYMPLECTIC_MODELS}
        export.export_pretrained(s.out, picks, s.export_pretrained,
                                 study=f"vp-study coupled_oscillator --out {s.out}")
    return 0


#: the study as the runner runs it (``vp-study coupled_oscillator``, ``scripts/reproduce_coupled_oscillator.py``)
STUDY = Study(CoupledOscillatorOptions, run, build_plan, prog="reproduce_coupled_oscillator.py",
              doc="Coupled-oscillator study: VPT vs standard transformer vs Stormer-Verlet and RK4 over 10^4 steps.",
              required=("out",),
              helps={"out": "Run directory (created).",
                     "seeds": "Comma list of training seeds (default 0,1,2,3,4; --quick: 0).",
                     "export_pretrained": "Then copy, per symplectic model trained, the best.pt of the seed with the "
                     "lowest validation score to DIR/coupled_oscillator_<model>.pt (provenance in "
                     "DIR/provenance.json)."})


if __name__ == "__main__":  # python -m vpintegrator.studies.coupled_oscillator
    from .driver import main

    raise SystemExit(main(STUDY))
