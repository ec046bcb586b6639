"""The fast training step (``fast_step``): a torch optimiser's whole step replayed from one CUDA graph.

The eager step of a small model is hundreds of tiny kernels, each launched from Python (~1300 per step of
the paper VPT before the fused forward, ~350 after): on a GPU the launches, not the arithmetic, set the
speed. ``GraphStep`` records one step (gather the batch's windows by index, forward, loss, backward,
optimiser update) in a ``torch.cuda.CUDAGraph`` once, then replays it with one launch per step:

- static buffers: the batch's window numbers are copied into a device tensor the graph reads; the data set
  is already resident on the device (``vpintegrator.data.windows``), the loss is a device scalar the
  graph writes (read by the loop once per epoch);
- the optimiser runs capturable (its step count on the device) with the learning rate a device tensor, so
  the schedule, stepped on the host between replays, writes the new rate into it (one small copy). Both
  are held in the parameters' dtype (``scalar_dtype``: float64 for a float64 group): torch makes them
  float32, and its capturable Adam then takes the bias corrections 1 − βᵗ in float32 from the float32 step
  count, ~6e-8 off the eager step's Python-float arithmetic at every step (the CUDA fused kernel, the
  package's default Adam, reads lr from a float32 pointer whatever the tensor's dtype, and the step count
  as float32 too); over 80 float64 steps of the paper VPT that grew to 0.134 relative in the weights (H200,
  2026-11-26), where the eager step computes in double. A float64 group therefore runs torch's capturable
  foreach update in the graph, not the fused kernel (``capturable_state``);
- a batch of another size (the last, partial batch of an epoch) gets a graph of its own; at most two;
- before capturing, a few warm-up steps run eagerly on a side stream (as the CUDA-graph recipe needs: lazy
  initialisation, cuBLAS workspaces, the optimiser's state) and the parameters and optimiser state are then
  put back exactly as they were, so the run's trajectory is the eager path's (to float rounding: the
  capturable optimiser's arithmetic is ordered differently; in float32 its lr tensor is the float32 value
  of the eager step's Python float).

``fast_step = "compile"`` first passes the loss through ``torch.compile`` (inductor, its default mode; on CUDA
then captured as above; on the CPU compiled only). Traced by the compiler,
the models run their layers in component form (``vpintegrator.nn.componentwise``: the small matrix products as
multiply-adds), which inductor fuses into a few loops, forward and backward. The build is paid once per machine:
inductor's caches (its FX graph cache, the AOTAutograd cache, autotuning results and the Triton kernels) go to
``compile_cache_dir()`` (``TORCHINDUCTOR_CACHE_DIR`` when set, else ``vpintegrator/inductor`` in the user's cache
directory), where the next run of the same step finds them. Each step's build (compilation, warm-up, capture
and the check below) is timed apart from the steps: ``FastStep.build_seconds``, one INFO line per build, and
``fast_step_build_seconds`` in ``summary.json``.

Where a graph cannot be used (CPU, DDP under torchrun, optimisers without a capturable step) ``auto``
falls back to the eager step; asking for ``graph`` there is an error that says why. Without capture (the
CPU) the same ``GraphStep`` runs its body directly: that is how the tests check it on machines
without a GPU (the warm-up, the restore, the static buffers, the partial batch), and CUDA tests check the
capture.

``auto`` never fails where ``off`` would work. The first step of each captured (or compiled) batch shape is
checked: an eager step runs from a copy of the parameters and optimiser state, the state is put back, the
graph is replayed, and the two results (loss, parameter update) must agree to ``AGREEMENT_RTOL`` of the
parameters' dtype; the graph's result is kept. If the set-up (warm-up, compilation, capture) raises or the
check fails, ``auto`` puts parameters and optimiser state back as they were before that step, logs one
warning line that says why, and runs the eager step from then on: ``FastStep.used`` is then ``"off"``
and ``FastStep.fallback_reason`` the why, both in ``summary.json``. The run is then the eager run, bit
for bit on the CPU and to float rounding on CUDA (that step's lr is the value the schedule wrote into the
lr tensor).
An explicit ``graph``/``compile`` raises a one-line error naming ``fast_step`` instead.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import VPIntegratorError
from ..fastpath import verified
from .config import FAST_STEPS

__all__ = ["FAST_STEPS", "GRAPH_OPTIMIZERS", "AGREEMENT_RTOL", "GraphStep", "FastStep", "resolve_fast_step",
           "portable_state", "capture_graph", "scalar_dtype", "capturable_state", "compile_cache_dir"]

_log = logging.getLogger(__name__)

#: optimisers whose step can be captured (a ``capturable`` step; their fresh state is all zeros)
GRAPH_OPTIMIZERS = ("adam", "adamw", "rmsprop")
#: eager steps before a capture (the torch CUDA-graph recipe's side-stream warm-up)
WARMUP_STEPS = 3
#: the agreement check's relative tolerance, by parameter dtype: the first replayed step against an eager step,
#: on the loss and on the parameter update (norm-wise). Loose enough for float reordering (a compiled loss,
#: capturable optimiser's reordered arithmetic), far below the O(1) error of a wrong capture.
AGREEMENT_RTOL = {torch.float64: 1e-7, torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def compile_cache_dir() -> Path:
    """Where ``fast_step = "compile"`` keeps inductor's caches between runs: ``TORCHINDUCTOR_CACHE_DIR`` when set
    (torch's own setting), else ``vpintegrator/inductor`` under ``XDG_CACHE_HOME`` (default ``~/.cache``), not
    torch's default in the temporary directory, which a reboot or a fresh machine empties (importing inductor
    sets the variable to that default: a value equal to it counts as unset)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    own = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if own and os.path.abspath(own) != os.path.abspath(default_cache_dir()):
        return Path(own)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vpintegrator" / "inductor"


