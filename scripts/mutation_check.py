"""Mutation check of the parity tests: break a method by 1e-6 at its definition, in a scratch copy, and see them fail.

Each mutation (``MUTATIONS``) replaces one piece of text of one file of ``vpintegrator/`` (a coefficient, a weight,
a step fraction of one path: the NumPy step of ``integrators/``, the generic numba kernels of ``compiled/kernels.py``
and ``compiled/newton.py``, the lean loops of ``compiled/lean.py``, the rotation loop of ``compiled/lie_poisson.py``,
the lattices' array loops of ``compiled/lattice.py``, the one Verlet loop's particle + chain force of
``compiled/bath.py``)
by the same text changed by a relative 1e-6, in a copy of the repository (``vpintegrator/``, ``tests/``,
``pyproject.toml``) in a temporary directory, and runs the parity tests of the methods that text defines
(``tests/test_parity.py``, every path of each of those methods; or the tests a mutation names, for a system the
parity tests do not step) there. A mutation is *caught* when they fail.
The unbroken copy runs the same tests first: they must pass, else the check means nothing (exit 2).

Prints a table (mutation -> caught / SURVIVED, failed tests of the selected ones, seconds) and exits 0 only when
every mutation was caught; 1 when one survived; 2 when the baseline fails or a mutation's text is not found exactly
once (the code moved: update ``MUTATIONS``). Each mutated run recompiles the numba kernels it uses (every kernel's
cache key holds the content hash of every compiled file): 3-9 minutes per mutation of compiled code on a
loaded 2-core machine, ~5 s for one of the NumPy step. Usage::

    python scripts/mutation_check.py                  # every mutation
    python scripts/mutation_check.py --list           # their names
    python scripts/mutation_check.py --only lean_rk4_weight --only coefficients_gl4
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARITY = "tests/test_parity.py"
#: the particle-bath steppers against Verlet written out by hand (tests/test_bath.py)
BIT_FOR_BIT = "tests/test_bath.py::test_compiled_verlet_is_verlet_by_hand_bit_for_bit"
COPIED = ("vpintegrator", "tests", "pyproject.toml")


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` (found exactly once in ``file``) by ``new``; the parity tests of ``methods`` (or the tests
    ``tests``, pytest node ids, when given) must then fail."""

    name: str
    file: str
    old: str
    new: str
    methods: tuple[str, ...]
    tests: tuple[str, ...] = ()


