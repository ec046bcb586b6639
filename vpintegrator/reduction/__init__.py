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
  costs O(n^2 + m n) for m sampled bonds and stays the gradient of a reduced potential;
- ``autoencoder``: GML's symplectic autoencoder (PSD-like layers and SympNet gradient layers), trained by
  [`fit_symplectic_autoencoder`][vpintegrator.training.fit_symplectic_autoencoder], a nonlinear
  [`SymplecticAutoencoder`][vpintegrator.reduction.autoencoder.SymplecticAutoencoder] (imported lazily: torch);
- ``observation``: the reductions as kinds of observation (``observe = "psd:K"``, ``"psd_balanced:K"``,
  ``"file:PATH"``), registered on import of this package;
- ``files``: [`save_reduction`][vpintegrator.reduction.files.save_reduction] /
  [`load_reduction`][vpintegrator.reduction.files.load_reduction], a basis or autoencoder in one ``.npz`` file
  with the lattice, N, 2n and the data it was fitted on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .files import load_reduction, reduction_meta, save_reduction
from .galerkin import PSDGalerkin
from .hyper import BondSampling, fit_bond_sampling
from .observation import attach_reduction, reduction_observation
from .psd import PSD_METHODS, PSDBasis, fit_psd, psd_floor

if TYPE_CHECKING:
    from .autoencoder import SymplecticAutoencoder as SymplecticAutoencoder
    from .autoencoder import load_autoencoder as load_autoencoder

__all__ = ["BondSampling", "PSDBasis", "PSDGalerkin", "PSD_METHODS", "SymplecticAutoencoder", "attach_reduction",
           "fit_bond_sampling", "fit_psd", "load_autoencoder", "load_reduction",
           "psd_floor", "reduction_meta", "reduction_observation", "save_reduction"]

if not TYPE_CHECKING:  # torch is imported on first use of the autoencoder's names
    __getattr__, __dir__ = lazy_exports(__name__, {n: ".autoencoder" for n in (
        "SymplecticAutoencoder", "load_autoencoder")}, globals())
