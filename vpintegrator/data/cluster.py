"""``vp-gen --scheduler ADDRESS``: the blocks of a data set on a ``dask.distributed`` cluster.

``generate_on_cluster`` cuts the data set into shards (``vpintegrator.data.shards``), sends one
task per shard to the scheduler, each task writing its own shard file with
[`generate`][vpintegrator.data.generation.generate] on the worker that runs it, and, once all are done, writes the index
file at ``out`` (nothing else on the client). The workers must see ``out``'s folder (a shared file
system, as on a cluster; or the same machine). A worker that dies mid-task loses only its block: the
scheduler runs the task again elsewhere, the shard file is written atomically (a half-written one
never appears; the temporary file of the dead writer is removed by the next one) and replaced whole if
the dead worker had finished it, so no trajectory is lost or written twice. ``dask-jobqueue`` clusters
(Slurm, PBS, ...) are reached by their scheduler address like any other.

Needs the optional extra ``vpintegrator[dask]`` (``dask[distributed]``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

from .._io import check_not_input, remove_orphans
from .._outputs import check_output, output_lock
from ..errors import VPIntegratorError
from .generation import generate, plan_chunks
from .hdf5 import check_output_path
from .shards import shard_path, write_shard_index
from .spec import GenerationSpec, load_spec

__all__ = ["generate_on_cluster", "cluster_address", "shard_count", "gather_or_one_line", "quiet_dask_logs", "close_client"]

logger = logging.getLogger(__name__)


def cluster_address(scheduler: Any, n_shards: Any) -> Any:
    """The scheduler to use (``scheduler``, else ``$DASK_SCHEDULER_ADDRESS``), after the checks of the
    cluster arguments shared by ``vp-gen`` and ``vp-rollout`` (one-line errors naming ``scheduler`` or
    ``n_shards``)."""
    scheduler = scheduler if scheduler is not None else os.environ.get("DASK_SCHEDULER_ADDRESS")
    if scheduler is None:
        raise VPIntegratorError("scheduler not given and DASK_SCHEDULER_ADDRESS not set; give the address of "
                                "a dask scheduler (tcp://HOST:PORT)", key="scheduler")
    if n_shards is not None and (isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1):
        raise VPIntegratorError(f"n_shards must be an integer >= 1; got {n_shards!r}", key="n_shards")
    return scheduler


def shard_count(client: Any, n_shards: int | None, limit: int) -> int:
    """``n_shards`` (default: one per worker of the cluster), at most ``limit`` (blocks of work)."""
    if n_shards is None:
        n_shards = max(1, len(client.scheduler_info().get("workers", {})))
    return min(n_shards, limit)


def _client(scheduler: Any):
    try:
        from distributed import Client
    except ImportError:
        raise VPIntegratorError(
            "scheduler needs dask.distributed, which is not installed; pip install 'vpintegrator[dask]' "
            "(or 'dask[distributed]')", key="scheduler") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise VPIntegratorError(f"scheduler must be the address of a dask scheduler (tcp://HOST:PORT) or a "
                                f"distributed.Client; got {scheduler!r}", key="scheduler")
    try:
        return Client(scheduler, timeout="20s"), True
    except (OSError, TimeoutError) as err:
        raise VPIntegratorError(f"scheduler {scheduler}: cannot connect ({' '.join(str(err).split())}); is the "
                                "dask scheduler running there?", key="scheduler") from None


def _shard_task(spec: GenerationSpec, out: str, shard: tuple[int, int], workers: int | None) -> str:
    """One block, run on a dask worker: its shard file (replaced when a dead worker had finished it)."""
    return str(generate(spec, out, shard=shard, workers=workers, overwrite=True, write_index=False))


def generate_on_cluster(
    spec: GenerationSpec | str | os.PathLike[str],
    out: str | os.PathLike[str],
    scheduler: Any = None,
    *,
    n_shards: int | None = None,
    workers: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Generate ``spec`` as ``n_shards`` shards on a dask cluster and write the index file ``out``.

    Parameters
    ----------
    spec : GenerationSpec, or a spec name / TOML path
    out : str or PathLike
        The index file; the shards go beside it (``<stem>.shard-I-of-N.h5``). The overwrite rule applies
        to it and to every shard file, on the client, before anything is sent.
    scheduler : str or distributed.Client, optional
        The scheduler's address (default: ``$DASK_SCHEDULER_ADDRESS``), or a connected client.
    n_shards : int, optional
        Number of blocks (default: one per worker of the cluster, at most one per chunk).
    workers : int, optional
        Threads each task integrates on (default: every core of the worker's machine).
    overwrite : bool, default False

    Returns
    -------
    Path
        ``out``; [`read_trajectories`][vpintegrator.data.hdf5.read_trajectories] of it equals ``generate(spec, ...)`` bit for bit.
    """
    if not isinstance(spec, GenerationSpec):
        spec = load_spec(spec)
    if out is None or not isinstance(out, (str, os.PathLike)):
        raise VPIntegratorError(f"out must be a file path (the index file; the shards go beside it); got {out!r}",
                                key="out")
    scheduler = cluster_address(scheduler, n_shards)
    check_not_input(out, [spec.source] if spec.source else [], key="out")
    check_output_path(out, key="out")
    index = check_output(out, "trajectories", overwrite)
    n_traj, chunk = plan_chunks(spec)
    with quiet_dask_logs():
        return _generate_on_cluster(spec, out, index, scheduler, n_shards, (n_traj, chunk), workers, overwrite)


