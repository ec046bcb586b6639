"""Compiled (numba) single-trajectory integrators vs the NumPy path, batch 1, one thread, steps only.

Prints, per method on the rigid body (h = 0.2, the paper's cost table): µs/step and seconds for 250 000
steps compiled, the NumPy path (``integrate``) measured in the same run on a shorter horizon and
extrapolated, their ratio and the issue-13 target; then each kernel's first-call compile time (fresh
numba cache in a temporary directory, one subprocess) and cached-load time (a second subprocess on that
cache). Usage::

    python scripts/bench_compiled.py [--steps 250000] [--numpy-seconds 1.0] [--no-compile]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

TARGETS = {"implicit_midpoint": 1.25, "gauss_legendre4": 1.5, "rk4": 1.5, "splitting": 1.5}
JULIA = {"implicit_midpoint": 2.51}


def _methods(system) -> list[str]:
    """Every registered method that compiles on ``system``, plus Gauss-Legendre 6 when it resolves."""
    from vpintegrator.compiled import compiled_stepper
    from vpintegrator.integrators import list_integrators

    names = list(list_integrators())
    for extra in ("gauss_legendre6",):
        if extra not in names:
            names.append(extra)
    out = []
    for name in names:
        try:
            if compiled_stepper(system, name, 0.2) is not None:
                out.append(name)
        except Exception:  # not applicable to this system, or not registered
            continue
    return out


def _first_call_times(methods: list[str]) -> dict[str, float]:
    """Seconds of each method's first run (compile or cache load), in this fresh process."""
    from vpintegrator.compiled import compiled_stepper
    from vpintegrator.systems import get_system

    system = get_system("rigid_body")
    y0 = np.array(system.default_y0)
    out = {}
    for name in methods:
        t = time.perf_counter()
        compiled_stepper(system, name, 0.2).run(y0, 2)
        out[name] = time.perf_counter() - t
    return out


def _compile_report(methods: list[str]) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        code = ("import json, sys; sys.path.insert(0, %r); from bench_compiled import _first_call_times; "
                "print(json.dumps(_first_call_times(%r)))") % (os.path.dirname(os.path.abspath(__file__)), methods)
        runs = []
        for _ in range(2):  # cold cache, then warm cache
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            runs.append((json.loads(res.stdout.strip().splitlines()[-1]), time.perf_counter() - t))
    cold, warm = runs[0][0], runs[1][0]
    report = {name: (cold[name], warm[name]) for name in methods}
    report["(whole process)"] = (runs[0][1], runs[1][1])
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=250_000)
    parser.add_argument("--numpy-seconds", type=float, default=1.0, help="time budget per NumPy measurement")
    parser.add_argument("--no-compile", action="store_true", help="skip the compile/cache-load subprocesses")
    args = parser.parse_args(argv)

    import vpintegrator as vp
    from vpintegrator.compiled import available, compiled_stepper
    from vpintegrator.systems import get_system

    if not available():
        print("numba is not available: nothing compiled to measure")
        return
    system = get_system("rigid_body")
    y0 = np.array(system.default_y0)
    h, n = 0.2, args.steps
    methods = _methods(system)
    print(f"rigid body, h = {h}, batch 1, one thread; compiled: {n} steps; NumPy: integrate(), shorter horizon")
    head = f"{'method':<28}{'µs/step':>9}{'s/250k':>9}{'target':>8}{'NumPy µs':>10}{'NumPy s/250k':>13}{'ratio':>8}"
    print(head)
    print("-" * len(head))
    for name in methods:
        stepper = compiled_stepper(system, name, h)
        try:
            stepper.run(y0, n)  # compile or load, and check the method survives the horizon
        except vp.VPIntegratorError as exc:
            print(f"{name:<28}not timed: {str(exc)[:80]}")
            continue
        best = np.inf
        for _ in range(3):
            t = time.perf_counter()
            stepper.run(y0, n)
            best = min(best, time.perf_counter() - t)
        us = best / n * 1e6
        # NumPy: grow the horizon until one run takes about --numpy-seconds
        m, t_np = 50, 0.0
        while True:
            t = time.perf_counter()
            vp.integrate(system, y0, h, m, method=name)
            t_np = time.perf_counter() - t
            if t_np > 0.25 * args.numpy_seconds or m >= n:
                break
            m *= 4
        us_np = t_np / m * 1e6
        target = TARGETS.get(name)
        tgt = f"{target:.2f}" if target else "-"
        flag = "" if target is None or us * 250_000e-6 <= target else "  MISSED"
        print(f"{name:<28}{us:>9.3f}{us * 0.25:>9.3f}{tgt:>8}{us_np:>10.1f}{us_np * 0.25:>13.1f}"
              f"{us_np / us:>7.0f}×{flag}")
    print(f"(paper, Julia: implicit midpoint {JULIA['implicit_midpoint']} s for 250 000 steps)")
    if args.no_compile:
        return
    print("\nfirst call per kernel (subprocesses, fresh numba cache): compile, then cached load")
    print(f"{'method':<28}{'compile s':>11}{'cached s':>10}")
    for name, (cold, warm) in _compile_report(methods).items():
        print(f"{name:<28}{cold:>11.3f}{warm:>10.3f}")
    print("(compile times include the shared system kernels for the first method listed; whole process "
          "= interpreter start-up + imports + every first call)")


if __name__ == "__main__":
    main()
