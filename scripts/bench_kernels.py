"""Batch-1 cost of every compiled classical kernel beside an independent lean stepper written freely here.

For each registered method that compiles on the rigid body (h = 0.2) and the coupled oscillator (h = 0.4),
it times, interleaved (package, kernel, call, lean, package, ...; the minimum of each kept), on the CPU clock of
this thread (``vpintegrator.clock.thread_cpu``), in the same process:

- the package's path that the work-precision diagram times (``rollout(IntegratorStep(...))``, the engine's
  ``seconds``, as :func:`vpintegrator.rollout.precision._batch1_seconds` measures it);
- the kernel alone (the compiled stepper's ``step_block`` on one block of all the steps, into an output it allocates
  inside the timed region, as the lean steppers and ``vp.integrate`` do: each side pays for the same output);
- a whole batch-1 call ``vp.integrate(system, y0, h, --call-steps, method)`` (checks, dispatch, the output, the
  Trajectories);
- the leanest of a few lean steppers written here, as a user would write them for that system, not with the
  package's arithmetic: numba functions generated per (system, method) from source text (scalar state, stages
  unrolled, no per-step allocation, every state stored into an output array), implicit equations iterated to the
  package's test (``e = max |update| <= tol * max(1, |y|_inf)``, or stalled at the rounding floor). Explicit
  methods are their formulas; implicit midpoint is the fastest of a fixed point, a full Newton with an unrolled
  elimination (the explicit 3x3 inverse on a 3-d system) and, on the separable oscillator, a 2-d Newton of the
  midpoint equations in the midpoint's q alone; Gauss-Legendre is a fixed point on the stage increments; the shear
  splittings are their shears written out in order with the step, the fraction and the field's coefficient folded
  into one constant per shear before the loop (``y0 += c_q * y1 * y2``; adjacent shears of one component also
  merged for compositions); Stormer-Verlet carries the force of a (sub)step's last kick into the next; the rigid
  body's rotation splittings are scalar rotations (rates 1/I_k from the inertia, centred or not, angles per unit z
  precomputed, rotations of rate 0 dropped).

Prints, per method: package and lean seconds per unit of simulated time, their ratio, the kernel-only ratio (a
method that blows up at h, euler, is timed at the largest h / 2^k at which it survives the horizon, both sides at
that step), the whole ``vp.integrate`` call's ratio to the lean stepper over the same steps (target <= 1.3 each),
and the rigid body's seconds to t = 50 000 at h = 0.2 against the Julia anchor (implicit midpoint 2.51 s; target
<= 0.05x); then the worst of each ratio. On a loaded machine the ratios move by ~0.1 between runs (hyperthread
contention): measure with more repeats, or run twice. Usage::

    python scripts/bench_kernels.py [--t-end 2000] [--repeats 5] [--call-steps 10000] [--system rigid_body] [--method rk4 ...]
        [--lattice-n 200 800]    # the lattices' Verlet kernels too (scripts/bench_lattice.py); --lattice-n alone: none

``bench`` also returns, per method, the whole call over the kernel on the call's steps (timed beside each other
in a loop of their own): ``scripts/bench_engine.py`` prints it with every other target of the engine.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

from vpintegrator.clock import thread_cpu  # noqa: E402

JULIA_IM_50K = 2.51  # s, implicit midpoint to t = 50 000 at h = 0.2 (the Julia anchor)
TARGET_RATIO = 1.3
TARGET_JULIA = 0.05


# --- the systems as source text: scalar fields ------------------------------------------------------------
@numba.njit(cache=False)
def _sig(x):
    e = math.exp(-abs(x))
    if x >= 0:
        return 1.0 / (1.0 + e)
    return e / (1.0 + e)


class RigidBodySrc:
    dim = 3
    params = "a, b, c = p[0], p[1], p[2]"

    @staticmethod
    def field(x, f):
        """Lines computing f0..f{d-1} (names f + i) from x0..x{d-1} (names x + i)."""
        return [f"{f}0 = a * {x}1 * {x}2", f"{f}1 = b * {x}0 * {x}2", f"{f}2 = c * {x}0 * {x}1"]

    @staticmethod
    def component(x, i):
        return {0: f"a * {x}1 * {x}2", 1: f"b * {x}0 * {x}2", 2: f"c * {x}0 * {x}1"}[i]

    # a user writing the shears folds the step and the coefficient into one constant: y_i += (t a_i) * monomial
    coefficient = staticmethod(lambda i: "abc"[i])
    monomial = staticmethod(lambda x, i: {0: f"{x}1 * {x}2", 1: f"{x}0 * {x}2", 2: f"{x}0 * {x}1"}[i])

    @staticmethod
    def jac(x):
        """d x d expressions of df_i/dx_j ("0.0" where zero)."""
        return [["0.0", f"a * {x}2", f"a * {x}1"], [f"b * {x}2", "0.0", f"b * {x}0"],
                [f"c * {x}1", f"c * {x}0", "0.0"]]


class OscillatorSrc:
    dim = 4
    params = "ma, mb, k1, k2, kk = p[0], p[1], p[2], p[3], p[4]"

    @staticmethod
    def field(x, f):
        t = f + "_"
        return [f"{t}s = _sig({x}0)", f"{t}ds = {t}s * (1.0 - {t}s)", f"{t}d = {x}0 - {x}1",
                f"{f}0 = {x}2 / ma", f"{f}1 = {x}3 / mb",
                f"{f}2 = -(k1 * {x}0 + kk * {t}s * {t}d + 0.5 * kk * {t}ds * {t}d * {t}d)",
                f"{f}3 = -(k2 * {x}1 - kk * {t}s * {t}d)"]

    @staticmethod
    def jac(x):
        # the Hessian terms are computed in prelude lines (jac_prelude)
        return [["0.0", "0.0", "1.0 / ma", "0.0"], ["0.0", "0.0", "0.0", "1.0 / mb"],
                ["-h11", "-h12", "0.0", "0.0"], ["-h12", "-h22", "0.0", "0.0"]]

    @staticmethod
    def jac_prelude(x):
        return [f"hs = _sig({x}0)", "hds = hs * (1.0 - hs)", "hdds = hds * (1.0 - 2.0 * hs)", f"hd = {x}0 - {x}1",
                "h11 = k1 + kk * hs + 2.0 * kk * hds * hd + 0.5 * kk * hdds * hd * hd",
                "h12 = -kk * hs - kk * hds * hd", "h22 = k2 + kk * hs"]

    # Stormer-Verlet pieces (q = x0, x1; p = x2, x3)
    @staticmethod
    def grad_v(q0, q1, g):
        return [f"{g}_s = _sig({q0})", f"{g}_ds = {g}_s * (1.0 - {g}_s)", f"{g}_d = {q0} - {q1}",
                f"{g}0 = k1 * {q0} + kk * {g}_s * {g}_d + 0.5 * kk * {g}_ds * {g}_d * {g}_d",
                f"{g}1 = k2 * {q1} - kk * {g}_s * {g}_d"]


def _ind(lines, n):
    return ["    " * n + line for line in lines]


def _vars(prefix, d):
    return ", ".join(f"{prefix}{i}" for i in range(d))


def _conv_lines(e, d, diffs):
    """e = max |diff_i| (diffs: expressions)."""
    out = [f"{e} = 0.0"]
    for expr in diffs:
        out += [f"_t = abs({expr})", f"if not (_t <= {e}):", f"    {e} = _t"]
    return out


def _scale_lines(d):
    out = ["scale = 1.0"]
    for i in range(d):
        out += [f"if abs(y{i}) > scale:", f"    scale = abs(y{i})"]
    return out


# --- step generators: each returns the body of ``step(p, h, y0..y{d-1}, tol, max_iter) -> (ok, z0..)`` ----
def _step_euler(S):
    d = S.dim
    # prefix "e": "k0".."k3" would shadow the oscillator's spring constants k1, k2
    return S.field("y", "e") + [f"return True, {', '.join(f'y{i} + h * e{i}' for i in range(d))}"]


def _step_rk4(S):
    d = S.dim
    L = S.field("y", "k1")
    L += [f"t{i} = y{i} + 0.5 * h * k1{i}" for i in range(d)] + S.field("t", "k2")
    L += [f"t{i} = y{i} + 0.5 * h * k2{i}" for i in range(d)] + S.field("t", "k3")
    L += [f"t{i} = y{i} + h * k3{i}" for i in range(d)] + S.field("t", "k4")
    L += [f"return True, {', '.join(f'y{i} + h / 6.0 * (k1{i} + 2.0 * k2{i} + 2.0 * k3{i} + k4{i})' for i in range(d))}"]
    return L


def _step_im_fixed(S):
    d = S.dim
    L = S.field("y", "f") + [f"z{i} = y{i} + h * f{i}" for i in range(d)] + _scale_lines(d)
    L += ["prev = np.inf", "for _ in range(max_iter):"]
    body = [f"m{i} = 0.5 * (y{i} + z{i})" for i in range(d)] + S.field("m", "g")
    body += [f"n{i} = y{i} + h * g{i}" for i in range(d)]
    body += _conv_lines("e", d, [f"n{i} - z{i}" for i in range(d)])
    body += [f"z{i} = n{i}" for i in range(d)]
    body += ["if e <= tol * scale or (e <= 1e3 * tol * scale and e >= 0.5 * prev):",
             f"    return True, {_vars('z', d)}", "prev = e"]
    L += _ind(body, 1) + [f"return False, {_vars('z', d)}"]
    return L


def _elim_lines(d):
    """Solve M r = r in place for scalars M{i}{j}, r{i} (Gaussian elimination, no pivoting, unrolled)."""
    L = []
    for k in range(d):
        L.append(f"iv = 1.0 / M{k}{k}")
        for i in range(k + 1, d):
            L.append(f"l = M{i}{k} * iv")
            for j in range(k + 1, d):
                L.append(f"M{i}{j} -= l * M{k}{j}")
            L.append(f"r{i} -= l * r{k}")
    for k in range(d - 1, -1, -1):
        expr = " - ".join([f"r{k}"] + [f"M{k}{j} * r{j}" for j in range(k + 1, d)])
        L.append(f"r{k} = ({expr}) / M{k}{k}")
    return L


def _adjugate_solve_lines(d):
    """Solve M r = r for the 3x3 scalars M{i}{j} by the explicit inverse (adjugate / determinant)."""
    cof = {(0, 0): "M11 * M22 - M12 * M21", (0, 1): "M02 * M21 - M01 * M22", (0, 2): "M01 * M12 - M02 * M11",
           (1, 0): "M12 * M20 - M10 * M22", (1, 1): "M00 * M22 - M02 * M20", (1, 2): "M02 * M10 - M00 * M12",
           (2, 0): "M10 * M21 - M11 * M20", (2, 1): "M01 * M20 - M00 * M21", (2, 2): "M00 * M11 - M01 * M10"}
    L = [f"A{i}{j} = {cof[i, j]}" for i in range(3) for j in range(3)]
    L += ["iv = 1.0 / (M00 * A00 + M01 * A10 + M02 * A20)"]
    L += [f"s{i} = (A{i}0 * r0 + A{i}1 * r1 + A{i}2 * r2) * iv" for i in range(3)]
    return L + [f"r{i} = s{i}" for i in range(3)]


def _step_im_newton(S):
    d = S.dim
    L = S.field("y", "f") + [f"z{i} = y{i} + h * f{i}" for i in range(d)] + _scale_lines(d)
    L += ["prev = np.inf", "for _ in range(max_iter):"]
    body = [f"m{i} = 0.5 * (y{i} + z{i})" for i in range(d)] + S.field("m", "g")
    body += [f"r{i} = z{i} - y{i} - h * g{i}" for i in range(d)]
    body += getattr(S, "jac_prelude", lambda x: [])("m")
    jac = S.jac("m")
    for i in range(d):
        for j in range(d):
            eye = "1.0" if i == j else "0.0"
            body.append(f"M{i}{j} = {eye} - 0.5 * h * ({jac[i][j]})")
    body += _adjugate_solve_lines(d) if d == 3 else _elim_lines(d)
    body += [f"z{i} -= r{i}" for i in range(d)]
    body += _conv_lines("e", d, [f"r{i}" for i in range(d)])
    body += ["if e <= tol * scale or (e <= 1e3 * tol * scale and e >= 0.5 * prev):",
             f"    return True, {_vars('z', d)}", "prev = e"]
    L += _ind(body, 1) + [f"return False, {_vars('z', d)}"]
    return L


def _gauss_tableau(s):
    x, w = np.polynomial.legendre.leggauss(s)
    c = 0.5 * (x + 1.0)
    b = 0.5 * w
    powers = np.arange(s)
    vander = c[None, :] ** powers[:, None]
    rhs = c[None, :] ** (powers[:, None] + 1) / (powers[:, None] + 1)
    return np.linalg.solve(vander, rhs).T, b, c


def _step_gl_fixed(S, s):
    d = S.dim
    a, b, c = _gauss_tableau(s)
    L = S.field("y", "f") + _scale_lines(d)
    L += [f"Z{j}_{i} = h * {c[j]!r} * f{i}" for j in range(s) for i in range(d)]
    L += ["prev = np.inf", "ok = False", "for _ in range(max_iter):"]
    body = []
    for j in range(s):
        body += [f"Y{i} = y{i} + Z{j}_{i}" for i in range(d)] + S.field("Y", f"F{j}_")
    for j in range(s):
        for i in range(d):
            body.append(f"N{j}_{i} = h * ({' + '.join(f'{a[j, l]!r} * F{l}_{i}' for l in range(s))})")
    body += _conv_lines("e", d, [f"N{j}_{i} - Z{j}_{i}" for j in range(s) for i in range(d)])
    body += [f"Z{j}_{i} = N{j}_{i}" for j in range(s) for i in range(d)]
    body += ["if e <= tol * scale or (e <= 1e3 * tol * scale and e >= 0.5 * prev):", "    ok = True",
             "    break", "prev = e"]
    L += _ind(body, 1)
    for j in range(s):
        L += [f"Y{i} = y{i} + Z{j}_{i}" for i in range(d)] + S.field("Y", f"F{j}_")
    sums = [" + ".join(f"{b[j]!r} * F{j}_{i}" for j in range(s)) for i in range(d)]
    L += [f"return ok, {', '.join(f'y{i} + h * ({sums[i]})' for i in range(d))}"]
    return L


def _step_strang(S):
    d = S.dim
    seq = [(i, 0.5) for i in range(d - 1)] + [(d - 1, 1.0)] + [(i, 0.5) for i in range(d - 2, -1, -1)]
    L = [f"z{i} = y{i}" for i in range(d)]
    for i, frac in seq:
        L.append(f"z{i} += {frac!r} * h * ({S.component('z', i)})")
    return L + [f"return True, {_vars('z', d)}"]


def _step_verlet(S):
    L = S.grad_v("y0", "y1", "g") + ["p0 = y2 - 0.5 * h * g0", "p1 = y3 - 0.5 * h * g1",
                                      "q0 = y0 + h * p0 / ma", "q1 = y1 + h * p1 / mb"]
    L += S.grad_v("q0", "q1", "G") + ["return True, q0, q1, p0 - 0.5 * h * G0, p1 - 0.5 * h * G1"]
    return L


def _step_im_separable(S):
    """Implicit midpoint of a separable H = p^T M^-1 p / 2 + V(q), written as a user would: the midpoint equations
    z1 = z + h f((z + z1) / 2) in the midpoint Q = (q + q1) / 2 alone, Q = q + h/2 M^-1 (p - h/2 V'(Q)), solved by a
    2-d Newton (Jacobian I + h^2/4 M^-1 V''(Q)); then P = p - h/2 V'(Q), q1 = 2 Q - q, p1 = 2 P - p. The test is on
    the change of q1 (2 |dQ|), NumPy's rule."""
    L = ["hh = 0.25 * h * h", "b0 = y0 + 0.5 * h * y2 / ma", "b1 = y1 + 0.5 * h * y3 / mb", "Q0 = b0", "Q1 = b1"]
    L += _scale_lines(4) + ["prev = np.inf", "ok = False", "for _ in range(max_iter):"]
    body = S.grad_v("Q0", "Q1", "g") + S.jac_prelude("Q")
    body += ["r0 = Q0 - b0 + hh / ma * g0", "r1 = Q1 - b1 + hh / mb * g1",
             "J00 = 1.0 + hh / ma * h11", "J01 = hh / ma * h12", "J10 = hh / mb * h12", "J11 = 1.0 + hh / mb * h22",
             "iv = 1.0 / (J00 * J11 - J01 * J10)", "d0 = (J11 * r0 - J01 * r1) * iv", "d1 = (J00 * r1 - J10 * r0) * iv",
             "Q0 -= d0", "Q1 -= d1", "e = 2.0 * max(abs(d0), abs(d1))",
             "if e <= tol * scale or (e <= 1e3 * tol * scale and e >= 0.5 * prev):", "    ok = True", "    break",
             "prev = e"]
    L += _ind(body, 1) + S.grad_v("Q0", "Q1", "g")
    L += ["return ok, 2.0 * Q0 - y0, 2.0 * Q1 - y1, 2.0 * (y2 - 0.5 * h * g0) - y2, 2.0 * (y3 - 0.5 * h * g1) - y3"]
    return L


def _compile_verlet(S):
    """Velocity Verlet as a user writes it: the force at the end of a (sub)step is the next one's first kick."""
    L = ["def run(p, y, h, n, out, tol, max_iter, gammas, comps, coefs):", "    " + S.params,
         "    y0, y1, y2, y3 = y[0], y[1], y[2], y[3]"] + _ind(S.grad_v("y0", "y1", "g"), 1)
    L += ["    ng = max(1, gammas.size)", "    for k in range(n):", "        for gi in range(ng):",
          "            hh = h if gammas.size == 0 else gammas[gi] * h",
          "            v0 = y2 - 0.5 * hh * g0", "            v1 = y3 - 0.5 * hh * g1",
          "            y0 = y0 + hh * v0 / ma", "            y1 = y1 + hh * v1 / mb"]
    L += _ind(S.grad_v("y0", "y1", "g"), 3) + ["            y2 = v0 - 0.5 * hh * g0", "            y3 = v1 - 0.5 * hh * g1"]
    L += [f"        out[k, {i}] = y{i}" for i in range(4)] + ["    y[0], y[1], y[2], y[3] = y0, y1, y2, y3", "    return n"]
    ns = {"np": np, "_sig": _sig, "math": math}
    exec(compile("\n".join(L), f"<lean verlet {S.__name__}>", "exec"), ns)  # noqa: S102 - our own generated source
    return numba.njit(ns["run"])


def _compile(S, body, gammas=None, shears=None, unrolled=None):
    """A run function ``run(p, y, h, n, out, tol, max_iter) -> states done`` around a step body; ``unrolled``: the
    components of a shear sequence, written out in order (its coefficients read once, before the loop)."""
    d = S.dim
    ys = _vars("y", d)
    src = [f"def step(p, h, {ys}, tol, max_iter):", "    " + S.params] + _ind(body, 1)
    src += ["", "def run(p, y, h, n, out, tol, max_iter, gammas, comps, coefs):",
            f"    {ys} = {', '.join(f'y[{i}]' for i in range(d))}"]
    if unrolled is not None:
        src += ["    " + S.params] + [f"    c{q} = coefs[{q}] * {S.coefficient(i)}" for q, i in enumerate(unrolled)]
        src += ["    for k in range(n):"] + [f"        y{i} += c{q} * {S.monomial('y', i)}" for q, i in enumerate(unrolled)]
        src += [f"        out[k, {i}] = y{i}" for i in range(d)]
    elif shears:
        src += ["    " + S.params, "    for k in range(n):", "        for q in range(comps.size):",
                "            cc = coefs[q]", "            w = comps[q]"]
        for i in range(d):
            src += [f"            {'if' if i == 0 else 'elif'} w == {i}:", f"                y{i} += cc * ({S.component('y', i)})"]
        src += [f"        out[k, {i}] = y{i}" for i in range(d)]
    elif gammas:
        src += ["    for k in range(n):", "        for g in range(gammas.size):",
                f"            ok, {ys} = step(p, gammas[g] * h, {ys}, tol, max_iter)",
                "            if not ok:", "                return k"]
        src += [f"        out[k, {i}] = y{i}" for i in range(d)]
    else:
        src += ["    for k in range(n):", f"        ok, {ys} = step(p, h, {ys}, tol, max_iter)",
                "        if not ok:", "            return k"]
        src += [f"        out[k, {i}] = y{i}" for i in range(d)]
    src += [f"    y[{i}] = y{i}" for i in range(d)] + ["    return n"]
    text = "\n".join(src)
    ns = {"np": np, "_sig": _sig, "math": math}
    exec(compile(text, f"<lean {S.__name__}>", "exec"), ns)  # noqa: S102 - our own generated source
    ns["step"] = numba.njit(ns["step"])
    return numba.njit(ns["run"])


def _lean_rotations():
    """A lean run loop of rigid-body rotations: ``comps`` the axes, ``coefs`` the angles per unit z_axis."""

    @numba.njit
    def run(p, y, h, n, out, tol, max_iter, gammas, comps, coefs):
        z0, z1, z2 = y[0], y[1], y[2]
        for k in range(n):
            for q in range(comps.size):
                a = comps[q]
                if a == 0:
                    th = coefs[q] * z0
                    c, s = math.cos(th), math.sin(th)
                    z1, z2 = c * z1 + s * z2, c * z2 - s * z1
                elif a == 1:
                    th = coefs[q] * z1
                    c, s = math.cos(th), math.sin(th)
                    z2, z0 = c * z2 + s * z0, c * z0 - s * z2
                else:
                    th = coefs[q] * z2
                    c, s = math.cos(th), math.sin(th)
                    z0, z1 = c * z0 + s * z1, c * z1 - s * z0
            out[k, 0] = z0
            out[k, 1] = z1
            out[k, 2] = z2
        y[0], y[1], y[2] = z0, z1, z2
        return n

    return run


def _rotation_angles(system, centred: bool, comps, coefs):
    """(axes, angle per unit z_axis) of a rotation sequence, rate-0 rotations dropped (rates 1/I_k, centred)."""
    w = 1.0 / np.asarray(system.inertia, dtype=np.float64)
    if centred:
        w = w - w.mean()
    keep = w[comps] != 0.0
    return np.ascontiguousarray(comps[keep]), np.ascontiguousarray(coefs[keep] * w[comps[keep]])


def _merged(comps, coefs=None):
    """A shear sequence with adjacent shears of one component merged (exact for a shear-splittable field, whose
    component i does not depend on y_i; the rounding differs): (components, coefficients)."""
    coefs = [0.0] * len(comps) if coefs is None else list(coefs)
    mc, mk = [], []
    for c, k in zip(comps, coefs):
        if mc and mc[-1] == int(c):
            mk[-1] += float(k)
        else:
            mc.append(int(c))
            mk.append(float(k))
    return mc, np.array(mk)


def lean_runners(S, method) -> list:
    """Lean run functions (one or two candidates) for ``method`` (an Integrator with its plan) on S."""
    from vpintegrator.compiled.integrators import _plan

    name = method.name
    plan = _plan(method, S.dim, 1.0)
    if plan is None:
        return []
    gammas = list(getattr(method, "gammas", None) or []) or None
    base = getattr(method, "base", None) or name
    if plan["mid"] in (100, 101):  # the rigid body's rotation splittings (vpintegrator.compiled.lie_poisson)
        return [("rotations", _lean_rotations())]
    if plan["mid"] == 6:  # a shear sequence (coefficients for h = 1: scaled at run time)
        comps = [int(i) for i in plan["comps"]]
        cands = [("shears", _compile(S, [], shears=True)), ("unrolled", _compile(S, [], unrolled=comps))]
        if any(a == b for a, b in zip(comps, comps[1:])):  # a composition: adjacent shears of one component merged
            cands.append(("merged", _compile(S, [], unrolled=_merged(comps)[0])))
        return cands
    gauss = {"gauss_legendre2": 1, "gauss_legendre4": 2, "gauss_legendre6": 3, "gauss_legendre8": 4}
    if base == "implicit_midpoint":
        bodies = [("fixed point", _step_im_fixed(S)), ("newton", _step_im_newton(S))]
        if hasattr(S, "grad_v"):  # separable: the 2-d Newton in the midpoint's q alone
            bodies.append(("separable", _step_im_separable(S)))
    elif base in gauss:
        bodies = [("fixed point", _step_gl_fixed(S, gauss[base]))]
    else:
        bodies = [("explicit", {"euler": _step_euler, "rk4": _step_rk4, "splitting": _step_strang,
                                "stormer_verlet": _step_verlet}[base](S))]
    cands = [(label, _compile(S, body, gammas=gammas)) for label, body in bodies]
    if name == "splitting":  # the Strang shears written out, each with its folded constant
        cands.append(("unrolled", _compile(S, [], unrolled=strang_sequence(S.dim)[0])))
    if base == "stormer_verlet":
        cands.append(("carried force", _compile_verlet(S)))
    return cands


def strang_sequence(d: int) -> tuple[list[int], np.ndarray]:
    """The Strang shears 1(h/2) .. d(h) .. 1(h/2): components, fractions of h."""
    comps = [*range(d - 1), d - 1, *range(d - 2, -1, -1)]
    return comps, np.array([1.0 if i == d - 1 else 0.5 for i in comps])


# --- timing ------------------------------------------------------------------------------------------------
def _package_seconds(system, method, h, y0, n):
    from vpintegrator.rollout.engine import rollout
    from vpintegrator.rollout.precision import BATCH1_CHUNK_STEPS
    from vpintegrator.rollout.steps import IntegratorStep

    tr = rollout(IntegratorStep(system, method, h), y0[None, None], h, n, chunk_steps=BATCH1_CHUNK_STEPS)
    assert tr.meta.get("runner") == "numba", tr.meta.get("runner")
    return float(tr.meta["seconds"]), tr.y[0, -1]


#: the least number of interleaved rounds of the whole-call comparison (bench_engine's information row takes as many)
CALL_ROUNDS = 20


def _lean_seconds(run, p, y0, h, n, tol, max_iter, gammas, comps, coefs):
    y = y0.copy()
    start = thread_cpu()
    out = np.empty((n, y.size))
    done = run(p, y, h, n, out, tol, max_iter, gammas, comps, coefs)
    seconds = thread_cpu() - start
    assert done == n, f"lean stepper stopped at step {done}"
    _lean_seconds.peak = float(np.max(np.abs(out))) if np.all(np.isfinite(out)) else math.inf  # for survives()
    return seconds, out[-1]


def bench(system_name, h, methods, t_end, repeats, call_steps=10_000):
    """Prints a line per method and returns rows (method, package s per unit time, lean s per unit time,
    package / lean, lean label, final |difference|, kernel / lean, call / lean over the call's steps, call / kernel
    over the call's steps, call less kernel (s), the call's steps)."""
    from vpintegrator.compiled import compiled_stepper
    from vpintegrator.compiled.integrators import _plan
    from vpintegrator.compiled.systems import system_kernel
    from vpintegrator.data.integration import integrate as vp_integrate
    from vpintegrator.integrators import get_integrator
    from vpintegrator.systems import get_system

    system = get_system(system_name)
    S = {"rigid_body": RigidBodySrc, "coupled_oscillator": OscillatorSrc}[system_name]
    _, p = system_kernel(system)
    y0 = np.array(system.default_y0, dtype=np.float64)
    n = round(t_end / h)
    rows = []
    for name in methods:
        method = get_integrator(name)
        try:
            if compiled_stepper(system, method, h) is None:
                continue
        except Exception:  # noqa: BLE001 - not applicable to this system
            continue
        cands = lean_runners(S, method)

        def args_at(h_m):  # the plan's arrays for step h_m (a shear sequence and rotations hold the step)
            plan = _plan(method, S.dim, h_m)
            comps, coefs = plan["comps"], plan["coefs"]
            if plan["mid"] in (100, 101):  # rotations: axes and angles per unit z_axis, computed here
                comps, coefs = _rotation_angles(system, plan["mid"] == 101, comps, coefs)
            if name == "splitting":  # the Strang shears for the unrolled candidate (ignored by the others)
                comps, fracs = strang_sequence(S.dim)
                comps, coefs = np.array(comps, dtype=np.int64), fracs * h_m
            return plan["tol"], plan["max_iter"], np.asarray(plan["gammas"], dtype=np.float64), comps, coefs

        def survives(h_m, n_m):  # no state beyond the engine's blow-up bound (BLOWUP x |y0|, rows restart there)
            _lean_seconds(cands[0][1], p, y0, h_m, n_m, *args_at(h_m))
            return _lean_seconds.peak <= 1e3 * float(np.max(np.abs(y0)))

        def lean_args(label, args):  # the merged sequence has its own coefficients
            tol, max_iter, gammas, comps, coefs = args
            return (tol, max_iter, gammas, comps, _merged(comps, coefs)[1]) if label == "merged" else args

        for label, run in cands:  # compile
            _lean_seconds(run, p, y0, h, 2, *lean_args(label, args_at(h)))
        _package_seconds(system, method, h, y0, 2)
        # a method that blows up at h (euler) is timed at the largest h / 2^k at which it survives the whole
        # horizon (both sides at that step: a cost per unit time, not a few steps dominated by per-call set-up),
        # else on the horizon it survives
        h_m = h
        while not survives(h_m, round(t_end / h_m)) and h_m > h / 1024:
            h_m /= 2
        if not survives(h_m, round(t_end / h_m)):
            h_m = h
        n_m = round(t_end / h_m)
        while n_m > 16 and not survives(h_m, n_m):
            n_m //= 2
        t_m = n_m * h_m
        tol, max_iter, gammas, comps, coefs = args_at(h_m)
        stepper = compiled_stepper(system, method, h_m)
        n_call = min(call_steps, n_m)
        vp_integrate(system, y0[None], h_m, n_call, method=method)  # compiled (loaded) once
        best_pkg, best_kernel, best_call, best_kernel_call = math.inf, math.inf, math.inf, math.inf
        best_lean = {label: math.inf for label, _ in cands}
        best_lean_call = dict(best_lean)
        for _ in range(repeats):
            sec, y_pkg = _package_seconds(system, method, h_m, y0, n_m)
            best_pkg = min(best_pkg, sec)
            y = y0.copy()
            start = thread_cpu()
            stepper.step_block(y, n_m, np.empty((n_m, S.dim)))  # its output allocated, as the lean's and the call's
            best_kernel = min(best_kernel, thread_cpu() - start)
            for label, run in cands:
                args = lean_args(label, (tol, max_iter, gammas, comps, coefs))
                sec, y_lean = _lean_seconds(run, p, y0, h_m, n_m, *args)
                best_lean[label] = min(best_lean[label], sec)
        # the whole call, its kernel and the lean steppers over the call's steps, interleaved in a loop of their own:
        # beside runs of n_m > n_call steps (euler's small h), whose large arrays are freed to the system each time,
        # the call's output would be fresh pages (~140 us more for 10^4 steps of euler on the rigid body); at least
        # CALL_ROUNDS rounds, because the first calls after those large runs are slower than warm ones (rigid-body
        # Euler: call / kernel 1.43 as the minimum of the first 7 rounds, 1.26 of 20, a lean run between rounds)
        for _ in range(max(repeats, CALL_ROUNDS)):
            start = thread_cpu()
            tr = vp_integrate(system, y0[None], h_m, n_call, method=method)
            best_call = min(best_call, thread_cpu() - start)
            assert tr.meta["runner"] == "numba", tr.meta["runner"]
            y = y0.copy()
            start = thread_cpu()
            kept = np.empty((n_call, S.dim))  # kept to the next round, as tr is: both sides allocate beside the last
            stepper.step_block(y, n_call, kept)
            best_kernel_call = min(best_kernel_call, thread_cpu() - start)
            for label, run in cands:
                args = lean_args(label, (tol, max_iter, gammas, comps, coefs))
                best_lean_call[label] = min(best_lean_call[label], _lean_seconds(run, p, y0, h_m, n_call, *args)[0])
        label = min(best_lean, key=best_lean.get)
        lean = best_lean[label]
        lean_call = min(best_lean_call.values())
        diff = float(np.max(np.abs(y_pkg - y_lean)))
        # the whole call over its kernel on the same steps (timed beside it), and what the call costs beyond it (s)
        rows.append((name, best_pkg / t_m, lean / t_m, best_pkg / lean, label, diff, best_kernel / lean,
                     best_call / lean_call, best_call / best_kernel_call, best_call - best_kernel_call, n_call))
        print(f"{system_name:18s} {name:26s} package {best_pkg / t_m:9.3e}  lean {lean / t_m:9.3e} "
              f"({label:11s})  ratio {best_pkg / lean:5.2f}  kernel-only ratio {best_kernel / lean:5.2f}  "
              f"integrate({n_call} steps) ratio {best_call / lean_call:5.2f}  "
              f"|y_pkg - y_lean|(t={t_m:g}) {diff:.1e}" + (f"  (at h = {h_m:g}: blows up at h = {h:g})" if h_m != h else "")
              + ("  [" + ", ".join(f"{k} {v / t_m:.2e}" for k, v in best_lean.items()) + "]" if len(best_lean) > 1 else "")
              + (f"  t=50000: {best_pkg / t_m * 5e4:6.3f} s = {best_pkg / t_m * 5e4 / JULIA_IM_50K:.3f}x Julia"
                 if system_name == "rigid_body" else ""), flush=True)
    return rows


def _bench_lattice():
    """scripts/bench_lattice.py as a module (its lean Verlet per lattice and its ``bench``)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_lattice", Path(__file__).with_name("bench_lattice.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    from vpintegrator.integrators import list_integrators

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--t-end", type=float, default=2000.0, help="simulated time per measurement")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--call-steps", type=int, default=10_000, help="steps of the timed whole vp.integrate call")
    ap.add_argument("--system", action="append", choices=["rigid_body", "coupled_oscillator"])
    ap.add_argument("--method", action="append", help="default: every registered method (+ gauss_legendre6)")
    ap.add_argument("--lattice-n", type=int, nargs="*", default=[200, 800],
                    help="also the lattices' Verlet kernels at these N against scripts/bench_lattice.py's lean Verlet "
                         "(specialised per lattice); none: skip them")
    args = ap.parse_args(argv)
    methods = args.method or list(dict.fromkeys([*list_integrators(), "gauss_legendre6"]))
    systems = args.system or ["rigid_body", "coupled_oscillator"]
    steps = {"rigid_body": 0.2, "coupled_oscillator": 0.4}
    print(f"batch 1, s per unit simulated time, t_end = {args.t_end:g}, min of {args.repeats} interleaved repeats; "
          f"targets: ratio <= {TARGET_RATIO}, t=50000 <= {TARGET_JULIA}x Julia ({JULIA_IM_50K} s)")
    worst = {"engine": (0.0, ""), "kernel-only": (0.0, ""), "integrate": (0.0, "")}
    for system_name in systems:
        for row in bench(system_name, steps[system_name], methods, args.t_end, args.repeats, args.call_steps):
            for key, value in (("engine", row[3]), ("kernel-only", row[6]), ("integrate", row[7])):
                if value > worst[key][0]:
                    worst[key] = (value, f"{system_name} {row[0]}")
    if args.lattice_n:
        lattice = _bench_lattice()
        for name, h in (("toda", 1.2), ("fpu_beta", 0.9)):
            for n in args.lattice_n:
                r = lattice.bench(name, n, 2000, max(args.repeats, 5), h)
                kernel, call = r["kernel"] / r["independent"], r["integrate"] / r["independent"]
                print(f"{name:18s} stormer_verlet N={n:<5d}      package {r['kernel']:9.3e}  lean {r['independent']:9.3e} "
                      f"(per lattice)  s per step  kernel-only ratio {kernel:5.2f}  integrate(2000 steps) ratio "
                      f"{call:5.2f}  |diff| {r['diff']:.1e}", flush=True)
                for key, value in (("kernel-only", kernel), ("integrate", call)):
                    if value > worst[key][0]:
                        worst[key] = (value, f"{name} N={n} stormer_verlet")
    print("worst ratios over the lean loops (target <= %.1f): " % TARGET_RATIO
          + ", ".join(f"{k} {v:.2f} ({where})" for k, (v, where) in worst.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
