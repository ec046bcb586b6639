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
  (``vpintegrator.reduction.fit_symplectic_autoencoder``, from the PSD start) at the sizes of
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

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..config import key
from ..errors import VPIntegratorError
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, name_list, number_list
from .runner import StudyError, check_out_dir
from .schema import INTERVAL, Each, Obj, ResultsSchema, check_results
from .step_budget import nearest_cost, step_budget, stop_keys
from .stats import (bootstrap_ci, fmt_num, md_table, median_interval, read_json, redraw_from, unplain, write_json,
                    write_text)
from ..quantiles import median

__all__ = ["T", "HORIZONS", "SYSTEMS", "LADDERS", "ROWS", "DEFAULTS", "QUICK", "ReductionOptions", "ReductionPlan",
           "Case", "build_plan", "make_case", "full_order_rows", "psd_floor_rows", "psd_floor_balanced_rows",
           "psd_galerkin_rows", "psd_galerkin_balanced_rows",
           "flow_map_rows", "psd_flow_map_rows", "autoencoder_flow_map_rows", "families", "SIZES_OF", "PSDEncoder", "fit_psd_encoder", "summarize_rows", "tables",
           "figures", "merge_rows", "STUDY", "run"]

#: the horizon of the training data; errors are reported at T and 8 T
T = 120.0
HORIZONS = (T, 8 * T)
#: study system -> its training spec, Verlet's largest stable step on the bump family (the ladders' top)
SYSTEMS: dict[str, dict[str, Any]] = {
    "toda": {"spec": "toda_bump", "h_max": 1.2},
    "fpu_beta": {"spec": "fpu_beta_bump", "h_max": 0.8},
}
#: the held-out mu: the midpoints of the training mu = 0.30, 0.33 ... 0.60
HELDOUT_MU = tuple(round(0.315 + 0.03 * i, 3) for i in range(10))
#: full-order method -> its steps as fractions of h_max (Verlet, Yoshida 6) or absolute steps (exponential)
LADDERS: dict[str, dict[str, tuple[float, ...]]] = {
    "default": {"stormer_verlet": (1.0, 0.5, 0.25, 0.125), "stormer_verlet_y6": (0.5, 0.25, 0.125),
                "exponential_splitting": (120.0, 24.0, 6.0, 2.4, 1.2)},
    "quick": {"stormer_verlet": (1.0, 0.25), "stormer_verlet_y6": (0.5,), "exponential_splitting": (120.0, 6.0)},
}
#: a row whose error is above this at a horizon wins nothing there (a tenth of the state's norm is no answer)
USEFUL = 0.1
#: 2n -> CPU seconds of one epoch (10 Levenberg–Marquardt iterations) of the flow map's training, the median over
#: the shipped default-size runs (``scripts/step_costs.py``): ``--budget plateau`` turns ``train_seconds`` into that
#: many whole epochs (``vpintegrator.studies.step_budget``), the same steps on any machine under any load
FLOW_MAP_EPOCH_COSTS: dict[int, float] = {16: 1.051, 32: 6.084}
#: the flow map's model and recipe (vpintegrator.training.fit keys)
FLOW_MAP_MODEL: dict[str, Any] = {"name": "g_sympnet", "upscaling_dimension": 32, "n_layers": 4}
FLOW_MAP_RECIPE: dict[str, Any] = {"optimizer": "lm", "lm_windows": 256, "lm_iters_per_epoch": 10,
                                   "lm_resample_every": 10, "lm_lambda": 1e-3, "batch_size": 16384,
                                   "init_scale": 0.3, "dtype": "float64", "val_fraction": 0.2,
                                   "monitor": "val_loss", "epochs": 100000, "patience": 10}
DEFAULTS: dict[str, Any] = {"systems": ["toda", "fpu_beta"], "sizes": [200, 800, 3200], "floor_dims": [4, 8, 16, 32],
                            "reduced_dims": [16, 32], "seeds": [0, 1, 2], "train_seconds": 120.0, "ladder": "default",
                            "repeats": 5, "autoencoder_sizes": [200]}
QUICK: dict[str, Any] = {"systems": ["toda", "fpu_beta"], "sizes": [200], "floor_dims": [4, 8, 16, 32],
                         "reduced_dims": [32], "seeds": [0], "train_seconds": 20.0, "ladder": "quick", "repeats": 3,
                         "autoencoder_sizes": [200]}


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class ReductionPlan:
    """The study's resolved options (``build_plan``): everything below takes this or plain values."""

    out: Path
    systems: tuple[str, ...]
    sizes: tuple[int, ...]
    floor_dims: tuple[int, ...]
    reduced_dims: tuple[int, ...]
    seeds: tuple[int, ...]
    train_seconds: float
    ladder: Mapping[str, tuple[float, ...]]
    data_dt: float
    stride: float
    output_every: float
    repeats: int
    autoencoder_sizes: tuple[int, ...] = ()
    autoencoder_steps: int = 3000
    table_only: bool = False
    results: str | None = None
    skip_existing: bool = False
    command: str = ""
    #: what stops a flow map's training (``--budget``, ``--wall-ceiling``, ``--patience``, ``--max-steps``:
    #: ``vpintegrator.studies.step_budget``; ``plateau``, the default: its plateau or a step budget of
    #: ``train_seconds`` in whole epochs of ``FLOW_MAP_EPOCH_COSTS``, with a safety valve)
    budget: str = "plateau"
    wall_ceiling: float = 4.0
    patience: int = 10
    max_steps: int | None = None

    def flow_map_stop(self, reduced_dim: int) -> dict[str, Any]:
        """The ``fit`` keys that stop the training of a flow map on 2n = ``reduced_dim`` coordinates."""
        steps = None
        if self.budget == "plateau":  # a 2n never measured: the nearest measured one's cost, scaled by 2n
            cost, source = nearest_cost({(d,): c for d, c in FLOW_MAP_EPOCH_COSTS.items()}, (), int(reduced_dim),
                                        below_only=False, label="2n")
            steps = step_budget(self.train_seconds, cost, int(FLOW_MAP_RECIPE["lm_iters_per_epoch"]),
                                given=self.max_steps, source=source, what=f"the flow map on 2n = {reduced_dim}")
        return {**stop_keys(self.budget, self.train_seconds, self.wall_ceiling, steps), "patience": int(self.patience)}

    @property
    def stride_steps(self) -> int:
        """Delta / data_dt: the flow map's stride in samples of the training data."""
        return int(round(self.stride / self.data_dt))


