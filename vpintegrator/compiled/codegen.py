"""Writes ``vpintegrator.compiled._generated``: one run loop per (shipped system, method), scalar state.

The generic loops of ``vpintegrator.compiled.kernels`` dispatch on the system id inside every field call and keep the state
and stages in workspace rows; measured at batch 1 they cost 2.5-13x a lean stepper with the state in
local scalars and the stages unrolled (``scripts/bench_kernels.py``). This module writes those lean loops
as Python source, one per (system, method), from a text template of each system's field (the operation
order of ``vpintegrator.compiled.systems``, so the fields agree with NumPy to rounding), into a real file so that numba's
on-disk cache (``cache=True``) keeps working. Regenerate after editing a template::

    python -m vpintegrator.compiled.codegen      # rewrites vpintegrator/compiled/_generated.py

(``tests/test_compiled_integrators.py`` checks that the file is what this module writes.)

The loops (names ``run_<method>_<system>``):

- explicit (``euler``, ``rk4``, ``splitting`` = Strang shears, ``stormer_verlet``):
  ``run(p, y, h, n, out, gammas, info) -> states written``; ``gammas`` empty runs plain steps of ``h``,
  else each step is the composition of sub-steps ``gammas[i] h``;
- ``shears``: ``run(p, y, comps, coefs, n, out, info)``, the shears ``y_i += c f_i(y)`` in order;
- implicit (``implicit_midpoint``; ``gauss<s>`` for s = 1..4 stages):
  ``run(p, y, h, n, out, gammas, tol, max_iter, info, ws, m, a, b, c)`` (tableau a, b, c). Implicit
  midpoint iterates by fixed point while that contracts by 4x per iteration or better (h |f'| small),
  then by full Newton (the Jacobian at the current iterate, as the NumPy path) with an unrolled
  elimination; Gauss-Legendre iterates the stage equations by fixed point ``Z <- h A f(y + Z)``. Both
  start where NumPy starts and stop on NumPy's test (``max |update| <= tol max(1, |y|_inf)``, or stalled
  at the rounding floor). When the fast iteration fails (no convergence in ``max_iter``, an update that
  stops shrinking, a zero pivot, a non-finite update, an exact equilibrium), the step is redone by the
  exact NumPy rule of ``vpintegrator.compiled.newton`` (pivoted LU, full Newton), which then decides success or failure
  with NumPy's status and last update.

Failure semantics are those of ``vpintegrator.compiled.kernels`` (``info[1]`` status, ``info[2]`` the 1-based step).
"""

from __future__ import annotations

from pathlib import Path

from .systems import SHIPPED

# --- the systems: calls of their own ``field`` / ``field_jacobian`` (compiled in ``compiled/systems.py``) -----
def _call(fn, x, d):
    return f"{fn}(pp, ({', '.join(f'{x}{i}' for i in range(d))}))"


def _system(kid, cls):
    """(kid, dim, params line, field(x, f) -> lines, component(x, i) -> expr or None, jacobian(x), separable):
    every piece a call of the system's jitted ``field`` / ``field_jacobian`` (``compiled.systems``), which numba
    inlines; no formula is written here."""
    name, d = cls.name, cls.dim
    n_p = len(cls().field_params())
    # the parameters read once into a tuple ``pp`` (not from the array in every field call)
    params = f"pp = ({', '.join(f'p[{i}]' for i in range(n_p))}{',' if n_p == 1 else ''})"

    def field(x, f):
        return [f"{', '.join(f'{f}{i}' for i in range(d))} = {_call(f'{name}_field', x, d)}"]

    def comp(x, i):
        return f"{_call(f'{name}_field', x, d)}[{i}]"

    def jac(x):
        return [f"J = {_call(f'{name}_jacobian', x, d)}"], [[f"J[{i}][{j}]" for j in range(d)] for i in range(d)]

    return (kid, d, params, field, comp if cls.shear_splittable else None, jac, cls.separable, name)


