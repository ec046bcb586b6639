"""Structure-preserving model reduction of the lattices: proper symplectic decomposition and its Galerkin system.

- ``psd``: [`fit_psd`][vpintegrator.reduction.psd.fit_psd] fits a [`PSDBasis`][vpintegrator.reduction.psd.PSDBasis]
  (an orthonormal symplectic basis ``A`` of ``R^{2N}``, by the cotangent lift or the complex SVD) on the
  training split's snapshots; [`psd_floor`][vpintegrator.reduction.psd.psd_floor] is its reconstruction floor
  ``|y - A A^T y| / |y|`` on held-out states;
- ``galerkin``: [`PSDGalerkin`][vpintegrator.reduction.galerkin.PSDGalerkin], the reduced Hamiltonian system
  ``H_r(z) = H(A z)`` on ``R^{2n}``, a ``System`` that any registered method integrates (separable for the
  cotangent lift: Stormer-Verlet and its compositions apply);
- ``hyper``: [`fit_bond_sampling`][vpintegrator.reduction.hyper.fit_bond_sampling], the ECSW hyper-reduction of a
  lattice's bonds (a [`BondSampling`][vpintegrator.reduction.hyper.BondSampling]), so that PSD-Galerkin's force
  costs O(n^2 + m n) for m sampled bonds and stays the gradient of a reduced potential.
"""

from __future__ import annotations

from .galerkin import PSDGalerkin
from .hyper import BondSampling, fit_bond_sampling
from .psd import PSD_METHODS, PSDBasis, fit_psd, psd_floor

__all__ = ["BondSampling", "PSDBasis", "PSDGalerkin", "PSD_METHODS", "fit_bond_sampling", "fit_psd", "psd_floor"]
