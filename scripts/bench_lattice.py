"""The lattices' full-order Stormer-Verlet kernel against an independent lean Verlet, batch 1, same process.

The package's kernel is ``vpintegrator.compiled.lattice`` (the stepper ``integrate`` runs for ``toda`` and
``fpu_beta``); the lean one is written below from the Hamiltonian alone, as a user would for one lattice: a numba
loop specialised per lattice (its phi' inlined, no branch per bond), one pass over the bonds per force, one ``exp``
per bond (Toda), the last force reused, every state stored (as the kernel does), no blow-up check. Both integrate the same initial condition (the bump, mu = 0.45, p0 = 0) for ``--n-steps`` steps of h = 1.2 at each
N, timed interleaved on this thread's CPU clock (``vpintegrator.clock.thread_cpu``), the minimum of
``--repeats`` runs each. The kernel is timed twice: alone (``step_block`` into a preallocated array) and as
the whole call ``vp.integrate`` (checks, output allocated, metadata). Prints seconds per step and the ratios
to the independent loop (target: kernel <= 1.3x), and the largest difference of the two final states.

With ``--method implicit_midpoint``: the lean loop is the midpoint written per lattice (``_lean_midpoint``: Newton
in the midpoint positions from the explicit Euler guess, one pass over the bonds for phi' and phi'' and one
tridiagonal solve per iteration, cyclic by Sherman-Morrison on Toda's ring, the package's convergence test); with
``--method exponential_splitting``: numba kicks + one scipy FFT pair per step (``_lean_exponential``), and the
NumPy step is timed too.

With ``--bath``: the particle-bath systems' Stormer-Verlet instead (``vpintegrator.compiled.bath``'s stepper,
``step`` into a preallocated array), each against a lean loop written below as a user would for that one system
(the loops the package ran for them before the chain ran the shared one: for the chain a pass of kick and drift,
one of the force, one of the kick; for the harmonic bath one fused pass, its sum reassociated), with the whole state and with the particle (Q, P) only stored (the memory
study's output); target: kernel <= 1.05x.

Usage::

    python scripts/bench_lattice.py [--system toda --system fpu_beta] [--n 200 800] [--n-steps 2000] [--repeats 15]
        [--method stormer_verlet | implicit_midpoint | exponential_splitting]
    python scripts/bench_lattice.py --bath [--n 100 1000]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
import scipy.fft as sfft  # noqa: E402

import vpintegrator as vp  # noqa: E402
from vpintegrator.clock import meter  # noqa: E402
from vpintegrator.compiled import compiled_stepper  # noqa: E402
from vpintegrator.systems import get_system, sample_initial_conditions  # noqa: E402

TARGET = 1.3


@numba.njit(cache=False)
def _toda_dphi(alpha, r):
    return -alpha * math.exp(-r)


@numba.njit(cache=False)
def _fpu_dphi(beta, r):
    return r + beta * r * r * r


def _lean_verlet(dphi):
    """Velocity Verlet for H = |p|^2/2 + sum_b phi(r_b), as a user writes it for one lattice: ``dphi`` (that
    lattice's phi', inlined by numba) is the only thing the loop knows of the system, no branch per bond; each force
    is one pass over the interior bonds plus the two boundary bonds, and the force at the end of a step is the next
    step's first; y (2N,) advanced in place, every state into out (as the package stores them), no blow-up check."""
    @numba.njit(cache=False)
    def run(par, periodic, y, h, n_steps, out):
        n = y.shape[0] // 2
        q = y[:n]
        p = y[n:]
        d = np.empty(n + 1)
        g = np.empty(n)
        c = 0.5 * h

        def force(q, d, g):
            for b in range(1, n):
                d[b] = dphi(par, q[b] - q[b - 1])
            if periodic:
                d[0] = dphi(par, q[0] - q[n - 1])
                d[n] = d[0]
            else:
                d[0] = dphi(par, q[0])
                d[n] = dphi(par, -q[n - 1])
            for i in range(n):
                g[i] = d[i] - d[i + 1]

        force(q, d, g)
        for k in range(n_steps):
            for i in range(n):
                p[i] -= c * g[i]
            for i in range(n):
                q[i] += h * p[i]
            force(q, d, g)
            for i in range(n):
                p[i] -= c * g[i]
            out[k] = y
        return y
    return run


