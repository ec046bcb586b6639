"""One rollout engine for any step map: trained multi-step models, classical integrators, the exact flow.

A *step map* advances a batch of state windows: the last ``seq_len`` states give the next
``pred_window`` states. Classical integrators and the exact flow are step maps with
``seq_len = pred_window = 1``; a trained model with ``seq_len = pred_window = T`` maps ``z_1..z_T`` to
``z_{T+1}..z_{2T}``. :func:`rollout` iterates one from its first window to any horizon:

- non-overlapping windows (as in the paper): advance by ``pred_window``; overlapping windows
  (``overlap=True``): advance by one state, keeping the first predicted state;
- the output is produced in chunks of steps and handed to a sink (an in-memory array, or an HDF5
  dataset written block by block), so memory does not grow with the horizon;
- a trajectory *fails* at the first step whose state is not finite or whose norm exceeds
  ``blowup × ‖z_0‖``; the step is recorded (−1 if never), its states from then on are NaN, and the
  step map goes on from its initial window for that row (wasted work, but no NaN ever reaches an
  implicit solver).

Models run under ``torch.inference_mode`` in their own dtype on the chosen device; states are returned and
stored as float64.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .errors import VPIntegratorError
from .data.trajectories import Trajectories

#: default blow-up factor: a state with ‖z‖ > BLOWUP × ‖z_0‖ counts as failed
BLOWUP = 1e3
#: default number of steps per chunk (memory per chunk: n_traj × chunk_steps × dim × 8 bytes)
CHUNK_STEPS = 1024
#: ModelStep runs float64 models as generated Python on floats up to this many trajectories
SCALAR_MAX_BATCH = 8


# --------------------------------------------------------------------------- step maps


def _bad_rows(y: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Rows of ``y`` (n, dim) that are not finite or whose norm exceeds ``limit`` (n,)."""
    with np.errstate(over="ignore", invalid="ignore"):
        norm = np.sqrt(np.einsum("ij,ij->i", y, y))
    return ~(norm <= limit)  # NaN -> bad


class StepMap:
    """Base of the step maps the engine iterates.

    Attributes
    ----------
    seq_len, pred_window, dim : int
        A call maps windows (n_traj, seq_len, dim) to the next (n_traj, pred_window, dim) states.
    kind : str
        ``"integrator"``, ``"model"`` or ``"flow"``.

    Subclasses implement :meth:`start` (take the first window), :meth:`generate` (the next ``n``
    states, float64), :meth:`reset` (put failed rows back to their first window) and
    :meth:`log_abs_det_jacobian` (volume of the step or window map).
    """

    seq_len: int = 1
    pred_window: int = 1
    dim: int = 0
    kind: str = ""
    overlap: bool = False

    @property
    def advance(self) -> int:
        """States kept per call: ``pred_window`` (non-overlapping windows) or 1 (overlapping)."""
        return 1 if self.overlap else self.pred_window

    def start(self, window0: np.ndarray, limit: np.ndarray) -> None:
        """Begin from ``window0`` (n_traj, seq_len, dim) float64; ``limit`` (n_traj,) bounds valid norms."""
        raise NotImplementedError

    def generate(self, n: int) -> np.ndarray:
        """The next ``n`` states, (n_traj, n, dim) float64."""
        raise NotImplementedError

    def reset(self, rows: np.ndarray) -> None:
        """Restart the rows ``rows`` (int array) from their first window."""
        raise NotImplementedError

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """``log|det J|`` of the map at windows (n, seq_len, dim) -> (n,)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Metadata recorded with the rollout (str/int/float/bool values)."""
        return {"kind": self.kind, "seq_len": self.seq_len, "pred_window": self.pred_window, "overlap": self.overlap}


class IntegratorStep(StepMap):
    """A classical integrator as a step map (``seq_len = pred_window = 1``), NumPy float64.

    Parameters
    ----------
    system : System or str
    integrator : Integrator or str
        One of ``vpintegrator.integrators.list_integrators()``.
    dt : float
    """

    kind = "integrator"

    def __init__(self, system, integrator, dt: float) -> None:
        from .integrators import get_integrator
        from .systems import get_system

        self.system = get_system(system)
        self.integrator = get_integrator(integrator)
        self.integrator.supports(self.system)
        self.dim = self.system.dim
        self.dt = float(dt)
        self.name = self.integrator.name

    def start(self, window0, limit):
        self._y0 = np.array(window0[:, -1], dtype=np.float64)  # (n_traj, dim)
        self._y = self._y0.copy()
        self._limit = np.asarray(limit, dtype=np.float64)

    def _step(self, y: np.ndarray) -> np.ndarray:
        try:
            with np.errstate(all="ignore"):
                return self.integrator.step(self.system, y, self.dt)
        except VPIntegratorError:
            # a Newton failure: find the failing rows one by one, mark them NaN (they fail), keep the rest
            out = np.empty_like(y)
            for i in range(y.shape[0]):
                try:
                    with np.errstate(all="ignore"):
                        out[i] = self.integrator.step(self.system, y[i : i + 1], self.dt)[0]
                except VPIntegratorError:
                    out[i] = np.nan
            return out

    def generate(self, n):
        y = self._y
        out = np.empty((y.shape[0], n, self.dim))
        for k in range(n):
            y = self._step(y)
            out[:, k] = y
            bad = _bad_rows(y, self._limit)
            if bad.any():  # restart failed rows so that no NaN/overflow enters the next (implicit) step
                y = np.where(bad[:, None], self._y0, y)
        self._y = y
        return out

    def reset(self, rows):
        self._y[rows] = self._y0[rows]

    def log_abs_det_jacobian(self, windows):
        from .metrics import log_abs_det

        states = np.asarray(windows, dtype=np.float64)[:, -1]  # (n, dim)
        with np.errstate(all="ignore"):
            return log_abs_det(self.integrator.step_jacobian(self.system, states, self.dt))

    def describe(self):
        return {**super().describe(), "integrator": self.name, "order": int(self.integrator.order)}


