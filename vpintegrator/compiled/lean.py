"""The lean loops: one run loop per method, which numba specialises for each shipped system, state in local scalars.

The generic loops of ``vpintegrator.compiled.kernels`` dispatch on the system id inside every field call and keep
the state and stages in workspace rows; measured at batch 1 they cost 2.5-13x a lean stepper with the state in
local scalars and the stages unrolled (``scripts/bench_kernels.py``). These loops are that lean stepper, written
once for every system: the state is a tuple of floats, and the system is a type. Each shipped system has a
parameter tuple class (``params_tuple(kid, p)``: ``RigidBodyParams(p0, p1, p2)``, one per class in
``compiled.systems.SHIPPED``), and a loop called with it is compiled for that system alone: ``field(pp, x)``
below resolves, while numba types the loop, to the system's own jitted ``field`` (numba inlines it), and the
dimension is the tuple's length, so every loop over components has a constant trip count that LLVM unrolls
into scalars. No source is written; numba's on-disk cache keeps the compiled loops (the parameter classes
live in this module, so a cached signature names them).

The loops (``RUNNERS``: method -> (kind, run loop, method tag)):

- explicit (``explicit_rk``: every explicit Runge-Kutta tableau, its tag ``explicit_tag(tableau)``):
  ``run_explicit(tag, pp, y, h, n, out, gammas, info, every) -> states written``; ``gammas`` empty runs plain steps
  of ``h``, else each step is the composition of sub-steps ``gammas[i] h``;
- ``verlet``: ``run_verlet(fa, cols, watch, y, h, gammas, n, out, info, f, every)``, the one Stormer-Verlet loop of the
  package: on a tuple state here, on an array state for ``compiled.lattice`` and ``compiled.bath`` (their state ops);
- ``shears``: ``run_shears(pp, y, comps, coefs, n, out, info, every)``, the shears ``y_i += c f_i(y)`` in order
  (every shear splitting: Strang's ``splitting``, the McLachlan-type ones, their compositions);
- implicit (``implicit_midpoint``; ``gauss`` for any number of stages, the tableau as tuples ``tab``):
  ``run_implicit(tag, pp, p, y, h, n, out, gammas, tol, max_iter, info, ws, m, ta, tb, tc, tab, every)``. Implicit
  midpoint iterates by full Newton (the Jacobian at the current iterate, as the NumPy path) with the 3x3 solve
  by the explicit inverse (adjugate over the determinant) and larger systems by elimination without pivoting;
  on a separable system (one with ``gradients``) by a 2-d Newton in the midpoint's q alone (one function,
  ``_midpoint``, its unknown and update the system's rule: the separable structure, half the unknowns);
  Gauss-Legendre iterates the stage equations by fixed point ``Z <- h A f(y + Z)``. Both start where NumPy
  starts and stop on NumPy's test (``max |update| <= tol max(1, |y|_inf)``, or stalled at the rounding
  floor). When the fast iteration fails (no convergence in ``max_iter``, an update that stops shrinking, a
  zero pivot, a non-finite update, an exact equilibrium), the step is redone by the exact NumPy rule (pivoted LU,
  full Newton: for implicit midpoint ``_midpoint`` again with the array rule ``ArrayMidpoint``, also the generic
  loops' step; Gauss-Legendre's in ``vpintegrator.compiled.newton``), which then decides success or failure with
  NumPy's status and last update.

Every loop keeps the state after steps ``every``, ``2 every``, ... (``every`` = 1: each) in the rows of ``out`` and
returns the rows written; the blow-up check (``store``) still sees every state. Failure semantics are those of
``vpintegrator.compiled.kernels`` (``info[1]`` status, ``info[2]`` the 1-based step). Every loop does the operations of the NumPy path in its order, so the states agree to rounding, and
a change here changes no number unless it changes that order (``tests/test_compiled_integrators.py``).
"""

from __future__ import annotations

import math
import struct
from collections import namedtuple
from typing import Any

import numpy as np

from ._jit import HAVE_NUMBA, jit, named_class, njit
from .newton import (BLOWN_UP, NONFINITE, NOT_CONVERGED, OK, SINGULAR, converged, lu_solve, scale_of,
                     step_gauss_legendre, update_norm)
from .systems import FIELDS, GRADIENTS, LINEAR_IN_PARAMS, SHIPPED, _put, vector_field
from .user import COMPILED as USER
from .systems import jacobian as kernel_jacobian


# --- the systems as types ------------------------------------------------------------------------------------
def _params_class(cls) -> type:
    return named_class(globals(), f"{cls.__name__}Params", [f"p{i}" for i in range(len(cls().field_params()))])


#: as ``jit``, inlined by numba where it is called (no call and no reference counts of the arrays passed per step)
inline_jit = njit(error_model="numpy", inline="always") if HAVE_NUMBA else jit
#: no channels (``store``, ``compiled.lattice.observe``): the whole state stored and checked
NONE = np.zeros(0, dtype=np.int64)
#: the most stages of a Gauss-Legendre method with a lean loop (more: the generic loop of ``compiled.kernels``)
MAX_STAGES = 4
#: kid -> the parameter tuple class of a shipped system
PARAMS: dict[int, type] = {kid: _params_class(cls) for kid, cls in SHIPPED.items()}
#: parameter tuple class -> (kid, system class)
_SYSTEM_OF = {tag: (kid, SHIPPED[kid]) for kid, tag in PARAMS.items()}


