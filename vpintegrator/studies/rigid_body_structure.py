"""The rigid-body structure study: learned maps that keep what the system keeps, next to the VPT,
on held-out initial conditions against the exact flow (the studies' protocol).

The rigid body is Lie–Poisson: every trajectory stays on its sphere ‖z‖ = const (the Casimir) and the flow
is a Poisson map. Per seed, every model of ``--models`` is trained on the paper's 1238 initial conditions
integrated by the exact flow (DOP853, rtol = atol = 1e-12; h = 0.2, t ∈ [0, 20]) with its study config
(``configs/study/rigid_body_<model>.toml``: Levenberg–Marquardt, float64, ``best.pt`` by the validation
trajectories' free rollout to t = 100, scored by the error at t = 100 plus 50 × the worst invariant drift)
for ``--train-seconds`` of wall time on one thread. Then::

    RUN/
      data/exact.h5                 the paper's ICs by DOP853 (training data; split train/val/test by vp-train)
      data/heldout.toml, heldout.h5 --n-heldout ICs uniform on the unit sphere (seed HELDOUT_SEED, never trained
                                    on), DOP853 to t = 100
      train/<model>_s<seed>/        vp-train run directories
      rollout/heldout_<model>_s<seed>.h5  every held-out IC to t = 100
      rollout/heldout_classical.h5  the same for the classical methods at the same step h = 0.2 and the shipped VPT
      rollout/paper_<model>_s<seed>.h5    the paper's trajectories 1 and 4 (rows 100, 719 of exact.h5; in-sample or
                                    validation, as the split column says) to t = 100
      rollout/long_<model>_s<seed>.h5     the first --n-long held-out ICs to --long-t-end (default 10 000)
      rollout/long_classical.h5     the same for the classical methods and the shipped VPT
      rollout/work_precision*       the first --n-long held-out ICs to t = 100: every classical method over a ladder of
                                    steps, the first seed's models and the shipped VPT as points (vp-rollout
                                    --work-precision); figures/work_precision/ draws it
      attention/<model>_s<seed>.json  the window models' attention coupling and their held-out error with and
                                    without attention (``vpintegrator.studies.attention``; 20 ICs, t = 100)
      results.md, results.json      the table and the targets, per seed
      study.log, logs/              every command, its wall and CPU seconds, its output

Errors are relative, ‖y − y_exact‖ / ‖y_exact‖, against the exact flow (``vp-rollout``'s default reference).
Models start from the exact first window (``--init reference``: seq_len 1 models from the initial condition
alone). The table reports per model and seed the median and the 10–90 % interval of the t = 100 error over
the held-out ICs, the worst Casimir drift to ``--long-t-end``, and the energy drift's growth (its maximum over
[0, long-t-end] over its maximum over [0, 100], worst IC); per model the seeds meeting each target and a
bootstrap 95 % interval over seeds of the median error. ``--export-pretrained DIR`` ships the seed with the
best validation score (validation data only) of ``--ship`` as ``DIR/rigid_body_<model>.pt``.

Usage::

    OMP_NUM_THREADS=1 python scripts/reproduce_rigid_body_structure.py --out runs/rigid_body_structure
    python scripts/reproduce_rigid_body_structure.py --out RUN --table-only

Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from pathlib import Path
from typing import Any

from . import _rollouts, attention, export
from .._shipped import shipped_file
from .rigid_body_results import PAPER_TRAJ, _errors_at, write_heldout_spec
from ..config import key
from ..errors import VPIntegratorError
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, StudyPlan, comma_list, model_list
from .runner import Runner, StudyError, Task, budget_flags, check_study_out, study_lock
from .step_budget import step_budgets
from .schema import Each, Obj, ResultsSchema, Values, numbers, read_results as read_checked
from .work_precision import equal_cost_section
from .stats import (bootstrap_ci, drift_growth, fmt_num, md_table, median_interval, read_json,
                    redraw_from, write_json, write_results_files)

MODELS = ("lpnet", "lpnet_sym", "lp_transformer", "vpt", "vpt_sym")
#: the window models whose attention is measured (``vpintegrator.studies.attention``: coupling, error without it)
ATTENTION_MODELS = ("lp_transformer", "vpt", "vpt_sym")
N_ATTENTION = 20  # held-out ICs of the attention step
CLASSICAL = ("implicit_midpoint", "splitting", "gauss_legendre4")
EQUAL_COST_TITLE = "Work–precision: the classical methods at the models' cost"
SHIPPED_VPT = "pretrained:rigid_body_vpt"
HELDOUT_SEED = 20262  # the held-out ICs' sampler seed (training uses the paper's deterministic 1238 points)
T_EVAL = 100.0
DT = 0.2
#: issue 21's targets (held-out ICs, against the exact flow, t = 100)
MEDIAN_TARGET, P90_TARGET = 0.02, 0.05
CASIMIR_TARGET = 1e-12  # relative Casimir drift to long-t-end
ENERGY_GROWTH_TARGET = 3.0  # max energy drift over [0, long-t-end] / over [0, 100]
ROUNDOFF = 1e-12  # a drift below this is round-off: conserved, whatever its ratio or slope
#: the selection score of issue 21 item 4 for every model of this study (the VPT's config has the old one)
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
    out = Path(a.out)
    if a.table_only and a.results is None and not out.is_dir():
        raise StudyError(f"--table-only: --out {out} is not a run directory; run the study first (or draw a results "
                         "file with --results)")
    if a.results is not None and a.export_pretrained:
        raise StudyError("--export-pretrained copies a checkpoint of a RUN; a results file has none: leave out "
                         "--results")
    if not a.table_only:
        check_study_out(out, a.skip_existing, a.overwrite)
    return a


def _config(model: str) -> str:
    return str(shipped_file(f"configs/study/rigid_body_{model}.toml"))


def _rollout_outputs(h5: Path) -> list[Path]:
    return [h5, h5.with_suffix(".csv"), h5.with_suffix(".md")]


def write_spec(run: Path, n: int) -> Path:
    """The held-out ICs' spec (RUN/data/heldout.toml): by the exact flow, seed HELDOUT_SEED."""
    return write_heldout_spec(run / "data" / "heldout.toml", n, HELDOUT_SEED, "dop853",
                              "the rigid-body structure study (vp-study rigid_body_structure)")