SYSTEMS = {cls.name: _system(kid, cls) for kid, cls in SHIPPED.items()}
MAX_GAUSS_STAGES = 4


def _ind(lines, n):
    return ["    " * n + line if line else "" for line in lines]


def _names(prefix, d):
    return ", ".join(f"{prefix}{i}" for i in range(d))


def _max_abs(e, exprs):
    out = [f"{e} = 0.0"]
    for expr in exprs:
        out += [f"t = abs({expr})", f"if not t <= {e}:", f"    {e} = t"]  # NaN -> e NaN (caught below)
    return out


def _scale(d):
    out = ["scale = 1.0"]
    for i in range(d):
        out += [f"if abs(y{i}) > scale:", f"    scale = abs(y{i})"]
    return out


# --- step bodies: statements that map scalars y0.. and step h to z0.. (implicit: or set ok = False) -----
def _euler(sysdef):
    _, d, _, field, *_ = sysdef
    return field("y", "k") + [f"z{i} = y{i} + h * k{i}" for i in range(d)]


def _rk4(sysdef):
    _, d, _, field, *_ = sysdef
    lines = ["half = 0.5 * h"] + field("y", "k1")
    for src, k, dst in (("half", "k1", "k2"), ("half", "k2", "k3"), ("h", "k3", "k4")):
        lines += [f"t{i} = y{i} + {src} * {k}{i}" for i in range(d)] + field("t", dst)
    lines += ["sixth = h / 6.0"]
    return lines + [f"z{i} = y{i} + sixth * (k1{i} + 2.0 * k2{i} + 2.0 * k3{i} + k4{i})" for i in range(d)]


def _splitting(sysdef):
    _, d, _, _, comp, *_ = sysdef
    lines = ["half = 0.5 * h"] + [f"z{i} = y{i}" for i in range(d)]
    for i in range(2 * d - 1):
        j = i if i < d else 2 * d - 2 - i
        lines.append(f"z{j} += {'h' if i == d - 1 else 'half'} * ({comp('z', j)})")
    return lines


def _verlet(sysdef):
    """Stormer-Verlet on a separable system of dim 4 (its ``potential_gradient_of`` / ``kinetic_gradient_of``)."""
    name = sysdef[-1]
    return (["half = 0.5 * h", f"g0, g1 = {name}_potential_gradient(pp, y0, y1)", "v0 = y2 - half * g0",
             "v1 = y3 - half * g1", f"t0, t1 = {name}_kinetic_gradient(pp, v0, v1)", "z0 = y0 + h * t0",
             "z1 = y1 + h * t1", f"G0, G1 = {name}_potential_gradient(pp, z0, z1)", "z2 = v0 - half * G0",
             "z3 = v1 - half * G1"])