#: the lean Verlet of each lattice, specialised per system (not one loop branching on the kind per bond)
LEAN = {"toda": _lean_verlet(_toda_dphi), "fpu_beta": _lean_verlet(_fpu_dphi)}


@numba.njit(cache=False)
def _toda_ddphi(alpha, r):
    return alpha * math.exp(-r)


@numba.njit(cache=False)
def _fpu_ddphi(beta, r):
    return 1.0 + 3.0 * beta * r * r


def _lean_midpoint(dphi, ddphi, periodic):
    """Implicit midpoint as a user writes it for one lattice (its phi', phi'' inlined, its ends fixed or periodic
    at compile time): Newton in the midpoint positions Q alone, ``Q - q - h p / 2 + h^2 / 4 V'(Q) = 0``, started at
    the explicit Euler guess ``Q = q + h p / 2``; each iteration one pass over the bonds for phi' and phi'' and one
    tridiagonal solve of ``I + h^2 / 4 V''(Q)`` (Thomas; on a ring the cyclic system by Sherman-Morrison, a second
    Thomas solve); stopped by the package's test on the update (``e <= tol * max(1, |y|_inf)``, or stalled at the
    rounding floor); then ``p1 = p - h V'(Q)``, ``q1 = 2 Q - q``. Every state into out, no blow-up check; returns
    the steps done (fewer: Newton did not converge)."""
    @numba.njit(cache=False)
    def thomas(diag, off, rhs, x, cp, n):
        piv = diag[0]
        cp[0] = off[0] / piv
        x[0] = rhs[0] / piv
        for i in range(1, n):
            piv = diag[i] - off[i - 1] * cp[i - 1]
            cp[i] = off[i] / piv
            x[i] = (rhs[i] - off[i - 1] * x[i - 1]) / piv
        for i in range(n - 2, -1, -1):
            x[i] -= cp[i] * x[i + 1]

    @numba.njit(cache=False)
    def run(par, y, h, n_steps, out, tol, max_iter):
        n = y.shape[0] // 2
        q = y[:n]
        p = y[n:]
        big, dq, rhs, diag, off, cp, u, z = (np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
                                             np.empty(n), np.empty(n), np.empty(n))
        d = np.empty(n + 1)
        k = np.empty(n + 1)
        c = 0.25 * h * h
        for step in range(n_steps):
            scale = 1.0
            for i in range(2 * n):
                scale = max(scale, abs(y[i]))
            for i in range(n):
                big[i] = q[i] + 0.5 * h * p[i]
            prev = np.inf
            ok = False
            for _ in range(max_iter):
                for b in range(1, n):  # bond b between sites b-1 and b
                    r = big[b] - big[b - 1]
                    d[b] = dphi(par, r)
                    k[b] = ddphi(par, r)
                if periodic:
                    r = big[0] - big[n - 1]
                    d[0] = d[n] = dphi(par, r)
                    k[0] = k[n] = ddphi(par, r)
                else:
                    d[0], k[0] = dphi(par, big[0]), ddphi(par, big[0])
                    d[n], k[n] = dphi(par, -big[n - 1]), ddphi(par, -big[n - 1])
                for i in range(n):
                    rhs[i] = big[i] - q[i] - 0.5 * h * p[i] + c * (d[i] - d[i + 1])
                    diag[i] = 1.0 + c * (k[i] + k[i + 1])
                    off[i] = -c * k[i + 1]  # between i and i + 1 (on a ring off[n-1]: between n-1 and 0)
                if periodic:  # A = T + u v^T, T tridiagonal: u = (g, 0.., corner), v = (1, 0.., corner / g)
                    corner = off[n - 1]
                    g = -diag[0]
                    diag[0] -= g
                    diag[n - 1] -= corner * corner / g
                    thomas(diag, off, rhs, dq, cp, n)
                    u[:] = 0.0
                    u[0], u[n - 1] = g, corner
                    thomas(diag, off, u, z, cp, n)
                    fact = (dq[0] + corner * dq[n - 1] / g) / (1.0 + z[0] + corner * z[n - 1] / g)
                    for i in range(n):
                        dq[i] -= fact * z[i]
                else:
                    thomas(diag, off, rhs, dq, cp, n)
                e = 0.0
                for i in range(n):
                    big[i] -= dq[i]
                    e = max(e, abs(dq[i]))
                if e <= tol * scale or (e <= 1e3 * tol * scale and e >= 0.5 * prev):
                    ok = True
                    break
                prev = e
            if not ok:
                return step
            for b in range(1, n):
                d[b] = dphi(par, big[b] - big[b - 1])
            if periodic:
                d[0] = d[n] = dphi(par, big[0] - big[n - 1])
            else:
                d[0], d[n] = dphi(par, big[0]), dphi(par, -big[n - 1])
            for i in range(n):
                p[i] -= h * (d[i] - d[i + 1])
                q[i] = 2.0 * big[i] - q[i]
            out[step] = y
        return n_steps
    return run


