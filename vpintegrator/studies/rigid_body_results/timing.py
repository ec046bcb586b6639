"""The rigid-body study's CPU timing: the reference spec of its runs and their summary (``timing/timing.json``,
``timing.md``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import _rollouts
from ..stats import fmt_num, md_table, read_json, write_if_changed, write_json, write_text
from .design import ALL_MODELS, DT, INTEGRATORS, PAPER, PAPER_TRAJ

#: the smallest CPU difference (as a fraction of the short run's whole-process CPU) taken as the steps' cost
RESOLUTION = 0.05


def short_t_end(t_end: float) -> float:
    """The end time of a method's short timing run (``t_end / 10``, at least 2), whose CPU takes the start-up
    out of the full run's."""
    return max(t_end / 10.0, 2.0)


def write_timing(run: str | Path, t_end: float | None = None) -> dict[str, Any]:
    """Collect the timing runs of ``run`` into ``timing/timing.json`` and ``timing/timing.md``; return the dict.

    Per method: the child process's CPU seconds (user + sys, ``wait4``) and wall seconds for the run to
    ``t_end`` and for the short run to ``t_end / 10``; ``cpu_marginal_s`` = the CPU cost of the steps alone,
    extrapolated to ``t_end`` from the difference of the two (start-up, imports, model loading and tracing
    taken out), None (``cpu_marginal_note``: "below resolution") when that difference is within
    ``RESOLUTION`` of the short run's CPU, i.e. not resolved by two process measurements; ``engine_s`` = the rollout engine's own seconds per step (the csv's
    ``seconds_per_step``: CPU seconds of the rolling-out thread, wall seconds in files written before the engine
    timed CPU) times the steps.
    """
    run = Path(run)
    td = run / "timing"
    out: dict = {"t_end": t_end, "dt": DT, "trajectory": PAPER_TRAJ["traj1"], "batch": 1, "methods": {}}
    labels = [csv_.stem for csv_ in sorted(td.glob("*.csv")) if not csv_.stem.endswith("_short")]
    order = {m: i for i, m in enumerate((*ALL_MODELS, *INTEGRATORS))}
    labels.sort(key=lambda m: order.get(m, 99))
    n_steps = int(round((t_end or 0.0) / DT)) if t_end else None
    for label in labels:
        full = read_json(run / ".tasks" / f"timing_{label}.json")
        short = read_json(run / ".tasks" / f"timing_{label}_short.json")
        row = _rollouts.metrics_table(td / f"{label}.csv")[0]
        short_csv = td / f"{label}_short.csv"
        short_rows = _rollouts.metrics_table(short_csv) if short_csv.exists() else None
        entry = {"seconds_per_step": row.get("seconds_per_step"), "failed": row.get("failed")}
        if full:
            entry.update(cpu_s=full["cpu_s"], wall_s=full["wall_s"])
        if full and short:
            entry.update(cpu_short_s=short["cpu_s"], wall_short_s=short["wall_s"])
            if n_steps and t_end:  # n_steps is None without t_end
                n_short = int(round(short_t_end(t_end) / DT))
                diff = full["cpu_s"] - short["cpu_s"]
                # the difference of two whole-process CPU times resolves the steps' cost only when it stands
                # clear of the start-up's run-to-run noise (RESOLUTION of the short run's CPU); below that it
                # can even be negative (the quick job's -0.009 s), so it is not reported: engine_s stands
                if diff > RESOLUTION * short["cpu_s"]:
                    entry["cpu_marginal_s"] = diff / max(n_steps - n_short, 1) * n_steps
                else:
                    entry["cpu_marginal_s"] = None
                    entry["cpu_marginal_note"] = "below resolution"
        if n_steps and isinstance(row.get("seconds_per_step"), float):
            entry["engine_s"] = row["seconds_per_step"] * n_steps
        if short_rows:
            entry["seconds_per_step_short"] = short_rows[0].get("seconds_per_step")
        entry["paper_julia_s"] = PAPER.get(label, {}).get("cpu_50000")
        out["methods"][label] = entry
    if not out["methods"]:
        return out
    write_json(td / "timing.json", out)
    lines = [f"CPU seconds to t = {t_end:g} ({n_steps} steps), trajectory 1, batch 1, one process per method, "
             "OMP_NUM_THREADS=1.\n",
             *md_table(["method", "process CPU s", "process wall s", "CPU s without start-up", "engine CPU s",
                        "paper (Julia, t = 50 000) s"],
                       [[label, *(fmt_num(e.get(k)) for k in ("cpu_s", "wall_s", "cpu_marginal_s", "engine_s",
                                                              "paper_julia_s"))] for label, e in out["methods"].items()])]
    if any(e.get("cpu_marginal_note") for e in out["methods"].values()):
        lines += ["", f"'—' without start-up: the two runs' CPU times differ by less than {RESOLUTION:.0%} of the "
                  "short run's, so the steps' own cost is below what two process measurements resolve; the engine's "
                  "CPU seconds (timed around the steps) stand for it."]
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
