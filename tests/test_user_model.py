"""A model family defined outside the package: ``@register_model`` beside its class, the class by import
path ``"package.module:ClassName"`` in ``build_model``, ``vp-train`` (flag and config) and, from the
``model_class`` its files record, ``vp-rollout`` and its work–precision table in a fresh process; its own
layer packed for the compiled runner through ``register_packer``; its volume claim audited by
``assert_preserves``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from vpintegrator import VPIntegratorError, build_model, list_models, load_model, save_model
from vpintegrator.models import default_model_config, model_class, register_model, registry
from vpintegrator.testing import assert_preserves

pytestmark = pytest.mark.usefixtures("one_thread")

SHIPPED = ["vpff", "vpt", "st", "la_sympnet", "g_sympnet", "symplectic_transformer", "lpnet", "lp_transformer"]
SHIPPED_CONTEXT = ["lpnet_ctx", "g_sympnet_ctx", "vpff_ctx"]  # the context-conditioned families, registered after
SHIPPED_FIELDS = ["hnn", "lphnn", "divfree", "node"]  # the learned vector fields
SHIPPED_DELAY = ["delay_mlp", "delay_vpff"]  # maps of the delay vector (issue 55)
SHIPPED_RECURRENT = ["gru", "lru"]  # the window read in order by a recurrent network, registered last

# the user's module (written to tmp_path, imported from there: not part of vpintegrator)
MODULE = '''
import torch
from torch import nn

from vpintegrator.models import register_model
from vpintegrator.nn import VolumePreservingLowerLayer, VolumePreservingUpperLayer


class Shift(nn.Module):
    """z -> z + b on every state (its Jacobian is the identity)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x + self.bias


@register_model(defaults={"n_pairs": 2})
class ShearNet(nn.Module):
    model_name = "shear_net"
    preserves = ("volume",)

    def __init__(self, dim: int, n_pairs: int = 1, seq_len: int = 1):
        super().__init__()
        self.dim, self.seq_len, self.pred_window = dim, seq_len, seq_len
        pairs = [L(dim, activation="tanh") for _ in range(n_pairs)
                 for L in (VolumePreservingLowerLayer, VolumePreservingUpperLayer)]
        self.layers = nn.Sequential(*pairs, Shift(dim))

    def forward(self, x):
        return self.layers(x)

    def window_chain(self):
        return list(self.layers)


class Plain(nn.Module):  # no model_name, no config: goes by its import path only
    def __init__(self, dim: int, seq_len: int = 1):
        super().__init__()
        self.dim, self.seq_len, self.pred_window = dim, seq_len, seq_len
        self.linear = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.linear(x)


try:
    from vpintegrator.rollout.numba_model import ACTIVATIONS, DENSE, OP_RESIDUAL, register_packer

    @register_packer(Shift)
    def pack_shift(pk, layer, dim):  # z + identity(0 z + b)
        pk.op(OP_RESIDUAL, DENSE, pk.add(torch.zeros(dim, dim)), pk.add(layer.bias), ACTIVATIONS["identity"])
except ImportError:
    pass