#: the lean implicit midpoint of each lattice (Toda on a ring, FPU-beta with fixed ends, as the systems are)
MIDPOINT = {"toda": _lean_midpoint(_toda_dphi, _toda_ddphi, True), "fpu_beta": _lean_midpoint(_fpu_dphi, _fpu_ddphi, False)}


def _lean_kick(dphi):
    """The nonlinear half kick of one lattice, ``p -= c (psi'(r_b) - psi'(r_{b+1}))`` with
    ``psi'(r) = phi'(r) - phi'(0) - kappa r``, written for that lattice (its phi' inlined)."""
    @numba.njit(cache=False)
    def kick(par, d0, kappa, periodic, q, p, c, d):
        n = q.shape[0]
        for b in range(1, n):
            r = q[b] - q[b - 1]
            d[b] = dphi(par, r) - d0 - kappa * r
        r = q[0] - q[n - 1] if periodic else q[0]
        d[0] = dphi(par, r) - d0 - kappa * r
        if periodic:
            d[n] = d[0]
        else:
            r = -q[n - 1]
            d[n] = dphi(par, r) - d0 - kappa * r
        for i in range(n):
            p[i] -= c * (d[i] - d[i + 1])
    return kick


KICK = {"toda": _lean_kick(_toda_dphi), "fpu_beta": _lean_kick(_fpu_dphi)}


def _lean_exponential(system, kick, y, h, n_steps, out):
    """Strang splitting with the linear part exact, as a user writes it: numba kicks, and per step one scipy FFT
    (DST-I with fixed ends) of (q, p) stacked and one inverse, the modes' factors computed once."""
    n = y.shape[0] // 2
    par, d0, kappa, periodic = float(system.bond_params()[0]), float(system.dphi(np.zeros(1))[0]), system.kappa, system.periodic
    w = system.mode_frequencies()
    c, sw, ws = np.cos(w * h), h * np.sinc(w * h / np.pi), w * np.sin(w * h)
    qp = y.reshape(2, n)
    q, p = qp[0], qp[1]
    d = np.empty(n + 1)
    for k in range(n_steps):
        kick(par, d0, kappa, periodic, q, p, 0.5 * h, d)
        if periodic:
            qh, ph = sfft.rfft(qp, axis=-1)
            qp[:] = sfft.irfft(np.stack([c * qh + sw * ph, c * ph - ws * qh]), n=n, axis=-1)
        else:
            qh, ph = sfft.dst(qp, type=1, axis=-1, norm="ortho")
            qp[:] = sfft.dst(np.stack([c * qh + sw * ph, c * ph - ws * qh]), type=1, axis=-1, norm="ortho")
        kick(par, d0, kappa, periodic, q, p, 0.5 * h, d)
        out[k] = y
    return y