def plan(a: StructurePlan) -> Runner:
    run = Path(a.out)
    r = Runner(run, jobs=a.jobs, skip_existing=a.skip_existing, overwrite=a.overwrite)
    d, rd, q = run / "data", run / "rollout", "--quiet"
    r.add(Task("gen_exact", ["vp-gen", "rigid_body_paper", "--method", "dop853", "--out", d / "exact.h5", q],
               [d / "exact.h5"]))
    r.add(Task("gen_heldout", ["vp-gen", d / "heldout.toml", "--out", d / "heldout.h5", q], [d / "heldout.h5"]))
    for s in a.seeds:  # seed-major: a seed's rollouts start while later seeds train
        for m in a.models:
            out = run / "train" / f"{m}_s{s}"
            r.add(Task(f"train_{m}_s{s}", ["vp-train", _config(m), "--data", d / "exact.h5", "--out", out, "--seed",
                                             str(s), *budget_flags(a.training_budget, a.train_seconds, max_steps=a.step_budgets.get(m)), *SELECTION, q],
                       [out / "best.pt", out / "summary.json"], ["gen_exact"]))
    common = ["--device", "cpu", "--init", "reference", q]
    long = ["--traj", ",".join(str(i) for i in range(a.n_long)), "--t-end", f"{a.long_t_end:g}", "--no-volume"]
    heldout = ["--data", d / "heldout.h5", "--t-end", f"{T_EVAL:g}"]
    classical = ["--integrators", ",".join(CLASSICAL), "--model", f"vpt_shipped={SHIPPED_VPT}"]
    r.add(Task("rollout_heldout_classical", ["vp-rollout", *heldout, *classical, *common, "--out",
                                             rd / "heldout_classical.h5"],
               _rollout_outputs(rd / "heldout_classical.h5"), ["gen_heldout"]))
    r.add(Task("rollout_long_classical", ["vp-rollout", "--data", d / "heldout.h5", *long, *classical, *common,
                                          "--out", rd / "long_classical.h5"],
               _rollout_outputs(rd / "long_classical.h5"), ["gen_heldout"]))
    traj = ",".join(str(i) for i in PAPER_TRAJ.values())
    for s in a.seeds:  # one rollout file per model and seed, so that a model added later adds its own steps
        for m in a.models:
            for name, args, data in (("heldout", heldout, "gen_heldout"),
                                     ("paper", ["--data", d / "exact.h5", "--traj", traj, "--t-end", f"{T_EVAL:g}"],
                                      "gen_exact"),
                                     ("long", ["--data", d / "heldout.h5", *long], "gen_heldout")):
                out = rd / f"{name}_{m}_s{s}.h5"
                r.add(Task(f"rollout_{name}_{m}_s{s}", ["vp-rollout", *args, "--model", f"{m}={run / 'train' / f'{m}_s{s}'}",
                                                         *common, "--out", out],
                           _rollout_outputs(out), [data, f"train_{m}_s{s}"]))
        for m in (m for m in a.models if m in ATTENTION_MODELS):
            out = run / "attention" / f"{m}_s{s}.json"
            r.add(Task(f"attention_{m}_s{s}", ["python", "-m", "vpintegrator.studies.attention", "--model",
                                                run / "train" / f"{m}_s{s}", "--data", d / "heldout.h5", "--n-traj",
                                                str(min(N_ATTENTION, a.n_heldout)), "--t-end", f"{T_EVAL:g}",
                                                "--out", out],
                       [out], ["gen_heldout", f"train_{m}_s{s}"]))
    s0 = a.seeds[0]
    wp = rd / "work_precision.h5"
    wp_csv = wp.with_name("work_precision_work_precision.csv")
    r.add(Task("rollout_work_precision",
               ["vp-rollout", "--data", d / "heldout.h5", "--traj", ",".join(str(i) for i in range(a.n_long)),
                "--t-end", f"{T_EVAL:g}", *[x for m in a.models for x in ("--model", f"{m}={run / 'train' / f'{m}_s{s0}'}")],
                "--model", f"vpt_shipped={SHIPPED_VPT}", "--work-precision", "--no-volume", *common, "--out", wp],
               [wp, wp_csv], ["gen_heldout", *(f"train_{m}_s{s0}" for m in a.models)]))
    r.add(Task("plot_work_precision", ["vp-plot", wp_csv, "--kind", "work_precision", "--out",
                                       run / "figures" / "work_precision"],
               [run / "figures" / "work_precision"], ["rollout_work_precision"]))
    return r


