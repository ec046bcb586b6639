"""The one cost meter (issue 65): warm cost, set-up apart, interleaved repeats, one clock — on a fake clock that
counts work units, so that the tests assert what the meter does, never how fast this machine is."""

from __future__ import annotations

import pytest

from vpintegrator import clock as clock_mod
from vpintegrator.clock import Cost, meter, meter_one, meter_surviving, min_thread_cpu
from vpintegrator.errors import VPIntegratorError


class FakeClock:
    """A thread-CPU clock that advances only when a row does work (``spend``)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.order: list[str] = []

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake(monkeypatch):
    f = FakeClock()
    monkeypatch.setattr(clock_mod, "thread_cpu", f)
    return f


def _row(fake: FakeClock, name: str, first: float, then: list[float]):
    """A row whose first call costs ``first`` (compilation) and whose later calls cost ``then`` in turn."""
    costs = iter([first, *then])

    def call():
        fake.order.append(name)
        fake.spend(next(costs))
    return call


def test_compilation_is_set_up_not_cost(fake):
    cost = meter_one(_row(fake, "a", 5.0, [0.2, 0.1, 0.3]), repeats=3)
    assert isinstance(cost, Cost) and (cost.repeats, cost.clock, cost.first_seconds) == (3, "thread_cpu", 5.0)
    assert (cost.seconds, cost.setup_seconds) == (pytest.approx(0.1), pytest.approx(4.9))
    assert cost.per(10.0) == pytest.approx(0.01)
    assert cost.record("x_")["x_setup_seconds"] == cost.setup_seconds


def test_rows_are_interleaved_and_each_priced_at_its_least_disturbed_round(fake):
    rows = {"a": _row(fake, "a", 1.0, [0.5, 0.4]), "b": _row(fake, "b", 2.0, [0.9, 0.7])}
    costs = meter(rows, repeats=2)
    # one cold call each, then rounds a, b, a, b: a slow spell of the machine hits both rows alike
    assert fake.order == ["a", "b", "a", "b", "a", "b"]
    assert costs["a"].seconds == pytest.approx(0.4) and costs["b"].seconds == pytest.approx(0.7)
    assert costs["a"].setup_seconds == pytest.approx(0.6) and costs["b"].setup_seconds == pytest.approx(1.3)


def test_a_call_that_measures_its_own_work_is_priced_by_it(fake):
    # a rollout engine returns the seconds it spent producing states (its set-up left out)
    def call():
        fake.spend(1.0)
        return 0.25
    assert meter_one(call, repeats=2).seconds == 0.25


def test_warm_calls_never_cost_less_than_zero_set_up(fake):
    # a first call cheaper than every warm one: set-up 0, not negative
    assert meter_one(_row(fake, "a", 0.1, [0.2, 0.3]), repeats=2).setup_seconds == 0.0


def _failing(fake: FakeClock, name: str):
    def call():
        fake.order.append(name)
        fake.spend(0.3)
        raise ZeroDivisionError("division by zero")  # a trained model whose rollout fails
    return call


def test_a_row_that_fails_stops_the_meter_or_is_left_out_of_the_rounds(fake):
    rows = {"a": _row(fake, "a", 1.0, [0.5, 0.4]), "bad": _failing(fake, "bad"), "b": _row(fake, "b", 2.0, [0.9, 0.7])}
    with pytest.raises(ZeroDivisionError):
        meter(rows, repeats=2)
    fake.order.clear()
    rows = {"a": _row(fake, "a", 1.0, [0.5, 0.4]), "bad": _failing(fake, "bad"), "b": _row(fake, "b", 2.0, [0.9, 0.7])}
    costs, failed = meter_surviving(rows, repeats=2)
    assert fake.order == ["a", "bad", "b", "a", "b", "a", "b"]  # tried once cold, never again
    assert set(costs) == {"a", "b"} and list(failed) == ["bad"] and isinstance(failed["bad"], ZeroDivisionError)
    assert costs["a"].seconds == pytest.approx(0.4) and costs["b"].seconds == pytest.approx(0.7)
    assert costs["b"].setup_seconds == pytest.approx(1.3)  # the failed row's spending is nobody's cost


def test_partial_observation_prices_the_rows_that_roll_out_and_names_the_one_that_fails(monkeypatch, capsys):
    """A trained model whose batch-1 rollout raises has no cost; the others keep theirs (the study went on)."""
    from types import SimpleNamespace

    import numpy as np

    from vpintegrator.rollout import engine, methods
    from vpintegrator.studies.partial_observation import evaluation

    class Step:
        seq_len = 1

        def __init__(self, bad: bool) -> None:
            self.bad = bad

    def rollout(step, first, h, n_steps):
        if step.bad:
            raise ZeroDivisionError("division by zero")
        return SimpleNamespace(meta={"seconds": float(n_steps) * 1e-6, "setup_seconds": 2e-6})  # the engine's own

    monkeypatch.setattr(methods, "model_step", lambda model: Step(model == "bad"))
    monkeypatch.setattr(engine, "rollout", rollout)
    window = np.zeros((1, 1, 2))
    costs = evaluation.batch1_costs({"good": ("good", window), "vpt_T4": ("bad", window)}, 50)
    assert set(costs) == {"good"}
    assert costs["good"] == (pytest.approx(52e-6 / (50 * evaluation.H)), "thread_cpu")  # its steps and start
    assert ("partial_observation: vpt_T4: no batch-1 cost: its rollout failed (ZeroDivisionError: division by zero)"
            in capsys.readouterr().out)


def test_min_thread_cpu_is_the_meter(fake):
    assert min_thread_cpu(_row(fake, "a", 3.0, [0.5, 0.2]), 2) == pytest.approx(0.2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_repeats_and_clock_are_one_line_errors(bad):
    with pytest.raises(VPIntegratorError, match="repeats"):
        meter({"a": lambda: None}, repeats=bad)
    with pytest.raises(VPIntegratorError, match="clock must be one of"):
        meter({"a": lambda: None}, clock="wall")


def test_tables_that_say_how_their_cost_was_taken_are_still_known_as_tables(tmp_path):
    """The work-precision table's ``Cost:`` line and vp-rollout's cost paragraph sit above the table: the overwrite
    rule still knows the files as tables of the package (an overwrite replaces them, never a user's file)."""
    import math

    from vpintegrator._outputs import identify
    from vpintegrator.data.summary import write_table
    from vpintegrator.data.work_precision import WorkPrecisionRow, write_work_precision
    from vpintegrator.rollout.run import COST_CAPTION

    row = WorkPrecisionRow("rk4", "integrator", 0.1, math.nan, 10, 1.0, 2, 1e-6, 2e-6, 3e-6, 1e-9, 1e-5, "numba")
    _, md = write_work_precision(tmp_path / "wp", [row])
    assert md.read_text().startswith("Cost: ") and identify(md) == "table"
    write_work_precision(tmp_path / "wp", [row], overwrite=True)  # the second --work-precision run replaces it
    _, md = write_table([{"method": "rk4", "seconds_per_step": 1e-6}], tmp_path / "r",
                        caption=f"Errors against the exact flow.\n\n{COST_CAPTION}")
    assert identify(md) == "table"
    (tmp_path / "mine.md").write_text("Cost: my own notes\n\nnot a table\n")
    assert identify(tmp_path / "mine.md") == "file"
