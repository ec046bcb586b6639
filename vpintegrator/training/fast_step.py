"""The fast training step (``fast_step``): a torch optimiser's whole step replayed from one CUDA graph.

The eager step of a small model is hundreds of tiny kernels, each launched from Python (~1300 per step of
the paper VPT before the fused forward, ~350 after): on a GPU the launches, not the arithmetic, set the
speed. :class:`GraphStep` records one step (gather the batch's windows by index, forward, loss, backward,
optimiser update) in a ``torch.cuda.CUDAGraph`` once, then replays it with one launch per step:

- static buffers: the batch's window numbers are copied into a device tensor the graph reads; the data set
  is already resident on the device (:mod:`vpintegrator.data.windows`), the loss is a device scalar the
  graph writes (read by the loop once per epoch);
- the optimiser runs capturable (its step count on the device) with the learning rate a device tensor, so
  the schedule, stepped on the host between replays, writes the new rate into it (one small copy);
- a batch of another size (the last, partial batch of an epoch) gets a graph of its own; at most two;
- before capturing, a few warm-up steps run eagerly on a side stream (as the CUDA-graph recipe needs: lazy
  initialisation, cuBLAS workspaces, the optimiser's state) and the parameters and optimiser state are then
  put back exactly as they were, so the run's trajectory is the eager path's (to float rounding: the
  capturable optimiser reads lr as a float32 tensor where the eager one takes a Python float).

``fast_step = "compile"`` first passes the loss through ``torch.compile`` (inductor; on CUDA
``max-autotune-no-cudagraphs``, then captured as above; on the CPU compiled only). The compiled path uses
the layers' unfused forward (inductor fuses it itself).

Where a graph cannot be used (CPU, DDP under torchrun, optimisers without a capturable step) ``auto``
falls back to the eager step; asking for ``graph`` there is an error that says why. Without capture (the
CPU) the same :class:`GraphStep` runs its body directly: that is how the tests check it on machines
without a GPU (the warm-up, the restore, the static buffers, the partial batch), and CUDA tests check the
capture.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import VPIntegratorError

__all__ = ["FAST_STEPS", "GRAPH_OPTIMIZERS", "GraphStep", "FastStep", "resolve_fast_step", "portable_state"]

#: the values of the ``fast_step`` config key
FAST_STEPS = ("auto", "off", "graph", "compile")
#: optimisers whose step can be captured (a ``capturable`` step; their fresh state is all zeros)
GRAPH_OPTIMIZERS = ("adam", "adamw", "rmsprop")
#: eager steps before a capture (the torch CUDA-graph recipe's side-stream warm-up)
WARMUP_STEPS = 3


def _graph_obstacle(optimizer: str, device: torch.device, distributed: bool) -> str | None:
    """Why a CUDA graph cannot run this training step (None when it can)."""
    if device.type != "cuda":
        return f"a CUDA device (the run is on {device})"
    if optimizer not in GRAPH_OPTIMIZERS:
        return f"one of the optimizers {', '.join(GRAPH_OPTIMIZERS)} (got {optimizer!r})"
    if distributed:
        return "a single process (DDP under torchrun all-reduces gradients between ranks)"
    return None


def resolve_fast_step(mode: str, optimizer: str, device: torch.device, distributed: bool) -> str:
    """What runs: ``"off"`` (the eager step), ``"graph"`` or ``"compile"`` (compiled, and graph-captured where
    a graph can run). ``auto`` is ``graph`` where a graph can run, else ``off``; ``graph`` where it cannot,
    and ``compile`` with ``lm``/``lbfgs`` or under DDP, raise a one-line error naming ``fast_step``."""
    if mode not in FAST_STEPS:
        raise VPIntegratorError(f"fast_step must be one of {', '.join(FAST_STEPS)}; got {mode!r}", key="fast_step")
    obstacle = _graph_obstacle(optimizer, device, distributed)
    if mode == "auto":
        return "off" if obstacle is not None else "graph"
    if mode == "graph" and obstacle is not None:
        raise VPIntegratorError(
            f"fast_step = 'graph' needs {obstacle}; set fast_step = 'auto' (graph where possible) or 'off'",
            key="fast_step",
        )
    if mode == "compile" and (optimizer in ("lm", "lbfgs") or distributed):
        what = "DDP (torchrun)" if distributed else f"optimizer {optimizer!r}"
        raise VPIntegratorError(
            f"fast_step = 'compile' compiles one optimiser step of a single process, not {what}; set fast_step "
            "= 'auto' or 'off'", key="fast_step",
        )
    return mode


def portable_state(state: dict) -> dict:
    """An optimiser or scheduler ``state_dict`` as the eager path writes it: a learning rate held in a device
    tensor (capturable step) becomes its float, ``capturable`` goes back to False, so that ``last.pt`` resumes
    on any device, graph or not."""
    out = dict(state)
    if "param_groups" in out:
        groups = []
        for group in out["param_groups"]:
            group = dict(group)
            if isinstance(group.get("lr"), torch.Tensor):
                group["lr"] = float(group["lr"])
            if group.get("capturable"):
                group["capturable"] = False
            groups.append(group)
        out["param_groups"] = groups
    if isinstance(out.get("_last_lr"), list):
        out["_last_lr"] = [float(v) if isinstance(v, torch.Tensor) else v for v in out["_last_lr"]]
    return out


class GraphStep:
    """One optimiser step for index batches of one shape, from static buffers; replayed from a CUDA graph
    when ``capture`` (else its body runs eagerly each call, with the same buffers).

    ``batch_loss(index)`` gathers the windows ``index`` and returns their loss: a scalar, or one loss per
    ensemble member (then their sum is back-propagated: member k's parameters get its own loss's gradient).
    Calling the step with window numbers returns that loss, detached, as a device tensor that the next call
    overwrites (copy or consume it first).
    """

    def __init__(self, batch_loss: Callable[[torch.Tensor], torch.Tensor], optimizer: torch.optim.Optimizer,
                 shape: tuple[int, ...], device: torch.device, capture: bool) -> None:
        self.batch_loss, self.optimizer = batch_loss, optimizer
        self.index = torch.zeros(shape, dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.loss: torch.Tensor | None = None
        self._warm_up(device)
        if capture:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.loss = self._body()

    def _body(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)  # captured: backward then writes fresh grads each replay
        loss = self.batch_loss(self.index)
        (loss.sum() if loss.dim() else loss).backward()
        self.optimizer.step()
        return loss.detach()

    def _warm_up(self, device: torch.device) -> None:
        """A few eager steps (on a side stream on CUDA), then parameters and optimiser state put back."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        with torch.no_grad():
            saved = [p.detach().clone() for p in params]
            state = {p: {k: v.clone() for k, v in self.optimizer.state[p].items() if isinstance(v, torch.Tensor)}
                     for p in params if self.optimizer.state.get(p)}
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_STEPS):
                    self._body()
            torch.cuda.current_stream(device).wait_stream(stream)
        else:
            for _ in range(WARMUP_STEPS):
                self._body()
        with torch.no_grad():
            for p, value in zip(params, saved):
                p.copy_(value)
                for key, v in self.optimizer.state[p].items():
                    if not isinstance(v, torch.Tensor):
                        continue
                    if p in state:
                        v.copy_(state[p][key])
                    else:  # a fresh state of these optimisers is all zeros (step count included)
                        v.zero_()

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        self.index.copy_(index, non_blocking=True)
        if self.graph is None:
            return self._body()
        self.graph.replay()
        return self.loss


class FastStep:
    """The trainer's fast step: one :class:`GraphStep` per index shape met (the full batch, the last partial
    one), sharing the model, the optimiser and its state; ``mode`` from :func:`resolve_fast_step`."""

    def __init__(self, mode: str, batch_loss: Callable[[torch.Tensor], torch.Tensor],
                 optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.mode, self.device, self.optimizer = mode, device, optimizer
        self.capture = device.type == "cuda"
        if self.capture:
            for group in optimizer.param_groups:  # the step count and lr live on the device
                group["capturable"] = True
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        if mode == "compile":
            batch_loss = torch.compile(batch_loss, dynamic=False,
                                       mode="max-autotune-no-cudagraphs" if device.type == "cuda" else None)
        self.batch_loss = batch_loss
        self.steps: dict[tuple[int, ...], GraphStep] = {}

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        shape = tuple(index.shape)
        step = self.steps.get(shape)
        if step is None:
            step = self.steps[shape] = GraphStep(self.batch_loss, self.optimizer, shape, self.device, self.capture)
        return step(index)
