"""The fast training step (``fast_step``): which path runs where, and that it trains exactly as the eager step.

Without CUDA the graph step runs its body uncaptured (the same static buffers, warm-up and restore, one step
per batch size): these tests check it against the eager path bitwise. The CUDA tests check the capture.
"""

from __future__ import annotations

import json
import logging
import math
import os

import pytest
import torch
from click.testing import CliRunner

from vpintegrator import VPIntegratorError
from vpintegrator.cli.train import main as train_main
from vpintegrator.training import TrainConfig, ensemble, fast_step, fit, single
from vpintegrator.training.fast_step import GraphStep, portable_state, resolve_fast_step

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    """143 training windows (11 trajectories: one for validation, no test split) in batches of 32: four full
    batches and a last one of 15 per epoch."""
    base = dict(
        data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3, batch_size=32,
        dtype="float64", out=str(tmp_path / name), decay_epochs=3, test_fraction=0.0,
    )
    return base | kw


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _summary(result) -> dict:
    return json.loads((result.run_dir / "summary.json").read_text())


@pytest.fixture
def graph_on_cpu(monkeypatch):
    """Resolve fast_step (but "off") to "graph" on the CPU (uncaptured) and record the batch sizes of the graph steps."""
    sizes = []
    original = GraphStep.__init__

    def init(self, batch_loss, optimizer, shape, device, capture):
        sizes.append(shape)
        original(self, batch_loss, optimizer, shape, device, capture)

    for module in (single, ensemble):
        monkeypatch.setattr(module, "resolve_fast_step", lambda mode, *args: "off" if mode == "off" else "graph")
    monkeypatch.setattr(GraphStep, "__init__", init)
    return sizes


def test_graph_step_trains_bitwise_as_the_eager_step(tiny_data, tmp_path, graph_on_cpu):
    """Per-step schedule, a partial last batch, three epochs: the same losses and weights, bit for bit (the
    warm-up steps before a capture are undone exactly)."""
    fast = fit(_config(tiny_data, tmp_path, "fast"))
    assert graph_on_cpu == [(32,), (15,)]  # one graph step per batch size, built once
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off"))
    assert _summary(fast)["fast_step"] == "graph" and _summary(eager)["fast_step"] == "off"
    assert fast.steps == eager.steps == 15
    assert [h["train_loss"] for h in fast.history] == [h["train_loss"] for h in eager.history]
    assert [h["lr"] for h in fast.history] == [h["lr"] for h in eager.history]
    assert _same_weights(fast.model, eager.model)
    a = torch.load(tmp_path / "fast" / "last.pt", weights_only=True)["optimizer"]
    b = torch.load(tmp_path / "eager" / "last.pt", weights_only=True)["optimizer"]
    for sa, sb in zip(a["state"].values(), b["state"].values()):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_graph_step_resumes_exactly(tiny_data, tmp_path, graph_on_cpu):
    straight = fit(_config(tiny_data, tmp_path, "straight", fast_step="off", epochs=4, decay_epochs=4))
    fit(_config(tiny_data, tmp_path, "split", epochs=2, decay_epochs=4))
    resumed = fit(resume=tmp_path / "split", epochs=4)
    assert resumed.steps == straight.steps and _same_weights(straight.model, resumed.model)


def test_graph_step_trains_an_ensemble_bitwise_as_the_eager_step(tiny_data, tmp_path, graph_on_cpu):
    """The vmapped step of three members (their own batches: index (3, B)) through the graph step."""
    cfg = dict(seeds=[5, 9, 11], val_fraction=0.0, patience=1, lr=3e-2)
    fast = fit(_config(tiny_data, tmp_path, "fast", **cfg))
    assert graph_on_cpu == [(3, 32), (3, 28)]  # 156 windows without validation
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off", **cfg))
    for a, b in zip(fast.members, eager.members):
        assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
        assert a.stopped == b.stopped and _same_weights(a.model, b.model)
    summary = json.loads((fast.members[0].run_dir / "summary.json").read_text())
    assert summary["fast_step"] == "graph"


