"""Compiled vector fields and Jacobians of the shipped systems, parameters passed as a float64 array.

One kernel serves every parameter set of a system: the system is a small integer ``kid`` and its
parameters a float64 array ``p`` (``system_kernel`` maps a [`System`][vpintegrator.systems.System]
instance to both: ``p = system.field_params()``). The formulas are not written here: each kernel is numba's
compilation of the system's own ``field`` / ``field_jacobian`` (plain functions on a tuple of components,
which NumPy evaluates on arrays in ``System.vector_field`` / ``System.jacobian``), so the paths share one
definition (no fastmath; numba's scalar ``np.exp``/``np.sin`` are libm's, NumPy's array ones may differ in
the last bit).

=====  ====================  ====================================  =====================================
kid    system                ``p`` (``field_params()``)            extra kernels
=====  ====================  ====================================  =====================================
0      rigid_body            (a, b, c) = ``RigidBody.coefficients``
1      coupled_oscillator    (m1, m2, k1, k2, k)                   ``GRADIENTS`` (V'(q), T'(p))
2      volterra              (none, an empty array)
3      abc_flow              (A, B, C)
4      rigid_body_exp        (a, b, c, epsilon)
100    a learned field       its networks (``learned_field``)
101    a fitted library      its features and coefficients (``library_field``: SINDy's Θ(z) Ξ)
=====  ====================  ====================================  =====================================

``SHIPPED`` (kid -> class) is the one table of compiled systems, read from the classes' ``kernel_id``; the
lean loops (``compiled.lean``) are specialised for each on first use, with its jitted pair in ``FIELDS``. A
new shipped system adds the line naming its pair and its branch of each dispatcher here; its class (with
its ``kernel_id``) is the only other file.

A user's system (or a subclass of a shipped one) that writes its field once compiles too
(``compiled.user``): ``system_kernel`` gives ``(pp, p)`` with ``pp`` its parameters as an instance of a class made
for it, and the dispatchers below, called with ``pp`` where a shipped system's ``kid`` goes, are compiled for that
class and call the user's jitted field (an integer ``kid`` runs the branches below). A system that does not compile
gets ``None`` (one warning says why) and callers fall back to NumPy. A system with a ``compiled_kernel()`` method
(the rollout's ``LearnedField`` and ``SindyField``) gives its own ``(kid, p)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._jit import HAVE_NUMBA, jit, jit_helpers
from .learned_field import learned_jacobian, learned_vector_field
from .library_field import library_jacobian, library_vector_field
from .user import COMPILED, reason, user_kernel

from ..errors import VPIntegratorError
from ..systems import ABCFlow, CoupledOscillator, RigidBody, RigidBodyExp, System, Volterra, shipped_systems
from ..systems.coupled_oscillator import kinetic_gradient_of, potential_gradient_of

#: kid -> the shipped class whose ``field`` / ``field_jacobian`` the kernels compile (each class's own
#: ``kernel_id``; the systems register themselves, so this table needs no line per system)
SHIPPED: dict[int, type[System]] = {int(cls.kernel_id): cls for cls in shipped_systems()}  # type: ignore[arg-type]
if len(SHIPPED) != len(shipped_systems()):
    raise VPIntegratorError("two shipped systems share a kernel_id: "
                            + ", ".join(f"{c.name}={c.kernel_id}" for c in SHIPPED.values()))
#: a learned vector field (``vpintegrator.compiled.learned_field``; its networks packed into ``p``)
LEARNED_FIELD = 100
#: a fitted library field Θ(z) Ξ (``vpintegrator.compiled.library_field``; SINDy's rows)
LIBRARY_FIELD = 101
_KIDS: dict[type[System], int] = {cls: kid for kid, cls in SHIPPED.items()}
# the dispatch branches below (numba reads these module constants at compile time)
RIGID_BODY, COUPLED_OSCILLATOR, VOLTERRA, ABC_FLOW, RIGID_BODY_EXP = (
    _KIDS[cls] for cls in (RigidBody, CoupledOscillator, Volterra, ABCFlow, RigidBodyExp))


def system_kernel(system) -> tuple[Any, np.ndarray] | None:
    """``(kid, params)`` of a shipped system instance (``params = system.field_params()``), ``(pp, params)`` of a
    user's system that compiles (``compiled.user``), or ``None`` (NumPy)."""
    kernel = getattr(system, "compiled_kernel", None)  # a learned field packs its own networks
    if callable(kernel):
        return kernel()
    kid = _KIDS.get(type(system))
    if kid is None:
        return user_kernel(system, (vector_field, jacobian)) if isinstance(system, System) else None
    return kid, np.asarray(system.field_params(), dtype=np.float64)