@numba.njit(cache=False, error_model="numpy")
def _lean_chain(y, h, n_steps, beta, kc, out):
    """Velocity Verlet of the particle + FPU-beta chain, written for this system (the package's own loop before the
    chain ran the shared one): a pass of kick and drift, one of the force, one of the kick; out (n_steps, 2): the
    particle, else the whole state."""
    m = y.shape[0] // 2
    n = m - 1
    f = np.empty(m)

    def force(y, f):
        Q = y[0]
        d_prev = kc * (y[1] - Q)
        f[0] = -(Q * Q * Q - Q) + d_prev
        for i in range(1, n + 1):
            r = (y[i + 1] if i < n else 0.0) - y[i]
            d = r + beta * r * r * r
            f[i] = d - d_prev
            d_prev = d

    force(y, f)
    hh = 0.5 * h
    for k in range(n_steps):
        for i in range(m):
            p = y[m + i] + hh * f[i]
            y[m + i] = p
            y[i] += h * p
        force(y, f)
        for i in range(m):
            y[m + i] += hh * f[i]
        if out.shape[1] == 2:
            out[k, 0] = y[0]
            out[k, 1] = y[m]
        else:
            out[k] = y


@numba.njit(cache=False, error_model="numpy", fastmath={"reassoc"})
def _lean_kz(y, h, n_steps, w2, c, s, out):
    """Velocity Verlet of the particle + harmonic bath in one fused pass over the oscillators per step."""
    n = w2.shape[0]
    m = n + 1
    f = np.empty(n)
    Q = y[0]
    acc = 0.0
    for j in range(n):
        x = y[1 + j] - s[j] * Q
        f[j] = -w2[j] * x
        acc += c[j] * x
    fq = -(Q * Q * Q - Q) + acc
    hh = 0.5 * h
    for k in range(n_steps):
        P = y[m] + hh * fq
        Q = y[0] + h * P
        y[0] = Q
        acc = 0.0
        for j in range(n):
            pj = y[m + 1 + j] + hh * f[j]
            qj = y[1 + j] + h * pj
            x = qj - s[j] * Q
            f[j] = -w2[j] * x
            acc += c[j] * x
            y[1 + j] = qj
            y[m + 1 + j] = pj + hh * f[j]
        fq = -(Q * Q * Q - Q) + acc
        y[m] = P + hh * fq
        if out.shape[1] == 2:
            out[k, 0] = Q
            out[k, 1] = y[m]
        else:
            out[k] = y


def bench_bath(system_name: str, n: int, n_steps: int, repeats: int, full: bool, h: float = 0.05) -> dict[str, float]:
    """The bath stepper's Stormer-Verlet against the lean loop of that system (``_lean_chain``, ``_lean_kz``)."""
    from vpintegrator.compiled.bath import bath_stepper

    system = get_system(system_name, N=n)
    y0 = system.bath_at_rest([0.8], [0.3])[0]
    stepper = bath_stepper(system, "stormer_verlet", h)
    out, out2 = (np.empty((n_steps, system.dim if full else 2)) for _ in range(2))
    if system_name == "particle_chain":
        lean = lambda: _lean_chain(y0.copy(), h, n_steps, system.beta, system.coupling, out2)  # noqa: E731
    else:
        w = system.frequencies
        lean = lambda: _lean_kz(y0.copy(), h, n_steps, w * w, system.couplings, system.shifts, out2)  # noqa: E731
    costs = meter({"independent": lean, "kernel": lambda: stepper.step(y0.copy(), n_steps, out)}, repeats)
    return {**{k: c.seconds / n_steps for k, c in costs.items()}, "diff": float(np.max(np.abs(out[-1] - out2[-1])))}


