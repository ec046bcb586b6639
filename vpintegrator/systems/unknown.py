"""The stand-in for the system of trajectories that came without one.

A trajectory file written outside vpintegrator (``/t`` and ``/y`` only: h5py, xarray, another simulator;
``datasets/README.md``) names no system: models train on it and roll out from it, with errors against
its own trajectories, but nothing can integrate its equations (no exact flow, no classical or oracle row)
and it has no invariants. [`UnknownSystem`][vpintegrator.systems.unknown.UnknownSystem] carries what a
comparison run needs of a system in that case (``dim``, ``name``, no invariants) and refuses, in one line
naming the data, anything that would need the equations. [`system_or_unknown`][vpintegrator.systems.unknown.system_or_unknown]
picks it or the file's system from a file's metadata.

It is not a [`System`][vpintegrator.systems.System] and is never registered: no file records it (a
rollout of such data writes no ``system`` attribute), and no integrator accepts it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ..errors import VPIntegratorError
from .base import System
from .registry import system_from_meta


@dataclass(frozen=True)
class UnknownSystem:
    """The system of trajectories whose equations are not known: a dimension and nothing else.

    Parameters
    ----------
    dim : int
        State dimension (the last axis of ``/y``).
    source : str
        Where the trajectories came from (a file path), named in every refusal.
    """

    dim: int
    source: str = "the data"

    name: ClassVar[str] = "unknown"
    invariant_names: ClassVar[tuple[str, ...]] = ()
    torch_invariants: ClassVar[bool] = True
    shear_splittable: ClassVar[bool] = False
    separable: ClassVar[bool] = False
    state_names: ClassVar[tuple[str, ...]] = ()

    def invariants(self, y: Any) -> dict[str, Any]:
        """No invariants are known: ``{}``."""
        return {}

    def params(self) -> dict[str, Any]:
        return {}

    def refusal(self, what: str) -> VPIntegratorError:
        """The one-line error for ``what`` (e.g. "integrating its equations") on these trajectories."""
        return VPIntegratorError(
            f"{self.source} holds trajectories without a system (a file of /t and /y only, no 'system' attribute): "
            f"{what} needs its equations (the exact flow, a classical integrator, its invariants); use models only, "
            "with errors against its own trajectories"
        )

    def vector_field(self, y: Any) -> Any:
        raise self.refusal("evaluating the vector field")

    def jacobian(self, y: Any) -> Any:
        raise self.refusal("evaluating the Jacobian")

    def __call__(self, t: float, y: Any) -> Any:
        raise self.refusal("integrating")


def has_system(meta: Mapping[str, Any]) -> bool:
    """Whether metadata names a system (``system`` or ``system_class``)."""
    return bool(meta.get("system")) or bool(meta.get("system_class"))


def system_or_unknown(meta: Mapping[str, Any], where: Any = "metadata") -> System | UnknownSystem:
    """The system a file's metadata names (``system_from_meta``), or an
    [`UnknownSystem`][vpintegrator.systems.unknown.UnknownSystem] of its ``dim`` when it names none."""
    if has_system(meta):
        return system_from_meta(meta, where)
    dim = meta.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
        raise VPIntegratorError(f"{where}: names no system and no state dimension 'dim'; was it read by "
                                "vpintegrator.read_trajectories?")
    return UnknownSystem(dim=int(dim), source=str(where))


__all__ = ["UnknownSystem", "has_system", "system_or_unknown"]
