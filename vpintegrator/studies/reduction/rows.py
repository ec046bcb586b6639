"""The reduction study's row families (``ROWS``): the full-order ladders, the PSD floors, PSD-Galerkin with and
without hyper-reduction, SINDy on the PSD coordinates, and the flow maps (``flow_maps``)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .data import Case
from .flow_maps import autoencoder_flow_map_rows, psd_flow_map_rows
from .measure import _advance, _errors, _record, _stepper_cost
from .plan import HORIZONS, SYSTEMS, ReductionPlan


def full_order_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """Verlet, Yoshida 6 and the exponential splitting over the plan's ladder."""
    rows = []
    h_max = SYSTEMS[case.system_name]["h_max"]
    for method, steps in plan.ladder.items():
        for s in steps:
            h = float(s) if method == "exponential_splitting" else round(h_max * float(s), 12)
            y = _advance(case.system, method, h, case.y0, HORIZONS)
            cost = (_stepper_cost(case.system, method, h, case.y0[0], plan.repeats, plan.output_every)
                    if np.isfinite(y).all() else None)
            rows.append(_record(case, "full_order", f"{method}, h = {h:g}", method=method, h=h, cost=cost,
                                **_errors(y, case)))
    return rows


#: the PSD method of the balanced rows (``psd_floor_balanced``, ``psd_galerkin_balanced``)
_BALANCED = "balanced_cotangent_lift"


def _floor_rows(plan: ReductionPlan, case: Case, method: str, family: str, name: str) -> list[dict[str, Any]]:
    """The reconstruction floor of the PSD ``method`` at each 2n of ``floor_dims`` (fitted on the training split),
    as rows of ``family`` labelled "``name``, 2n = ..."."""
    rows = []
    case.psd_basis(max(plan.floor_dims), method)  # one SVD for every 2n
    for dim in plan.floor_dims:
        basis = case.psd_basis(dim, method)[0]
        y = basis.project(case.heldout[:, 1:])
        rows.append(_record(case, family, f"{name}, 2n = {dim}", reduced_dim=dim, **_errors(y, case)))
    return rows


def psd_floor_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """The cotangent-lift PSD's reconstruction floor at each 2n of ``floor_dims`` (fitted on the training split)."""
    return _floor_rows(plan, case, "cotangent_lift", "psd_floor", "PSD floor")


def psd_floor_balanced_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """The balanced cotangent lift's reconstruction floor at each 2n of ``floor_dims`` (the training split)."""
    return _floor_rows(plan, case, _BALANCED, "psd_floor_balanced", "balanced PSD floor")


def psd_galerkin_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """PSD-Galerkin by Stormer-Verlet at each 2n of ``reduced_dims``, without and with hyper-reduction, at the
    ladder's Verlet steps."""
    return _galerkin_rows(plan, case, "cotangent_lift", "psd_galerkin", "PSD-Galerkin")


def psd_galerkin_balanced_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """``psd_galerkin_rows`` on the balanced cotangent lift."""
    return _galerkin_rows(plan, case, _BALANCED, "psd_galerkin_balanced", "balanced PSD-Galerkin")


def _galerkin_rows(plan: ReductionPlan, case: Case, method: str, family: str, prefix: str) -> list[dict[str, Any]]:
    """PSD-Galerkin on the PSD ``method``'s basis (``psd_galerkin_rows``), rows of ``family`` labelled
    "``prefix``[ hyper-reduced (...)], 2n = ..., stormer_verlet h = ..."."""
    from ...clock import process_cpu
    from ...reduction import PSDGalerkin, fit_bond_sampling

    rows = []
    h_max = SYSTEMS[case.system_name]["h_max"]
    steps = [round(h_max * float(s), 12) for s in plan.ladder["stormer_verlet"][:2]]
    for dim in plan.reduced_dims:
        basis, svd_cpu = case.psd_basis(dim, method)
        tic = process_cpu()
        sampling = fit_bond_sampling(case.system, basis, case.train, tol=1e-3)
        hyper_cpu = process_cpu() - tic
        z0 = basis.encode(case.y0)
        variants = [(prefix, PSDGalerkin(case.system, basis), svd_cpu, None),
                    (f"{prefix} hyper-reduced ({sampling.bonds.size} of {sampling.n_bonds} bonds)",
                     PSDGalerkin(case.system, basis, sampling), svd_cpu + hyper_cpu, int(sampling.bonds.size))]
        for name, reduced, offline, bonds in variants:
            for h in steps:
                z = _advance(reduced, "stormer_verlet", h, z0, HORIZONS)
                cost = (_stepper_cost(reduced, "stormer_verlet", h, z0[0], plan.repeats, plan.output_every,
                                      basis.decode) if np.isfinite(z).all() else None)
                rows.append(_record(case, family, f"{name}, 2n = {dim}, stormer_verlet h = {h:g}",
                                    method="stormer_verlet", h=h, reduced_dim=dim, bonds=bonds, cost=cost,
                                    offline_cpu=case.data_cpu + offline, **_errors(basis.decode(z), case)))
    return rows