# --------------------------------------------------------------------------- numbers


def _drifts(r, label: str, name: str):
    """Relative drift of invariant ``name``, shape (n_traj, n); inf where blown up.

    The Casimir of a window model (T states to the next T) is measured against each state's own first-window
    value ([`vpintegrator.metrics.relative_drift`][vpintegrator.metrics.relative_drift] with ``period = T``): the first window comes from the exact
    flow (DOP853 at rtol 1e-12), whose own Casimir error is not the model's. Everything else against I(z_0).
    """
    import numpy as np

    from vpintegrator.metrics import relative_drift

    meta = r.methods[label].meta if label in r.methods else {}
    T = int(meta.get("seq_len", 1) or 1)
    period = (T if name == "casimir" and T > 1 and int(meta.get("pred_window", T) or T) == T
              and not meta.get("overlap") else None)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(relative_drift(r.metrics[label].invariants[name], period=period))
    return np.where(np.isfinite(d), d, np.inf)


def heldout_values(path: Path) -> dict[str, Any]:
    """label -> the t = 100 error over the held-out ICs (median, 10–90 %, mean, per IC) and the worst ‖z‖ band,
    Casimir and energy drift on [0, 100]."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    k = int(np.argmin(np.abs(r.t - T_EVAL)))
    out = {}
    for label, m in r.methods.items():
        _, err = _errors_at(r, label, k)
        out[label] = {**median_interval(err), "mean": float(np.mean(err)), "errors": [float(e) for e in err],
                      "casimir_100": float(_drifts(r, label, "casimir").max()),
                      "energy_100_heldout": float(_drifts(r, label, "energy").max()),
                      "failed": int(np.sum(m.failed_step >= 0)),
                      "seconds_per_step": float(m.meta.get("seconds_per_step", math.nan))}
    return out


def long_values(path: Path) -> dict[str, Any]:
    """label -> worst Casimir and energy drift to the file's horizon, the energy drift's growth (per IC its max
    over [0, t_end] over its max over [0, 100]; the worst IC) and its fit (``vpintegrator.studies.stats.drift_growth`` of the
    worst-IC envelope)."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    early = r.t <= T_EVAL + 1e-9
    out = {}
    for label in r.methods:
        e, c = _drifts(r, label, "energy"), _drifts(r, label, "casimir")
        with np.errstate(invalid="ignore", divide="ignore"):
            growth = e.max(axis=1) / e[:, early].max(axis=1)
        growth = np.where(np.isnan(growth), np.inf, growth)
        envelope = np.maximum.accumulate(e.max(axis=0))
        fit = drift_growth(r.t[1:], envelope[1:])
        if np.isfinite(envelope[-1]) and envelope[-1] <= ROUNDOFF:
            fit = {**fit, "kind": "round-off"}  # conserved to rounding: its growth is the rounding's
        out[label] = {"t_end": float(r.t[-1]), "casimir_long": float(c.max()), "energy_long": float(e.max()),
                      "energy_100": float(e[:, early].max()),
                      "energy_growth": float(growth.max()), "energy_fit": fit}
    return out


