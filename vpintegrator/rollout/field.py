"""A learned vector field as a [`System`][vpintegrator.systems.System]: any registered integrator rolls it out at any step.

`LearnedField` evaluates the field of a
[`VectorFieldModel`][vpintegrator.models.VectorFieldModel] (``hnn``, ``lphnn``, ``divfree``,
``node``) in NumPy float64 with the same formulas as the model's torch field (``vpintegrator.nn.mlp_bank``
and the family's ``assemble``), and its Jacobian in closed form (the networks' second derivatives by forward
mode), so the implicit integrators' Newton solves run as on a shipped system. A ``divfree`` field is
``shear_splittable``: ``splitting`` integrates it exactly volume preserving.

In ``vp-rollout`` a vector-field model is given like any model (a run directory, a checkpoint) and rolled out
with its training method, or with the integrator named after ``@``: ``--model runs/lphnn@gauss_legendre4``
(label ``lphnn+gauss_legendre4``). ``work_precision`` walks its step over the ladder like a classical method's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from ..errors import VPIntegratorError
from ..systems.base import System

__all__ = ["LearnedField", "field_step"]


@dataclasses.dataclass(frozen=True, eq=False)
class LearnedField(System):
    """The field f_θ of a vector-field model as a System (float64 NumPy; ``model`` is not copied).

    ``invariant_names`` are the field's own first integrals (``lphnn``: ``casimir`` ‖z‖² and ``energy`` H_θ;
    ``hnn``: ``energy`` H_θ; none for ``divfree`` and ``node``).

    Parameters
    ----------
    model : VectorFieldModel
    """

    model: Any = None
    #: the networks' weights as float64 NumPy arrays (set by __post_init__; not a parameter)
    _weights: ClassVar[list[np.ndarray]]

    def __post_init__(self) -> None:
        from ..models.vector_field import VectorFieldModel
        if not isinstance(self.model, VectorFieldModel):
            raise VPIntegratorError(f"LearnedField: expected a vector-field model (hnn, lphnn, divfree, node), got "
                                    f"{type(self.model).__name__}")
        weights = [np.ascontiguousarray(w.detach().cpu().double().numpy()) for w in self.model.net.weights()]
        set_ = object.__setattr__
        set_(self, "_weights", weights)
        set_(self, "name", f"learned_{self.model.model_name}")
        set_(self, "dim", int(self.model.dim))
        set_(self, "invariant_names", tuple(self.model.invariant_names))
        set_(self, "shear_splittable", bool(self.model.shear_splittable))

    def params(self) -> dict[str, float | list]:
        return {}

    def compiled_kernel(self) -> tuple[int, np.ndarray]:
        """``(kid, p)`` of the compiled field (``vpintegrator.compiled.learned_field``): the compiled steppers
        then run this field at batch 1 as they run a shipped system."""
        from ..compiled.learned_field import pack_learned_field
        from ..compiled.systems import LEARNED_FIELD

        return LEARNED_FIELD, pack_learned_field(self.model.model_name, self.dim, self._weights)

    def _bank(self, y: np.ndarray, order: int):
        from ..nn.mlp_bank import mlp_bank

        y = self._check_state(y)
        flat = y.reshape(-1, self.dim)
        return y.shape, flat, mlp_bank(flat, self._weights, order, np)

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        shape, flat, (out, G, _) = self._bank(y, self.model.field_order)
        return np.asarray(self.model.assemble(flat, out, G, np)).reshape(shape)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        shape, flat, (out, G, H) = self._bank(y, self.model.field_order + 1)
        return np.asarray(self.model.assemble_jacobian(flat, out, G, H, np)).reshape(*shape, self.dim)

    def invariant(self, name: str, y: Any) -> Any:
        if name not in self.invariant_names:
            raise VPIntegratorError(f"{self.name} has no invariant {name!r}; valid: {', '.join(self.invariant_names) or '(none)'}")
        shape, flat, (out, _, _) = self._bank(np.asarray(y, dtype=np.float64), 0)
        return np.asarray(self.model.invariant_values(flat, out)[name]).reshape(shape[:-1])


def field_step(model, dt: float, method: str | None = None):
    """The step map of a vector-field model: ``IntegratorStep(LearnedField(model), method, dt)``, float64;
    ``method`` None: the integrator recorded on the model (``rollout_method``, from ``path@METHOD``), else
    its training method."""
    from .steps import IntegratorStep

    method = method or getattr(model, "rollout_method", None) or model.method
    return IntegratorStep(LearnedField(model), method, dt)
