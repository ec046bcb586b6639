"""Full-state errors of models rolled out in reduced coordinates (``vp-rollout --decode-every K``).

A model trained on a reduction (``observe = "psd:K"`` or ``"file:PATH"``, ``vpintegrator.reduction.observation``)
rolls out in the reduced coordinates, and the rollout file scores it there. Decoding every state costs O(N n)
per step, more than the reduced step itself, so the full state is decoded only at an **output cadence**: every
``every``-th state of the rollout (and its last). At those states the decoded prediction is compared with the
data file's full state: the relative error ``|decode(z_k) - y_k| / |y_k|``, its median over the trajectories at
the last decoded time (``error_at_end``), and the decoder's CPU seconds per decoded state. Rows whose
trajectory is not in the data file (held-out conditions drawn by the run) and times beyond the file are left
out: the reference here is the file, as the brief of the reduction says.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import relative_error
from ..data.observation import observation_of
from ..errors import VPIntegratorError
from ..quantiles import median

__all__ = ["check_decodable", "decoded_errors", "decoded_stem", "write_decoded"]


def decoded_stem(out: str | Path) -> Path:
    """``<out stem>_decoded``: where ``vp-rollout --decode-every`` writes its table (``.csv``, ``.md`` and ``.tex``)."""
    out = Path(out)
    return out.with_name(out.stem + "_decoded")


def check_decodable(plan: Any) -> None:
    """Refuse, in one line and before anything runs, ``decode_every`` on a planned rollout (a
    ``vpintegrator.rollout.plan.RolloutPlan``) that is not on a reduction: its rows would have nothing to decode."""
    observation = getattr(plan.system, "observation", None)
    if observation is None or observation.reduction_record is None:
        on = "the full state" if observation is None else f"observation {observation.spec} (not a reduction)"
        raise VPIntegratorError(f"decode_every: this run is on {on}: there is nothing to decode; give models "
                                "trained on a reduction (observe psd:K or file:PATH) or leave out --decode-every",
                                key="decode_every")


def decoded_errors(rollout_path: str | Path, data_path: str | Path, every: int) -> list[dict[str, Any]]:
    """One row per model of the rollout file: its full-state errors at every ``every``-th state (module
    docstring). One-line errors: ``every`` not an int >= 1, a rollout that was not on a reduction, a data file
    without the rollout's trajectories or of another step."""
    import h5py

    from ..data import read_trajectories
    from ..reduction.observation import attach_reduction

    if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
        raise VPIntegratorError(f"decode_every must be an int >= 1 (decode every K-th state); got {every!r}",
                                key="decode_every")
    with h5py.File(rollout_path, "r") as f:
        attrs = dict(f.attrs)
        if isinstance(attrs.get("observation_matrix"), (str, bytes)):  # (the writer keeps it as JSON text)
            attrs["observation_matrix"] = json.loads(attrs["observation_matrix"])
        t = np.asarray(f["t"])
        traj_index = np.asarray(f["traj_index"])
        labels = [str(k) for k in f["methods"]] if "methods" in f else []
        kinds = {k: str(f["methods"][k].attrs.get("kind", "")) for k in labels}
    observation = attach_reduction(observation_of(attrs), f"rollout {rollout_path}")
    if observation is None or observation.reduction_record is None:
        raise VPIntegratorError(f"decode_every: {rollout_path} was not rolled out on a reduction (observe psd:K or "
                                "file:PATH): there is nothing to decode", key="decode_every")
    data = read_trajectories(data_path)
    if data.dim != observation.full_dim:
        raise VPIntegratorError(f"decode_every: {data_path} holds states of {data.dim} components but the reduction "
                                f"decodes to {observation.full_dim}", key="decode_every")
    if data.n_states > 1 and len(t) > 1 and not np.isclose(float(data.dt), float(t[1] - t[0]), rtol=1e-9, atol=0):
        raise VPIntegratorError(f"decode_every: {data_path} has step {data.dt:g} but the rollout {t[1] - t[0]:g}; give "
                                "the data file the rollout ran on", key="decode_every")
    rows_in = np.flatnonzero((traj_index >= 0) & (traj_index < data.n_traj))
    n_k = min(len(t), data.n_states)
    ks = np.unique(np.r_[np.arange(0, n_k, every), n_k - 1])
    if not len(rows_in):
        raise VPIntegratorError(f"decode_every: none of the rollout's trajectories is in {data_path}",
                                key="decode_every")
    truth = np.asarray(data.y)[traj_index[rows_in]][:, ks]  # (rows, decoded times, 2N)
    out = []
    with h5py.File(rollout_path, "r") as f:
        for label in labels:
            if kinds.get(label) not in ("model", ""):
                continue
            z = np.asarray(f["methods"][label]["y"][:, ks])[rows_in]
            start = time.process_time()
            y = observation.decode(z)
            cpu = time.process_time() - start
            err = np.asarray(relative_error(y, truth))  # (rows, decoded times)
            out.append({"method": label, "reduction": observation.spec, "every": int(every),
                        "decoded_states": int(err.size), "t_end": float(t[ks[-1]]),
                        "error_at_end": median(err[:, -1]), "mean_error_at_end": float(np.mean(err[:, -1])),
                        "max_error": float(np.nanmax(err)) if np.isfinite(err).any() else float("nan"),
                        "decode_seconds_per_state": cpu / max(err.size, 1), "n_traj": int(len(rows_in))})
    return out


def write_decoded(rollout_path: str | Path, data_path: str | Path, every: int, overwrite: bool = False
                  ) -> tuple[list[dict[str, Any]], Path, Path]:
    """``decoded_errors`` written beside the rollout file as ``<stem>_decoded.csv``, ``.md`` and ``.tex`` (atomic,
    under the overwrite rule): (rows, csv path, markdown path)."""
    from ..data.summary import write_table

    rows = decoded_errors(rollout_path, data_path, every)
    csv, md = write_table(rows, decoded_stem(rollout_path), overwrite=overwrite)
    return rows, csv, md
