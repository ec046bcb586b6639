"""The reference of a comparison run (``vp-rollout``'s ``reference`` key): what the errors are measured
against, described (``describe_reference``: the line above the metrics table and the rollout file's
``reference*`` attributes) and written (``write_reference``: ``/reference`` of the rollout file).

``reference = "exact"`` (the default): the exact flow, DOP853 at rtol = atol = 1e-12 integrated from the
initial conditions over the whole horizon, unless the data file was itself made by DOP853 at tolerances
<= 1e-12 (then the data is the exact flow within its horizon, continued by the same DOP853 beyond).
``reference = "data"``: the data file, continued beyond its horizon with the data's own generator.
Held-out conditions (``heldout``) are integrated from their initial conditions by the exact flow or, with
``"data"``, the data's generator. A parametric data set's rows (``plan.system`` a
``vpintegrator.systems.family.SystemFamily``) are each integrated with their own parameters.
"""

from __future__ import annotations

import numpy as np

from ..errors import VPIntegratorError
from .engine import StepMap, stream_rollout
from .family import for_rows, step_for
from .steps import ExactFlowStep

__all__ = ["describe_reference", "write_reference"]


def describe_reference(plan, method: str, tight: bool) -> None:
    """What the errors are measured against: the line above the table and the file's ``reference*``
    attributes."""
    from ..provenance import redact_path

    data, cfg = plan.data, plan.config
    data = type(data)(redact_path(data))  # as shown and recorded: no absolute path of this machine
    end = float(plan.ref_file.t[-1])
    beyond = plan.n_steps + 1 > plan.ref_file.n_states
    gen = method or "dop853"
    if plan.exact_from_ics:
        desc = (f"exact flow: DOP853 (rtol = atol = 1e-12) from the initial conditions of {data}, over the whole "
                f"horizon ({data.name} itself was made with {method or 'an unrecorded method'})")
        attrs = {"reference_mode": "exact", "reference_method": "dop853", "reference_rtol": 1e-12,
                 "reference_atol": 1e-12}
    else:
        kind = "exact flow" if tight else "data"
        how = (f"DOP853, rtol = {float(plan.data_meta['rtol']):g}, atol = {float(plan.data_meta['atol']):g}"
               if gen == "dop853" and plan.data_meta.get("rtol") is not None else gen)
        desc = f"{kind}: {data} ({how}) for t <= {end:g}" + (f", continued with {gen} beyond" if beyond else "")
        attrs = {"reference_mode": "exact" if (tight and cfg.reference == "exact") else "data", "reference_method": gen}
        if gen == "dop853" and plan.data_meta.get("rtol") is not None:
            attrs.update(reference_rtol=float(plan.data_meta["rtol"]), reference_atol=float(plan.data_meta["atol"]))
        if plan.n_new:
            desc += f"; the {plan.n_new} heldout conditions integrated with {gen}"
    plan.reference_desc, plan.reference_attrs = desc, attrs


def _relative(plan) -> str:
    """The data file as given, an absolute path relative to the working directory (no absolute path of this
    machine)."""
    from ..provenance import redact_path

    return redact_path(plan.data)