MUTATIONS = (
    # the NumPy step (vpintegrator/integrators/): also every path reading the method's own coefficients
    Mutation("numpy_rk4_weight", "vpintegrator/integrators/explicit.py",
             "return y + (h / scale) * acc", "return y + (h / (scale * 1.000001)) * acc", ("rk4",)),
    # the one definition of the coefficients (integrators/coefficients.py), read by every path
    Mutation("coefficients_gl4", "vpintegrator/integrators/coefficients.py",
             "a = np.array([[0.25, ", "a = np.array([[0.25000025, ", ("gauss_legendre4",)),
    Mutation("coefficients_gauss_weights", "vpintegrator/integrators/coefficients.py",
             "c, b = 0.5 * (x + 1.0), 0.5 * w", "c, b = 0.5 * (x + 1.0), 0.5000005 * w", ("gauss_legendre6",)),
    Mutation("numpy_midpoint", "vpintegrator/integrators/implicit.py",
             "mid = 0.5 * (ya + y1a)", "mid = 0.5000005 * (ya + y1a)", ("implicit_midpoint",)),
    Mutation("numpy_shear_splitting_step", "vpintegrator/integrators/splitting.py",
             "return [(i, c * h) for i, c in shear_sequence(STRANG, d)]",
             "return [(i, c * 1.000001 * h) for i, c in shear_sequence(STRANG, d)]", ("splitting",)),
    Mutation("numpy_stormer_verlet_kick", "vpintegrator/integrators/splitting.py",
             "p1 = p_half - 0.5 * h * system", "p1 = p_half - 0.5000005 * h * system", ("stormer_verlet",)),
    Mutation("coefficients_blanes_moan", "vpintegrator/integrators/coefficients.py",
             "_BM_A = (0.0792036964311957,", "_BM_A = (0.0792037756348921,", ("splitting_blanes_moan4",)),
    Mutation("coefficients_yoshida6", "vpintegrator/integrators/coefficients.py",
             "_Y6_W = (0.784513610477560,", "_Y6_W = (0.784514394991170,", ("implicit_midpoint_y6", "splitting_y6")),
    Mutation("numpy_rotation_angle", "vpintegrator/integrators/lie_poisson.py",
             "    wt = t * rate\n", "    wt = t * rate * 1.000001\n", ("rotation_splitting",)),
    # the generic numba kernels (compiled/kernels.py, compiled/newton.py)
    Mutation("kernels_rk4_weight", "vpintegrator/compiled/kernels.py",
             "    w = h / scale\n    for q in range(d):", "    w = h / (scale * 1.000001)\n    for q in range(d):",
             ("rk4",)),
    Mutation("kernels_midpoint", "vpintegrator/compiled/lean.py",  # the generic loops' step: lean's array rule
             "mid[i] = 0.5 * (y[i] + y1[i])", "mid[i] = 0.5000005 * (y[i] + y1[i])", ("implicit_midpoint",)),
    Mutation("kernels_gauss_weight", "vpintegrator/compiled/newton.py",
             "acc += b[j] * ws[2 * s + j, k]", "acc += b[j] * 1.000001 * ws[2 * s + j, k]", ("gauss_legendre4",)),
    Mutation("kernels_shear_sequence", "vpintegrator/compiled/kernels.py",
             "y1[comp] += coefs[k] * f[comp]", "y1[comp] += coefs[k] * 1.000001 * f[comp]",
             ("splitting_mclachlan2", "splitting")),
    Mutation("kernels_composition_substep", "vpintegrator/compiled/kernels.py",
             # run_composition's line (12 spaces: run_batch's has 20)
             "\n            st = step_any(base, kid, p, u, gammas[g] * h, v,",
             "\n            st = step_any(base, kid, p, u, gammas[g] * 1.000001 * h, v,",
             ("implicit_midpoint_tj4",)),
    Mutation("kernels_rotation_angle", "vpintegrator/compiled/lie_poisson.py",
             "ts[k] = ts[k] * w[axes[k]]", "ts[k] = ts[k] * 1.000001 * w[axes[k]]", ("rotation_splitting",)),
    # the lean loops (compiled/lean.py)
    Mutation("lean_rk4_weight", "vpintegrator/compiled/lean.py",
             "    w = h / scale\n    z = y", "    w = h / (scale * 1.000001)\n    z = y", ("rk4",)),
    Mutation("lean_midpoint", "vpintegrator/compiled/lean.py",
             "m = tuple_setitem(m, i, 0.5 * (y[i] + z[i]))", "m = tuple_setitem(m, i, 0.5000005 * (y[i] + z[i]))",
             ("implicit_midpoint",)),
    Mutation("lean_gauss_weight", "vpintegrator/compiled/lean.py",
             "z = _add(y, stage_rows(h, (b,),", "z = _add(y, stage_rows(h * 1.000001, (b,),", ("gauss_legendre4",)),
    Mutation("lean_shear_sequence", "vpintegrator/compiled/lean.py",
             "z = shear(pp, z, comps[q], coefs[q])", "z = shear(pp, z, comps[q], coefs[q] * 1.000001)",
             ("splitting_mclachlan2", "splitting")),
    Mutation("lean_stormer_verlet_kick", "vpintegrator/compiled/lean.py",
             "v0 = x[2] - c * g[0]", "v0 = x[2] - c * 1.000001 * g[0]", ("stormer_verlet",)),
    Mutation("lean_composition_substep", "vpintegrator/compiled/lean.py",
             "hs = gammas[j] * h if gammas.shape[0] else h", "hs = gammas[j] * 1.000001 * h if gammas.shape[0] else h",
             ("stormer_verlet_tj4",)),  # the one Verlet loop's sub-step (a tuple state and an array state)
    Mutation("lean_separable_midpoint", "vpintegrator/compiled/lean.py",
             "P0 = y[2] - c * g0", "P0 = y[2] - c * 1.000001 * g0", ("implicit_midpoint",)),
    Mutation("lean_shear_folded_coefficient", "vpintegrator/compiled/lean.py",  # the last component's shear
             "z[i] + field(_scaled(c, pp), z)[i])\n", "z[i] + field(_scaled(c * 1.000001, pp), z)[i])\n",
             ("splitting_mclachlan2",)),
    # the lattices' array loops (compiled/lattice.py)
    Mutation("lattice_fpu_bond_force", "vpintegrator/compiled/lattice.py",
             "return r + par[0] * r * r * r", "return r + par[0] * 1.000001 * r * r * r", ("stormer_verlet",)),
    Mutation("lattice_toda_bond_force", "vpintegrator/compiled/lattice.py",
             "return -par[0] * math.exp(-r)", "return -par[0] * 1.000001 * math.exp(-r)", ("stormer_verlet",)),
    Mutation("lattice_midpoint", "vpintegrator/compiled/lattice.py",  # the lattice's rule of the one midpoint step
             "y[i] = 2.0 * big[i] - y[i]", "y[i] = 2.000002 * big[i] - y[i]", ("implicit_midpoint",)),
    Mutation("lattice_midpoint_residual", "vpintegrator/compiled/lattice.py",
             "rhs[i] = big[i] - y[i] - 0.5 * h * y[n + i]", "rhs[i] = big[i] - y[i] - 0.5000005 * h * y[n + i]",
             ("implicit_midpoint",), ("tests/test_midpoint_forms.py",)),
    Mutation("lattice_exponential_kick", "vpintegrator/compiled/lattice.py",
             "p[i] = p[i] - c * (d[i] - d[i + 1])", "p[i] = p[i] - c * 1.000001 * (d[i] - d[i + 1])",
             ("exponential_splitting",)),
    Mutation("lattice_verlet_drift", "vpintegrator/compiled/lattice.py",  # the one Verlet loop's array state ops
             "y[i] = y[i] + hs * v", "y[i] = y[i] + hs * 1.000001 * v", ("stormer_verlet",)),
    Mutation("lattice_verlet_closing_kick", "vpintegrator/compiled/lattice.py",
             "y[n + i] = y[n + i] - c * f[i]", "y[n + i] = y[n + i] - c * 1.000001 * f[i]", ("stormer_verlet",)),
    Mutation("bath_chain_bond_force", "vpintegrator/compiled/bath.py",  # the particle + chain's force in that loop
             "d = r + beta * r * r * r\n        g[i]", "d = r + beta * 1.000001 * r * r * r\n        g[i]",
             ("stormer_verlet",), (BIT_FOR_BIT,)),
    Mutation("lattice_stored_channels", "vpintegrator/compiled/lattice.py",
             "row[i] = y[cols[i]]", "row[i] = 1.000001 * y[cols[i]]", ("stormer_verlet",), (BIT_FOR_BIT,)),
    Mutation("lattice_exponential_affine_part", "vpintegrator/compiled/lattice.py",
             "d[b] = d[b] - d0 - kappa * (q[b] - q[b - 1])", "d[b] = d[b] - d0 - kappa * 1.000001 * (q[b] - q[b - 1])",
             ("exponential_splitting",)),
)
BY_NAME = {m.name: m for m in MUTATIONS}


