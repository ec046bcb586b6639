"""The plug-in contracts that are not a base class: ``typing.Protocol``s that the drivers take as types.

Each surface the package calls into has one contract, the type its registry or driver takes (so mypy
checks every call). Where the package ships a base class, the base class is the contract (it supplies the
checks and defaults); only the two surfaces without one have a Protocol, here:

| contract | what plugs in | registered / passed by | typed where |
|---|---|---|---|
| ``vpintegrator.systems.System`` (base class) | an ODE ``dy/dt = f(y)`` | ``register_system``, ``"module:Class"`` | ``register_system(cls: type[System])`` |
| ``vpintegrator.integrators.Integrator`` (base class) | a one-step method | ``register_integrator`` | ``register_integrator(method: Integrator)`` |
| ``torch.nn.Module`` | a window map | ``register_model``, ``"module:Class"`` | ``register_model(cls)``, ``cls`` bound to ``type[nn.Module]`` |
| ``vpintegrator.stepping.StepMap`` (base class) | what a rollout advances | ``run_rollouts``, ``rollout`` | ``drive(step_map: StepMap, ...)`` |
| [`PackerProtocol`][vpintegrator.protocols.PackerProtocol] | a layer's packing for the compiled model runner | ``register_packer`` | ``register_packer(cls, fn: PackerProtocol)`` |
| [`SinkProtocol`][vpintegrator.protocols.SinkProtocol] | a tracking sink of the training log | ``fit(..., logger=obj)``, ``make_sinks`` (``logger``) | ``Member.sinks: list[SinkProtocol]`` |

One more Protocol is the type of what has no common base class inside the package:
[`SystemProtocol`][vpintegrator.protocols.SystemProtocol], what a comparison run and its metrics need of a
system: a ``System``, a ``SystemFamily`` (one system per trajectory) or an ``UnknownSystem`` (trajectories
without equations; ``ObservedSystem``, observed channels, is one) — ``RolloutPlan.system: SystemProtocol``.

The Protocols are ``runtime_checkable``: ``isinstance(x, SinkProtocol)`` checks that the members exist
(not their signatures; ``tests/test_layout.py`` also checks that the shipped plug-ins accept the
Protocols' arguments). This module imports nothing at run time.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["PackerProtocol", "SinkProtocol", "SystemProtocol"]


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


@runtime_checkable
class SystemProtocol(Protocol):
    """What a comparison run and its metrics need of a system, whichever it is (``System``, ``SystemFamily``,
    ``UnknownSystem``): its ``name``, state dimension ``dim``, ``invariant_names``, whether its invariants take
    torch tensors (``torch_invariants``) and ``invariants(y)``: name -> values over the last axis of ``y``."""

    @property
    def name(self) -> str:
        ...

    @property
    def dim(self) -> int:
        ...

    @property
    def invariant_names(self) -> tuple[str, ...]:
        ...

    @property
    def torch_invariants(self) -> bool:
        ...

    def invariants(self, y: Any) -> dict[str, Any]:
        ...
