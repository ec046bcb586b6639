"""How the reduction study measures a row: its states at the horizons, its error against the held-out reference,
its batch-1 CPU per unit time, and the record it becomes."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...errors import VPIntegratorError
from ..stats import median_interval, relative_errors
from .data import Case
from .plan import HORIZONS, T


def _min_cpu(call: Callable[[], object], repeats: int) -> float:
    """The warm batch-1 cost of ``call`` on the one cost meter (``vpintegrator.clock.meter``: one cold call,
    compilation apart, then the minimum over ``repeats``; thread CPU seconds)."""
    from ...clock import meter_one

    return meter_one(call, max(1, int(repeats))).seconds


def _advance(system: Any, method: str, h: float, y0: np.ndarray, horizons: Sequence[float]) -> np.ndarray:
    """The states (n, len(horizons), dim) of ``method`` at step h from ``y0`` (n, dim) at each horizon, stepped
    in chunks (``integrate``, compiled where it applies) so that no run holds more than ~2e7 numbers."""
    from ...data import integrate

    y = np.array(y0, dtype=np.float64)
    chunk = max(1, int(2e7 // (y.shape[0] * y.shape[1])))
    out, done = [], 0
    for t in horizons:
        target = int(round(t / h))
        while done < target:
            k = min(chunk, target - done)
            try:
                y = integrate(system, y, h, k, method=method).y[:, -1]
            except VPIntegratorError:  # unstable at this step (a non-finite state): the row's error is inf
                return np.full((y.shape[0], len(horizons), y.shape[1]), np.nan)
            done += k
        out.append(y)
    return np.stack(out, axis=1)


def _errors(y: np.ndarray, case: Case) -> dict[str, Any]:
    """Per horizon: the median (and 10-90 % interval) over the held-out mu of the full state's relative error;
    ``y`` (n, len(HORIZONS), 2N)."""
    errors = relative_errors(y, case.heldout[:, 1:], range(len(HORIZONS)))
    return {f"err_t{t:g}": median_interval(errors[i]) for i, t in enumerate(HORIZONS)}


def _record(case: Case, row: str, label: str, **values: Any) -> dict[str, Any]:
    """A row's record; a row with an offline CPU also records the data generation's part of it (``data_cpu``: the
    full charge of its break-even counts the data once over the tuning runs, ``tables._full_charge``)."""
    data = {} if values.get("offline_cpu") is None else {"data_cpu": case.data_cpu}
    return {"system": case.system_name, "N": case.N, "row": row, "label": label, "seed": None, "cost": None,
            "offline_cpu": None, **data, **values}


#: steps per call of a compiled stepper when a row is priced (``_stepper_cost``): whole outputs at a time into a
#: buffer that stays in cache, so that neither a Python call per output nor storing every state is the row's cost
STEPS_PER_CALL = 64


def _stepper_cost(system: Any, method: str, h: float, y0: np.ndarray, repeats: int, output_every: float,
                  decode: Callable[[np.ndarray], object] | None = None) -> float:
    """Batch-1 thread CPU seconds per unit time of ``method`` at step h from ``y0`` to T, priced for the output
    every row of the study gives: the full state every ``output_every`` time units (at the row's own
    steps where its step is longer), ``decode`` (a reduced row's decoder) applied to each, no other state stored.
    The compiled stepper where the package has one, stepping ``STEPS_PER_CALL`` steps (whole outputs) a call into
    a small buffer, the outputs decoded together; else ``integrate`` (the NumPy step) to T in one call."""
    from ...compiled import compiled_stepper
    from ...data import integrate

    n = int(round(T / h))
    stepper = compiled_stepper(system, method, h)
    if stepper is not None:
        k = max(1, min(n, int(round(float(output_every) / h))))  # steps per output
        block = k * max(1, STEPS_PER_CALL // k)  # whole outputs per call: no Python per output, a small buffer
        buf = np.empty((block, system.dim))
        last = np.arange(k - 1, block, k)  # the output states of a whole block

        def run() -> None:
            y, done = y0.copy(), 0
            while done < n:
                m = min(block, n - done)
                stepper.step_block(y, m, buf)
                if decode is not None:
                    decode(buf[last[last < m]])
                done += m
        return _min_cpu(run, repeats) / T

    def whole() -> None:
        y = integrate(system, y0[None], h, n, method=method)
        if decode is not None:
            k = max(1, int(round(float(output_every) / h)))
            decode(np.asarray(y.y)[0, k::k])
    return _min_cpu(whole, repeats) / T
