"""One definition of the median and the percentiles (``vpintegrator.quantiles``), held against a reference
written here from the definition (order statistics, linear interpolation at (n − 1) p / 100), and used by the
studies' intervals and the work–precision rows alike."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vpintegrator.quantiles import median, percentiles
from vpintegrator.studies.stats import median_interval


def _reference(values, p):
    v = sorted(math.inf if math.isnan(x) else x for x in values)
    pos = (len(v) - 1) * p / 100
    i = int(pos)
    if i + 1 >= len(v) or pos == i:
        return v[i]
    if v[i + 1] == math.inf:
        return math.inf
    return v[i] + (pos - i) * (v[i + 1] - v[i])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9, 10, 11, 100, 101])
def test_percentiles_follow_the_definition(n):
    x = list(np.random.default_rng(n).lognormal(size=n))
    for p in (0, 10, 25, 50, 90, 100):
        assert percentiles(x, [p])[0] == pytest.approx(_reference(x, p), rel=1e-15)
    assert median(x) == pytest.approx(float(np.median(x)), rel=1e-15)


def test_even_count_median_is_the_mean_of_the_two_middle_values():
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]) == \
        {"median": 5.5, "lo": pytest.approx(1.9), "hi": pytest.approx(9.1), "n": 10}


def test_a_failed_value_counts_as_the_worst():
    assert median([1.0, float("nan"), 2.0]) == 2.0
    assert median([1.0, float("nan")]) == math.inf
    assert percentiles([1.0, 2.0, 3.0, float("inf")], [10, 90]) == [pytest.approx(1.3), math.inf]
    assert median_interval([None, 1.0, None])["n"] == 1


def test_no_values_and_bad_percentiles():
    assert math.isnan(median([]))
    assert median_interval([]) == {"median": None, "lo": None, "hi": None, "n": 0}
    with pytest.raises(ValueError, match="outside"):
        percentiles([1.0], [101])


def test_work_precision_rows_use_the_same_median():
    from vpintegrator.rollout.precision import _stats

    err = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert _stats(err) == (2.5, pytest.approx(3.7), 4.0)
