"""Levenberg–Marquardt that recovers or says it is stuck (issue 92): a step rejected with the damping at its cap
(1e12, where a step is ~1e-12 of a gradient step) restarts the damping from ``lm_lambda``, at most
``LevenbergMarquardt.RESTARTS`` times; the next time at the cap the run stops with ``stopped = "lm_stuck"``,
never as a plateau. The tests drive LM into the cap by rejecting every candidate (the check windows' cost is
made infinite), so they count steps: 50 rejected solves take λ from 1e-3 to the cap, 5 steps of 10 solves."""

from __future__ import annotations

import json
import math

import pytest
import torch

from vpintegrator.training import LevenbergMarquardt, fit
from vpintegrator.training.ensemble_lm import EnsembleLM
from vpintegrator.training.optim import LMSubsample

pytestmark = pytest.mark.usefixtures("one_thread")

#: steps of 10 rejected solves from lm_lambda 1e-3 to the cap 1e12 (2^50 > 1e15)
TO_CAP = 5


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    base = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}, optimizer="lm",
                lm_windows=16, lm_check_windows=4, lm_iters_per_epoch=4, epochs=12, dtype="float64",
                device="cpu", out=str(tmp_path / name))
    return base | kw


def _reject(monkeypatch, cls, until: int | None = None, members=None) -> None:
    """Every LM candidate of ``cls`` (LMSubsample or EnsembleLM) rejected by its check windows (an infinite
    cost at any candidate; an iteration asks the cost at its own weights first), in the first ``until``
    iterations (None: always), for the ``members`` given (an ensemble's; None: all)."""
    original = cls._check_cost

    def check_cost(self, theta, *rest):
        value = original(self, theta, *rest)
        if getattr(self, "_asked", None) != self.iteration:  # the cost before the step
            self._asked = self.iteration
            return value
        if until is not None and self.iteration >= until:
            return value
        if isinstance(value, float):
            return math.inf
        bad = torch.ones(len(value), dtype=torch.bool) if members is None else torch.isin(
            torch.arange(len(value)), torch.tensor(members))
        return torch.where(bad, torch.full_like(value, math.inf), value)

    monkeypatch.setattr(cls, "_check_cost", check_cost)


def test_the_optimiser_restarts_its_damping_at_the_cap_then_says_it_is_stuck():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = LevenbergMarquardt([w], lam=1e-3)

    def closure(theta):
        return theta - torch.tensor([3.0, 4.0], dtype=torch.float64)

    closure.accept = lambda theta: False  # no candidate is ever good enough
    lams = []
    for _ in range(3 * TO_CAP + 2):
        opt.step(closure)
        lams.append((opt.lam, opt.restarts, opt.stuck))
    assert not opt.accepted and torch.equal(w.detach(), torch.tensor([1.0, -2.0], dtype=torch.float64))
    # at the cap after 5 steps: the damping starts again at 1e-3 (twice), the third time it is stuck
    assert lams[TO_CAP - 2][0] < LevenbergMarquardt.LAM_MAX and lams[TO_CAP - 1] == (1e-3, 1, False)
    assert lams[2 * TO_CAP - 1] == (1e-3, 2, False)
    assert lams[3 * TO_CAP - 1] == (LevenbergMarquardt.LAM_MAX, 2, True) and lams[-1] == lams[3 * TO_CAP - 1]


def test_a_stuck_run_stops_lm_stuck_after_its_restarts_never_at_a_plateau(tiny_data, tmp_path, monkeypatch):
    _reject(monkeypatch, LMSubsample)
    # patience 5 epochs = 20 steps: the frozen weights' constant score would call a plateau at epoch 6
    result = fit(_config(tiny_data, tmp_path, patience=5))
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    stuck_at = (LevenbergMarquardt.RESTARTS + 1) * TO_CAP  # 15: the cap thrice, restarted twice
    assert result.stopped == s["stopped"] == "lm_stuck" and s["lm_restarts"] == LevenbergMarquardt.RESTARTS
    # it stops at the step it got stuck at: the epoch ends there, short (steps 13-15 of epoch 4)
    assert result.steps == s["steps"] == stuck_at and result.epochs == 4 and s["short_epoch"] is True
    assert s["lr"] == LevenbergMarquardt.LAM_MAX and s["still_improving"] is None
    complete = json.loads((tmp_path / "run" / "complete.json").read_text())
    assert complete["stopped"] == "lm_stuck"


