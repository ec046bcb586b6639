"""The plug-in surfaces as ``typing.Protocol``s: what the package asks of a thing a user can plug in.

Each surface the package calls into has one Protocol here, beside the registry or base class that
ships with it (the base class stays: it supplies checks and defaults; the Protocol is the contract):

| Protocol | what plugs in | registered / passed by | shipped base class |
|---|---|---|---|
| [`SystemProtocol`][vpintegrator.protocols.SystemProtocol] | an ODE ``dy/dt = f(y)`` | ``register_system``, ``"module:Class"`` | ``vpintegrator.systems.System`` |
| [`IntegratorProtocol`][vpintegrator.protocols.IntegratorProtocol] | a one-step method | ``register_integrator`` | ``vpintegrator.integrators.Integrator`` |
| [`ModelProtocol`][vpintegrator.protocols.ModelProtocol] | a window map (a ``torch.nn.Module``) | ``register_model``, ``"module:Class"`` | ``torch.nn.Module`` |
| [`StepMapProtocol`][vpintegrator.protocols.StepMapProtocol] | what a rollout advances | ``run_rollouts`` | ``vpintegrator.stepping.StepMap`` |
| [`PackerProtocol`][vpintegrator.protocols.PackerProtocol] | a layer's packing for the compiled model runner | ``register_packer`` | (a function) |
| [`SinkProtocol`][vpintegrator.protocols.SinkProtocol] | a tracking sink of the training log | ``fit(..., logger=obj)``, ``make_sinks`` (``logger``) | (none) |

All are ``runtime_checkable``: ``isinstance(x, SystemProtocol)`` checks that the members exist (not their
signatures; ``tests/test_layout.py`` also checks that the shipped plug-ins accept the Protocols'
arguments). Arrays are NumPy float64 unless said otherwise; this module imports nothing at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

__all__ = [
    "SystemProtocol", "IntegratorProtocol", "ModelProtocol", "StepMapProtocol", "PackerProtocol", "SinkProtocol",
]


@runtime_checkable
class SystemProtocol(Protocol):
    """An autonomous ODE on ``R^dim``; states ``y`` of shape (..., dim)."""

    name: str
    dim: int
    invariant_names: tuple[str, ...]
    shear_splittable: bool
    separable: bool

    def params(self) -> dict[str, Any]:
        """The parameters (what files record)."""
        ...

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        """f(y), shape (..., dim) -> (..., dim)."""
        ...

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        """df/dy, shape (..., dim) -> (..., dim, dim)."""
        ...

    def invariants(self, y: Any) -> dict[str, Any]:
        """name -> invariant values, shape (..., dim) -> (...)."""
        ...


@runtime_checkable
class IntegratorProtocol(Protocol):
    """A one-step method over a batch of states (batch, dim)."""

    name: str
    order: int

    def supports(self, system: SystemProtocol) -> None:
        """Raise a one-line error if the method cannot run on ``system``."""
        ...

    def step(self, system: Any, y: np.ndarray, dt: float) -> np.ndarray:
        """The states one step ``dt`` > 0 later, (batch, dim) -> (batch, dim)."""
        ...

    def step_jacobian(self, system: Any, y: np.ndarray, dt: float) -> np.ndarray:
        """d y_next / d y, (batch, dim) -> (batch, dim, dim)."""
        ...

    def signed_step(self, system: Any, y: np.ndarray, h: float) -> np.ndarray:
        """A step of either sign (``h`` < 0 runs backwards), (batch, dim) -> (batch, dim)."""
        ...


@runtime_checkable
class ModelProtocol(Protocol):
    """A neural window map: windows (batch, ``seq_len``, ``dim``) -> (batch, ``pred_window``, ``dim``)."""

    dim: int
    seq_len: int
    pred_window: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        ...

    def parameters(self, recurse: bool = True) -> Any:
        ...

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        ...


@runtime_checkable
class StepMapProtocol(Protocol):
    """What the rollout engine advances (a model, an integrator, the exact flow); see
    ``vpintegrator.rollout.engine.StepMap`` for the order of the calls."""

    name: str
    kind: str
    seq_len: int
    pred_window: int
    dim: int
    overlap: bool

    @property
    def advance(self) -> int:
        """States kept per call."""
        ...

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        """Once: the first windows (n_traj, seq_len, dim) and the norm bound (n_traj,), or None under the
        failure policy ``"raise"``."""
        ...

    def generate(self, n: int) -> np.ndarray:
        """The next ``n`` states, (n_traj, n, dim)."""
        ...

    def reset(self, rows: np.ndarray) -> None:
        """Put failed ``rows`` back to their first window."""
        ...

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """log|det J| at windows (n, seq_len, dim) -> (n,)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The metadata recorded with a rollout (str/int/float/bool values)."""
        ...


@runtime_checkable
class PackerProtocol(Protocol):
    """``fn(pk, module, dim)``: append ``module``'s weights and op rows to ``pk``
    (a ``vpintegrator.rollout.numba_model.Packer``), or raise ``Unsupported``."""

    def __call__(self, pk: Any, module: Any, dim: int, /) -> None:
        ...


@runtime_checkable
class SinkProtocol(Protocol):
    """A tracking sink: every row of ``log.csv`` (``epoch`` and the logged values) goes to ``log``. A user's
    object passed as ``fit(..., logger=obj)`` needs only ``log``; its ``close`` is called once at the end."""

    def log(self, row: dict[str, float]) -> None:
        ...

    def close(self) -> None:
        ...
