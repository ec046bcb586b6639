"""Count the aten ops one training step dispatches, per phase (CPU, no GPU needed): a count, not a timing,
so tests can hold the step's overhead to a number (``tests/test_op_count.py``) and ``scripts/count_ops.py``
can print it.

``make_trainer`` builds the real ``vpintegrator.training.loop.Trainer`` (the paper's
hyper-parameters for the model, Adam, exponential schedule per step) on a small synthetic rigid-body-like
data set; ``count_step`` runs one warm-up step (Adam's lazy state), then counts with a
``TorchDispatchMode`` every aten op of one more step of ``Trainer._step`` plus the epoch loop's per-step
bookkeeping. Phases follow the loop's ``label`` regions: gather, forward (the model and the loss), backward,
optimizer, schedule (the LR scheduler and the step counter) and loop (the per-step loss accumulation).

Ops are counted at the dispatch level a kernel launch happens on (a ``TorchDispatchMode`` sees the ops
after autograd and decomposition of CompositeImplicit ops): a proxy for per-step overhead on CPU and
kernel launches on a GPU. With ``fast_step="graph"`` the graph step is built (uncaptured, on the CPU), its
replay stubbed out, and the ops around it counted (the batch's index copy, the schedule, the loop's
bookkeeping); the replay itself is one launch.
"""

from __future__ import annotations

import collections
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from .single import SingleSteps

__all__ = ["PHASES", "OpCounter", "make_trainer", "count_step", "single_steps"]

PHASES = ("gather", "forward", "backward", "optimizer", "schedule", "loop")


class OpCounter(TorchDispatchMode):
    """Counts dispatched ops per ``phase`` (set from outside)."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "other"
        self.ops: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        if not name.startswith("_record_function"):  # the profiler's region markers are not work
            self.ops[self.phase][str(func)] += 1
        return func(*args, **(kwargs or {}))

    def counts(self) -> dict[str, int]:
        return {p: sum(self.ops[p].values()) for p in PHASES if p in self.ops} | (
            {"other": sum(self.ops["other"].values())} if "other" in self.ops else {})


def make_trainer(model: str, batch_size: int, dtype: str, tmp: str, seed: int = 0, fast_step: str | None = None):
    """A single-process Trainer of the paper's ``model`` on synthetic data with >= batch_size windows; with
    ``fast_step`` (``off`` or ``graph``) its step path is set to that (``graph`` runs uncaptured on the CPU)."""
    from ..data.trajectory_files import write_trajectories
    from ..data.trajectories import Trajectories
    from .config import TrainConfig
    from .ddp import DistInfo
    from .loop import Trainer
    from .plan import build_plan

    n_states = 101
    n_traj = max(4, -(-batch_size // (n_states - 6)) + 1)
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(n_traj, n_states, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    path = write_trajectories(Path(tmp) / "data.h5", Trajectories(y=y, t=np.arange(n_states) * 0.1))
    config = TrainConfig.from_dict(dict(
        data=[str(path)], model={"name": model}, epochs=1, batch_size=batch_size, val_fraction=0.0,
        device="cpu", dtype=dtype, seed=1234, optimizer="adam", lr=1e-2, lr_min=1e-6,
        scheduler="exponential", schedule_per="step", out=str(Path(tmp) / "run"),
    ))
    trainer = Trainer(build_plan(config), DistInfo(), torch.device("cpu"), None, False)
    trainer.stop = type("NoStop", (), {"requested": False})()  # run() installs the Ctrl-C handler
    if fast_step is not None:  # the step path the config would give on CUDA (graph: uncaptured here)
        from .fast_step import FastStep

        steps = single_steps(trainer)
        steps.fast_mode = fast_step
        steps.fast = None if fast_step == "off" else FastStep(fast_step, steps._window_loss, steps.optimizer,
                                                              trainer.device)
    return trainer


def single_steps(trainer) -> SingleSteps:
    """The single-model step strategy of ``trainer`` (the one the counts are of)."""
    from .single import SingleSteps

    steps = trainer.steps
    if not isinstance(steps, SingleSteps):
        raise TypeError("op counts are of a single model's step, not an ensemble's")
    return steps


class _NoReplay:
    """Stands in for a captured graph: its replay is one launch, not counted as aten ops."""

    def replay(self) -> None:
        pass


def count_step(trainer) -> OpCounter:
    """Count the ops of one ``Trainer._step`` (after a warm-up step) and the loop's per-step bookkeeping."""
    from . import single as loop_mod  # the single-model step strategy's labels

    steps = single_steps(trainer)
    order = steps.sampler.epoch_order()
    bs = steps.sampler.batch_size
    idx = order[:bs]
    steps._last_global_batch = idx
    losses = torch.zeros(4, dtype=torch.float64)
    loss_acc = torch.zeros((), dtype=torch.float64)
    steps._step(idx)  # warm-up: Adam's state is created lazily on its first step
    if steps.fast is not None:  # graph path: the host's work around one replay
        for step in steps.fast.steps.values():
            step.loss, step.graph = step._body(), _NoReplay()
        for group in steps.optimizer.param_groups:  # as on CUDA: the schedule writes lr into a tensor
            group["lr"] = torch.tensor(float(group["lr"]))

    counter = OpCounter()
    phase_of = {"vp/gather": "gather", "vp/forward": "forward", "vp/backward": "backward",
                "vp/optimizer": "optimizer", "vp/fast_step": "gather"}  # graph path: the index copy
    after = {"gather": "forward", "forward": "forward", "backward": "backward", "optimizer": "schedule"}
    original = loop_mod.label

    @contextlib.contextmanager
    def phase_label(name: str):
        counter.phase = phase_of.get(name, counter.phase)
        with original(name):
            yield
        # unlabelled ops after a region (after the graph path's step: the schedule)
        counter.phase = "schedule" if name == "vp/fast_step" else after.get(counter.phase, counter.phase)

    loop_mod.label = phase_label
    try:
        with counter:
            counter.phase = "forward"  # zero_grad and anything before the gather
            reported, _, _ = steps._step(idx)
            counter.phase = "loop"
            losses[1] = reported  # what the loop's epoch (Trainer._train_epoch) does per step
            loss_acc += reported.double()
    finally:
        loop_mod.label = original
    return counter