def params_tuple(kid: Any, p: np.ndarray) -> Any:
    """The parameters ``p`` (float64) of shipped system ``kid`` as its parameter tuple (what the loops take); a
    user's system's ``kid`` is its parameter tuple already (``compiled.user``)."""
    if type(kid) in USER:
        return kid
    return PARAMS[kid](*(float(v) for v in p))


def has_lean(kid: Any) -> bool:
    """Whether the lean loops are specialised for system ``kid`` (a shipped system or a user's that compiles)."""
    return type(kid) in USER or (isinstance(kid, int) and kid in PARAMS)


def _typed(signature: str, doc: str) -> Any:
    """A function of compiled code whose implementation numba picks per argument type (``@overload`` below)."""
    def typed(*args: Any) -> Any:
        raise NotImplementedError(f"{signature} runs in compiled code only")
    typed.__name__ = typed.__qualname__ = signature.split("(")[0]
    typed.__doc__ = f"``{signature}``: {doc}"
    return typed


# the methods as types (a loop is compiled once per method it runs)
Midpoint = namedtuple("Midpoint", ["unused"])
Gauss = namedtuple("Gauss", ["unused"])

_TABLEAU = "ExplicitTableau_"


def explicit_tag(tableau: tuple) -> Any:
    """The method tag of an explicit Runge-Kutta tableau ``(a, b, scale)`` (tuples of floats, ``a`` s x s): a class
    per tableau, named by its coefficients' bytes, that holds it (``tableau``). A loop compiled for the tag reads the
    coefficients as constants of the compiled code (zero entries and unit weights folded away, as a loop written for
    that method), and numba's disk cache finds the class again by its name in a new process (``__getattr__``)."""
    a, b, scale = tableau
    values = (*(float(v) for row in a for v in row), *(float(v) for v in b), float(scale))
    return _tableau_class(_TABLEAU + struct.pack(f"<{len(values)}d", *values).hex())(0)


def _tableau_class(name: str) -> type:
    if name not in globals():
        raw = bytes.fromhex(name[len(_TABLEAU):])
        v = struct.unpack(f"<{len(raw) // 8}d", raw)
        s = math.isqrt(len(v) - 1)  # s^2 + s + 1 values: floor(sqrt) is s
        named_class(globals(), name, ["unused"], tableau=(tuple(tuple(v[i * s:(i + 1) * s]) for i in range(s)),
                                                          tuple(v[s * s:s * s + s]), v[-1]))
    return globals()[name]


def __getattr__(name: str) -> Any:
    """A tableau's tag class by its name (what numba's cache index pickles)."""
    if name.startswith(_TABLEAU):
        return _tableau_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


field = _typed("field(pp, x)", "The system's ``field(pp, x)`` (typed per parameter class: its own jitted function).")
jacobian = _typed("jacobian(pp, x)", "The system's ``field_jacobian(pp, x)``.")
shear = _typed("shear(pp, z, j, c)",
               "The shear of component ``j``: ``z_j += c f_j(z)``, with only that component of the field computed (a "
               "branch per component, each with its index a constant); on a field linear in its parameters "
               "(``LINEAR_IN_PARAMS``) as ``z_j += f_j(c p, z)``, c folded into the parameters (rounding only).")
gradients = _typed("gradients(pp, a, b, potential)",
                   "A separable system's ``V'(q)`` (``potential``) or ``T'(p)`` at (a, b).")
load = _typed("load(pp, y)", "The state array y (dim,) as a tuple of the system's dimension.")
system_id = _typed("system_id(pp)", "The system's kernel id (for the exact rule).")
stage_fields = _typed("stage_fields(pp, y, Z)", "(f(y + Z_0), .., f(y + Z_{s-1})): the field at every stage.")
stage_rows = _typed("stage_rows(h, A, F)",
                    "Row j: h (A_j0 F_0 + .. + A_j,s-1 F_{s-1}), componentwise, for every row A_j of A.")
explicit_stages = _typed("explicit_stages(pp, h, y, A, K, rest)",
                         "K and the stages of the rows ``rest`` of A: k_i = f(y + (A_i0 h) k_0 + ..).")
scaled_rows = _typed("scaled_rows(h, c, f)", "Row j: (h c_j) f, componentwise.")
newton_matrix = _typed("newton_matrix(J, c2, rest)",
                       "I - c2 J as a tuple of rows (``rest``: the rows still to build; start with J).")
newton_solve = _typed("newton_solve(M, r)",
                      "M^{-1} r, or ``ok`` False on a zero determinant or pivot: 3x3 by the adjugate over the "
                      "determinant, larger systems by elimination without pivoting (the operations of NumPy's path, "
                      "in its order).")
eliminate = _typed("eliminate(M, r, rest)",
                   "Gaussian elimination without pivoting of (M, r), pivots ``len(M) - len(rest)`` on: (ok, M, r); a "
                   "zero pivot is ``ok`` False.")
back_substitute = _typed("back_substitute(M, r, rest)",
                         "Solve the upper triangle of M for r, rows ``len(rest) - 1`` down to 0.")
