"""The plan of a ``vp-gen`` run: ``build_plan`` turns a [`GenerationSpec`][vpintegrator.data.spec.GenerationSpec]
into a frozen, typed ``GenerationPlan`` once (the system built, its parameters' distributions checked, the time
grid's size, the compiled DOP853 kernel where there is one, and the trajectories per chunk resolved); nothing below it
reads the spec. [`generate`][vpintegrator.data.generation.generate] builds it and hands it to the run, the
resource checks, the chunk loop, the metadata and (a cluster run) the shards' tasks.

The plan's chunk size keeps one chunk within a memory budget and (SciPy's vectorised DOP853) within the largest
batch one ``solve_ivp`` call may take (``vpintegrator.data.flow.max_batch``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..errors import VPIntegratorError
from ..systems import System, get_system, system_meta
from .flow import compiled_kernel, max_batch
from .spec import DOP853, GenerationSpec, spec_periods

__all__ = ["GenerationPlan", "build_plan"]

# Memory budget of one chunk of output, (chunk, n_steps, dim) float64; solve_ivp holds about twice that.
_CHUNK_BYTES = 32 * 2**20


@dataclass(frozen=True)
class GenerationPlan:
    """What a run of a spec computes and records, every value resolved.

    ``name``, ``source`` (the spec file, "" for a spec built in Python), ``description`` (the spec's line) and
    ``where`` (how messages name the spec) identify it; ``system`` is the system built from its registry name
``system_name``, ``sampler`` and
    ``sampler_args`` draw ``n_traj`` initial conditions (None: the sampler decides) from
    ``numpy.random.default_rng(seed)``; ``parameters`` is the ``[parameters]`` table and ``parameter_dists``
    its checked form (both empty without one); ``n_states`` the sample times ``t = k * dt``; ``method`` DOP853 (with
    ``rtol``, ``atol``, and ``kernel``, the compiled vector field, or None for SciPy's ``solve_ivp``) or a
    classical integrator; ``chunk`` the trajectories integrated and written at a time (the spec's
    ``chunk_size`` within the memory budget); ``compression`` the HDF5 filter of ``/y`` (None: none).
    """

    name: str
    source: str
    description: str
    where: str
    system_name: str
    system: System
    sampler: str
    sampler_args: Mapping[str, Any]
    n_traj: int | None
    seed: int
    dt: float
    n_states: int
    method: str
    rtol: float
    atol: float
    kernel: tuple[int, np.ndarray] | None = field(repr=False)
    chunk: int
    compression: str | None
    parameters: Mapping[str, Any]
    parameter_dists: Mapping[str, Any]
    #: each component's period, 0 where not periodic (``spec_periods``; recorded as ``/y``'s attribute ``periodic``)
    periodic: tuple[float, ...] = ()

    @property
    def dim(self) -> int:
        """The state's dimension."""
        return self.system.dim

    @property
    def t(self) -> np.ndarray:
        """Sample times ``k * dt``, shape (n_states,): made when asked for (a plan refused for its size never
        allocates it)."""
        return np.arange(self.n_states) * self.dt

    @property
    def t_end(self) -> float:
        """The last sample time, ``t[-1]``."""
        return float(np.float64(self.n_states - 1) * self.dt)

    @property
    def inputs(self) -> list[str]:
        """The files the run reads (the spec file, if any): never an output, recorded in the provenance."""
        return [self.source] if self.source else []

    def identity(self) -> dict[str, Any]:
        """The metadata that tells this data set from another (system and its parameters, the parameters'
        distributions, spec, grid, method, tolerances, seed, sampler): what a finished shard must match."""
        extra = {"parameter_dists": json.dumps(dict(self.parameter_dists))} if self.parameters else {}
        return {**system_meta(self.system), **extra, "spec": self.name, "dt": self.dt, "t_end": self.t_end,
                "method": self.method, "rtol": self.rtol, "atol": self.atol, "seed": self.seed,
                "sampler": self.sampler, "sampler_args": json.dumps(dict(self.sampler_args))}


def _chunk(chunk_size: int, method: str, rtol: float, n_states: int, dim: int, compiled: bool) -> int:
    """Trajectories per chunk: the spec's ``chunk_size``, within the memory budget and (vectorised DOP853)
    one solve_ivp call."""
    chunk = min(chunk_size, _CHUNK_BYTES // (8 * n_states * dim))
    if method == DOP853 and not compiled:
        chunk = min(chunk, max_batch(rtol))
    return max(1, chunk)


def build_plan(spec: GenerationSpec) -> GenerationPlan:
    """The plan of a run of ``spec``: the system built (a one-line error naming the spec's ``[system]`` or
    ``[parameters]`` otherwise), the grid, the kernel and the chunk size resolved; nothing sampled, nothing
    integrated, nothing written."""
    where = spec.source or f"spec {spec.name!r}"
    try:
        system = get_system(spec.system, **spec.params)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"{where}: [system] {err}") from None
    dists: dict[str, Any] = {}
    if spec.parameters:
        from .param_dists import check_parameters

        dists = check_parameters(system, spec.parameters, f"{where}: [parameters]")
    kernel = compiled_kernel(system) if spec.method == DOP853 else None
    n_states = spec.n_states
    return GenerationPlan(
        name=spec.name, source=spec.source, description=spec.description, where=where, system_name=spec.system,
        system=system,
        sampler=spec.sampler, sampler_args=dict(spec.sampler_args), n_traj=spec.n_traj, seed=spec.seed,
        dt=spec.dt, n_states=n_states, method=spec.method, rtol=spec.rtol, atol=spec.atol, kernel=kernel,
        chunk=_chunk(spec.chunk_size, spec.method, spec.rtol, n_states, system.dim, kernel is not None),
        compression=None if spec.compression == "none" else spec.compression,
        parameters=dict(spec.parameters), parameter_dists=dists,
        periodic=tuple(float(p) for p in spec_periods(spec.periodic, where, system)))
