"""PSD-Galerkin: the reduced Hamiltonian system of a PSD basis, integrated by any registered method.

With an orthonormal symplectic basis ``A`` (2N, 2n) (``vpintegrator.reduction.psd``) the reduced system is the
canonical Hamiltonian system of ``H_r(z) = H(A z)`` on ``R^{2n}``::

    dz/dt = J_{2n} grad H_r(z) = A^T J_{2N} grad H(A z) = A^T f(A z)

(``A^T J_{2N} = J_{2n} A^T`` for such an A), so a symplectic method on it is a symplectic method on the reduced
phase space and ``H_r`` is its energy. For the cotangent lift ``A = diag(Phi, Phi)`` and a separable full
system ``|p|^2 / 2 + V(q)`` it is separable again, ``H_r = |eta|^2 / 2 + V(Phi xi)`` with the force
``Phi^T V'(Phi xi)``: Stormer-Verlet and its compositions apply. Each force lifts ``xi`` to the full lattice
(O(N n) for the products, O(N) for the force), which is why, without hyper-reduction, a reduced step costs more
than a full-order one on a lattice. On a shipped lattice with a cotangent-lift basis ``integrate`` runs
Stormer-Verlet and its compositions compiled (``vpintegrator.compiled.lattice.run_verlet`` with the reduced force).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import VPIntegratorError
from ..systems import System
from .hyper import BondSampling
from .psd import PSDBasis

if TYPE_CHECKING:
    from ..systems.lattice import Lattice

__all__ = ["PSDGalerkin"]


@dataclass(frozen=True, eq=False)
class PSDGalerkin(System):
    """The reduced Hamiltonian system ``H_r(z) = H(A z)`` of ``basis`` on the canonical system ``full`` (module
    docstring). Its state is ``z = A^T y`` (``basis.encode``); ``basis.decode`` lifts it back.

    Parameters
    ----------
    full : System
        A canonical system with state (q, p) of 2N components (a lattice: ``toda``, ``fpu_beta``).
    basis : PSDBasis
        Fitted on that system's data: its N must be the system's (a basis of another lattice size is refused).
    hyper : BondSampling, optional
        The ECSW hyper-reduction of the lattice's bonds (``vpintegrator.reduction.hyper.fit_bond_sampling``): the
        force then costs O(n^2 + m n) for m sampled bonds, not O(N n), and the system is the Hamiltonian system
        of the hyper-reduced potential (its ``energy`` is that potential's).
    """

    full: System
    basis: PSDBasis
    hyper: BondSampling | None = None

    name: ClassVar[str] = "psd_galerkin"
    dim: ClassVar[int] = 2  # each instance sets its own (2n)
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    #: compiled by vpintegrator.compiled.lattice where ``lattice_lift`` answers (Stormer-Verlet and its compositions)
    lattice_kernel: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.full, System):
            raise VPIntegratorError(f"PSDGalerkin: full must be a System; got {type(self.full).__name__}")
        if not isinstance(self.basis, PSDBasis):
            raise VPIntegratorError(f"PSDGalerkin: basis must be a PSDBasis (fit_psd); got {type(self.basis).__name__}")
        if self.full.dim != 2 * self.basis.n_sites:
            raise VPIntegratorError(
                f"PSDGalerkin: the basis is of a lattice of N = {self.basis.n_sites} (states of "
                f"{2 * self.basis.n_sites} components) but the system {self.full.name!r} has dim {self.full.dim}; "
                "fit the basis on this system's data", key="basis")
        if self.hyper is not None and (not self.basis.is_lift or self.hyper.rows.shape[1:] !=
                                       (self.basis.reduced_dim // 2,)):
            raise VPIntegratorError("PSDGalerkin: hyper must be fitted on this cotangent-lift basis "
                                    "(fit_bond_sampling(system, basis, snapshots))", key="hyper")
        object.__setattr__(self, "dim", self.basis.reduced_dim)
        separable = bool(getattr(self.full, "separable", False)) and self.basis.is_lift
        object.__setattr__(self, "separable", separable)

    def lattice_lift(self) -> tuple[System, np.ndarray, BondSampling | None] | None:
        """(the full lattice, Phi (N, n), the bond sampling or None) when the compiled lattice loops can step this
        system (a cotangent-lift basis on a shipped lattice: ``vpintegrator.compiled.lattice``), else None (the
        NumPy step runs)."""
        if not self.basis.is_lift or not vars(type(self.full)).get("lattice_kernel"):
            return None
        return self.full, self.basis.phi, self.hyper

    def params(self) -> dict[str, Any]:
        return {**{f"full_{k}": v for k, v in self.full.params().items()}, "reduced_dim": float(self.dim)}

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        z = self._check_state(y)
        if self.hyper is not None:
            k = self.dim // 2
            return np.concatenate([z[..., k:], -self.potential_gradient(z[..., :k])], axis=-1)
        return self.basis.encode(self.full.vector_field(self.basis.decode(z)))

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        """A^T Df(A z) A: (..., 2n, 2n)."""
        z = self._check_state(y)
        if self.hyper is not None:
            k = self.dim // 2
            out = np.zeros(z.shape[:-1] + (2 * k, 2 * k))
            out[..., :k, k:] = np.eye(k)
            out[..., k:, :k] = -self.potential_hessian(z[..., :k])
            return out
        a = self.basis.matrix()
        return a.T @ self.full.jacobian(self.basis.decode(z)) @ a

    def hamiltonian(self, y: np.ndarray) -> np.ndarray:
        """H_r(z) = H(A z)."""
        return self._invariant_energy(self._check_state(y))

    def _invariant_energy(self, y: np.ndarray) -> np.ndarray:
        if self.hyper is not None:  # the hyper-reduced Hamiltonian (up to a constant)
            k = self.dim // 2
            return 0.5 * np.sum(y[..., k:] ** 2, axis=-1) + self.hyper.potential(self._lattice(), y[..., :k])
        return self.full.invariant(self.full.invariant_names[0], self.basis.decode(y))

    def _lattice(self) -> "Lattice":
        """The full system as the lattice a bond sampling (``hyper``) was fitted on."""
        from ..systems.lattice import Lattice

        if not isinstance(self.full, Lattice):
            raise VPIntegratorError(f"a bond sampling needs a lattice; the full system is {self.full.name!r}")
        return self.full

    # --- the separable split (the cotangent lift of a separable system) ------------------------------------
    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        if not self.separable:
            raise self._not_separable()
        phi = self.basis.phi
        return self.full.kinetic_gradient(np.asarray(p, dtype=np.float64) @ phi.T) @ phi

    def kinetic_hessian(self, p: np.ndarray) -> np.ndarray:
        if not self.separable:
            raise self._not_separable()
        phi = self.basis.phi
        return phi.T @ self.full.kinetic_hessian(np.asarray(p, dtype=np.float64) @ phi.T) @ phi

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        if not self.separable:
            raise self._not_separable()
        if self.hyper is not None:
            return self.hyper.potential_gradient(self._lattice(), q)
        phi = self.basis.phi
        return self.full.potential_gradient(np.asarray(q, dtype=np.float64) @ phi.T) @ phi

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        if not self.separable:
            raise self._not_separable()
        if self.hyper is not None:
            h = self.hyper
            r = np.asarray(q, dtype=np.float64) @ h.rows.T  # (..., m)
            lattice = self._lattice()
            second = lattice.ddphi(r) - lattice.kappa  # psi''(r)
            return h.stiffness + np.einsum("...b,bi,bj->...ij", h.weights * second, h.rows, h.rows)
        phi = self.basis.phi
        return phi.T @ self.full.potential_hessian(np.asarray(q, dtype=np.float64) @ phi.T) @ phi