def _generate_on_cluster(spec: GenerationSpec, out: Any, index: Path, scheduler: Any, n_shards: int | None,
                         plan: tuple[int, int], workers: int | None, overwrite: bool) -> Path:
    n_traj, chunk = plan
    n_chunks = -(-n_traj // chunk)
    client, owned = _client(scheduler)
    try:
        n_shards = shard_count(client, n_shards, n_chunks)
        shards = [(i, n_shards) for i in range(1, n_shards + 1)]
        expected = {**_expected_meta(spec), "shard_n_traj": n_traj, "chunk_size": chunk}
        done = [s for s in shards if _finished_shard(shard_path(out, s), expected, s)]
        for s in shards:
            if s not in done:
                check_output(shard_path(out, s), "trajectories", overwrite, key="out")
        with output_lock(index):
            if done:
                logger.info("generate_on_cluster %s: shard(s) %s of %d written by an earlier run of this data set are "
                            "kept; computing the %d others", out, ", ".join(str(s[0]) for s in done), n_shards,
                            n_shards - len(done))
            todo = [s for s in shards if s not in done]
            futures = [client.submit(_shard_task, spec, str(out), s, workers, pure=False,
                                     key=f"vp-gen-{Path(out).name}-{s[0]}-of-{s[1]}-{uuid.uuid4().hex}") for s in todo]
            gather_or_one_line(client, futures, scheduler, [shard_path(out, s) for s in todo], "vp-gen")
            for s in shards:  # temporary files of writers killed with their worker
                remove_orphans(shard_path(out, s))
            write_shard_index(index, n_shards)
    finally:
        if owned:
            close_client(client)
    return Path(out)


def _expected_meta(spec: GenerationSpec) -> dict[str, Any]:
    """The attributes that tell a shard of ``spec`` (computed by this version) from any other."""
    import json

    from .._version import __version__
    from ..systems import get_system, system_meta

    system = get_system(spec.system, **spec.params)
    extra: dict[str, Any] = {}
    if spec.parameters:
        from .param_dists import check_parameters

        extra["parameter_dists"] = json.dumps(check_parameters(system, spec.parameters))
    return {**system_meta(system), **extra, "spec": spec.name, "dt": spec.dt, "t_end": float(spec.t[-1]),
            "method": spec.method, "rtol": spec.rtol, "atol": spec.atol, "seed": spec.seed, "sampler": spec.sampler,
            "sampler_args": json.dumps(spec.sampler_args), "vpintegrator_version": __version__}


def _finished_shard(path: Path, expected: dict[str, Any], shard: tuple[int, int]) -> bool:
    """Whether ``path`` is shard ``shard`` of the data set ``expected`` describes, complete (shards are
    renamed into place only when complete): the same code then computes the same bits, so it is kept."""
    from ._h5read import _open
    from ._attrs import _attrs_to_meta

    if not path.is_file() or path.is_symlink():
        return False
    try:
        with _open(path) as f:
            meta = _attrs_to_meta(f.attrs)
    except (OSError, VPIntegratorError, ValueError, KeyError):
        return False
    want = {**expected, "shard_index": shard[0], "shard_count": shard[1]}
    return all(_same(meta.get(k), v) for k, v in want.items())


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    try:
        return np.shape(a) == np.shape(b) and bool(np.all(np.asarray(a) == np.asarray(b)))
    except (TypeError, ValueError):
        return False


#: names of the errors by which a dask client learns that its scheduler or workers are gone
_LOSS = ("CommClosedError", "FutureCancelledError", "CancelledError", "KilledWorker", "TimeoutError",
         "StreamClosedError", "ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError")


def gather_or_one_line(client: Any, futures: list, scheduler: Any, files: list[Path], tool: str) -> list:
    """``client.gather(futures)``; a cluster lost meanwhile (its scheduler, or the workers a block kept dying
    on) is one line saying which of ``files`` were written (they are complete: shards are written
    atomically) and that the same command computes only the missing ones. A task's own error passes."""
    try:
        return client.gather(futures)
    except VPIntegratorError:
        raise
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt) or not _is_loss(err):
            raise
        written = [p for p in files if p.is_file()]
        address = scheduler if isinstance(scheduler, str) else getattr(getattr(client, "scheduler", None), "address",
                                                                        "the scheduler")
        raise VPIntegratorError(
            f"scheduler {address}: the dask cluster was lost during the run ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200] or 'no detail'}); {len(written)} of the {len(files)} shard(s) sent "
            f"were written whole, none half: run the same {tool} command again (with a running cluster) to compute "
            "only the missing ones", key="scheduler") from None


def _is_loss(err: BaseException) -> bool:
    names = {c.__name__ for c in type(err).__mro__}
    return bool(names & set(_LOSS)) or type(err).__module__.split(".")[0] in ("distributed", "tornado")


@contextlib.contextmanager
def quiet_dask_logs() -> Iterator[None]:
    """While a client runs: dask's own log records below CRITICAL are dropped (a lost scheduler is logged by
    its client as tracebacks on stderr, besides the one-line error the run raises)."""
    with contextlib.suppress(ImportError):  # (its loggers exist once it is imported)
        import distributed  # noqa: F401
    names = ["distributed", "tornado", *(n for n in list(logging.root.manager.loggerDict)
                                         if n.startswith(("distributed.", "tornado.")))]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def close_client(client: Any) -> None:
    """Close ``client``; with its scheduler gone this may itself fail or time out: never a traceback."""
    try:
        client.close(timeout=5)
    except BaseException as err:  # noqa: BLE001 - the run's own result or error is what counts
        if isinstance(err, KeyboardInterrupt):
            raise