def test_auto_is_eager_on_the_cpu(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=1))
    assert _summary(result)["fast_step"] == "off"


def test_graph_on_the_cpu_is_a_one_line_error(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match=r"fast_step = 'graph' needs a CUDA device \(the run is on cpu\); "
                                                r"set fast_step = 'auto'") as info:
        fit(_config(tiny_data, tmp_path, device="cpu", fast_step="graph"))
    assert info.value.key == "fast_step" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("mode,optimizer,distributed,expected", [
    ("auto", "adam", False, "graph"),
    ("auto", "adamw", False, "graph"),
    ("auto", "rmsprop", False, "graph"),
    ("auto", "sgd", False, "off"),
    ("auto", "lm", False, "off"),
    ("auto", "adam", True, "off"),
    ("off", "adam", False, "off"),
    ("compile", "adam", False, "compile"),
    ("graph", "sgd", False, r"needs one of the optimizers adam, adamw, rmsprop \(got 'sgd'\)"),
    ("graph", "adam", True, "needs a single process"),
    ("compile", "lm", False, "not optimizer 'lm'"),
    ("compile", "adam", True, r"not DDP \(torchrun\)"),
    ("fast", "adam", False, "fast_step must be one of auto, off, graph, compile; got 'fast'"),
])
def test_resolve_fast_step_on_cuda(mode, optimizer, distributed, expected):
    """The rules for a CUDA device (a torch.device needs no GPU to exist)."""
    cuda = torch.device("cuda")
    if expected in ("graph", "off", "compile"):
        assert resolve_fast_step(mode, optimizer, cuda, distributed) == expected
    else:
        with pytest.raises(VPIntegratorError, match=expected) as info:
            resolve_fast_step(mode, optimizer, cuda, distributed)
        assert info.value.key == "fast_step" and "\n" not in str(info.value)


def test_config_checks_fast_step(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match="fast_step must be auto, off, graph, compile; got 'on'"):
        TrainConfig.from_dict(_config(tiny_data, tmp_path, fast_step="on"))
    # an ensemble's vmapped step compiles too (its component-wise layers under vmap: tests/test_ensemble_compile.py)
    assert TrainConfig.from_dict(_config(tiny_data, tmp_path, fast_step="compile", ensemble=2)).fast_step == "compile"


def test_portable_state_makes_a_capturable_state_resumable_anywhere():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=torch.tensor(0.01), fused=True)
    opt.param_groups[0]["capturable"] = True
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5)
    state, sched_state = portable_state(opt.state_dict()), portable_state(sched.state_dict())
    group = state["param_groups"][0]
    assert type(group["lr"]) is float and group["lr"] == pytest.approx(0.005) and group["capturable"] is False
    assert all(type(v) is float for v in sched_state["_last_lr"])
    assert opt.param_groups[0]["capturable"] is True  # the live optimiser is left alone
    fresh = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))], lr=0.01)
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == pytest.approx(0.005)


