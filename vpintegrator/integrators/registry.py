"""The method registry: names -> [`Integrator`][vpintegrator.integrators.Integrator] instances, with
metadata listing ([`list_methods`][vpintegrator.integrators.list_methods], [`describe_methods`][vpintegrator.integrators.describe_methods])."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import VPIntegratorError
from .base import Integrator, MethodInfo
from .implicit import GaussLegendre

if TYPE_CHECKING:
    from ..systems.base import System


_REGISTRY: dict[str, Integrator] = {}
_GAUSS_NAME = re.compile(r"gauss_legendre(\d+)")


def register_integrator(method: Integrator, *, replace: bool = False) -> Integrator:
    """Add ``method`` (an instance) to the registry under ``method.name``; returns it."""
    if not isinstance(method, Integrator):
        raise VPIntegratorError(f"register_integrator needs an Integrator instance; got {type(method).__name__}")
    name = method.name
    if not name or not isinstance(name, str):
        raise VPIntegratorError(f"an integrator needs a non-empty name; got {name!r}")
    if name in _REGISTRY and not replace:
        raise VPIntegratorError(f"method {name!r} is already registered; pass replace=True to replace it")
    _REGISTRY[name] = method
    return method


def list_integrators() -> list[str]:
    """Registry names of the classical integrators, in registration order."""
    return list(_REGISTRY)


def supported_integrators(names: Iterable[str], system: System) -> list[str]:
    """The names among ``names`` whose method can run on ``system`` (``supports`` does not refuse it), in order."""
    from ..errors import VPIntegratorError

    out = []
    for name in names:
        try:
            get_integrator(name).supports(system)
        except VPIntegratorError:
            continue  # e.g. a splitting of a non-separable system
        out.append(name)
    return out


def list_methods() -> list[MethodInfo]:
    """The metadata of every registered method, in registration order."""
    return [method.info for method in _REGISTRY.values()]


def get_integrator(name: str | Integrator, **options: Any) -> Integrator:
    """An integrator by name; ``options`` (e.g. ``tol``, ``max_iter`` for implicit ones) override defaults.

    Besides the registered names, ``gauss_legendre<2s>`` (any even order) and ``"gauss_legendre"`` with
    ``stages=s`` give the s-stage Gauss-Legendre method of order 2s.
    """
    if isinstance(name, Integrator):
        method = name
    elif isinstance(name, str) and name in _REGISTRY:
        method = _REGISTRY[name]
    elif isinstance(name, str) and (name == "gauss_legendre" or _gauss_stages(name)):
        method = GaussLegendre(stages=_gauss_stages(name) or 2)
    else:
        raise VPIntegratorError(f"unknown method {name!r}; valid methods: {', '.join(list_integrators())}")
    if options:
        valid = [f.name for f in dataclasses.fields(method)]  # type: ignore[arg-type]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise VPIntegratorError(
                f"method {method.name!r} has no option(s) {', '.join(unknown)}; valid options: "
                f"{', '.join(valid) or '(none)'}"
            )
        method = dataclasses.replace(method, **options)  # type: ignore[type-var]
    return method


def _gauss_stages(name: str) -> int:
    match = _GAUSS_NAME.fullmatch(name)
    if not match:
        return 0
    order = int(match.group(1))
    if order < 2 or order % 2:
        raise VPIntegratorError(f"unknown method {name!r}: Gauss-Legendre orders are even (gauss_legendre2, 4, 6, ...)")
    return order // 2


def describe_methods() -> str:
    """A text table of every registered method and its properties (``vp-rollout --list-methods``)."""
    head = ("method", "order", "type", "symplectic", "symmetric", "volume", "quadratic inv.", "needs", "description")
    rows = [
        (
            m.name, str(m.order), "implicit" if m.implicit else "explicit", _yes(m.symplectic), _yes(m.symmetric),
            _yes(m.preserves_volume), _yes(m.preserves_quadratic_invariants), ",".join(m.needs) or "-", m.description,
        )
        for m in list_methods()
    ]
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in (head, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    notes = (
        "volume: det J = 1 to rounding on every supported system (symplectic methods also preserve volume on "
        "canonical Hamiltonian systems); quadratic inv.: every quadratic first integral conserved to rounding."
    )
    return "\n".join([*lines, "", notes])


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"