def _midpoint(sysdef):
    """NumPy's Newton iteration for ``z = y + h f((y + z) / 2)`` from its start ``z = y + h f(y)``, with the Jacobian
    at each iterate and its test on the update; the 3x3 solve by the explicit inverse (adjugate over the
    determinant: one division, no elimination chain), larger systems by the elimination unrolled without
    pivoting. A zero determinant or pivot, or an iteration that diverges or does not converge, leaves the step to
    the exact NumPy rule (``newton.step_implicit_midpoint``), which decides success or failure."""
    _, d, _, field, _, jac, *_ = sysdef
    pre, J = jac("u")
    lines = field("y", "f") + [f"z{i} = y{i} + h * f{i}" for i in range(d)] + _scale(d)
    lines += ["c2 = 0.5 * h", "prev = np.inf", "ok = False", "for it in range(max_iter):"]
    body = [f"u{i} = 0.5 * (y{i} + z{i})" for i in range(d)] + field("u", "g")
    body += [f"r{i} = z{i} - y{i} - h * g{i}" for i in range(d)] + pre
    for i in range(d):
        for j in range(d):
            body.append(f"M{i}{j} = {'1.0' if i == j else '0.0'} - c2 * ({J[i][j]})")
    if d == 3:
        cof = {(0, 0): "M11 * M22 - M12 * M21", (0, 1): "M02 * M21 - M01 * M22", (0, 2): "M01 * M12 - M02 * M11",
               (1, 0): "M12 * M20 - M10 * M22", (1, 1): "M00 * M22 - M02 * M20", (1, 2): "M02 * M10 - M00 * M12",
               (2, 0): "M10 * M21 - M11 * M20", (2, 1): "M01 * M20 - M00 * M21", (2, 2): "M00 * M11 - M01 * M10"}
        body += [f"A{i}{j} = {cof[i, j]}" for i in range(3) for j in range(3)]
        body += ["det = M00 * A00 + M01 * A10 + M02 * A20", "if det == 0.0:", "    break", "iv = 1.0 / det"]
        body += [f"s{i} = (A{i}0 * r0 + A{i}1 * r1 + A{i}2 * r2) * iv" for i in range(3)]
        body += [f"r{i} = s{i}" for i in range(3)]
    else:
        for k in range(d):
            body += [f"if M{k}{k} == 0.0:", "    break", f"iv = 1.0 / M{k}{k}"]
            for i in range(k + 1, d):
                body.append(f"l = M{i}{k} * iv")
                body += [f"M{i}{j} -= l * M{k}{j}" for j in range(k + 1, d)]
                body.append(f"r{i} -= l * r{k}")
        for k in range(d - 1, -1, -1):
            body.append(f"r{k} = ({' - '.join([f'r{k}'] + [f'M{k}{j} * r{j}' for j in range(k + 1, d)])}) / M{k}{k}")
    body += [f"z{i} = z{i} - r{i}" for i in range(d)]
    body += _max_abs("e", [f"r{i}" for i in range(d)])
    body += _converged()
    return lines + _ind(body, 1)


# At an exact equilibrium the first fixed-point update is exactly 0, where NumPy's Newton still forms
# I - h A (x) f'(y), which may be exactly singular (its failure): leave such steps to Newton / the exact rule.
_EQUILIBRIUM = ["if it == 0 and e == 0.0:", "    break"]


def _converged():
    return ["if e <= tol * scale or (e <= 1e3 * tol * scale and e >= 0.5 * prev):", "    ok = True", "    break",
            "if not e < np.inf or (it > 1 and e >= 2.0 * prev):", "    break  # diverging or not finite: the exact rule",
            "prev = e"]


def _gauss(sysdef, s):
    """Fixed point on the stage increments Z_j (start h c_j f(y)), then y + h sum_j b_j f(y + Z_j)."""
    _, d, _, field, *_ = sysdef
    lines = field("y", "f") + _scale(d)
    lines += [f"Z{j}_{i} = h * c{j} * f{i}" for j in range(s) for i in range(d)]
    lines += ["prev = np.inf", "ok = False", "for it in range(max_iter):"]
    body = []
    for j in range(s):
        body += [f"w{i} = y{i} + Z{j}_{i}" for i in range(d)] + field("w", f"F{j}_")
    for j in range(s):
        body += [f"N{j}_{i} = h * ({' + '.join(f'a{j}{l} * F{l}_{i}' for l in range(s))})" for i in range(d)]
    body += _max_abs("e", [f"N{j}_{i} - Z{j}_{i}" for j in range(s) for i in range(d)])
    body += [f"Z{j}_{i} = N{j}_{i}" for j in range(s) for i in range(d)]
    body += _EQUILIBRIUM + _converged()
    lines += _ind(body, 1) + ["if ok:"]
    fin = []
    for j in range(s):
        fin += [f"w{i} = y{i} + Z{j}_{i}" for i in range(d)] + field("w", f"F{j}_")
    fin += [f"z{i} = y{i} + h * ({' + '.join(f'b{j} * F{j}_{i}' for j in range(s))})" for i in range(d)]
    return lines + _ind(fin, 1)