def test_cli_fast_step_flag(tiny_data, tmp_path):
    out = tmp_path / "cli"
    args = ["--data", tiny_data, "--model", "vpt", "--seq-len", "2", "--epochs", "1", "--batch-size", "32",
            "--device", "cpu", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(train_main, args + ["--fast-step", "off"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["fast_step"] == "off"
    bad = CliRunner().invoke(train_main, args[:-3] + ["--out", str(tmp_path / "x"), "--fast-step", "graph"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    assert "--fast-step" in bad.output and "needs a CUDA device" in bad.output


def _weight_gap(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest difference of two models' weights, relative to the largest weight of each tensor."""
    sb = b.state_dict()
    return max(float((v - sb[k]).abs().max()) / (float(sb[k].abs().max()) or 1.0) for k, v in a.state_dict().items())


@pytest.mark.slow  # inductor compilation on the CPU: minutes into an empty cache, tens of seconds from a warm one
def test_compiled_step_equals_the_eager_step_to_round_off_and_its_build_is_cached(tiny_data, tmp_path, monkeypatch):
    """torch.compile of the loss (the layers' component form, fused by inductor) on the CPU, float64: after one
    step and after one epoch (5 steps) the same training as the eager step to round-off. Not over many steps:
    inductor reassociates sums, and training amplifies a round-off difference step by step as it does any
    other (docs/benchmarks.md, "The compiled step against the eager step"). The build goes to the compile cache
    (``compile_cache_dir``), where a second run of the same step finds it and trains bit for bit the same."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    for name, stop in (("step", dict(max_steps=1, epochs=None)), ("epoch", dict(epochs=1))):
        compiled = fit(_config(tiny_data, tmp_path, f"compiled_{name}", fast_step="compile", **stop))
        eager = fit(_config(tiny_data, tmp_path, f"eager_{name}", fast_step="off", **stop))
        assert _summary(compiled)["fast_step_used"] == "compile"
        assert _weight_gap(compiled.model, eager.model) <= 1e-13, name
        if name == "epoch":
            assert compiled.history[0]["train_loss"] == pytest.approx(eager.history[0]["train_loss"], rel=1e-13)
            assert compiled.history[0]["val_loss"] == pytest.approx(eager.history[0]["val_loss"], rel=1e-13)
    assert list((tmp_path / "inductor").glob("fxgraph/*/*")), "inductor wrote no FX graph to the compile cache"
    torch._dynamo.reset()  # the next fit compiles afresh: only the on-disk cache can spare it the build
    hits = counters["inductor"]["fxgraph_cache_hit"]
    again = fit(_config(tiny_data, tmp_path, "compiled_again", fast_step="compile", epochs=1))
    assert counters["inductor"]["fxgraph_cache_hit"] > hits
    assert again.history[0]["train_loss"] == compiled.history[0]["train_loss"]
    assert _weight_gap(again.model, compiled.model) == 0.0


def test_compile_cache_dir_is_torchs_setting_or_the_users_cache(tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert fast_step.compile_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what importing inductor sets: not a choice
    assert fast_step.compile_cache_dir() == tmp_path / "xdg" / "vpintegrator" / "inductor"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert fast_step.compile_cache_dir() == tmp_path / "xdg" / "vpintegrator" / "inductor"
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters())
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")  # restored after the test: FastStep sets it
    step = fast_step.FastStep("compile", lambda i: model(torch.ones(len(i), 2)).sum(), opt, torch.device("cpu"))
    assert step.cache == os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "xdg" / "vpintegrator" / "inductor")
    assert (tmp_path / "xdg" / "vpintegrator" / "inductor").is_dir()
    assert torch._inductor.config.fx_graph_cache and torch._functorch.config.enable_autograd_cache


def test_build_seconds_are_reported_apart_from_the_steps(tiny_data, tmp_path, graph_on_cpu, caplog):
    """Each batch shape's build (warm-up, check) is timed on its own: summary.json's fast_step_build_seconds,
    one INFO line per build; the eager step builds nothing."""
    with caplog.at_level(logging.INFO, logger="vpintegrator.training.fast_step"):
        graph = fit(_config(tiny_data, tmp_path, "graph", fast_step="auto", epochs=1))
    built = _summary(graph)["fast_step_build_seconds"]
    assert 0 < built <= _summary(graph)["wall_time"]
    lines = [r.getMessage() for r in caplog.records if "built in" in r.getMessage()]
    assert len(lines) == 2 == len(graph_on_cpu)  # the full batch and the last, partial one
    assert lines[0].startswith("fast_step = 'graph': the step for batches of 32 built in ")
    assert sum(float(line.split("built in ")[1].split(" s")[0]) for line in lines) == pytest.approx(built, abs=0.01)
    assert _summary(fit(_config(tiny_data, tmp_path, "eager", fast_step="off", epochs=1)))["fast_step_build_seconds"] \
        in (None, 0.0)


# -- auto never fails where off works: the fallback and the agreement check ------------------------------


class _FakeGraph:
    """Stands in for a captured CUDA graph on the CPU: its replay runs the step's body and then, with
    ``scale``, moves every parameter by ``scale`` times this step's update (a replay that errs)."""

    def __init__(self, body, scale: float) -> None:
        self.body, self.scale = body, scale
        self.params = [p for g in body.__self__.optimizer.param_groups for p in g["params"]]
        self.loss = torch.empty(0)  # the static loss tensor: replay points it at the step's loss

    def replay(self) -> None:
        before = [p.detach().clone() for p in self.params]
        out = self.body()
        with torch.no_grad():
            for p, b in zip(self.params, before):
                p.add_(self.scale * (p - b))
        self.loss.data = out


@pytest.fixture
def fake_capture(monkeypatch):
    """Resolve fast_step (but "off") to "graph" on the CPU, where the steps are then "captured" by a fake:
    ``fake_capture.fail`` names batch shapes whose capture raises (``"all"``: every one), ``fake_capture.scale``
    is the fake replay's error (0: the step exactly)."""

    class Fake:
        fail: object = ()
        scale = 0.0
        captured: tuple = ()

    def capture(body, device):
        shape = tuple(body.__self__.index.shape)
        if Fake.fail == "all" or shape in Fake.fail:
            raise RuntimeError("operation not permitted when stream is capturing\nCUDA kernel errors ...")
        Fake.captured += (shape,)
        graph = _FakeGraph(body, Fake.scale)
        return graph, graph.loss

    for module in (single, ensemble):
        monkeypatch.setattr(module, "resolve_fast_step", lambda mode, *args: "off" if mode == "off" else "graph")
    monkeypatch.setattr(fast_step, "_captures", lambda device: True)
    monkeypatch.setattr(fast_step, "capture_graph", capture)
    return Fake


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("vpintegrator") and r.levelno >= logging.WARNING]


def _same_run(a, b) -> bool:
    return ([h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
            and [h["val_loss"] for h in a.history] == [h["val_loss"] for h in b.history]
            and _same_weights(a.model, b.model))


@pytest.mark.parametrize("fail,scale,reason", [
    ("all", 0.0, "building the graph step raised RuntimeError: operation not permitted when stream is capturing"),
    ((), 1e-2, "the first replayed step disagrees with the eager step"),
    ([(15,)], 0.0, "building the graph step raised RuntimeError"),  # the partial batch's graph, after 4 graph steps
])
def test_auto_falls_back_to_the_eager_step(tiny_data, tmp_path, fake_capture, caplog, fail, scale, reason):
    """A capture that raises, or a replay that errs, under auto: one warning line saying why, then the eager
    step from the state before that step: the run is the eager run's, bit for bit."""
    fake_capture.fail, fake_capture.scale = fail, scale
    with caplog.at_level(logging.WARNING):
        auto = fit(_config(tiny_data, tmp_path, "auto"))
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off"))
    [warning] = _warnings(caplog)
    assert warning.startswith("fast_step = 'auto' runs the eager step from here: " + reason)
    assert "\n" not in warning
    assert _same_run(auto, eager)
    summary = _summary(auto)
    assert summary["fast_step"] == "graph" and summary["fast_step_used"] == "off"
    assert summary["fast_step_fallback"].startswith(reason)
    assert _summary(eager)["fast_step_used"] == "off" and _summary(eager)["fast_step_fallback"] is None


def test_auto_keeps_a_replay_that_agrees(tiny_data, tmp_path, fake_capture, caplog):
    """A faithful replay passes the check, and the check (an eager step, then the state put back, then the
    replay) leaves the run exactly the eager run."""
    with caplog.at_level(logging.WARNING):
        auto = fit(_config(tiny_data, tmp_path, "auto"))
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off"))
    assert fake_capture.captured == ((32,), (15,)) and _warnings(caplog) == []
    assert _same_run(auto, eager)
    summary = _summary(auto)
    assert summary["fast_step_used"] == "graph" and summary["fast_step_fallback"] is None


@pytest.mark.parametrize("dtype,scale,agrees", [
    ("float64", 1e-9, True), ("float64", 1e-5, False), ("float32", 1e-5, True), ("float32", 1e-2, False),
])
def test_agreement_tolerance_follows_the_dtype(tiny_data, tmp_path, fake_capture, dtype, scale, agrees):
    """The check's tolerance (AGREEMENT_RTOL: 1e-7 for float64, 1e-3 for float32) on the parameter update."""
    fake_capture.scale = scale
    summary = _summary(fit(_config(tiny_data, tmp_path, dtype=dtype, epochs=1)))
    assert summary["fast_step_used"] == ("graph" if agrees else "off")
    assert (summary["fast_step_fallback"] is None) == agrees


@pytest.mark.parametrize("fail,scale,reason", [
    ("all", 0.0, r"fast_step = 'graph': building the graph step raised RuntimeError: operation not permitted"),
    ((), 1e-2, r"fast_step = 'graph': the first replayed step disagrees with the eager step \(loss"),
])
def test_explicit_graph_raises_where_auto_falls_back(tiny_data, tmp_path, fake_capture, fail, scale, reason):
    fake_capture.fail, fake_capture.scale = fail, scale
    with pytest.raises(VPIntegratorError, match=reason) as info:
        fit(_config(tiny_data, tmp_path, fast_step="graph"))
    assert info.value.key == "fast_step" and "\n" not in str(info.value)
    assert "set fast_step = 'auto' (the eager step where this fails) or 'off'" in str(info.value)


@pytest.mark.parametrize("fail,scale", [("all", 0.0), ((), 1e-2)])
def test_auto_falls_back_in_an_ensemble(tiny_data, tmp_path, fake_capture, caplog, fail, scale):
    fake_capture.fail, fake_capture.scale = fail, scale
    cfg = dict(seeds=[5, 9], val_fraction=0.0, epochs=2)
    with caplog.at_level(logging.WARNING):
        auto = fit(_config(tiny_data, tmp_path, "auto", **cfg))
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off", **cfg))
    assert len(_warnings(caplog)) == 1
    for a, b in zip(auto.members, eager.members):
        assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
        assert _same_weights(a.model, b.model)
        summary = json.loads((a.run_dir / "summary.json").read_text())
        assert summary["fast_step_used"] == "off" and summary["fast_step_fallback"]


def test_cli_falls_back_with_one_warning_and_explicit_graph_fails_in_one_line(tiny_data, tmp_path, fake_capture,
                                                                             caplog):
    fake_capture.fail = "all"
    out = tmp_path / "cli"
    args = ["--data", tiny_data, "--model", "vpt", "--seq-len", "2", "--epochs", "1", "--batch-size", "32",
            "--device", "cpu", "--out", str(out), "--quiet"]
    with caplog.at_level(logging.WARNING):
        result = CliRunner().invoke(train_main, args)
    assert result.exit_code == 0, result.output
    [warning] = _warnings(caplog)
    assert "runs the eager step from here: building the graph step raised" in warning
    assert json.loads((out / "summary.json").read_text())["fast_step_used"] == "off"
    bad = CliRunner().invoke(train_main, args[:-3] + ["--out", str(tmp_path / "x"), "--fast-step", "graph"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    assert "--fast-step = 'graph': building the graph step raised RuntimeError" in bad.output


# -- CUDA ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["graph", "compile"])
def test_cuda_graph_step_equals_the_eager_step(tiny_data, tmp_path, mode):
    """The captured step (and the compiled one) against the eager step on CUDA, float64, partial last batch and
    per-step schedule: equal losses to float rounding. Why 1e-6 relative and not 1e-12: the capturable
    optimiser's lr is a float32 tensor (~6e-8 relative off the eager float lr at every step), and the compiled
    step's Triton kernels fuse and reorder float64 reductions; over the run's steps these stay below 1e-7,
    while a wrong update (a stale input, a missed step) moves the loss by percents."""
    fast = fit(_config(tiny_data, tmp_path, "fast", device="cuda", fast_step=mode))
    eager = fit(_config(tiny_data, tmp_path, "eager", device="cuda", fast_step="off"))
    assert _summary(fast)["fast_step"] == mode
    for a, b in zip(fast.history, eager.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)
        assert a["lr"] == pytest.approx(b["lr"], rel=1e-6)
    for (name, p), q in zip(fast.model.named_parameters(), eager.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.gpu
def test_cuda_graph_ensemble_equals_the_eager_ensemble(tiny_data, tmp_path):
    cfg = dict(seeds=[5, 9], device="cuda")
    fast = fit(_config(tiny_data, tmp_path, "fast", **cfg))
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off", **cfg))
    # 1e-6: the float32 lr tensor of the capturable optimiser, as in the single-model test above
    for a, b in zip(fast.members, eager.members):
        for ra, rb in zip(a.history, b.history):
            assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-6)


@pytest.mark.gpu
def test_cuda_graph_run_resumes_on_the_cpu(tiny_data, tmp_path):
    """last.pt of a graph run holds the eager optimiser state (lr a float, not capturable): it resumes
    anywhere, and the CUDA graph run resumed on CUDA continues as one run."""
    fit(_config(tiny_data, tmp_path, "split", device="cuda", epochs=2))
    ckpt = torch.load(tmp_path / "split" / "last.pt", weights_only=True)
    group = ckpt["optimizer"]["param_groups"][0]
    assert type(group["lr"]) is float and not group["capturable"]
    resumed = fit(resume=tmp_path / "split", epochs=3, device="cpu")
    assert resumed.epochs == 3 and math.isfinite(resumed.train_loss)


def _params_of(body) -> list[torch.Tensor]:
    return [p for g in body.__self__.optimizer.param_groups for p in g["params"]]


@pytest.mark.gpu
@pytest.mark.parametrize("failure", ["capture raises", "replay errs"])
def test_cuda_auto_falls_back_to_the_eager_run(tiny_data, tmp_path, monkeypatch, caplog, failure):
    """On CUDA (capturable optimiser, lr a device tensor, real capture): a capture that raises, or a real
    replay followed by a wrong update, makes auto put everything back and train on as fast_step = 'off'."""
    real = fast_step.capture_graph

    class Erring:
        def __init__(self, graph, params):
            self.graph, self.params = graph, params

        def replay(self):
            self.graph.replay()
            with torch.no_grad():
                for p in self.params:
                    p.add_(1e-3)

    def capture(body, device):
        if failure == "capture raises":
            raise RuntimeError("operation not permitted when stream is capturing")
        graph, loss = real(body, device)
        return Erring(graph, _params_of(body)), loss

    monkeypatch.setattr(fast_step, "capture_graph", capture)
    with caplog.at_level(logging.WARNING):
        auto = fit(_config(tiny_data, tmp_path, "auto", device="cuda"))
    eager = fit(_config(tiny_data, tmp_path, "eager", device="cuda", fast_step="off"))
    assert len(_warnings(caplog)) == 1
    summary = _summary(auto)
    assert summary["fast_step_used"] == "off"
    assert ("disagrees" if failure == "replay errs" else "operation not permitted") in summary["fast_step_fallback"]
    # to float rounding: the step that falls back reads the lr the schedule wrote into the float32 tensor
    # (~6e-8 relative off the eager float lr): 1e-6 relative, far below the erring replay's 1e-3 a step
    for a, b in zip(auto.history, eager.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
    for (name, p), q in zip(auto.model.named_parameters(), eager.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.gpu
def test_cuda_graph_run_resumes_on_cuda(tiny_data, tmp_path):
    """last.pt holds the eager optimiser state (step counts on the host): resumed on CUDA the capturable step
    gets them on the device and the run goes on as one graph run."""
    straight = fit(_config(tiny_data, tmp_path, "straight", device="cuda"))
    fit(_config(tiny_data, tmp_path, "split", device="cuda", epochs=2))
    resumed = fit(resume=tmp_path / "split", epochs=3)
    assert _summary(resumed)["fast_step_used"] == "graph" and _summary(resumed)["fast_step_fallback"] is None
    assert resumed.steps == straight.steps
    # both graph runs: the resumed one differs only where its optimiser state went through the float lr of
    # last.pt and back into the float32 device tensor (~6e-8 relative): 1e-6 relative, far below a lost step
    for (name, p), q in zip(resumed.model.named_parameters(), straight.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-9, msg=name)
