"""The step maps: classical integrators, the exact flow, the data's own generator, trained models.

Each implements the [`StepMap`][vpintegrator.stepping.StepMap] contract. [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] (the stepping of
[`IntegratorMap`][vpintegrator.data.integration.IntegratorMap], which ``integrate`` drives, with the volume metric) runs in float64,
compiled (numba, ``vpintegrator.compiled.compiled_stepper``) for any number of trajectories when there is a kernel, NumPy otherwise; [`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep] in
NumPy/SciPy; [`ModelStep`][vpintegrator.rollout.steps.ModelStep] runs a torch model in its own dtype on its device, by the fastest runner
that reproduces it (the numba kernel of ``vpintegrator.rollout.numba_model``, ``torch.compile`` when
asked, or eager; the runners below). [`reference_step_map`][vpintegrator.rollout.steps.reference_step_map] is the generator a data file was
made with, to continue its reference beyond the file's horizon.
"""

from __future__ import annotations

import logging

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..data.integration import SCALAR_MAX_BATCH, IntegratorMap
from ..fastpath import check_fast_step, verified
from ..errors import VPIntegratorError, finite_float
from ..stepping import bad_states
from .engine import StepMap

if TYPE_CHECKING:  # torch is imported when a model step is built, not with the rollout package
    import torch

__all__ = ["IntegratorStep", "ExactFlowStep", "ModelStep", "reference_step_map", "SCALAR_MAX_BATCH", "is_context_model",
           "RUNNERS", "MODEL_MAX_BATCH", "compiled_model", "compile_model"]

#: the compiled (numba) model runner's limit, in trajectories: up to 128 it beats torch eager and the old
#: TorchScript trace for every shipped model (``scripts/bench_model_runners.py``); at 1024 eager wins for some
MODEL_MAX_BATCH = 128

#: windows per batched Jacobian of ModelStep's volume metric, on the CPU and on CUDA (where few large
#: batches beat many small launches; ~1 GB of float64 activations for the paper VPT at 65 536)
VOLUME_CHUNK_CPU = 4096
VOLUME_CHUNK_CUDA = 65536


class IntegratorStep(IntegratorMap):
    """A classical integrator as a step map (``seq_len = pred_window = 1``), float64, with its volume metric.

    The stepping is [`IntegratorMap`][vpintegrator.data.integration.IntegratorMap]'s (the map ``integrate`` drives): rollouts of at most
    ``compiled_max_batch`` trajectories (default any number) run the compiled single-trajectory stepper
    (``vpintegrator.compiled.compiled_stepper``, the same numbers to ~1e-15 per step and the same
    Newton rule) one trajectory after the other, when it has a kernel for the system and method;
    otherwise, and without numba, the NumPy path runs. ``describe()["runner"]`` says which (``"numba"``
    or ``"numpy"``). Its parameters (``system``, ``integrator``, ``dt``, ``compiled_max_batch``) are
    [`IntegratorMap`][vpintegrator.data.integration.IntegratorMap]'s.
    """

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        from ..metrics import log_abs_det

        states = np.asarray(windows, dtype=np.float64)[:, -1]  # (n, dim)
        with np.errstate(all="ignore"):
            return log_abs_det(self.integrator.step_jacobian(self.system, states, self.dt))


