"""The failure rule of a comparison run, for every row kind and every selection: a row that fails (its step
map raises, here on its second block) is marked — its ``failed_step`` in the rollout file, the ``failed``
column of the table, the report's ``failures`` with the first failed row's data-file index (−1 for a held-out
condition) and the reason — and the rest of the rollout completes, whether the run rolls out ``traj``,
only ``heldout`` conditions, or shards of its selection (the index file)."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.data import generate, load_spec
from vpintegrator.jobs.shards import shard_path
from vpintegrator.rollout import RolloutConfig, read_rollout, run_rollouts
from vpintegrator.rollout import methods as row_registry
from vpintegrator.rollout.steps import IntegratorStep

N_STEPS, CHUNK = 20, 8  # the row raises in its second block: states 0 .. 7 written, failure at step 8


class _Boom(IntegratorStep):
    """RK4 whose second block raises (a user's row, model or fitted row failing mid-run)."""

    def start(self, window0, limit):
        self._calls = 0
        return super().start(window0, limit)

    def generate(self, n):
        self._calls += 1
        if self._calls > 1:
            raise RuntimeError("boom: the row's own failure")
        return super().generate(n)


@pytest.fixture
def boom(monkeypatch):
    kind = row_registry.RowKind("boom", False, False, lambda req: _Boom(req.system, "rk4", req.dt), "fails")
    monkeypatch.setitem(row_registry.ROW_KINDS, "boom", kind)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "data.h5"
    generate(load_spec("rigid_body", n_traj=12, t_end=2.0), path, workers=1)  # dt 0.1: 20 steps
    return path


def _config(data, out, **kw):
    return RolloutConfig(data=str(data), out=str(out), integrators=["boom", "rk4", "implicit_midpoint"],
                         workers=1, chunk_steps=CHUNK, **kw)


def _check(report, out, n_traj, first_traj):
    """``boom`` marked everywhere, every other row complete."""
    f = report.failures["boom"]
    assert (f.n_failed, f.traj, f.step) == (n_traj, first_traj, CHUNK) and "RuntimeError: boom" in f.reason
    assert "boom: failed" in f.line() and set(report.failures) == {"boom"}
    res = read_rollout(out)
    assert res.methods["boom"].failed_step.tolist() == [CHUNK] * n_traj
    y = res.methods["boom"].y
    assert np.isfinite(y[:, :CHUNK]).all() and np.isnan(y[:, CHUNK:]).all()
    np.testing.assert_array_equal(y[:, :CHUNK], res.methods["rk4"].y[:, :CHUNK])  # the same map until it raised
    for label in ("rk4", "implicit_midpoint"):
        assert (res.methods[label].failed_step == -1).all() and np.isfinite(res.methods[label].y).all()
    table = {r["method"]: r for r in res.table}
    assert table["boom"]["failed"] == n_traj and table["rk4"]["failed"] == 0
    assert np.isfinite(table["implicit_midpoint"]["final_rel_error"])


def test_traj_selection(boom, data, tmp_path):
    out = tmp_path / "r.h5"
    report = run_rollouts(_config(data, out, traj=[3, 5, 9]))
    _check(report, out, 3, 3)
    assert [r["method"] for r in report.rows] == ["boom", "rk4", "implicit_midpoint"]
    assert "boom" in out.with_suffix(".md").read_text()


def test_heldout_only(boom, data, tmp_path):
    out = tmp_path / "h.h5"
    report = run_rollouts(_config(data, out, heldout=4, t_end=2.0))
    assert read_rollout(out).traj_index.tolist() == [-1] * 4
    _check(report, out, 4, -1)  # a held-out condition: no data-file index


def test_shards(boom, data, tmp_path):
    out = tmp_path / "s.h5"
    for i in (1, 2):
        report = run_rollouts(_config(data, out, traj=list(range(2, 12))), shard=f"{i}/2")
        assert report.failures["boom"].traj == (2 if i == 1 else 7)
    whole = run_rollouts(_config(data, tmp_path / "whole.h5", traj=list(range(2, 12))))
    _check(whole, tmp_path / "whole.h5", 10, 2)
    res = read_rollout(out)  # the index of both shards
    assert res.methods["boom"].failed_step.tolist() == [CHUNK] * 10
    assert {r["method"]: r["failed"] for r in res.table} == {"boom": 10, "rk4": 0, "implicit_midpoint": 0}
    assert read_rollout(shard_path(out, (2, 2))).methods["boom"].meta["failure_reason"].startswith("RuntimeError")


def test_cli_marks_the_row_and_exits_zero(boom, data, tmp_path):
    import json

    from click.testing import CliRunner

    from vpintegrator.cli.rollout import main as vp_rollout

    out = tmp_path / "c.h5"
    res = CliRunner().invoke(vp_rollout, ["--set", f"data={json.dumps(str(data))}", "--out", str(out), "--integrators",
                                          "boom,rk4", "--heldout", "2", "--set", f"chunk_steps={CHUNK}", "-q"])
    assert res.exit_code == 0, res.output
    assert "Warning: boom: failed, 2 of 2 trajectories: RuntimeError: boom" in res.output
    assert "Traceback" not in res.output and "rk4" in res.output


@pytest.fixture(scope="module")
def model(data, tmp_path_factory):
    """A small VPT trained one epoch on ``data``."""
    from vpintegrator.training import fit

    out = tmp_path_factory.mktemp("model") / "run"
    fit(dict(data=[str(data)], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=1,
             batch_size=256, dtype="float64", seed=2, out=str(out)))
    return out


@pytest.mark.parametrize("engine", ["host", "device"])
def test_a_model_that_raises_on_either_engine(data, model, tmp_path, engine):
    from vpintegrator.models import load_model

    from vpintegrator.rollout.write import WARM_UP_CALLS

    net = load_model(str(model))
    forward, calls = net.forward, [0]
    # the host engine warms every row up before timing it (WARM_UP_CALLS calls of the map: issue 65)
    warm = WARM_UP_CALLS if engine == "host" else 0

    def failing(*args, **kw):  # a user's model failing once it has made a few blocks
        calls[0] += 1
        if calls[0] > 3 + warm:
            raise RuntimeError("boom: the model's own failure")
        return forward(*args, **kw)

    net.forward = failing
    out = tmp_path / "m.h5"
    report = run_rollouts(RolloutConfig(data=str(data), out=str(out), models=[("m", net)], integrators=["rk4"],
                                        traj=[0, 4], heldout=1, engine=engine, device="cpu", fast_step=False,
                                        chunk_steps=2, blowup=1e12, workers=1))
    f = report.failures["m"]
    assert f.n_failed == 3 and "RuntimeError: boom" in str(f.reason), (f.line(), calls)
    assert set(report.failures) == {"m"}
    res = read_rollout(out)
    k = int(res.methods["m"].failed_step[0])
    assert k % 2 == 0 and k >= 2 and res.methods["m"].failed_step.tolist() == [k] * 3
    assert res.methods["m"].meta["engine"] == engine
    assert np.isfinite(res.methods["m"].y[:, :k]).all() and np.isnan(res.methods["m"].y[:, k:]).all()
    assert np.isnan(res.metrics["m"].rel_error[:, k:]).all() and np.isfinite(res.metrics["m"].rel_error[:, :k]).all()
    assert (res.methods["rk4"].failed_step == -1).all()


class _ColdKernel(IntegratorStep):
    """RK4 whose first call in the process spends 0.5 CPU s first, as a numba kernel compiles on a cold cache."""

    compiled = False

    def generate(self, n):
        if not _ColdKernel.compiled:
            _ColdKernel.compiled = True
            from vpintegrator.clock import thread_cpu

            tic = thread_cpu()
            while thread_cpu() - tic < 0.5:
                pass
        return super().generate(n)


def test_compilation_is_the_rows_set_up_never_its_cost_per_step(data, tmp_path, monkeypatch):
    """Issue 65: a fresh install's first table prices a row as a warm second one would. The row is warmed up
    on its own trajectories before it is timed: the compile-like first call lands in ``warmup_seconds``."""
    kind = row_registry.RowKind("cold", False, False, lambda req: _ColdKernel(req.system, "rk4", req.dt), "cold")
    monkeypatch.setitem(row_registry.ROW_KINDS, "cold", kind)
    monkeypatch.setattr(_ColdKernel, "compiled", False)
    out = tmp_path / "w.h5"
    run_rollouts(RolloutConfig(data=str(data), out=str(out), integrators=["cold"], heldout=2, chunk_steps=CHUNK,
                               workers=1))
    meta = read_rollout(out).methods["cold"].meta
    assert meta["warmup_seconds"] >= 0.5 and meta["seconds"] < 0.25, meta


class _FirstTimedRunSlow(IntegratorStep):
    """RK4 whose timed run (the first call for all N_STEPS steps: the warm-up asks for a few) spends 0.02 CPU s
    more, once: first-call work (fresh memory, cold caches) at the scale of a short row's steps."""

    long_calls = 0

    def generate(self, n):
        if n >= N_STEPS:
            _FirstTimedRunSlow.long_calls += 1
            if _FirstTimedRunSlow.long_calls == 1:
                from vpintegrator.clock import thread_cpu

                tic = thread_cpu()
                while thread_cpu() - tic < 0.02:
                    pass
        return super().generate(n)


def test_a_short_row_costs_the_least_of_its_timed_runs(data, tmp_path, monkeypatch):
    """A row whose timed run took under COST_REPEAT_BELOW CPU s is timed COST_REPEATS times (states not kept) and
    costs the least: one reading of a sub-millisecond run cannot tell first-call work from steps."""
    from vpintegrator.rollout.write import COST_REPEATS

    kind = row_registry.RowKind("slow1", False, False, lambda req: _FirstTimedRunSlow(req.system, "rk4", req.dt),
                                "slow1")
    monkeypatch.setitem(row_registry.ROW_KINDS, "slow1", kind)
    monkeypatch.setattr(_FirstTimedRunSlow, "long_calls", 0)
    out = tmp_path / "s.h5"
    run_rollouts(RolloutConfig(data=str(data), out=str(out), integrators=["slow1", "rk4"], heldout=2,
                               chunk_steps=1000, workers=1))
    res = read_rollout(out)
    meta = res.methods["slow1"].meta
    assert meta["cost_runs"] == COST_REPEATS and meta["seconds"] < 0.01, meta
    assert meta["seconds_per_step"] == pytest.approx((meta["seconds"] + meta["setup_seconds"]) / N_STEPS)  # its price
    assert _FirstTimedRunSlow.long_calls == COST_REPEATS  # one chunk a run
    # the states are the timed run's, untouched by the repeats
    assert np.array_equal(res.methods["slow1"].y, res.methods["rk4"].y)
