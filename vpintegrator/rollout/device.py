"""The device rollout engine: a model's rollout whose states and metrics stay on the model's device.

The host engine ([`stream_rollout`][vpintegrator.rollout.engine.stream_rollout]) brings every block of steps back as
float64 NumPy and computes the metrics there. [`device_stream_rollout`][vpintegrator.rollout.device.device_stream_rollout] keeps the rollout on the
model's device (a GPU, or the CPU for testing):

- the windows stay a tensor in the model's dtype; one model call (``advance`` new states) is eager (or
  ``torch.compile`` under ``fast_step = "compile"``, as in [`ModelStep`][vpintegrator.rollout.steps.ModelStep]), or on CUDA a
  ``torch.cuda.CUDAGraph`` of one window advance captured for the static (n_traj, seq_len, dim) shape
  ([`DeviceStepper`][vpintegrator.rollout.device.DeviceStepper]; eager where capture fails or does not reproduce the model);
- each block of ``chunk_steps`` steps (blocks start at multiples of ``chunk_steps``, as in the host engine;
  the rollout core's block loop, [`run_blocks`][vpintegrator.stepping.run_blocks], as in the host engine)
  is cast to float64 there, failures are marked as the host engine marks them (the first step that is not
  finite or has ‖z‖ > blowup × ‖z_0‖; NaN from then on; the row restarts from its first window), and its
  metrics are computed there with the very functions the host engine uses
  ([`vpintegrator.metrics.block_metrics`][vpintegrator.metrics.block_metrics]: relative error against the reference block, moved to the
  device block by block; the system's invariants; ``log|det J|`` of the window maps in float64), all
  without a host-device synchronisation;
- the block (states and metrics, laid out field after field in one buffer) goes to the host in one copy
  and then to the sink. On CUDA the buffers are doubled and the copy (pinned memory, ``non_blocking``, its
  own stream) and the reference upload (its own stream) overlap the next block's compute, and the sink (the
  HDF5 writes) runs while the GPU computes.

The numbers are the host engine's: the same model calls on the same windows in the same dtype, the same
metric formulas in float64 (tests/test_device_rollout.py compares whole rollout files).
``run_rollouts`` uses this engine for models when [`use_device_engine`][vpintegrator.rollout.config.use_device_engine] says so (the ``engine`` key).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable

import numpy as np

from ..fastpath import check_fast_step, verified
from ..clock import PROCESS_CPU, process_cpu
from ..errors import VPIntegratorError
from .config import use_device_engine  # noqa: F401 (re-exported: written beside the engine key)
from ..stepping import Stage, block_schedule, failure_limit, next_window, run_blocks
from .engine import BLOWUP, CHUNK_STEPS, RolloutStats, _check, check_memory
from .steps import ModelStep

__all__ = ["DeviceStepper", "device_stream_rollout", "use_device_engine"]

#: a device rollout is refused when its estimated device memory exceeds this fraction of the free memory
DEVICE_MEMORY_FRACTION = 0.8
#: temporaries of one block's metrics, in float64 copies of the block's states (estimate)
TEMPORARIES = 4


class DeviceStepper:
    """A model's windows advanced on its device, one model call at a time.

    Parameters
    ----------
    step_map : ModelStep
        The model, its device, dtype and windowing (``seq_len``, ``advance``, ``overlap``).
    window0 : array, shape (n_traj, seq_len, dim)
        The first windows (float64; cast to the model's dtype).
    jit : bool or str
        A ``fast_step`` name (True: ``"auto"``, False: ``"off"``). On CUDA, anything but ``"off"``: capture one
        window advance in a CUDA graph (warm-up on a side stream, then checked against the eager model on the
        first windows; eager if either fails). On the CPU: ``"compile"`` is the ``torch.compile`` of
        [`ModelStep.torch_runner`][vpintegrator.rollout.steps.ModelStep.torch_runner]; the others are eager.

    Notes
    -----
    ``runner`` says which runs (``"cuda_graph"``, ``"torch.compile"``, ``"eager"``);
    [`call`][vpintegrator.rollout.device.DeviceStepper.call] is one model call, [`produce_into`][vpintegrator.rollout.device.DeviceStepper.produce_into] the next states of a block.
    """

    #: set by __init__ (declared for type checkers)
    seq_len: int
    advance: int
    runner: str

    def __init__(self, step_map: ModelStep, window0, jit: bool | str = True) -> None:
        import torch

        self.step_map = step_map
        self.seq_len, self.advance = step_map.seq_len, step_map.advance
        self.device = step_map.device
        # in the model's coordinates (its normalisation, ModelStep.to_model); produce_into maps them back
        w = torch.as_tensor(step_map.to_model(np.asarray(window0, dtype=np.float64)))
        self.init = w.to(device=self.device, dtype=step_map.dtype)  # (n_traj, seq_len, dim)
        self.window = self.init.clone()  # the graph's static input: always updated in place
        # a periodic normalisation wraps every call's window (Normalisation.call; the model itself otherwise)
        call = (lambda fn: fn) if step_map.normalisation is None else step_map.normalisation.call
        self.fn, self.runner = call(step_map.model), "eager"
        self._graph = self._out = None
        fast_step = check_fast_step(jit)
        if fast_step != "off" and self.device.type == "cuda":
            self._capture()
        else:
            fn, self.runner = step_map.torch_runner(self.init, fast_step)
            self.fn = call(fn)
        # states produced but not yet handed out; it starts with the first window (steps 0 .. seq_len - 1)
        self._stage = Stage(self.init.clone(), self.seq_len)

    def _advance(self):
        """One model call: the next ``advance`` states (n_traj, advance, dim); the window moves on."""
        import torch

        with torch.no_grad():
            pred = self.fn(self.window)[:, : self.advance]
            self.window.copy_(next_window(self.window, pred, self.seq_len))
        return pred

    def _capture(self) -> None:
        """The CUDA graph of ``_advance`` (the torch docs' recipe), kept when it reproduces eager on the first
        windows (``vpintegrator.fastpath.verified``; eager where capture raises)."""
        import torch

        def capture():  # the graph, captured; as a fast path: first windows -> its first states
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up: lazy initialisation and cuBLAS workspaces
                for _ in range(3):
                    self._advance()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.window.copy_(self.init)
            graph = torch.cuda.CUDAGraph()
            # captured on the warm-up's stream (its cuBLAS handle and workspace exist), not run: the
            # window is still the first one
            with torch.cuda.graph(graph, stream=side):
                out = self._advance()
            captured[:] = graph, out

            def replay(window):  # the graph reads its static window, which is ``window`` (the first one)
                graph.replay()
                return out
            return replay

        captured: list = []
        tol = 64 * torch.finfo(self.init.dtype).eps
        with torch.no_grad():
            check = verified(capture, lambda window: self.fn(window)[:, : self.advance], [self.init],
                             rtol=tol, atol=tol, what="the CUDA graph of a model step")
        self.window.copy_(self.init)
        if check.fast:
            self._graph, self._out = captured
            self.runner = "cuda_graph"

    def call(self):
        """One model call: the next ``advance`` states (n_traj, advance, dim), valid until the next call."""
        if self._graph is not None:
            self._graph.replay()
            return self._out
        return self._advance()

    def produce_into(self, out) -> None:
        """The next ``n = out.shape[1]`` states into ``out`` (n_traj, n, dim) (cast to its dtype).

        Calls the model as often as needed; states of the last call beyond ``n`` are kept for the next
        block, so blocks need not be multiples of ``advance``.
        """
        import torch

        n, adv, stage = out.shape[1], self.advance, self._stage
        calls = max(0, -(-(n - stage.n) // adv))
        stage.reserve(stage.n + calls * adv)
        for _ in range(calls):
            stage.put(self.call())
        with torch.no_grad():
            head = stage.head(n)
            out.copy_(head if self.step_map.normalisation is None else self.step_map.from_model(head.to(out.dtype)))
        stage.drop(n)

    def restart(self, rows) -> None:
        """Rows where the boolean tensor ``rows`` is True go on from their first window (no sync)."""
        import torch

        self.window.copy_(torch.where(rows[:, None, None], self.init, self.window))


class _Layout:
    """A block's fields (states and per-step metrics, then per-map ones) one after the other in one flat
    float64 buffer, each field contiguous for the block's actual length, so one copy moves the block."""

    def __init__(self, n_traj: int, block: int, step_fields: list, map_fields: list, max_maps: int) -> None:
        self.n_traj = n_traj
        self.fields = []  # (key, offset, per-state width, per step or per map)
        offset = 0
        for fields, length in ((step_fields, block), (map_fields, max_maps)):
            for key, width in fields:
                self.fields.append((key, offset, width, fields is step_fields))
                offset += n_traj * length * width
        self.size = offset

    def views(self, flat, n: int, m: int) -> dict[str, Any]:
        out = {}
        for key, offset, width, per_step in self.fields:
            length = n if per_step else m
            shape = (self.n_traj, length, width) if width > 1 else (self.n_traj, length)
            out[key] = flat[offset : offset + self.n_traj * length * width].view(shape)
        return out


def _check_device_memory(device, need: float, n_traj: int, block: int) -> None:
    import torch

    free = torch.cuda.mem_get_info(device)[0]
    if need > DEVICE_MEMORY_FRACTION * free:
        fit = max(1, int(block * DEVICE_MEMORY_FRACTION * free / need))
        raise VPIntegratorError(
            f"chunk_steps: a device rollout of {n_traj} trajectories in blocks of {block} steps needs about "
            f"{need / 2**30:.1f} GiB on {device}, {free / 2**30:.1f} GiB free; give chunk_steps <= {fit} or "
            "fewer trajectories",
            key="chunk_steps",
        )


def device_stream_rollout(
    step_map: ModelStep,
    window0: np.ndarray,
    dt: float,
    n_steps: int,
    sink: Callable[[int, dict], None],
    *,
    reference: Any = None,
    metrics=None,
    volume=None,
    t0: float = 0.0,
    chunk_steps: int = CHUNK_STEPS,
    blowup: float = BLOWUP,
    jit: bool | str | None = None,
) -> RolloutStats:
    """Iterate a model to step ``n_steps`` on its device, states and metrics there, each block to ``sink``.

    Parameters are those of [`stream_rollout`][vpintegrator.rollout.engine.stream_rollout], except

    step_map : ModelStep
        The model (a device engine runs models only).
    sink : callable
        ``sink(k0, block)`` after each block of steps ``k0 .. k0 + n − 1``; ``block`` maps ``"y"`` (n_traj,
        n, dim) float64 (NaN after a failure) and every key of [`vpintegrator.metrics.block_metrics`][vpintegrator.metrics.block_metrics]
        (``"rel_error"``, ``"invariant/<name>"``, ``"maps"``, ``"log_det_J"``, ``"cum_log_det_J"``, as
        computed) to NumPy arrays, valid during the call only (copy what you keep).
    reference : array-like (n_traj, >= n_steps + 1, dim), optional
        The reference states (an HDF5 dataset or an array), read and moved to the device block by block;
        needed for the relative error.
    metrics : TrajectoryMetricsStream, optional
        Fed each block on the device (float64 states, the reference block, the times); its running
        per-trajectory values stay there until ``metrics.summary()``.
    volume : VolumeStream, optional
        Fed each block on the device; its ``log_det_fn`` must take tensors (``step_map.log_abs_det_jacobian``
        does).
    jit : bool or str, optional
        See [`DeviceStepper`][vpintegrator.rollout.device.DeviceStepper]; default ``step_map.fast_step``.

    Returns
    -------
    RolloutStats
        ``failed_step``; ``seconds``: the model steps only (CUDA-event time on CUDA); ``meta`` with
        ``engine = "device"`` and the ``runner`` that ran.
    """
    import torch

    from ..metrics import block_metrics

    if not isinstance(step_map, ModelStep):
        raise VPIntegratorError(
            f"step_map: the device engine runs models (a ModelStep); got {type(step_map).__name__}; roll "
            "classical integrators out with stream_rollout"
        )
    w0 = _check(step_map, window0, n_steps, chunk_steps, blowup, dt, t0)
    if not callable(sink):
        raise VPIntegratorError(f"sink must be a callable sink(k0, block); got {type(sink).__name__}")
    n_traj, dim, n_steps = w0.shape[0], step_map.dim, int(n_steps)
    if reference is not None:
        shape = tuple(reference.shape)
        if len(shape) != 3 or shape[0] != n_traj or shape[1] < n_steps + 1 or shape[2] != dim:
            raise VPIntegratorError(
                f"reference has shape {shape}; expected (n_traj, >= n_steps + 1, dim) = ({n_traj}, >= {n_steps + 1}, {dim})"
            )
    device = step_map.device
    cuda = device.type == "cuda"
    block = min(int(chunk_steps), n_steps + 1)
    step_fields = [("y", dim)]
    if metrics is not None:
        step_fields += [("rel_error", 1)] if reference is not None else []
        step_fields += [(f"invariant/{name}", 1) for name in metrics.names]
    map_fields = [("log_det_J", 1), ("cum_log_det_J", 1)] if volume is not None else []
    layout = _Layout(n_traj, block, step_fields, map_fields, block // step_map.advance + 2)
    slots = 2 if cuda else 1  # CUDA: block k goes to the host while block k + 1 is computed
    states = n_traj * block * dim * 8
    ref_bytes = states if reference is not None else 0
    host_need = slots * (layout.size * 8 + ref_bytes) + (0 if cuda else TEMPORARIES * states)
    check_memory(host_need, f"a device rollout of {n_traj} trajectories in blocks of {block} steps",
                 "give a smaller chunk_steps or fewer trajectories", key="chunk_steps")
    if cuda:
        stage = n_traj * (block + step_map.seq_len + step_map.advance) * dim * step_map.dtype.itemsize
        _check_device_memory(device, stage + slots * (layout.size * 8 + ref_bytes) + TEMPORARIES * states,
                             n_traj, block)

    limit = torch.as_tensor(failure_limit(w0, blowup), device=device)  # the host engine's limit, to the bit
    failed = torch.full((n_traj,), -1, dtype=torch.int64, device=device)
    t = torch.as_tensor(float(t0) + float(dt) * np.arange(n_steps + 1), device=device)

    tic = process_cpu()  # the set-up's CPU time (a trace, a graph capture): every thread's
    stepper = DeviceStepper(step_map, w0, step_map.fast_step if jit is None else jit)
    if cuda:
        torch.cuda.synchronize(device)
    setup_seconds = process_cpu() - tic

    packs = [torch.empty(layout.size, dtype=torch.float64, device=device) for _ in range(slots)]
    hosts = [torch.empty(layout.size, dtype=torch.float64, pin_memory=True) for _ in range(slots)] if cuda else packs
    refs = [torch.empty(n_traj * block * dim, dtype=torch.float64, device=device) for _ in range(slots if ref_bytes else 0)]
    staging = [torch.empty(n_traj * block * dim, dtype=torch.float64, pin_memory=True) for _ in refs] if cuda else refs
    blocks = block_schedule(0, n_steps + 1, block)  # the output blocks, the first window included
    step_seconds: list = []  # CPU: process CPU seconds per block; CUDA: (start, end) events per block
    wall_seconds: list[float] = []  # CPU: wall seconds per block (beside the CPU time)
    if cuda:
        current = torch.cuda.current_stream(device)
        copier, uploader = torch.cuda.Stream(device), torch.cuda.Stream(device)
    computed: list = [None] * slots
    copied: list = [None] * slots
    uploaded: list = [None] * slots

    def upload(i: int) -> None:
        """The reference of block i into ``refs[i % slots]`` (on CUDA: its own stream, pinned staging)."""
        k0, n = blocks[i]
        s = i % slots
        if cuda and uploaded[s] is not None:
            uploaded[s].synchronize()  # the staging buffer's previous copy is done
        np.copyto(staging[s][: n_traj * n * dim].numpy().reshape(n_traj, n, dim), reference[:, k0 : k0 + n])
        if cuda:
            with torch.cuda.stream(uploader):
                if computed[s] is not None:
                    uploader.wait_event(computed[s])  # the block that read this buffer is done
                refs[s][: n_traj * n * dim].copy_(staging[s][: n_traj * n * dim], non_blocking=True)
                uploaded[s] = uploader.record_event()

    def produce(i: int, k0: int, n: int):
        """The states of block i, into its pack ``packs[i % slots]`` (the failure rule follows in run_blocks)."""
        s = i % slots
        if cuda:
            if copied[s] is not None:
                current.wait_event(copied[s])  # the pack's previous block reached the host
            if ref_bytes:
                current.wait_event(uploaded[s])
        y = layout.views(packs[s], n, 0)["y"]
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(current)
            stepper.produce_into(y)
            end.record(current)
            step_seconds.append((start, end))
        else:
            tic, wall_tic = process_cpu(), time.perf_counter()  # torch's intra-op threads do the work: all of them
            stepper.produce_into(y)
            step_seconds.append(process_cpu() - tic)
            wall_seconds.append(time.perf_counter() - wall_tic)
        return y

    pending = None

    def finish(i: int, k0: int, y) -> None:
        """Block i's metrics into its pack, the pack to the host, and the block (or on CUDA the one before,
        while this one computes) to the sink."""
        nonlocal pending
        n, s = y.shape[1], i % slots
        ref = refs[s][: n_traj * n * dim].view(n_traj, n, dim) if ref_bytes else None
        computed_block = block_metrics(metrics, volume, t[k0 : k0 + n], y, ref)
        maps = computed_block.pop("maps", None)
        m = computed_block["log_det_J"].shape[1] if volume is not None else 0
        views = layout.views(packs[s], n, m)
        for key, value in computed_block.items():
            views[key].copy_(value)
        if cuda:
            computed[s] = current.record_event()
            with torch.cuda.stream(copier):
                copier.wait_event(computed[s])
                hosts[s].copy_(packs[s], non_blocking=True)
                copied[s] = copier.record_event()
        if ref_bytes and i + 1 < len(blocks):
            upload(i + 1)  # the next reference block is read while this one computes
        if not cuda:
            deliver(i, maps, m)
            return
        if pending is not None:
            deliver(*pending)  # the previous block is written while this one computes
        pending = (i, maps, m)

    def deliver(i: int, maps, m: int) -> None:
        k0, n = blocks[i]
        s = i % slots
        if cuda:
            copied[s].synchronize()
        out = {key: v.numpy() for key, v in layout.views(hosts[s], n, m).items()}
        if maps is not None:
            out["maps"] = maps
        sink(k0, out)

    # not inference_mode: the volume's Jacobians need autograd; on CUDA, the model's device is the current one
    with torch.no_grad(), (torch.cuda.device(device) if cuda else contextlib.nullcontext()):
        if ref_bytes:
            upload(0)
        # the rollout core's block loop: the states, the failure rule (the host engine's), the restarts
        failed = run_blocks(blocks, produce, finish, limit=limit, failed=failed, restart=stepper.restart)
        if pending is not None:
            deliver(*pending)
        failed_step = failed.cpu().numpy()
    if cuda:
        torch.cuda.synchronize(device)
        seconds = sum(a.elapsed_time(b) for a, b in step_seconds) / 1e3
        clock = "cuda_events"  # device time between CUDA events: the GPU's own clock, not bent by the host's load
    else:
        seconds, clock = float(sum(step_seconds)), PROCESS_CPU
    meta = {
        **step_map.describe(), "runner": stepper.runner, "engine": "device", "dt": float(dt), "t0": float(t0),
        "n_traj": n_traj, "blowup": float(blowup), "setup_seconds": setup_seconds, "seconds": seconds,
        "seconds_per_step": seconds / max(1, n_steps), "clock": clock,
        "wall_seconds": float(sum(wall_seconds)) if wall_seconds else math.nan,
    }
    return RolloutStats(failed_step=failed_step, seconds=seconds, setup_seconds=setup_seconds, n_steps=n_steps, meta=meta)