# --- run loops ---------------------------------------------------------------------------------------------------
_RESET = ["    info[0] = np.inf", "    info[1] = 0.0", "    info[2] = 0.0", "    lim2 = info[3]"]


def _store(d):
    """Write z into out[k] and y; on a non-finite state (status 3) or one whose squared norm is above
    ``lim2 = info[3]`` (status 4, the engine's blow-up rule; inf: off) stop at step k + 1 and return k + 1.
    One comparison per step in the common case (a NaN or an inf fails it too); a finite state whose squared
    norm overflows goes on when there is no limit."""
    fin = " and ".join(f"math.isfinite(z{i})" for i in range(d))
    return ([f"out[k, {i}] = z{i}" for i in range(d)] + [f"y{i} = z{i}" for i in range(d)]
            + [f"nn = {' + '.join(f'z{i} * z{i}' for i in range(d))}", "if not nn < lim2:"]
            + _ind(["if not (" + fin + ") or nn > lim2:"] + _ind(_save(d) + [
                f"info[1] = 3.0 if not ({fin}) else 4.0", "info[2] = k + 1", "return k + 1"], 1), 1))


def _save(d):
    return [f"y[{i}] = y{i}" for i in range(d)]


def _explicit_run(name, sysdef, body):
    _, d, params, *_ = sysdef
    step = ["def _step_{0}(p, h, {1}):".format(name, _names("y", d))]
    step += _ind(([params] if params else []) + body + [f"return {_names('z', d)}"], 1)
    run = [f"def run_{name}(p, y, h, n, out, gammas, info):", *_RESET, f"    {_names('y', d)} = {', '.join(f'y[{i}]' for i in range(d))}",
           "    if gammas.size == 0:", "        for k in range(n):",
           f"            {_names('z', d)} = _step_{name}(p, h, {_names('y', d)})"]
    run += _ind(_store(d), 3)
    run += ["    else:", "        for k in range(n):", f"            {_names('z', d)} = {_names('y', d)}",
            "            for g in range(gammas.size):",
            f"                {_names('z', d)} = _step_{name}(p, gammas[g] * h, {_names('z', d)})"]
    run += _ind(_store(d), 3) + _ind(_save(d), 1) + ["    return n"]
    return ["@jit", *step, "", "", "@jit", *run]


def _shears_run(name, sysdef):
    _, d, params, _, comp, *_ = sysdef
    run = [f"def run_{name}(p, y, comps, coefs, n, out, info):", *_RESET] + ([f"    {params}"] if params else [])
    run += [f"    {_names('z', d)} = {', '.join(f'y[{i}]' for i in range(d))}", "    for k in range(n):",
            "        for q in range(comps.size):", "            cq = coefs[q]", "            j = comps[q]"]
    for i in range(d):
        run += [f"            {'if' if i == 0 else 'elif' if i < d - 1 else 'else'}{f' j == {i}' if i < d - 1 else ''}:",
                f"                z{i} += cq * ({comp('z', i)})"]
    run += _ind(_store(d), 2) + _ind(_save(d), 1) + ["    return n"]
    return ["@jit", *run]