def why_not_compiled(system) -> str | None:
    """The one-line reason a user's ``system`` runs in NumPy (None: it compiles, or it is a shipped system)."""
    if type(system) in _KIDS or not isinstance(system, System):
        return None
    system_kernel(system)
    return reason(type(system))


# --- the systems' own definitions (``System.field``: one definition, NumPy on arrays, numba on scalars) ------
for _cls in SHIPPED.values():
    jit_helpers(*_cls.field_helpers)
#: kid -> the jitted ``(field, field_jacobian)`` of a shipped system (what ``compiled.lean`` specialises its loops
#: with); the dispatchers below name each pair once
FIELDS = {kid: (jit(cls.field), jit(cls.field_jacobian)) for kid, cls in SHIPPED.items()}
rigid_body_field, rigid_body_jacobian = FIELDS[RIGID_BODY]
coupled_oscillator_field, coupled_oscillator_jacobian = FIELDS[COUPLED_OSCILLATOR]
volterra_field, volterra_jacobian = FIELDS[VOLTERRA]
abc_flow_field, abc_flow_jacobian = FIELDS[ABC_FLOW]
rigid_body_exp_field, rigid_body_exp_jacobian = FIELDS[RIGID_BODY_EXP]
coupled_oscillator_potential_gradient = jit(potential_gradient_of)
coupled_oscillator_kinetic_gradient = jit(kinetic_gradient_of)
#: the shipped fields linear in their parameters, ``f(c p, y) = c f(p, y)``: a shear ``y_i += c f_i(p, y)`` folds its
#: coefficient into the parameters (``compiled.lean.shear``; held against ``c f`` in tests/test_compiled_integrators.py)
LINEAR_IN_PARAMS = frozenset({RIGID_BODY, ABC_FLOW, RIGID_BODY_EXP})
#: kid -> the jitted ``(V'(q), T'(p))`` of a separable shipped system (Stormer-Verlet's lean loop)
GRADIENTS = {COUPLED_OSCILLATOR: (coupled_oscillator_potential_gradient, coupled_oscillator_kinetic_gradient)}


@jit
def _put(f, out):
    for i in range(len(f)):
        out[i] = f[i]


@jit
def _put_rows(J, out):
    for i in range(len(J)):
        for j in range(len(J)):
            out[i, j] = J[i][j]


# --- the dispatchers ---------------------------------------------------------------------------------
@jit
def _shipped_vector_field(kid, p, y, out):
    """``f(y)`` of shipped system ``kid`` (an integer) with parameters ``p`` into ``out``; y, out (dim,)."""
    if kid == RIGID_BODY:
        _put(rigid_body_field(p, (y[0], y[1], y[2])), out)
    elif kid == COUPLED_OSCILLATOR:
        _put(coupled_oscillator_field(p, (y[0], y[1], y[2], y[3])), out)
    elif kid == VOLTERRA:
        _put(volterra_field(p, (y[0], y[1], y[2])), out)
    elif kid == RIGID_BODY_EXP:
        _put(rigid_body_exp_field(p, (y[0], y[1], y[2])), out)
    elif kid == LEARNED_FIELD:
        learned_vector_field(p, y, out)
    elif kid == LIBRARY_FIELD:
        library_vector_field(p, y, out)
    else:  # ABC_FLOW
        _put(abc_flow_field(p, (y[0], y[1], y[2])), out)


