"""The fitted rows against a lean loop of the same fit (issue 86 item 3): ratios measured in one run, on the one meter.

The memory study's fitted rows (``arx``, ``narx``, ``delay_dmd``, ``delay_sindy+rk4``), made as it makes them
(``ladder.fitted_steps`` on the coupled oscillator observed in q, ``--n-train`` trajectories to t = 20 at h = 0.2,
window T = ``--T``), and with ``--gle`` its ``gle`` row (the hidden bath, kac_zwanzig at N = ``--bath-n``: the
kernel's sum of exponentials). Each is rolled out at batch 1 from one held-out window to t = 100 (500 steps, as the
study prices a row), and the same fit is evaluated by a lean numba loop written in this file, as a user would write
it from the coefficients the package's objects hold (``step.fit.c``, ``.W``, ``.P``, ``.powers``; delay DMD's ``e``,
``At``, ``f``, ``G``, ``Vr``, ``mu``; delay SINDy's chosen field, its library's ``powers`` and ``coefficients`` Ξ,
stepped by RK4 on the delay vector; the GLE's ``_soe``): the outputs must agree to round-off. Every call is timed on
``vpintegrator.clock.meter`` in one interleaved run (one cold call each, then the minimum over ``--repeats`` rounds,
thread CPU, same process):

- ``lean``: the lean loop, its output array allocated in the call;
- ``steps``: the engine's own seconds of the row's steps (``rollout(...).meta["seconds"]``);
- ``start+steps``: the same plus its start (``setup_seconds``): the memory study's price of a row;
- ``call``: the whole ``rollout(...)`` call on the meter's clock (the study's price before issue 86).

    python scripts/bench_fitted_rows.py [--repeats 30] [--T 4] [--gle] [--json out.json]

Target (issue 86): each row's package / lean <= 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numba
import numpy as np

from vpintegrator.clock import meter
from vpintegrator.rollout.engine import rollout
from vpintegrator.studies.memory.ladder import (fit_split, fitted_steps, heldout, known_steps, make_data,
                                                observed_system)
from vpintegrator.studies.memory.plan import H, HORIZONS

K = int(round(max(HORIZONS) / H))
#: the lean loop's states must agree with the package's to this (relative to the largest state)
ROUND_OFF = 1e-10


# --------------------------------------------------------------------------- the lean loops (a user's)


@numba.njit
def lean_window(window, n, c, W, P, powers, out):
    """x_{j+T} = c + sum_rows window_row W_row + sum_f P_f prod_b x_{j+T-1,b}^powers_fb, out (T + n, k)."""
    T, k = window.shape
    F = P.shape[0]
    mono = np.empty(F)
    out[:T] = window
    for j in range(n):
        for f in range(F):
            v = 1.0
            for b in range(k):
                for _ in range(powers[f, b]):
                    v *= out[j + T - 1, b]
            mono[f] = v
        for a in range(k):
            s = c[a]
            for t in range(T):
                for b in range(k):
                    s += out[j + t, b] * W[t * k + b, a]
            for f in range(F):
                s += mono[f] * P[f, a]
            out[j + T, a] = s


@numba.njit
def lean_dmd(window, n, mu, Vr, e, At, f, G, out):
    """Delay DMD in its reduced coordinates: a = Vr (h - mu); x = f + G a, a <- e + At a; out (T + n, k)."""
    T, k = window.shape
    r = Vr.shape[0]
    a = np.zeros(r)
    nxt = np.empty(r)
    for i in range(r):
        for t in range(T):
            for b in range(k):
                a[i] += Vr[i, t * k + b] * (window[t, b] - mu[t * k + b])
    out[:T] = window
    for j in range(n):
        for b in range(k):
            v = f[b]
            for i in range(r):
                v += G[b, i] * a[i]
            out[T + j, b] = v
        for i in range(r):
            v = e[i]
            for l in range(r):
                v += At[i, l] * a[l]
            nxt[i] = v
        a[:] = nxt


@numba.njit
def lean_gle(q, p, n, h, a, z, out):
    """The particle's GLE, velocity Verlet + trapezoidal memory with the kernel a sum of exponentials (the memory
    sum of each term carried: U <- z (U + p)), out (n + 1, 2) from the particle at rest in its bath."""
    K0 = a.sum().real
    hh = 0.5 * h
    U = 0.5 * z * p
    mem = 0.0
    out[0, 0], out[0, 1] = q, p
    for j in range(n):
        ph = p + hh * (q - q * q * q - mem)
        q = q + h * ph
        acc = 0.0
        for t in range(a.size):
            acc += (a[t] * U[t]).real
        acc *= h
        p = (ph + hh * (q - q * q * q - acc)) / (1.0 + hh * hh * K0)
        mem = acc + hh * K0 * p
        for t in range(a.size):
            U[t] = z[t] * (U[t] + p)
        out[j + 1, 0], out[j + 1, 1] = q, p


@numba.njit
def _theta_xi(x, powers, Xi, f):
    """f = Θ(x) Ξ, Θ the monomials prod_b x_b^powers_fb."""
    f[:] = 0.0
    for r in range(powers.shape[0]):
        v = 1.0
        for b in range(x.size):
            for _ in range(powers[r, b]):
                v *= x[b]
        for i in range(f.size):
            f[i] += v * Xi[r, i]


@numba.njit
def lean_sindy_rk4(z, n, h, powers, Xi, out):
    """RK4 on the delay vector z (T k,) under ż = Θ(z) Ξ; out (T + n, k): z's T blocks, then its newest block."""
    d, k = z.size, out.shape[1]
    T = d // k
    k1, k2, k3, k4, x = np.empty(d), np.empty(d), np.empty(d), np.empty(d), np.empty(d)
    for t in range(T):
        out[t] = z[t * k:(t + 1) * k]
    for j in range(n):
        _theta_xi(z, powers, Xi, k1)
        for i in range(d):
            x[i] = z[i] + 0.5 * h * k1[i]
        _theta_xi(x, powers, Xi, k2)
        for i in range(d):
            x[i] = z[i] + 0.5 * h * k2[i]
        _theta_xi(x, powers, Xi, k3)
        for i in range(d):
            x[i] = z[i] + h * k3[i]
        _theta_xi(x, powers, Xi, k4)
        for i in range(d):
            z[i] += h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i])
        out[T + j] = z[d - k:]