class ExactFlowStep(StepMap):
    """The exact flow (SciPy DOP853 at tight tolerances) as a step map, solved a chunk at a time.

    Each call of :meth:`generate` restarts ``solve_flow`` from the last state, so a long horizon costs
    no more memory than one chunk.

    Parameters
    ----------
    system : System or str
    dt : float
    rtol, atol : float
    """

    kind = "flow"

    def __init__(self, system, dt: float, rtol: float = 1e-12, atol: float = 1e-12) -> None:
        from .systems import get_system

        self.system = get_system(system)
        self.dim = self.system.dim
        self.dt = float(dt)
        self.rtol, self.atol = float(rtol), float(atol)
        self.name = "exact_flow"

    def start(self, window0, limit):
        self._y0 = np.array(window0[:, -1], dtype=np.float64)
        self._y = self._y0.copy()
        self._limit = np.asarray(limit, dtype=np.float64)

    def generate(self, n):
        from .data import solve_flow

        t = self.dt * np.arange(n + 1)
        y = np.asarray(solve_flow(self.system, self._y, t, rtol=self.rtol, atol=self.atol))[:, 1:]
        y = np.ascontiguousarray(y, dtype=np.float64)
        self._y = y[:, -1].copy()
        bad = _bad_rows(self._y, self._limit)
        self._y[bad] = self._y0[bad]
        return y

    def reset(self, rows):
        self._y[rows] = self._y0[rows]

    def log_abs_det_jacobian(self, windows):
        # Liouville: log det of the flow map = time integral of the divergence (0 for every shipped system)
        states = np.asarray(windows, dtype=np.float64)[:, -1]
        div = self.system.divergence(states)
        return np.where(np.abs(div) == 0.0, 0.0, np.nan)

    def describe(self):
        return {**super().describe(), "rtol": self.rtol, "atol": self.atol}


