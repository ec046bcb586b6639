"""Benchmark vp-gen (whole process) against diffrax (``vmap`` over a jitted Dopri8 solve), same problem.

The problem: the rigid body (inertia (2, 1, 2/3)), the ``rigid_body`` spec's sphere initial conditions,
t in [0, 20], output every 0.2 (101 states), rtol = atol = 1e-12 per trajectory, float64; N = 2*10^4 and
2*10^5 trajectories.

* vp-gen: ``vp-gen rigid_body --n-traj N --t-end 20 --dt 0.2 --rtol 1e-12 --atol 1e-12`` in a fresh process
  (start-up, sampling, integration, invariant drift, compressed HDF5 file: everything), with every core
  (the default ``--workers``) and with ``--workers 1``, for each ``--compression`` (gzip, the default, lzf
  and none); best of ``--repeat``. The processes run in this environment as it is; ``--pyc`` gives them a
  bytecode cache (``PYTHONPYCACHEPREFIX`` in a temporary folder, filled by the warm-up run), as an
  installed package has, where ``PYTHONDONTWRITEBYTECODE`` would otherwise recompile the package's
  sources in every process.
* diffrax (when ``jax`` and ``diffrax`` import): ``jax.jit(jax.vmap(solve))`` with ``diffrax.Dopri8``,
  ``PIDController(rtol=1e-12, atol=1e-12)``, ``SaveAt(ts=...)``, on the same initial conditions; the
  first call (compilation + solve) and the solve alone (a second call, ``block_until_ready``) are timed
  in this process; nothing is written. Each trajectory has its own step size under ``vmap`` (diffrax's
  error norm is per trajectory); the batch runs until the slowest trajectory is done.

Every ratio is of CPU time (vp-gen: user + system time of the process and its workers, from the parent's
``getrusage``; diffrax: ``time.process_time`` around the call, every thread), which a loaded machine does not bend;
wall times are printed beside. Prints the times, the ratios diffrax solve / vp-gen whole process, the same
without vp-gen's start-up (a 1-trajectory process: interpreter, imports, the file), the load average before and
after, and max |y_vp-gen - y_diffrax| as a check that both solved the same problem.

Run: ``python scripts/bench_gen_diffrax.py`` (``pip install jax diffrax`` for the diffrax half; a few
minutes at 2*10^5 on 2 cores). Shared machine: every ratio compares timings taken in the same run.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import h5py
import numpy as np

from vpintegrator.data import load_spec
from vpintegrator.systems import get_system, sample_initial_conditions

VP_GEN = str(Path(sys.executable).parent / "vp-gen")
T_END, DT, TOL = 20.0, 0.2, 1e-12


_ENV: dict[str, str | None] = {"OMP_NUM_THREADS": "1"}  # the vp-gen processes' environment over this one's (``--pyc`` adds to it)


def _vp_gen(n: int, out: str, workers: int | None, compression: str = "gzip") -> tuple[float, float]:
    """(wall s, CPU s) of a whole vp-gen process (its CPU: user + system of it and its workers)."""
    args = [VP_GEN, "rigid_body", "--n-traj", str(n), "--t-end", str(T_END), "--dt", str(DT), "--rtol", str(TOL),
            "--atol", str(TOL), "--out", out, "--overwrite", "--quiet", "--compression", compression]
    if workers is not None:
        args += ["--workers", str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {k: v for k, v in {**os.environ, **_ENV}.items() if v is not None}
    subprocess.run(args, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _initial_conditions(n: int) -> np.ndarray:
    spec = load_spec("rigid_body", n_traj=n, t_end=T_END, dt=DT)
    system = get_system(spec.system, **spec.params)
    return sample_initial_conditions(system, spec.sampler, n, np.random.default_rng(spec.seed), **spec.sampler_args)


def _diffrax(y0: np.ndarray, ts: np.ndarray):
    """(first call CPU s, solve CPU s, solve wall s, y) or None without jax/diffrax; CPU: every thread of this
    process (XLA's included)."""
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        import diffrax
        import jax.numpy as jnp
    except ImportError:
        return None
    a, b, c = get_system("rigid_body").coefficients

    def field(t, z, args):
        return jnp.stack([a * z[1] * z[2], b * z[0] * z[2], c * z[0] * z[1]])

    term = diffrax.ODETerm(field)
    solver = diffrax.Dopri8()
    ctrl = diffrax.PIDController(rtol=TOL, atol=TOL)
    save = diffrax.SaveAt(ts=jnp.asarray(ts))

    def solve(z0):
        sol = diffrax.diffeqsolve(term, solver, t0=0.0, t1=float(ts[-1]), dt0=None, y0=z0, saveat=save,
                                  stepsize_controller=ctrl, max_steps=1_000_000)
        return sol.ys

    batched = jax.jit(jax.vmap(solve))
    z0 = jnp.asarray(y0)
    start = time.process_time()
    batched(z0).block_until_ready()
    first = time.process_time() - start
    start, wall = time.process_time(), time.perf_counter()
    ys = batched(z0).block_until_ready()
    return first, time.process_time() - start, time.perf_counter() - wall, np.asarray(ys)


@click.command()
@click.option("--sizes", default="20000,200000", show_default=True)
@click.option("--repeat", default=2, show_default=True)
@click.option("--compression", "compressions", default="gzip,lzf,none", show_default=True,
              help="vp-gen's /y filters to time (gzip is its default)")
@click.option("--pyc", is_flag=True, help="give the vp-gen processes a bytecode cache (as an installed package)")
def main(sizes: str, repeat: int, compressions: str, pyc: bool) -> None:
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    bytecode = "cached (--pyc)" if pyc else ("recompiled in every process (PYTHONDONTWRITEBYTECODE)"
                                             if os.environ.get("PYTHONDONTWRITEBYTECODE") else "as Python caches it")
    print(f"rigid body, t in [0, {T_END:g}], output every {DT:g}, rtol = atol = {TOL:g}; {os.cpu_count()} CPUs; "
          f"vp-gen's bytecode: {bytecode}; load average before: {load()}")
    ts = np.arange(int(round(T_END / DT)) + 1) * DT
    with tempfile.TemporaryDirectory() as tmp:
        if pyc:
            _ENV.update(PYTHONDONTWRITEBYTECODE=None, PYTHONPYCACHEPREFIX=f"{tmp}/pycache")
        _vp_gen(10, f"{tmp}/warm.h5", None)  # numba's cache
        for n in (int(s) for s in sizes.split(",")):
            out = f"{tmp}/vp_{n}.h5"
            runs = {}
            for comp in compressions.split(","):
                every = min((_vp_gen(n, out, None, comp) for _ in range(repeat)), key=lambda r: r[1])
                one = min((_vp_gen(n, out, 1, comp) for _ in range(repeat)), key=lambda r: r[1])
                runs[comp] = (every, one)
                print(f"N = {n}, --compression {comp}: vp-gen whole process CPU {every[1]:.2f} s (every core; wall "
                      f"{every[0]:.2f} s), CPU {one[1]:.2f} s (--workers 1; wall {one[0]:.2f} s)", flush=True)
            empty = min((_vp_gen(1, f"{tmp}/one.h5", 1) for _ in range(repeat)), key=lambda r: r[1])
            print(f"  a 1-trajectory process: CPU {empty[1]:.2f} s (start-up: interpreter, imports, the file)", flush=True)
            res = _diffrax(_initial_conditions(n), ts)
            if res is None:
                print("  diffrax: jax/diffrax not importable; pip install jax diffrax")
                continue
            first, solve, solve_wall, ys = res
            with h5py.File(out, "r") as f:
                diff = float(np.max(np.abs(f["y"][:] - ys)))
            print(f"  diffrax vmap Dopri8: first call CPU {first:.2f} s (compile + solve), solve alone CPU {solve:.2f} s "
                  f"(wall {solve_wall:.2f} s); max |difference| {diff:.1e}", flush=True)
            for comp, (every, one) in runs.items():
                print(f"  CPU ratio diffrax solve / vp-gen whole process, --compression {comp}: {solve / every[1]:.2f}x "
                      f"(every core), {solve / one[1]:.2f}x (--workers 1); without vp-gen's start-up: "
                      f"{solve / max(one[1] - empty[1], 1e-9):.2f}x; diffrax with compilation: {first / one[1]:.2f}x",
                      flush=True)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