def _use_compile_cache() -> str:
    """Point inductor's on-disk caches at ``compile_cache_dir()`` (before the first compilation reads it) and
    turn them on; where that directory cannot be made, torch's default stays. Returns the directory in use."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    path = compile_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path.resolve())
    except OSError as err:
        _log.warning("fast_step = 'compile': cannot make the compile cache %s (%s); inductor's default is used", path, err)
    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR", "inductor's default")


def scalar_dtype(group: dict[str, Any]) -> torch.dtype:
    """The dtype of a capturable parameter group's lr tensor and step counts: float64 where any of its
    parameters is float64, else float32 (a float16 step count would stop counting at 2048)."""
    return torch.float64 if any(p.dtype == torch.float64 for p in group["params"]) else torch.float32


#: the param-group key that marks a group whose fused update the graph step runs as torch's capturable foreach
#: update (``capturable_state``); its eager form is the fused one again (``capturable_state`` off,
#: ``portable_state``)
FUSED_IN_EAGER = "vp_fused_in_eager"


def capturable_state(optimizer: torch.optim.Optimizer, device: torch.device, on: bool) -> None:
    """Put the optimiser in its capturable form on ``device`` (``on``) or back in the eager one.

    On: ``capturable`` set, lr a 0-d tensor on ``device`` and the step counts on ``device``, both in
    ``scalar_dtype`` of their group (module docstring: float32 ones drift a float64 run). torch's fused
    Adam/AdamW kernels read the lr tensor and the step counts as float32 whatever their dtype, so a float64
    group that is fused runs torch's capturable foreach update instead (``FUSED_IN_EAGER`` marks it). Off: lr a
    float, step counts on the host in float32 (as torch makes them for its fused kernels), a marked group fused
    again. An lr already a tensor of the right kind is kept (a captured graph reads its address); so are step
    counts, which ``capturable_steps`` converts after an optimiser makes them lazily."""
    for group in optimizer.param_groups:
        group["capturable"] = on
        lr = group["lr"]
        if not on:
            group["lr"] = float(lr)
            if group.pop(FUSED_IN_EAGER, False):
                group["fused"], group["foreach"] = True, None
        else:
            if scalar_dtype(group) == torch.float64 and group.get("fused"):
                group[FUSED_IN_EAGER] = True
                group["fused"], group["foreach"] = False, True
            if not (isinstance(lr, torch.Tensor) and lr.dtype == scalar_dtype(group) and lr.device == device):
                group["lr"] = torch.tensor(float(lr), dtype=scalar_dtype(group), device=device)
    if on:
        capturable_steps(optimizer, device)
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p)
            if state and isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(device=torch.device("cpu"), dtype=torch.float32)


def capturable_steps(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """The step counts of the capturable groups on ``device`` in their ``scalar_dtype``: torch's optimisers
    make them float32 when they first step. Counts already so are left in place (a captured graph reads
    them)."""
    for group in optimizer.param_groups:
        if not group.get("capturable"):
            continue
        dtype = scalar_dtype(group)
        for p in group["params"]:
            state = optimizer.state.get(p)
            step = state.get("step") if state else None
            if state and isinstance(step, torch.Tensor) and (step.dtype != dtype or step.device != device):
                state["step"] = step.to(device=device, dtype=dtype)


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


def portable_state(state: dict[str, Any]) -> dict[str, Any]:
    """An optimiser or scheduler ``state_dict`` as the eager path writes it: a learning rate held in a device
    tensor (capturable step) becomes its float, ``capturable`` goes back to False and a group the graph ran
    unfused is fused again (``capturable_state``), so that ``last.pt`` resumes on any device, graph or not."""
    out = dict(state)
    if "param_groups" in out:
        groups = []
        for group in out["param_groups"]:
            group = dict(group)
            if isinstance(group.get("lr"), torch.Tensor):
                group["lr"] = float(group["lr"])
            if group.get("capturable"):
                group["capturable"] = False
            if group.pop(FUSED_IN_EAGER, False):
                group["fused"], group["foreach"] = True, None
            groups.append(group)
        out["param_groups"] = groups
    if isinstance(out.get("_last_lr"), list):
        out["_last_lr"] = [float(v) if isinstance(v, torch.Tensor) else v for v in out["_last_lr"]]
    return out


def capture_graph(body: Callable[[], torch.Tensor], device: torch.device) -> tuple[Any, torch.Tensor]:
    """Record ``body()`` in a CUDA graph: (the graph, whose ``replay()`` reruns it, and the loss tensor it
    writes). A module function so that tests can stand in a capture that raises or a replay that errs."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = body()
    return graph, loss