def resolve_device(device: str | None = "auto"):
    """``"auto"`` -> CUDA when available, else CPU; otherwise ``torch.device(device)`` (validated)."""
    import torch

    name = "auto" if device is None else str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise VPIntegratorError(
            f"--device {name!r}: CUDA is not available on this machine; use --device cpu or auto"
        )
    try:
        return torch.device(name)
    except RuntimeError:
        raise VPIntegratorError(f"--device must be auto, cpu, cuda or cuda:N; got {device!r}") from None


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
    jit : bool
        Run a ``torch.jit.trace`` + ``freeze`` of the model for the rollout's batch shape (3-8x less
        per-call overhead than eager at batch 1, measured; same numbers). It is checked against the eager
        model on the first window and dropped if it differs or cannot be traced.
    scalar_max_batch : int
        Rollouts of at most this many trajectories of a float64 VPFF, VPT or ST model on the CPU run the
        model as generated Python on floats (:func:`vpintegrator.nn.inference.compile_scalar`): at batch 1
        30-65x less time per call than the trace, the same numbers to rounding (≤ 1e-12 per call, checked
        against the model on the first window; otherwise, and for other models, dtypes or devices, torch
        runs it; a 300-step rollout of the shipped VPT ends 3.6e-12 from eager, the trace's 2.3e-12).
        0 turns it off.
    """

    kind = "model"

    def __init__(
        self,
        model,
        device: str = "auto",
        overlap: bool = False,
        volume_dtype=None,
        jit: bool = True,
        scalar_max_batch: int = SCALAR_MAX_BATCH,
    ) -> None:
        import torch

        for attr in ("dim", "seq_len", "pred_window"):
            if not isinstance(getattr(model, attr, None), int):
                raise VPIntegratorError(
                    f"model {type(model).__name__} has no int attribute {attr!r}; models from "
                    "vpintegrator.build_model/load_model have dim, seq_len and pred_window"
                )
        self.model = model
        self.device = resolve_device(device)
        self.model.to(self.device).eval()
        param = next(iter(model.parameters()), None)
        self.dtype = param.dtype if param is not None else torch.float32
        self.dim, self.seq_len, self.pred_window = int(model.dim), int(model.seq_len), int(model.pred_window)
        self.overlap = bool(overlap)
        self.volume_dtype = torch.float64 if volume_dtype is None else volume_dtype
        self._volume_model = None
        self._buf = None
        self.jit = bool(jit)
        if isinstance(scalar_max_batch, bool) or not isinstance(scalar_max_batch, int) or scalar_max_batch < 0:
            raise VPIntegratorError(f"scalar_max_batch must be an int >= 0 (0: off); got {scalar_max_batch!r}")
        self.scalar_max_batch = scalar_max_batch
        self._fn = model
        self._scalar = None  # ScalarForward while the scalar runner is in use
        self._runner = "eager"
        self.name = str(getattr(model, "config", {}).get("name", type(model).__name__.lower()))

    def start(self, window0, limit):
        import torch

        w = torch.as_tensor(np.asarray(window0, dtype=np.float64))
        self._init = w.to(device=self.device, dtype=self.dtype)  # (n_traj, seq_len, dim)
        self._ctx = self._init.clone()
        self._fn, self._runner = self.model, "eager"
        self._scalar = self._compile_scalar(self._init)
        if self._scalar is not None:
            self._runner = "python scalar"
        elif self.jit:
            self._use_trace()

    def _use_trace(self) -> None:
        traced = self._trace(self._init)
        if traced is not None:
            self._fn, self._runner = traced, "jit.trace+freeze"

    def _compile_scalar(self, example):
        """The model as generated Python (:mod:`vpintegrator.nn.inference`) when it applies, or None."""
        import torch

        from .nn.inference import ScalarUnsupported, compile_scalar

        if not (
            0 < example.shape[0] <= self.scalar_max_batch
            and self.dtype == torch.float64
            and self.device.type == "cpu"
        ):
            return None
        try:
            scalar = compile_scalar(self.model)
            with torch.no_grad():
                for x in (example, 1.01 * example + 0.01):
                    want, got = self.model(x), scalar(x)
                    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True):
                        return None
        except (ScalarUnsupported, ArithmeticError):
            return None
        return scalar

    def _trace(self, example):
        """A frozen TorchScript trace of the model for inputs shaped like ``example``, or None."""
        import warnings

        import torch

        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                traced = torch.jit.freeze(torch.jit.trace(self.model.eval(), example, check_trace=False))
                probe = 1.01 * example + 0.01  # a second input (no RNG: leave the user's seed alone)
                for x in (example, probe):
                    want, got = self.model(x), traced(x)
                    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True):
                        return None
            with torch.inference_mode():  # TorchScript profiles the first calls (tens of ms): not per-step time
                for _ in range(3):
                    traced(example)
        except Exception:  # anything the tracer cannot handle: run eagerly
            return None
        return traced

    def generate(self, n):
        import torch

        if self._scalar is not None:
            try:
                return self._generate_scalar(n)
            except ArithmeticError:  # e.g. math.exp overflow in a blown-up state: torch from here on
                self._scalar, self._runner = None, "eager"
                if self.jit:
                    self._use_trace()
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
            return buf[:, T : T + n].to(device="cpu", dtype=torch.float64, copy=True).numpy()

    def _generate_scalar(self, n):
        """:meth:`generate` with the generated Python forward, one trajectory after the other."""
        import torch

        fn, T, P, dim = self._scalar.fn, self.seq_len, self.pred_window, self.dim
        adv = self.advance
        n_calls = -(-n // adv)
        keep = dim * adv  # numbers kept per call
        ctx = self._ctx.reshape(self._ctx.shape[0], -1).tolist()  # (n_traj, T·dim) float64
        out = np.empty((len(ctx), n_calls * adv * dim))
        for r, window in enumerate(ctx):
            states: list[float] = []
            window = tuple(window)
            for _ in range(n_calls):
                y = fn(window)
                states.extend(y[:keep] if keep != len(y) else y)
                window = y if keep == len(y) == len(window) else (window + y[:keep])[-T * dim :]
            out[r] = states
            ctx[r] = window
        self._ctx = torch.tensor(ctx, dtype=torch.float64).reshape(-1, T, dim)
        return out.reshape(len(ctx), n_calls * adv, dim)[:, :n]

    def reset(self, rows):
        import torch

        with torch.inference_mode():
            idx = torch.as_tensor(np.asarray(rows), device=self.device)
            self._ctx[idx] = self._init[idx]

    def log_abs_det_jacobian(self, windows):
        import copy

        from .metrics import window_log_det_jacobian

        if self._volume_model is None:
            self._volume_model = copy.deepcopy(self.model).to(dtype=self.volume_dtype).eval()
            for p in self._volume_model.parameters():
                p.requires_grad_(False)
        return window_log_det_jacobian(self._volume_model, windows, overlap=self.overlap)

    def describe(self):
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


# --------------------------------------------------------------------------- engine


@dataclass(eq=False)
class Rollout:
    """The result of :func:`rollout`.

    Attributes
    ----------
    y : ndarray, shape (n_traj, n_steps + 1, dim), or None
        The states (None when streamed to a sink).
    t : ndarray, shape (n_steps + 1,)
    failed_step : ndarray, shape (n_traj,)
        First step at which each trajectory failed (non-finite or blown up), −1 if never; its states
        from then on are NaN.
    seconds : float
        Wall time spent producing states (the step map only: no set-up such as tracing, no sink, no
        callback).
    meta : dict
    """

    y: np.ndarray | None
    t: np.ndarray
    failed_step: np.ndarray
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        """Steps taken (the result holds n_steps + 1 states)."""
        return int(self.t.shape[0] - 1)

    @property
    def seconds_per_step(self) -> float:
        """Wall time of one step of the whole batch."""
        return self.seconds / max(1, self.n_steps)

    @property
    def n_failed(self) -> int:
        return int(np.sum(self.failed_step >= 0))

    def trajectories(self) -> Trajectories:
        """The states as a :class:`Trajectories` (only for an in-memory rollout)."""
        if self.y is None:
            raise VPIntegratorError("this rollout was streamed to a file; read it back from there")
        return Trajectories(y=self.y, t=self.t, meta=self.meta)


def _as_window(window0: Any, seq_len: int, dim: int) -> np.ndarray:
    w = np.array(window0, dtype=np.float64)
    if w.ndim == 2 and seq_len == 1:
        w = w[:, None]
    if w.ndim != 3 or w.shape[1:] != (seq_len, dim) or w.shape[0] == 0:
        raise VPIntegratorError(
            f"window0 must have shape (n_traj, seq_len, dim) = (n_traj, {seq_len}, {dim}) (or (n_traj, {dim}) "
            f"when seq_len = 1); got shape {w.shape}"
        )
    return w


def rollout(
    step_map: StepMap,
    window0: np.ndarray,
    n_steps: int,
    dt: float,
    *,
    t0: float = 0.0,
    sink: Callable[[int, np.ndarray], None] | Any | None = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    chunk_steps: int = CHUNK_STEPS,
    blowup: float = BLOWUP,
    progress: Callable[[int], None] | None = None,
) -> Rollout:
    """Iterate a step map from its first window to step ``n_steps``.

    Parameters
    ----------
    step_map : StepMap
        :class:`ModelStep`, :class:`IntegratorStep`, :class:`ExactFlowStep` (or :func:`make_step_map`).
    window0 : ndarray, shape (n_traj, seq_len, dim), or (n_traj, dim) when seq_len = 1
        The first ``seq_len`` states (steps 0 .. seq_len − 1); see :func:`initial_window`.
    n_steps : int
        Horizon in steps; the result holds states 0 .. n_steps. Must be >= ``seq_len``.
    dt : float
        Step size (for the time grid ``t0 + k dt``).
    sink : callable, h5py.Dataset or None
        Where the states go: ``sink(k0, block)`` with block (n_traj, n, dim) holding steps
        ``k0 .. k0+n−1``; an h5py dataset of shape (n_traj, n_steps + 1, dim) is written block by block;
        None keeps them in memory (``Rollout.y``).
    callback : callable, optional
        ``callback(k0, block)`` after each block (NaN after failures already set), e.g. streaming metrics.
    chunk_steps : int
        Steps per block: blocks start at multiples of ``chunk_steps`` (the last one may be shorter), so
        that they match an HDF5 dataset chunked by ``chunk_steps`` in time. The map itself runs in chunks
        of ``chunk_steps`` rounded down to a multiple of its advance.
    blowup : float
        A state with ‖z‖ > ``blowup`` × ‖z_0‖ (‖z_0‖ = 1 if zero) counts as failed.
    progress : callable, optional
        ``progress(n)`` after each chunk with the number of new steps.

    Returns
    -------
    Rollout
    """
    if not isinstance(step_map, StepMap):
        raise VPIntegratorError(f"step_map must be a vpintegrator StepMap; got {type(step_map).__name__}")
    T, dim, adv = step_map.seq_len, step_map.dim, step_map.advance
    w0 = _as_window(window0, T, dim)
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < T:
        raise VPIntegratorError(
            f"n_steps (the horizon) must be an int >= seq_len = {T} so that the map is applied at least once; "
            f"got {n_steps!r}. Raise t_end"
        )
    if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, (int, np.integer)) or chunk_steps < 1:
        raise VPIntegratorError(f"chunk_steps must be an int >= 1; got {chunk_steps!r}")
    if not (isinstance(blowup, (int, float)) and blowup > 0):
        raise VPIntegratorError(f"blowup must be a number > 0; got {blowup!r}")
    n_steps = int(n_steps)
    n_traj = w0.shape[0]
    t = float(t0) + float(dt) * np.arange(n_steps + 1)

    if sink is None:
        y_mem = np.empty((n_traj, n_steps + 1, dim))

        def write(k0, chunk):
            y_mem[:, k0 : k0 + chunk.shape[1]] = chunk

    elif callable(sink):
        y_mem, write = None, sink
    elif hasattr(sink, "shape") and hasattr(sink, "__setitem__"):
        if tuple(sink.shape) != (n_traj, n_steps + 1, dim):
            raise VPIntegratorError(
                f"sink dataset has shape {tuple(sink.shape)}; expected (n_traj, n_steps + 1, dim) = "
                f"({n_traj}, {n_steps + 1}, {dim})"
            )
        y_mem = None

        def write(k0, chunk):
            sink[:, k0 : k0 + chunk.shape[1]] = chunk

    else:
        raise VPIntegratorError(f"sink must be None, a callable or an h5py dataset; got {type(sink).__name__}")

    scale = np.linalg.norm(w0[:, 0], axis=-1)
    limit = blowup * np.where(scale > 0, scale, 1.0)
    failed = np.full(n_traj, -1, dtype=np.int64)

    def check(k0: int, chunk: np.ndarray) -> np.ndarray:
        n = chunk.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            norm = np.sqrt(np.einsum("ijk,ijk->ij", chunk, chunk))
        bad = ~(norm <= limit[:, None])  # (n_traj, n)
        new = (failed < 0) & bad.any(axis=1)
        if new.any():
            failed[new] = k0 + np.argmax(bad[new], axis=1)
        dead = failed >= 0
        if dead.any():
            after = dead[:, None] & (np.arange(k0, k0 + n)[None, :] >= failed[:, None])  # (n_traj, n)
            chunk[after] = np.nan
        return new

    def deliver(k0: int, block: np.ndarray) -> None:
        write(k0, block)
        if callback is not None:
            callback(k0, block)
        if progress is not None:
            progress(block.shape[1])

    # Output leaves in blocks aligned to multiples of chunk_steps (whatever the map's advance), so that a
    # chunked HDF5 sink gets whole chunks and needs no chunk cache; one block is all the engine holds.
    block_len = int(chunk_steps)
    user_sees_block = callback is not None or progress is not None or (sink is not None and callable(sink))
    stage = np.empty((n_traj, min(block_len, n_steps + 1), dim))
    staged = 0  # states in `stage`; it holds steps k_stage .. k_stage + staged - 1
    k_stage = 0

    def emit(chunk: np.ndarray) -> None:
        nonlocal staged, k_stage
        i = 0
        while i < chunk.shape[1]:
            take = min(stage.shape[1] - staged, chunk.shape[1] - i)
            stage[:, staged : staged + take] = chunk[:, i : i + take]
            staged += take
            i += take
            if staged == stage.shape[1] or k_stage + staged == n_steps + 1:
                deliver(k_stage, stage[:, :staged].copy() if user_sees_block else stage[:, :staged])
                k_stage += staged
                staged = 0

    first = w0.copy()
    check(0, first)
    emit(first)

    tic = time.perf_counter()
    step_map.start(w0, limit)  # one-off set-up (e.g. the TorchScript trace): not part of the per-step time
    setup_seconds = time.perf_counter() - tic
    seconds = 0.0
    dead0 = np.flatnonzero(failed >= 0)
    if dead0.size:
        step_map.reset(dead0)

    chunk_len = max(adv, (block_len // adv) * adv)
    k = T
    while k <= n_steps:
        n = min(chunk_len, n_steps + 1 - k)
        tic = time.perf_counter()
        chunk = step_map.generate(n)
        seconds += time.perf_counter() - tic
        new = check(k, chunk)
        if new.any():
            step_map.reset(np.flatnonzero(new))
        emit(chunk)
        k += n

    meta = {
        **step_map.describe(), "dt": float(dt), "t0": float(t0), "n_traj": n_traj, "blowup": float(blowup),
        "setup_seconds": setup_seconds,
    }
    return Rollout(y=y_mem, t=t, failed_step=failed, seconds=seconds, meta=meta)


def initial_window(system, y0: np.ndarray, dt: float, seq_len: int, method: str = "implicit_midpoint") -> np.ndarray:
    """The first ``seq_len`` states from initial conditions, by a classical integrator (paper: implicit
    midpoint) or ``method="exact_flow"`` (DOP853).

    Parameters
    ----------
    y0 : ndarray, shape (n_traj, dim)

    Returns
    -------
    ndarray, shape (n_traj, seq_len, dim)
    """
    from .systems import get_system

    system = get_system(system)
    y0 = np.atleast_2d(np.asarray(y0, dtype=np.float64))
    if seq_len == 1:
        return y0[:, None].copy()
    if method == "exact_flow":
        from .data import solve_flow

        return np.asarray(solve_flow(system, y0, float(dt) * np.arange(seq_len)), dtype=np.float64)
    from .integrators import integrate

    return integrate(system, y0, dt, seq_len - 1, method=method).y


# --------------------------------------------------------------------------- comparison runs (vp-rollout)

#: root attribute ``schema`` of a rollout file
ROLLOUT_SCHEMA = "vpintegrator-rollout"
ROLLOUT_SCHEMA_VERSION = 1
_INIT_CHOICES_EXTRA = ("reference", "exact_flow")


@dataclass
class RolloutConfig:
    """Everything ``vp-rollout`` needs (flags and TOML keys have the same names).

    Attributes
    ----------
    data : path
        A ``vp-gen`` HDF5 file: reference trajectories and their initial conditions.
    out : path
        The rollout HDF5 file; the metrics table goes beside it (same stem, ``.csv`` and ``.md``).
    models : list
        ``"[LABEL=]RUN_DIR_OR_CHECKPOINT"``, ``"pretrained:NAME"``, or ``(label, nn.Module)`` pairs.
        The label defaults to the run directory's name (or the file's stem; for ``best.pt``/``last.pt``
        the directory's name).
    integrators : list of str
        Classical integrators (``vpintegrator.list_integrators()``), or ``"exact_flow"`` (DOP853).
    t_end : float or None
        Horizon (default: the data's). Beyond the data the reference is continued on the fly with the
        data's own generator (its ``method`` attribute: DOP853 at its rtol/atol, or the classical
        integrator it was made with), from the file's last state.
    traj : list of int or None
        Trajectory indices into the data file; ``n_traj``: the first ``n_traj`` (default: all).
    init : str
        Where a model's first window (``seq_len`` states) comes from: ``"reference"`` (the reference
        trajectory), a classical integrator name (the paper: ``"implicit_midpoint"``) or ``"exact_flow"``.
    overlap : bool
        Overlapping windows for models (advance by one state) instead of non-overlapping ones (not volume
        preserving even for a VPT; see :class:`ModelStep`).
    device : str
        ``auto``, ``cpu``, ``cuda``, ``cuda:N`` (models only; classical integrators run in NumPy).
    chunk_steps : int
        Steps per chunk streamed to the file.
    blowup : float
        A state with ‖z‖ > blowup × ‖z_0‖ counts as failed.
    volume : bool
        Compute ``log|det J|`` of every step/window map (an extra Jacobian per step).
    jit : bool
        Trace models with TorchScript for speed (see :class:`ModelStep`).
    """

    data: str | Any
    out: str | Any = "rollout.h5"
    models: list = field(default_factory=list)
    integrators: list = field(default_factory=list)
    t_end: float | None = None
    traj: list | None = None
    n_traj: int | None = None
    init: str = "reference"
    overlap: bool = False
    device: str = "auto"
    chunk_steps: int = CHUNK_STEPS
    blowup: float = BLOWUP
    volume: bool = True
    jit: bool = True


def load_rollout_config(path=None, **overrides: Any) -> RolloutConfig:
    """A :class:`RolloutConfig` from a TOML file (keys as the fields, top level or in a ``[rollout]``
    table) with ``overrides`` on top (None values ignored: flags win only when given).

    Raises
    ------
    VPIntegratorError
        On unknown keys (listing the valid ones) or a missing ``data``.
    """
    import dataclasses
    import tomllib

    valid = [f.name for f in dataclasses.fields(RolloutConfig)]
    values: dict[str, Any] = {}
    if path is not None:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
        table = table.get("rollout", table)
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise VPIntegratorError(f"{path}: unknown key {unknown[0]!r}; valid keys: {', '.join(valid)}")
        values.update(table)
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise VPIntegratorError(f"rollout config: unknown key {unknown[0]!r}; valid keys: {', '.join(valid)}")
    if "data" not in values:
        where = f" or key 'data' in {path}" if path is not None else ""
        raise VPIntegratorError(f"no reference data: give --data FILE (a vp-gen HDF5){where}")
    for key in ("models", "integrators"):
        if isinstance(values.get(key), str):
            values[key] = [values[key]]
    return RolloutConfig(**values)


@dataclass
class RolloutReport:
    """What :func:`run_rollouts` wrote: the HDF5 file, the metrics table (CSV, Markdown) and its rows."""

    out: Any
    csv: Any
    markdown: Any
    rows: list
    failures: dict = field(default_factory=dict)


def _system_from_meta(meta: dict, where) -> Any:
    from .systems import system_from_meta

    return system_from_meta(meta, where)


def _label_for(spec: str) -> str:
    from pathlib import Path

    if spec.startswith("pretrained:"):
        return spec.split(":", 1)[1]
    p = Path(spec)
    if p.suffix == ".pt" and p.stem in ("best", "last") and p.parent.name:
        return p.parent.name
    return p.stem if p.suffix else p.name


def _parse_model(entry) -> tuple[str, Any, str]:
    """``entry`` -> (label, model, source)."""
    from pathlib import Path

    if isinstance(entry, tuple):
        label, model = entry
        if isinstance(model, (str, Path)):
            return str(label), _load(str(model)), str(model)
        return str(label), model, f"<{type(model).__name__} object>"
    text = str(entry)
    label = None
    head, sep, tail = text.partition("=")
    if sep and head and "/" not in head and not head.startswith("pretrained:"):
        label, text = head, tail
    return (label or _label_for(text)), _load(text), text


def _load(spec: str):
    from pathlib import Path

    from .models import load_model

    if not spec.startswith("pretrained:") and not Path(spec).exists():
        raise VPIntegratorError(
            f"--model {spec}: no such checkpoint file or run directory; give a vp-train run directory, a .pt "
            "file or pretrained:NAME"
        )
    return load_model(spec)


def _check_label(label: str, seen: set) -> None:
    if not label or "/" in label or label == "reference":
        raise VPIntegratorError(
            f"method label {label!r} is not usable; labels must be non-empty, contain no '/' and not be "
            "'reference' (give one as --model LABEL=PATH)"
        )
    if label in seen:
        raise VPIntegratorError(
            f"method label {label!r} is used twice; give distinct labels with --model LABEL=PATH"
        )
    seen.add(label)


def _select_traj(config: RolloutConfig, n_file: int, where) -> np.ndarray:
    if config.traj is not None and config.n_traj is not None:
        raise VPIntegratorError("give either --traj or --n-traj, not both")
    if config.traj is not None:
        try:
            idx = np.array([int(i) for i in config.traj], dtype=np.int64)
        except (TypeError, ValueError):
            raise VPIntegratorError(f"--traj must be integer indices; got {config.traj!r}") from None
        if idx.size == 0:
            raise VPIntegratorError("--traj is empty; give trajectory indices, e.g. --traj 0,3")
        bad = idx[(idx < 0) | (idx >= n_file)]
        if bad.size:
            raise VPIntegratorError(
                f"--traj index {int(bad[0])} is out of range: {where} has {n_file} trajectories (0 .. {n_file - 1})"
            )
        if np.unique(idx).size != idx.size:
            raise VPIntegratorError(f"--traj lists an index twice: {config.traj!r}")
        return idx
    if config.n_traj is not None:
        n = config.n_traj
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= n_file:
            raise VPIntegratorError(f"--n-traj must be an int in 1 .. {n_file} (trajectories in {where}); got {n!r}")
        return np.arange(int(n))
    return np.arange(n_file)


def _set_attrs(obj, attrs: dict) -> None:
    import json

    import h5py

    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, str):  # str subclasses (TorchVersion, np.str_) would become fixed-width numpy
            obj.attrs[key] = str(value)
        elif isinstance(value, dict):
            obj.attrs[key] = json.dumps(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            obj.attrs[key] = np.array(list(value), dtype=h5py.string_dtype())
        else:
            obj.attrs[key] = value


def _reference_generator(meta: dict, system, dt: float) -> StepMap:
    from .integrators import list_integrators

    method = str(meta.get("method", "dop853"))
    if method in list_integrators():
        return IntegratorStep(system, method, dt)
    return ExactFlowStep(system, dt, rtol=float(meta.get("rtol", 1e-12)), atol=float(meta.get("atol", 1e-12)))


def run_rollouts(config: RolloutConfig, log: Callable[[str], None] | None = None) -> RolloutReport:
    """Roll out models and classical integrators from a data set's initial conditions; write everything.

    Writes ``config.out`` (HDF5, atomically; layout in :func:`read_rollout`) and the metrics table beside
    it (``<stem>.csv``, ``<stem>.md``; one row per method, columns in
    :func:`vpintegrator.metrics.summary_row`). Trajectories, per-step metrics and volume are streamed in
    chunks of ``config.chunk_steps`` steps.

    Parameters
    ----------
    config : RolloutConfig
    log : callable, optional
        Receives one progress line per method.

    Returns
    -------
    RolloutReport
    """
    import json
    from pathlib import Path

    import h5py

    from ._io import atomic_path
    from ._version import __version__
    from .data import read_metadata, read_trajectories
    from .integrators import list_integrators
    from .metrics import TrajectoryMetricsStream, VolumeStream, summary_row, write_table
    from .systems import system_meta

    say = log or (lambda line: None)
    data = Path(config.data)
    meta = read_metadata(data)
    system = _system_from_meta(meta, data)
    dt = float(meta["dt"])
    n_file_traj = int(meta["n_traj"])
    idx = _select_traj(config, n_file_traj, data)
    ref_file = read_trajectories(data, traj=idx)
    t_file = ref_file.t
    t0 = float(t_file[0])
    n_file = ref_file.n_states
    if config.t_end is None:
        n_steps = n_file - 1
    else:
        try:
            t_end = float(config.t_end)
        except (TypeError, ValueError):
            raise VPIntegratorError(f"--t-end must be a number; got {config.t_end!r}") from None
        n_steps = int(round((t_end - t0) / dt))
        if not math.isfinite(t_end) or n_steps < 1:
            raise VPIntegratorError(
                f"--t-end {config.t_end!r} gives {n_steps} steps of dt = {dt:g} from t0 = {t0:g}; give t_end >= {t0 + dt:g}"
            )
    if isinstance(config.chunk_steps, bool) or not isinstance(config.chunk_steps, int) or config.chunk_steps < 1:
        raise VPIntegratorError(f"chunk_steps must be an int >= 1; got {config.chunk_steps!r}")

    valid_init = (*_INIT_CHOICES_EXTRA, *list_integrators())
    if config.init not in valid_init:
        raise VPIntegratorError(f"--init {config.init!r} is unknown; valid: {', '.join(valid_init)}")

    # every method is prepared (and every input checked) before anything is computed
    methods: list[tuple[str, StepMap, str]] = []
    seen: set = set()
    names = []
    for entry in config.integrators:
        names += [n.strip() for n in str(entry).split(",") if n.strip()]
    valid_int = (*list_integrators(), "exact_flow")
    for name in names:
        if name not in valid_int:
            raise VPIntegratorError(f"--integrators: unknown integrator {name!r}; valid: {', '.join(valid_int)}")
        _check_label(name, seen)
        step_map = ExactFlowStep(system, dt) if name == "exact_flow" else IntegratorStep(system, name, dt)
        methods.append((name, step_map, name))
    for entry in config.models:
        label, model, source = _parse_model(entry)
        _check_label(label, seen)
        if int(getattr(model, "dim", -1)) != system.dim:
            raise VPIntegratorError(
                f"--model {source}: model dim {getattr(model, 'dim', None)} does not match the data's dim "
                f"{system.dim} ({system.name} in {data}); roll it out on data of its own system"
            )
        step_map = ModelStep(model, device=config.device, overlap=config.overlap, jit=config.jit)
        if n_steps < step_map.seq_len:
            raise VPIntegratorError(
                f"--t-end: the horizon has {n_steps} steps, shorter than seq_len = {step_map.seq_len} of model "
                f"{label!r}; raise --t-end to at least {t0 + step_map.seq_len * dt:g}"
            )
        methods.append((label, step_map, source))
    if not methods:
        raise VPIntegratorError("nothing to roll out: give --model and/or --integrators")

    n_traj, dim = idx.size, system.dim
    shape = (n_traj, n_steps + 1, dim)
    t = t0 + dt * np.arange(n_steps + 1)
    ct = min(n_traj, 64)
    cs = min(n_steps + 1, config.chunk_steps)
    out = Path(config.out)
    rows: list[dict] = []
    failures: dict = {}
    reference_gen = _reference_generator(meta, system, dt)
    names_inv = tuple(system.invariant_names)

    def metric_ds(group, name, shape2):
        return group.create_dataset(name, shape=shape2, dtype=np.float64, chunks=(ct, max(1, min(shape2[1], cs))))

    # every dataset is written in whole chunks (the engine's blocks are chunk-aligned), so one chunk of
    # cache per dataset is enough; HDF5's default (8 MiB per open dataset) would only hold memory
    cache = max(1 << 16, 2 * ct * cs * dim * 8)
    with atomic_path(out, suffix=".h5") as tmp, h5py.File(tmp, "w", rdcc_nbytes=cache, rdcc_w0=1.0) as f:
        _set_attrs(
            f,
            {
                "schema": ROLLOUT_SCHEMA,
                "schema_version": ROLLOUT_SCHEMA_VERSION,
                **system_meta(system),
                "dim": dim,
                "dt": dt,
                "t0": t0,
                "t_end": float(t[-1]),
                "n_traj": n_traj,
                "n_steps": n_steps + 1,
                "invariant_names": list(names_inv),
                "methods": [m[0] for m in methods],
                "method_kinds": [m[1].kind for m in methods],
                "data_file": str(data),
                "data_method": str(meta.get("method", "")),
                "data_n_steps": n_file,
                "reference": (
                    f"{data} for t <= {t_file[-1]:g}"
                    + (f", continued with {getattr(reference_gen, 'name', '?')} beyond" if n_steps + 1 > n_file else "")
                ),
                "init": config.init,
                "overlap": bool(config.overlap),
                "blowup": float(config.blowup),
                "chunk_steps": int(config.chunk_steps),
                "vpintegrator_version": __version__,
            },
        )
        f.create_dataset("t", data=t)
        f.create_dataset("traj_index", data=idx)

        # reference: the file, then (beyond it) the data's own generator continued from its last state
        g = f.create_group("reference")
        yref = g.create_dataset("y", shape=shape, dtype=np.float64, chunks=(ct, cs, dim))
        n_take = min(n_file, n_steps + 1)
        for k0 in range(0, n_take, cs):
            yref[:, k0 : min(n_take, k0 + cs)] = ref_file.y[:, k0 : min(n_take, k0 + cs)]
        ref_failed = np.full(n_traj, -1, dtype=np.int64)
        if n_steps + 1 > n_file:
            say(f"reference: continuing {data.name} from t = {t_file[-1]:g} to {t[-1]:g} with {reference_gen.name}")
            offset = n_file - 1

            def ref_sink(k0, chunk):
                yref[:, offset + k0 : offset + k0 + chunk.shape[1]] = chunk

            cont = rollout(
                reference_gen, ref_file.y[:, -1], n_steps - offset, dt, t0=float(t_file[-1]), sink=ref_sink,
                chunk_steps=config.chunk_steps, blowup=config.blowup,
            )
            ref_failed = np.where(cont.failed_step >= 0, cont.failed_step + offset, -1)
        g.create_dataset("failed_step", data=ref_failed)
        del ref_file
        ref_stream = TrajectoryMetricsStream(system, n_traj, t_center=0.5 * (t[0] + t[-1]))
        ref_inv = {name: metric_ds(g, f"invariants/{name}", (n_traj, n_steps + 1)) for name in names_inv}
        for k0 in range(0, n_steps + 1, cs):
            k1 = min(n_steps + 1, k0 + cs)
            per_step = ref_stream.update(t[k0:k1], yref[:, k0:k1], None)
            for name in names_inv:
                ref_inv[name][:, k0:k1] = per_step[f"invariant/{name}"]
        ref_summary = ref_stream.summary()
        _set_attrs(g, {"label": "reference", "kind": "reference", "source": str(data),
                       **{f"max_rel_drift_{n}": float(np.max(ref_summary[f"max_rel_drift_{n}"])) for n in names_inv}})

        for label, step_map, source in methods:
            T = step_map.seq_len
            if T == 1 or config.init == "reference":
                window0 = yref[:, :T]
                init = "reference" if T > 1 else "initial condition"
            else:
                window0 = initial_window(system, yref[:, 0], dt, T, method=config.init)
                init = config.init
            g = f.create_group(f"methods/{label}")
            gy = g.create_dataset("y", shape=shape, dtype=np.float64, chunks=(ct, cs, dim))
            err_ds = metric_ds(g, "rel_error", (n_traj, n_steps + 1))
            inv_ds = {name: metric_ds(g, f"invariants/{name}", (n_traj, n_steps + 1)) for name in names_inv}
            stream = TrajectoryMetricsStream(system, n_traj, t_center=0.5 * (t[0] + t[-1]))
            vol = None
            if config.volume:
                vol = VolumeStream(step_map.log_abs_det_jacobian, n_traj, T, step_map.advance, n_steps)
                g.create_dataset("map_step", data=vol.map_step)
                ld_ds = metric_ds(g, "log_det_J", (n_traj, vol.n_maps))
                cum_ds = metric_ds(g, "cum_log_det_J", (n_traj, vol.n_maps))

            def callback(k0, chunk, stream=stream, vol=vol, err_ds=err_ds, inv_ds=inv_ds):
                k1 = k0 + chunk.shape[1]
                per_step = stream.update(t[k0:k1], chunk, yref[:, k0:k1])
                err_ds[:, k0:k1] = per_step["rel_error"]
                for name in names_inv:
                    inv_ds[name][:, k0:k1] = per_step[f"invariant/{name}"]
                if vol is not None:
                    maps, logdet, cum = vol.update(chunk)
                    if logdet.shape[1]:
                        ld_ds[:, maps] = logdet
                        cum_ds[:, maps] = cum

            say(f"{label}: rolling out {n_traj} trajectories x {n_steps} steps ({step_map.kind}, init {init})")
            res = rollout(
                step_map, window0, n_steps, dt, t0=t0, sink=gy, callback=callback,
                chunk_steps=config.chunk_steps, blowup=config.blowup,
            )
            g.create_dataset("failed_step", data=res.failed_step)
            per_traj = stream.summary()
            row = summary_row(
                label, per_traj, names_inv,
                max_abs_cum_log_det_J=None if vol is None else vol.max_abs_cum,
                seconds_per_step=res.seconds_per_step, failed_step=res.failed_step,
            )
            rows.append(row)
            if res.n_failed:
                first = int(np.argmax(res.failed_step >= 0))
                failures[label] = (res.n_failed, int(idx[first]), int(res.failed_step[first]))
                say(
                    f"{label}: {res.n_failed} of {n_traj} trajectories failed (blow-up or non-finite); e.g. "
                    f"trajectory {int(idx[first])} at step {int(res.failed_step[first])} (t = {t[res.failed_step[first]]:g})"
                )
            _set_attrs(
                g,
                {
                    **{k: v for k, v in res.meta.items() if isinstance(v, (str, int, float, bool))},
                    "label": label,
                    "source": source,
                    "init": init,
                    "seconds": float(res.seconds),
                    "seconds_per_step": float(res.seconds_per_step),
                    "n_failed": res.n_failed,
                    **{f"summary_{k}": v for k, v in row.items() if k != "method"},
                },
            )
        f.attrs["summary_json"] = json.dumps(rows)
    csv_path, md_path = write_table(rows, out.with_suffix(""))
    return RolloutReport(out=out, csv=csv_path, markdown=md_path, rows=rows, failures=failures)


# --------------------------------------------------------------------------- reading rollout files


@dataclass(eq=False)
class MethodRollout:
    """One method's part of a rollout file (arrays subsampled in time as read).

    Attributes
    ----------
    label, kind : str
        ``kind`` is ``"reference"``, ``"integrator"``, ``"model"`` or ``"flow"``.
    y : ndarray, shape (n_traj, n, dim)
    invariants : dict
        name -> ndarray, shape (n_traj, n)
    rel_error : ndarray, shape (n_traj, n), or None (the reference)
    map_t : ndarray, shape (n_maps,), or None
        Time of the last state each step/window map produced.
    log_det_J, cum_log_det_J : ndarray, shape (n_traj, n_maps), or None
    failed_step : ndarray, shape (n_traj,)
    attrs : dict
    """

    label: str
    kind: str
    y: np.ndarray
    invariants: dict
    rel_error: np.ndarray | None
    map_t: np.ndarray | None
    log_det_J: np.ndarray | None
    cum_log_det_J: np.ndarray | None
    failed_step: np.ndarray
    attrs: dict


@dataclass(eq=False)
class RolloutResult:
    """A rollout file read back by :func:`read_rollout`; what the plotting functions take.

    Attributes
    ----------
    path : Path
    system : str
    params : dict
    dt : float
    t : ndarray, shape (n,)
    traj_index : ndarray, shape (n_traj,)
        Indices of the trajectories in the data file.
    reference : MethodRollout
    methods : dict
        label -> MethodRollout, in the order they were run.
    table : list of dict
        The metrics table rows.
    meta : dict
        Root attributes.
    """

    path: Any
    system: str
    params: dict
    dt: float
    t: np.ndarray
    traj_index: np.ndarray
    reference: MethodRollout
    methods: dict
    table: list
    meta: dict

    @property
    def invariant_names(self) -> tuple:
        return tuple(self.meta.get("invariant_names", ()))

    @property
    def n_traj(self) -> int:
        return int(self.reference.y.shape[0])

    def get_system(self):
        """The :class:`~vpintegrator.systems.System` the rollout ran on."""
        return _system_from_meta(self.meta, self.path)

    def trajectories(self, label: str = "reference") -> Trajectories:
        """One method's states (or the reference) as a :class:`Trajectories`."""
        m = self.reference if label == "reference" else self.methods.get(label)
        if m is None:
            raise VPIntegratorError(f"{self.path}: no method {label!r}; methods: reference, {', '.join(self.methods)}")
        return Trajectories(y=m.y, t=self.t, meta={"system": self.system, "dt": self.dt, "method": label})


