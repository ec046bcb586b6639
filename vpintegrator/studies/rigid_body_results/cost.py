"""The rigid-body study's cost step: its timing rows priced on the package's one cost meter.

Every row of the timing (seed ``--seed``'s models and the study's integrators) rolls out the timing reference's
trajectory 1 (``RUN/timing/ref.h5``) to ``--t-end`` at batch 1, in ONE process, as ``vp-rollout`` plans it (the
same step maps, runners and first window by implicit midpoint; no metrics, the states go nowhere). The rows are
priced together on [`vpintegrator.clock.meter`][vpintegrator.clock.meter]: one cold call each (compilation and
first-call work apart), then ``--repeats`` interleaved rounds, each row at its minimum; each call's seconds are
the engine's own (CPU seconds of the thread producing the states, its set-up left out). Writes
``RUN/timing/cost.json``; ``vpintegrator.studies.rigid_body_results.timing`` puts it beside the whole-process
figures. Run as a study step::

    python -m vpintegrator.studies.rigid_body_results.cost --run RUN --models vpff,vpt,st --seed 0 --t-end 5000
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import Config, key
from ..options import Study, comma_list, model_list
from ..runner import StudyError, Task
from ..stats import write_json
from .design import ALL_MODELS, INTEGRATORS

#: interleaved rounds after the cold call (the least disturbed of them prices the row)
REPEATS = 5


def meter_rows(data: str | Path, models: dict[str, str], integrators: list[str], t_end: float,
               repeats: int = REPEATS, init: str = "implicit_midpoint") -> dict[str, Any]:
    """``{"rows": {label: Cost.record() + runner}, "failed": {label: error}, "n_steps", ...}``: every row of a
    ``vp-rollout --data DATA --model LABEL=PATH ... --integrators ... --init INIT --t-end T`` on the first
    trajectory of ``data``, priced on the cost meter (one process, interleaved rounds, the engine's thread CPU
    seconds of the steps). A row whose rollout raises is left out with its error."""
    import tempfile

    import numpy as np

    from ...clock import meter_surviving
    from ...rollout import RolloutConfig
    from ...rollout.family import family_initial_window
    from ...rollout.plan import build_plan
    from ...rollout.write import dry_rollout

    with tempfile.TemporaryDirectory() as nowhere:  # the plan checks an output it never writes
        labelled: Any = dict(models)  # label -> run: the models check takes a dict as vp-rollout's label=RUN
        cfg = RolloutConfig(data=str(data), out=str(Path(nowhere) / "cost.h5"), models=labelled,
                            integrators=list(integrators), traj=[0], init=init, t_end=float(t_end), volume=False,
                            device="cpu", workers=1)
        plan, states = build_plan(cfg)
    y0 = np.asarray(states.y[:, 0], dtype=np.float64)
    runners: dict[str, str] = {}

    def call(label: str, step_map: Any):
        window0 = family_initial_window(plan.system, y0, plan.dt, step_map.seq_len, method=plan.init)

        def once() -> float:  # the states of the row, to nowhere; its price: the engine's seconds of the steps
            res = dry_rollout(step_map, window0, plan.dt, plan.n_steps, plan.t0, plan.blowup, plan.chunk_steps)
            runners[label] = str(step_map.describe().get("runner", step_map.kind))
            return float(res.seconds)
        return once

    costs, failed = meter_surviving({label: call(label, sm) for label, sm, _ in plan.methods}, repeats)
    return {"t_end": float(t_end), "n_steps": int(plan.n_steps), "dt": float(plan.dt), "batch": 1, "init": init,
            "rows": {k: {**c.record(), "runner": runners.get(k, "?")} for k, c in costs.items()},
            "failed": {k: " ".join(str(e).split())[:200] for k, e in failed.items()}}


@dataclass
class CostOptions(Config):
    """The cost step's keys (flags ``--run``, ``--models``, ``--seed``, ``--t-end``, ``--repeats``).

    Parameters
    ----------
    run : str
        The study's run directory (reads ``timing/ref.h5`` and ``train/<model>_s<seed>``, writes
        ``timing/cost.json``).
    models : str
        Comma list of the models priced (default none: the integrators only).
    seed : int
        The seed whose models are priced (default 0).
    t_end : float
        Horizon of every row.
    repeats : int
        Interleaved rounds after the cold call (default 5).
    """

    _source_in_messages = False

    run: str | None = key(None, optional=True, type=str)
    models: str = key("", type=str, check=lambda v: comma_list(v, "models"))
    seed: int = key(0, type=int, low=0, expected=">= 0")
    t_end: float | None = key(None, optional=True, type=float, low=0.0, open_low=True, expected="a positive number")
    repeats: int = key(REPEATS, type=int, low=1, expected=">= 1")


@dataclass(frozen=True)
class CostPlan:
    """The cost step's keys, checked once (``build_plan``)."""

    run: Path
    models: tuple[str, ...]
    seed: int
    t_end: float
    repeats: int


def build_plan(options: CostOptions, argv: tuple[str, ...] = ()) -> CostPlan:
    """The step's plan: ``--run`` and ``--t-end`` given, the models known and the timing reference there."""
    o = options
    if o.run is None or o.t_end is None:
        name = "run" if o.run is None else "t_end"
        raise StudyError(f"--{name.replace('_', '-')} is required (the flag, or {name} in the --plan file)")
    models = tuple(model_list(o.models, "--models", ALL_MODELS)) if o.models.strip() else ()
    run = Path(o.run)
    if not (run / "timing" / "ref.h5").is_file():
        raise StudyError(f"--run {run}: no timing/ref.h5; give the run directory of a rigid-body study")
    return CostPlan(run, models, o.seed, float(o.t_end), o.repeats)


def run(a: CostPlan) -> int:
    import torch

    torch.set_num_threads(1)  # batch 1 on one thread: every row's steps in the calling thread
    out = meter_rows(a.run / "timing" / "ref.h5", {m: str(a.run / "train" / f"{m}_s{a.seed}") for m in a.models},
                     list(INTEGRATORS), a.t_end, a.repeats)
    write_json(a.run / "timing" / "cost.json", {**out, "seed": a.seed})
    print(f"wrote {a.run / 'timing' / 'cost.json'} ({len(out['rows'])} rows)")
    return 0


def task(run: Path, models: list[str], seed: int, t_end: float, exclusive: bool) -> Task:
    """The step as the study's task ``timing_cost``: after the timing reference and seed ``seed``'s trainings."""
    return Task("timing_cost", ["python", "-m", "vpintegrator.studies.rigid_body_results.cost", "--run", run,
                                *(["--models", ",".join(models)] if models else []), "--seed", str(seed),
                                "--t-end", f"{t_end:g}"],
                [run / "timing" / "cost.json"], ["gen_timing_ref", *(f"train_{m}_s{seed}" for m in models)],
                exclusive=exclusive)


#: the step as the runner runs it (``python -m vpintegrator.studies.rigid_body_results.cost``)
STUDY = Study(CostOptions, run, build_plan, doc=__doc__, required=("run", "t_end"),
              prog="python -m vpintegrator.studies.rigid_body_results.cost", interrupted="Interrupted.")


if __name__ == "__main__":
    from ..driver import main

    raise SystemExit(main(STUDY))