@jit
def _shipped_jacobian(kid, p, y, out):
    """``df/dy`` of shipped system ``kid`` (an integer) into ``out`` (dim, dim), ``out[i, j] = d f_i / d y_j``."""
    if kid == RIGID_BODY:
        _put_rows(rigid_body_jacobian(p, (y[0], y[1], y[2])), out)
    elif kid == COUPLED_OSCILLATOR:
        _put_rows(coupled_oscillator_jacobian(p, (y[0], y[1], y[2], y[3])), out)
    elif kid == VOLTERRA:
        _put_rows(volterra_jacobian(p, (y[0], y[1], y[2])), out)
    elif kid == RIGID_BODY_EXP:
        _put_rows(rigid_body_exp_jacobian(p, (y[0], y[1], y[2])), out)
    elif kid == LEARNED_FIELD:
        learned_jacobian(p, y, out)
    elif kid == LIBRARY_FIELD:
        library_jacobian(p, y, out)
    else:  # ABC_FLOW
        _put_rows(abc_flow_jacobian(p, (y[0], y[1], y[2])), out)


def _field_into(kid, p, y, out):  # pragma: no cover - compiled code only (the overloads below)
    raise NotImplementedError("compiled code only")


def _jacobian_into(kid, p, y, out):  # pragma: no cover
    raise NotImplementedError("compiled code only")


if HAVE_NUMBA:  # pragma: no branch - without numba the kernels are never run
    from numba import types
    from numba.extending import overload
    from numba.np.unsafe.ndarray import to_fixed_tuple

    def _dispatch(shipped, which):
        """An integer ``kid``: the shipped branches; a user's parameter tuple: its own jitted function (``which``:
        1 the field, 2 its Jacobian) on the state as a tuple, into ``out``."""
        def typer(kid, p, y, out):
            if isinstance(kid, types.Integer):  # the branches themselves, inlined (a call more doubled DOP853's cost)
                return shipped.py_func
            user = COMPILED.get(getattr(kid, "instance_class", None))
            fn = None if user is None else user[which + 1]
            if fn is None:
                return None
            d = user.dim
            if which == 1:  # the parameters are p's (a family's member passes its own), as the shipped branches'
                return lambda kid, p, y, out: _put(fn(p, to_fixed_tuple(y, d)), out)
            return lambda kid, p, y, out: _put_rows(fn(p, to_fixed_tuple(y, d)), out)
        return typer

    overload(_field_into, strict=False, inline="always")(_dispatch(_shipped_vector_field, 1))
    overload(_jacobian_into, strict=False, inline="always")(_dispatch(_shipped_jacobian, 2))
else:  # pragma: no cover
    _field_into, _jacobian_into = _shipped_vector_field, _shipped_jacobian


@jit
def vector_field(kid, p, y, out):
    """``f(y)`` of system ``kid`` (a shipped system's integer id, or a user's parameter tuple: ``system_kernel``)
    with parameters ``p`` into ``out``; y, out (dim,)."""
    _field_into(kid, p, y, out)


@jit
def jacobian(kid, p, y, out):
    """``df/dy`` of system ``kid`` (as ``vector_field``) into ``out`` (dim, dim), ``out[i, j] = d f_i / d y_j``."""
    _jacobian_into(kid, p, y, out)


@jit
def vector_field_rows(kid, p, ys, out):
    """``f`` on each row of ys (n, dim) into out (n, dim) (for tests and batched callers)."""
    for r in range(ys.shape[0]):
        vector_field(kid, p, ys[r], out[r])


@jit
def jacobian_rows(kid, p, ys, out):
    """``df/dy`` on each row of ys (n, dim) into out (n, dim, dim)."""
    for r in range(ys.shape[0]):
        jacobian(kid, p, ys[r], out[r])


__all__ = ["system_kernel", "why_not_compiled", "vector_field", "jacobian", "vector_field_rows", "jacobian_rows"]
