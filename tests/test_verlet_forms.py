"""Every compiled path of Stormer-Verlet against one plain Verlet written here.

The compiled paths: the one Verlet loop (``compiled.lean.run_verlet``) on a tuple state (the coupled oscillator:
batch 1, its loop over the rows of a batch, a composition, a stride ``every``) and on an array state (the lattices,
Toda and FPU-beta, each on a ring and with fixed ends; PSD-Galerkin's reduced lattice; the particle + chain), and
the harmonic bath's fused loop (``compiled.bath.kz_verlet``). The reference knows nothing of them: kick-drift-kick
``p -= h/2 V'(q); q += h T'(p); p -= h/2 V'(q)`` per (sub)step in NumPy, on the system's own ``potential_gradient``
and ``kinetic_gradient``, each step's force evaluated afresh.
"""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.compiled import compiled_stepper
from vpintegrator.compiled.bath import bath_stepper
from vpintegrator.compiled.lattice import lattice_stepper
from vpintegrator.integrators import get_integrator
from vpintegrator.systems import get_system
from vpintegrator.systems.fpu_beta import FPUBeta
from vpintegrator.systems.toda import Toda

RTOL = 1e-13


class _FixedEndsToda(Toda):
    periodic = False


class _RingFPU(FPUBeta):
    periodic = True


def _verlet(system, y: np.ndarray, hs: list[float], n_steps: int) -> np.ndarray:
    """States (n_steps, dim) after steps 1..n_steps from y (dim,); a step is the sub-steps ``hs``."""
    n = y.shape[0] // 2
    q, p = y[None, :n].copy(), y[None, n:].copy()
    out = np.empty((n_steps, y.shape[0]))
    for k in range(n_steps):
        for h in hs:
            p = p - 0.5 * h * system.potential_gradient(q)
            q = q + h * system.kinetic_gradient(p)
            p = p - 0.5 * h * system.potential_gradient(q)
        out[k] = np.concatenate([q[0], p[0]])
    return out


def _close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * scale)


def _substeps(method: str, h: float) -> list[float]:
    m = get_integrator(method)
    return [h * float(g) for g in getattr(m, "gammas", [1.0])]


@pytest.mark.parametrize("method", ["stormer_verlet", "stormer_verlet_suzuki4"])
def test_tuple_state_batch_1_rows_and_stride(method):
    """The coupled oscillator (unequal masses: T'(p) = p / m is not p): step_block, step_rows and every = 3."""
    system = get_system("coupled_oscillator")
    assert not np.allclose(system.kinetic_gradient(np.ones((1, 2))), 1.0)
    h, n = 0.4, 60
    stepper = compiled_stepper(system, method, h)
    assert stepper.engine == "lean"
    rng = np.random.default_rng(1)
    ys = np.ascontiguousarray(0.5 * rng.standard_normal((3, 4)))
    wants = [_verlet(system, y, _substeps(method, h), n) for y in ys]
    y = ys[0].copy()
    out = np.empty((n, 4))
    assert stepper.step_block(y, n, out) == n and stepper.status == 0
    _close(out, wants[0])
    np.testing.assert_array_equal(y, out[-1])
    rows, kept = ys.copy(), np.empty((3, n // 3, 4))
    done, status, _ = stepper.step_rows(rows, n, kept, every=3)
    assert done.tolist() == [n // 3] * 3 and not status.any()
    for r in range(3):
        _close(kept[r], wants[r][2::3])
        np.testing.assert_array_equal(kept[r], out[2::3] if r == 0 else kept[r])


@pytest.mark.parametrize("cls, n_sites", [(Toda, 24), (_FixedEndsToda, 24), (FPUBeta, 24), (_RingFPU, 24)])
@pytest.mark.parametrize("method", ["stormer_verlet", "stormer_verlet_y6"])
def test_array_state_lattices(cls, n_sites, method):
    system = cls(N=n_sites)
    h, n = 0.1, 40
    rng = np.random.default_rng(2)
    y0 = np.concatenate([0.3 * rng.standard_normal(n_sites), 0.2 * rng.standard_normal(n_sites)])
    stepper = lattice_stepper(system, get_integrator(method), h)  # the subclasses too (compiled_stepper: NumPy)
    y, out = y0.copy(), np.empty((n // 2, 2 * n_sites))
    assert stepper.step_block(y, n, out, every=2) == n // 2 and stepper.status == 0
    want = _verlet(system, y0, _substeps(method, h), n)
    _close(out, want[1::2])
    _close(y, want[-1])


def test_array_state_reduced_lattice(toda_data):
    """PSD-Galerkin's reduced Toda (the reduced force, Phi^T V'(Phi xi)) by the same loop."""
    from vpintegrator.reduction import PSDGalerkin, fit_psd

    system, train, test = toda_data
    reduced = PSDGalerkin(system, fit_psd(train, 16))
    z0 = reduced.basis.encode(test.y[0, 0])
    stepper = compiled_stepper(reduced, "stormer_verlet", 0.4)
    assert type(stepper).__name__ == "LatticeStepper"
    _close(stepper.run(z0, 30)[1:], _verlet(reduced, z0, [0.4], 30))


@pytest.mark.parametrize("name, n_bath", [("particle_chain", 12), ("kac_zwanzig", 12)])
@pytest.mark.parametrize("method", ["stormer_verlet", "stormer_verlet_suzuki4"])
def test_particle_bath(name, n_bath, method):
    """The particle + chain (the one loop with the chain's force) and the harmonic bath (its fused loop)."""
    system = get_system(name, N=n_bath)
    y0 = system.bath_at_rest(np.array([0.4]), np.array([0.3]))[0]
    h, n = 0.05, 50
    full = bath_stepper(system, method, h).run(y0, n, full=True)[0, 1:]
    _close(full, _verlet(system, y0, _substeps(method, h), n))