def test_a_run_whose_damping_recovers_after_the_restart_trains_on(tiny_data, tmp_path, monkeypatch):
    _reject(monkeypatch, LMSubsample, until=TO_CAP + 1)  # the cap once, then steps are accepted again
    result = fit(_config(tiny_data, tmp_path, epochs=6))
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result.stopped == "epochs" and result.steps == 24 and s["lm_restarts"] == 1
    assert s["lr"] < 1.0  # the damping came down from its restart


def test_an_ensemble_member_gets_stuck_as_its_single_run_does(tiny_data, tmp_path, monkeypatch):
    _reject(monkeypatch, EnsembleLM)
    result = fit(_config(tiny_data, tmp_path, "ens", seeds=[3, 4], patience=5))
    assert result.stopped == "lm_stuck"
    for member in result.members:
        s = json.loads((member.run_dir / "summary.json").read_text())
        assert s["stopped"] == "lm_stuck" and s["lm_restarts"] == LevenbergMarquardt.RESTARTS
        assert s["steps"] == member.steps == 15 and member.epochs == 4


def test_a_stuck_ensemble_member_is_its_single_run(tiny_data, tmp_path, monkeypatch):
    """Member 0 is rejected until it is stuck (step 15), member 1 never: member 0's record and weights are
    its single run's (a stuck member tries no more steps), member 1 trains its 12 epochs."""
    _reject(monkeypatch, EnsembleLM, until=15, members=[0])  # later candidates would be accepted: not tried
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=[3, 4]))
    m0, m1 = ens.members
    assert (m0.stopped, m0.steps, m0.epochs) == ("lm_stuck", 15, 4) and (m1.stopped, m1.epochs) == ("epochs", 12)
    monkeypatch.undo()
    _reject(monkeypatch, LMSubsample)
    single = fit(_config(tiny_data, tmp_path, "single", seed=3))
    assert (single.stopped, single.steps, single.epochs) == ("lm_stuck", 15, 4)
    a, b = m0.model.state_dict(), single.model.state_dict()
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-12) for k in a)
    assert [r["val_loss"] for r in m0.history] == pytest.approx([r["val_loss"] for r in single.history], rel=1e-10)


def test_a_stuck_run_resumes_stuck(tiny_data, tmp_path, monkeypatch):
    """The restarts and the stuck flag are in last.pt: a resumed stuck run stops again at once."""
    _reject(monkeypatch, LMSubsample)
    fit(_config(tiny_data, tmp_path))
    monkeypatch.undo()
    again = fit(resume=str(tmp_path / "run"), epochs=20)
    assert again.stopped == "lm_stuck" and again.steps == 16 and again.epochs == 5


@pytest.mark.parametrize("cls,kw", [(LMSubsample, {}), (EnsembleLM, {"seeds": [3, 4]})], ids=["single", "ensemble"])
def test_an_interrupted_run_keeps_its_restarts(tiny_data, tmp_path, monkeypatch, cls, kw):
    """Interrupted at step 8 (after the first restart), resumed: stuck at step 15 with 2 restarts, as the run
    that was not interrupted (the restarts are in last.pt / ensemble_last.pt)."""
    import signal

    from vpintegrator.training import TrainingInterrupted

    _reject(monkeypatch, cls)
    original, calls = cls.step, {"n": 0}

    def step_then_signal(self):
        calls["n"] += 1
        if calls["n"] == 8:
            signal.raise_signal(signal.SIGINT)
        return original(self)

    monkeypatch.setattr(cls, "step", step_then_signal)
    with pytest.raises(TrainingInterrupted):
        fit(_config(tiny_data, tmp_path, **kw))
    monkeypatch.setattr(cls, "step", original)
    result = fit(resume=str(tmp_path / "run"))
    for run in result.runs:
        s = json.loads((run.run_dir / "summary.json").read_text())
        assert (s["stopped"], s["steps"], s["lm_restarts"]) == ("lm_stuck", 15, LevenbergMarquardt.RESTARTS)
