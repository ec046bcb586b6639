"""The rigid-body quality targets over seeds: does the VPT keep ‖z‖ within 1 ± 1e-3 on [0, 100] and reach a
relative error ≤ 0.05 at t = 100 on the paper's trajectories 1 and 4, for most seeds?

Per seed, two or three training phases of the study VPT config (``configs/study/rigid_body_vpt.toml``:
Levenberg–Marquardt, float64, ``best.pt`` by the validation rollout to t = 100), one thread each:

1. ``train/p1_s<seed>``: one-window targets for ``--phase1-seconds``;
2. ``train/p2_s<seed>``: ``init_from`` phase 1's ``best.pt``, ``unroll = --unroll`` (the loss of the model's
   own rollout over that many windows) for ``--phase2-seconds``;
3. optionally ``train/p3_s<seed>``: from phase 2's ``best.pt`` with ``unroll = --unroll3`` for
   ``--phase3-seconds``.

Each phase's ``best.pt`` is rolled out (``rollout/<im|exact>_<phase>_s<seed>.h5``) on trajectories 1 and 4 (rows 100 and 719 of the paper's data) to
t = 100, against the data's generator (implicit midpoint; the first window by two implicit-midpoint steps,
as the paper) and against the exact flow (DOP853 data; the first window from it). The table has each
seed's training loss, validation score, relative error at t = 100 and ‖z‖ band, the targets met, and the
seed the validation score selects (validation data only)::

    python scripts/reproduce_rigid_body_quality.py --out runs/rigid_body_quality            # 5 seeds
    python scripts/reproduce_rigid_body_quality.py --out RUN --table-only

Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass
import math
import shutil
from pathlib import Path

from . import export
from .rigid_body_results import BAND_TARGET, ERROR_TARGET, PAPER_TRAJ, rollout_values
from .._shipped import shipped_file
from ..config import key
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, StudyPlan
from .runner import Runner, StudyError, Task, budget_flags, check_out_dir
from .step_budget import nearest_cost, step_budget
from .schema import Each, Obj, ResultsSchema, read_results as read_checked
from .stats import fmt_num, md_table, read_json, redraw_from, write_results_files

PHASES = ("p1", "p2", "p3")
T_END = 100.0
#: CPU seconds of one training epoch (10 Levenberg–Marquardt iterations and the validation rollout) of the shipped
#: study config (``configs/study/rigid_body_vpt.toml``) on the paper's implicit-midpoint data, by unroll, one
#: thread, epochs 2–4 of a 4-epoch run (measured 2026-11-26 on the 2-core development machine at a load of about 5);
#: an unroll between or beyond them is scaled from the one below (``step_budget.nearest_cost``). ``--budget
#: plateau`` (the default) turns each phase's seconds into that many whole epochs, the same steps on any machine
EPOCH_COSTS = {("vpt", 1): 1.78, ("vpt", 3): 9.70, ("vpt", 5): 22.45}
LM_STEPS_PER_EPOCH = 10


@dataclass
class QualityOptions(StudyOptions):
    """The quality study's own keys, beside the shared ones of ``StudyOptions``.

    Parameters
    ----------
    phase1_seconds : float
        Phase 1 seconds (default 450.0): with --budget plateau (the default) that many CPU seconds in whole
        epochs of the shipped config's measured cost at the phase's unroll (EPOCH_COSTS; --max-steps: the steps
        themselves, and needed with another --config), the same steps on any machine; CPU seconds with --budget
        cpu, wall with --budget wall.
    phase2_seconds : float
        Phase 2 seconds (default 450.0).
    unroll : int
        Phase 2's unroll (default 3).
    phase3_seconds : float
        Phase 3 seconds (default 0: no phase 3).
    unroll3 : int
        Phase 3's unroll (default 5).
    config : str
        vp-train TOML (default: the shipped config study/rigid_body_vpt, vp-train --list).
    """

    phase1_seconds: float = key(450.0, type=float, low=0.0, open_low=True, expected="a positive number of seconds")
    phase2_seconds: float = key(450.0, type=float, low=0.0, open_low=True, expected="a positive number of seconds")
    unroll: int = key(3, type=int, low=1, expected=">= 1")
    phase3_seconds: float = key(0.0, type=float, low=0.0, expected="a number of seconds >= 0 (0: no phase 3)")
    unroll3: int = key(5, type=int, low=1, expected=">= 1")
    config: str = key(default_factory=lambda: str(shipped_file("configs/study/rigid_body_vpt.toml")), type=str)
    #: the shared key, with this study's default: each phase stops at its validation plateau or step budget
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)


@dataclass(frozen=True, kw_only=True)
class QualityPlan(StudyPlan):
    """The study's keys, checked once (``build_plan``)."""

    seeds: list[int]
    phase1_seconds: float
    phase2_seconds: float
    unroll: int
    phase3_seconds: float
    unroll3: int
    config: str
    #: each phase's step budget (optimiser steps) under ``budget = "plateau"``
    step_budgets: dict[str, int]