#: the ``psd_sindy`` rows: the reduced dimensions 2n, SINDy's libraries (its polynomial ones to degree 3: on 2n
#: coordinates degree D has C(2n + D, D) features), the method the fitted field is integrated by and its steps as
#: multiples of ``data_dt`` (the fit's validation rollouts run at ``data_dt``)
SINDY_DIMS = (8,)
SINDY_LIBRARIES = ("poly1", "poly2", "poly3")
SINDY_METHOD = "rk4"
SINDY_STEPS = (1, 2, 4)


def psd_sindy_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """SINDy on the PSD coordinates (the fitted row of operator inference's family): ż = Θ(z) Ξ on the training
    split's 2n cotangent-lift coordinates (``vpintegrator.rollout.sindy.select_sindy``: library of
    ``SINDY_LIBRARIES`` and threshold chosen by validation rollout on two of the 11 training trajectories, never
    on a held-out mu), integrated by ``SINDY_METHOD`` at ``SINDY_STEPS`` × ``data_dt`` from the held-out initial
    states' coordinates and decoded; priced like every reduced row (decoding each output). Without pysindy (the
    ``sindy`` extra) the family has no rows; a fit without skill is a row of infinite error."""
    import importlib.util

    if importlib.util.find_spec("pysindy") is None:
        return []
    from ...clock import process_cpu
    from ...rollout.sindy import select_sindy

    rows = []
    y = np.asarray(case.train.y)
    val = np.zeros(len(y), dtype=bool)
    val[[1, len(y) - 2]] = True  # two interior mu of the training split validate
    for dim in SINDY_DIMS:
        basis, svd_cpu = case.psd_basis(dim)
        z = basis.encode(y)
        tic = process_cpu()
        fit, _ = select_sindy(z[~val], z[val], plan.data_dt, SINDY_METHOD, libraries=SINDY_LIBRARIES)
        offline = case.data_cpu + svd_cpu + process_cpu() - tic
        if fit is None or fit.field is None:
            rows.append(_record(case, "psd_sindy", f"PSD-SINDy (no skill), 2n = {dim}", reduced_dim=dim,
                                offline_cpu=offline, **_errors(np.full((len(case.y0), len(HORIZONS), y.shape[-1]),
                                                                       np.nan), case)))
            continue
        z0 = basis.encode(case.y0)
        for k in SINDY_STEPS:
            h = round(plan.data_dt * k, 12)
            zz = _advance(fit.field, SINDY_METHOD, h, z0, HORIZONS)
            cost = (_stepper_cost(fit.field, SINDY_METHOD, h, z0[0], plan.repeats, plan.output_every, basis.decode)
                    if np.isfinite(zz).all() else None)
            rows.append(_record(case, "psd_sindy", f"PSD-SINDy {fit.library}, 2n = {dim}, {SINDY_METHOD} h = {h:g}",
                                method=SINDY_METHOD, h=h, reduced_dim=dim, cost=cost, offline_cpu=offline,
                                library=str(fit.library), n_terms=int(fit.n_terms),
                                **_errors(basis.decode(zz), case)))
    return rows


#: row family -> its function (plan, case) -> records
ROWS: dict[str, Callable[[ReductionPlan, Case], list[dict[str, Any]]]] = {
    "full_order": full_order_rows,
    "psd_floor": psd_floor_rows,
    "psd_floor_balanced": psd_floor_balanced_rows,
    "psd_galerkin": psd_galerkin_rows,
    "psd_galerkin_balanced": psd_galerkin_balanced_rows,
    "psd_flow_map": psd_flow_map_rows,
    "autoencoder_flow_map": autoencoder_flow_map_rows,
    "psd_sindy": psd_sindy_rows,
}
#: row family -> the lattice sizes of the plan it runs at (the others run at every size)
SIZES_OF: dict[str, Callable[[ReductionPlan], tuple[int, ...]]] = {
    "autoencoder_flow_map": lambda plan: plan.autoencoder_sizes,
}


def families(plan: ReductionPlan, n: int) -> dict[str, Callable[[ReductionPlan, Case], list[dict[str, Any]]]]:
    """The row families that run on a lattice of size ``n`` under ``plan`` (``SIZES_OF``)."""
    return {f: fn for f, fn in ROWS.items() if f not in SIZES_OF or n in SIZES_OF[f](plan)}
