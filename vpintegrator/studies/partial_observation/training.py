"""The partial-observation study's trainings: one run per (system, approach, T, seed), the plan's all on the
package's one pool, and what a run's log says of its plateau."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ...errors import VPIntegratorError
from ..runner import StudyError, in_pool
from .design import APPROACHES, FULL_STATE, RECIPE, SYSTEMS, TRAINING
from .plan import PartialObservationPlan


def _run_dir(out: Path, system: str, approach: str, T: int, seed: int) -> Path:
    return out / "runs" / system / f"{approach}_T{T}_seed{seed}"


def train_run(out: Path, train: Path, system: str, approach: str, T: int, seed: int, stop: dict[str, Any],
              patience: int, overwrite: bool = False) -> Path:
    """Train ``approach`` with window ``T`` and ``seed`` on the observed channels of ``train`` (on the full
    state for an approach of ``FULL_STATE``; the recipe of the module docstring), stopped by ``stop`` (the fit
    keys of the plan's budget: ``PartialObservationPlan.stop_keys``) or its plateau (``patience`` epochs), unless
    its run directory is complete already; returns the run directory."""
    from ...training import fit

    run = _run_dir(out, system, approach, T, seed)
    if (run / "complete.json").is_file() and not overwrite:
        return run
    fit({**RECIPE, **TRAINING.get(approach, {}), "data": [str(train)], "model": {**APPROACHES[approach], "seq_len": int(T)},
         "observe": None if approach in FULL_STATE else SYSTEMS[system]["observe"], "seed": int(seed),
         **stop, "patience": int(patience), "out": str(run)},
        overwrite=run.exists())
    return run


def _train_task(*args: Any) -> Path:
    """``train_run(*args)`` in a worker; a library or file error comes back as one picklable line."""
    try:
        return train_run(*args)
    except (VPIntegratorError, OSError) as err:
        raise StudyError(f"training {args[3]} T = {args[4]} seed {args[5]} on {args[2]}: {err}") from None


def train_runs(plan: PartialObservationPlan,
               trains: dict[str, Path]) -> Iterator[tuple[str, int, dict[tuple[str, int], Path]]]:
    """Train every (approach, T) of every system and seed of ``plan`` (``train_run``: a finished run is
    reused), ``plan.jobs`` processes at a time (``runner.in_pool``: one thread each; each run's budget is its own
    process's CPU seconds, which other runs beside it do not bend); yields ``(system, seed, {(approach, T): run
    directory})`` in the plan's order as soon as that seed's runs are done, while the later ones train."""
    groups = [(system, seed, plan.training_runs(system)) for system in plan.systems for seed in plan.seeds]
    tasks = [(plan.out, trains[system], system, a, T, seed, plan.stop_keys(system, a, T), plan.patience,
              plan.overwrite) for system, seed, pairs in groups for a, T in pairs]
    done = in_pool(_train_task, tasks, plan.jobs)
    try:
        for system, seed, pairs in groups:
            yield system, seed, {(a, T): next(done) for a, T in pairs}
    finally:
        done.close()


def _curve(run: Path) -> dict[str, list[float]]:
    """The validation-rollout score per epoch of a run against process CPU seconds (its ``log.csv``, read by
    ``vpintegrator.rundir.read_log``)."""
    from ...rundir import CPU_COLUMN, ROLLOUT_COLUMN, read_log

    rows = [r for r in read_log(run / "log.csv") if CPU_COLUMN in r and ROLLOUT_COLUMN in r]
    return {"cpu": [r[CPU_COLUMN] for r in rows], "val": [r[ROLLOUT_COLUMN] for r in rows]}
