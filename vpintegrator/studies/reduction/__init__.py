"""The reduction study (the documentation's lattices page, "The reduction study"): does anything reduced or learned beat a lean
full-order integrator on a high-dimensional Hamiltonian lattice, at equal accuracy and CPU cost?

Systems: the periodic Toda lattice (``toda_bump``) and the FPU-beta chain (``fpu_beta_bump``), GeometricProblems.jl's
bump family, at each lattice size N of ``sizes`` (default 200, 800, 3200). Data: the training split
mu = 0.30, 0.33 ... 0.60 (11 trajectories, DOP853 at 1e-12, sampled every ``data_dt``, t in [0, T], T = 120);
the held-out split mu = 0.315 ... 0.585 (the midpoints, 10 trajectories) integrated by DOP853 at 1e-12 to 8 T:
the converged reference. Error of a row = the median over the held-out mu of ``|y(t) - y_ref(t)| / |y_ref(t)|``
of the full state at t = T and t = 8 T. Cost = batch-1 thread CPU seconds per unit of simulated time
(``vpintegrator.clock.thread_cpu``, the minimum of ``repeats`` timed runs of one held-out trajectory to T after
one untimed run, for every row alike).

Rows (``ROWS``; each a function ``(plan, case) -> list of records``, so a row family is one entry):

- ``full_order``: Stormer-Verlet, Yoshida 6 (``stormer_verlet_y6``) and the exponential splitting (Strang, the
  linear part exact by FFT/DST) over their step ladders (``LADDERS``, steps that divide T), compiled where the
  package has a kernel (Verlet, Yoshida 6), the NumPy step otherwise;
- ``psd_floor``: the PSD (cotangent lift) reconstruction floor ``|y - A A^T y| / |y|`` at each 2n of
  ``floor_dims`` (no model in those coordinates decodes to less);
- ``psd_floor_balanced``: the same floor of the balanced cotangent lift (``fit_psd(...,
  "balanced_cotangent_lift")``: positions and momenta weighed equally in the SVD), same training split;
- ``psd_galerkin``: the reduced Hamiltonian system at each 2n of ``reduced_dims``, Stormer-Verlet (a
  registered symplectic method, compiled) at the ladder's steps, without and with the bond-sampling (ECSW)
  hyper-reduction; offline cost: the training data, the SVD and the sampling's fit;
- ``psd_galerkin_balanced``: the same on the balanced cotangent lift;
- ``psd_flow_map``: a G-SympNet trained by ``vpintegrator.training.fit`` on the training split's PSD
  coordinates at stride ``stride`` (a flow map of step Delta), one per seed, rolled out batch-1 by the
  compiled model kernel (``vpintegrator.rollout.numba_model``) and decoded to the full state every
  ``output_every`` time units (decoding costs O(N n) per output, so it is part of the cost); offline cost: the
  data, the SVD and the training's process CPU;
- ``psd_sindy``: SINDy on the PSD coordinates (``psd_sindy_rows``: ż = Θ(z) Ξ, library and threshold by
  validation rollout on two training trajectories, RK4 at multiples of ``data_dt``, decoded every output);
  offline cost: the data, the SVD and the fit with its selection (the ``sindy`` extra; no rows without it);
- ``autoencoder_flow_map``: the same flow map in the coordinates of a symplectic autoencoder
  (``vpintegrator.training.fit_symplectic_autoencoder``, from the PSD start) at the sizes of
  ``autoencoder_sizes``; offline cost adds the autoencoder's fit.

A reduced row's offline CPU is amortised as a break-even number of rollouts (each to T): offline /
((c_full - c_row) T), against the cheapest full-order row of the same lattice whose error at T is at most the
row's; "never" when no full-order row that accurate costs more.

    vp-study reduction --out runs/reduction --quick     # N = 200, one seed, short ladders: <= 10 min on 2 cores
    vp-study reduction --out runs/reduction             # N = 200, 800, 3200, 3 seeds (hours; see the docs)

Writes ``OUT/reduction.json`` (every record; records of the same key are replaced, others kept: a run per N adds
to one file; with ``--skip-existing`` a row family already there for a lattice is not run again),
``OUT/reduction.md`` (the tables and who wins) and the work-precision figures
``OUT/reduction_<system>_N<N>.png/.svg``; ``--table-only`` redraws them from the JSON. ``--table-only --results
FILE`` draws a results file's (a shipped one by name, ``reduction/quick``, or a path) into a new OUT as every study
does (``stats.redraw_from``): ``OUT/results.md``, the file copied to ``OUT/results.json``, and the figures.
"""

from __future__ import annotations