def _multiple(x: float, of: float) -> bool:
    k = round(x / of)
    return k >= 1 and abs(k * of - x) <= 1e-9 * max(1.0, x)


def build_plan(options: ReductionOptions, argv: Sequence[str] = ()) -> ReductionPlan:
    """The typed plan of a parsed command line: the ``--quick`` or default sizes under the keys given; one-line
    ``StudyError`` for a stride that is not a multiple of the data's step (or does not divide T), an output
    cadence that is not a multiple of the stride, or a reduced dimension that is odd."""
    a = options
    if a.out is None:
        raise StudyError("--out is required (the flag, or out in the --plan file)")
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the reduction study ships no pretrained model")
    if int(a.jobs) != 1:
        raise StudyError("--jobs: the reduction study runs in one process (its rows' costs are timed batch-1 in it, "
                         "one after the other); leave --jobs out")
    if a.overwrite:
        raise StudyError("--overwrite: the reduction study computes every cell again and merges it into OUT's JSON "
                         "anyway (--skip-existing keeps the finished ones); leave --overwrite out")
    size = QUICK if a.quick else DEFAULTS

    def pick(name: str) -> Any:
        value = getattr(a, name, None)
        return size[name] if value is None else value

    data_dt, stride = float(a.data_dt), float(a.stride)
    if not _multiple(stride, data_dt):
        raise StudyError(f"--stride {stride:g} is not a multiple of the data's step --data-dt {data_dt:g}; give a "
                         f"stride k * {data_dt:g}")
    if not _multiple(T, data_dt) or not _multiple(T, stride):
        raise StudyError(f"--stride {stride:g} and --data-dt {data_dt:g} must divide T = {T:g}")
    output_every = stride if a.output_every is None else float(a.output_every)
    if not _multiple(output_every, stride) or not _multiple(T, output_every):
        raise StudyError(f"--output-every {output_every:g} must be a multiple of --stride {stride:g} that divides "
                         f"T = {T:g}")
    for name in ("floor_dims", "reduced_dims"):
        bad = [d for d in pick(name) if d % 2]
        if bad:
            raise StudyError(f"--{name.replace('_', '-')}: a reduced dimension 2n is even; got {bad[0]}")
        n = min(int(n) for n in pick("sizes"))  # known now: refused before any lattice is integrated
        above = [d for d in pick(name) if d > 2 * n]
        if above and not a.table_only:
            raise StudyError(f"--{name.replace('_', '-')}: a reduced dimension 2n = {above[0]} exceeds the full "
                             f"dimension 2N = {2 * n} of the lattice of --sizes {n}; give reduced dimensions <= {2 * n} "
                             "or larger sizes")
    return ReductionPlan(out=Path(a.out), systems=tuple(pick("systems")), sizes=tuple(int(n) for n in pick("sizes")),
                         floor_dims=tuple(int(d) for d in pick("floor_dims")),
                         reduced_dims=tuple(int(d) for d in pick("reduced_dims")),
                         seeds=tuple(int(s) for s in (a.seeds or pick("seeds"))),
                         train_seconds=float(pick("train_seconds")), ladder=LADDERS[pick("ladder")],
                         data_dt=data_dt, stride=stride, output_every=output_every, repeats=int(pick("repeats")),
                         autoencoder_sizes=tuple(int(n) for n in pick("autoencoder_sizes")),
                         autoencoder_steps=int(a.autoencoder_steps),
                         table_only=bool(a.table_only), results=a.results, skip_existing=bool(a.skip_existing),
                         command=" ".join(["vp-study reduction", *(argv or sys.argv[1:])]),
                         budget=str(a.budget), wall_ceiling=float(a.wall_ceiling), patience=int(a.patience),
                         max_steps=None if a.max_steps is None else int(a.max_steps))


# --------------------------------------------------------------------------- data