def write_reference(writer, plan, reference_gen: StepMap):
    """``/reference``: the exact flow from the initial conditions (``plan.exact_from_ics``), or the data file
    then (beyond it) the data's own generator from its last state; held-out conditions (rows after the data
    file's) integrated from their initial conditions by the exact flow or the generator."""
    from ..arrays import to_numpy
    from ..metrics import TrajectoryMetricsStream
    from .device import use_device_engine

    ref_file, n_steps, t = plan.ref_file, plan.n_steps, plan.t
    n_traj, cs = plan.n_traj, writer.chunks[1]  # whole chunks of the file along time
    n_data, n_file = plan.n_data, ref_file.n_states
    series = writer.reference()
    ref_failed = np.full(n_traj, -1, dtype=np.int64)
    kw = dict(chunk_steps=plan.config.chunk_steps, blowup=plan.config.blowup)

    def integrate(step_map, y0, rows: slice, k_first: int, t_first: float, what: str) -> None:
        """States ``k_first ..`` of ``rows`` by ``step_map`` from ``y0``; a failure is an error."""
        def sink(k0, chunk):
            series.y[rows, k_first + k0 : k_first + k0 + chunk.shape[1]] = chunk

        res = stream_rollout(for_rows(step_map, rows), y0, plan.dt, n_steps - k_first, sink, t0=t_first, **kw)
        failed = np.where(res.failed_step >= 0, res.failed_step + k_first, -1)
        ref_failed[rows] = failed
        if (failed >= 0).any():
            i = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
            k = int(failed[i])
            which = plan.traj_index[rows][i]
            name = f"trajectory {int(which)}" if which >= 0 else f"heldout condition {i}"
            raise VPIntegratorError(
                f"{plan.data}: {what} failed (blow-up or non-finite) in {name} at t = {t[k]:g}; give a shorter "
                f"t_end (before {t[k]:g}) or a larger blowup", key="t_end",
            )

    if plan.exact_from_ics:
        y0 = ref_file.y[:, 0] if plan.n_new == 0 else np.concatenate([ref_file.y[:, 0], plan.heldout_y0])
        plan.say(f"reference: exact flow (DOP853, rtol = atol = 1e-12) for {n_traj} trajectories x {n_steps} steps")
        integrate(step_for(plan.system, lambda s: ExactFlowStep(s, plan.dt)), y0, slice(0, n_traj), 0, plan.t0,
                  "integrating the exact-flow reference (DOP853)")
    else:
        n_take = min(n_file, n_steps + 1)
        if n_data:
            for k0 in range(0, n_take, cs):
                series.y[:n_data, k0 : min(n_take, k0 + cs)] = ref_file.y[:, k0 : min(n_take, k0 + cs)]
        if n_steps + 1 > n_file and n_data:
            plan.say(
                f"reference: continuing {plan.data.name} from t = {ref_file.t[-1]:g} to {t[-1]:g} with {reference_gen.name}"
            )
            integrate(reference_gen, ref_file.y[:, -1], slice(0, n_data), n_file - 1, float(ref_file.t[-1]),
                      f"continuing the reference beyond t = {ref_file.t[-1]:g} with its generator {reference_gen.name}")
        if plan.n_new:
            integrate(reference_gen, plan.heldout_y0, slice(n_data, n_traj), 0, plan.t0,
                      f"integrating the heldout reference with {reference_gen.name}")
    names = tuple(plan.system.invariant_names)
    stream = TrajectoryMetricsStream(plan.system, n_traj, t_center=0.5 * (t[0] + t[-1]))
    # the reference's invariants where the models' metrics are computed: on the device of the first model
    # that runs on the device engine (the same formulas), else in NumPy
    device = next((m[1].device for m in plan.methods if use_device_engine(plan.config.engine, m[1], plan.system)), None)
    if device is not None:
        import torch
    yref = series.y
    for k0 in range(0, n_steps + 1, cs):
        k1 = min(n_steps + 1, k0 + cs)
        block = yref[:, k0:k1] if device is None else torch.as_tensor(yref[:, k0:k1], device=device)
        per_step = stream.update(t[k0:k1], block, None)
        series.write(k0, {f"invariant/{name}": to_numpy(per_step[f"invariant/{name}"]) for name in names})
    summary = stream.summary()
    if getattr(plan, "blocks", None) is not None and plan.blocks.per_traj:  # a shard: its merged table's values
        from ..data.rollout_shards import write_per_traj

        write_per_traj(series.group, {k: v for k, v in summary.items() if k.startswith("max_rel_drift_")})
    series.close(ref_failed, {"label": "reference", "kind": "reference", "source": _relative(plan),
                              "description": plan.reference_desc, "split": list(plan.run_labels),
                              **{f"max_rel_drift_{n}": float(np.max(summary[f"max_rel_drift_{n}"])) for n in names}})
    return yref
