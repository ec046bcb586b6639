"""The study "when the state is incomplete" (the documentation page of that name): multi-step models on
observed windows against the window without attention, the attention ablations, state estimation + the true
equations, and parroting.

Systems (``SYSTEMS``): the coupled oscillator observed in q (2 of 4 components; data from the
``coupled_oscillator_box`` spec) and the rigid body observed in (z1, z2) (2 of 3; the ``rigid_body`` spec,
initial conditions on the unit sphere), and the periodic Toda lattice of 50 sites observed in its first 4 PSD
coordinates (``psd:4``, the cotangent-lift basis fitted on the training split; ``toda``: trained on the 11
conditions of ``toda_bump``, scored on ``n_test`` held-out mu between them (``heldout_mu``), its file the exact flow to t = 100;
no estimation and no ``fullstate`` row, its full state the PSD decoder's). Data: ``n_train`` trajectories to ``t_train`` at h = 0.2 (DOP853,
1e-12), and ``n_test`` held-out initial conditions drawn from the file's own sampler with another seed
(``vp-rollout --heldout``; no model, and not the parrot, sees them), their exact flow (DOP853, 1e-12) to
t = 100. Training and rollout see the observed channels only
(``observe``); errors are on the observed channels against the exact flow, per held-out condition,
``‖ŷ(t) − y(t)‖ / ‖y(t)‖`` at t = 10 and t = 100; and in the full state (``full_state_errors``): every row's
full state at t estimated from its last 3 observed states by the estimation rows' least squares on the true
flow (a ``fullstate`` row's own state), against the exact flow: the observation is invertible from 3 states
on both systems, so every row has the column.

Approaches (``APPROACHES``), each at every window length T of ``windows``:

- ``vpt`` (the volume-preserving transformer: window of T to the next T; equivariant under reordering its
  window, as in GML), ``vpt_mix`` (the same with ``positional = "mixing"``: a learned unit-triangular shear
  across window positions before each attention, still volume preserving, not equivariant) and ``st`` (the
  standard transformer, softmax attention), the multi-step models with attention;
- ``delay_mlp``, ``delay_mlp2`` and ``delay_vpff`` (``vpintegrator.models.delay``): the window without
  attention, one step from the concatenated window (``delay_mlp2``: as the second difference
  x_{n+1} − 2x_n + x_{n−1}, Störmer–Verlet's position form, T ≥ 2) and a volume-preserving map of the whole
  window: the control that says whether attention adds anything over the window;
- ``gru`` and ``lru`` (``RECURRENT``, ``vpintegrator.models.recurrent``), the recurrent window models at their
  registry defaults: opt-in (the default plans were made without them), added by name (``--approaches
  gru,lru,delay_mlp2``), trained, scored and priced as every learned row;
- ``fullstate``: the same MLP as ``delay_mlp`` at T = 1 trained on the **full** state (not observed): the
  one-step flow map, the upper bound of what the data can teach (its rollout observed for the observed columns);
- per trained VPT and ``vpt_mix`` (T > 1) their ablations as rows: ``+noattn`` (every attention the identity,
  ``without_attention``) and ``+meanattn`` (every attention's Λ(X) replaced by the constant Cayley of its
  mean C over the training windows, ``mean_attention``; a ``vpt_mix`` keeps its position mixing in both, so
  its ``+noattn`` row is the mixing without attention);
- ``estimate+gauss_legendre4`` (the full state recovered from the first ``context_len`` observed states by
  least squares on the true flow, then Gauss–Legendre 4 with the true equations: the known-equations
  competitor), ``parrot`` (the nearest training window's continuation) and ``delay_sindy+rk4`` (``sindy`` on
  the delay vectors (x_n, x_{n+1}) of the training file, the chosen field integrated by RK4: ``delay_sindy``),
  which do not depend on the seed.

T = 1 is the one-step map of the observation (no memory): what the window adds is the gap between T = 1
and T > 1.

Training: every learned approach the same recipe (``RECIPE``: Levenberg–Marquardt on subsamples of 2048
windows with 512 check windows, float64; an epoch is 10 iterations: for ``delay_mlp`` at T = 4 on the quick
data, Adam at 3e-3 (batch 256) plateaued at a validation error of 0.096 at t = 10, LM reached 0.0027 in 40 CPU
s) until its validation score (the validation trajectories' observed rollout error at t = 10, ``monitor = val_rollout``)
has not improved for ``patience`` epochs (its plateau) or its step budget is spent: ``budget_seconds`` of CPU as
whole epochs of that training's measured cost (``STEP_COSTS``, ``vpintegrator.studies.step_budget``), so that the
same command trains the same steps on any machine under any load (``--budget cpu`` restores a budget in process CPU
seconds); ``best.pt`` is the best-scoring epoch. Each run's ``summary.json`` says why it stopped (``stopped``:
``early_stopping`` = plateau reached; ``steps`` = the step budget spent first; ``time_limit`` = cut by the safety
valve, 10 times the budget's CPU seconds); the table has that column, every row its ``steps`` and ``stop_rule``. The coupling of each attention model is measured on held-out
windows (``vpintegrator.testing.attention_coupling``).

Numbers per (system, approach, T): per seed the median over held-out conditions (and its 10–90 % interval),
over seeds the median with a percentile-bootstrap 95 % interval (``bootstrap_ci``); the target of the target
(``TARGET``): the best learned model's median at t = 10 on the coupled oscillator is <= 1e-3 on >= 4 of 5
seeds. Each learned row's batch-1 cost (``cost``: CPU s per unit time of one held-out condition's rollout on the
cost meter, ``batch1_costs``) is a column beside its training CPU.

    vp-study partial_observation --out runs/partial_observation --quick      # <= 10 min on 2 cores
    vp-study partial_observation --out runs/partial_observation              # the default size (--jobs 2: about 2 h on 2 cores)

Writes ``OUT/partial_observation.json`` (every per-seed number; rows of the same (system, seed, label) are
replaced, others kept) and ``OUT/partial_observation.md`` (the tables); ``--table-only`` rebuilds the tables
from the JSON, ``OUT/partial_observation_plateau.{png,svg}`` the validation plateau curves (drawn from the
JSON). Finished training runs (``complete.json``) are reused: run the same command again to resume. The options
become a frozen ``PartialObservationPlan`` once (``build_plan``); every function below takes it or plain values.
"""