'''

PATH = "my_user_nets:ShearNet"


@pytest.fixture
def user_nets(tmp_path, monkeypatch):
    """``my_user_nets`` importable from ``tmp_path/nets`` (sys.path here; PYTHONPATH for subprocesses)."""
    folder = tmp_path / "nets"
    folder.mkdir()
    (folder / "my_user_nets.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("my_user_nets", None)
    yield folder
    module = sys.modules.pop("my_user_nets", None)
    registry._MODELS.pop("shear_net", None)
    registry._PAPER_CONFIGS.pop("shear_net", None)
    if module is not None:
        from vpintegrator.rollout import numba_model

        numba_model._PACKERS.pop(module.Shift, None)


def _randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


# ------------------------------------------------------------------------------ the registry


def test_register_model_as_decorator_and_call():
    assert list(registry._MODELS)[:8] == SHIPPED  # each shipped family registered itself, in this order
    assert default_model_config("vpt") == dict(seq_len=3, n_blocks=2, n_linear=1, L=3, activation="tanh", skew_sym=True)

    def family(name):
        class Net(nn.Module):
            model_name = name

            def __init__(self, dim: int, width: int = 1) -> None:
                super().__init__()
                self.dim, self.seq_len, self.pred_window, self.width = dim, 1, 1, width

        return Net

    names = ["t_bare", "t_defaults", "t_empty", "t_call"]
    try:
        bare = register_model(family("t_bare"))  # what the bare @register_model does
        assert register_model(defaults={"width": 5})(family("t_defaults")).model_name == "t_defaults"
        assert register_model()(family("t_empty")).model_name == "t_empty"
        assert register_model(family("t_call"), {"width": 7}).model_name == "t_call"
        assert model_class("t_bare") is bare and default_model_config("t_bare") == {}
        assert build_model("t_defaults", dim=2).width == 5 and build_model("t_call", dim=2, width=2).width == 2
        assert build_model("t_empty", dim=2).config == {"name": "t_empty", "width": 1, "dim": 2}  # recorded for it
        assert set(names) <= set(list_models())
        with pytest.raises(VPIntegratorError, match="the name 'vpt' is taken by VolumePreservingTransformer"):
            register_model(family("vpt"))
        with pytest.raises(VPIntegratorError, match="not a torch.nn.Module subclass"):
            register_model(int)
    finally:
        for name in names:
            registry._MODELS.pop(name, None)
            registry._PAPER_CONFIGS.pop(name, None)
    assert list_models() == sorted(SHIPPED + SHIPPED_CONTEXT + SHIPPED_FIELDS + SHIPPED_DELAY + SHIPPED_RECURRENT)


def test_a_model_by_import_path(user_nets, tmp_path):
    model = build_model(PATH, dim=3)
    assert type(model).__module__ == "my_user_nets"
    assert model.config == {"name": "shear_net", "n_pairs": 2, "seq_len": 1, "dim": 3, "model_class": PATH}
    assert "shear_net" in list_models() and default_model_config(PATH) == {"n_pairs": 2}
    again = build_model(**model.config)  # the config round-trips
    assert type(again) is type(model) and again.config == model.config

    plain = build_model("my_user_nets:Plain", dim=2)  # no model_name: its path is its name
    assert plain.config == {"name": "my_user_nets:Plain", "seq_len": 1, "dim": 2, "model_class": "my_user_nets:Plain"}

    _randomise(model)
    file = save_model(model, tmp_path / "m.pt")
    assert torch.load(file, weights_only=True)["config"]["model_class"] == PATH
    loaded = load_model(file)
    x = torch.randn(4, 1, 3)
    assert type(loaded) is type(model) and torch.equal(loaded(x), model(x))


@pytest.mark.parametrize("path, match", [
    ("no_such_nets:Net", r"model 'no_such_nets:Net': cannot import module 'no_such_nets' .*; make it importable "
                         r"\(install it, or put its folder on PYTHONPATH\)"),
    ("my_user_nets:Nope", "model 'my_user_nets:Nope': module 'my_user_nets' has no attribute 'Nope'"),
    ("my_user_nets:torch", "model 'my_user_nets:torch': torch is not a torch.nn.Module subclass"),
    ("shear_nett", r"unknown model 'shear_nett'.*\(or your own model class as 'package.module:ClassName'\)"),
])
def test_bad_model_paths_give_one_line_errors(user_nets, path, match):
    with pytest.raises(VPIntegratorError, match=match) as err:
        build_model(path, dim=3)
    assert "\n" not in str(err.value)


def test_its_own_layer_is_packed_for_the_compiled_runner_and_it_keeps_volume(user_nets):
    numba_model = pytest.importorskip("vpintegrator.rollout.numba_model")
    if not numba_model.AVAILABLE:
        pytest.skip("numba is not installed")
    from vpintegrator.rollout.steps import compiled_model

    model = _randomise(build_model(PATH, dim=3, n_pairs=3).double())
    errors = assert_preserves(model, atol=1e-12)
    assert set(errors) == {"volume"}
    windows = torch.randn(5, 1, 3, dtype=torch.float64)
    packed = numba_model.pack(model)
    assert packed is not None and len(packed.ops) == 7  # six triangular layers and the user's Shift
    want = model(windows).detach().numpy()
    assert np.allclose(packed.forward(windows.numpy()), want, rtol=1e-12, atol=1e-12)
    assert compiled_model(model, windows) is not None  # what ModelStep runs (runner "numba")

    import my_user_nets

    class Shifted(my_user_nets.Shift):  # a subclass may change the formula: packed only if registered so
        pass

    model.layers[-1].__class__ = Shifted
    assert numba_model.pack(model) is None
    numba_model.register_packer(my_user_nets.Shift, my_user_nets.pack_shift, subclasses=True)
    assert numba_model.pack(model) is not None
    model.layers[-1].__class__ = my_user_nets.Shift

    numba_model._PACKERS.pop(my_user_nets.Shift)  # a layer without a packer: the model runs in torch
    assert numba_model.pack(model) is None


def _cli(module: str, args: list, folder: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m vpintegrator.cli.MODULE ARGS`` in a fresh process with ``folder`` on PYTHONPATH."""
    paths = [str(folder), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", f"vpintegrator.cli.{module}", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd)


def test_user_model_trains_rolls_out_and_enters_work_precision_from_the_clis(user_nets, tmp_path):
    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.cli.train import main as train_main
    from vpintegrator.data.rollouts import read_rollout
    from vpintegrator.data.work_precision import read_work_precision

    data = tmp_path / "d.h5"
    res = CliRunner().invoke(gen_main, ["rigid_body", "--n-traj", "6", "--t-end", "3", "--out", str(data), "-q"])
    assert res.exit_code == 0, res.output

    # --model PATH (this process: the module is on sys.path)
    res = CliRunner().invoke(train_main, ["--data", str(data), "--model", PATH, "--epochs", "1", "--device", "cpu",
                                          "--out", str(tmp_path / "flag"), "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "flag" / "summary.json").read_text())["model_class"] == PATH

    # [model] name = PATH in a config
    config = tmp_path / "mine.toml"
    config.write_text(f'data = ["{data}"]\nepochs = 3\nbatch_size = 16\ndevice = "cpu"\ndtype = "float64"\n'
                      f'[model]\nname = "{PATH}"\nn_pairs = 3\n')
    run = tmp_path / "run"
    res = CliRunner().invoke(train_main, [str(config), "--out", str(run), "-q"])
    assert res.exit_code == 0, res.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["model"] == "shear_net" and summary["model_class"] == PATH and summary["epochs"] == 3
    assert 'model_class = "my_user_nets:ShearNet"' in (run / "config.toml").read_text()
    assert torch.load(run / "best.pt", weights_only=True)["config"]["model_class"] == PATH

    # vp-rollout and its work-precision table in a fresh process: the checkpoint's model_class brings it back
    out = tmp_path / "roll.h5"
    proc = _cli("rollout", ["--data", data, "--model", f"mine={run}", "--integrators", "rk4", "--t-end", "6",
                            "--work-precision", "--device", "cpu", "--out", out], user_nets, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = read_rollout(out)
    assert "mine" in result.metrics and np.all(np.isfinite(result.metrics["mine"].rel_error))
    (row,) = [r for r in read_work_precision(tmp_path / "roll_work_precision.csv") if r.method == "mine"]
    assert row.kind == "model" and np.isfinite(row.error_median)
    from vpintegrator.rollout.numba_model import AVAILABLE

    assert row.runner == ("numba" if AVAILABLE else row.runner)  # its Shift has a packer: the compiled kernel

    # a process without the module on its path: one line naming the class path and the fix
    sys.modules.pop("my_user_nets")
    sys.path.remove(str(user_nets))
    with pytest.raises(VPIntegratorError, match=r"cannot import module 'my_user_nets' .*PYTHONPATH") as err:
        load_model(run)
    assert PATH in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("cls, fn, named", [("Shift", lambda pk, m, dim: None, "cls must be a class"),
                                            (object(), lambda pk, m, dim: None, "cls must be a class"),
                                            (int, 3, "fn must be callable")])
def test_register_packer_refuses_a_non_class_in_one_line(cls, fn, named):
    """``register_packer`` with a non-class (or a packer that cannot be called) is the package's one-line error
    naming the argument (issue 69: it was a bare TypeError), and registers nothing."""
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.rollout import numba_model

    before = dict(numba_model._PACKERS)
    with pytest.raises(VPIntegratorError, match=named) as err:
        numba_model.register_packer(cls, fn)
    assert "\n" not in str(err.value) and numba_model._PACKERS == before
