"""Comparison runs (what ``vp-rollout`` does): models and classical integrators from a data set's initial
conditions, against its reference, to any horizon, streamed to one rollout file plus a metrics table.

[`run_rollouts`][vpintegrator.rollout.run.run_rollouts] takes a
[`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig], has it planned once
(``vpintegrator.rollout.plan.build_plan``) and runs the plan under the outputs' locks: the reference
and every method written (``vpintegrator.rollout.write``), the classical methods on worker processes when the
plan's ``vpintegrator.rollout.plan.Blocks`` say so (each process given its block of the plan), a shard of the
selection into a file of its own (the index file once every shard exists), or every shard on a dask cluster
(one plan per shard, handed to the job runtime's one cluster path, ``vpintegrator.jobs.dask.run_on_cluster``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ..data.rollout_shards import RolloutParts
from ..errors import VPIntegratorError
from ..jobs.executors import remove_orphan_parts
from ..jobs.shards import shard_path
from .config import RolloutConfig, model_entries
from .family import step_for
from .plan import RolloutPlan, build_plan
from .preflight import check_outputs, input_files
from .report import LEARNED_KINDS, Failure, RolloutReport, identity_notes
from .splits import split_rows
from .steps import reference_step_map
from .write import COST_REPEAT_BELOW, COST_REPEATS, Say, first_failure, root_attrs, write_method, write_reference

__all__ = ["run_rollouts", "run_digest", "write_index_if_complete", "WorkerParts"]

#: how the table's cost column was taken (the one price rule of every priced row, ``vpintegrator.rollout.engine``'s
#: ``price_seconds``), said above every table after the line that says what the errors are measured against
COST_CAPTION = ("seconds_per_step: the row's price of one step of the whole batch: the engine's CPU seconds of the "
                "step map's start and its steps (the price of every row in the package, engine.PRICE_OF) over the "
                "steps, taken warm (each row first runs a few steps whose compilation and first-call work are its "
                f"warmup_seconds in the rollout file, not its price; a row priced under {COST_REPEAT_BELOW:g} CPU s "
                f"is run {COST_REPEATS} times, one after another, and costs the least); a device-engine row: its "
                "steps' device time; batch-1 prices per unit time: vp-rollout --work-precision.")


def run_rollouts(config: RolloutConfig, log: Callable[[str], None] | None = None,
                 inputs=(), *, overwrite: bool = False, shard: str | tuple[int, int] | None = None,
                 write_index: bool = True, scheduler: Any = None, n_shards: int | None = None,
                 check_plan: Callable[[RolloutPlan], None] | None = None) -> RolloutReport:
    """Roll out models and classical integrators from a data set's initial conditions; write everything.

    Writes ``config.out`` (HDF5, atomically; layout in ``datasets/README.md``, reader
    [`vpintegrator.data.rollouts.read_rollout`][vpintegrator.data.rollouts.read_rollout]) and the metrics table beside it (``<stem>.csv``,
    ``<stem>.md``; one row per method and ``split`` label present, columns ``method``, ``split``, those of
    ``vpintegrator.metrics.summary_row`` (``vpt_lyapunov`` with ``config.lyapunov``) and ``reference``; the
    Markdown file says above the table what the errors are measured against and below it ``RolloutReport.notes``:
    an offset that dominates ‖y‖, the Lyapunov estimate, each learned row worse than the identity map). Which trajectories: ``config.traj``/``n_traj``, else the trained models'
    test split, plus ``config.heldout`` new conditions (``vpintegrator.rollout.splits``); the reference:
    ``config.reference`` (the exact flow by default, the data's generator then a row of its own).
    Trajectories, per-step metrics and volume are streamed in chunks of ``config.chunk_steps`` steps,
    computed in NumPy (the host engine) or, for models under ``config.engine`` (``auto``: models on CUDA),
    on the model's device (``vpintegrator.rollout.device``); the file and table are the same.
    Every input is checked (and every model loaded) before anything is computed.

    Parameters
    ----------
    config : RolloutConfig
    log : callable, optional
        Receives one progress line per method, and one line per failed method (blow-up or non-finite).
        The same lines are INFO records of the logger ``vpintegrator.rollout.run`` (``logging``).
    inputs : paths, optional
        More files the run must not write over (e.g. its config file); the data file and the models'
        checkpoints are always protected.
    overwrite : bool, default False
        Replace an existing rollout file at ``config.out`` and its metrics table; without it an existing
        output is refused. Anything that is not a rollout file (a metrics table) is never replaced.
        The three outputs are locked against other writers while they are written.
    shard : "I/N" or (I, N), optional
        Roll out only the I-th of N contiguous blocks of the selected trajectories, into
        ``<out stem>.shard-I-of-N.h5`` (and its table); when the last shard is written (and
        ``write_index``), the index file appears at ``out`` with the whole run's table beside it, and
        [`read_rollout`][vpintegrator.data.rollouts.read_rollout] of it (or of the shards' list) equals the unsharded
        rollout to the last bit (``vpintegrator.rollout.plan.Blocks``).
    write_index : bool, default True
    scheduler : str, distributed.Client or True, optional
        Roll out every shard on a ``dask.distributed`` cluster (``vp-rollout --dask-scheduler``;
        docs/cluster.md): the scheduler's address, a connected client, or True for
        ``$DASK_SCHEDULER_ADDRESS``. Each shard is planned here and rolled out, into its shard file, by the
        worker that runs it (``workers`` applies there); once all are done the index file is written at
        ``out`` with the whole run's table beside it. A shard that a finished earlier run of the same
        configuration and inputs left is kept. The workers must see the data file, the models and ``out``'s
        folder; the overwrite rule applies, before anything is sent, to the index, its table and every shard.
    n_shards : int, optional
        With ``scheduler``: the number of blocks (default: one per worker of the cluster, at most one per
        trajectory).
    check_plan : callable, optional
        ``check_plan(plan)`` refuses what the caller will do with the rollout, once the run is planned and before
        anything runs (``vp-rollout --decode-every``: ``vpintegrator.rollout.decoded.check_decodable``); not with
        ``scheduler``.

    Notes
    -----
    Before anything is computed: every input is checked, an ``out`` (or its table) that is an input is
    refused, and so is work whose estimated memory or disk
    (``vpintegrator.rollout.preflight.estimate``) does not fit. A reference
    with NaN/Inf, in the data file or where the data's generator continues it, is an error.

    Returns
    -------
    RolloutReport
    """
    from .._progress import log_lines

    log = log_lines(log, __name__)  # every line an INFO record of vpintegrator.rollout.run, then log's
    if scheduler is None:
        plan, data_states = build_plan(config, inputs, overwrite, shard=shard, write_index=write_index)
        if check_plan is not None:
            check_plan(plan)
        return _run(plan, data_states, log, overwrite)
    from .._outputs import check_output
    from ..data.rollout_shards import ROLLOUT
    from ..jobs.dask import ShardJob, cluster_address, run_on_cluster
    from ..jobs.shards import finished_shard, shard_path

    if shard is not None:
        raise VPIntegratorError("shard and scheduler exclude each other: the scheduler runs every shard", key="shard")
    scheduler = cluster_address(scheduler, n_shards)
    config.validate()
    out = Path(config.out)
    outs = check_outputs(out, input_files(config.data, model_entries(config.models), inputs), overwrite)  # the index, its table

    run_key = run_digest(dataclasses.asdict(config), config.data, config.models)

    def jobs(n: int) -> list[ShardJob]:
        """The shards' plans, made here (the first one says how many shards the selection has)."""
        first, _ = build_plan(config, inputs, True, shard=(1, n), write_index=False, run_key=run_key)
        n = int(first.blocks.attrs["shard_count"])
        shards = []
        for s in ((i, n) for i in range(1, n + 1)):
            path = shard_path(out, s)
            files = (path, path.with_suffix(".csv"), path.with_suffix(".md"))
            if finished_shard(path, s, {"shard_run": run_key}, ROLLOUT):
                shards.append(ShardJob(s, files))  # (one an earlier run of this configuration finished is kept)
                continue
            check_outputs(path, first.inputs, overwrite)
            plan = first if s[0] == 1 else build_plan(config, inputs, True, shard=s, write_index=False,
                                                      run_key=run_key)[0]
            shards.append(ShardJob(s, files, task=_shard_task, args=(plan,)))
        return shards

    def finish(n: int) -> RolloutReport:
        check_output(out, "rollout", True)
        rows, reference = write_index_if_complete(out, n) or ([], "")
        return RolloutReport(out=out, csv=out.with_suffix(".csv"), markdown=out.with_suffix(".md"), rows=rows,
                             reference=reference)

    return run_on_cluster(scheduler, n_shards, "vp-rollout", out, outs[0], jobs, finish)


def run_digest(fields: Mapping[str, Any], data: Any, models: Any) -> str:
    """What tells a rollout run from any other: its keys ``fields`` (the output and ``workers`` apart), the
    sha256 of its data file and model files ``models`` (a run directory's ``config.toml`` and checkpoints)
    and this version; stored in each shard of a cluster run as ``shard_run`` so that a run continued after a
    lost cluster keeps the shards already written (same code, same inputs: the same bits)."""
    import hashlib
    import json

    from .._version import __version__
    from ..provenance import file_sha256

    def digest(path: Any) -> Any:
        p = Path(str(path))
        if p.is_dir():
            return {n: file_sha256(p / n) for n in ("config.toml", "best.pt", "last.pt") if (p / n).is_file()}
        return file_sha256(p) if p.is_file() else str(path)

    keys = {k: v for k, v in fields.items() if k not in ("out", "workers")}
    items = models.items() if isinstance(models, dict) else enumerate(models or [])
    record = {"config": keys, "data": digest(data), "models": {str(k): digest(v) for k, v in items},
              "version": __version__}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _shard_task(plan: RolloutPlan) -> str:
    """One shard of a cluster run, on a dask worker: its shard file (replaced when a dead worker had finished
    it), marked with the run's digest (``shard_run``: a later run of the same configuration keeps it)."""
    return str(_run(plan, None, None, True).out)


def write_index_if_complete(out: Path, count: int) -> tuple[list[dict], str] | None:
    """The index file at ``out`` and the whole run's table beside it, once every shard file exists: (the
    whole run's table rows, what its errors are measured against), or None while shards are missing. The
    Markdown table says above it what the errors are measured against, as an unsharded run's does (the line
    every shard records as its ``reference`` attribute, copied into the index)."""
    from ..data.rollout_shards import write_rollout_index
    from ..jobs.shards import index_when_complete
    from ..metrics import write_table

    def write(path: Path, n: int) -> tuple[list[dict], str]:
        rows = write_rollout_index(path, n)
        reference = index_reference(path)
        write_table(rows, path.with_suffix(""), overwrite=True,
                    caption=f"Errors against the {reference}.\n\n{COST_CAPTION}" if reference else COST_CAPTION,
                    notes=identity_notes(rows, _learned(path)))
        return rows, reference

    return index_when_complete(Path(out), count, "rollout", write)


def _baseline(model: Any) -> bool:
    """Whether ``model`` is the identity baseline (``identity_baseline``): the notes do not hold it to itself."""
    return bool(getattr(model, "identity_baseline", False))


def _learned(path: Path) -> set[str]:
    """The methods of a rollout file or index learnt from data (their ``kind`` attribute: ``LEARNED_KINDS``)."""
    import h5py

    with h5py.File(path, "r") as f:
        methods = f.get("methods", {})
        kinds = {label: methods[label].attrs.get("kind", "") for label in methods}
    return {label for label, kind in kinds.items()
            if (kind.decode() if isinstance(kind, bytes) else str(kind)) in LEARNED_KINDS}


def index_reference(path: Path) -> str:
    """The ``reference`` line of a rollout file or index (what its errors are measured against; "" if none)."""
    import h5py

    with h5py.File(path, "r") as f:
        value = f.attrs.get("reference", "")
    return value.decode() if isinstance(value, bytes) else str(value)


def _part(plan: RolloutPlan) -> str:
    """A block of the classical methods on a worker process (``workers``): its part file."""
    return str(_run(plan, None, None, True).out)


@contextlib.contextmanager
def _worker_parts(plan: RolloutPlan, say: Say, out: Path) -> Iterator[WorkerParts | None]:
    """The classical methods of ``plan`` (and its reference) computed on worker processes (``_part`` on
    each block of the plan, by the job runtime), as its ``blocks`` say: a ``WorkerParts`` over their files
    (None when the run stays in this process); the files are removed on leaving."""
    from .._io import DeviceWriteError, device_write_error
    from ..jobs.executors import in_processes, parts_folder

    blocks = plan.blocks
    labels = blocks.part_labels(plan)
    n = blocks.n_parts(plan, labels)
    if n <= 1:
        yield None
        return
    with parts_folder(out) as tmp:
        say(f"{', '.join(labels)}: rolling out {plan.n_traj} trajectories x {plan.n_steps} steps on "
            f"{n} worker processes")
        parts = [(plan.part(labels, (i, n), shard_path(tmp / "part.h5", (i, n))),) for i in range(1, n + 1)]
        try:
            paths = in_processes(_part, parts, n)
        except DeviceWriteError as err:  # a worker's part file: the output could not be written
            raise device_write_error(out, err.reason) from None
        yield WorkerParts(RolloutParts([Path(p) for p in paths], blocks.per_traj), labels)


def _run(plan: RolloutPlan, data_states: Any, log: Say | None, overwrite: bool) -> RolloutReport:
    """[`run_rollouts`][vpintegrator.rollout.run.run_rollouts] of ``plan`` under the outputs' locks;
    ``data_states``: the data file's selected trajectories (None: read here, as a worker does); a shard's
    index (``plan.blocks.index``) once every shard file exists."""
    from .._outputs import output_locks
    from ..data import read_trajectories

    if data_states is None:
        data_states = read_trajectories(plan.data, traj=plan.idx)
    held = [data_states]  # handed on, so that the file's states are freed once /reference is written
    del data_states
    with output_locks(check_outputs(plan.out, plan.inputs, overwrite)):
        # again under the locks: a writer we raced may have finished meanwhile
        outs = check_outputs(plan.out, plan.inputs, overwrite)
        report = _write_rollouts(plan, log or (lambda line: None), held, outs, overwrite)
    if plan.blocks.index is not None:
        write_index_if_complete(plan.blocks.index, int(plan.blocks.attrs["shard_count"]))
    return report


def _write_rollouts(plan: RolloutPlan, say: Say, held: list[Any], outs: list[Path],
                    overwrite: bool) -> RolloutReport:
    """[`run_rollouts`][vpintegrator.rollout.run.run_rollouts] once its outputs (``outs``: file, csv, md; links
    resolved) are locked; ``held``: the data file's selected trajectories (taken out, then freed)."""
    from ..data.rollouts import RolloutWriter
    from ..metrics import write_table
    from ..provenance import provenance_attr
    from ..systems.unknown import UnknownSystem

    remove_orphan_parts(outs[0])  # worker folders of a run killed outright (we hold the lock)
    # the data's generator continues the reference (none without a system: the data is the whole reference)
    reference_gen = (None if isinstance(plan.system, UnknownSystem)
                     else step_for(plan.system, partial(reference_step_map, plan.data_meta, dt=plan.dt)))
    for line in plan.notes:
        say(line)
    # the runners of the whole selection, and the classical methods on worker processes
    plan.blocks.same_runners([reference_gen, *(m.step_map for m in plan.methods)])
    out = plan.out
    rows: list[dict] = []
    failures: dict[str, Failure] = {}
    # where the file came from: the data file and every model file, hashed (directories and pretrained: names
    # are named by their source in the methods' attributes)
    inputs = [plan.data, *dict.fromkeys([*(Path(m.source) for m in plan.methods if Path(m.source).is_file()),
                                         *plan.model_files])]
    provenance = provenance_attr(inputs, relative_to=out.resolve().parent)
    with _worker_parts(plan, say, Path(outs[0])) as parts, \
            RolloutWriter(outs[0], root_attrs(plan), plan.t, plan.traj_index, dim=plan.system.dim,
                          invariant_names=plan.system.invariant_names, chunk_steps=plan.chunk_steps,
                          extra_attrs={"provenance": provenance, **plan.blocks.attrs}) as writer:
        ref_file = held.pop()
        yref = (write_reference(writer, plan, say, ref_file, reference_gen) if parts is None
                else parts.reference(writer, plan))
        del ref_file  # the file's states are in /reference now
        for label, step_map, source in plan.methods:
            if parts is not None and label in parts:
                method_rows, failure = parts.method(writer, plan, label)
            else:
                method_rows, failure = write_method(writer, plan, say, label, step_map, source, yref)
            rows.extend(method_rows)
            if failure is not None:
                failures[label] = failure
                say(failure.line())
        _refuse_if_nothing_made(plan, failures)
        lyapunov, line = _lyapunov(plan, reference_gen, yref) if plan.lyapunov is not False else (None, "")
        if lyapunov is not None:  # the horizon in Lyapunov times, beside vpt
            rows = [_after(r, "vpt", {"vpt_lyapunov": (r["vpt"] - plan.t0) * lyapunov}) for r in rows]
        writer.finish(rows)
    learned = {m.label for m in plan.methods if getattr(m.step_map, "kind", "") in LEARNED_KINDS
               and not _baseline(getattr(m.step_map, "model", None))}
    learned |= {label for label, model, _ in plan.models if not _baseline(model)}
    said = [*([line] if line else []), *identity_notes(rows, learned)]
    for line in said:
        say(line)
    notes = [*plan.table_notes, *said]
    write_table(rows, out.with_suffix(""), overwrite=overwrite,
                caption=f"Errors against the {plan.reference_desc}.\n\n{COST_CAPTION}", notes=notes)
    stem = out.with_suffix("")
    return RolloutReport(out=out, csv=stem.with_suffix(".csv"), markdown=stem.with_suffix(".md"), rows=rows,
                         failures=failures, reference=plan.reference_desc, warnings=list(plan.warnings), notes=notes)


def _after(row: dict, key: str, new: dict) -> dict:
    """``row`` with the items of ``new`` right after ``key``."""
    out = {}
    for k, v in row.items():
        out[k] = v
        if k == key:
            out.update(new)
    return out


#: the Lyapunov estimate's initial conditions (the first rolled out) and its least number of steps
LYAPUNOV_CONDITIONS, LYAPUNOV_MIN_STEPS = 8, 4000
#: ``lyapunov`` unset: the column is given where the separation grows by more than this (nats, mean over the
#: initial conditions) over the estimate's second half; a regular motion's grows like t there, by at most log 2
CHAOS_NATS = 2.0


def _lyapunov(plan: RolloutPlan, generator: Any, yref: Any) -> tuple[float | None, str]:
    """The largest Lyapunov exponent by Benettin (``vpintegrator.metrics.lyapunov_max``) on the data's generator
    from the first ``LYAPUNOV_CONDITIONS`` reference states, over the horizon (at least ``LYAPUNOV_MIN_STEPS``
    steps): (its mean over them, or None where it gives no Lyapunov time, and the line that gives it with its
    spread or says why not). ``lyapunov = true`` gives any positive estimate; unset (``None``), only one whose
    separation grew exponentially (``CHAOS_NATS``), and says nothing on a system without equations."""
    from ..metrics import lyapunov_max
    from ..systems.family import SystemFamily
    from .engine import rollout

    if generator is None or plan.observation is not None or isinstance(plan.system, SystemFamily):
        return None, ("" if plan.lyapunov is None else
                      "lyapunov: no estimate on a system without equations, a parametric or an observed run")
    y0 = np.asarray(yref[: min(LYAPUNOV_CONDITIONS, plan.n_traj), 0], dtype=np.float64)
    n_steps = max(plan.n_steps, LYAPUNOV_MIN_STEPS)
    try:
        lam, late = lyapunov_max(lambda y, k: rollout(generator, y, plan.dt, k).y[:, -1], y0, plan.dt, n_steps,
                                 late=True)
    except VPIntegratorError:  # a state went non-finite: the next block refuses to start from it
        lam = late = np.full(y0.shape[0], np.nan)
    if not np.isfinite(lam).all():
        return None, "lyapunov: no estimate, the generator failed from an initial condition"
    mean, grew = float(np.mean(lam)), float(np.mean(late))
    said = (f"lyapunov: largest exponent {mean:.4g} ± {float(np.std(lam)):.2g} per unit time (Benettin on "
            f"{generator.name}, {y0.shape[0]} initial conditions over t = {n_steps * plan.dt:g}")
    if mean <= 0:
        return None, said + "): not above 0: no Lyapunov time here"
    if plan.lyapunov is None and grew <= CHAOS_NATS:
        return None, (said + f"; the separation grew {grew:.2g} nats over its second half, not exponentially: a "
                      "regular motion, no Lyapunov time; --lyapunov gives vpt_lyapunov anyway)")
    return mean, said + f"): vpt_lyapunov = (vpt − t0) × {mean:.4g}"


def _refuse_if_nothing_made(plan: RolloutPlan, failures: dict[str, Failure]) -> None:
    """When no row asked for (the data's generator row aside) could be made (its step map raised: a fitted row the
    data cannot determine), a one-line error, before the rollout file is in place (its writer is atomic): nothing
    is written, never a table of ``inf`` with exit 0. A row that blew up, a fitted row whose candidates have no skill
    (a result: it says so, ``failure_reason``), or one failed row beside others, is a table row."""
    made = {m.label: getattr(m.step_map, "failure_reason", None) is not None for m in plan.methods}
    asked = [m.label for m in plan.methods][: len(plan.methods) - (plan.generator is not None)]
    if not asked or not all(label in failures and failures[label].reason and not made[label] for label in asked):
        return
    why = "; ".join(str(failures[label].reason).removeprefix("VPIntegratorError: ") for label in asked)
    raise VPIntegratorError(f"no row could be made, so nothing was written: {why}", key="integrators")


class WorkerParts:
    """The worker processes' part files of the classical methods ``labels`` and the reference
    (``RolloutParts``), copied into the rollout file being written; the table rows and the failure of a
    method made from the whole run's per-trajectory values."""

    def __init__(self, files: RolloutParts, labels: list[str]) -> None:
        self.files = files
        self.labels = labels

    def __contains__(self, label: str) -> bool:
        return label in self.labels

    def reference(self, writer: Any, plan: RolloutPlan) -> Any:
        return self.files.reference(writer, list(plan.run_labels))

    def method(self, writer: Any, plan: RolloutPlan, label: str) -> tuple[list[dict], Failure | None]:
        """Method ``label`` copied into ``writer``: (its table rows, its failure or None)."""
        per, cum, failed, attrs = self.files.method(writer, label, list(plan.labels[label]))
        rows = split_rows(label, plan, per, tuple(plan.system.invariant_names), cum,
                          float(attrs.get("seconds_per_step", float("nan"))), failed)
        reason = attrs.get("failure_reason")  # a row whose step map raised (write.write_method)
        return rows, first_failure(plan, label, failed, reason if isinstance(reason, str) and reason else None)