@dataclass(frozen=True, eq=False)
class Case:
    """One lattice of the study: the system, its training split and the held-out reference at 0, T, 8 T."""

    system_name: str
    N: int
    system: Any
    train: Any  # Trajectories: the training split, every data_dt
    heldout: np.ndarray  # (10, 3, 2N): the held-out states at t = 0, T, 8 T
    data_cpu: float  # process CPU seconds of the training split's generation
    #: per PSD method, its SVD of the training split, fitted once at the largest 2n asked (``psd_basis``):
    #: method -> (the basis, the process CPU seconds of its SVD)
    bases: dict[str, tuple[Any, float]] = field(default_factory=dict, repr=False)

    def psd_basis(self, reduced_dim: int, method: str = "cotangent_lift") -> tuple[Any, float]:
        """(the PSD basis (``method`` of ``fit_psd``) of 2n = ``reduced_dim`` on the training split, the process
        CPU seconds of its SVD): one SVD per method serves every 2n (the leading columns of the largest basis
        fitted so far)."""
        from dataclasses import replace

        from ..clock import process_cpu
        from ..reduction import fit_psd

        if method not in self.bases or self.bases[method][0].reduced_dim < reduced_dim:
            tic = process_cpu()
            basis = fit_psd(self.train, reduced_dim, method)
            self.bases[method] = (basis, process_cpu() - tic)
        basis, cpu = self.bases[method]
        return replace(basis, phi=np.ascontiguousarray(basis.phi[:, : reduced_dim // 2])), cpu

    @property
    def y0(self) -> np.ndarray:
        """The held-out initial states (10, 2N)."""
        return self.heldout[:, 0]


def make_case(system_name: str, n_sites: int, data_dt: float) -> Case:
    """Generate (in memory) the training split and the held-out reference of ``system_name`` at N sites."""
    from ..clock import process_cpu
    from ..data import generate, load_spec
    from ..systems import get_system

    spec = load_spec(SYSTEMS[system_name]["spec"])
    params = {**spec.params, "N": int(n_sites)}
    system = get_system(system_name, **params)  # N < 3 is refused here, in one line
    tic = process_cpu()
    train = generate(load_spec(SYSTEMS[system_name]["spec"], params=params, dt=data_dt, t_end=T), workers=1)
    data_cpu = process_cpu() - tic
    held = generate(load_spec(SYSTEMS[system_name]["spec"], params=params, dt=T, t_end=HORIZONS[-1],
                              sampler_args={"mu": list(HELDOUT_MU)}), workers=1)
    keep = [int(round(t / T)) for t in (0.0, *HORIZONS)]
    states = np.asarray(getattr(held, "y"))[:, keep]  # generate without out= returns the Trajectories
    return Case(system_name, int(n_sites), system, train, np.ascontiguousarray(states), data_cpu)


# --------------------------------------------------------------------------- measuring


def _min_cpu(call: Callable[[], object], repeats: int) -> float:
    """The warm batch-1 cost of ``call`` on the one cost meter (``vpintegrator.clock.meter``: one cold call,
    compilation apart, then the minimum over ``repeats``; thread CPU seconds)."""
    from ..clock import meter_one

    return meter_one(call, max(1, int(repeats))).seconds


def _advance(system: Any, method: str, h: float, y0: np.ndarray, horizons: Sequence[float]) -> np.ndarray:
    """The states (n, len(horizons), dim) of ``method`` at step h from ``y0`` (n, dim) at each horizon, stepped
    in chunks (``integrate``, compiled where it applies) so that no run holds more than ~2e7 numbers."""
    from ..data import integrate

    y = np.array(y0, dtype=np.float64)
    chunk = max(1, int(2e7 // (y.shape[0] * y.shape[1])))
    out, done = [], 0
    for t in horizons:
        target = int(round(t / h))
        while done < target:
            k = min(chunk, target - done)
            try:
                y = integrate(system, y, h, k, method=method).y[:, -1]
            except VPIntegratorError:  # unstable at this step (a non-finite state): the row's error is inf
                return np.full((y.shape[0], len(horizons), y.shape[1]), np.nan)
            done += k
        out.append(y)
    return np.stack(out, axis=1)


def _errors(y: np.ndarray, case: Case) -> dict[str, Any]:
    """Per horizon: the median (and 10-90 % interval) over the held-out mu of the full state's relative error;
    ``y`` (n, len(HORIZONS), 2N)."""
    from ..arrays import relative_error

    out = {}
    for i, t in enumerate(HORIZONS):
        e = np.asarray(relative_error(y[:, i], case.heldout[:, i + 1]), dtype=np.float64)
        out[f"err_t{t:g}"] = median_interval([float(v) if np.isfinite(v) else math.inf for v in e])
    return out


def _record(case: Case, row: str, label: str, **values: Any) -> dict[str, Any]:
    return {"system": case.system_name, "N": case.N, "row": row, "label": label, "seed": None, "cost": None,
            "offline_cpu": None, **values}


#: steps per call of a compiled stepper when a row is priced (``_stepper_cost``): whole outputs at a time into a
#: buffer that stays in cache, so that neither a Python call per output nor storing every state is the row's cost
STEPS_PER_CALL = 64


def _stepper_cost(system: Any, method: str, h: float, y0: np.ndarray, repeats: int, output_every: float,
                  decode: Callable[[np.ndarray], object] | None = None) -> float:
    """Batch-1 thread CPU seconds per unit time of ``method`` at step h from ``y0`` to T, priced for the output
    every row of the study gives: the full state every ``output_every`` time units (at the row's own
    steps where its step is longer), ``decode`` (a reduced row's decoder) applied to each, no other state stored.
    The compiled stepper where the package has one, stepping ``STEPS_PER_CALL`` steps (whole outputs) a call into
    a small buffer, the outputs decoded together; else ``integrate`` (the NumPy step) to T in one call."""
    from ..compiled import compiled_stepper
    from ..data import integrate

    n = int(round(T / h))
    stepper = compiled_stepper(system, method, h)
    if stepper is not None:
        k = max(1, min(n, int(round(float(output_every) / h))))  # steps per output
        block = k * max(1, STEPS_PER_CALL // k)  # whole outputs per call: no Python per output, a small buffer
        buf = np.empty((block, system.dim))
        last = np.arange(k - 1, block, k)  # the output states of a whole block

        def run() -> None:
            y, done = y0.copy(), 0
            while done < n:
                m = min(block, n - done)
                stepper.step_block(y, m, buf)
                if decode is not None:
                    decode(buf[last[last < m]])
                done += m
        return _min_cpu(run, repeats) / T

    def whole() -> None:
        y = integrate(system, y0[None], h, n, method=method)
        if decode is not None:
            k = max(1, int(round(float(output_every) / h)))
            decode(np.asarray(y.y)[0, k::k])
    return _min_cpu(whole, repeats) / T


# --------------------------------------------------------------------------- the rows


def full_order_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """Verlet, Yoshida 6 and the exponential splitting over the plan's ladder."""
    rows = []
    h_max = SYSTEMS[case.system_name]["h_max"]
    for method, steps in plan.ladder.items():
        for s in steps:
            h = float(s) if method == "exponential_splitting" else round(h_max * float(s), 12)
            y = _advance(case.system, method, h, case.y0, HORIZONS)
            cost = (_stepper_cost(case.system, method, h, case.y0[0], plan.repeats, plan.output_every)
                    if np.isfinite(y).all() else None)
            rows.append(_record(case, "full_order", f"{method}, h = {h:g}", method=method, h=h, cost=cost,
                                **_errors(y, case)))
    return rows


#: the PSD method of the balanced rows (``psd_floor_balanced``, ``psd_galerkin_balanced``)
_BALANCED = "balanced_cotangent_lift"


def _floor_rows(plan: ReductionPlan, case: Case, method: str, family: str, name: str) -> list[dict[str, Any]]:
    """The reconstruction floor of the PSD ``method`` at each 2n of ``floor_dims`` (fitted on the training split),
    as rows of ``family`` labelled "``name``, 2n = ..."."""
    rows = []
    case.psd_basis(max(plan.floor_dims), method)  # one SVD for every 2n
    for dim in plan.floor_dims:
        basis = case.psd_basis(dim, method)[0]
        y = basis.project(case.heldout[:, 1:])
        rows.append(_record(case, family, f"{name}, 2n = {dim}", reduced_dim=dim, **_errors(y, case)))
    return rows


def psd_floor_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """The cotangent-lift PSD's reconstruction floor at each 2n of ``floor_dims`` (fitted on the training split)."""
    return _floor_rows(plan, case, "cotangent_lift", "psd_floor", "PSD floor")


def psd_floor_balanced_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """The balanced cotangent lift's reconstruction floor at each 2n of ``floor_dims`` (the training split)."""
    return _floor_rows(plan, case, _BALANCED, "psd_floor_balanced", "balanced PSD floor")


def psd_galerkin_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """PSD-Galerkin by Stormer-Verlet at each 2n of ``reduced_dims``, without and with hyper-reduction, at the
    ladder's Verlet steps."""
    return _galerkin_rows(plan, case, "cotangent_lift", "psd_galerkin", "PSD-Galerkin")


def psd_galerkin_balanced_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """``psd_galerkin_rows`` on the balanced cotangent lift."""
    return _galerkin_rows(plan, case, _BALANCED, "psd_galerkin_balanced", "balanced PSD-Galerkin")


def _galerkin_rows(plan: ReductionPlan, case: Case, method: str, family: str, prefix: str) -> list[dict[str, Any]]:
    """PSD-Galerkin on the PSD ``method``'s basis (``psd_galerkin_rows``), rows of ``family`` labelled
    "``prefix``[ hyper-reduced (...)], 2n = ..., stormer_verlet h = ..."."""
    from ..clock import process_cpu
    from ..reduction import PSDGalerkin, fit_bond_sampling

    rows = []
    h_max = SYSTEMS[case.system_name]["h_max"]
    steps = [round(h_max * float(s), 12) for s in plan.ladder["stormer_verlet"][:2]]
    for dim in plan.reduced_dims:
        basis, svd_cpu = case.psd_basis(dim, method)
        tic = process_cpu()
        sampling = fit_bond_sampling(case.system, basis, case.train, tol=1e-3)
        hyper_cpu = process_cpu() - tic
        z0 = basis.encode(case.y0)
        variants = [(prefix, PSDGalerkin(case.system, basis), svd_cpu, None),
                    (f"{prefix} hyper-reduced ({sampling.bonds.size} of {sampling.n_bonds} bonds)",
                     PSDGalerkin(case.system, basis, sampling), svd_cpu + hyper_cpu, int(sampling.bonds.size))]
        for name, reduced, offline, bonds in variants:
            for h in steps:
                z = _advance(reduced, "stormer_verlet", h, z0, HORIZONS)
                cost = (_stepper_cost(reduced, "stormer_verlet", h, z0[0], plan.repeats, plan.output_every,
                                      basis.decode) if np.isfinite(z).all() else None)
                rows.append(_record(case, family, f"{name}, 2n = {dim}, stormer_verlet h = {h:g}",
                                    method="stormer_verlet", h=h, reduced_dim=dim, bonds=bonds, cost=cost,
                                    offline_cpu=case.data_cpu + offline, **_errors(basis.decode(z), case)))
    return rows


@dataclass(frozen=True, eq=False)
class PSDEncoder:
    """A PSD basis as a reduced-coordinate encoder: ``encode``/``decode`` of NumPy arrays and ``fit_seconds``
    (process CPU of the fit), the interface ``flow_map_rows`` takes (an autoencoder offers the same)."""

    basis: Any
    fit_seconds: float

    def encode(self, y: np.ndarray) -> np.ndarray:
        """(..., 2N) -> (..., 2n)."""
        return self.basis.encode(y)

    def decode(self, z: np.ndarray) -> np.ndarray:
        """(..., 2n) -> (..., 2N)."""
        return self.basis.decode(z)


def fit_psd_encoder(states: np.ndarray, reduced_dim: int, seed: int = 0) -> PSDEncoder:
    """The cotangent-lift PSD of ``states`` (..., 2N) as an encoder (``seed`` unused: the SVD is deterministic)."""
    from ..clock import process_cpu
    from ..reduction import fit_psd

    tic = process_cpu()
    basis = fit_psd(states, reduced_dim)
    return PSDEncoder(basis, process_cpu() - tic)


def _train_flow_map(z: np.ndarray, t: np.ndarray, seed: int, stop: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A G-SympNet flow map of one stride fitted (``vpintegrator.training.fit``, in memory) on reduced trajectories
    ``z`` (n_traj, n_states, 2n) sampled at ``t``, stopped by ``stop`` (``ReductionPlan.flow_map_stop``: no
    clock of its own); (the model, what its training recorded)."""
    import torch

    from ..clock import process_cpu
    from ..data import Trajectories
    from ..training import fit

    torch.set_num_threads(1)
    data = Trajectories(np.ascontiguousarray(z), np.asarray(t, dtype=np.float64), {"dt": float(t[1] - t[0])})
    best: dict[str, Any] = {"loss": math.inf, "state": None}

    def keep_best(epoch: Any) -> None:  # the best validation epoch's weights (fit's model holds the last ones)
        if math.isfinite(epoch.val_loss) and epoch.val_loss < best["loss"]:
            best["loss"] = float(epoch.val_loss)
            best["state"] = {k: v.detach().clone() for k, v in epoch.model.state_dict().items()}

    tic = process_cpu()
    result = fit(model=dict(FLOW_MAP_MODEL), train=data, seed=int(seed), callback=keep_best,
                 **{**FLOW_MAP_RECIPE, **stop})
    info = {"train_cpu": process_cpu() - tic, "stopped": result.stopped, "epochs": int(result.epochs),
            "steps": int(result.steps), "max_steps": stop.get("max_steps"),
            "n_params": int(result.n_params), "best_val": float(result.best_loss)}
    model = result.model
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return model.double().eval(), info


def _compiled_flow_map(model: Any, z0: np.ndarray) -> Any:
    """The packed model (``numba_model.pack``), checked against torch on ``z0``; a one-line error otherwise."""
    import torch

    from ..rollout.numba_model import pack

    packed = pack(model)
    if packed is None:
        raise StudyError(f"the flow map {FLOW_MAP_MODEL['name']} has no compiled kernel here (numba missing?)")
    with torch.no_grad():
        want = model(torch.as_tensor(z0[:, None, :])).numpy()[:, 0]
    got = packed.forward(z0[:, None, :])[:, 0]
    if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
        raise StudyError("the compiled flow map disagrees with its torch model; rerun with numba's cache cleared")
    return packed


#: how a reduced-coordinate encoder's name is shown in a row's label
_SHOWN = {"psd": "PSD", "autoencoder": "symplectic autoencoder"}


def flow_map_rows(plan: ReductionPlan, case: Case, name: str,
                  fit_encoder: Callable[..., Any]) -> list[dict[str, Any]]:
    """Rows "``name`` + flow map": per 2n of ``reduced_dims`` and seed, ``fit_encoder(states, reduced_dim,
    seed=...)`` (an object with ``encode``/``decode`` of NumPy arrays and ``fit_seconds``) on the training split,
    a flow map of step ``stride`` trained on the encoded training trajectories, rolled out batch-1 by the
    compiled kernel and decoded every ``output_every``."""
    rows = []
    train = case.train
    k = plan.stride_steps
    calls = int(round(T / plan.stride))
    per_output = int(round(plan.output_every / plan.stride))
    for dim in plan.reduced_dims:
        for seed in plan.seeds:
            encoder = fit_encoder(np.asarray(train.y), dim, seed=seed)
            z = encoder.encode(np.asarray(train.y)[:, ::k])
            model, info = _train_flow_map(z, np.asarray(train.t)[::k], seed, plan.flow_map_stop(dim))
            z0 = np.asarray(encoder.encode(case.y0), dtype=np.float64)
            packed = _compiled_flow_map(model, z0)
            ends = [int(round(t / plan.stride)) for t in HORIZONS]
            out = np.empty((z0.shape[0], ends[-1], dim))
            packed.rollout_block(z0[:, None, :], ends[-1], out)
            y = encoder.decode(np.stack([out[:, e - 1] for e in ends], axis=1))
            one, buf = z0[:1, None, :], np.empty((1, calls, dim))

            def rollout_to_t() -> None:
                packed.rollout_block(one, calls, buf)
                encoder.decode(buf[0, per_output - 1::per_output])

            cost = _min_cpu(rollout_to_t, plan.repeats) / T
            offline = case.data_cpu + float(encoder.fit_seconds) + info["train_cpu"]
            rows.append(_record(case, f"{name}_flow_map", f"{_SHOWN.get(name, name)} + flow map, 2n = {dim}, "
                                f"Delta = {plan.stride:g}",
                                method=FLOW_MAP_MODEL["name"], h=plan.stride, reduced_dim=dim, seed=int(seed),
                                cost=cost, offline_cpu=offline, **info, **_errors(y, case)))
    return rows


def psd_flow_map_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """PSD + flow map (``flow_map_rows`` with the cotangent-lift PSD)."""
    def encoder(states: np.ndarray, reduced_dim: int, seed: int = 0) -> PSDEncoder:  # the case's one SVD
        basis, cpu = case.psd_basis(reduced_dim)
        return PSDEncoder(basis, cpu)

    return flow_map_rows(plan, case, "psd", encoder)


def autoencoder_flow_map_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """Symplectic autoencoder + flow map (``flow_map_rows`` with ``fit_symplectic_autoencoder``, from the PSD
    start, at most ``autoencoder_steps`` optimiser steps, a budget no load bends), at the sizes N of
    ``autoencoder_sizes`` only (``families``: its gradient layers act on the full 2N, so a CPU fit grows with N)."""
    from ..reduction import fit_symplectic_autoencoder

    def encoder(states: np.ndarray, reduced_dim: int, seed: int = 0) -> Any:
        return fit_symplectic_autoencoder(states.reshape(-1, states.shape[-1]), reduced_dim, seed=seed,
                                          max_steps=plan.autoencoder_steps)

    return flow_map_rows(plan, case, "autoencoder", encoder)


#: the ``psd_sindy`` rows: the reduced dimensions 2n, SINDy's libraries (its polynomial ones to degree 3: on 2n
#: coordinates degree D has C(2n + D, D) features), the method the fitted field is integrated by and its steps as
#: multiples of ``data_dt`` (the fit's validation rollouts run at ``data_dt``)
SINDY_DIMS = (8,)
SINDY_LIBRARIES = ("poly1", "poly2", "poly3")
SINDY_METHOD = "rk4"
SINDY_STEPS = (1, 2, 4)


def psd_sindy_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """SINDy on the PSD coordinates (the fitted row of operator inference's family): ż = Θ(z) Ξ on the training
    split's 2n cotangent-lift coordinates (``vpintegrator.rollout.sindy.select_sindy``: library of
    ``SINDY_LIBRARIES`` and threshold chosen by validation rollout on two of the 11 training trajectories, never
    on a held-out mu), integrated by ``SINDY_METHOD`` at ``SINDY_STEPS`` × ``data_dt`` from the held-out initial
    states' coordinates and decoded; priced like every reduced row (decoding each output). Without pysindy (the
    ``sindy`` extra) the family has no rows; a fit without skill is a row of infinite error."""
    import importlib.util

    if importlib.util.find_spec("pysindy") is None:
        return []
    from ..clock import process_cpu
    from ..rollout.sindy import select_sindy

    rows = []
    y = np.asarray(case.train.y)
    val = np.zeros(len(y), dtype=bool)
    val[[1, len(y) - 2]] = True  # two interior mu of the training split validate
    for dim in SINDY_DIMS:
        basis, svd_cpu = case.psd_basis(dim)
        z = basis.encode(y)
        tic = process_cpu()
        fit, _ = select_sindy(z[~val], z[val], plan.data_dt, SINDY_METHOD, libraries=SINDY_LIBRARIES)
        offline = case.data_cpu + svd_cpu + process_cpu() - tic
        if fit is None or fit.field is None:
            rows.append(_record(case, "psd_sindy", f"PSD-SINDy (no skill), 2n = {dim}", reduced_dim=dim,
                                offline_cpu=offline, **_errors(np.full((len(case.y0), len(HORIZONS), y.shape[-1]),
                                                                       np.nan), case)))
            continue
        z0 = basis.encode(case.y0)
        for k in SINDY_STEPS:
            h = round(plan.data_dt * k, 12)
            zz = _advance(fit.field, SINDY_METHOD, h, z0, HORIZONS)
            cost = (_stepper_cost(fit.field, SINDY_METHOD, h, z0[0], plan.repeats, plan.output_every, basis.decode)
                    if np.isfinite(zz).all() else None)
            rows.append(_record(case, "psd_sindy", f"PSD-SINDy {fit.library}, 2n = {dim}, {SINDY_METHOD} h = {h:g}",
                                method=SINDY_METHOD, h=h, reduced_dim=dim, cost=cost, offline_cpu=offline,
                                library=str(fit.library), n_terms=int(fit.n_terms),
                                **_errors(basis.decode(zz), case)))
    return rows


#: row family -> its function (plan, case) -> records
ROWS: dict[str, Callable[[ReductionPlan, Case], list[dict[str, Any]]]] = {
    "full_order": full_order_rows,
    "psd_floor": psd_floor_rows,
    "psd_floor_balanced": psd_floor_balanced_rows,
    "psd_galerkin": psd_galerkin_rows,
    "psd_galerkin_balanced": psd_galerkin_balanced_rows,
    "psd_flow_map": psd_flow_map_rows,
    "autoencoder_flow_map": autoencoder_flow_map_rows,
    "psd_sindy": psd_sindy_rows,
}
#: row family -> the lattice sizes of the plan it runs at (the others run at every size)
SIZES_OF: dict[str, Callable[[ReductionPlan], tuple[int, ...]]] = {
    "autoencoder_flow_map": lambda plan: plan.autoencoder_sizes,
}


def families(plan: ReductionPlan, n: int) -> dict[str, Callable[[ReductionPlan, Case], list[dict[str, Any]]]]:
    """The row families that run on a lattice of size ``n`` under ``plan`` (``SIZES_OF``)."""
    return {f: fn for f, fn in ROWS.items() if f not in SIZES_OF or n in SIZES_OF[f](plan)}


# --------------------------------------------------------------------------- summary and tables


def _key(r: Mapping[str, Any]) -> tuple:
    return (r["system"], int(r["N"]), r["label"], r.get("seed"))


def merge_rows(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with the records of the same (system, N, label, seed) as a new one replaced by it."""
    keyed = {_key(r): r for r in old}
    keyed.update({_key(r): r for r in new})
    return list(keyed.values())


def _median(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return median(vals) if vals else None


def summarize_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (system, N, label): the error at each horizon (the median over held-out mu; over seeds, the
    median of the per-seed medians with its 95 % bootstrap interval), the cost and offline CPU (medians over
    seeds) and the break-even number of rollouts (module docstring)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], int(r["N"]), r["label"]), []).append(r)
    out = []
    for (system, n, label), rs in groups.items():
        rs = sorted(rs, key=lambda r: -1 if r.get("seed") is None else int(r["seed"]))
        e: dict[str, Any] = {"system": system, "N": n, "label": label, "row": rs[0]["row"],
                             "seeds": [r.get("seed") for r in rs if r.get("seed") is not None],
                             "cost": _median([r.get("cost") for r in rs]),
                             "offline_cpu": _median([r.get("offline_cpu") for r in rs])}
        for t in HORIZONS:
            per_seed = [r[f"err_t{t:g}"]["median"] for r in rs]
            lo, hi = bootstrap_ci([v for v in per_seed if v is not None]) if len(per_seed) > 1 else (None, None)
            e[f"t{t:g}"] = {"median": _median(per_seed), "per_seed": per_seed,
                            "ci": [None if lo is None or math.isnan(lo) else lo,
                                   None if hi is None or math.isnan(hi) else hi]}
        out.append(e)
    for e in out:
        e["break_even"] = _break_even(e, [x for x in out if x["system"] == e["system"] and x["N"] == e["N"]
                                          and x["row"] == "full_order"])
    out.sort(key=lambda e: (e["system"], e["N"], _ROW_ORDER.get(e["row"], 9), _num(e["t120"]["median"])))
    return out


_ROW_ORDER = {"full_order": 0, "psd_floor": 1, "psd_floor_balanced": 1.5, "psd_galerkin": 2,
              "psd_galerkin_balanced": 2.5}
#: the row families that are reconstruction floors (no model, no cost)
_FLOORS = ("psd_floor", "psd_floor_balanced")


def _num(x: Any) -> float:
    return math.inf if x is None else float(x)


def _break_even(e: Mapping[str, Any], full: Sequence[Mapping[str, Any]]) -> float | None:
    """Rollouts (to T) after which a reduced row's offline CPU is paid back against the cheapest full-order row as
    accurate at T; inf: never; None: not a reduced row with a cost."""
    if e["row"] == "full_order" or e["cost"] is None or e["offline_cpu"] is None:
        return None
    err = _num(e[f"t{T:g}"]["median"])
    rivals = [_num(f["cost"]) for f in full if _num(f[f"t{T:g}"]["median"]) <= err and f["cost"] is not None]
    if not rivals or min(rivals) <= e["cost"]:
        return math.inf
    return float(e["offline_cpu"]) / ((min(rivals) - float(e["cost"])) * T)


def _cell(entry: Mapping[str, Any]) -> str:
    m, (lo, hi) = entry["median"], entry["ci"]
    return fmt_num(m) + (f" [{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None and hi is not None else "")


def _verdict(mine: Sequence[Mapping[str, Any]], horizon: float) -> str:
    """Who wins on one lattice at ``horizon``, said plainly: the reduced rows with an error of at most ``USEFUL``
    that no full-order row beats at both error and cost, else that the full-order method wins."""
    t = f"t{horizon:g}"
    full = [e for e in mine if e["row"] == "full_order" and e["cost"] is not None]
    def beaten(e: Mapping[str, Any]) -> bool:
        return any(_num(f[t]["median"]) <= _num(e[t]["median"]) and f["cost"] <= e["cost"] for f in full)

    winners = [e for e in mine if e["row"] not in ("full_order", *_FLOORS) and e["cost"] is not None
               and _num(e[t]["median"]) <= USEFUL and not beaten(e)]
    ref = min(full, key=lambda e: _num(e["cost"])) if full else None
    where = f"At t = {horizon:g}"
    if not winners:
        text = [f"{where}: **the full-order method wins**: every reduced or learned row is matched or beaten at once "
                f"in error and in CPU per unit time by a full-order row, or has an error above {USEFUL:g}"]
    else:
        def against(e: Mapping[str, Any]) -> str:
            if ref is None or not ref[t]["median"]:
                return ""
            return (f", {_num(e[t]['median']) / _num(ref[t]['median']):.2g} x the error and "
                    f"{_num(e['cost']) / _num(ref['cost']):.2g} x the cost of the cheapest full-order row")

        names = "; ".join(f"{e['label']} ({fmt_num(e[t]['median'])} at {fmt_num(e['cost'])} s{against(e)})"
                          for e in winners)
        text = [f"{where}: **not beaten by any full-order row at both error and cost**: {names}"]
    if ref is not None:
        text.append(f"the cheapest full-order row is {ref['label']} ({fmt_num(ref[t]['median'])} at "
                    f"{fmt_num(ref['cost'])} s per unit time)")
    for family, name in zip(_FLOORS, ("PSD floor", "balanced PSD floor")):
        floors = [e for e in mine if e["row"] == family]
        if floors:
            best_floor = min(floors, key=lambda e: _num(e[t]["median"]))
            text.append(f"the lowest {name} is {fmt_num(best_floor[t]['median'])} "
                        f"({best_floor['label'].split(', ')[-1]})")
    return "; ".join(text) + "."


def tables(summary: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown tables: per (system, N), every row with its errors at T and 8 T, cost, offline CPU and
    break-even rollouts, and who wins."""
    lines = ["# Reduction study: results", "",
             "Error: median over the 10 held-out mu of |y(t) - y_ref(t)| / |y_ref(t)| of the full state (over seeds: "
             "the median of the per-seed medians [95 % bootstrap interval]); cost: batch-1 thread CPU s per unit "
             "time; offline: CPU s of data + SVD (+ hyper-reduction fit, + training); break-even: rollouts to T "
             "after which the offline CPU is paid back against the cheapest full-order row as accurate at T.", ""]
    for system in dict.fromkeys(e["system"] for e in summary):
        for n in sorted({int(e["N"]) for e in summary if e["system"] == system}):
            mine = [e for e in summary if e["system"] == system and int(e["N"]) == n]
            lines += [f"## {system}, N = {n}", ""]
            lines += [line for h in HORIZONS for line in (_verdict(mine, h), "")]
            body = []
            for e in mine:
                be = e.get("break_even")
                be_text = "—" if be is None else "never" if math.isinf(be) else f"{be:.3g}"
                body.append([e["label"], _cell(e["t120"]), _cell(e["t960"]), fmt_num(e["cost"]),
                             fmt_num(e["offline_cpu"]), be_text, len(e["seeds"]) or "—"])
            lines += md_table(["row", "error at T = 120", "error at 8T = 960", "s / unit time", "offline CPU s",
                               "break-even rollouts", "seeds"], body) + [""]
    return "\n".join(lines)


def _family(label: str) -> str:
    """A row's series in the figures: its label without the step, the stride and the bond count."""
    import re

    label = re.sub(r" \(\d+ of \d+ bonds\)", "", label)
    return re.sub(r", (\w+ h|h|Delta) = [^,]*$", "", label)


def figures(summary: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """Per (system, N): the work-precision figure, error at T against batch-1 CPU per unit time, one series per
    row family (the PSD floors as horizontal lines: dotted, the balanced lift's dash-dot). PNG and SVG under
    ``out``."""
    from ..plotting.style import figure, save_figure

    paths: list[Path] = []
    for system, n in dict.fromkeys((e["system"], int(e["N"])) for e in summary):
        mine = [e for e in summary if e["system"] == system and int(e["N"]) == n]
        fig = figure(6.4, 3.6)
        ax = fig.add_subplot()
        series: dict[str, list[tuple[float, float]]] = {}
        for e in mine:
            err = e["t120"]["median"]
            if e["row"] in _FLOORS:
                if err is not None:
                    ax.axhline(err, color="0.7", linewidth=0.6, linestyle=":" if e["row"] == "psd_floor" else "-.")
                continue
            if err is None or e["cost"] is None or not math.isfinite(err):
                continue
            family = _family(e["label"])
            series.setdefault(family, []).append((float(e["cost"]), float(err)))
        for i, (family, pts) in enumerate(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=0.8,
                    color=f"C{i % 10}", label=family)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch-1 CPU s per unit time")
        ax.set_ylabel("median relative error at T = 120")
        balanced = ", dash-dot: balanced" if any(e["row"] == "psd_floor_balanced" for e in mine) else ""
        ax.set_title(f"{system}, N = {n} (dotted: PSD floors{balanced})", fontsize=8)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        paths += save_figure(fig, out / f"reduction_{system}_N{n}", formats=("png", "svg"), overwrite=True)
    return paths


# --------------------------------------------------------------------------- the command


@dataclass
class ReductionOptions(StudyOptions):
    """The reduction study's keys (besides the shared ones of ``StudyOptions``).

    Parameters
    ----------
    quick : bool
        A small run (N = 200 only, seed 0, short ladders, 2n = 32 for the reduced models, 20 CPU s of training):
        the same code path in under ten minutes.
    systems : list of str
        Comma list out of toda, fpu_beta (default both).
    sizes : list of int
        The lattice sizes N, each >= 3 (default 200,800,3200).
    floor_dims : list of int
        The reduced dimensions 2n of the PSD floors (default 4,8,16,32).
    reduced_dims : list of int
        The reduced dimensions 2n of PSD-Galerkin and the flow maps (default 16,32).
    train_seconds : float
        The CPU seconds each flow map's training may cost (default 120): with ``--budget plateau`` (the default)
        a step budget of that many seconds in whole epochs of ``FLOW_MAP_EPOCH_COSTS`` (``--max-steps``: the steps
        themselves), the same on any machine; with ``--budget cpu`` process CPU seconds.
    ladder : str
        The full-order step ladders: default or quick.
    data_dt : float
        The training data's sampling step (default 0.1).
    stride : float
        The flow map's step Delta, a multiple of data_dt that divides T = 120 (default 2).
    output_every : float
        The decoding cadence of the flow-map rollouts, a multiple of the stride (default: every stride).
    repeats : int
        Timed runs per cost (the minimum is kept; default 5).
    autoencoder_sizes : list of int
        The sizes N (of ``sizes``) at which the symplectic-autoencoder rows run (default 200: its gradient
        layers act on the full state, so its CPU fit grows with N; give 200,800 for more).
    autoencoder_steps : int
        At most this many Adam steps per autoencoder fit (default 3000), besides its plateau rule.
    """

    quick: bool = key(False, type=bool)
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)
    jobs: int = key(1, type=int, low=1, expected=">= 1 (subprocesses at a time; this study runs in one: 1)",
                    help="1: the study runs in one process (its costs are timed batch-1 in it).")
    systems: list[str] | None = key(None, optional=True, check=name_list("systems", list(SYSTEMS)), metavar="LIST")
    sizes: list[int] | None = key(None, optional=True, metavar="LIST",
                                  check=number_list(int, "sizes", 3, "lattice sizes N >= 3"))
    floor_dims: list[int] | None = key(None, optional=True, metavar="LIST",
                                       check=number_list(int, "floor_dims", 2, "even reduced dimensions >= 2"))
    reduced_dims: list[int] | None = key(None, optional=True, metavar="LIST",
                                         check=number_list(int, "reduced_dims", 2, "even reduced dimensions >= 2"))
    train_seconds: float | None = key(None, optional=True, type=float, low=0.5)
    ladder: str | None = key(None, optional=True, choices=tuple(LADDERS))
    data_dt: float = key(0.1, type=float, low=1e-6)
    stride: float = key(2.0, type=float, low=1e-6)
    output_every: float | None = key(None, optional=True, type=float, low=1e-6)
    repeats: int | None = key(None, optional=True, type=int, low=1)
    autoencoder_sizes: list[int] | None = key(None, optional=True, metavar="LIST",
                                              check=number_list(int, "autoencoder_sizes", 3, "lattice sizes N >= 3"))
    autoencoder_steps: int = key(3000, type=int, low=1)


#: a row of reduction.json (``vpintegrator.studies.schema``): what the tables and figures read
ROW = Obj(required={"system": "str", "N": "int", "row": "str", "label": "str", "seed": "int?",
                    **{f"err_t{t:g}": Obj(required={"median": "number?"}, optional=INTERVAL.optional) for t in HORIZONS}},
          optional={"cost": "number?", "offline_cpu": "number?", "method": "str?", "h": "number?", "reduced_dim": "int?",
                    "bonds": "int?", "train_cpu": "number?", "stopped": "str?", "epochs": "int?", "n_params": "int?",
                    "best_val": "number?", "library": "str?", "n_terms": "int?"})
#: what reduction.json holds
SCHEMA = ResultsSchema("reduction", {"rows": Each(ROW)})


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a reduction.json at ``path``, checked against ``SCHEMA`` before any table is drawn; a missing
    file, another study's JSON, a row without a key or with a string for a number is one line naming the file,
    row and key."""
    data = read_json(path)
    if data is None:
        raise StudyError(f"--table-only: {path} not found; give the --out of an earlier reduction study or "
                         "--results FILE (a reduction.json)")
    return unplain(check_results(data, path, SCHEMA)["rows"])


def _run(plan: ReductionPlan) -> int:
    out = plan.out
    check_out_dir(out)
    path = out / "reduction.json"
    if plan.table_only and plan.results is not None:  # a results file's tables (a shipped one by name), no run
        _, rows, text = redraw_from(out, str(plan.results), read_rows, lambda r: tables(summarize_rows(r)),
                                    figures="reduction_")
        figures(summarize_rows(rows), out)
        print(text)
        return 0
    if plan.table_only:
        rows = read_rows(path)
    else:
        from ..clock import process_cpu

        out.mkdir(parents=True, exist_ok=True)
        earlier = read_json(path)  # merged with the new rows: checked first (a foreign file is never written over)
        previous = {} if earlier is None else unplain(check_results(earlier, path, SCHEMA))
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
                    write_json(path, {"commands": commands, "rows": rows})  # nothing finished is lost
                    print(f"reduction: {system} N = {n}: {family} done ({process_cpu() - tic:.0f} CPU s)", flush=True)
    summary = summarize_rows(rows)
    text = tables(summary)
    write_text(out / "reduction.md", text)
    figures(summary, out)
    print(text)
    return 0


def run(plan: ReductionPlan) -> int:
    """The study from its plan (``STUDY``); bad input is a one-line ``StudyError``."""
    try:
        return _run(plan)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


#: the study as the runner runs it (``vp-study reduction``, ``python -m vpintegrator.studies.reduction``)
STUDY = Study(ReductionOptions, run, build_plan, doc=__doc__, required=("out",), prog="vp-study reduction",
              error_prefix="reduction study: error: ",
              interrupted="reduction study: interrupted; the row families finished are in OUT/reduction.json (rerun "
                          "with --skip-existing to continue)")


if __name__ == "__main__":
    from .driver import main as _main

    raise SystemExit(_main(STUDY))