midpoint_start = _typed("midpoint_start(pp, h, y)", "Implicit midpoint's unknown at NumPy's start z = y + h f(y): z, or "
                        "on a separable system (q, p) the midpoint's Q = q + (h/2) T'(p).")
midpoint_update = _typed("midpoint_update(pp, h, y, u)", "A Newton update of u: (solved, u, e), e the update of the state "
                         "(separable: 2 |dQ|, q1's; P = p - (h/2) V'(Q), the 2x2 matrix I + (h^2/4) T''(P) V''(Q)).")
midpoint_state = _typed("midpoint_state(pp, h, y, u)", "The new state of the converged u (separable: 2 Q - q, 2 P - p).")
verlet_state = _typed("verlet_state(fa, y)", "Stormer-Verlet's state: y as a tuple (``load``) or y itself.")
verlet_force = _typed("verlet_force(fa, x, f)", "V'(q) at the state x: a tuple, or into f (returned).")
kick_drift = _typed("kick_drift(fa, x, g, c, hs)", "p - c g, then q + hs T'(p - c g): the new state.")
kick = _typed("kick(fa, x, g, c)", "p - c g: the new state.")
store = _typed("store(cols, watch, x, out, k, limit2, every)",
               "The state x after step k + 1 into out when ``every`` divides k + 1, and its status: NONFINITE, or "
               "BLOWN_UP when its squared norm is above ``limit2`` (the engine's blow-up rule; inf: off), else OK; "
               "``compiled.lattice.observe`` on an array (channels ``cols``, checks ``watch``).")
exact = _typed("exact(tag, pp, p, u, h, v, ws, m, ta, tb, tc, tol, max_iter, info)",
               "The exact NumPy rule for the implicit method ``tag`` (u -> v; its status).")
step = _typed("step(tag, pp, h, x, tol, max_iter, tab)",
              "One step of the method ``tag``: explicit ones return the new state, implicit ones ``(ok, state)``.")


