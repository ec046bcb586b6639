"""The fast training step (``fast_step``): which path runs where, and that it trains exactly as the eager step.

Without CUDA the graph step runs its body uncaptured (the same static buffers, warm-up and restore, one step
per batch size): these tests check it against the eager path bitwise. The CUDA tests check the capture.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from vpintegrator import VPIntegratorError
from vpintegrator.cli.train import main as train_main
from vpintegrator.training import TrainConfig, ensemble, fit, loop
from vpintegrator.training.fast_step import GraphStep, portable_state, resolve_fast_step

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    """143 training windows in batches of 32: four full batches and a last one of 15 per epoch."""
    base = dict(
        data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3, batch_size=32,
        dtype="float64", out=str(tmp_path / name), decay_epochs=3,
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

    for module in (loop, ensemble):
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
    with pytest.raises(VPIntegratorError, match="fast_step = 'compile' is for single runs") as info:
        TrainConfig.from_dict(_config(tiny_data, tmp_path, fast_step="compile", ensemble=2))
    assert info.value.key == "fast_step"


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
            "--device", "cpu", "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(train_main, args + ["--fast-step", "off"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["fast_step"] == "off"
    bad = CliRunner().invoke(train_main, args[:-3] + ["--out", str(tmp_path / "x"), "--fast-step", "graph"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    assert "--fast-step" in bad.output and "needs a CUDA device" in bad.output


@pytest.mark.slow  # ~50-70 s of inductor compilation on the CPU
def test_compiled_step_trains_as_the_eager_step(tiny_data, tmp_path):
    """torch.compile of the loss (the layers' unfused path, fused by inductor) on the CPU: the same training
    to float64 rounding."""
    compiled = fit(_config(tiny_data, tmp_path, "compiled", fast_step="compile", epochs=2))
    eager = fit(_config(tiny_data, tmp_path, "eager", fast_step="off", epochs=2))
    assert _summary(compiled)["fast_step"] == "compile"
    for a, b in zip(compiled.history, eager.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-9)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-9)


# -- CUDA ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["graph", "compile"])
def test_cuda_graph_step_equals_the_eager_step(tiny_data, tmp_path, mode):
    """The captured step (and the compiled one) against the eager step on CUDA, float64, partial last batch and
    per-step schedule: equal losses to float rounding (the capturable optimiser's lr is a float32 tensor)."""
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