def paper_values(path: Path) -> dict[str, Any]:
    """label -> {traj1, traj4: t = 100 error} and the split labels of the two rows."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    k = int(np.argmin(np.abs(r.t - T_EVAL)))
    pos = {name: int(np.flatnonzero(r.traj_index == idx)[0]) for name, idx in PAPER_TRAJ.items()
           if np.any(r.traj_index == idx)}
    out = {}
    for label in r.methods:
        rel = r.metrics[label].rel_error[:, k]
        splits = {row["split"] for row in r.table if row.get("method") == label and row.get("split")}
        out[label] = {**{name: float(rel[i]) for name, i in pos.items()}, "split": ",".join(sorted(splits))}
    return out


def _met(v: dict[str, Any]) -> dict[str, Any]:
    return {"error": v.get("median") is not None and v["median"] <= MEDIAN_TARGET and v["hi"] <= P90_TARGET,
            "casimir": v.get("casimir_long", math.inf) <= CASIMIR_TARGET,
            "energy": (v.get("energy_growth", math.inf) <= ENERGY_GROWTH_TARGET
                       or v.get("energy_long", math.inf) <= ROUNDOFF)}


def build_results(run: Path) -> dict[str, Any]:
    settings = read_json(run / "settings.json") or {}
    rd = run / "rollout"
    rows = []
    for d in sorted((run / "train").glob("*_s*"), key=lambda p: (p.name.rsplit("_s", 1)[0], int(p.name.rsplit("_s", 1)[1]))):
        model, seed = d.name.rsplit("_s", 1)
        summary = read_json(d / "summary.json") or {}
        v: dict[str, Any] = {"model": model, "seed": int(seed), "train_loss": summary.get("train_loss"),
             "val_score": summary.get("best_loss"), "best_epoch": summary.get("best_epoch"),
             "wall_time": summary.get("wall_time"), "n_params": summary.get("n_params"),
             "cpu_time": (read_json(run / ".tasks" / f"train_{d.name}.json") or {}).get("cpu_s")}
        v.update(heldout_values(rd / f"heldout_{d.name}.h5").get(model, {}))
        v.update(long_values(rd / f"long_{d.name}.h5").get(model, {}))
        v["paper"] = paper_values(rd / f"paper_{d.name}.h5").get(model, {})
        v["attention"] = read_json(run / "attention" / f"{model}_s{seed}.json")
        v["met"] = _met(v)
        rows.append(v)
    classical: dict[str, dict[str, Any]] = heldout_values(rd / "heldout_classical.h5")
    for label, lv in long_values(rd / "long_classical.h5").items():
        classical.setdefault(label, {}).update(lv)
    for v in classical.values():
        v["met"] = _met(v)
    per_model: dict[str, dict[str, Any]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        sel = [r for r in rows if r["model"] == model and r.get("median") is not None]
        per_model[model] = {
            "seeds": len(sel), **{f"met_{k}": sum(r["met"][k] for r in sel) for k in ("error", "casimir", "energy")},
            "met_all": sum(all(r["met"].values()) for r in sel),
            "median_ci": bootstrap_ci([r["median"] for r in sel]),
            "selected_seed": min(sel, key=lambda r: r["val_score"] if r["val_score"] is not None else math.inf)["seed"]
            if sel else None,
        }
    wp = rd / "work_precision_work_precision.csv"
    equal_cost = equal_cost_section(wp, title=EQUAL_COST_TITLE) if wp.is_file() else []
    return {"settings": {**settings, "run": str(run)}, "rows": rows, "classical": classical, "per_model": per_model,
            "equal_cost": equal_cost}


#: a row of results.json (``vpintegrator.studies.schema``): one model and seed
ROW = numbers("val_score", "median",
              optional=("train_loss", "wall_time", "cpu_time", "lo", "hi", "mean", "casimir_100", "energy_100_heldout",
                        "seconds_per_step", "t_end", "casimir_long", "energy_long", "energy_100", "energy_growth"),
              model="str", seed="int", met=Values("bool?"), n="int?", best_epoch="int?", n_params="int?", failed="int?",
              errors=Each("number?"), energy_fit="object?", paper="object?", attention="object?")
#: what results.json holds
SCHEMA = ResultsSchema("rigid_body_structure", {
    "settings": "object", "rows": Each(Obj(required={"model": "str", "seed": "int", "met": Values("bool?"),
                                                     **ROW.required}, optional=ROW.optional)),
    "classical": Values(numbers(optional=("median", "lo", "hi", "mean"), n="int?", errors=Each("number?"))),
    "per_model": Values("object")}, fix="give the results.json of a vp-study rigid_body_structure run")


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` this study wrote (the shipped one: ``docs/data/rigid_body_structure_study.json``) as
    [`build_results`][vpintegrator.studies.rigid_body_structure.build_results] gives it (±inf restored), so that
    [`format_results`][vpintegrator.studies.rigid_body_structure.format_results] draws its tables without the
    run directory."""
    return read_checked(path, ("settings", "rows", "classical", "per_model"),
                             "vp-study rigid_body_structure", SCHEMA)