def copy_repository(dest: Path) -> Path:
    """The package, the tests and pyproject.toml copied into ``dest`` (times kept: cached kernels stay valid)."""
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(".pytest_cache"), symlinks=True)
        else:
            shutil.copy2(src, dest / name)
    return dest


def parity_ids(repo: Path, methods: set[str]) -> list[str]:
    """The node ids of the parity tests of ``methods`` (every system, every path), collected in ``repo``."""
    out = _pytest(repo, ["--collect-only", PARITY])
    ids = []
    for line in out.stdout.splitlines():
        match = re.fullmatch(r"(\S+::test_every_path_matches_the_reference)\[([^-\]]+)-([^-\]]+)-([^-\]]+)\]", line.strip())
        if match and match.group(3) in methods:
            ids.append(line.strip())
    return ids


def _pytest(repo: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=repo, env=env,
                          capture_output=True, text=True)


def _failed(out: subprocess.CompletedProcess) -> int:
    match = re.search(r"(\d+) failed", out.stdout)
    return int(match.group(1)) if match else 0


def misplaced(mutations: list[Mutation], repo: Path = ROOT) -> list[str]:
    """One line per mutation whose text is not found exactly once in its file of ``repo`` (the code moved)."""
    out = []
    for m in mutations:
        count = (repo / m.file).read_text().count(m.old) if (repo / m.file).is_file() else 0
        if count != 1:
            out.append(f"mutation {m.name}: {m.old.strip()!r} occurs {count} times in {m.file} (expected once): the "
                       "code moved; update MUTATIONS in scripts/mutation_check.py")
    return out


