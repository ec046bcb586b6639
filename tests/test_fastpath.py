"""verified(fast, eager, probe): the one rule of every fast path (numba runner, trace, CUDA graph, fast_step)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from vpintegrator.fastpath import allclose, first_line, verified


def _logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vpintegrator.fastpath"]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_fast_path_that_agrees_is_kept_with_its_outputs(kind, caplog):
    probes = [np.arange(6.0).reshape(2, 3), np.array([[np.nan, 1.0, 2.0]])]
    if kind == "torch":
        probes = [torch.as_tensor(p) for p in probes]
    calls = []

    def eager(x):
        calls.append("eager")
        return 2 * x

    def fast(x):
        calls.append("fast")
        return x + x * (1 + 1e-14)

    with caplog.at_level(logging.DEBUG):
        check = verified(lambda: fast, eager, probes, rtol=1e-12, atol=0.0)
    assert check.fast and check.fn is fast and check.reason is None and check.error is None
    assert calls == ["eager", "fast", "eager", "fast"]  # the eager path first on each probe
    assert len(check.outputs) == 2 and np.isnan(np.asarray(check.outputs[1])[0, 0])  # NaN where eager's is
    assert _logged(caplog) == []


def test_a_fast_path_that_differs_or_raises_gives_the_eager_one_and_one_logged_reason(caplog):
    x = np.ones((2, 3))
    with caplog.at_level(logging.INFO):
        off = verified(lambda: (lambda z: z + 1e-6), np.copy, [x, x], rtol=1e-9, atol=1e-9, what="the kernel")
        shape = verified(lambda: (lambda z: z[:1]), np.copy, [x], what="the kernel")
    assert not off.fast and off.fn is np.copy and off.outputs == []
    assert off.reason == "the kernel differs from the eager path on probe 0 (rtol 1e-09, atol 1e-09)"
    assert shape.reason.startswith("the kernel differs") and not allclose(x[:1], x, 0.0, 0.0)
    assert _logged(caplog) == [off.reason + "; the eager path runs", shape.reason + "; the eager path runs"]

    def build():
        raise RuntimeError("cannot capture\nsecond line")

    caplog.clear()
    with caplog.at_level(logging.INFO):
        broke = verified(build, np.copy, [x], what="building the graph step", log=logging.WARNING)
        quiet = verified(lambda: (lambda z: 1 / 0), None, [x], what="the step", log=None)
    assert broke.reason == "building the graph step raised RuntimeError: cannot capture"
    assert isinstance(broke.error, RuntimeError) and not broke.fast
    assert quiet.reason == "the step raised ZeroDivisionError: division by zero" and not quiet.fast
    assert _logged(caplog) == [broke.reason + "; the eager path runs"]  # log=None: the caller says it
    assert [r.levelno for r in caplog.records if r.name == "vpintegrator.fastpath"] == [logging.WARNING]
    assert first_line(ValueError()) == "ValueError"


def test_agree_replaces_the_tolerance_and_no_eager_path_only_runs_the_fast_one():
    check = verified(lambda: (lambda z: z + 1), lambda z: z, [1, 2],
                     agree=lambda got, want: None if got - want == 1 else f"{got} vs {want}")
    assert check.fast and check.outputs == [2, 3]
    check = verified(lambda: (lambda z: z + 2), lambda z: z, [1], agree=lambda got, want: f"{got} vs {want}")
    assert check.reason == "3 vs 1"
    check = verified(lambda: (lambda z: -z), None, [1, 2])
    assert check.fast and check.outputs == [-1, -2]
