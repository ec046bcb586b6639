"""The study "when the equations are unknown": every approach that
does not know the equations, against the oracle that does, at equal batch-1 CPU cost.

Systems (``SYSTEMS``): ``rigid_body_exp`` (Lie–Poisson, H with an exp term: outside every library),
``coupled_oscillator`` (canonical, the sigmoid coupling outside the polynomial library; data from the
``coupled_oscillator_box`` spec) and ``rigid_body`` (the control: its quadratic field is in SINDy's
polynomial library). Data: ``vp-gen`` at h = 0.2, ``n_train`` (default 100) trajectories to t = 20, DOP853
at 1e-12; ``n_test`` (default 100) held-out initial conditions from the same spec with another seed (no
model sees them), their exact flow (DOP853, 1e-12) to t = 10. With noise σ > 0 the training file is a noisy
copy (one Gaussian draw of σ per state) and every approach, the oracle included, starts from the noisy
initial condition; errors are against the exact flow from the clean one.

Approaches (rows, ``APPROACHES``): the flow maps (``lpnet`` for the Lie–Poisson systems, ``g_sympnet`` for
the canonical one), the vector-field models rolled out by the classical method they were trained through
(``lphnn@gauss_legendre4``, ``hnn@gauss_legendre4``, the unstructured control ``node@rk4``; a learned field
learns its training method's modified equations, so it is never rolled out by a cheaper method), the
Casimir check ``lphnn@implicit_midpoint`` (the same GL4-trained field rolled out by implicit midpoint, which
keeps ‖z‖² whatever the field; over CASIMIR_STEPS steps), SINDy with its library and threshold chosen by
validation (``sindy+gauss_legendre4``, ``vpintegrator.rollout.sindy``), the wrong model class (SINDy
restricted to the degree-2 polynomial library → Gauss–Legendre 4: ``poly2+gauss_legendre4``; for
``rigid_body`` that class is the right one) and the oracle (the true equations → ``gauss_legendre4``).

Training (``RECIPES``): every training run of every learned approach, at each point of its small validation
sweep (two settings each), stops by the same rule (``StopRule``): by default its validation plateau (vp-train's
``patience`` with ``min_rel_delta``) or a cap of optimiser steps, rules no load on the machine moves, with its CPU
seconds recorded beside; ``--budget cpu`` gives each the same process CPU budget instead (``vp-train --set
cpu_time_limit``, as the shipped results were made). The tables print the rule and how each run stopped (its
own ``summary.json``), and say whether the gaps between the rows are at plateau. Levenberg–Marquardt
for the flow maps and for ``lphnn`` (trained through Gauss–Legendre 4, with check windows); for ``hnn`` and
``node`` (LM from scratch stalls) an Adam warm start (WARM_FRACTION of a CPU budget, or to its own plateau),
then LM with check windows from Adam's ``best.pt`` for the rest. The point with the lowest validation score (``summary.json``
``best_loss``, the validation trajectories' rollout error at t = 10) is the approach's model, never chosen on
the held-out set. The fitted rows (SINDy) fit on the same training trajectories and choose on the same
validation trajectories. ``plan`` gives the planned CPU total before anything runs (``--estimate``).

Cost: batch-1 thread CPU seconds per unit time of the row's rollout, every row of a (system, σ, seed) priced
alike on the cost meter (``vpintegrator.clock.meter``: one cold call, its compilation and first-call work
recorded apart as ``cost_setup``, then the minimum over interleaved rounds of the engine's ``seconds``;
``evaluation.batch1_costs``), and the amortised cost ``cost + training CPU / (N · t_end)``
(``amortise_over`` = N rollouts of length t_end = 10; the training CPU of a learned approach is that of
its whole sweep, of a fitted row its fit and selection), as the work–precision CSV's
``amortised_cpu_seconds_per_time``.

Numbers per (system, σ, approach, horizon): per seed the median over held-out initial conditions with its
10–90 % interval (``median_interval``), over seeds the median with a percentile-bootstrap 95 % interval
(``bootstrap_ci``). Structure per row: the largest change of the Casimir ‖z‖² along the rollouts
(Lie–Poisson) or the largest relative energy error of the true H (canonical). Per-seed verdicts of the
issue's targets (``TARGETS``). Plateau curves: validation loss against the run's CPU seconds (``log.csv``).

    python -m vpintegrator.studies.unknown_form --out runs/unknown_form --quick
    vp-study unknown_form --out runs/unknown_form --seeds 0,1,2

Writes ``OUT/unknown_form.json`` (every per-seed number; it accumulates: an invocation's rows replace the
rows with the same (system, σ, seed, method) and keep the others), ``OUT/unknown_form.md`` (the tables) and
the figures ``OUT/unknown_form_cost_<system>.png``/``.svg`` (error at t = 10 against cost) and
``OUT/unknown_form_plateau_<system>.png``/``.svg``; ``--table-only`` (or ``--figures-only``) rebuilds them
from the JSON. Finished training runs are kept and reused (the study resumes by itself: run the same
command again); ``--overwrite`` trains them again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from ..options import Study
from ..runner import StudyError, check_out_dir, one_line
from ..stats import write_json
from .evaluation import evaluate_seed, run_study
from .design import (APPROACHES, DEFAULTS, H, HORIZONS, MAX_STEPS, MAX_STEPS_QUICK, PLATEAU_CPU, PLATEAU_CPU_SOURCE,
                     QUICK, RECIPES, STARTUP_CPU, SYSTEMS, TARGETS, StopRule, UnknownFormOptions, UnknownFormPlan,
                     build_plan, check_data, plan, plan_line)
from .runs import chosen, make_data
from .tables import figures, merge_rows, plateau, results, stop_rule_lines, summarize_rows, tables, wall_ceiling_line

#: the study's names (its modules: ``design`` what it runs and its plan, ``runs`` the data and trainings, ``evaluation`` the rows,
#: ``tables`` the tables and figures)
__all__ = ["H", "HORIZONS", "SYSTEMS", "APPROACHES", "RECIPES", "TARGETS", "DEFAULTS", "QUICK", "STARTUP_CPU",
           "PLATEAU_CPU", "PLATEAU_CPU_SOURCE", "StopRule",
           "MAX_STEPS", "MAX_STEPS_QUICK", "stop_rule_lines", "wall_ceiling_line", "make_data", "chosen",
           "evaluate_seed", "plateau", "plan", "plan_line", "run_study", "merge_rows", "summarize_rows", "tables", "figures",
           "UnknownFormOptions", "UnknownFormPlan", "build_plan", "STUDY", "run"]

@one_line
def run(a: UnknownFormPlan) -> int:
    """The study from its resolved options (``STUDY``); bad input is a one-line ``StudyError``."""
    out = Path(a.out)
    check_out_dir(out)
    res = results(a.amortise_over)
    path = res.path(out)
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the unknown_form study ships no pretrained model (its runs are under "
                         "OUT/runs)")
    if a.results is not None:  # the tables and figures of a results file (the shipped one by name), no runs
        return res.redraw(out, a.results)
    if a.table_only:
        return res.finish(out, res.read_rows(path))
    from ...rollout.sindy import require_pysindy

    require_pysindy("sindy+gauss_legendre4")
    systems, seeds = a.systems, a.seeds
    if a.data is not None:
        check_data(Path(a.data), systems)
    line = plan_line(plan(systems, seeds, a.noise, a.budget_seconds, a.sweep, a.jobs, a.rule))
    print(line, flush=True)
    if a.estimate:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    previous = res.earlier(path)  # merged with the new rows below: checked first
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])  # no absolute path of the install

    def save(new: list[dict[str, Any]]) -> None:  # after every (seed, system, σ): nothing finished is lost
        write_json(path, {"commands": [*previous.get("commands", []), command],
                          "rows": merge_rows(previous.get("rows", []), new)})

    print(f"unknown_form stop rule: {a.rule.describe()}", flush=True)
    try:
        new = run_study(out, systems, seeds, a.noise, n_train=a.n_train,
                        n_test=a.n_test, budget=a.budget_seconds, sweep=a.sweep,
                        jobs=a.jobs, ceiling=a.wall_ceiling, data=None if a.data is None else Path(a.data),
                        overwrite=a.overwrite, save=save, rule=a.rule)
    except subprocess.CalledProcessError as exc:
        what = exc.cmd[exc.cmd.index("--out") + 1] if "--out" in exc.cmd else " ".join(exc.cmd)
        raise StudyError(f"{Path(exc.cmd[2]).name if len(exc.cmd) > 2 else 'a step'} of {what} failed (exit "
                         f"{exc.returncode}; its message is above); fix it and run the same command again "
                         f"(finished runs are kept)") from None
    save(new)
    return res.finish(out, merge_rows(previous.get("rows", []), new))


#: the study as the runner runs it (``vp-study unknown_form``, ``python -m vpintegrator.studies.unknown_form``)
STUDY = Study(UnknownFormOptions, run, build_plan, doc=__doc__, required=("out",), prog="vp-study unknown_form",
              error_prefix="unknown_form study: error: ",
              interrupted="unknown_form study: interrupted; run the same command again (finished runs, those with "
                          "a complete.json, are kept)")