def apply(repo: Path, mutation: Mutation) -> str:
    """Write the mutation into ``repo``; returns the file's original text."""
    path = repo / mutation.file
    text = path.read_text()
    path.write_text(text.replace(mutation.old, mutation.new))
    return text


def run(mutations: list[Mutation], keep: bool = False) -> int:
    errors = misplaced(mutations)  # every text is there before anything runs
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="vp_mutation_"))
    try:
        repo = copy_repository(scratch / "repo")
        ids = {m.name: list(m.tests) or parity_ids(repo, set(m.methods)) for m in mutations}
        for m in mutations:
            if not ids[m.name]:
                print(f"mutation {m.name}: no parity test of {', '.join(m.methods)} collected", file=sys.stderr)
                return 2
        every = sorted({i for v in ids.values() for i in v})
        tic = time.perf_counter()
        base = _pytest(repo, every)
        print(f"baseline (unbroken copy): {len(every)} parity tests, {'pass' if base.returncode == 0 else 'FAIL'} "
              f"({time.perf_counter() - tic:.0f} s)", flush=True)
        if base.returncode != 0:
            print(base.stdout[-3000:], file=sys.stderr)
            return 2
        rows = []
        width = max(len(m.name) for m in mutations)
        print(f"{'mutation':{width}s}  {'file':38s}  result    failed/run  seconds", flush=True)
        for m in mutations:
            original = apply(repo, m)
            tic = time.perf_counter()
            try:
                out = _pytest(repo, ids[m.name])
            finally:
                (repo / m.file).write_text(original)
            caught = out.returncode == 1 and _failed(out) > 0
            if out.returncode not in (0, 1):
                print(out.stdout[-2000:] + out.stderr[-2000:], file=sys.stderr)
            rows.append(caught)
            print(f"{m.name:{width}s}  {m.file.removeprefix('vpintegrator/'):38s}  "
                  f"{'caught' if caught else 'SURVIVED':8s}  {_failed(out):4d}/{len(ids[m.name]):<5d}  "
                  f"{time.perf_counter() - tic:7.0f}", flush=True)
        print(f"{sum(rows)} of {len(rows)} mutations caught by their tests")
        return 0 if all(rows) else 1
    finally:
        if keep:
            print(f"scratch copy kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(BY_NAME), help="run this mutation (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the scratch copy (finally)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:32s} {m.file:42s} {', '.join(m.methods)}")
        return 0
    return run([BY_NAME[n] for n in args.only] if args.only else list(MUTATIONS), keep=args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