class ExactFlowStep(StepMap):
    """The exact flow (SciPy DOP853 at tight tolerances) as a step map, solved a chunk at a time.

    Each call of [`generate`][vpintegrator.rollout.steps.ExactFlowStep.generate] restarts ``solve_flow`` from the last state, so a long horizon costs
    no more memory than one chunk.

    Parameters
    ----------
    system : System or str
    dt : float
    rtol, atol : float
    """

    kind = "flow"

    #: set by __init__ (declared for type checkers)
    dim: int
    dt: float
    rtol: float
    atol: float
    name: str

    def __init__(self, system, dt: float, rtol: float = 1e-12, atol: float = 1e-12) -> None:
        from ..systems import get_system

        self.system = get_system(system)
        self.dim = self.system.dim
        self.dt = finite_float(dt, "dt (the step size)", positive=True, key="dt")
        self.rtol = finite_float(rtol, "rtol", positive=True, key="rtol")
        self.atol = finite_float(atol, "atol", positive=True, key="atol")
        self.name = "exact_flow"

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self._y0 = np.array(window0[:, -1], dtype=np.float64)
        self._y = self._y0.copy()
        self._limit = np.asarray(limit, dtype=np.float64)

    def generate(self, n: int) -> np.ndarray:
        from ..data import solve_flow

        t = self.dt * np.arange(n + 1)
        y = np.asarray(solve_flow(self.system, self._y, t, rtol=self.rtol, atol=self.atol))[:, 1:]
        y = np.ascontiguousarray(y, dtype=np.float64)
        self._y = y[:, -1].copy()
        bad = bad_states(self._y, self._limit)
        self._y[bad] = self._y0[bad]
        return y

    def reset(self, rows: np.ndarray) -> None:
        self._y[rows] = self._y0[rows]

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        # Liouville: log det of the flow map = time integral of the divergence (0 for every shipped system)
        states = np.asarray(windows, dtype=np.float64)[:, -1]
        div = self.system.divergence(states)
        return np.where(np.abs(div) == 0.0, 0.0, np.nan)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "rtol": self.rtol, "atol": self.atol}


def reference_step_map(meta: Mapping[str, Any], system, dt: float) -> StepMap:
    """The generator a data file was made with, as a step map: its ``method`` attribute (a classical
    integrator name, or DOP853 at the file's ``rtol``/``atol``) on ``system`` with step ``dt``.

    Continues a reference beyond the file's horizon from its last state (``vp-rollout`` and training's
    rollout validation).
    """
    from ..integrators import list_integrators

    method = str(meta.get("method", "dop853"))
    if method in list_integrators():
        return IntegratorStep(system, method, dt)
    return ExactFlowStep(system, dt, rtol=float(meta.get("rtol", 1e-12)), atol=float(meta.get("atol", 1e-12)))


