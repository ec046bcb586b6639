"""The reduction study's data: one lattice (``Case``), its training split, held-out reference and PSD bases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .plan import HELDOUT_MU, HORIZONS, SYSTEMS, T


@dataclass(frozen=True, eq=False)
class Case:
    """One lattice of the study: the system, its training split and the held-out reference at 0, T, 8 T."""

    system_name: str
    N: int
    system: Any
    train: Any  # Trajectories: the training split, every data_dt
    heldout: np.ndarray  # (10, 3, 2N): the held-out states at t = 0, T, 8 T
    data_cpu: float  # process CPU seconds of the training split's generation
    #: per PSD method, its SVD of the training split, fitted once at the largest 2n asked (``psd_basis``):
    #: method -> (the basis, the process CPU seconds of its SVD)
    bases: dict[str, tuple[Any, float]] = field(default_factory=dict, repr=False)

    def psd_basis(self, reduced_dim: int, method: str = "cotangent_lift") -> tuple[Any, float]:
        """(the PSD basis (``method`` of ``fit_psd``) of 2n = ``reduced_dim`` on the training split, the process
        CPU seconds of its SVD): one SVD per method serves every 2n (the leading columns of the largest basis
        fitted so far)."""
        from dataclasses import replace

        from ...clock import process_cpu
        from ...reduction import fit_psd

        if method not in self.bases or self.bases[method][0].reduced_dim < reduced_dim:
            tic = process_cpu()
            basis = fit_psd(self.train, reduced_dim, method)
            self.bases[method] = (basis, process_cpu() - tic)
        basis, cpu = self.bases[method]
        return replace(basis, phi=np.ascontiguousarray(basis.phi[:, : reduced_dim // 2])), cpu

    @property
    def y0(self) -> np.ndarray:
        """The held-out initial states (10, 2N)."""
        return self.heldout[:, 0]


def make_case(system_name: str, n_sites: int, data_dt: float) -> Case:
    """Generate (in memory) the training split and the held-out reference of ``system_name`` at N sites."""
    from ...clock import process_cpu
    from ...data import generate, load_spec
    from ...systems import get_system

    spec = load_spec(SYSTEMS[system_name]["spec"])
    params = {**spec.params, "N": int(n_sites)}
    system = get_system(system_name, **params)  # N < 3 is refused here, in one line
    tic = process_cpu()
    train = generate(load_spec(SYSTEMS[system_name]["spec"], params=params, dt=data_dt, t_end=T), workers=1)
    data_cpu = process_cpu() - tic
    held = generate(load_spec(SYSTEMS[system_name]["spec"], params=params, dt=T, t_end=HORIZONS[-1],
                              sampler_args={"mu": list(HELDOUT_MU)}), workers=1)
    keep = [int(round(t / T)) for t in (0.0, *HORIZONS)]
    states = np.asarray(getattr(held, "y"))[:, keep]  # generate without out= returns the Trajectories
    return Case(system_name, int(n_sites), system, train, np.ascontiguousarray(states), data_cpu)