if HAVE_NUMBA:  # pragma: no branch - without numba the loops are never run (compiled.available() is False)
    from numba import types
    from numba.cpython.unsafe.tuple import tuple_setitem
    from numba.extending import overload
    from numba.np.unsafe.ndarray import to_fixed_tuple

    def _impl(fn, **options):
        return overload(fn, strict=False, **options)  # the stubs take *args

    def _system(pp):
        """(kid, system class): a shipped system's integer id, or a user's parameter class (``compiled.user``)."""
        cls = getattr(pp, "instance_class", None)
        user = USER.get(cls)
        return (cls, user.system) if user is not None else _SYSTEM_OF.get(cls, (None, None))

    def _shipped_rule(fn):  # midpoint's rule of a shipped system (other rules: ``midpoint_rule``)
        return lambda typer: _impl(fn, inline="always")(lambda pp, *a: _system(pp)[1] and typer(pp, *a))

    def midpoint_rule(cls: type, start: Any, update: Any, state: Any) -> None:
        """Make the namedtuple class ``cls`` a rule of ``_midpoint``: its ``midpoint_start`` / ``_update`` /
        ``_state`` the plain functions given (numba inlines them where a rule of that class is used)."""
        for stub, impl in ((midpoint_start, start), (midpoint_update, update), (midpoint_state, state)):
            _impl(stub, inline="always")(lambda pp, *a, impl=impl: impl if getattr(pp, "instance_class", None) is cls
                                         else None)

    def _system_function(which):
        """The implementation of ``field`` (0) / ``jacobian`` (1): the system's own jitted function."""
        def of_system(pp, x):
            kid, cls = _system(pp)
            fn = USER[kid][2 + which] if kid in USER else FIELDS[kid][which] if cls is not None else None
            if fn is not None:
                return lambda pp, x: fn(pp, x)
        return of_system

    _impl(field)(_system_function(0))
    _impl(jacobian)(_system_function(1))

    @_impl(gradients)
    def _gradients(pp, a, b, potential):
        kid, cls = _system(pp)
        if kid in GRADIENTS:
            pot, kin = GRADIENTS[kid]
            return lambda pp, a, b, potential: pot(pp, a, b) if potential else kin(pp, a, b)

    @_impl(load)
    def _load(pp, y):
        kid, cls = _system(pp)
        if cls is not None:
            d = cls.dim
            return lambda pp, y: to_fixed_tuple(y, d)

    @_impl(system_id)
    def _system_id(pp):
        kid, cls = _system(pp)
        if kid in USER:  # a user's system: its parameter tuple is its id in the dispatchers
            return lambda pp: pp
        if cls is not None:
            return lambda pp: kid

    def _shear_from(pp, z, j, c, rest):
        raise NotImplementedError("compiled code only")

    @_impl(_shear_from)
    def _shear_from_impl(pp, z, j, c, rest):
        # rest: a tuple whose length counts the components left; the one tested is i = len(z) - len(rest)
        i = len(z) - len(rest)
        if _system(pp)[0] in LINEAR_IN_PARAMS:  # c f_i(p, z) = f_i(c p, z): c folds into the parameters, off
            if len(rest) == 1:                  # the state's dependency chain (one multiply less on it per shear)
                return lambda pp, z, j, c, rest: tuple_setitem(z, i, z[i] + field(_scaled(c, pp), z)[i])
            return lambda pp, z, j, c, rest: (tuple_setitem(z, i, z[i] + field(_scaled(c, pp), z)[i]) if j == i
                                              else _shear_from(pp, z, j, c, rest[1:]))
        if len(rest) == 1:
            return lambda pp, z, j, c, rest: tuple_setitem(z, i, z[i] + c * field(pp, z)[i])
        return lambda pp, z, j, c, rest: (tuple_setitem(z, i, z[i] + c * field(pp, z)[i]) if j == i
                                          else _shear_from(pp, z, j, c, rest[1:]))

    @_impl(shear)
    def _shear(pp, z, j, c):
        return lambda pp, z, j, c: _shear_from(pp, z, j, c, z)

    # --- recursions over a tuple's entries, so that each index is a constant of the compiled code ----------
    @_impl(stage_fields, inline="always")  # inlined in numba's IR: LLVM alone leaves the 4x4 stages in memory
    def _stage_fields(pp, y, Z):
        if len(Z) == 1:
            return lambda pp, y, Z: (field(pp, _add(y, Z[0])),)
        return lambda pp, y, Z: (field(pp, _add(y, Z[0])),) + stage_fields(pp, y, Z[1:])

    @_impl(explicit_stages, inline="always")
    def _explicit_stages(pp, h, y, A, K, rest):
        i = len(A) - len(rest)  # the stage computed here
        if len(rest) == 0:
            return lambda pp, h, y, A, K, rest: K
        if i == 0:
            return lambda pp, h, y, A, K, rest: explicit_stages(pp, h, y, A, (field(pp, y),), rest[1:])
        return lambda pp, h, y, A, K, rest: explicit_stages(pp, h, y, A, K + (field(pp, _stage_input(h, y, A[i], K)),),
                                                            rest[1:])

    @_impl(stage_rows, inline="always")
    def _stage_rows(h, A, F):
        if len(A) == 1:
            return lambda h, A, F: (_weighted(h, A[0], F),)
        return lambda h, A, F: (_weighted(h, A[0], F),) + stage_rows(h, A[1:], F)

    @_impl(scaled_rows)
    def _scaled_rows(h, c, f):
        if len(c) == 1:
            return lambda h, c, f: (_scaled(h * c[0], f),)
        return lambda h, c, f: (_scaled(h * c[0], f),) + scaled_rows(h, c[1:], f)

    @_impl(newton_matrix)
    def _newton_matrix(J, c2, rest):
        i = len(J) - len(rest)  # the row built here
        if len(rest) == 1:
            return lambda J, c2, rest: (_newton_row(J[i], c2, i),)
        return lambda J, c2, rest: (_newton_row(J[i], c2, i),) + newton_matrix(J, c2, rest[1:])

    @_impl(newton_solve)
    def _newton_solve(M, r):
        if len(r) != 3:  # elimination without pivoting
            def general(M, r):
                ok, M, r = eliminate(M, r, M)
                return (True, back_substitute(M, r, r)) if ok else (False, r)
            return general

        def adjugate(M, r):  # the explicit inverse: one division, no elimination chain
            A00 = M[1][1] * M[2][2] - M[1][2] * M[2][1]
            A01 = M[0][2] * M[2][1] - M[0][1] * M[2][2]
            A02 = M[0][1] * M[1][2] - M[0][2] * M[1][1]
            A10 = M[1][2] * M[2][0] - M[1][0] * M[2][2]
            A11 = M[0][0] * M[2][2] - M[0][2] * M[2][0]
            A12 = M[0][2] * M[1][0] - M[0][0] * M[1][2]
            A20 = M[1][0] * M[2][1] - M[1][1] * M[2][0]
            A21 = M[0][1] * M[2][0] - M[0][0] * M[2][1]
            A22 = M[0][0] * M[1][1] - M[0][1] * M[1][0]
            det = M[0][0] * A00 + M[0][1] * A10 + M[0][2] * A20
            if det == 0.0:
                return False, r
            iv = 1.0 / det
            return True, ((A00 * r[0] + A01 * r[1] + A02 * r[2]) * iv, (A10 * r[0] + A11 * r[1] + A12 * r[2]) * iv,
                          (A20 * r[0] + A21 * r[1] + A22 * r[2]) * iv)
        return adjugate

    @_impl(eliminate)
    def _eliminate(M, r, rest):
        k = len(M) - len(rest)  # the pivot of this stage
        d = len(M)
        if len(rest) == 0:
            return lambda M, r, rest: (True, M, r)

        def impl(M, r, rest):
            if M[k][k] == 0.0:
                return False, M, r
            iv = 1.0 / M[k][k]
            for i in range(k + 1, d):
                l = M[i][k] * iv
                row = M[i]
                for j in range(k + 1, d):
                    row = tuple_setitem(row, j, row[j] - l * M[k][j])
                M = tuple_setitem(M, i, row)
                r = tuple_setitem(r, i, r[i] - l * r[k])
            return eliminate(M, r, rest[1:])
        return impl

    @_impl(back_substitute)
    def _back_substitute(M, r, rest):
        k = len(rest) - 1  # the row solved here: the last first
        d = len(M)
        if len(rest) == 0:
            return lambda M, r, rest: r

        def impl(M, r, rest):
            acc = r[k]
            for j in range(k + 1, d):
                acc = acc - M[k][j] * r[j]
            return back_substitute(M, tuple_setitem(r, k, acc / M[k][k]), rest[1:])
        return impl

    @_shipped_rule(midpoint_start)
    def _midpoint_start(pp, h, y):
        if _system(pp)[0] in GRADIENTS:  # a separable system: the midpoint's q alone
            def separable(pp, h, y):
                t0, t1 = gradients(pp, y[2], y[3], False)
                return (y[0] + 0.5 * h * t0, y[1] + 0.5 * h * t1)
            return separable
        return lambda pp, h, y: _axpy(y, h, field(pp, y))

    @_shipped_rule(midpoint_update)
    def _midpoint_update(pp, h, y, u):
        if _system(pp)[0] not in GRADIENTS:
            def full(pp, h, y, z):  # z <- z - (I - (h/2) J(m))^{-1} (z - y - h f(m)), m = (y + z) / 2
                m = y
                for i in range(len(y)):
                    m = tuple_setitem(m, i, 0.5 * (y[i] + z[i]))
                g = field(pp, m)
                r = y
                for i in range(len(y)):
                    r = tuple_setitem(r, i, z[i] - y[i] - h * g[i])
                solved, r = newton_solve(newton_matrix(jacobian(pp, m), 0.5 * h, m), r)
                if not solved:
                    return False, z, 0.0
                for i in range(len(y)):
                    z = tuple_setitem(z, i, z[i] - r[i])
                return True, z, _max_abs(0.0, r)
            return full

        def separable(pp, h, y, Q):
            c = 0.5 * h
            cc = c * c
            g0, g1 = gradients(pp, Q[0], Q[1], True)
            P0 = y[2] - c * g0
            P1 = y[3] - c * g1
            t0, t1 = gradients(pp, P0, P1, False)
            r0 = Q[0] - y[0] - c * t0
            r1 = Q[1] - y[1] - c * t1
            J = jacobian(pp, (Q[0], Q[1], P0, P1))  # rows 0-1: (0, T''); rows 2-3: (-V'', 0)
            m00 = 1.0 - cc * (J[0][2] * J[2][0] + J[0][3] * J[3][0])
            m01 = -cc * (J[0][2] * J[2][1] + J[0][3] * J[3][1])
            m10 = -cc * (J[1][2] * J[2][0] + J[1][3] * J[3][0])
            m11 = 1.0 - cc * (J[1][2] * J[2][1] + J[1][3] * J[3][1])
            det = m00 * m11 - m01 * m10
            if det == 0.0:
                return False, Q, 0.0
            iv = 1.0 / det
            d0 = (m11 * r0 - m01 * r1) * iv
            d1 = (m00 * r1 - m10 * r0) * iv
            return True, (Q[0] - d0, Q[1] - d1), _max_abs(0.0, (2.0 * d0, 2.0 * d1))
        return separable

    @_shipped_rule(midpoint_state)
    def _midpoint_state(pp, h, y, u):
        if _system(pp)[0] not in GRADIENTS:
            return lambda pp, h, y, u: u

        def separable(pp, h, y, Q):
            c = 0.5 * h
            g0, g1 = gradients(pp, Q[0], Q[1], True)
            return (2.0 * Q[0] - y[0], 2.0 * Q[1] - y[1], 2.0 * (y[2] - c * g0) - y[2], 2.0 * (y[3] - c * g1) - y[3])
        return separable

    def _split(fa):
        """A user's separable system's jitted (V'(q), T'(v)) on tuples of dim/2 components, or None."""
        user = USER.get(_system(fa)[0])
        return None if user is None or user.potential is None else (user.potential, user.kinetic, user.dim // 2)

    # Stormer-Verlet's state ops on a separable system: the state (q, p) as scalars; a shipped one's gradients by
    # component (two degrees of freedom), a user's on tuples of any length (``compiled.user``)
    _impl(verlet_state)(lambda fa, y: (lambda fa, y: load(fa, y)) if _system(fa)[0] in GRADIENTS or _split(fa)
                        else None)

    @_impl(verlet_force)
    def _verlet_force(fa, x, f):
        if _system(fa)[0] in GRADIENTS:
            return lambda fa, x, f: gradients(fa, x[0], x[1], True)
        split = _split(fa)
        if split is not None:
            pot, _, n = split
            return lambda fa, x, f: pot(fa, x[:n])

    @_impl(kick)
    def _kick(fa, x, g, c):
        if _system(fa)[0] in GRADIENTS:
            return lambda fa, x, g, c: (x[0], x[1], x[2] - c * g[0], x[3] - c * g[1])
        split = _split(fa)
        if split is not None:
            n = split[2]

            def kick_user(fa, x, g, c):
                for i in range(n):
                    x = tuple_setitem(x, n + i, x[n + i] - c * g[i])
                return x
            return kick_user

    @_impl(kick_drift)
    def _kick_drift(fa, x, g, c, hs):
        split = _split(fa)
        if split is not None:
            kin, n = split[1], split[2]

            def kick_drift_user(fa, x, g, c, hs):
                x = kick(fa, x, g, c)
                t = kin(fa, x[n:])
                for i in range(n):
                    x = tuple_setitem(x, i, x[i] + hs * t[i])
                return x
            return kick_drift_user
        if _system(fa)[0] in GRADIENTS:
            def separable(fa, x, g, c, hs):
                v0 = x[2] - c * g[0]
                v1 = x[3] - c * g[1]
                t0, t1 = gradients(fa, v0, v1, False)
                return (x[0] + hs * t0, x[1] + hs * t1, v0, v1)
            return separable

    @_impl(store, inline="always")
    def _store(cols, watch, x, out, k, limit2, every):
        if isinstance(x, types.BaseTuple):
            def scalars(cols, watch, x, out, k, limit2, every):
                if every == 1 or (k + 1) % every == 0:
                    for i in range(len(x)):
                        out[k if every == 1 else (k + 1) // every - 1, i] = x[i]
                nn = _norm2(x)
                if nn < limit2:  # one comparison in the common case (a NaN or an inf fails it too)
                    return OK
                finite = not math.isnan(nn) and _max_abs(0.0, x) < np.inf  # (a NaN component: nn is NaN)
                # a finite state whose squared norm overflows goes on without a limit
                return OK if finite and not nn > limit2 else BLOWN_UP if finite else NONFINITE
            return scalars

    @_impl(exact)
    def _exact(tag, pp, p, u, h, v, ws, m, ta, tb, tc, tol, max_iter, info):
        kind = getattr(tag, "instance_class", None)
        if kind is Midpoint:
            return (lambda tag, pp, p, u, h, v, ws, m, ta, tb, tc, tol, max_iter, info:
                    step_implicit_midpoint(system_id(pp), p, u, h, v, ws, m, tol, max_iter, info))
        if kind is Gauss:
            return (lambda tag, pp, p, u, h, v, ws, m, ta, tb, tc, tol, max_iter, info:
                    step_gauss_legendre(system_id(pp), p, u, h, v, ws, m, ta, tb, tc, tol, max_iter, info))

    @_impl(step)
    def _step(tag, pp, h, x, tol, max_iter, tab):
        kind = getattr(tag, "instance_class", None)
        tableau = getattr(kind, "tableau", None)  # an explicit tableau: constants of the compiled loop
        if tableau is not None:
            return lambda tag, pp, h, x, tol, max_iter, tab: _explicit(pp, h, x, tableau)
        if kind is Midpoint:
            def midpoint(tag, pp, h, x, tol, max_iter, tab):
                st, z, _ = _midpoint(pp, h, x, tol, max_iter, True)
                return st == OK, z
            return midpoint
        if kind is Gauss:
            return lambda tag, pp, h, x, tol, max_iter, tab: _gauss(pp, h, x, tol, max_iter, tab)

else:  # pragma: no cover
    def tuple_setitem(t, i, v):  # type: ignore[misc]  # plain Python, never run (no numba: no lean loops)
        return t[:i] + (v,) + t[i + 1:]


# --- tuple arithmetic (component loops of constant length: unrolled to scalars) ---------------------------
@jit
def _axpy(x, a, k):
    """x + a k, componentwise."""
    z = x
    for i in range(len(x)):
        z = tuple_setitem(z, i, x[i] + a * k[i])
    return z


@jit
def _add(x, k):
    """x + k, componentwise."""
    z = x
    for i in range(len(x)):
        z = tuple_setitem(z, i, x[i] + k[i])
    return z


@jit
def _scaled(a, f):
    """a f, componentwise."""
    z = f
    for i in range(len(f)):
        z = tuple_setitem(z, i, a * f[i])
    return z


@jit
def _weighted(h, a, F):
    """h (a_0 F_0 + a_1 F_1 + ..), componentwise, summed left to right."""
    z = F[0]
    for i in range(len(z)):
        acc = a[0] * F[0][i]
        for l in range(1, len(a)):
            acc = acc + a[l] * F[l][i]
        z = tuple_setitem(z, i, h * acc)
    return z


@jit
def _newton_row(Ji, c2, i):
    """Row i of I - c2 J."""
    row = Ji
    for j in range(len(Ji)):
        row = tuple_setitem(row, j, (1.0 if i == j else 0.0) - c2 * (Ji[j]))
    return row


@jit
def _max_abs(e, x):
    """max(e, |x_i|) over i; a NaN anywhere makes it NaN (caught by the convergence test)."""
    for i in range(len(x)):
        t = abs(x[i])
        if not (t <= e or e != e):  # a NaN (t's, or e's already) stays: no later component overwrites it
            e = t
    return e


@jit
def _max_diff(e, x, z):
    """max(e, |x_i - z_i|) over i, in order; a NaN anywhere makes it NaN."""
    for i in range(len(x)):
        t = abs(x[i] - z[i])
        if not (t <= e or e != e):
            e = t
    return e


@jit
def _diverging(e, it, prev):
    """Not finite, or growing: the exact rule takes the step."""
    return not e < np.inf or (it > 1 and e >= 2.0 * prev)


# --- the steps -------------------------------------------------------------------------------------------
@jit
def _stage_input(h, y, row, K):
    """y + (row_j h) K_j over the stages K computed so far (zero entries skipped)."""
    x = y
    for j in range(len(K)):
        if row[j] != 0.0:
            x = _axpy(x, row[j] * h, K[j])
    return x


@jit
def _explicit(pp, h, y, tab):
    """Explicit Runge-Kutta of the tableau ``tab = (a, b, scale)`` of ``integrators.coefficients``: stage inputs
    y + (a_ij h) k_j (zero entries skipped), then y + (h / scale) (b_1 k_1 + ...)."""
    a, b, scale = tab
    K = explicit_stages(pp, h, y, a, (), a)
    w = h / scale
    z = y
    for q in range(len(y)):
        acc = b[0] * K[0][q]
        for i in range(1, len(b)):
            acc = acc + b[i] * K[i][q]
        z = tuple_setitem(z, q, y[q] + w * acc)
    return z


@inline_jit
def _midpoint(pp, h, y, tol, max_iter, give_up):
    """Implicit midpoint by Newton from NumPy's start with its test on the update, the unknown the system's rule
    (``midpoint_start``/``_update``/``_state``): z itself (NumPy's iteration), or on a separable system the midpoint's
    q alone (the same fixed point); or a rule on an array state, in place (``midpoint_rule``: ``ArrayMidpoint``, NumPy's
    iteration, and ``compiled.lattice``'s). (status, state, the last update): OK, SINGULAR, or NOT_CONVERGED in
    ``max_iter`` (or, ``give_up``, at a non-finite or growing update); the caller decides what a failure does (the lean
    loops redo the step by the exact rule, the lattice loop keeps its last good state). Inlined (an array rule's
    arrays passed through a call cost the generic loop 26-44 %)."""
    u = midpoint_start(pp, h, y)
    scale = scale_of(y)
    prev = np.inf
    for it in range(max_iter):
        solved, u, e = midpoint_update(pp, h, y, u)
        if not solved:
            return SINGULAR, y, prev
        if converged(e, prev, scale, tol):
            return OK, midpoint_state(pp, h, y, u), e
        if give_up and _diverging(e, it, prev):
            return NOT_CONVERGED, y, e
        prev = e
    return NOT_CONVERGED, y, prev


#: implicit midpoint's exact rule on the array state of a kernel system (``kid``, ``p``): NumPy's iteration on y1 (full
#: Newton, the Jacobian at the iterate, pivoted LU), f0, mid, r (dim,) and m (>= dim, >= dim) its scratch
ArrayMidpoint = namedtuple("ArrayMidpoint", ["kid", "p", "f0", "mid", "r", "y1", "m"])


def _array_start(rule, h, y):  # explicit Euler
    kid, p, f0, mid, r, y1, m = rule  # unpacked once: each field read alone cost the step 5-15 % (reference counts)
    vector_field(kid, p, y, f0)
    for i in range(y.size):
        y1[i] = y[i] + h * f0[i]
    return y1


def _array_update(rule, h, y, y1):  # y1 <- y1 - (I - (h/2) J(mid))^{-1} (y1 - y - h f(mid)), mid = (y + y1) / 2
    kid, p, f0, mid, r, _, m = rule
    d = y.size
    for i in range(d):
        mid[i] = 0.5 * (y[i] + y1[i])
    vector_field(kid, p, mid, r)
    for i in range(d):
        r[i] = y1[i] - y[i] - h * r[i]
    kernel_jacobian(kid, p, mid, m)
    c = 0.5 * h
    for i in range(d):
        for j in range(d):
            m[i, j] = (1.0 if i == j else 0.0) - c * m[i, j]
    if not lu_solve(m, r, d):
        return False, y1, 0.0
    for i in range(d):
        y1[i] = y1[i] - r[i]
    return True, y1, update_norm(r, d)


if HAVE_NUMBA:  # pragma: no branch
    midpoint_rule(ArrayMidpoint, _array_start, _array_update, lambda rule, h, y, y1: y1)


@inline_jit
def step_implicit_midpoint(kid, p, y, h, y1, ws, m, tol, max_iter, info):
    """``y1 = y + h f((y + y1) / 2)`` by ``_midpoint`` with the exact rule (no give-up before ``max_iter``, as NumPy):
    the generic loops' step, the lean loops' fallback; ws (>= 3, dim). Its status (NOT_CONVERGED: info[0] the update)."""
    d = y.size
    st, _, e = _midpoint(ArrayMidpoint(kid, p, ws[0, :d], ws[1, :d], ws[2, :d], y1, m), h, y, tol, max_iter, False)
    if st == NOT_CONVERGED:
        info[0] = e
    return st


@jit
def _gauss(pp, h, y, tol, max_iter, tab):
    """Fixed point on the stage increments Z_j (start h c_j f(y)), then y + h sum_j b_j f(y + Z_j); the
    tableau ``tab = (a, b, c)`` as tuples (its number of stages a constant of the compiled loop)."""
    a, b, c = tab
    f = field(pp, y)
    scale = scale_of(y)
    Z = scaled_rows(h, c, f)
    prev = np.inf
    ok = False
    for it in range(max_iter):
        N = stage_rows(h, a, stage_fields(pp, y, Z))
        e = 0.0
        for j in range(len(N)):
            e = _max_diff(e, N[j], Z[j])
        Z = N
        if it == 0 and e == 0.0:  # an exact equilibrium: NumPy's Newton may find I - h A (x) f' singular
            break
        if converged(e, prev, scale, tol):
            ok = True
            break
        if _diverging(e, it, prev):
            break
        prev = e
    z = y
    if ok:
        z = _add(y, stage_rows(h, (b,), stage_fields(pp, y, Z))[0])
    return ok, z


# --- the run loops ---------------------------------------------------------------------------------------
@jit
def _norm2(z):
    """|z|^2, summed in component order."""
    nn = z[0] * z[0]
    for i in range(1, len(z)):
        nn += z[i] * z[i]
    return nn


@jit
def _reset(info):
    info[0] = np.inf
    info[1] = 0.0
    info[2] = 0.0
    return info[3]


@jit
def _stop(y, z, st, info, k, rows):
    """Stopped at step k + 1 with status ``st``: the state z into y, the status and the step into info; ``rows``."""
    _put(z, y)
    info[1] = st
    info[2] = k + 1
    return rows


@jit
def run_explicit(tag, pp, y, h, n, out, gammas, info, every):
    lim2 = _reset(info)
    x = load(pp, y)
    for k in range(n):
        if gammas.size == 0:
            x = step(tag, pp, h, x, 0.0, 0, ())
        else:
            for g in range(gammas.size):
                x = step(tag, pp, gammas[g] * h, x, 0.0, 0, ())
        st = store(NONE, NONE, x, out, k, lim2, every)
        if st != OK:
            return _stop(y, x, st, info, k, (k + 1) // every)
    _put(x, y)
    return n // every


@jit
def run_verlet(fa, cols, watch, y, h, gammas, n, out, info, f, every):
    """Stormer-Verlet (kick-drift-kick) composed with the fractions ``gammas`` (empty: plain steps of ``h``), the one
    loop of every compiled Verlet: ``n`` steps of y = (q, p) in place, the states after steps ``every``, ``2 every``,
    ... into out (``store``); returns the states written, ``info[1]`` the status, ``info[2]`` the failing step,
    ``info[3]`` the squared norm limit. The state ops are typed by ``fa``: a shipped separable system's parameter
    tuple (the state a tuple of scalars, ``V'`` / ``T'`` by ``gradients``), or an array system's force arguments
    (``compiled.lattice``: the state y itself, the force into f, unit masses). The force of a (sub)step's last kick
    is the next one's first, carried instead of evaluated again (the same numbers)."""
    lim2 = _reset(info)
    x = verlet_state(fa, y)
    g = verlet_force(fa, x, f)
    for k in range(n):
        for j in range(max(1, gammas.shape[0])):
            hs = gammas[j] * h if gammas.shape[0] else h
            c = 0.5 * hs
            x = kick_drift(fa, x, g, c, hs)
            g = verlet_force(fa, x, f)
            x = kick(fa, x, g, c)
        st = store(cols, watch, x, out, k, lim2, every)
        if st != OK:
            return _stop(y, x, st, info, k, (k + 1) // every)
    _put(x, y)
    return n // every


@jit
def run_shears(pp, y, comps, coefs, n, out, info, every):
    lim2 = _reset(info)
    z = load(pp, y)
    for k in range(n):
        for q in range(comps.size):
            z = shear(pp, z, comps[q], coefs[q])
        st = store(NONE, NONE, z, out, k, lim2, every)
        if st != OK:
            return _stop(y, z, st, info, k, (k + 1) // every)
    _put(z, y)
    return n // every


@jit
def run_implicit(tag, pp, p, y, h, n, out, gammas, tol, max_iter, info, ws, m, ta, tb, tc, tab, every):
    lim2 = _reset(info)
    x = load(pp, y)
    d = len(x)
    top = ws.shape[0]
    u, v = ws[top - 1, :d], ws[top - 2, :d]
    ng = max(1, gammas.size)
    for k in range(n):
        z = x
        for g in range(ng):
            hh = h if gammas.size == 0 else gammas[g] * h
            ok, w = step(tag, pp, hh, z, tol, max_iter, tab)
            if not ok:  # the exact NumPy rule decides
                _put(z, u)
                st = exact(tag, pp, p, u, hh, v, ws, m, ta, tb, tc, tol, max_iter, info)
                if st != 0:
                    return _stop(y, x, st, info, k, k // every)
                w = load(pp, v)
            z = w
        x = z
        st = store(NONE, NONE, x, out, k, lim2, every)
        if st != OK:
            return _stop(y, x, st, info, k, (k + 1) // every)
    _put(x, y)
    return n // every


#: method family -> (kind, run loop, method tag); ``explicit_rk`` serves every explicit tableau (the tag is
#: ``explicit_tag(tableau)``), ``gauss`` every number of stages
RUNNERS = {
    "explicit_rk": ("explicit", run_explicit, None),
    "stormer_verlet": ("verlet", run_verlet, None),
    "shears": ("shears", run_shears, None),
    "implicit_midpoint": ("implicit", run_implicit, Midpoint(0)),
    "gauss": ("implicit", run_implicit, Gauss(0)),
}