def _step_budgets(config: str, given: int | None, phase_list: list[tuple[str, float, int]]) -> dict[str, int]:
    """Each phase's seconds in whole epochs of the shipped config's cost at its unroll (``given``, ``--max-steps``,
    wins; another ``config`` has no measured cost and needs it)."""
    shipped = Path(config).resolve() == Path(shipped_file("configs/study/rigid_body_vpt.toml")).resolve()
    out = {}
    for name, seconds, unroll in phase_list:
        cost, source = nearest_cost(EPOCH_COSTS, ("vpt",), unroll, label="unroll") if shipped else (None, "")
        out[name] = step_budget(seconds, cost, LM_STEPS_PER_EPOCH, given=given, source=source,
                                what=f"phase {name[1]} of --config {config}").max_steps
    return out


def build_plan(options: QualityOptions, argv: tuple[str, ...] = ()) -> QualityPlan:
    """The study's plan: the checked keys, with the checks that need the file system."""
    o = options
    a = QualityPlan(**StudyPlan.shared(o, argv, seeds=[0, 1, 2, 3, 4]),
                    phase1_seconds=o.phase1_seconds, phase2_seconds=o.phase2_seconds, unroll=o.unroll,
                    phase3_seconds=o.phase3_seconds, unroll3=o.unroll3, config=o.config,
                    step_budgets=(_step_budgets(o.config, o.max_steps, _phases(o.phase1_seconds, o.phase2_seconds, o.unroll,
                                                                    o.phase3_seconds, o.unroll3))
                                  if o.budget == "plateau" and not o.table_only else {}))
    if not a.table_only and not Path(a.config).is_file():
        raise StudyError(f"--config {a.config}: no such file; give a vp-train TOML")
    check_out_dir(Path(a.out))
    a.check_out()
    return a