from __future__ import annotations

from ..options import Study
from ..runner import check_out_dir, one_line
from ..stats import write_json
from ..step_budget import valve_line, valve_record
from .data import heldout_data, heldout_mu, make_data
from .design import (ABLATED, APPROACHES, ATTENTION, DEFAULTS, DELAY_SINDY, FIXED_ROWS, FULL_CONTEXT, FULL_STATE, H,
                     HELDOUT_SEED, HORIZONS, MIN_T, QUICK, RECIPE, RECURRENT, STEP_COSTS, STEPS_PER_EPOCH, SYSTEMS,
                     TARGET, TRAINING, windows_of)
from .evaluation import batch1_costs, delay_sindy, evaluate_seed, full_state_errors
from .plan import PartialObservationOptions, PartialObservationPlan, build_plan
from .tables import RESULTS, ROW, SCHEMA, merge_rows, plateau_figure, read_rows, summarize_rows, tables
from .training import train_run, train_runs

#: the study's names (its modules: ``design`` what it runs, ``plan`` its options and plan, ``data`` the data,
#: ``training`` the trainings, ``evaluation`` the rows, ``tables`` the tables, the figure and the results file)
__all__ = ["H", "HORIZONS", "SYSTEMS", "APPROACHES", "MIN_T", "FULL_STATE", "DELAY_SINDY", "TARGET", "QUICK",
           "DEFAULTS", "TRAINING", "windows_of", "make_data", "heldout_mu", "heldout_data", "train_run",
           "train_runs", "evaluate_seed", "full_state_errors", "delay_sindy",
           "summarize_rows", "read_rows", "tables", "plateau_figure", "merge_rows", "PartialObservationOptions",
           "PartialObservationPlan", "build_plan", "STUDY", "run",
           "ABLATED", "ATTENTION", "FIXED_ROWS", "FULL_CONTEXT", "HELDOUT_SEED", "RECIPE", "STEP_COSTS",
           "STEPS_PER_EPOCH", "ROW", "SCHEMA", "RESULTS", "RECURRENT", "batch1_costs"]


@one_line
def run(plan: PartialObservationPlan) -> int:
    """The study from its plan (``STUDY``, built once by ``build_plan``); bad input is a one-line
    ``StudyError``."""
    out = plan.out
    check_out_dir(out)
    if plan.table_only and plan.results is not None:  # a results file's tables, no run (never drawn over one)
        return RESULTS.redraw(out, str(plan.results))
    path = RESULTS.path(out)
    if plan.table_only:
        return RESULTS.finish(out, RESULTS.read_rows(path))
    n_runs = len(plan.seeds) * sum(len(plan.training_runs(system)) for system in plan.systems)
    print(f"partial_observation: {n_runs} training runs (systems {', '.join(plan.systems)}; "
          f"T {list(plan.windows)}; {', '.join(plan.approaches)}; seeds {list(plan.seeds)}): "
          f"{plan.budget_line()}", flush=True)
    if guessed := plan.estimated_costs():
        print(f"partial_observation: step costs never measured, guessed from a shorter window (such a run may be cut "
              f"by the safety valve): {'; '.join(guessed)}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    previous = RESULTS.earlier(path)  # merged with the new rows
    rows = previous.get("rows", [])
    import torch

    torch.set_num_threads(1)
    trains = {system: make_data(out, system, plan.n_train, plan.t_train) for system in plan.systems}
    for system in plan.systems:
        heldout_data(out, system, plan.n_test)  # written once, before the workers start
    for system, seed, runs in train_runs(plan, trains):
        new = evaluate_seed(out, trains[system], plan.n_test, system, seed, runs, with_fixed=(seed == plan.seeds[0]))
        rows = merge_rows(rows, new)
        write_json(path, {"commands": [*previous.get("commands", []), plan.command],
                          "budgets": [*previous.get("budgets", []), plan.budget_line()], "valve": valve_record(rows),
                          "rows": rows})
        print(f"partial_observation: {system} seed {seed} done", flush=True)
    print(f"partial_observation: {valve_line(valve_record(rows))}", flush=True)
    return RESULTS.finish(out, rows)


#: the study as the runner runs it (``vp-study partial_observation``, ``python -m vpintegrator.studies.partial_observation``)
STUDY = Study(PartialObservationOptions, run, build_plan, doc=__doc__, required=("out",), prog="vp-study partial_observation",
              error_prefix="partial_observation study: error: ",
              interrupted="partial_observation study: interrupted; run the same command again (finished training "
                          "runs, those with a complete.json, are kept)")
