"""The memory study: the memory ladder (linear memory, NARX, delay SINDy, parroting, recurrent and window networks,
attention, the memoryless map, the known equations, the full-order bath) on a partially observed oscillator and on
a particle in a hidden bath, every row from the same first observed window, with who wins said plainly.

Arenas (``--systems``; ``plan.ARENAS``): the coupled oscillator observed in q (data of the
``coupled_oscillator_box`` spec), and the hidden-bath arena observed in its particle (q0, p0): ``kac_zwanzig`` (a
double-well particle and N harmonic oscillators at rest) and ``particle_chain`` (an FPU-beta chain of N sites), one
case per bath size N (``--bath-sizes``). Data: ``n_train`` trajectories to ``t_train`` at h = 0.2 (``vp-gen``,
DOP853 at 1e-12); ``n_test`` held-out initial conditions drawn from the file's sampler with another seed (no fit
sees them), their exact flow to t = 100 (DOP853; above 1000 oscillators the full-order model composed to order 6 at
h = 0.01).

Every row is the ``vp-rollout`` row of its name, made by the runner's ``prepare_methods`` (``ladder.rollout_rows``).
Rows at each window T (``--windows``): the fitted rows ``arx``, ``delay_dmd``, ``narx``, ``delay_sindy+rk4``
(T <= 4, polynomial libraries, with pysindy) and ``parrot`` (fitted on the training file, the first 15 %
validating); the learned window models ``delay_mlp``, ``delay_mlp2``, ``gru``, ``lru`` and ``vpt_mix``
(attention), trained by ``fit`` with the partial-observation study's recipe to the same step budget
(``--max-steps`` Levenberg-Marquardt steps); T = 1 is the memoryless row. Once per case: the known equations
(``estimate+gauss_legendre4`` at h = 0.2 and ``estimate+exact_flow``, the estimate from the first 3 observed
states, and the same rows over the whole longest window, the least-squares batch smoother (T = max of
``--windows``); for the bath, the GLE with the exact kernel at h = 0.2) and the full-order model from the true full state
(``bath+stormer_verlet`` at h = 0.2, and near round-off its order-6 composition ``bath+bath_splitting_y6`` (the
exact-bath-flow splitting) or ``bath+stormer_verlet_y6`` (the chain): the bath starts at rest, so the full state
is the particle's). The bath's rows start from the first observed particle state; each is also a row over the whole
longest window, ``estimate+ROW`` (``estimate+gle``, ``estimate+bath+METHOD``): the particle's first state by least
squares on the row's own flow over the window's T states, then the row. Every row starts
from the held-out conditions' first observed states (with ``--noise`` sigma added: one draw, the same for all rows).

Numbers: the relative error of the observed state against the exact flow at ``--score-times`` (default t = 10 and 20,
where a bath's particle still moves, and t = 100), per seed the median
and 10-90 % interval over held-out conditions (``median_interval``), over seeds the median with a bootstrap interval;
each row's fit or training CPU seconds, and its batch-1 price on the cost meter (``vpintegrator.clock.meter``):
the engine's own CPU seconds of the row's start and steps to t = 100 (its per-call fixed cost left out), every row
of a case in one interleaved meter call, per unit time (``cost``) and per step (``cost_per_step``). A fitted row
whose validation score is not below half the identity map's on the same validation windows has no skill: it is
said as "no skill" with its fit's CPU seconds (``skill``, ``note``), not as a result; delay SINDy's candidate
search is bounded by its budget (``fit_budget``). The verdict is computed from these numbers (``tables.verdict``).

    vp-study memory --out runs/memory_quick --quick     # <= 10 CPU min on 2 cores
    vp-study memory --out runs/memory --dry-run         # the default size and its CPU estimate, nothing run
    vp-study memory --out runs/memory                   # the default size (5 seeds, N up to 10^4): <= 2 CPU h planned

Writes ``OUT/memory.json`` (with ``cpu_parts``, the CPU seconds of each phase: the basis of the plan's estimate),
``OUT/memory.md`` and, with a bath, the work-precision figure ``OUT/memory_work_precision_ARENA.png``; ``--table-only`` redraws the tables from the JSON (``--results
FILE``: from a results file, e.g. ``memory/quick``, into a new OUT). Finished trainings are reused.
"""