def _captures(device: torch.device) -> bool:
    """Whether a ``FastStep`` on ``device`` captures its steps (tests force it on the CPU)."""
    return device.type == "cuda"


def _step_body(batch_loss: Callable[[torch.Tensor], torch.Tensor], optimizer: torch.optim.Optimizer,
               index: torch.Tensor) -> torch.Tensor:
    """One optimiser step on the windows ``index``: their loss, detached."""
    optimizer.zero_grad(set_to_none=True)  # captured: backward then writes fresh grads each replay
    loss = batch_loss(index)
    (loss.sum() if loss.dim() else loss).backward()
    optimizer.step()
    return loss.detach()


class _Snapshot:
    """The parameters and optimiser state, copied; ``restore`` writes them back in place (a captured
    graph reads the tensors' addresses)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        with torch.no_grad():
            self.values = [p.detach().clone() for p in self.params]
            self.state = {p: {k: v.clone() if isinstance(v, torch.Tensor) else v
                              for k, v in optimizer.state[p].items()}
                          for p in self.params if optimizer.state.get(p)}

    @torch.no_grad()
    def restore(self, drop_new: bool) -> None:
        """Put everything back. State made since the copy is zeroed in place (a fresh state of the graph
        optimisers is all zeros, step count included) or, with ``drop_new``, removed: the optimiser then makes
        it afresh at its next step, as if nothing had run."""
        for p, value in zip(self.params, self.values):
            p.copy_(value)
            live = self.optimizer.state.get(p)
            if not live:
                continue
            if p not in self.state:
                if drop_new:
                    del self.optimizer.state[p]
                else:
                    for v in live.values():
                        if isinstance(v, torch.Tensor):
                            v.zero_()
                continue
            for key, saved in self.state[p].items():
                if isinstance(saved, torch.Tensor) and isinstance(live.get(key), torch.Tensor):
                    live[key].copy_(saved)
                else:
                    live[key] = saved


def _disagreement(before: _Snapshot, ref_loss: torch.Tensor, ref_values: list[torch.Tensor],
                  loss: torch.Tensor) -> str | None:
    """Why the replayed step (``loss``, the parameters now) differs from the eager one (``ref_loss``, the
    parameters ``ref_values``), both from ``before``; None when they agree to ``AGREEMENT_RTOL``."""
    rtol = max(AGREEMENT_RTOL.get(p.dtype, 1e-2) for p in before.params)
    ref, got = ref_loss.detach().double(), loss.detach().double()
    if not bool(torch.isfinite(ref).all()):
        return None  # the eager step itself is not finite: nothing to compare (the run's divergence check acts)
    tiny = torch.finfo(torch.float64).tiny
    loss_err = float(torch.linalg.vector_norm(got - ref)) / max(float(torch.linalg.vector_norm(ref)), tiny)
    with torch.no_grad():
        off = sum(float((p.double() - r.double()).square().sum()) for p, r in zip(before.params, ref_values))
        size = sum(float((r.double() - v.double()).square().sum()) for r, v in zip(ref_values, before.values))
    update_err = math.sqrt(off) / max(math.sqrt(size), tiny)
    if loss_err <= rtol and update_err <= rtol:
        return None
    return (f"the first replayed step disagrees with the eager step (loss {float(got.sum()):.9g} vs "
            f"{float(ref.sum()):.9g}: relative error {loss_err:.2g}; parameter update: {update_err:.2g}; "
            f"tolerance {rtol:g})")


class GraphStep:
    """One optimiser step for index batches of one shape, from static buffers; replayed from a CUDA graph
    when ``capture`` (else its body runs eagerly each call, with the same buffers).

    ``batch_loss(index)`` gathers the windows ``index`` and returns their loss: a scalar, or one loss per
    ensemble member (then their sum is back-propagated: member k's parameters get its own loss's gradient).
    Calling the step with window numbers returns that loss, detached, as a device tensor that the next call
    overwrites (copy or consume it first).
    """

    #: set by __init__ (declared for type checkers)
    optimizer: torch.optim.Optimizer
    index: torch.Tensor

    def __init__(self, batch_loss: Callable[[torch.Tensor], torch.Tensor], optimizer: torch.optim.Optimizer,
                 shape: tuple[int, ...], device: torch.device, capture: bool) -> None:
        self.batch_loss, self.optimizer = batch_loss, optimizer
        self.index = torch.zeros(shape, dtype=torch.long, device=device)
        self.graph: Any = None
        self.loss: torch.Tensor | None = None
        self._warm_up(device)
        # the warm-up made the optimiser's state (on a first build): its step counts in the parameters' dtype
        capturable_steps(optimizer, device)
        if capture:
            self.graph, self.loss = capture_graph(self._body, device)

    def _body(self) -> torch.Tensor:
        return _step_body(self.batch_loss, self.optimizer, self.index)

    def _warm_up(self, device: torch.device) -> None:
        """A few eager steps (on a side stream on CUDA), then parameters and optimiser state put back."""
        saved = _Snapshot(self.optimizer)
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
        saved.restore(drop_new=False)

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        self.index.copy_(index, non_blocking=True)
        if self.graph is None:
            return self._body()
        self.graph.replay()
        return self.loss


class FastStep:
    """The trainer's fast step: one ``GraphStep`` per index shape met (the full batch, the last partial
    one), sharing the model, the optimiser and its state; ``mode`` from ``resolve_fast_step``.

    With ``fallback`` (the config said ``auto``) a step that cannot be built or fails the agreement check
    (module docstring) makes it run the eager step from then on, with one warning; without, that is a
    one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming ``fast_step``. ``used`` is what runs (``mode``, or ``"off"``
    after a fallback) and ``fallback_reason`` why it fell back (None).
    """

    #: set by __init__ (declared for type checkers)
    mode: str
    device: torch.device
    optimizer: torch.optim.Optimizer
    fallback: bool
    used: str
    fallback_reason: str | None
    capture: bool
    check: bool
    build_seconds: float
    cache: str | None

    def __init__(self, mode: str, batch_loss: Callable[[torch.Tensor], torch.Tensor],
                 optimizer: torch.optim.Optimizer, device: torch.device, fallback: bool = False) -> None:
        self.mode, self.device, self.optimizer, self.fallback = mode, device, optimizer, fallback
        self.used, self.fallback_reason = mode, None
        self.eager_loss = batch_loss
        self.capture = _captures(device)
        if device.type == "cuda":
            capturable_state(optimizer, device, True)
        self.cache = None  # the folder of inductor's caches (compile only)
        if mode == "compile":
            self.cache = _use_compile_cache()
            # inductor's default mode on every device: on a lent H100 the former max-autotune-no-cudagraphs (every
            # product autotuned) did not finish compiling the paper VPT's step within 190 s
            batch_loss = torch.compile(batch_loss, dynamic=False)
        self.batch_loss = batch_loss
        # an uncaptured, uncompiled graph step is the eager step's very arithmetic: nothing to check
        self.check = self.capture or mode == "compile"
        self.steps: dict[tuple[int, ...], GraphStep] = {}
        self.build_seconds = 0.0  # wall seconds of the steps' builds, apart from the steps themselves

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        if self.used == "off":
            return _step_body(self.eager_loss, self.optimizer, index)
        shape = tuple(index.shape)
        step = self.steps.get(shape)
        if step is not None:
            return step(index)
        before = _Snapshot(self.optimizer)
        built: list[GraphStep] = []

        def build() -> GraphStep:
            built.append(GraphStep(self.batch_loss, self.optimizer, shape, self.device, self.capture))
            return built[0]

        # the step's first call, checked against an eager step from the same state (module docstring)
        tic = time.perf_counter()
        check = verified(build, self._reference if self.check else None, [index],
                         agree=lambda loss, ref: _disagreement(ref[0], ref[1], ref[2], loss),
                         what=f"building the {self.mode} step", log=None)
        seconds = time.perf_counter() - tic
        self.build_seconds += seconds
        work = ["compilation"] * (self.mode == "compile") + ["warm-up"] + ["capture"] * self.capture + ["check"] * self.check
        _log.info("fast_step = %r: the step for batches of %s built in %.2f s (%s)%s", self.mode,
                  "x".join(map(str, shape)), seconds, ", ".join(work), f"; inductor's cache: {self.cache}" if self.cache else "")
        if not check.fast:
            return self._give_up(before, str(check.reason), index, check.error)
        self.steps[shape] = built[0]
        return check.outputs[0]

    def _reference(self, index: torch.Tensor) -> tuple[_Snapshot, torch.Tensor, list[torch.Tensor]]:
        """An eager step from the state now, then the state put back: (that state, the step's loss, the
        parameters after it)."""
        start = _Snapshot(self.optimizer)
        ref_loss = _step_body(self.eager_loss, self.optimizer, index).clone()
        with torch.no_grad():
            ref_values = [p.detach().clone() for p in start.params]
        start.restore(drop_new=False)
        return start, ref_loss, ref_values

    def _give_up(self, before: _Snapshot, why: str, index: torch.Tensor,
                 err: BaseException | None) -> torch.Tensor:
        """Put the state back as it was before this step; fall back to the eager step, or raise."""
        self.steps.clear()
        if self.device.type == "cuda":  # a warm-up that raised may have left work queued on its side stream
            torch.cuda.synchronize(self.device)
        before.restore(drop_new=True)
        if self.device.type == "cuda":
            capturable_state(self.optimizer, self.device, False)
        if not self.fallback:
            raise VPIntegratorError(
                f"fast_step = {self.mode!r}: {why}; set fast_step = 'auto' (the eager step where this fails) or "
                "'off'", key="fast_step",
            ) from err
        self.used, self.fallback_reason = "off", why
        _log.warning("fast_step = 'auto' runs the eager step from here: %s", why)
        return _step_body(self.eager_loss, self.optimizer, index)