def lean_of(label: str, step: Any, window: np.ndarray) -> Callable[[], np.ndarray]:
    """The lean call of one row, reading its fit from the package's object; returns its states (K + 1, k)."""
    w = np.ascontiguousarray(window[0])
    T, k = w.shape
    fit = getattr(step, "fit", None)
    if label.startswith("delay_dmd"):
        return lambda: _run(lean_dmd, (w, K + 1 - T, fit.mu, fit.Vr, fit.e, fit.At, fit.f, fit.G), (K + 1, k))
    if label.startswith(("arx", "narx")):
        return lambda: _run(lean_window, (w, K + 1 - T, fit.c, fit.W, fit.P, fit.powers), (K + 1, k))
    if label == "delay_sindy+rk4":
        field = step.field  # the chosen fit: its library's monomials (nonzero features only) and Ξ
        lib = getattr(field, "library", None)
        if lib is None or lib.sin or lib.cos or lib.exp:
            raise SystemExit(f"{label}: no polynomial fit to evaluate (a library with sin/cos/exp, or no fit)")
        powers = np.ascontiguousarray(lib.powers, dtype=np.int64)
        Xi = np.ascontiguousarray(field.coefficients)
        return lambda: _run(lean_sindy_rk4, (w.ravel().copy(), K + 1 - T, H, powers, Xi), (K + 1, k))
    if label == "gle":
        if step._soe is None:
            raise SystemExit("gle: the row runs the direct quadrature at this N (no sum of exponentials fits); "
                             "give another --bath-n")
        a, z, _ = step._soe  # the kernel's sum of exponentials, fitted once by the row's start
        return lambda: _run(lean_gle, (float(w[0, 0]), float(w[0, 1]), K, H, a, z), (K + 1, 2))
    raise SystemExit(f"no lean loop for {label}")


def _run(loop: Callable[..., None], args: tuple, shape: tuple[int, int]) -> np.ndarray:
    out = np.empty(shape)
    loop(*args, out)
    return out


# --------------------------------------------------------------------------- the rows