def _attr(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [_attr(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return v.item()
    return v


def read_rollout(path, traj=None, max_points: int | None = None) -> RolloutResult:
    """Read a rollout file written by :func:`run_rollouts` (``vp-rollout``).

    Layout: root attributes (``schema = "vpintegrator-rollout"``, system, ``param_<name>``, dt, t0,
    t_end, ``n_steps`` (states), methods, invariant_names, data_file, init, overlap, summary_json, ...);
    ``/t`` (n_steps,); ``/traj_index`` (n_traj,); ``/reference/{y, invariants/<name>, failed_step}``;
    ``/methods/<label>/{y, rel_error, invariants/<name>, failed_step, map_step, log_det_J,
    cum_log_det_J}`` with ``y`` (n_traj, n_steps, dim), per-step metrics (n_traj, n_steps), volume
    (n_traj, n_maps); method attributes: kind, source, init, seconds_per_step, model/integrator details.

    Parameters
    ----------
    path : path
    traj : int, list of int or None
        Positions (0 .. n_traj−1 in the file, not data-file indices) to read; default all.
    max_points : int, optional
        Read every k-th step so that at most about ``max_points`` time points come back (for plots of
        long rollouts).

    Returns
    -------
    RolloutResult
    """
    import errno
    import json
    from pathlib import Path

    import h5py

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise VPIntegratorError(f"{path}: not a readable HDF5 file ({' '.join(str(err).split())}); give a vp-rollout output") from None
    with f:
        meta = {k: _attr(v) for k, v in f.attrs.items()}
        if meta.get("schema") != ROLLOUT_SCHEMA:
            raise VPIntegratorError(
                f"{path}: root attribute 'schema' is {meta.get('schema')!r}, expected {ROLLOUT_SCHEMA!r}; "
                "give a file written by vp-rollout"
            )
        n_total = f["t"].shape[0]
        stride = 1 if not max_points or n_total <= max_points else -(-n_total // int(max_points))
        steps = slice(0, None, stride)
        n_traj_file = f["traj_index"].shape[0]
        if traj is None:
            rows = slice(None)
        else:
            rows = np.atleast_1d(np.asarray(traj, dtype=np.int64))
            if rows.size == 0 or rows.min() < 0 or rows.max() >= n_traj_file:
                raise VPIntegratorError(f"{path}: traj {traj!r} out of range; the file holds {n_traj_file} trajectories")
            rows = np.unique(rows)
        t = f["t"][steps]
        names = tuple(meta.get("invariant_names", ()))

        def read2(ds):
            return ds[:, steps][rows] if isinstance(rows, np.ndarray) else ds[rows, steps]

        def read_group(g, label):
            y = read2(g["y"])
            inv = {n: read2(g[f"invariants/{n}"]) for n in names if f"invariants/{n}" in g}
            err = read2(g["rel_error"]) if "rel_error" in g else None
            map_t = ld = cum = None
            if "log_det_J" in g:
                n_maps = g["map_step"].shape[0]
                ms = slice(0, None, 1 if not max_points or n_maps <= max_points else -(-n_maps // int(max_points)))
                map_step = g["map_step"][ms]
                map_t = float(meta["t0"]) + float(meta["dt"]) * map_step
                ld = g["log_det_J"][:, ms][rows] if isinstance(rows, np.ndarray) else g["log_det_J"][rows, ms]
                cum = g["cum_log_det_J"][:, ms][rows] if isinstance(rows, np.ndarray) else g["cum_log_det_J"][rows, ms]
            failed = g["failed_step"][:][rows]
            attrs = {k: _attr(v) for k, v in g.attrs.items()}
            return MethodRollout(label, attrs.get("kind", "?"), y, inv, err, map_t, ld, cum, failed, attrs)

        reference = read_group(f["reference"], "reference")
        methods = {label: read_group(f[f"methods/{label}"], label) for label in meta.get("methods", [])}
        params = {k[len("param_"):]: v for k, v in meta.items() if k.startswith("param_")}
        idx = f["traj_index"][:][rows]
    table = json.loads(meta.get("summary_json", "[]"))
    return RolloutResult(
        path=path, system=meta["system"], params=params, dt=float(meta["dt"]), t=t, traj_index=idx,
        reference=reference, methods=methods, table=table, meta=meta,
    )