_QUALITY = Obj(optional={"error": Each("number?"), "band": Each("number?")})
#: what results.json holds (``vpintegrator.studies.schema``): per phase and seed, the training and the targets
SCHEMA = ResultsSchema("rigid_body_quality", {"settings": "object", "rows": Each(Obj(
    required={"phase": "str", "seed": "int", "train_loss": "number?", "val_score": "number?", "wall_time": "number?"},
    optional={"best_epoch": "int?", "im": _QUALITY, "exact": _QUALITY, "im_met": "bool", "exact_met": "bool"}))},
    label=("phase",), fix="give the results.json of a vp-study rigid_body_quality run")


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` this study wrote (none ships with the package), checked against ``SCHEMA``, its numbers
    back."""
    return read_checked(path, ("settings", "rows"), "vp-study rigid_body_quality", SCHEMA)


def _phases(seconds1: float, seconds2: float, unroll: int, seconds3: float, unroll3: int) -> list[tuple[str, float, int]]:
    out = [("p1", seconds1, 1), ("p2", seconds2, unroll)]
    return out + ([("p3", seconds3, unroll3)] if seconds3 > 0 else [])


def phases(a: QualityPlan) -> list[tuple[str, float, int]]:
    """(name, seconds, unroll) of each training phase; each after the first starts from the one before."""
    return _phases(a.phase1_seconds, a.phase2_seconds, a.unroll, a.phase3_seconds, a.unroll3)


def plan(a: QualityPlan) -> Runner:
    run = Path(a.out)
    r = Runner(run, jobs=a.jobs, skip_existing=a.skip_existing, overwrite=a.overwrite)
    d = run / "data"
    for name, method in (("im", "implicit_midpoint"), ("exact", "dop853")):
        r.add(Task(f"gen_{name}", ["vp-gen", "rigid_body_paper", "--method", method, "--out", d / f"{name}.h5",
                                   "--quiet"], [d / f"{name}.h5"]))
    traj = ",".join(str(i) for i in PAPER_TRAJ.values())
    for s in a.seeds:
        common = ["--data", d / "im.h5", "--seed", str(s), "--quiet"]
        previous: Path | None = None  # annotated: mypy 1.20 and 2.4 crash inferring it through the loop
        for phase, seconds, unroll in phases(a):
            out = run / "train" / f"{phase}_s{s}"
            name = f"train_{phase}_s{s}"
            if out.exists() and not r.stamp(name).exists():
                shutil.rmtree(out)  # an unfinished run of an interrupted study: train it again
            start = [] if previous is None else ["--set", f"unroll={unroll}", "--set", f"init_from={previous / 'best.pt'}"]
            r.add(Task(name, ["vp-train", a.config, *common, "--out", out, *budget_flags(a.training_budget, seconds, max_steps=a.step_budgets.get(phase)), *start],
                       [out / "best.pt", out / "summary.json"],
                       ["gen_im"] if previous is None else [f"train_{previous.name}"]))
            for ref, init in (("im", "implicit_midpoint"), ("exact", "reference")):
                roll = run / "rollout" / f"{ref}_{phase}_s{s}.h5"
                r.add(Task(f"rollout_{ref}_{phase}_s{s}",
                           ["vp-rollout", "--data", d / f"{ref}.h5", "--model", f"{phase}_s{s}={out}",
                            "--integrators", "implicit_midpoint", "--traj", traj, "--init", init, "--t-end",
                            f"{T_END:g}", "--device", "cpu", "--quiet", "--out", roll], [roll], [f"gen_{ref}", name]))
            previous = out
    return r


def _quality(path: Path) -> dict[str, dict[str, list[float]]]:
    """label -> {"error": [traj1, traj4] at t = 100, "band": [traj1, traj4]} of one rollout file (the
    numbers of the rigid-body study's table, ``vpintegrator.studies.rigid_body_results.rollout_values``)."""
    return {label: {"error": [v[f"err100_{t}"] for t in PAPER_TRAJ], "band": [v[f"band_{t}"] for t in PAPER_TRAJ]}
            for label, v in rollout_values(path).items()}


def build_rows(run: Path) -> list[dict[str, Any]]:
    rows = []
    for p in sorted((run / "train").glob("p[123]_s*"), key=lambda p: (p.name[:2], int(p.name.split("_s")[1]))):
        phase, seed = p.name.split("_s")
        summary = read_json(p / "summary.json") or {}
        row = {"phase": phase, "seed": int(seed), "train_loss": summary.get("train_loss", math.nan),
               "val_score": summary.get("best_loss", math.nan), "best_epoch": summary.get("best_epoch"),
               "wall_time": summary.get("wall_time", math.nan)}
        for ref in ("im", "exact"):
            f = run / "rollout" / f"{ref}_{phase}_s{seed}.h5"
            q = _quality(f).get(p.name, {}) if f.exists() else {}
            row[ref] = q
            if q:
                row[f"{ref}_met"] = bool(max(q["error"]) <= ERROR_TARGET and max(q["band"]) <= BAND_TARGET)
        rows.append(row)
    return rows


def format_results(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    head = ["phase", "seed", "wall s", "train loss", "val score", "err t=100 traj 1 / 4", "‖z‖ band traj 1 / 4",
            "targets (IM)", "err vs exact 1 / 4", "band vs exact 1 / 4", "targets (exact)"]
    body = []
    f = lambda v: fmt_num(v, 3, small=1e-2, missing="–")  # noqa: E731
    for r in rows:
        cells = [r["phase"], str(r["seed"]), f(r["wall_time"]), f(r["train_loss"]), f(r["val_score"])]
        for ref in ("im", "exact"):
            q = r.get(ref) or {}
            cells += [" / ".join(f(v) for v in q.get("error", [])) or "–",
                      " / ".join(f(v) for v in q.get("band", [])) or "–",
                      {True: "met", False: "missed"}.get(r.get(f"{ref}_met"), "–")]
        body.append(cells)
    lines = [
        "# Rigid body: the quality targets over seeds", "",
        f"Targets: relative error at t = {T_END:g} ≤ {ERROR_TARGET} and ‖z‖ within 1 ± {BAND_TARGET:g} on "
        f"[0, {T_END:g}], trajectories 1 and 4 (rows {', '.join(map(str, PAPER_TRAJ.values()))}). "
        + ("" if settings.get("budget", "wall") == "wall" else
           f"Each phase to its validation plateau (patience {settings.get('patience')} epochs) or a step budget of "
           f"its seconds in measured epoch costs ({', '.join(f'{k} {n}' for k, n in (settings.get('step_budgets') or {}).items())} "
           "steps). " if settings.get("budget") == "plateau" else
           f"Budgets in CPU seconds (wall ceiling {settings.get('wall_ceiling')}x). ")
        + "Phase 1: "
        f"{settings.get('phase1_seconds')} s of one-window LM; phase 2: {settings.get('phase2_seconds')} s more with "
        f"unroll = {settings.get('unroll')} from phase 1's best.pt"
        + (f"; phase 3: {settings.get('phase3_seconds')} s more with unroll = {settings.get('unroll3')} from phase 2's "
           "best.pt" if settings.get("phase3_seconds") else "") + ". IM: against the implicit-midpoint data (first "
        "window by implicit midpoint); exact: against DOP853 data (first window from it).", "",
        *md_table(head, body), "",
    ]
    for phase in PHASES:
        sel = [r for r in rows if r["phase"] == phase]
        if not sel:
            continue
        for ref in ("im", "exact"):
            rolled = [r for r in sel if f"{ref}_met" in r]  # seeds whose rollout exists
            met = [r for r in rolled if r[f"{ref}_met"]]
            lines.append(f"- {phase}, {ref}: targets met by {len(met)} of {len(rolled)} seeds "
                         f"({', '.join(str(r['seed']) for r in met) or 'none'})")
        best = min(sel, key=lambda r: (r["val_score"] if isinstance(r["val_score"], float) else math.inf))
        lines.append(f"- {phase}: the validation score selects seed {best['seed']} ({f(best['val_score'])})")
    lines += ["", "## Commands", "", "```sh", *settings.get("commands", []), "```", ""]
    return "\n".join(lines)


def write_results(run: Path) -> str:
    settings = read_json(run / "settings.json") or {}
    rows = build_rows(run)
    if not rows:
        raise StudyError(f"{run}: no training runs (train/p1_s*); run the study first")
    return write_results_files(run, format_results(rows, settings), {"settings": settings, "rows": rows})


def run(a: QualityPlan) -> int:
    run = Path(a.out)
    if a.results is not None:  # the tables of a results.json of this study, no run directory
        print(redraw_from(run, a.results, read_results, lambda r: format_results(r["rows"], r["settings"]))[2])
        return 0
    a.run_recorded(plan, {
        "seeds": a.seeds, "phase1_seconds": a.phase1_seconds, "phase2_seconds": a.phase2_seconds,
        "unroll": a.unroll, "phase3_seconds": a.phase3_seconds, "unroll3": a.unroll3,
        "config": str(a.config), "jobs": a.jobs, "budget": a.budget, "wall_ceiling": a.wall_ceiling,
        "patience": a.patience, "step_budgets": a.step_budgets})
    print(write_results(run))
    if a.export_pretrained:
        last = "p3" if a.phase3_seconds > 0 else "p2"
        phases = f"{a.phase1_seconds:g} s one-window LM, then {a.phase2_seconds:g} s with unroll = {a.unroll}"
        if a.phase3_seconds > 0:
            phases += f", then {a.phase3_seconds:g} s with unroll = {a.unroll3}"
        export.export_pretrained(run, {"rigid_body_vpt": last}, a.export_pretrained,
                                 study=f"vp-study rigid_body_quality --out {run}", phases=phases)
    return 0


#: the study as the runner runs it (``vp-study rigid_body_quality``, ``scripts/reproduce_rigid_body_quality.py``)
STUDY = Study(QualityOptions, run, build_plan, doc=__doc__, prog="reproduce_rigid_body_quality.py",
              required=("out",), defaults={"seeds": "0,1,2,3,4"},
              helps={"export_pretrained": "Then copy phase 2's best.pt of the seed with the lowest validation score "
              "(validation data only) to DIR/rigid_body_vpt.pt and record it in DIR/provenance.json."})


if __name__ == "__main__":  # python -m vpintegrator.studies.rigid_body_quality
    from .driver import main

    raise SystemExit(main(STUDY))
