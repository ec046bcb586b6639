"""The one definition of the summary statistics the package reports over initial conditions, seeds or rows:
the median and the percentiles (the 10–90 % interval of the studies, the 90th percentile of a work–precision
row). Every table, results file, README and docs number computed by the package or its scripts uses these.

- **Percentile** p of n values: the sorted values v_0 ≤ … ≤ v_{n−1} interpolated linearly at the position
  (n − 1) p / 100 (Hyndman & Fan's definition 7, NumPy's default ``method="linear"``).
- **Median**: the 50th percentile, i.e. the middle value for odd n and the mean of the two middle values for
  even n (the textbook median, ``numpy.median``).
- **A value that is not defined** (NaN: a rollout that failed) counts as +inf, the worst value, so a failed
  condition moves the statistic up and is never dropped; a percentile whose interpolation touches +inf is
  +inf. None entries (no value at all) are left out; no values give NaN.

Imports NumPy only.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

__all__ = ["DEFINITION", "sorted_values", "percentiles", "median"]

#: one line for captions and results files: how the medians and intervals were taken
DEFINITION = ("median and percentiles over the values by linear interpolation between order statistics "
              "(numpy's default; the median of an even count is the mean of the two middle values); a failed "
              "value (NaN) counts as +inf")


def sorted_values(values: Iterable[float | None]) -> np.ndarray:
    """The values as sorted float64, None left out and NaN made +inf."""
    arr = np.asarray([float(v) for v in values if v is not None], dtype=np.float64).ravel()
    return np.sort(np.where(np.isnan(arr), np.inf, arr))


def percentiles(values: Iterable[float | None], qs: Sequence[float]) -> list[float]:
    """The percentiles ``qs`` (each in [0, 100]) of ``values`` by the module's definition; NaN for each when
    there is no value."""
    v = sorted_values(values)
    out: list[float] = []
    for q in qs:
        q = float(q)
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile {q!r} is outside [0, 100]")
        if v.size == 0:
            out.append(math.nan)
            continue
        pos = (v.size - 1) * q / 100.0
        i = min(int(math.floor(pos)), v.size - 1)
        g = pos - i
        a = float(v[i])
        if g == 0.0 or i + 1 >= v.size:
            out.append(a)
            continue
        b = float(v[i + 1])
        if math.isinf(a) or math.isinf(b):  # -inf below, +inf above: the infinite end wins where it weighs
            out.append(b if b == math.inf else a)
        else:
            out.append(a + g * (b - a))
    return out


def median(values: Iterable[float | None]) -> float:
    """The median of ``values`` (module docstring): NaN when there is none."""
    return percentiles(values, (50.0,))[0]