from __future__ import annotations

import os
import resource

from ...errors import VPIntegratorError
from ..options import Study
from ..runner import StudyError, check_out_dir
from ..stats import redraw_from, write_json, write_tables
from ..step_budget import valve_line, valve_record
from .ladder import evaluate_case, make_data, train_all
from .plan import MemoryOptions, MemoryPlan, build_plan
from .tables import FIGURE_PREFIX, read_doc, summarize_rows, tables, work_precision

__all__ = ["STUDY", "run", "draw", "MemoryOptions", "MemoryPlan", "build_plan"]


def draw(doc: dict) -> str:
    """The Markdown of a results document (its rows, commands and budget, and how many trainings the valve cut)."""
    budget = "; ".join(x for x in (doc.get("budget", ""), valve_line(_valve(doc["rows"]))) if x)
    return tables(summarize_rows(doc["rows"]), budget, doc.get("commands"))


def _valve(rows: list[dict]) -> dict:
    """``valve_record`` of the trained runs of ``rows`` (each once: a run has a row per noise level)."""
    return valve_record({(r["system"], r["run"]): r for r in rows if r.get("run")}.values())


def _cpu() -> float:
    """Process CPU seconds of this process and its finished children (the training workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _run(plan: MemoryPlan) -> int:
    out = plan.out
    if plan.dry_run:  # the size and the estimate only: nothing is read or written
        print(plan.size_line())
        for part, cpu in plan.cpu_estimate().items():
            print(f"memory: estimate {part}: {cpu:.0f} CPU s")
        return 0
    check_out_dir(out)
    path = out / "memory.json"
    if plan.table_only and plan.results is not None:
        _, doc, text = redraw_from(out, str(plan.results), read_doc, draw, figures=FIGURE_PREFIX)
        work_precision(summarize_rows(doc["rows"]), out)
        print(text)
        return 0
    if plan.table_only:
        doc = read_doc(path)
    else:
        print(plan.size_line(), flush=True)
        print(f"memory: {plan.budget_line()}", flush=True)
        read_doc(path) if path.exists() else None  # a foreign file there is refused before anything runs
        tic, load = _cpu(), os.getloadavg()[0]
        parts: dict[str, float] = {}  # CPU s of each phase: the basis of the plan's estimate (plan.CPU_BASIS)
        trains = {}
        for case, arena, n in plan.cases():
            t0 = _cpu()
            trains[case] = make_data(out, arena, n, plan.n_train, plan.t_train)
            parts[f"data {case}"] = _cpu() - t0
        t0 = _cpu()
        runs = train_all(plan, trains)
        parts["trainings"] = _cpu() - t0
        rows = []
        for case, arena, n in plan.cases():
            t0 = _cpu()
            rows += evaluate_case(plan, case, arena, n, trains[case], runs)
            parts[f"rows {case}"] = _cpu() - t0
            print(f"memory: {case} done ({parts[f'rows {case}']:.0f} CPU s)", flush=True)
        doc = {"commands": [plan.command], "budget": plan.budget_line(), "valve": _valve(rows),
               "cpu_seconds": _cpu() - tic, "cpu_parts": parts, "load_average": [load, os.getloadavg()[0]], "rows": rows}
        print(f"memory: {valve_line(doc['valve'])}", flush=True)
        write_json(path, doc)
        doc = read_doc(path)
    text = draw(doc)
    write_tables(out / "memory.md", text)
    work_precision(summarize_rows(doc["rows"]), out)
    print(text)
    return 0


def run(plan: MemoryPlan) -> int:
    """The study from its plan (built once by ``build_plan``); bad input is a one-line ``StudyError``."""
    try:
        return _run(plan)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


#: the study as the runner runs it (``vp-study memory``)
STUDY = Study(MemoryOptions, run, build_plan, doc=__doc__, required=("out",), prog="vp-study memory",
              error_prefix="memory study: error: ",
              interrupted="memory study: interrupted; run the same command again (finished trainings are kept)")