def rows_of(args: argparse.Namespace, tmp: Path) -> dict[str, tuple[Any, np.ndarray]]:
    """``{label: (step map, window (1, T, k))}``: the study's fitted rows (and the GLE) and one held-out window."""
    train = make_data(tmp, "coupled_oscillator", None, args.n_train, 20.0)
    full, obs, _, ref = heldout(train, "coupled_oscillator", None, 1)
    system = observed_system(full, obs, train)
    steps = fitted_steps(system, train, fit_split(train, args.n_train), args.T)
    out = {label: (step, ref[:, :step.seq_len]) for label, step in steps.items() if label in args.rows}
    if args.gle:
        bath = make_data(tmp, "kac_zwanzig", args.bath_n, 4, 20.0)
        full, obs, _, ref = heldout(bath, "kac_zwanzig", args.bath_n, 1)
        gle = known_steps("kac_zwanzig", observed_system(full, obs, bath), bath)["gle"]
        out["gle"] = (gle, ref[:, :1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--T", type=int, default=4)
    ap.add_argument("--n-train", type=int, default=8)
    ap.add_argument("--rows", default="arx,narx,delay_dmd,delay_sindy+rk4")
    ap.add_argument("--gle", action="store_true", help="also the hidden bath's gle row (kac_zwanzig, --bath-n)")
    ap.add_argument("--bath-n", type=int, default=100)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.rows = args.rows.split(",")
    with tempfile.TemporaryDirectory() as tmp:  # the rows read their data when they start: kept to the end
        run(args, rows_of(args, Path(tmp)))


def run(args: argparse.Namespace, rows: dict[str, tuple[Any, np.ndarray]]) -> None:
    calls: dict[tuple[str, str], Callable[[], object]] = {}
    diffs = {}
    for label, (step, window) in rows.items():
        y = rollout(step, window, H, K).y[0]  # fits the row (once)
        lean = lean_of(label, step, window)
        diffs[label] = float(np.max(np.abs(lean() - y)) / np.max(np.abs(y)))

        def steps(s: Any = step, w: np.ndarray = window) -> float:
            return float(rollout(s, w, H, K).meta["seconds"])

        def start_steps(s: Any = step, w: np.ndarray = window) -> float:
            meta = rollout(s, w, H, K).meta
            return float(meta["seconds"]) + float(meta["setup_seconds"])

        calls[(label, "lean")] = lean
        calls[(label, "steps")] = steps
        calls[(label, "start+steps")] = start_steps
        calls[(label, "call")] = lambda s=step, w=window: rollout(s, w, H, K)
    costs = meter(calls, repeats=args.repeats)
    load = os.getloadavg()
    print(f"batch 1, one window to t = {max(HORIZONS):g} ({K} steps at h = {H:g}); thread CPU, min over "
          f"{args.repeats} interleaved rounds; {os.cpu_count()} CPUs, load average {load[0]:.1f}")
    print(f"{'row':<14} {'max rel diff':>12} {'lean us':>9} {'steps us':>9} {'start+st':>9} {'call us':>9} "
          f"{'steps/lean':>10} {'start+st/lean':>13} {'call/lean':>9}")
    report = []
    for label in rows:
        c = {kind: costs[(label, kind)].seconds for kind in ("lean", "steps", "start+steps", "call")}
        print(f"{label:<14} {diffs[label]:>12.1e} {1e6 * c['lean']:>9.1f} {1e6 * c['steps']:>9.1f} "
              f"{1e6 * c['start+steps']:>9.1f} {1e6 * c['call']:>9.1f} {c['steps'] / c['lean']:>10.2f} "
              f"{c['start+steps'] / c['lean']:>13.2f} {c['call'] / c['lean']:>9.2f}")
        report.append({"row": label, "max_rel_diff": diffs[label], **{f"{k}_seconds": v for k, v in c.items()},
                       "setup_lean": costs[(label, "lean")].setup_seconds})
    bad = [label for label, d in diffs.items() if not d <= ROUND_OFF]
    if bad:
        raise SystemExit(f"the lean loop and the package disagree beyond {ROUND_OFF:g} (relative) on {', '.join(bad)}")
    if args.json:
        args.json.write_text(json.dumps({"steps": K, "repeats": args.repeats, "load_average": load,
                                         "rows": report}, indent=1))


if __name__ == "__main__":
    main()
