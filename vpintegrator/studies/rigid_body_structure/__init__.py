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

    OMP_NUM_THREADS=1 vp-study rigid_body_structure --out runs/rigid_body_structure --jobs 1
    vp-study rigid_body_structure --table-only --results rigid_body_structure_study_plateau --out DIR

Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.

Not a preset of ``vp-study compare``: its problem, rows and budgets are data, but the engine
draws held-out ICs by the training file's sampler, which ``vp-rollout --heldout`` refuses for the paper's fixed set
(``paper_sphere``); has one horizon (here t = 100 for the errors, t = 10⁴ for the drifts and the energy drift's
growth); measures drifts against I(z₀) (a window model's Casimir here: against its own exact first window,
``results._drifts``, at a 1e-12 target); judges the best row by NRMSE (here three targets per seed); and has no
rows for the paper's trajectories 1 and 4, the attention step, a shipped model (``pretrained:NAME`` reads as a class
to train), ``--export-pretrained`` or seeds as members of one training.
"""

from __future__ import annotations

from pathlib import Path

from .. import _rollouts, attention, export
from ..._shipped import shipped_file
from ..options import Study
from ..rigid_body_results import PAPER_TRAJ
from ..runner import Runner, Task, budget_flags
from ..stats import redraw_from
from .design import (ATTENTION_MODELS, CLASSICAL, EPOCH_COSTS, HELDOUT_SEED, MODELS, N_ATTENTION, SELECTION,  # noqa: F401
                     SHIPPED_VPT, T_EVAL, StructureOptions, StructurePlan, build_plan, write_spec)
from .results import (SCHEMA, build_results, format_results, heldout_values, long_values,  # noqa: F401
                      paper_values, read_results, write_results)


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
            config = shipped_file(f"configs/study/rigid_body_{m}.toml")
            r.add(Task(f"train_{m}_s{s}", ["vp-train", str(config), "--data", d / "exact.h5", "--out", out, "--seed",
                                             str(s), *budget_flags(a.training_budget, a.train_seconds, max_steps=a.step_budgets.get(m)), *SELECTION, q],
                       [out / "best.pt", out / "summary.json"], ["gen_exact"]))
    common = ["--device", "cpu", "--init", "reference", q]
    long = ["--traj", ",".join(str(i) for i in range(a.n_long)), "--t-end", f"{a.long_t_end:g}", "--no-volume"]
    heldout = ["--data", d / "heldout.h5", "--t-end", f"{T_EVAL:g}"]
    classical = ["--integrators", ",".join(CLASSICAL), "--model", f"vpt_shipped={SHIPPED_VPT}"]
    r.add(Task("rollout_heldout_classical", ["vp-rollout", *heldout, *classical, *common, "--out",
                                             rd / "heldout_classical.h5"],
               _rollouts.outputs(rd / "heldout_classical.h5"), ["gen_heldout"]))
    r.add(Task("rollout_long_classical", ["vp-rollout", "--data", d / "heldout.h5", *long, *classical, *common,
                                          "--out", rd / "long_classical.h5"],
               _rollouts.outputs(rd / "long_classical.h5"), ["gen_heldout"]))
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
                           _rollouts.outputs(out), [data, f"train_{m}_s{s}"]))
        for task in attention.tasks(run, [m for m in a.models if m in ATTENTION_MODELS], [s], d / "heldout.h5",
                                    "gen_heldout", min(N_ATTENTION, a.n_heldout), T_EVAL):
            r.add(task)
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


def run(a: StructurePlan) -> int:
    run = Path(a.out)
    if a.results is not None:  # the tables of a results file (a shipped one by name), no run directory
        print(redraw_from(run, a.results, read_results, format_results)[2])
        return 0
    a.run_recorded(plan, {k: getattr(a, k) for k in ("models", "seeds", "train_seconds", "n_heldout", "n_long",
                                                      "long_t_end", "jobs", "budget", "wall_ceiling", "patience",
                                                      "step_budgets")}, prepare=lambda run: write_spec(run, a.n_heldout))
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