class ModelStep(StepMap):
    """A trained multi-step model as a step map, run in its own dtype on ``device``.

    Parameters
    ----------
    model : torch.nn.Module
        With attributes ``dim``, ``seq_len``, ``pred_window``; forward (batch, seq_len, dim) ->
        (batch, pred_window, dim).
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    overlap : bool
        Overlapping windows: advance by one state, keep the first predicted state. The induced window map
        ``X ↦ [X[1:], f(X)[0]]`` is then not volume preserving even when ``f`` is (measured: cumulative
        log|det J| of 2-50 after 60 steps of a random VPT), so volume claims hold for non-overlapping windows.
    volume_dtype : torch.dtype or None
        dtype of the copy of the model whose Jacobian measures the volume (default float64, so that the
        measured log det reflects the map and not float32 rounding).
    jit : bool or str
        A ``fast_step`` name (or a bool: True is ``"auto"``, False ``"off"``): how torch runs the model when
        the compiled runner does not. ``"compile"``: ``torch.compile`` (inductor, ``dynamic=False``) for the
        rollout's batch shape, checked against the eager model on the first windows and dropped if it differs
        or cannot be built; its first call costs seconds (1-24 s measured per model and shape on the CPU), so it pays
        only over long rollouts of large batches. ``"auto"``, ``"graph"``, ``"off"``: eager, under
        ``torch.inference_mode``.
    scalar_max_batch : int
        Rollouts of at most this many trajectories (default ``MODEL_MAX_BATCH``, 128) of a float64 VPFF, VPT
        (plain or symmetric), ST, lpnet, lp_transformer, LA-SympNet, G-SympNet or symplectic transformer
        model on the CPU run the model compiled: packed into arrays and iterated by one numba kernel a whole
        block of steps at a time (``vpintegrator.rollout.numba_model``, runner ``"numba"``), ~1-2 µs per call
        of the paper models at batch 1 against ~200-500 µs for torch, the same numbers to rounding (≤ 1e-12
        per call, checked against the model on the first windows, and again only when its weights change;
        otherwise, without numba, and for other models or layers, dtypes or devices, torch runs it). 0 turns
        it off.

    Notes
    -----
    A model trained on normalised states (``vpintegrator.models.normalise``: its ``trained_on["normalisation"]``
    y = A (x − b)) steps in them: ``start`` maps the first window in, ``generate`` maps the states out (in
    float64, outside every runner), ``log_abs_det_jacobian`` maps its windows in (det(A⁻¹ DΦ A) = det DΦ).
    Without one nothing is mapped and the numbers are those of the model itself.
    """

    kind = "model"

    #: set by __init__ (declared for type checkers)
    device: torch.device
    dim: int
    seq_len: int
    pred_window: int
    overlap: bool
    fast_step: str
    name: str

    def __init__(
        self,
        model,
        device: str = "auto",
        overlap: bool = False,
        volume_dtype=None,
        jit: bool | str = True,
        scalar_max_batch: int = MODEL_MAX_BATCH,
    ) -> None:
        import torch

        for attr in ("dim", "seq_len", "pred_window"):
            if not isinstance(getattr(model, attr, None), int):
                raise VPIntegratorError(
                    f"model {type(model).__name__} has no int attribute {attr!r}; models from "
                    "vpintegrator.build_model/load_model have dim, seq_len and pred_window"
                )
        self.model = model
        from ..device import resolve_device

        self.device = resolve_device(device)
        self.model.to(self.device).eval()
        param = next(iter(model.parameters()), None)
        self.dtype = param.dtype if param is not None else torch.float32
        self.dim: int = int(model.dim)
        self.seq_len: int = int(model.seq_len)
        self.pred_window: int = int(model.pred_window)
        self.overlap = bool(overlap)
        self.volume_dtype = torch.float64 if volume_dtype is None else volume_dtype
        self._volume_model = None
        self._buf: Any = None
        self.fast_step = check_fast_step(jit)  # a fast_step name; True/False are "auto"/"off"
        if isinstance(scalar_max_batch, bool) or not isinstance(scalar_max_batch, int) or scalar_max_batch < 0:
            raise VPIntegratorError(f"scalar_max_batch must be an int >= 0 (0: off); got {scalar_max_batch!r}")
        self.scalar_max_batch = scalar_max_batch
        self._fn = model
        self._compiled = None  # CompiledModel while the numba runner is in use
        self._packed: tuple[Any, list, tuple] | None = None  # _compile's last: (CompiledModel or None, tensors, key)
        self._runner = "eager"
        self.name = str(getattr(model, "config", {}).get("name", type(model).__name__.lower()))
        from ..models.normalise import model_normalisation

        self.normalisation = model_normalisation(model)  # None: the model steps in the data's coordinates

    def to_model(self, x: Any) -> Any:
        """States (..., dim) (NumPy or tensor) in the model's coordinates (its normalisation; else ``x`` itself)."""
        return x if self.normalisation is None else self.normalisation.to_model(x)

    def from_model(self, y: Any) -> Any:
        """States (..., dim) of the model's coordinates back in the data's (the inverse of ``to_model``)."""
        return y if self.normalisation is None else self.normalisation.from_model(y)

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        import torch

        w = torch.as_tensor(self.to_model(np.asarray(window0, dtype=np.float64)))
        self._init = w.to(device=self.device, dtype=self.dtype)  # (n_traj, seq_len, dim)
        self._ctx = self._init.clone()
        self._fn, self._runner = self.model, "eager"
        norm = self.normalisation
        example = (self._init if norm is None or not norm.wraps  # checked on the windows the model is called on
                   else self._init - norm.window_shift(self._init[:, -1])[:, None])
        self._compiled = self._compile(example)
        if self._compiled is not None:
            self._runner = "numba"
            # the context as NumPy memory shared with the tensor: the kernel advances it in place, and
            # reset() and a later torch runner see the same windows
            self._ctx_np = np.ascontiguousarray(self._ctx.numpy())
            self._ctx = torch.from_numpy(self._ctx_np)
        else:
            self._fn, self._runner = self.torch_runner(self._init)
            if self.normalisation is not None:  # periodic components: every call on its wrapped window
                self._fn = self.normalisation.call(self._fn)
        logging.getLogger(__name__).debug(
            "model step %s: runner %s on %s (%s), %d trajectories, fast_step %s", self.name, self._runner,
            self.device, str(self.dtype).replace("torch.", ""), w.shape[0], self.fast_step)

    def torch_runner(self, example, fast_step: str | None = None) -> tuple[Any, str]:
        """How torch runs the model on inputs shaped like ``example``: ``(fn, runner name)``, the
        ``torch.compile`` of [`compile_model`][vpintegrator.rollout.steps.compile_model] under ``fast_step =
        "compile"`` (default this step's ``fast_step``) when it builds and agrees, else the eager model."""
        if (self.fast_step if fast_step is None else fast_step) == "compile":
            compiled = compile_model(self.model, example)
            if compiled is not None:
                return compiled, "torch.compile"
        return self.model, "eager"

    def _compile(self, example):
        """The model as the numba kernel ([`vpintegrator.rollout.steps.compiled_model`][vpintegrator.rollout.steps.compiled_model]) when it applies.

        Packed and checked once, on the windows of the first start, and reused by later starts while the model's
        weights are the same tensors with the same contents (each one's storage and in-place version counter,
        ``_weights_key``, and no parameter, buffer or module assigned to this model since):
        an optimiser step, ``load_state_dict`` or an in-place edit makes the next start pack and check again.
        A model the check refused runs in torch until then. A change torch does not count (an in-place edit
        through ``.data``, a plain attribute set by hand) is not seen: build a new ModelStep.
        """
        import torch

        if not (
            0 < example.shape[0] <= self.scalar_max_batch
            and self.dtype == torch.float64
            and self.device.type == "cpu"
        ):
            return None
        packed = self._packed
        if packed is not None and packed[2][0] != _ASSIGNED[0]:  # something assigned to some module since
            tensors = _tensors(self.model)
            if len(tensors) == len(packed[1]) and all(t is u for t, u in zip(tensors, packed[1])):  # not to this one
                packed = self._packed = (packed[0], packed[1], (_ASSIGNED[0], *packed[2][1:]))
        if packed is not None and _weights_key(packed[1]) == packed[2]:
            return packed[0]
        tensors = _tensors(self.model)
        key = _weights_key(tensors)  # taken before the check: a change made during it is seen by the next start
        try:
            compiled = compiled_model(self.model, example)
        except Exception:  # a model the packer or the kernel cannot take: torch runs it
            compiled = None
        self._packed = (compiled, tensors, key)
        return compiled

    def generate(self, n: int) -> np.ndarray:
        import torch

        if self._compiled is not None:
            return self._generate_compiled(n)
        T, adv = self.seq_len, self.advance
        n_calls = -(-n // adv)
        length = T + n_calls * adv
        n_traj = self._ctx.shape[0]
        model = self._fn
        with torch.inference_mode():
            if self._buf is None or self._buf.shape[1] < length or self._buf.shape[0] != n_traj:
                self._buf = torch.empty((n_traj, length, self.dim), device=self.device, dtype=self.dtype)
            buf = self._buf
            buf[:, :T] = self._ctx
            pos = T
            if self.overlap:
                for _ in range(n_calls):
                    buf[:, pos] = model(buf[:, pos - T : pos])[:, 0]
                    pos += 1
            else:
                P = self.pred_window
                for _ in range(n_calls):
                    buf[:, pos : pos + P] = model(buf[:, pos - T : pos])  # (n_traj, P, dim)
                    pos += P
            self._ctx = buf[:, pos - T : pos].clone()
            return self.from_model(buf[:, T : T + n].to(device="cpu", dtype=torch.float64, copy=True).numpy())

    def _generate_compiled(self, n):
        """[`generate`][vpintegrator.rollout.steps.ModelStep.generate] by the numba kernel: all calls of the block in compiled code, row after row."""
        adv = self.advance
        n_calls = -(-n // adv)
        out = np.empty((self._ctx_np.shape[0], n_calls * adv, self.dim))
        norm = self.normalisation
        if norm is None or not norm.wraps:
            self._compiled.run_rows(self._ctx_np, n_calls, self.overlap, out)  # advances _ctx_np in place
        else:  # periodic components: each call on its wrapped window (Normalisation.window_shift)
            for c in range(n_calls):
                k = norm.window_shift(self._ctx_np[:, -1])[:, None]
                self._ctx_np -= k
                self._compiled.run_rows(self._ctx_np, 1, self.overlap, out[:, c * adv : (c + 1) * adv])
                self._ctx_np += k
                out[:, c * adv : (c + 1) * adv] += k
        return self.from_model(out[:, :n])

    def reset(self, rows: np.ndarray) -> None:
        import torch

        with torch.inference_mode():
            idx = torch.as_tensor(np.asarray(rows), device=self.device)
            self._ctx[idx] = self._init[idx]

    def log_abs_det_jacobian(self, windows: Any) -> Any:
        """``log|det J|`` of the window map at windows (n, seq_len, dim), in ``volume_dtype``: NumPy in,
        NumPy out; a tensor gives a float64 tensor on the model's device (the device engine's volume)."""
        from ..metrics import window_log_det_jacobian

        chunk = VOLUME_CHUNK_CUDA if self.device.type == "cuda" else VOLUME_CHUNK_CPU
        w = self.to_model(windows)
        if self.normalisation is not None and self.normalisation.wraps:  # the model is called on wrapped windows
            w = w - self.normalisation.window_shift(w[..., -1, :])[..., None, :]
        return window_log_det_jacobian(self.volume_model(), w, overlap=self.overlap, chunk=chunk)

    def volume_model(self):
        """The copy of the model (``volume_dtype``, no gradients) whose Jacobian measures the volume."""
        import copy

        if self._volume_model is None:
            self._volume_model = copy.deepcopy(self.model).to(dtype=self.volume_dtype).eval()
            for p in self._volume_model.parameters():
                p.requires_grad_(False)
        return self._volume_model

    @property
    def cpu_clock(self) -> str:
        """``"process_cpu"`` when torch runs the model with more than one intra-op thread (its work spread
        over the pool: every thread's CPU is the step's cost), else ``"thread_cpu"`` (the compiled runner, or
        torch on one thread: all in the calling thread)."""
        import torch

        from ..clock import PROCESS_CPU, THREAD_CPU

        return PROCESS_CPU if self._runner != "numba" and torch.get_num_threads() > 1 else THREAD_CPU

    def describe(self) -> dict[str, Any]:
        import torch

        return {
            **super().describe(),
            "model": self.name,
            "dtype": str(self.dtype).replace("torch.", ""),
            "device": str(self.device),
            "n_params": int(sum(p.numel() for p in self.model.parameters())),
            "runner": self._runner,
            "torch_version": torch.__version__,
        }


def is_context_model(model) -> bool:
    """Whether ``model`` reads a context prefix (it has ``context_len`` and ``step``)."""
    return isinstance(getattr(model, "context_len", None), int) and callable(getattr(model, "step", None))

# --- how ModelStep runs a model -----------------------------------------------------------------------------
#
# How [`ModelStep`][vpintegrator.rollout.steps.ModelStep] runs a model: the compiled kernel, ``torch.compile``, or eager.
#
# ModelStep takes the first of these that applies and reproduces the model:
#
# ``"numba"``
#     Float64 VPFF, VPT, ST, Lie–Poisson (lpnet, lp_transformer) and symplectic (LA-SympNet, G-SympNet,
#     symplectic transformer) models on the CPU, rollouts of at most ``MODEL_MAX_BATCH`` (128) trajectories:
#     the model packed into arrays (``vpintegrator.rollout.numba_model.pack``) and iterated by one numba
#     kernel for a whole block of steps ([`compiled_model`][vpintegrator.rollout.steps.compiled_model]). At
#     batch 1 a call of the paper models costs ~1-2 µs there against ~200-500 µs in torch: torch's
#     per-operation overhead, not arithmetic, is the cost of a (3, 3) window. Checked against the model on the
#     first windows (≤ 1e-12); without numba, or for other models, dtypes or devices, the next runner runs.
# ``"torch.compile"``
#     Only under ``fast_step = "compile"``: ``torch.compile`` of the model for the rollout's batch shape
#     ([`compile_model`][vpintegrator.rollout.steps.compile_model]), checked against the eager model on the
#     first windows.
# ``"eager"``
#     The model itself, under ``torch.inference_mode``.
#
# Each check is ``vpintegrator.fastpath.verified`` (the one rule of every fast path): a runner that raises or
# differs is not used, and the reason is logged.
#
# TorchScript (``torch.jit.trace`` + ``freeze``, the torch runner up to 2026-11-25) is gone: it is
# deprecated upstream. Measured against it (``scripts/bench_model_runners.py``, docs/benchmarks.md), the
# numba runner is 1.18-326x faster per step up to 128 trajectories for every shipped model, and eager beyond
# runs at 0.50-0.91x its speed at 1024 trajectories (``torch.compile``: 0.70-1.43x).

#: the runner names ModelStep reports in ``describe()["runner"]``, fastest first
RUNNERS = ("numba", "torch.compile", "eager")

#: per-call agreement required of the compiled kernel with the model (float64), relative and absolute; the absolute
#: part is widened to ``ROUND_OFF_FACTOR`` times the model's own round-off on the probe (``_round_off``), at most to
#: ``ROUND_OFF_CAP`` (the agreement ``torch.compile`` is held to). A model with large weights amplifies a rounding
#: of its intermediates: two memory-study ``vpt_mix`` (T = 4) seeds, an attention weight of 4e4 (C ≈ 1e7, so
#: (I + C)⁻¹ is computed to ~1e-9), moved by 2e-8 - 7e-8 in torch itself when their windows moved by one ulp, and
#: the kernel differed from torch by 1e-8 - 7e-8: rounding, not a different formula, which the old 1e-12 refused
COMPILED_TOL = 1e-12
ROUND_OFF_FACTOR = 16.0
ROUND_OFF_CAP = 1e-6


def compiled_model(model, example) -> Any:
    """The model as a ``vpintegrator.rollout.numba_model.CompiledModel``, checked on ``example``, or None.

    Parameters
    ----------
    model : torch.nn.Module
        A float64 model on the CPU (others are the caller's to exclude).
    example : torch.Tensor (batch, seq_len, dim)
        The rollout's first windows: the kernel must agree with ``model(example)`` and with the model on a
        perturbed copy to ``COMPILED_TOL`` (relative and absolute, the absolute part widened to the model's own
        round-off: ``ROUND_OFF_FACTOR``, ``ROUND_OFF_CAP``), NaN where the model gives NaN.

    Returns
    -------
    CompiledModel or None
        None without numba, for models ``vpintegrator.rollout.numba_model.pack`` does not cover, or when
        the check fails.
    """
    import torch

    try:
        from .numba_model import pack
    except ImportError:  # pragma: no cover - numba or the module missing: torch runs the model
        return None
    compiled = pack(model)
    if compiled is None:
        return None

    def host(x):  # (batch, seq_len, dim) tensor -> float64 NumPy on the host
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()

    probe = _probe(example)

    def check(atol: float, log: int | None = logging.INFO) -> Any:
        return verified(lambda: lambda x: compiled.forward(host(x)), lambda x: host(model(x)), probe,
                        rtol=COMPILED_TOL, atol=atol, what="the compiled model (numba)", log=log)

    with torch.no_grad():  # the model's own round-off is measured only for a model the strict check refuses
        strict = check(COMPILED_TOL, log=None)
        if strict.fast:
            return compiled
        if strict.error is not None:  # the kernel raised: no allowance makes it agree
            logging.getLogger(__name__).info("%s; the eager path runs", strict.reason)
            return None
        allowed = check(min(max(COMPILED_TOL, ROUND_OFF_FACTOR * _round_off(model, probe, host)), ROUND_OFF_CAP))
    return compiled if allowed.fast else None


def _round_off(model, probe, host) -> float:
    """The model's own round-off on ``probe``: the largest change of its outputs when every window entry moves by
    4 ulps (relative, signs alternating: no RNG), over the probe's inputs (0 where not finite). The kernel rounds
    its intermediates as such a move does; a well-conditioned model moves by a few ulps of its outputs."""
    import torch

    spread = 0.0
    for x in probe:
        sign = torch.ones(x.numel(), dtype=x.dtype, device=x.device)
        sign[1::2] = -1
        moved = x * (1 + 4 * torch.finfo(x.dtype).eps * sign.view_as(x))
        with np.errstate(invalid="ignore"):
            d = np.abs(host(model(moved)) - host(model(x)))
        d = d[np.isfinite(d)]
        spread = max(spread, float(d.max()) if d.size else 0.0)
    return spread


#: how many parameters, buffers and submodules have been assigned to any module of the process (torch's global
#: registration hooks, installed by the first ``_weights_key``; 0 before): a ModelStep then walks its model again
_ASSIGNED = [0]


def _tensors(model) -> list:
    """The model's weights: the dense tensors of its ``state_dict`` (its parameters and persistent buffers; the
    non-persistent ones, index tables and masks, follow the parameters' shapes)."""
    import torch

    return [t for t in model.state_dict(keep_vars=True).values()
            if isinstance(t, torch.Tensor) and t.layout == torch.strided]


def _weights_key(tensors: list) -> tuple:
    """``(_ASSIGNED, (storage, in-place version) of each tensor)``: what a packed model of ``tensors`` depends on."""
    if not _ASSIGNED[0]:
        from torch.nn.modules import module

        def assigned(*_: Any) -> None:
            _ASSIGNED[0] += 1

        for register in (module.register_module_parameter_registration_hook,
                         module.register_module_buffer_registration_hook,
                         module.register_module_module_registration_hook):
            register(assigned)
        _ASSIGNED[0] = 1
    return (_ASSIGNED[0], *[(t.data_ptr(), t._version) for t in tensors])


def compile_model(model, example) -> Any:
    """``torch.compile`` of the model (inductor, ``dynamic=False``) for inputs shaped like ``example``, or None.

    Built and run once on ``example`` (the compilation: seconds, not per-step time), then checked against the
    eager model on ``example`` and a perturbed copy (rtol 1e-6, atol 1e-7); None when it differs or cannot be
    built (no C compiler for inductor on the CPU, a model dynamo cannot take), the reason logged.
    """
    import torch

    def build():
        compiled = torch.compile(model.eval(), dynamic=False)

        def run(x):  # one layout: a window sliced from the rollout's buffer has that buffer's strides, and
            return compiled(x.contiguous())  # each new stride would recompile (8 at most, then eager)

        with torch.inference_mode():
            run(example)
        return run

    with torch.inference_mode():
        check = verified(build, model, _probe(example), rtol=1e-6, atol=1e-7, what="torch.compile of the model")
    return check.fn if check.fast else None


def _probe(example) -> tuple:
    """The inputs a runner is checked on: the rollout's first windows and a perturbed copy (no RNG: the
    user's seed is left alone)."""
    return example, 1.01 * example + 0.01
