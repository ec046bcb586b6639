"""The task runner of the studies: the package's CLIs as subprocesses, with a plan, logs and resumption.

A study first plans every step as a ``Task`` (a ``vp-gen``/``vp-train``/``vp-rollout``/``vp-plot``
command line, its output files, the tasks it needs), then has a ``Runner`` execute them, ``jobs`` at a
time, each child with one thread (``OMP_NUM_THREADS=1``). The runner

- runs ``vp-<tool> ARGS`` as ``python -m vpintegrator.cli.<tool> ARGS`` with this interpreter (no PATH
  needed), in the caller's working directory;
- writes each command's output to ``RUN/logs/<task>.log`` and one line per command, with its wall and
  CPU seconds (the child's user + system time), to ``RUN/study.log``;
- marks a finished task with a stamp ``RUN/.tasks/<task>.json`` (its command, exit status and times);
  with ``skip_existing`` a task whose stamp and outputs exist is not run again;
- logs one progress line per task, ``[k/N] <task>: ...`` (logger ``vpintegrator.studies``, level INFO; the
  command line of each step it starts at DEBUG), where N is the number of planned tasks, fixed from the first
  line on (a study that runs its plan in phases still counts against all of it);
- starts each child so that it dies with the study (``vpintegrator._signals.child_options``: a ``kill -9``
  of the study leaves no orphan training on); on Ctrl-C or SIGTERM (see ``sigterm_as_interrupt``) sends
  SIGTERM to its children's process groups (``vp-train`` saves ``last.pt``), waits for them, and re-raises
  ``KeyboardInterrupt``: the run can be resumed;
- passes ``--overwrite`` to the CLIs it runs when the study was asked to (``overwrite``) or resumes
  (``skip_existing``: a step killed after writing its output runs again over it), so a study's own
  outputs are replaced, and only those (the CLIs never replace a file of another kind).

A failed task does not stop the others; the tasks that need it are reported as not run.

Seeds as ensemble members (``--seeds-as-members``): ``vpintegrator.studies.members``.

Training budgets: ``vpintegrator.studies.budget``; the run directory: ``vpintegrator.studies.plan``; a study's
own tasks on the worker pool: ``vpintegrator.studies.pool``.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .._signals import child_options, stop_children
from .._signals import interrupts_raise as sigterm_as_interrupt  # noqa: F401  (re-exported: the studies' SIGTERM block)
from .budget import (PLATEAU_PATIENCE, PLATEAU_REL_DELTA, PLATEAU_WALL_FACTOR, WALL_CEILING,  # noqa: F401  (re-exported)
                     Budget, budget_flags)
from .errors import StudyError, one_line  # noqa: F401  (re-exported)
from .members import MEMBERS, move_member, scaled_budget, seed_and_out
from .plan import check_out_dir, check_study_out, is_study_dir, study_lock  # noqa: F401  (re-exported)
from .pool import in_pool  # noqa: F401  (re-exported)
from .stats import read_json, write_json

logger: logging.Logger = logging.getLogger("vpintegrator.studies")

#: the repository root (for its ``configs/``) when the package is installed in editable mode
REPO = Path(__file__).resolve().parents[2]
#: the CLIs a task may run, by their console-script name -> module under vpintegrator.cli
TOOLS = {"vp-gen": "gen", "vp-train": "train", "vp-rollout": "rollout", "vp-plot": "plot"}


@dataclass
class Task:
    """One subprocess of a study.

    ``cmd`` is the command line as a user types it (``["vp-train", config, "--out", dir, ...]``; other
    programs run as given); the task succeeded if it exits 0 and every path in ``outputs`` exists.
    ``deps`` names the tasks that must have succeeded first; an ``exclusive`` task runs with nothing beside
    it (CPU timings); ``after`` is called in this process after a success.
    """

    name: str
    cmd: list[Any]
    outputs: list[Any]
    deps: list[str] = field(default_factory=list)
    exclusive: bool = False
    after: Callable[[], object] | None = None
    status: str = "pending"  # pending, running, done, skipped, failed
    record: dict[str, Any] | None = None
    rc: int | None = None


def argv(cmd: Iterable[Any]) -> list[str]:
    """The argv that runs ``cmd``: ``vp-<tool> ARGS`` -> ``[python, "-m", "vpintegrator.cli.<tool>", ARGS]``."""
    cmd = [str(c) for c in cmd]
    if cmd and cmd[0] in TOOLS:
        return [sys.executable, "-m", f"vpintegrator.cli.{TOOLS[cmd[0]]}", *cmd[1:]]
    if cmd[:1] == ["python"]:  # a study step of the package (python -m vpintegrator.studies.<step>): this Python
        return [sys.executable, *cmd[1:]]
    return cmd


def shell(cmd: Iterable[Any]) -> str:
    """``cmd`` as one shell-quoted line."""
    return shlex.join(str(c) for c in cmd)


def last_line(path: Path) -> str:
    """The last non-empty line of a log file (what a failed command said last)."""
    try:
        lines = [x.strip() for x in Path(path).read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(no output)"


class Runner:
    """Runs the planned ``Task`` s of one run directory; see the module docstring.

    Parameters
    ----------
    run : Path
        The run directory (``logs/``, ``.tasks/`` and ``study.log`` go there).
    jobs : int
        Subprocesses at a time.
    skip_existing : bool
        Keep the tasks an earlier run finished (stamp and outputs present).
    overwrite : bool
        Run every task again over the outputs of an earlier run.
    """

    #: set by __init__ (declared for type checkers)
    run: Path
    jobs: int
    count: int
    env: dict[str, str]

    def __init__(self, run: str | Path, jobs: int = 1, skip_existing: bool = False, overwrite: bool = False,
                 members: str | None = None) -> None:
        self.run = Path(run)
        # the device of the ensemble runs the seeds train as (module docstring); None: each task as planned
        self.members = members if members is not None else MEMBERS.get()
        self.groups: dict[str, list[tuple[Task, int, Path]]] = {}  # ensemble task name -> its (task, seed, out)
        self._unit: dict[str, Task] = {}  # planned task name -> the ensemble task that runs it
        self.jobs = max(int(jobs), 1)
        self.skip_existing = skip_existing
        self.overwrite = overwrite
        self.tasks: dict[str, Task] = {}
        self.commands: list[str] = []  # the command lines started, as users type them
        self.count = 0  # tasks accounted for (done, skipped, failed, not run)
        self._checked = False
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    # ------------------------------------------------------------------ the plan

    def add(self, task: Task) -> Task:
        if task.name in self.tasks:
            raise ValueError(f"task {task.name!r} planned twice")
        self.tasks[task.name] = task
        return task

    def stamp(self, name: str) -> Path:
        return self.run / ".tasks" / f"{name}.json"

    def log_path(self, name: str) -> Path:
        return self.run / "logs" / f"{name}.log"

    @property
    def total(self) -> int:
        return len(self.tasks)

    def _progress(self, t: Task, text: str) -> None:
        self.count += 1
        width = len(str(self.total))
        logger.info(f"[{self.count:{width}d}/{self.total}] {t.name}: {text}")

    # ------------------------------------------------------------------ running

    def execute(self, names: Iterable[str] | None = None) -> bool:
        """Run the pending tasks of ``names`` (default: all planned), dependencies first; return True if
        every one of them succeeded (or was done before)."""
        todo = {n: self.tasks[n] for n in (self.tasks if names is None else names)}
        if not self._checked:  # the steps an earlier run finished, once, before anything runs
            self._checked = True
            for t in self.tasks.values():
                if (t.status == "pending" and self.skip_existing and self.stamp(t.name).exists()
                        and all(Path(o).exists() for o in t.outputs)):
                    t.status, t.record = "skipped", read_json(self.stamp(t.name))
                    self._progress(t, "done before, skipped")
        (self.run / "logs").mkdir(parents=True, exist_ok=True)
        (self.run / ".tasks").mkdir(parents=True, exist_ok=True)
        if self.members is not None:
            self._group([t for t in todo.values() if t.status == "pending"])
        running: dict[int, tuple[Task, subprocess.Popen, float, object]] = {}
        try:
            while True:
                for t in todo.values():  # what needs a failure cannot run
                    if t.status == "pending" and any(self.tasks[d].status == "failed" for d in t.deps if d in self.tasks):
                        t.status = "failed"
                        self._progress(t, "not run (a step it needs failed)")
                exclusive = any(t.exclusive for t, *_ in running.values())
                for t in todo.values():
                    if len(running) >= self.jobs or exclusive:
                        break
                    if t.status != "pending" or (t.exclusive and running):
                        continue
                    if all(self.tasks[d].status in ("done", "skipped") for d in t.deps if d in self.tasks):
                        unit = self._unit.get(t.name, t)  # the ensemble run of its seeds, or the task itself
                        proc, t0, log = self._start(unit)
                        running[proc.pid] = (unit, proc, t0, log)
                        for member, _, _ in self.groups.get(unit.name, ()):
                            member.status = "running"
                        exclusive = t.exclusive
                if not running:
                    break
                pid, status, usage = os.wait4(-1, 0)
                if pid not in running:
                    continue
                t, proc, t0, log = running.pop(pid)
                log.close()
                self._finish(t, proc, os.waitstatus_to_exitcode(status), time.perf_counter() - t0, usage)
        except BaseException:  # Ctrl-C, SIGTERM (see sigterm_as_interrupt) or a bug: stop the children
            self._stop(running)
            raise
        return all(t.status in ("done", "skipped") for t in todo.values())

    def _start(self, t: Task):
        for o in t.outputs:
            Path(o).parent.mkdir(parents=True, exist_ok=True)
        cmd = [str(c) for c in t.cmd]
        if (self.overwrite or self.skip_existing) and cmd and cmd[0] in TOOLS and "--resume" not in cmd \
                and "--overwrite" not in cmd:
            t.cmd = [*t.cmd, "--overwrite"]  # this study's own output of an earlier run (see the module docstring)
        log = open(self.log_path(t.name), "w")
        log.write(f"$ {shell(argv(t.cmd))}\n")
        log.flush()
        self.commands.append(shell(t.cmd))
        logger.debug(f"{t.name}: {shell(t.cmd)} (log: {self.log_path(t.name)})")
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv(t.cmd), stdout=log, stderr=subprocess.STDOUT, env=self.env, **child_options())
        t.status = "running"
        return proc, t0, log

    def _finish(self, t: Task, proc: subprocess.Popen, rc: int, wall: float, usage) -> None:
        proc.returncode = rc  # reaped by wait4 above
        t.rc = rc
        cpu = usage.ru_utime + usage.ru_stime
        with open(self.run / "study.log", "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {t.name} rc={rc} wall={wall:.2f}s cpu={cpu:.2f}s: "
                     f"OMP_NUM_THREADS=1 {shell(argv(t.cmd))}\n")
        if t.name in self.groups:
            self._finish_members(t, rc, wall, usage)
            return
        if rc == 0 and all(Path(o).exists() for o in t.outputs):
            if t.after is not None:
                t.after()
            t.record = {"name": t.name, "cmd": shell(argv(t.cmd)), "rc": rc, "wall_s": round(wall, 3),
                        "cpu_s": round(cpu, 3), "user_s": round(usage.ru_utime, 3),
                        "sys_s": round(usage.ru_stime, 3), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
            write_json(self.stamp(t.name), t.record)
            t.status = "done"
            self._progress(t, f"{wall:.1f} s wall, {cpu:.1f} s CPU")
        else:
            t.status = "failed"
            why = f"exit {rc}" if rc else "exit 0 but outputs missing"
            self._progress(t, f"FAILED ({why}): {last_line(self.log_path(t.name))} (log: {self.log_path(t.name)})")

    # ------------------------------------------------------------------ seeds as ensemble members

    def _group(self, pending: list[Task]) -> None:
        """Plan the ensemble runs: the pending ``vp-train`` tasks that differ only by ``--seed`` and ``--out``
        (same dependencies, same exclusivity), two or more, become one (module docstring)."""
        by_key: dict[tuple, list[tuple[Task, int, Path]]] = {}
        for t in pending:
            if t.name in self._unit:
                continue
            parts = seed_and_out(t.cmd)
            if parts is not None:
                rest, seed, out = parts
                by_key.setdefault((tuple(rest), tuple(t.deps), t.exclusive), []).append((t, seed, out))
        for (rest, _, _), members in by_key.items():
            if len(members) < 2 or len({seed for _, seed, _ in members}) < len(members):
                continue
            first = members[0][0]
            name = f"members_{first.name}"
            if name in self.tasks or name in self.groups:
                continue
            out = self.run / "members" / first.name
            for link in out.glob("member_*"):  # an earlier run's links to its moved members: not to be written through
                if link.is_symlink():
                    link.unlink()
            seeds = ",".join(str(seed) for _, seed, _ in members)
            cmd = [*scaled_budget(list(rest), len(members)), "--out", out, "--set", f"seeds=[{seeds}]",
                   "--device", str(self.members)]
            unit = Task(name, cmd, [out / "ensemble.csv"], list(first.deps), first.exclusive)
            self.groups[name] = members
            for t, _, _ in members:
                self._unit[t.name] = unit

    def _finish_members(self, unit: Task, rc: int, wall: float, usage) -> None:
        """The ensemble run ``unit`` ended: each member's run directory to its task's ``--out``, each task
        stamped done (or failed), in the members' order."""
        from ..training.results import member_dir_name

        ens = Path(unit.cmd[unit.cmd.index("--out") + 1])
        ok = rc == 0 and all(Path(o).exists() for o in unit.outputs)
        said = last_line(self.log_path(unit.name))
        for k, (t, seed, out) in enumerate(self.groups[unit.name]):
            t.rc = rc
            why: str | None = f"exit {rc}" if rc else "exit 0 but outputs missing"
            if ok:
                why = move_member(ens / member_dir_name(k, seed), out, self.overwrite or self.skip_existing)
            self.log_path(t.name).write_text(
                f"trained as member {k} (seed {seed}) of the ensemble run {unit.name} on {self.members}: "
                f"log {self.log_path(unit.name)}, run directory {ens}\n{'' if why is None else why}\n")
            if why is None and all(Path(o).exists() for o in t.outputs):
                if t.after is not None:
                    t.after()
                t.record = {"name": t.name, "cmd": shell(argv(unit.cmd)), "rc": rc, "wall_s": round(wall, 3),
                            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "user_s": round(usage.ru_utime, 3),
                            "sys_s": round(usage.ru_stime, 3), "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                            "ensemble": {"task": unit.name, "member": k, "seed": seed,
                                         "n_members": len(self.groups[unit.name]), "device": self.members}}
                write_json(self.stamp(t.name), t.record)
                t.status = "done"
                self._progress(t, f"member {k} of {unit.name}: {wall:.1f} s wall for the ensemble")
            else:
                t.status = "failed"
                self._progress(t, f"FAILED (member {k} of {unit.name}: {why or 'outputs missing'}): {said} "
                                  f"(log: {self.log_path(unit.name)})")

    def _stop(self, running: dict) -> None:
        """SIGTERM to every running child's process group (``vp-train`` saves ``last.pt``; an unfinished run has
        no completion record, so ``--skip-existing`` resumes or redoes it), SIGKILL after 60 s."""
        try:
            stop_children([proc for _, proc, _, _ in running.values()], timeout=60)
        finally:
            for _, _, _, log in running.values():
                log.close()

    # ------------------------------------------------------------------ reporting

    def failed(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.status == "failed"]

    def failure(self) -> StudyError:
        """One-line error naming the failed tasks and what the first one said."""
        failed = self.failed()
        first = next((t for t in failed if t.rc is not None), None)
        said = (f"; {first.name} (exit {first.rc}): {last_line(self.log_path(first.name))}" if first else "")
        return StudyError(f"{len(failed)} step(s) failed or were not run: {', '.join(t.name for t in failed[:6])}"
                          f"{', ...' if len(failed) > 6 else ''}{said}; see {self.run / 'logs'}; "
                          "rerun with --skip-existing to redo only those")