def _implicit_run(name, sysdef, body, exact, stages):
    kid, d, params, *_ = sysdef
    ys = _names("y", d)
    tab = []
    if stages:
        tab = [f"a{i}{j} = ta[{i}, {j}]" for i in range(stages) for j in range(stages)]
        tab += [f"b{j} = tb[{j}]" for j in range(stages)] + [f"c{j} = tc[{j}]" for j in range(stages)]
    tabargs = ", ta, tb, tc" if stages else ""
    step = [f"def _step_{name}(p, h, {ys}, tol, max_iter{tabargs}):"]
    step += _ind(([params] if params else []) + tab + [f"{_names('z', d)} = {ys}"] + body
                 + [f"return ok, {_names('z', d)}"], 1)
    exact_call = (f"st = {exact}({kid}, p, u, hh, v, ws, m, ta, tb, tc, tol, max_iter, info)" if stages
                  else f"st = {exact}({kid}, p, u, hh, v, ws, m, tol, max_iter, info)")
    sub = [f"ok, {_names('z', d)} = _step_{name}(p, hh, {_names('x', d)}, tol, max_iter{tabargs})",
           "if not ok:  # the exact NumPy rule decides"]
    sub += _ind([f"u[{i}] = x{i}" for i in range(d)] + [exact_call, "if st != 0:"]
                + _ind(_save(d) + ["info[1] = st", "info[2] = k + 1", "return k"], 1)
                + [f"z{i} = v[{i}]" for i in range(d)], 1)
    run = [f"def run_{name}(p, y, h, n, out, gammas, tol, max_iter, info, ws, m, ta, tb, tc):", *_RESET,
           f"    {ys} = {', '.join(f'y[{i}]' for i in range(d))}",
           "    top = ws.shape[0]", f"    u, v = ws[top - 1, :{d}], ws[top - 2, :{d}]",
           "    ng = max(1, gammas.size)", "    for k in range(n):", f"        {_names('x', d)} = {ys}",
           "        for g in range(ng):", "            hh = h if gammas.size == 0 else gammas[g] * h"]
    run += _ind(sub, 3) + _ind([f"{_names('x', d)} = {_names('z', d)}"], 3)
    run += _ind(_store(d), 2) + _ind(_save(d), 1) + ["    return n"]
    return ["@jit", *step, "", "", "@jit", *run]


HEADER = '''"""GENERATED by ``python -m vpintegrator.compiled.codegen``; do not edit (see that module's docstring).

One run loop per (shipped system, method) with the state in local scalars and the stages unrolled.
"""

# fmt: off
# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import math

import numpy as np

from ._jit import jit
from .newton import step_gauss_legendre, step_implicit_midpoint
'''


def _imports() -> str:
    names = []
    for cls in SHIPPED.values():
        names += [f"{cls.name}_field", f"{cls.name}_jacobian"]
        if cls.separable:
            names += [f"{cls.name}_kinetic_gradient", f"{cls.name}_potential_gradient"]
    return "from .systems import (\n" + "".join(f"    {n},\n" for n in names) + ")\n\n"


def source() -> str:
    """The text of ``_generated.py``."""
    blocks, table = [], []
    for sname, sysdef in SYSTEMS.items():
        kid, d, _, _, comp, _, separable, _ = sysdef
        methods = [("euler", _euler(sysdef)), ("rk4", _rk4(sysdef))]
        if comp is not None:
            methods.append(("splitting", _splitting(sysdef)))
        if separable:
            methods.append(("stormer_verlet", _verlet(sysdef)))
        for meth, body in methods:
            blocks.append(_explicit_run(f"{meth}_{sname}", sysdef, body))
            table.append(f"    ({kid}, {meth!r}): run_{meth}_{sname},")
        if comp is not None:
            blocks.append(_shears_run(f"shears_{sname}", sysdef))
            table.append(f"    ({kid}, 'shears'): run_shears_{sname},")
        blocks.append(_implicit_run(f"implicit_midpoint_{sname}", sysdef, _midpoint(sysdef), "step_implicit_midpoint", 0))
        table.append(f"    ({kid}, 'implicit_midpoint'): run_implicit_midpoint_{sname},")
        for s in range(1, MAX_GAUSS_STAGES + 1):
            blocks.append(_implicit_run(f"gauss{s}_{sname}", sysdef, _gauss(sysdef, s), "step_gauss_legendre", s))
            table.append(f"    ({kid}, 'gauss{s}'): run_gauss{s}_{sname},")
    text = HEADER + _imports() + "\n\n".join("\n".join(b) for b in blocks)
    text += "\n\n\n#: (system id, method) -> run loop\nRUNNERS = {\n" + "\n".join(table) + "\n}\n"
    return text


PATH = Path(__file__).with_name("_generated.py")


def main() -> None:
    PATH.write_text(source())
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
