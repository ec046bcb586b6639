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

import shlex
import shutil
import sys
import time
from pathlib import Path

from .. import _rollouts, attention, export
from ..options import Study
from ..runner import REPO as ROOT, Runner, StudyError, Task, budget_flags, study_lock  # noqa: F401  (re-exported)
from ..stats import read_json, redraw_from, write_json
from .design import (ATTENTION_MODELS, DEFAULT_MODELS, DT, EPOCH_COSTS, EVAL_SETS, INIT_SCALE, INTEGRATORS,  # noqa: F401
                     LM_STEPS_PER_EPOCH, MODELS, N_PROBE, SETTINGS, SYMPLECTIC_MODELS, T_PROBE, CoupledOscillatorOptions,
                     CoupledOscillatorPlan, Settings, _default_config, _resolve, build_plan)
from .tables import (ROLLOUT_COLUMNS, SCHEMA, TABLE_ROW, TRAIN_COLUMNS, _statistics_section, build_rows,  # noqa: F401
                     format_results, format_table, heldout_statistics, read_results, training_info, write_results)


def _run_dir(run: Path, model: str, seed: int) -> Path:
    return run / "train" / f"{model}_s{seed}"


def plan(s: Settings) -> Runner:
    """Every step of the study as a ``vpintegrator.studies.runner.Task`` of one ``vpintegrator.studies.runner.Runner``: the data
    (vp-gen), the trainings (vp-train, ``s.jobs`` at a time), the rollouts (vp-rollout), the figures (vp-plot)."""
    run = Path(s.out)
    runner = Runner(run, jobs=s.jobs, skip_existing=s.skip_existing, overwrite=s.overwrite)
    p = {"train": run / "data" / "train.h5", "default": run / "data" / "eval_default.h5",
         "heldout": run / "data" / "eval_heldout.h5"}
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
                                   "--seed", str(seed), *budget_flags(s.model_budget(model), s.train_seconds), *scale,
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
                        _rollouts.outputs(out), [f"gen_{name}", *trains]))
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
    for task in attention.tasks(run, [m for m in s.models if m in ATTENTION_MODELS], s.seeds, heldout, "gen_heldout", n,
                                t_end):
        runner.add(task)


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
    record = {**s.settings, "t_end": s.t_end, "wall_seconds": round(time.perf_counter() - t0, 1),
              "invocation": invocation, "commands": previous.get("commands", []) + runner.commands}
    write_json(run / "settings.json", record)
    if not ok:
        raise runner.failure()
    return write_results(run)


def run(plan: CoupledOscillatorPlan) -> int:
    """The study from its plan (``build_plan``): the runs, or the tables of a run or results file."""
    s = plan
    if s.results is not None:  # the tables of a results file (a shipped one by name), no run directory
        print(redraw_from(Path(s.out), s.results, read_results, format_results)[2])
        return 0
    text = write_results(Path(s.out)) if s.table_only else run_study(s, list(s.argv))
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