def bench(system_name: str, n_sites: int, n_steps: int, repeats: int, h: float,
          method: str = "stormer_verlet", numpy_step: bool = True) -> dict[str, float]:
    """Seconds per step of the lean loop (``independent``), the kernel (``step_block``), the whole ``vp.integrate``
    call (and, for the exponential splitting with ``numpy_step``, the NumPy step), the minimum of ``repeats``
    interleaved runs of ``n_steps`` steps; ``diff``: the largest difference of the kernel's and the lean loop's
    final states."""
    system = get_system(system_name, N=n_sites)
    y0 = sample_initial_conditions(system, "bump", mu=[0.45])[0]
    par = float(system.bond_params()[0])
    stepper = compiled_stepper(system, method, h)
    out = np.empty((n_steps, system.dim))
    out2 = np.empty((n_steps, system.dim))
    if method == "stormer_verlet":
        lean = lambda: LEAN[system_name](par, system.periodic, y0.copy(), h, n_steps, out2)  # noqa: E731
    elif method == "implicit_midpoint":
        lean = lambda: MIDPOINT[system_name](par, y0.copy(), h, n_steps, out2, stepper.tol, stepper.max_iter)  # noqa: E731
    else:
        lean = lambda: _lean_exponential(system, KICK[system_name], y0.copy(), h, n_steps, out2)  # noqa: E731
    calls = {
        "independent": lean,
        "kernel": lambda: stepper.step_block(y0.copy(), n_steps, out),
        "integrate": lambda: vp.integrate(system, y0, dt=h, n_steps=n_steps, method=method),
    }
    if method == "exponential_splitting" and numpy_step:  # the NumPy step, what ran before it was compiled
        calls["numpy"] = lambda: vp.integrate(system, y0, dt=h, n_steps=n_steps, method=method, compiled=False)
    costs = meter(calls, repeats)  # one cold call each (compile, touch the outputs), then interleaved rounds
    assert vp.integrate(system, y0, dt=h, n_steps=2, method=method).meta["runner"] == "numba"
    diff = float(np.max(np.abs(out[-1] - out2[-1])))
    return {**{k: c.seconds / n_steps for k, c in costs.items()}, "diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", action="append", choices=("toda", "fpu_beta"), help="default: both")
    ap.add_argument("--n", type=int, nargs="+", default=[200, 800], help="lattice sizes N")
    ap.add_argument("--n-steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--dt", type=float, default=None, help="step (default 1.2 for toda, 0.9 for fpu_beta)")
    ap.add_argument("--method", default="stormer_verlet",
                    choices=("stormer_verlet", "implicit_midpoint", "exponential_splitting"),
                    help="implicit_midpoint: the lean loop is a Newton in the midpoint positions with a (cyclic) "
                         "tridiagonal solve; exponential_splitting: numba kicks + one scipy FFT pair per step, and "
                         "the NumPy step is timed too")
    ap.add_argument("--bath", action="store_true", help="the particle-bath systems' Stormer-Verlet (module docstring)")
    args = ap.parse_args()
    if args.bath:
        print(f"stormer_verlet, h = 0.05, {args.n_steps} steps, min of {args.repeats} interleaved, thread CPU, "
              f"numba {numba.__version__}")
        print("| system | N | stored | lean s/step | kernel s/step | kernel / lean | max |diff| |")
        print("|---|---|---|---|---|---|---|")
        for name in ("particle_chain", "kac_zwanzig"):
            for n in args.n:
                for full in (True, False):
                    r = bench_bath(name, n, args.n_steps, args.repeats, full)
                    ratio = r["kernel"] / r["independent"]
                    print(f"| {name} | {n} | {'state' if full else 'particle'} | {r['independent']:.3g} | "
                          f"{r['kernel']:.3g} | {ratio:.2f}{'' if ratio <= 1.05 else ' (above 1.05)'} | "
                          f"{r['diff']:.1e} |")
        return
    print(f"{args.method}, {args.n_steps} steps, min of {args.repeats} interleaved, thread CPU, "
          f"numba {numba.__version__}")
    print("| system | h | N | lean s/step | kernel s/step | kernel / lean | integrate / lean | max |diff| |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.system or ["toda", "fpu_beta"]:
        h = args.dt or (1.2 if name == "toda" else 0.9)
        for n in args.n:
            r = bench(name, n, args.n_steps, args.repeats, h, args.method)
            ratio = r["kernel"] / r["independent"]
            numpy = f" (NumPy step / kernel {r['numpy'] / r['kernel']:.2f})" if "numpy" in r else ""
            print(f"| {name} | {h} | {n} | {r['independent']:.3g} | {r['kernel']:.3g} | {ratio:.2f}"
                  f"{'' if ratio <= TARGET else ' (above 1.3)'} | {r['integrate'] / r['independent']:.2f} "
                  f"| {r['diff']:.1e}{numpy} |")


if __name__ == "__main__":
    main()