from ..errors import one_line
from ..options import Study
from ..plan import check_out_dir
from ..stats import write_json
from ..step_budget import valve_line, valve_record
from .data import Case, make_case
from .flow_maps import PSDEncoder, autoencoder_flow_map_rows, fit_psd_encoder, flow_map_rows, psd_flow_map_rows
from .measure import STEPS_PER_CALL
from .plan import (DEFAULTS, FLOW_MAP_EPOCH_COSTS, FLOW_MAP_MODEL, FLOW_MAP_RECIPE, HELDOUT_MU, HORIZONS, LADDERS,
                   QUICK, SYSTEMS, USEFUL, ReductionOptions, ReductionPlan, T, build_plan)
from .rows import (ROWS, SINDY_DIMS, SINDY_LIBRARIES, SINDY_METHOD, SINDY_STEPS, SIZES_OF, families, full_order_rows,
                   psd_floor_balanced_rows, psd_floor_rows, psd_galerkin_balanced_rows, psd_galerkin_rows,
                   psd_sindy_rows)
from .tables import RESULTS, ROW, SCHEMA, figures, merge_rows, read_rows, summarize_rows, tables

#: the study's names (its modules: ``plan`` what it runs, its options and plan, ``data`` a lattice, ``measure`` a
#: row's error and cost, ``rows`` the row families, ``flow_maps`` the learned ones, ``tables`` the tables, figures
#: and results file)
__all__ = ["T", "HORIZONS", "SYSTEMS", "LADDERS", "ROWS", "DEFAULTS", "QUICK", "ReductionOptions", "ReductionPlan",
           "Case", "build_plan", "make_case", "full_order_rows", "psd_floor_rows", "psd_floor_balanced_rows",
           "psd_galerkin_rows", "psd_galerkin_balanced_rows",
           "flow_map_rows", "psd_flow_map_rows", "autoencoder_flow_map_rows", "families", "SIZES_OF", "PSDEncoder",
           "fit_psd_encoder", "summarize_rows", "tables", "figures", "merge_rows", "STUDY", "run",
           "HELDOUT_MU", "USEFUL", "FLOW_MAP_EPOCH_COSTS", "FLOW_MAP_MODEL", "FLOW_MAP_RECIPE", "STEPS_PER_CALL",
           "SINDY_DIMS", "SINDY_LIBRARIES", "SINDY_METHOD", "SINDY_STEPS", "psd_sindy_rows", "ROW", "SCHEMA",
           "read_rows", "RESULTS"]


@one_line
def run(plan: ReductionPlan) -> int:
    """The study from its plan (``STUDY``); bad input is a one-line ``StudyError``."""
    out = plan.out
    check_out_dir(out)
    if plan.table_only and plan.results is not None:  # a results file's tables (a shipped one by name), no run
        return RESULTS.redraw(out, str(plan.results))
    path = RESULTS.path(out)
    if plan.table_only:
        return RESULTS.finish(out, RESULTS.read_rows(path))
    from ...clock import process_cpu

    out.mkdir(parents=True, exist_ok=True)
    previous = RESULTS.earlier(path)  # merged with the new rows
    rows = previous.get("rows", [])
    commands = [*previous.get("commands", []), plan.command]
    for system in plan.systems:
        for n in plan.sizes:
            done = {r["row"] for r in rows if r["system"] == system and int(r["N"]) == n}
            todo = {f: fn for f, fn in families(plan, n).items() if not (plan.skip_existing and f in done)}
            if not todo:
                print(f"reduction: {system} N = {n}: in {path} already (--skip-existing)", flush=True)
                continue
            tic = process_cpu()
            case = make_case(system, n, plan.data_dt)
            print(f"reduction: {system} N = {n}: data ({process_cpu() - tic:.0f} CPU s)", flush=True)
            for family, fn in todo.items():
                tic = process_cpu()
                rows = merge_rows(rows, fn(plan, case))
                write_json(path, {"commands": commands, "valve": valve_record(rows), "rows": rows})  # nothing lost
                print(f"reduction: {system} N = {n}: {family} done ({process_cpu() - tic:.0f} CPU s)", flush=True)
    print(f"reduction: {valve_line(valve_record(rows))}", flush=True)
    return RESULTS.finish(out, rows)


#: the study as the runner runs it (``vp-study reduction``, ``python -m vpintegrator.studies.reduction``)
STUDY = Study(ReductionOptions, run, build_plan, doc=__doc__, required=("out",), prog="vp-study reduction",
              error_prefix="reduction study: error: ",
              interrupted="reduction study: interrupted; the row families finished are in OUT/reduction.json (rerun "
                          "with --skip-existing to continue)")
