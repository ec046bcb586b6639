"""The rigid-body study's CPU timing: the reference spec of its runs and their summary (``timing/timing.json``,
``timing.md``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ...clock import METER_RULE
from .. import _rollouts
from ..stats import fmt_num, md_table, read_json, write_if_changed, write_json, write_text
from .design import ALL_MODELS, DT, INTEGRATORS, PAPER, PAPER_TIMING_T, PAPER_TRAJ


def write_timing(run: str | Path, t_end: float | None = None) -> dict[str, Any]:
    """Collect the timing of ``run`` into ``timing/timing.json`` and ``timing/timing.md``; return the dict.

    Per method (one trajectory, batch 1, to ``t_end``): ``meter_s``, the steps' CPU seconds on the package's one
    cost meter (``timing/cost.json`` of the cost step, ``vpintegrator.studies.rigid_body_results.cost``: every
    row in one process, warm, the minimum over interleaved rounds, thread CPU; ``meter_setup_s`` its cold
    call's extra, ``meter_clock``, ``meter_repeats``), and ``meter_paper_s``, the same per step times the paper's
    number of steps (t = ``PAPER_TIMING_T``: measured there in the full study, scaled from ``t_end`` otherwise);
    ``cpu_s`` and ``wall_s``, the whole ``vp-rollout`` process of the row (interpreter start-up, imports, model
    loading and the steps: a process's cost, never a difference of two); ``engine_s``, that process's own engine
    seconds (its csv's ``seconds_per_step`` times the steps; wall seconds in files written before the engine
    timed CPU); ``paper_julia_s``, the paper's figure at t = 50 000 where it has one.
    """
    run = Path(run)
    td = run / "timing"
    out: dict = {"t_end": t_end, "dt": DT, "trajectory": PAPER_TRAJ["traj1"], "batch": 1, "paper_t_end": PAPER_TIMING_T,
                 "methods": {}}
    cost = read_json(td / "cost.json") or {}
    metered = cost.get("rows", {})
    labels = {c.stem for c in td.glob("*.csv") if not c.stem.endswith("_short")} | set(metered)  # (_short: old runs)
    order = {m: i for i, m in enumerate((*ALL_MODELS, *INTEGRATORS))}
    n_steps = int(round((t_end or 0.0) / DT)) if t_end else None
    paper_steps = int(round(PAPER_TIMING_T / DT))
    for label in sorted(labels, key=lambda m: (order.get(m, 99), m)):
        entry: dict[str, Any] = {}
        if (td / f"{label}.csv").is_file():
            row = _rollouts.metrics_table(td / f"{label}.csv")[0]
            entry.update(seconds_per_step=row.get("seconds_per_step"), failed=row.get("failed"))
            if n_steps and isinstance(row.get("seconds_per_step"), float):
                entry["engine_s"] = row["seconds_per_step"] * n_steps
        full = read_json(run / ".tasks" / f"timing_{label}.json")
        if full:
            entry.update(cpu_s=full["cpu_s"], wall_s=full["wall_s"])
        if label in metered and cost.get("n_steps"):
            c = metered[label]
            entry.update(meter_s=c["seconds"], meter_setup_s=c["setup_seconds"], meter_repeats=c["repeats"],
                         meter_clock=c["clock"], meter_runner=c.get("runner"), meter_t_end=cost["t_end"],
                         meter_paper_s=c["seconds"] / int(cost["n_steps"]) * paper_steps)
        elif label in cost.get("failed", {}):
            entry["meter_failed"] = cost["failed"][label]
        entry["paper_julia_s"] = PAPER.get(label, {}).get("cpu_50000")
        out["methods"][label] = entry
    if not out["methods"]:
        return out
    write_json(td / "timing.json", out)
    measured = cost.get("t_end")
    scaled = "" if measured is None or measured == PAPER_TIMING_T else f" (measured to t = {measured:g}, scaled)"
    lines = [f"CPU seconds, trajectory 1, batch 1, OMP_NUM_THREADS=1. Cost meter: every row in one process to "
             f"t = {measured if measured is not None else math.nan:g}, the engine's thread CPU seconds of the steps, "
             f"{METER_RULE.format(clock='thread_cpu')}; the paper's horizon t = {PAPER_TIMING_T:g} is "
             f"{paper_steps} steps{scaled}. Whole process and engine: one vp-rollout process per row to "
             f"t = {t_end if t_end else math.nan:g} ({n_steps} steps); the engine's seconds are that process's "
             "own timing of the same steps.\n",
             *md_table(["method", "cost meter CPU s", "engine CPU s", "whole process CPU s (start-up included)",
                        "whole process wall s", f"cost meter CPU s to t = {PAPER_TIMING_T:g}{scaled}",
                        f"paper (Julia) s to t = {PAPER_TIMING_T:g}"],
                       [[label, *(fmt_num(e.get(k)) for k in ("meter_s", "engine_s", "cpu_s", "wall_s", "meter_paper_s",
                                                              "paper_julia_s"))] for label, e in out["methods"].items()])]
    failed = {k: e["meter_failed"] for k, e in out["methods"].items() if e.get("meter_failed")}
    if failed:
        lines += ["", "Not priced (the row's rollout raised): " + "; ".join(f"{k}: {v}" for k, v in failed.items())]
    write_text(td / "timing.md", "\n".join(lines) + "\n")
    return out


def write_timing_spec(run: Path, t_end: float) -> None:
    """The timing runs' reference (``RUN/timing/ref.toml``, so the data can be remade): the paper's trajectory 1,
    its initial condition read from ``RUN/data/im.h5``, by RK4 to ``t_end``."""
    from vpintegrator.data import load_spec, read_trajectories

    inertia = load_spec("rigid_body_paper").params["inertia"]
    td = run / "timing"
    td.mkdir(parents=True, exist_ok=True)
    y0 = read_trajectories(run / "data" / "im.h5", traj=[PAPER_TRAJ["traj1"]], steps=[0]).y[0, 0]
    write_if_changed(td / "ref.toml", f"""\
# Reference of the CPU timing runs: the paper's trajectory 1 (row {PAPER_TRAJ['traj1']} of im.h5) to t = {t_end:g}.
# RK4 only because it is cheap: the timing runs measure cost, not accuracy.
description = "Rigid body, trajectory 1 of the paper to t = {t_end:g} (timing reference, RK4)"

[system]
name = "rigid_body"
inertia = {json.dumps(inertia)}

[initial_conditions]
sampler = "list"
points = [{json.dumps([float(v) for v in y0])}]

[integration]
dt = 0.2
t_end = {float(t_end)!r}
method = "rk4"
seed = 0
""")