def format_results(res: dict[str, Any]) -> str:
    s = res["settings"]
    f = lambda v: fmt_num(v, 3, small=1e-2, missing="–")  # noqa: E731
    t_long = s.get("long_t_end", 10000.0)
    head = ["model", "seed", "train s (CPU s)", "val score", "err t=100 median [10–90 %]", "mean", "Casimir drift (long)",
            "energy drift t≤100", f"energy drift t≤{t_long:g}", "growth", "fit", "traj 1 / 4 (split)", "targets"]

    def cells(name, seed, v):
        fit = (v.get("energy_fit") or {})
        paper = v.get("paper") or {}
        met = v.get("met") or {}
        cpu = f" ({f(v['cpu_time'])})" if v.get("cpu_time") is not None else ""
        return [name, seed, f(v.get("wall_time")) + cpu, f(v.get("val_score")),
                f"{f(v.get('median'))} [{f(v.get('lo'))}, {f(v.get('hi'))}]", f(v.get("mean")),
                f(v.get("casimir_long")), f(v.get("energy_100")), f(v.get("energy_long")), f(v.get("energy_growth")),
                f"{fit.get('kind') or '–'} (p = {f(fit.get('exponent'))})",
                (f"{f(paper.get('traj1'))} / {f(paper.get('traj4'))} ({paper.get('split', '')})" if paper else "–"),
                " ".join(k for k in ("error", "casimir", "energy") if met.get(k)) or "none"]

    body = [cells(r["model"], str(r["seed"]), r) for r in res["rows"]]
    body += [cells(label, "–", v) for label, v in res["classical"].items()]
    lines = [
        "# Rigid body: structure-preserving learned maps on held-out initial conditions", "",
        f"Training: the paper's 1238 ICs by the exact flow (DOP853, rtol = atol = 1e-12), h = {DT}, t ∈ [0, 20]; "
        + (f"Levenberg–Marquardt per model and seed on one thread to its validation plateau (patience "
           f"{s.get('patience')} epochs) or a step budget of {s.get('train_seconds', '?')} CPU s in measured epoch costs "
           f"({', '.join(f'{m} {n}' for m, n in (s.get('step_budgets') or {}).items())} steps); best.pt by the "
           if s.get("budget") == "plateau" else
           f"{s.get('train_seconds', '?')} s (wall) of Levenberg–Marquardt per model and seed on one thread (the CPU "
           "seconds each got beside it); best.pt by the " if s.get("budget", "wall") == "wall" else
           f"{s.get('train_seconds', '?')} CPU s (wall ceiling {s.get('wall_ceiling')}x) of Levenberg–Marquardt per "
           "model and seed on one thread (the wall seconds each took beside it); best.pt by the ")
        + "validation trajectories' rollout (error at t = 100 + 50 × worst invariant drift). Evaluation: "
        f"{s.get('n_heldout', '?')} held-out ICs uniform on the unit sphere (seed {HELDOUT_SEED}, never trained on), "
        f"errors ‖y − y_exact‖/‖y_exact‖ against the exact flow at t = {T_EVAL:g}; long runs: the first "
        f"{s.get('n_long', '?')} of them to t = {t_long:g}. Drifts are relative, worst IC. 'growth' = max energy "
        f"drift over [0, {t_long:g}] / over [0, 100] (worst IC); 'fit' = the slope p of log(envelope) against log t "
        "over the later half (bounded if p < 0.25; round-off: the drift stays below 1e-12, conserved to rounding). Traj 1 / 4: the paper's rows 100 / 719 of the training file "
        "(split = the model's own split label: in-sample unless test). Classical methods and the shipped VPT "
        f"(`{SHIPPED_VPT}`, trained on implicit-midpoint data) at the same step h = {DT}.", "",
        f"Targets per seed: median error ≤ {MEDIAN_TARGET} and 90th percentile ≤ {P90_TARGET} ('error'), Casimir "
        f"drift ≤ {CASIMIR_TARGET:g} to t = {t_long:g} ('casimir'), growth ≤ {ENERGY_GROWTH_TARGET:g} or the energy "
        f"drift below {ROUNDOFF:g} throughout ('energy').", "",
        *md_table(head, body), "",
    ]
    for model, pm in res["per_model"].items():
        lo, hi = pm["median_ci"]
        lines.append(f"- {model}: error target met by {pm['met_error']} of {pm['seeds']} seeds, Casimir by "
                     f"{pm['met_casimir']}, energy growth by {pm['met_energy']}, all three by {pm['met_all']}; "
                     f"median error over seeds, bootstrap 95 % interval [{f(lo)}, {f(hi)}]; the validation score "
                     f"selects seed {pm['selected_seed']}")
    if res.get("equal_cost"):
        lines += ["", *res["equal_cost"],
                  "Figure: `figures/work_precision/` (error and invariant drift against cost; the first seed's models "
                  "and the shipped VPT as points).", ""]
    lines += ["", *attention.section((f"{r['model']} s{r['seed']}", r.get("attention")) for r in res["rows"])]
    lines += ["", "## Commands", "", "```sh", *s.get("commands", []), "```", ""]
    return "\n".join(lines)


