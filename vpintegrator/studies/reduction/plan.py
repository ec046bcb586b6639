"""The reduction study's options and plan: what it runs (systems, ladders, the flow map's recipe, the sizes) and
the options resolved once (``build_plan``) into the frozen ``ReductionPlan`` every other module reads."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...config import key
from ..options import BUDGETS, PLATEAU_HELP, StudyOptions, name_list, number_list
from ..runner import StudyError
from ..step_budget import nearest_cost, step_budget, stop_keys

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
        The Adam steps of an autoencoder fit (default 3000; ``fit``'s ``max_steps``), besides its plateau rule.
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
