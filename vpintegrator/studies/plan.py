"""A study's keys: how a value is checked (``seed_list``, ``comma_list``, ``model_list``, ``name_list``,
``number_list``), the keys every study shares, declared as flags (``StudyOptions``) and resolved once into a plan
(``StudyPlan``).

Every study takes the same twelve flags (``--out``, ``--seeds``, ``--jobs``, ``--budget``,
``--wall-ceiling``, ``--patience``, ``--max-steps``, ``--skip-existing``, ``--overwrite``, ``--table-only``,
``--export-pretrained``, ``--seeds-as-members``; the last taken by the studies of ``members.MEMBER_STUDIES``,
refused in one line by the others): they are the keys of ``StudyOptions``, each declared with
``vpintegrator.config.key`` (type, bounds, help). ``StudyPlan`` holds them resolved (a study's plan is a
frozen subclass of it with its own fields), with the two things every study of trainings does with them: the
check of ``--out`` (``check_out``: ``check_study_out``) and the recorded run of its tasks (``run_recorded``, under
``study_lock``). The command line that fills the keys: ``vpintegrator.studies.options``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from ..config import Config, did_you_mean, distinct, key
from ..device import check_device_name
from ..errors import VPIntegratorError
from .budget import PLATEAU_PATIENCE, WALL_CEILING, Budget
from .errors import StudyError
from .stats import read_json, write_json

#: what ``--budget`` may name (``vpintegrator.studies.budget.budget_flags``)
BUDGETS = ("cpu", "wall", "plateau")
#: the help of ``--budget`` in a study whose default is ``plateau``
PLATEAU_HELP = ("What stops a training: plateau (the default here: its validation plateau, --patience epochs without "
                "a 1 percent fall of the score, or --max-steps optimiser steps, rules no load moves; CPU seconds "
                "recorded beside), cpu (the training process's CPU seconds) or wall seconds.")


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """A study's seed list from a comma list: distinct non-negative integers, else a one-line StudyError."""
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise StudyError(f"{flag} must be a comma list of integers; got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise StudyError(f"{flag} must be distinct non-negative integers; got {text!r}")
    try:
        return distinct(seeds, "seeds", label=flag)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


def seed_list(value: Any) -> list[int] | None:
    """A seeds key's value (a comma list ``"0,1"`` or a TOML array) as distinct non-negative integers; else a
    one-line error naming ``seeds``."""
    if value is None or isinstance(value, list):
        return value if value is None else parse_seeds(",".join(str(v) for v in value))
    try:
        return parse_seeds(str(value))
    except StudyError as err:
        raise VPIntegratorError(str(err), key="seeds") from None


def check_device(value: str | None, flag: str = "--seeds-as-members") -> str | None:
    """A device for ensemble runs (auto, cpu, cuda, cuda:N), else a one-line ``StudyError`` naming ``flag``."""
    if value is None:
        return None
    try:
        return check_device_name(value, flag)
    except VPIntegratorError:
        raise StudyError(f"{flag} must name a device: auto, cpu, cuda or cuda:N; got {value!r}") from None


def comma_list(value: Any, name: str) -> str:
    """A comma-list key's value: a string (``"vpt,st"``) as given, a TOML array of strings joined with
    commas; else a one-line error naming the key."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if not isinstance(value, str):
        raise VPIntegratorError(f"{name} must be a comma list (or an array of strings); got {value!r}", key=name)
    return value


def model_list(text: str, flag: str, valid: Sequence[str], *, in_valid_order: bool = False,
               paths: bool = False) -> list[str]:
    """The model names of a comma-list flag (``"vpt,st"``): at least one, each in ``valid`` (or, with
    ``paths``, a ``module:Class`` import path); in ``valid``'s order with ``in_valid_order`` (a name given
    twice then counts once), else as given and each once. Bad input: a one-line ``StudyError`` naming
    ``flag``, with a did-you-mean for a near miss."""
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if not names:
        raise StudyError(f"{flag} is empty; give a comma list")
    for n in names:
        if n not in valid and not (paths and ":" in n):
            raise StudyError(f"{flag}: unknown model {n!r}{did_you_mean(n, valid)}; valid: {', '.join(valid)}"
                             + (" (or module:Class)" if paths else ""))
    try:
        distinct(names, flag.lstrip("-").replace("-", "_"), label=flag)  # the one rule of every list option
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None
    if in_valid_order:
        return [v for v in valid if v in names]
    return names


def name_list(name: str, valid: Sequence[str]) -> Any:
    """The check of the comma-list key ``name`` whose items are out of ``valid``: ``"a,b"`` or a TOML array in,
    a list of names out, each once (``distinct``: the rule of number lists too); else a one-line error naming
    ``name`` and the valid names."""
    def check(value: Any) -> list[str]:
        names = [n.strip() for n in comma_list(value, name).split(",") if n.strip()]
        if not names or any(n not in valid for n in names):
            raise VPIntegratorError(f"{name} must be a comma list out of {', '.join(valid)}; got {value!r}", key=name)
        return distinct(names, name)

    return check


def number_list(kind: type, name: str, low: float, what: str) -> Any:
    """The check of a key whose value is a comma list of ``kind`` (``int`` or ``float``) values ``>= low``:
    ``"0,0.01"``, a TOML array or one number in, a list of ``kind`` out; else a one-line error naming
    ``name`` that says ``what`` the values are."""

    def check(value: Any) -> list:
        if isinstance(value, str):
            items: list = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            items = [value]
        out: list = []
        for v in items:
            try:
                if isinstance(v, bool) or (kind is int and isinstance(v, float)):
                    raise ValueError
                x = kind(v)
            except (TypeError, ValueError):
                x = None
            if x is None or not math.isfinite(x) or x < low:
                raise VPIntegratorError(f"{name} must be a comma list of {what}; got {value!r}", key=name)
            out.append(x)
        if not out:
            raise VPIntegratorError(f"{name} must be a comma list of {what} (at least one); got {value!r}", key=name)
        return distinct(out, name)

    return check


@dataclass
class StudyOptions(Config):
    """The flags every study takes (see the module docstring); a study's own flags are the keys of its
    subclass."""

    _source_in_messages = False

    out: str | None = key(None, optional=True, type=str, metavar="RUN", help="Run directory.")
    seeds: list[int] | None = key(None, optional=True, check=seed_list, metavar="LIST",
                                  help="Comma list of training seeds.")
    jobs: int = key(2, type=int, low=1, expected=">= 1 (subprocesses at a time)",
                    help="Subprocesses at a time, one thread each (OMP_NUM_THREADS=1).")
    budget: str = key("cpu", choices=BUDGETS,
                      help="What stops a training: the training process's CPU seconds (the same training on a "
                           "loaded machine), wall seconds, or plateau (its validation plateau, --patience, or "
                           "--max-steps optimiser steps: rules no load moves; CPU seconds recorded beside).")
    wall_ceiling: float = key(WALL_CEILING, type=float, low=1.0, expected="a number >= 1 (times the budget)",
                              metavar="FACTOR",
                              help="With --budget cpu: stop a training run after this many times its budget in wall "
                                   "seconds all the same.")
    patience: int = key(PLATEAU_PATIENCE, type=int, low=1, expected="an integer >= 1 (epochs)",
                        help="With --budget plateau: epochs without a 1 percent fall of the validation score before a "
                             "training stops.")
    max_steps: int | None = key(None, optional=True, type=int, low=1, expected="an integer >= 1",
                                help="With --budget plateau: stop a training after this many optimiser steps all the "
                                     "same (default: the study's).")
    skip_existing: bool = key(False, type=bool, help="Resume: keep the steps already finished in RUN (unfinished "
                                                     "trainings are resumed).")
    overwrite: bool = key(False, type=bool, help="Run every step again over an earlier study in RUN (its own outputs "
                                                 "only).")
    table_only: bool = key(False, type=bool, help="Only rebuild results.md/json from an existing RUN (or, with "
                                                   "--results, from a results file).")
    results: str | None = key(None, optional=True, type=str, metavar="NAME|JSON",
                              help="With --table-only: draw the tables into RUN from this results file instead of "
                                   "RUN's runs: the name of one shipped with the package (vp-study --list names "
                                   "them) or a path.")
    export_pretrained: str | None = key(None, optional=True, type=str, metavar="DIR",
                                        help="After the study (or with --table-only), copy the best seed's best.pt "
                                             "(lowest validation score) to DIR, with DIR/provenance.json.")
    seeds_as_members: str | None = key(None, optional=True, type=str, metavar="DEVICE",
                                       help="Train the seeds of each training as one ensemble run on DEVICE (auto, "
                                            "cpu, cuda, cuda:N): its members are the seeds' runs, moved to their "
                                            "run directories afterwards; a CPU or wall budget is then the runs' "
                                            "together.")


class Tasks(Protocol):
    """What ``StudyPlan.run_recorded`` runs: a ``vpintegrator.studies.runner.Runner`` with its tasks planned."""

    commands: list[str]

    def execute(self) -> bool: ...

    def failure(self) -> StudyError: ...


@dataclass(frozen=True, kw_only=True)
class StudyPlan:
    """The resolved keys every study of trainings shares (``StudyOptions``'), built once by a study's plan
    builder: a study's plan is a frozen subclass with its own fields (``RigidBodyPlan``, ...).

    ``argv`` is the command line as given (recorded by some studies); ``seeds`` is None where the study's
    own default applies and ``max_steps`` None for the study's own step budget.
    """

    out: str
    seeds: list[int] | None = None
    jobs: int = 2
    budget: str = "cpu"
    wall_ceiling: float = WALL_CEILING
    patience: int = PLATEAU_PATIENCE
    max_steps: int | None = None
    skip_existing: bool = False
    overwrite: bool = False
    table_only: bool = False
    results: str | None = None
    export_pretrained: str | None = None
    seeds_as_members: str | None = None
    argv: tuple[str, ...] = ()

    @property
    def training_budget(self) -> Budget:
        """What stops the study's trainings (``budget.budget_flags``)."""
        return Budget(self.budget, self.wall_ceiling, self.patience, self.max_steps)

    def check_out(self) -> None:
        """``--out``: --table-only needs a run directory unless it draws --results, which has no checkpoint for
        --export-pretrained; a run needs ``check_study_out``'s --out."""
        out = Path(self.out)
        if self.table_only and self.results is None and not out.is_dir():
            raise StudyError(f"--table-only: --out {out} is not a run directory; run the study first (or draw a "
                             "results file with --results)")
        if self.results is not None and self.export_pretrained:
            raise StudyError("--export-pretrained copies a checkpoint of a RUN; a results file has none: leave out "
                             "--results")
        if not self.table_only:
            check_study_out(out, self.skip_existing, self.overwrite)

    def run_recorded(self, plan: Callable[[Any], Tasks], settings: dict[str, Any],
                     prepare: Callable[[Path], Any] | None = None) -> None:
        """The study's run (nothing with --table-only): under RUN's lock, ``prepare(RUN)``, the tasks of
        ``plan(self)``, then ``RUN/settings.json``: ``settings`` and the commands (an earlier run's first with
        --skip-existing). A failed task raises once the settings are written."""
        run = Path(self.out)
        if self.table_only:
            return
        with study_lock(run):
            run.mkdir(parents=True, exist_ok=True)
            if prepare is not None:
                prepare(run)
            runner = plan(self)
            ok = runner.execute()
            previous = (read_json(run / "settings.json") or {}) if self.skip_existing else {}
            write_json(run / "settings.json", {**settings, "commands": previous.get("commands", []) + runner.commands})
        if not ok:
            raise runner.failure()

    @staticmethod
    def shared(options: StudyOptions, argv: Sequence[str] = (), seeds: list[int] | None = None) -> dict[str, Any]:
        """The fields of ``StudyPlan`` from the checked ``options`` (a plan builder's common part:
        ``SomePlan(**StudyPlan.shared(options, argv), own=...)``), ``seeds`` where ``--seeds`` is not given;
        ``--out`` must have been given."""
        if options.out is None:
            raise StudyError("--out is required (the flag, or out in the --plan file)")
        return {"out": options.out, "seeds": options.seeds if options.seeds is not None else seeds,
                "jobs": options.jobs, "budget": options.budget,
                "wall_ceiling": options.wall_ceiling, "patience": options.patience, "max_steps": options.max_steps,
                "skip_existing": options.skip_existing, "overwrite": options.overwrite,
                "table_only": options.table_only, "results": options.results,
                "export_pretrained": options.export_pretrained,
                "seeds_as_members": check_device(getattr(options, "seeds_as_members", None)), "argv": tuple(argv)}

    @classmethod
    def build(cls, options: StudyOptions, argv: Sequence[str] = ()) -> StudyPlan:
        """The plan builder of a study with no keys of its own (``Study``'s default)."""
        return StudyPlan(**StudyPlan.shared(options, argv))


def is_study_dir(run: Path) -> bool:
    """Whether ``run`` is a study's run directory (it has ``study.log`` or ``.tasks/``)."""
    return (run / "study.log").is_file() or (run / ".tasks").is_dir()


def check_out_dir(out: Path) -> None:
    """Refuse a study's ``--out`` that exists and is not a directory (a one-line ``StudyError``)."""
    if out.exists() and not out.is_dir():
        raise StudyError(f"--out {out}: exists and is not a directory; choose another --out")


def check_study_out(out: Path, skip_existing: bool = False, overwrite: bool = False) -> None:
    """A study's ``--out``: refuse a file (``check_out_dir``), a non-empty directory unless ``skip_existing``
    (continue it) or ``overwrite`` (run it again), and, with ``overwrite``, a non-empty directory that is not a
    study's."""
    out = Path(out)
    check_out_dir(out)
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not (skip_existing or overwrite):
        raise StudyError(f"--out {out} exists and is not empty; add --skip-existing to continue it, --overwrite to "
                         "run it again, or choose a fresh --out")
    if overwrite and not is_study_dir(out):
        raise StudyError(f"--out {out}: not a study's run directory (no study.log, no .tasks/): it is never replaced, "
                         "also with --overwrite; choose another --out")


@contextlib.contextmanager
def study_lock(run: Path) -> Iterator[None]:
    """Hold RUN's lock (``RUN.lock``, ``vpintegrator._outputs.output_lock``) for the block: a second
    study into the same RUN is refused with one line."""
    from .._outputs import output_lock

    lock = output_lock(run, key="out")
    try:
        lock.__enter__()
    except VPIntegratorError as err:
        raise StudyError(err.render(lambda key: f"--{key}")) from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def clear_stale_locks(out: Path) -> list[Path]:
    """Remove the lock files under RUN that no running process holds (left by a study killed outright, ``kill -9``:
    its trainings' ``runs/.../*.lock``), saying so in one warning line; a lock a running writer holds, and a file
    that is not a lock of the package, are left. Each goes through the package's own take-over
    (``vpintegrator._outputs.output_lock``), so a writer starting at the same time is never raced. Returns them."""
    import logging

    from .._outputs import output_lock

    out = Path(out)
    if not out.is_dir() or out.is_symlink():
        return []
    removed, owners = [], set()
    quiet = logging.getLogger("vpintegrator._outputs")  # its one line per lock: one line for all of them here
    level, quiet.disabled = quiet.disabled, True
    try:
        for lock in sorted(out.rglob("*.lock")):
            if lock.is_symlink() or not lock.is_file():
                continue
            try:
                pid, what = (lock.read_text(errors="replace").split("\n") + ["", ""])[:2]
                with output_lock(lock.with_name(lock.name[: -len(".lock")]), key=None):
                    pass
            except (VPIntegratorError, OSError):  # held by a running writer, or not a lock of the package
                continue
            if not lock.exists():
                removed.append(lock)
                owners.add(f"process {pid}" + (f" ({what})" if what else "") if pid else "a writer")
    finally:
        quiet.disabled = level
    if removed:
        names = ", ".join(str(p.relative_to(out)) for p in removed[:4]) + (", ..." if len(removed) > 4 else "")
        logging.getLogger("vpintegrator.studies").warning(
            f"removed {len(removed)} stale lock file(s) under {out} left by {', '.join(sorted(owners))}, no longer "
            f"running (a run killed outright): {names}")
    return removed