def write_results(run: Path) -> str:
    res = build_results(run)
    if not res["rows"]:
        raise StudyError(f"{run}: no training runs (train/<model>_s<seed>); run the study first")
    return write_results_files(run, format_results(res), res)


def run(a: StructurePlan) -> int:
    run = Path(a.out)
    if a.results is not None:  # the tables of a results file (a shipped one by name), no run directory
        print(redraw_from(run, a.results, read_results, format_results)[2])
        return 0
    if not a.table_only:
        with study_lock(run):
            run.mkdir(parents=True, exist_ok=True)
            write_spec(run, a.n_heldout)
            runner = plan(a)
            ok = runner.execute()
            previous = (read_json(run / "settings.json") or {}) if a.skip_existing else {}
            write_json(run / "settings.json", {
                "models": a.models, "seeds": a.seeds, "train_seconds": a.train_seconds, "n_heldout": a.n_heldout,
                "n_long": a.n_long, "long_t_end": a.long_t_end, "jobs": a.jobs,
                "budget": a.budget, "wall_ceiling": a.wall_ceiling, "patience": a.patience,
                "step_budgets": a.step_budgets,
                "commands": previous.get("commands", []) + runner.commands})
        if not ok:
            raise runner.failure()
    print(write_results(run))
    if a.export_pretrained:
        export.export_pretrained(run, {f"rigid_body_{a.ship}": a.ship}, a.export_pretrained,
                                 study=f"vp-study rigid_body_structure --out {run}",
                                 phases=f"{a.train_seconds:g} {a.budget} s of LM on exact-flow data")
    return 0


#: the study as the runner runs it (``vp-study rigid_body_structure``, ``scripts/reproduce_rigid_body_structure.py``)
STUDY = Study(StructureOptions, run, build_plan, doc=__doc__, prog="reproduce_rigid_body_structure.py",
              required=("out",), defaults={"seeds": "0,1,2,3,4"},
              helps={"export_pretrained": "Copy --ship's best.pt of the seed with the best validation score to "
              "DIR/rigid_body_<model>.pt."})


if __name__ == "__main__":  # python -m vpintegrator.studies.rigid_body_structure
    from .driver import main

    raise SystemExit(main(STUDY))
