"""``vp-study compare``: one comparison engine for anyone's problem, and its verdict.

A problem is a registered system (``rigid_body``), a user's ``package.module:Class``, a ``dysts:NAME`` flow (the
optional extra) or a data-only HDF5 file made by ``vp-gen`` (``*.h5``). The rows are chosen from what is known
about it (``rows_for``):

- with the equations: ``rk4`` always; ``implicit_midpoint`` and ``gauss_legendre4`` where the system has a
  Jacobian (their Newton solves need it); ``stormer_verlet`` where it is separable; and the work–precision ladder
  of these (``vpintegrator.rollout.precision.run_work_precision``), each at the learned rows' cost;
- learned maps of the problem's structure class, trained by Levenberg–Marquardt in float64 from 0.1× the initial
  weights on a step budget (``--max-steps``, LM iterations) over ``--seeds``:
  the seeds' VPT always (its row is in every verdict), ``g_sympnet`` where the field is canonical Hamiltonian in
  (q, p) halves (measured: ``JᵀΩ + ΩJ = 0`` on samples), the plain transformer ``st`` always; a user's network by
  import path (``--model package.module:Class``, trained alike) or a saved model (a run directory or ``.pt``,
  rolled out as it is);
- the identity (do-nothing) map, which holds the last given state (``IdentityMap``), rolled out and priced as a
  row like the others (its ``vs_identity`` is 1: ``vpintegrator.rollout.report``'s baseline).

Held-out conditions: for a problem with equations, ``--n-test`` new conditions drawn by the training file's own
sampler with a fresh seed (``vp-rollout``'s ``heldout``: the rows labelled ``new``), scored against the exact flow,
and the work–precision ladder on the trained models' test split; for a data-only file, the trained models' own test
split (``vp-rollout``'s default), scored against the data. NRMSE is against the spread of the models' training
split, as ``vp-rollout`` has it. Every row is rolled out by ``run_rollouts`` (what ``vp-rollout`` runs) and priced
by the package's one rule (``vpintegrator.rollout.engine.price_seconds``: the engine's CPU seconds of the step map's
start and its steps, over the steps of the whole batch; warm; a short row the least of ``COST_REPEATS`` runs, one
after another; a device-engine row its steps' device time).

Output in ``--out``: the verdict lines on stdout (per problem: the best row with the equations, the best data-only
row, the seeds' VPT, each with its median [min, max] over seeds and its cost; best = least median mean NRMSE), then
``compare.md`` (the verdicts, one table per problem, the rollout's notes, the equal-cost section), per problem a
folder (``train.h5``, the runs, ``rollout.h5`` and its table, the work–precision table, ``error`` and
``work_precision`` figures) and ``compare.json``: ``{"schema": SCHEMA, "seeds", "max_steps", "n_train", "n_test",
"n_steps", "problems": [{"problem", "label", "dim", "dt", "equations", "structure", "verdict", "held_out", "rows":
[{"method", "kind" (classical, learned, user, baseline), "n_seeds", "split", "n_traj", "train_cpu_s", "failed", and
per metric (final_rel_error, mean_nrmse, vpt, valid_time, vs_identity, seconds_per_step) the median and
"<metric>_range" [min, max] over seeds; the invariants' ``max_rel_drift_<name>`` where measured}], "notes", "figures",
"equal_cost", "evaluations" (a preset's named conditions: their rows), ...}]}``, its paths relative to ``--out``.
``--dry-run`` prints the plan and its estimated CPU cost and runs nothing; ``--quick`` runs the same path at small
sizes; ``--table-only --results FILE`` draws a compare.json's tables again (``results.md``).

Presets: a study as data (``presets/NAME.toml``, ``PRESET_KEYS``), run by ``--preset NAME`` or by the study's own
name (``vp-study coupled_oscillator``; ``vpintegrator.studies.options.STUDIES``): its problems, rows, each trained
row's vp-train config and step budget, sizes, ``--quick`` sizes and named evaluations, the flags given on top.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..config import Config, key
from ..errors import VPIntegratorError
from .errors import StudyError, one_line
from .options import Study, comma_list, seed_list
from .schema import Each, Obj, ResultsSchema, Values, check_results, numbers
from .stats import fmt_num, md_table, median_interval, write_json, write_text

__all__ = ["CompareOptions", "ComparePlan", "IdentityMap", "Problem", "RESULTS", "build_plan", "load_preset", "presets",
           "rows_for", "run", "STUDY"]

SCHEMA = "vpintegrator.compare/1"
#: a table row of compare.json (a method over seeds: each metric's median, its [min, max] as "<metric>_range")
_ROW = numbers("final_rel_error", "mean_nrmse", "vpt", "valid_time", "vs_identity", "seconds_per_step",
               method="str", kind="str", n_seeds="int", failed="int")
#: what compare.json holds, checked before its tables are drawn (``--table-only``)
RESULTS = ResultsSchema("compare", {"schema": "str", "problems": Each(Obj(
    required={"label": "str", "verdict": "str", "held_out": "str", "rows": Each(_ROW), "notes": "list",
              "equal_cost": "list"}, optional={"evaluations": Values(Each(_ROW))}))},
    fix="give the compare.json of a vp-study compare run")
CLASSICAL = ("rk4", "implicit_midpoint", "gauss_legendre4", "stormer_verlet")
LEARNED = ("vpt", "g_sympnet", "st")
IDENTITY = "identity"
ROWS = (*CLASSICAL, *LEARNED, IDENTITY)
#: sizes by --quick (False, True): training and test conditions, seeds, optimiser steps, horizon in steps
SIZES = {False: {"n_train": 200, "n_test": 32, "seeds": [0, 1, 2], "max_steps": 300, "n_steps": 100},
         True: {"n_train": 24, "n_test": 8, "seeds": [0, 1], "max_steps": 40, "n_steps": 30}}
#: windows per Levenberg-Marquardt subsample (the learned rows' optimiser, ``_train``)
LM_WINDOWS = 512
#: the learned rows' hyper-parameters (small: a step budget, not a paper's run)
HPARAMS = {"vpt": {"seq_len": 2, "n_blocks": 1, "L": 2}, "st": {"seq_len": 2, "n_blocks": 1, "L": 2},
           "g_sympnet": {"n_layers": 2}}
#: the dry run's estimate: CPU seconds per LM iteration (LM_WINDOWS windows, these sizes), per training's set-up, per
#: problem's generation and ladder, per step of one row on one condition (measured on one core of the machine that
#: wrote this module)
CPU_BASIS = {"step": 0.04, "training": 1.0, "problem": 10.0, "rollout": 1e-4}
#: the tolerance of the structure measured on samples (relative to the Jacobian's size)
STRUCTURE_RTOL = 1e-8
#: the presets: a study as data, ``presets/NAME.toml`` (``--preset NAME``, ``vp-study NAME``)
PRESETS = Path(__file__).with_name("presets")
#: a preset's keys beyond ``CompareOptions``' own sizes and lists: ``train`` (per trained row, a table of vp-train
#: keys: ``config`` a vp-train TOML or shipped config name, ``max_steps`` its step budget, ``step_cpu_s`` the dry run's
#: CPU s per step, any other key of the config; a row named there that is no engine row is trained from it),
#: ``evaluations`` (vp-gen spec names: each one's conditions rolled out by every row to the horizon, a table each),
#: ``train_steps`` (the training trajectories' length in steps; default n_steps), ``wp_steps`` (the work-precision
#: ladder's horizon; default n_steps), ``quick`` (the sizes --quick uses), ``legacy`` (the module that reads and
#: draws the results file of the study the preset replaced: ``read_results``, ``format_results``), ``description``
PRESET_KEYS = ("problems", "rows", "model", "seeds", "max_steps", "n_train", "n_test", "n_steps", "train",
               "evaluations", "train_steps", "wp_steps", "quick", "legacy", "description")
SIZE_KEYS = ("seeds", "max_steps", "n_train", "n_test", "n_steps")


@dataclass
class CompareOptions(Config):
    """``vp-study compare``'s keys.

    Parameters
    ----------
    preset : str
        A study as data: a preset's name (``vpintegrator/studies/presets/NAME.toml``: coupled_oscillator, ...) or
        a TOML file of the same keys; the flags given go on top.
    problems : str
        Comma list of problems: a registered system, a vp-gen spec name (its system, sampler and parameters),
        package.module:Class, dysts:NAME or a vp-gen HDF5 file (data only); default rigid_body.
    out : str
        Run directory (compare.md, compare.json, each problem's files).
    model : str
        Comma list of your own networks: package.module:Class (trained like the shipped ones) or a saved model (a
        run directory or .pt, rolled out as is).
    rows : str
        Comma list restricting the rows to these (of rk4, implicit_midpoint, gauss_legendre4, stormer_verlet, vpt,
        g_sympnet, st, identity, your models).
    seeds : list
        Comma list of training seeds (default 0,1,2; 0,1 with --quick).
    max_steps : int
        Levenberg–Marquardt iterations of each training (the step budget; default 300, 40 with --quick), in float64
        from 0.1× the initial weights.
    n_train : int
        Trajectories of the training file (default 200; 24 with --quick), of which vp-train keeps a tenth for
        validation and a tenth as the test split.
    n_test : int
        Held-out initial conditions, never trained on (default 32; 8 with --quick).
    n_steps : int
        Horizon in steps of the problem's dt (default 100; 30 with --quick).
    quick : bool
        Small sizes (the preset's [quick] table where it has one): the same path in a couple of minutes.
    dry_run : bool
        Print the plan and its estimated CPU cost, run nothing.
    overwrite : bool
        Replace an earlier compare run's files in --out.
    table_only : bool
        Draw the tables of a results file (--results) into --out, run nothing.
    results : str
        With --table-only: a compare.json, a shipped results name or the file of a study this preset replaced.
    """

    _source_in_messages = False

    preset: str | None = key(None, optional=True, type=str, metavar="NAME")
    problems: str | None = key(None, optional=True, check=lambda v: comma_list(v, "problems"), metavar="LIST")
    out: str | None = key(None, optional=True, type=str, metavar="RUN")
    model: str | None = key(None, optional=True, check=lambda v: comma_list(v, "model"), metavar="LIST")
    rows: str | None = key(None, optional=True, check=lambda v: comma_list(v, "rows"), metavar="LIST")
    seeds: list[int] | None = key(None, optional=True, check=seed_list, metavar="LIST")
    max_steps: int | None = key(None, optional=True, type=int, low=1, expected="an integer >= 1")
    n_train: int | None = key(None, optional=True, type=int, low=5, expected="an integer >= 5")
    n_test: int | None = key(None, optional=True, type=int, low=1, expected="an integer >= 1")
    n_steps: int | None = key(None, optional=True, type=int, low=4, expected="an integer >= 4")
    quick: bool = key(False, type=bool)
    dry_run: bool = key(False, type=bool)
    overwrite: bool = key(False, type=bool)
    table_only: bool = key(False, type=bool)
    results: str | None = key(None, optional=True, type=str, metavar="FILE")


@dataclass(frozen=True)
class Problem:
    """One problem, resolved: ``system`` None for a data-only ``data`` file; ``spec`` the keys of its training
    data's ``GenerationSpec`` (None for a data file); ``structure`` what was measured (``volume``, ``canonical``,
    ``jacobian``, ``separable``)."""

    label: str
    source: str
    dim: int
    dt: float
    system: Any = None
    spec: dict[str, Any] | None = None
    data: str | None = None
    structure: tuple[str, ...] = ()

    @property
    def has_equations(self) -> bool:
        return self.system is not None


@dataclass(frozen=True)
class ComparePlan:
    """What runs: the problems and each one's rows, the user's models, seeds, budgets and sizes."""

    out: str
    problems: tuple[Problem, ...]
    rows: dict[str, tuple[str, ...]]  # problem label -> its rows (CLASSICAL, LEARNED, model labels, IDENTITY)
    models: dict[str, str]  # label -> package.module:Class or a saved model's path
    seeds: tuple[int, ...]
    max_steps: int
    n_train: int
    n_test: int
    n_steps: int
    dry_run: bool = False
    overwrite: bool = False
    train: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # row -> its vp-train keys (preset)
    evaluations: tuple[str, ...] = ()
    train_steps: int | None = None
    wp_steps: int | None = None
    preset: str | None = None
    results: str | None = None  # --table-only: the results file drawn, run nothing
    legacy: str | None = None  # the preset's reader of the replaced study's file

    def trainings(self, p: Problem) -> list[str]:
        """The rows of ``p`` that are trained (each once per seed)."""
        return [r for r in self.rows[p.label] if r in LEARNED or r in self.train
                or (r in self.models and ":" in self.models[r] and not Path(self.models[r]).exists())]

    def steps(self, row: str) -> int:
        """``row``'s step budget: its preset's ``max_steps``, else the plan's."""
        return int(self.train.get(row, {}).get("max_steps", self.max_steps))

    def estimate(self) -> float:
        """Estimated CPU seconds of the whole run (``CPU_BASIS``, a preset row's measured ``step_cpu_s``)."""
        trainings = sum(CPU_BASIS["training"] + self.steps(r) * self.train.get(r, {}).get("step_cpu_s",
                                                                                         CPU_BASIS["step"])
                        for p in self.problems for r in self.trainings(p)) * len(self.seeds)
        rollouts = sum(len(self.rows[p.label]) * self.n_steps * (self.n_test + 10 * len(self.evaluations))
                       for p in self.problems) * CPU_BASIS["rollout"]
        return trainings + rollouts + len(self.problems) * CPU_BASIS["problem"]

    def lines(self) -> list[str]:
        """The plan in words, one line per problem, then the estimate."""
        budgets = {self.steps(r) for p in self.problems for r in self.trainings(p)} or {self.max_steps}
        out = [f"compare{f' (preset {self.preset})' if self.preset else ''}: {len(self.problems)} problem(s), seeds "
               f"{','.join(map(str, self.seeds))}, {'/'.join(map(str, sorted(budgets)))} optimiser steps per training, "
               f"{self.n_train} training / {self.n_test} held-out conditions, {self.n_steps} steps"
               + (f"; also at {', '.join(self.evaluations)}" if self.evaluations else "")]
        for p in self.problems:
            trained = self.trainings(p)
            out.append(f"  {p.label} (dim {p.dim}, dt {p.dt:g}, {'equations' if p.has_equations else 'data only'}; "
                       f"structure: {', '.join(p.structure) or 'none found'}): rows {', '.join(self.rows[p.label])}"
                       f" ({len(trained) * len(self.seeds)} trainings)")
        out.append(f"estimated cost: {self.estimate():.0f} CPU s (coarse: CPU_BASIS of vpintegrator.studies.compare)")
        return out


class IdentityMap(torch.nn.Module):
    """The do-nothing map as a model: the next state is the last given one, (batch, seq_len, dim) -> (batch, 1, dim)
    (one window (seq_len, dim) -> (1, dim)); the identity baseline's row, rolled out by the engine of every row."""

    #: the rollout's notes do not hold it to itself ("worse than the identity map ... 1x")
    identity_baseline = True

    def __init__(self, dim: int, seq_len: int = 1) -> None:
        super().__init__()
        self.dim, self.seq_len, self.pred_window = int(dim), int(seq_len), 1
        # no weights; one frozen number gives the module a dtype and a device
        self.zero = torch.nn.Parameter(torch.zeros(()), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., -1:, :] + self.zero


# --------------------------------------------------------------------------- planning


def _measured_structure(system: Any, y: np.ndarray) -> tuple[str, ...]:
    """``volume`` (divergence 0), ``canonical`` (JᵀΩ + ΩJ = 0 with the state in (q, p) halves), ``jacobian``
    (the system has one), ``separable`` (its flag): measured on the states ``y`` (n, dim)."""
    try:
        jac = np.asarray(system.jacobian(y), dtype=np.float64)
    except (NotImplementedError, TypeError, AttributeError):
        from ..systems.dysts import dysts_structure, is_dysts_name

        found: list[str] = []
        if is_dysts_name(system.name):  # no Jacobian: the adapter's measurement by differences of its field
            flow = dysts_structure([system.name])[0]
            found = [*(["volume"] if flow.volume_preserving else []),
                     *(["canonical"] if flow.hamiltonian == "(q, p)" else [])]
        return (*found, *(("separable",) if system.separable else ()))
    found = ["jacobian"]
    scale = max(float(np.max(np.abs(jac))), 1e-300)
    if float(np.max(np.abs(np.trace(jac, axis1=-2, axis2=-1)))) / scale < STRUCTURE_RTOL:
        found.append("volume")
    dim = y.shape[-1]
    if dim % 2 == 0:
        m = dim // 2
        omega = np.block([[np.zeros((m, m)), np.eye(m)], [-np.eye(m), np.zeros((m, m))]])
        if float(np.max(np.abs(np.swapaxes(jac, -1, -2) @ omega + omega @ jac))) / scale < STRUCTURE_RTOL:
            found.append("canonical")
    return (*found, *(("separable",) if system.separable else ()))


def _named_spec(source: str) -> Any:
    """The vp-gen spec ``source`` names where it names no system (``coupled_oscillator_box``; dysts' own spec for
    ``dysts:NAME``), or None."""
    from ..data.spec import list_specs, load_spec
    from ..systems import list_systems
    from ..systems.dysts import is_dysts_name

    named = is_dysts_name(source) or (source in list_specs() and source not in list_systems())
    return load_spec(source) if named else None


def _spec(source: str, system: Any, n_train: int, n_steps: int) -> dict[str, Any]:
    """The keys of the training data's generation spec: a named spec's own (``load_spec``; dysts' for a dysts
    flow), else the system's sampler (a random one: the paper's fixed sphere set becomes ``sphere``, so that the
    held-out seed draws other conditions), around its ``default_y0`` or in [-1, 1]ᵈ where it has none."""
    cls = type(system)
    base = _named_spec(source)
    sampler = cls.default_sampler if base is None else base.sampler
    if base is not None and sampler not in ("list", "bump"):
        return {**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, "n_traj": n_train,
                "t_end": n_steps * base.dt, "seed": 0, "out": ""}
    dt = float(cls.default_dt or 0.1)
    args = dict[str, Any]()
    if sampler == "bump" or (base is not None and sampler == "list"):
        raise StudyError(f"--problems: {source}'s conditions are a fixed list (sampler {sampler!r}), not random "
                         "draws, so none can be held out; give a vp-gen file of it instead (data only)")
    if sampler == "paper_sphere":
        sampler = "sphere"
    elif sampler not in ("sphere", "box", "particle"):
        sampler, args = ("around", {"spread": 0.1}) if cls.default_y0 is not None else ("box", {})
    return {"name": source.replace(":", "_").replace(".", "_"), "system": source, "sampler": sampler,
            "sampler_args": args, "n_traj": n_train, "dt": dt, "t_end": n_steps * dt, "seed": 0}


def _problem(source: str, n_train: int, n_steps: int) -> Problem:
    """``source`` resolved into a ``Problem``; an unknown one is a one-line error naming ``--problems``."""
    from ..systems import get_system, sample_initial_conditions

    if source.endswith((".h5", ".hdf5")):
        from ..data import read_trajectories

        if not Path(source).is_file():
            raise StudyError(f"--problems: data file {source!r} not found; give a vp-gen HDF5 file")
        first = read_trajectories(source, traj=[0], steps=[0, 1])
        return Problem(Path(source).stem, source, int(first.y.shape[-1]), float(first.t[1] - first.t[0]), data=source)
    try:
        base = _named_spec(source)
        system = get_system(source) if base is None else get_system(base.system, **base.params)
    except VPIntegratorError as err:
        raise StudyError(f"--problems: {err} (or a vp-gen spec name)") from None
    spec = _spec(source, system, n_train, n_steps)
    y = sample_initial_conditions(system, spec["sampler"], 16, 0, **spec["sampler_args"])
    return Problem(source.replace(":", "_"), source, int(system.dim), float(spec["dt"]), system, spec,
                   structure=_measured_structure(system, y))


def rows_for(p: Problem, models: Sequence[str] = (), integrators: Sequence[str] = (),
             trained: Sequence[str] = ()) -> tuple[str, ...]:
    """The rows that apply to ``p``: the classical ones its equations allow (and ``integrators`` asked for by
    name, ``stormer_verlet_y6``: any registered method), the learned ones of its structure class (the VPT and ``st``
    always; ``trained``: a preset's own), the user's ``models`` and the identity map."""
    classical: list[str] = []
    if p.has_equations:
        classical = ["rk4", *(["implicit_midpoint", "gauss_legendre4"] if "jacobian" in p.structure else []),
                     *(["stormer_verlet"] if "separable" in p.structure else []),
                     *[m for m in integrators if m not in CLASSICAL]]
    learned = ["vpt", *(["g_sympnet"] if "canonical" in p.structure else []), "st"]
    return (*classical, *learned, *[t for t in trained if t not in learned], *models, IDENTITY)


def _user_model(text: str, dim: int, problem: str) -> None:
    """A user's model checked against the problem's dimension before anything trains: one line if it does not fit."""
    from ..models import build_model, load_model

    try:
        model = load_model(text) if Path(text).exists() else build_model(text, dim=dim)
    except VPIntegratorError as err:
        raise StudyError(f"--model {text}: {err}") from None
    got = getattr(model, "dim", None)
    if got != dim:
        raise StudyError(f"--model {text}: its dim is {got}, problem {problem} has dim {dim}; give a model of dim "
                         f"{dim} (or a class that takes dim)")


def presets() -> list[str]:
    """The shipped presets' names (``PRESETS``)."""
    return sorted(p.stem for p in PRESETS.glob("*.toml"))


def load_preset(name: str) -> dict[str, Any]:
    """The preset ``name`` (a shipped one, ``presets()``, or a TOML file), its keys checked before anything runs:
    an unknown preset, key or value is a one-line ``StudyError`` naming the valid ones."""
    from ..config import did_you_mean, read_toml
    from ..training.config import TrainConfig

    path = Path(name) if name.endswith(".toml") else PRESETS / f"{name}.toml"
    if not path.is_file():
        raise StudyError(f"--preset: unknown preset {name!r}; valid: {', '.join(presets())} (or a TOML file)")
    try:
        doc = read_toml(path, what=f"--preset {name}")
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None
    where = f"--preset {name}"
    for k, table in [("", doc), ("quick.", doc.get("quick", {})),
                     *((f"train.{r}.", t) for r, t in dict(doc.get("train", {})).items())]:
        valid = (PRESET_KEYS if not k else SIZE_KEYS if k == "quick." else
                 ("config", "step_cpu_s", *(f.name for f in dataclasses.fields(TrainConfig))))
        if not isinstance(table, dict):
            raise StudyError(f"{where}: {k.rstrip('.')} must be a table of keys")
        for key_ in table:
            if key_ not in valid:
                raise StudyError(f"{where}: unknown key {k + key_!r}{did_you_mean(key_, valid)}; valid: "
                                 f"{', '.join(valid)}")
    options = {k: v for k, v in doc.items() if k in {f.name for f in dataclasses.fields(CompareOptions)} - {"quick"}}
    try:  # the sizes and lists checked as their flags are
        CompareOptions.from_dict({**options, **doc.get("quick", {})}, source=where)
    except VPIntegratorError as err:
        raise StudyError(f"{where}: {err}") from None
    return doc


def build_plan(options: CompareOptions, argv: Sequence[str] = ()) -> ComparePlan:
    """Every check and default resolved once: the preset under the flags, the problems, their rows, the user's
    models fitted to each problem's dimension, the sizes (``--quick``: the preset's ``quick`` table, else
    ``SIZES``)."""
    preset = load_preset(options.preset) if options.preset else {}
    quick = bool(options.quick)

    def given(k: str, default: Any = None) -> Any:  # the flag, the preset (its quick table first), the default
        for layer in (vars(options), preset.get("quick", {}) if quick else {}, preset):
            if layer.get(k) is not None:
                return layer[k]
        return default

    if options.out is None and not options.dry_run:
        raise StudyError("--out is required (the run directory)")
    if options.table_only:
        if options.results is None:
            raise StudyError("--table-only draws the tables of --results FILE; give --results")
        return ComparePlan(out=str(options.out), problems=(), rows={}, models={}, seeds=(), max_steps=0, n_train=0,
                           n_test=0, n_steps=0, preset=options.preset, results=options.results,
                           legacy=preset.get("legacy"))
    size = {k: given(k, SIZES[quick][k]) for k in SIZE_KEYS}
    budget = options.max_steps if options.max_steps is not None else (preset.get("quick", {}).get("max_steps")
                                                                      if quick else None)
    train = {r: {**t, **({"max_steps": budget} if budget is not None else {})}
             for r, t in preset.get("train", {}).items()}
    steps = given("train_steps", size["n_steps"])
    sources = [s.strip() for s in given("problems", "rigid_body").split(",") if s.strip()]
    problems = tuple(_problem(s, size["n_train"], steps) for s in sources)
    if len({p.label for p in problems}) < len(problems):
        raise StudyError(f"--problems names a problem twice: {given('problems')}")
    given_models = [m.strip() for m in (given("model") or "").split(",") if m.strip()]
    labels = [Path(m).stem if Path(m).exists() else m.rsplit(":", 1)[-1] for m in given_models]
    models = {(f"user_{label}" if label in ROWS else label): m for label, m in zip(labels, given_models)}
    wanted = None if given("rows") is None else [r.strip() for r in given("rows").split(",") if r.strip()]
    integrators = [r for r in wanted or () if _is_integrator(r)]
    for r in wanted or ():
        if r not in ROWS and r not in models and r not in train and r not in integrators:
            raise StudyError(f"--rows: unknown row {r!r}; valid: {', '.join((*ROWS, *train, *models))} or a "
                             "registered integrator")
    rows = {}
    for p in problems:
        for m in models.values():
            _user_model(m, p.dim, p.label)
        applicable = rows_for(p, list(models), integrators, list(train))
        chosen = tuple(r for r in applicable if wanted is None or r in wanted)
        if not [r for r in chosen if r != IDENTITY]:
            raise StudyError(f"problem {p.label}: no applicable row among --rows {given('rows')}; applicable: "
                             f"{', '.join(applicable)}")
        rows[p.label] = chosen
    return ComparePlan(out=str(options.out), problems=problems, rows=rows, models=models,
                       seeds=tuple(size["seeds"]), max_steps=int(size["max_steps"]), n_train=int(size["n_train"]),
                       n_test=int(size["n_test"]), n_steps=int(size["n_steps"]), dry_run=bool(options.dry_run),
                       overwrite=bool(options.overwrite), train=train, evaluations=tuple(given("evaluations", ())),
                       train_steps=steps, wp_steps=given("wp_steps"), preset=options.preset)


def _is_integrator(name: str) -> bool:
    from ..integrators import list_integrators

    return name in CLASSICAL or name in list_integrators()


# --------------------------------------------------------------------------- running


def _data(plan: ComparePlan, p: Problem, folder: Path) -> str:
    """The training file: generated for a problem with equations (``generate``), the given one for a data-only
    problem."""
    from ..data.generation import generate
    from ..data.spec import GenerationSpec

    if p.data is not None or p.spec is None:
        return str(p.data)
    return str(generate(GenerationSpec(**p.spec), out=folder / "train.h5", overwrite=plan.overwrite, workers=1))


def _test_split(run_dir: str) -> list[int]:
    """The test split of a trained model's data file (``summary.json``: the same for every seed, ``split_seed``)."""
    import json

    return list(json.loads((Path(run_dir) / "summary.json").read_text())["split"]["test"])


def _train(plan: ComparePlan, row: str, seed: int, train: str, folder: Path) -> tuple[str, float]:
    """One training of ``row`` at ``seed`` on ``train``, stopped by the step budget: (run directory, CPU s)."""
    from ..training.run import fit

    out = folder / f"{row}@s{seed}"
    tic = time.process_time()
    keys = {k: v for k, v in plan.train.get(row, {}).items() if k not in ("config", "step_cpu_s", "max_steps")}
    if "config" in plan.train.get(row, {}):  # a preset's row: its vp-train config, the preset's keys on top
        fit(plan.train[row]["config"], data=[train], out=str(out), max_steps=plan.steps(row), seed=seed,
            overwrite=True, **keys)
        return str(out), time.process_time() - tic
    model = {"name": plan.models.get(row, row), **HPARAMS.get(row, {})}
    # Levenberg-Marquardt in float64 from 0.1x the initial weights: the package's trainer for these small models
    # (configs/rigid_body_vpt_lm.toml; Adam needs hours, and LM stalls from the default initial scale)
    fit({"data": [train], "model": model}, out=str(out), max_steps=plan.steps(row), seed=seed, overwrite=True,
        **{"epochs": 10**6, "optimizer": "lm", "dtype": "float64", "init_scale": 0.1, "lm_windows": LM_WINDOWS,
           "lm_iters_per_epoch": 10, **keys})
    return str(out), time.process_time() - tic


def _aggregate(method: str, kind: str, rows: list[dict], cpu: list[float]) -> dict[str, Any]:
    """One table row of a method's rows (one per seed): each metric's median and [min, max] over the seeds."""
    first = rows[0] if rows else {}
    out: dict[str, Any] = {"method": method, "kind": kind, "n_seeds": len(rows), "train_cpu_s": sum(cpu) or None,
                           "split": first.get("split"), "n_traj": first.get("n_traj", 0)}
    drifts = [k for k in first if k.startswith(("max_rel_drift_", "drift_slope_"))]  # per invariant (energy)
    for k in ("final_rel_error", "mean_nrmse", "vpt", "valid_time", "vs_identity", "seconds_per_step", *drifts):
        q = median_interval([r.get(k) for r in rows], 0.0, 100.0)
        out[k], out[f"{k}_range"] = q["median"], (None if len(rows) < 2 else [q["lo"], q["hi"]])
    out["failed"] = sum(int(r.get("failed") or 0) for r in rows)
    return out


def _compare_one(plan: ComparePlan, p: Problem, log: Any) -> dict[str, Any]:
    """Generate, train, roll out and score one problem: its record for ``compare.json``."""
    from ..rollout.config import RolloutConfig
    from ..rollout.run import run_rollouts

    folder = Path(plan.out) / p.label
    folder.mkdir(parents=True, exist_ok=True)
    train = _data(plan, p, folder)
    rows = plan.rows[p.label]
    runs: dict[str, list[tuple[str, str]]] = {}
    cpu: dict[str, list[float]] = {}
    for row in plan.trainings(p):
        for seed in plan.seeds:
            log(f"{p.label}: training {row} seed {seed} ({plan.max_steps} steps)")
            run_dir, seconds = _train(plan, row, seed, train, folder)
            runs.setdefault(row, []).append((f"{row}@s{seed}", run_dir))
            cpu.setdefault(row, []).append(seconds)
    for row in rows:  # a saved model of the user's: rolled out as it is
        if row in plan.models and row not in runs:
            runs[row] = [(row, plan.models[row])]
    if IDENTITY in rows:  # the do-nothing map, in float64 like the classical rows
        from ..models import build_model, save_model

        identity = folder / "identity.pt"
        save_model(build_model(f"{__name__}:IdentityMap", dim=p.dim).double(), identity, overwrite=True)
        runs[IDENTITY] = [(IDENTITY, str(identity))]
    classical = [r for r in rows if _is_integrator(r)]
    config = RolloutConfig(data=train, out=str(folder / "rollout.h5"), integrators=classical,
                           models=[[label, path] for pairs in runs.values() for label, path in pairs],
                           reference="exact" if p.has_equations else "data", t_end=plan.n_steps * p.dt,
                           heldout=plan.n_test if p.has_equations else None)
    log(f"{p.label}: rolling out {len(config.models) + len(classical)} rows")
    report = run_rollouts(config, overwrite=True)
    held_out = "new" if p.has_equations else "test"

    def table_of(report_rows: list[dict], splits: tuple[str, ...] | None) -> list[dict]:
        by_label: dict[str, dict] = {}
        for r in report_rows:  # the held-out conditions' rows ('unknown': a model trained elsewhere, the identity)
            if splits is None or r.get("split") in splits:
                by_label.setdefault(r["method"], r)
        rows_ = [_aggregate(c, "classical", [by_label[c]], []) for c in classical if c in by_label]
        for row, pairs in runs.items():
            kind = "baseline" if row == IDENTITY else "user" if row in plan.models else "learned"
            seeds = [by_label[label] for label, _ in pairs if label in by_label]
            rows_.append(_aggregate(row, kind, seeds, cpu.get(row, [])))
        return rows_

    table = table_of(report.rows, (held_out, "unknown"))
    evaluations = {}
    for name in plan.evaluations:  # a preset's named conditions (the study's default initial condition), every row
        from ..data.generation import generate
        from ..data.spec import load_spec

        log(f"{p.label}: rolling out every row from {name}'s conditions")
        data = generate(load_spec(name, t_end=plan.n_steps * p.dt), out=folder / f"{name}.h5",
                        overwrite=plan.overwrite, workers=1)
        evaluations[name] = table_of(run_rollouts(dataclasses.replace(
            config, data=str(data), out=str(folder / f"{name}_rollout.h5"), heldout=None), overwrite=True).rows, None)
    import matplotlib.pyplot as plt

    from ..plotting import plot_error, plot_work_precision, save_figure

    fig = plot_error(report.out)  # error against time, every row, the held-out conditions' band
    figures = [str(f) for f in save_figure(fig, folder / "error", overwrite=True)]
    plt.close(fig)
    equal_cost: list[str] = []
    trained = [path for row in plan.trainings(p) for _, path in runs.get(row, [])]
    if classical and trained:  # the ladder on the test split, each classical method at the learned rows' cost
        from ..rollout.precision import run_work_precision
        from .work_precision import equal_cost_section

        learned = [m for m in config.models if m[0] != IDENTITY]  # (the identity: no ladder, no training)
        csv, _, _ = run_work_precision(dataclasses.replace(config, models=learned, heldout=None,
                                                           traj=_test_split(trained[0])[:4],
                                                           t_end=min(plan.wp_steps or plan.n_steps, plan.n_steps) * p.dt),
                                       overwrite=True)
        equal_cost = equal_cost_section(csv)
        fig = plot_work_precision(csv)
        figures += [str(f) for f in save_figure(fig, folder / "work_precision", overwrite=True)]
        plt.close(fig)
    record = {"problem": p.source, "label": p.label, "dim": p.dim, "dt": p.dt, "equations": p.has_equations,
              "structure": list(p.structure), "rows": table, "rollout": _in_run(report.out, plan.out),
              "notes": [n for n in report.notes if not n.startswith(f"{IDENTITY} (")],  # (the baseline against itself)
              "train_file": _in_run(train, plan.out), "held_out": held_out,
              "figures": [_in_run(f, plan.out) for f in figures],
              **({"evaluations": evaluations} if evaluations else {})}
    record["verdict"] = verdict(p.label, table)
    return record | {"equal_cost": equal_cost}


def _in_run(path: str | Path, out: str) -> str:
    """A path inside the run directory relative to it (compare.json moves with its run), any other as given."""
    inside, root = Path(path).resolve(), Path(out).resolve()
    return str(inside.relative_to(root)) if inside.is_relative_to(root) else str(path)


def _best(table: list[dict], kinds: Sequence[str], method: str | None = None) -> dict | None:
    """The row of ``kinds`` (or ``method``) with the least median mean NRMSE (failed: inf), cheaper first at a tie."""
    pick = [r for r in table if (r["method"] == method if method else r["kind"] in kinds)]
    def score(r: dict) -> tuple[float, float]:
        return (math.inf if r["mean_nrmse"] is None else float(r["mean_nrmse"]), r["seconds_per_step"] or 0.0)

    return min(pick, key=score) if pick else None


def _said(r: dict | None, none: str = "none") -> str:
    if r is None:
        return none
    span = r.get("mean_nrmse_range")
    interval = f" [{fmt_num(span[0])}, {fmt_num(span[1])}] over {r['n_seeds']} seeds" if span else ""
    return (f"{r['method']} NRMSE {fmt_num(r['mean_nrmse'])}{interval} at {fmt_num(r['seconds_per_step'])} "
            "CPU s/step")


def verdict(label: str, table: list[dict]) -> str:
    """The problem's one line: the best row with the equations, the best data-only row, the seeds' VPT."""
    return (f"{label}: with the equations {_said(_best(table, ('classical',)), 'none (data only)')}; data only "
            f"{_said(_best(table, ('learned', 'user', 'baseline')))}; the seeds' VPT {_said(_best(table, (), 'vpt'))}")


def _table(rows: list[dict]) -> list[str]:
    """One problem's table (or one named evaluation's): a row per method, the invariants' worst drift where
    measured."""
    f = fmt_num
    span = lambda r: f" [{f(r['mean_nrmse_range'][0])}, {f(r['mean_nrmse_range'][1])}]"  # noqa: E731
    drifts = [k for k in (rows[0] if rows else {}) if k.startswith("max_rel_drift_") and not k.endswith("_range")]
    body = [[r["method"], r["kind"], f(r["final_rel_error"]),
             f(r["mean_nrmse"]) + (span(r) if r.get("mean_nrmse_range") else ""), f(r["vpt"]),
             *[f(r.get(k)) for k in drifts], f(r["vs_identity"]), f(r["seconds_per_step"]), f(r.get("train_cpu_s")),
             r["failed"]] for r in rows]
    return md_table(["method", "kind", "final rel. error", "mean NRMSE", "VPT horizon",
                     *[f"max rel. {k[len('max_rel_drift_'):]} drift" for k in drifts], "vs identity", "CPU s/step",
                     "training CPU s", "failed"], body)


def _markdown(records: list[dict]) -> str:
    lines = ["# Comparison", "", *[r["verdict"] for r in records], ""]
    for rec in records:
        lines += [f"## {rec['label']}", "", f"Held-out conditions (split '{rec['held_out']}' of "
                  f"{Path(rec['train_file']).name}, never trained on); reference: "
                  f"{'the exact flow' if rec['equations'] else 'the data'}; structure measured: "
                  f"{', '.join(rec['structure']) or 'none'}. Learned rows: median [min, max] over seeds. NRMSE: "
                  "mean over the horizon against each component's spread (vp-rollout's rule); VPT: "
                  "valid-prediction horizon (time units); CPU s/step: one step of the whole batch, warm; training: "
                  "CPU s of all its seeds; drift: max over the horizon of |I(t) − I(0)| / |I(0)|, worst condition.",
                  "", *_table(rec["rows"]), "", *rec["notes"], "", *rec["equal_cost"]]
        for name, rows in rec.get("evaluations", {}).items():
            lines += [f"### From {name}'s conditions", "", *_table(rows), ""]
    return "\n".join(lines) + "\n"


@one_line
def run(plan: ComparePlan) -> int:
    """Run the comparison (or, with ``dry_run``, print its plan): the verdict lines on stdout, the files in
    ``plan.out``."""
    import click

    if plan.results is not None:  # --table-only: the tables of a results file
        return _redraw(plan)
    for line in plan.lines():
        click.echo(line, err=not plan.dry_run)
    if plan.dry_run:
        return 0
    out = Path(plan.out)
    if (out / "compare.json").exists() and not plan.overwrite:
        raise StudyError(f"--out {out} holds a compare run; give --overwrite or another --out")
    log = lambda text: click.echo(text, err=True)  # noqa: E731
    records = [_compare_one(plan, p, log) for p in plan.problems]
    write_text(out / "compare.md", _markdown(records))
    write_json(out / "compare.json", {"schema": SCHEMA, "seeds": list(plan.seeds), "max_steps": plan.max_steps,
                                      "n_train": plan.n_train, "n_test": plan.n_test, "n_steps": plan.n_steps,
                                      "problems": records})
    for rec in records:
        click.echo(rec["verdict"])
    click.echo(f"tables: {out / 'compare.md'}; results: {out / 'compare.json'}", err=True)
    return 0


def _redraw(plan: ComparePlan) -> int:
    """``--table-only --results FILE``: a compare.json's tables (``_markdown``, what its run wrote), or the file
    of the study a preset replaced drawn by the preset's ``legacy`` module, into ``OUT/results.md``."""
    import importlib

    from .stats import read_json, redraw_from, unplain

    def read(path: Path) -> tuple[Any, Any]:
        doc = read_json(path)
        if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
            return _markdown, unplain(check_results(doc, path, RESULTS)["problems"])
        if plan.legacy is None:
            raise StudyError(f"--results {plan.results}: not a compare.json (schema {SCHEMA}); give one, or the "
                             "--preset whose study wrote it")
        legacy = importlib.import_module(plan.legacy)
        return legacy.format_results, legacy.read_results(path)

    print(redraw_from(Path(plan.out), str(plan.results), read, lambda pair: pair[0](pair[1]))[2])
    return 0


STUDY = Study(CompareOptions, run, build_plan, doc=__doc__, prog="vp-study compare",
              interrupted="Interrupted; run again with --overwrite.")


def preset_study(preset: str, name: str) -> Study:
    """The engine as the study ``name`` (``vp-study NAME``): ``--preset`` defaulting to ``preset``, its
    description first in the help."""
    text = load_preset(preset).get("description", name)
    return dataclasses.replace(STUDY, defaults={"preset": preset}, prog=f"vp-study {name}",
                               doc=f"{text} (vp-study compare --preset {preset}).\n\n{STUDY.doc}")
