"""DistributedDataParallel plumbing for runs launched by ``torchrun`` (no process groups of our own).

``torchrun`` sets ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``; with ``WORLD_SIZE > 1`` we join the
default process group (NCCL on CUDA, Gloo on CPU). Without these variables everything here is a no-op
and training is a plain single process.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..errors import VPIntegratorError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size`` (``local_rank`` on its machine); ``enabled`` (ranks > 1)
    and ``is_main`` (rank 0) are set once from them: plain attributes, which the loop reads at every step."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized_here: bool = False
    enabled: bool = field(init=False)
    is_main: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", self.world_size > 1)
        object.__setattr__(self, "is_main", self.rank == 0)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise VPIntegratorError(f"environment variable {name} must be an integer; got {value!r}") from None


def setup(device_type: str) -> DistInfo:
    """Join the torchrun process group if ``WORLD_SIZE > 1`` (backend ``nccl`` on cuda, else ``gloo``)."""
    world_size = _env_int("WORLD_SIZE", 1)
    if world_size <= 1:
        return DistInfo()
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if not dist.is_available():
        raise VPIntegratorError("WORLD_SIZE > 1 but this torch build has no torch.distributed support")
    if dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, initialized_here=False)
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    return DistInfo(rank, world_size, local_rank, initialized_here=True)


def teardown(info: DistInfo) -> None:
    """Leave the process group if ``setup`` joined it. A rank that trained with DDP should then end with
    [`exit_rank`][vpintegrator.training.ddp.exit_rank], not the interpreter's own exit."""
    if info.initialized_here and dist.is_initialized():
        dist.destroy_process_group()


def exit_rank(code: int = 0) -> None:
    """End a rank that used DistributedDataParallel over Gloo now, after its files are written and the process
    group is destroyed: stdout and stderr are flushed and the interpreter's own teardown is skipped.

    Why: DDP keeps the C++ process group alive after ``destroy_process_group`` (its Gloo run-loop threads
    live on until exit, while a process group used without DDP is joined there). A run-loop thread drops
    its reference to the last collective's work after it signalled completion; when that drop comes late
    (a loaded machine) it falls into interpreter finalization, where the tensors' Python objects need the
    GIL, Python ends the thread with ``pthread_exit``, the forced unwind crosses a ``noexcept`` destructor
    and ``std::terminate`` aborts the rank ("terminate called without an active exception", SIGABRT) and
    with it a finished torchrun. Seen under load in 1 of 8 to 1 of 24 two-rank runs (gdb: the abort is in
    ``ProcessGroupGloo::runLoop`` -> ``~AsyncAllreduceWork`` -> ``take_gil`` during ``Py_FinalizeEx``).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def all_reduce(tensor: torch.Tensor, info: DistInfo, op: str = "sum") -> torch.Tensor:
    """In-place all-reduce (``sum`` or ``max``) across ranks; identity in a single process."""
    if info.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return tensor
