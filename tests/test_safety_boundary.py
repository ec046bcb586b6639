"""The user's code at the boundary (``vpintegrator.plugins.user_code``: an exception in a user's class is one
line naming the class and what it was asked to do; ``VP_TRACEBACK=1`` or ``-v`` for the traceback), the checks
of a model before training, and the API's bad arguments: one line each, as the CLI's."""

from __future__ import annotations

import logging
import textwrap

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator.errors import VPIntegratorError
from vpintegrator.plugins import TRACEBACK_ENV, UserCodeError, user_code

USER_MODULE = '''
import torch
from torch import nn
from dataclasses import dataclass
from vpintegrator.systems.base import System


class Broken(nn.Module):
    def __init__(self, dim, seq_len=1):
        super().__init__()
        raise RuntimeError("my layer is not finished")


class WrongShape(nn.Module):
    def __init__(self, dim, seq_len=1):
        super().__init__()
        self.dim, self.seq_len, self.w = dim, seq_len, nn.Linear(dim, dim)

    def forward(self, x):
        return self.w(x)[:, :, :1]  # (batch, seq, 1): the state dimension lost


class NoParameters(nn.Module):
    def __init__(self, dim, seq_len=1):
        super().__init__()
        self.dim, self.seq_len = dim, seq_len

    def forward(self, x):
        return x


class Raises(nn.Module):
    def __init__(self, dim, seq_len=1):
        super().__init__()
        self.dim, self.seq_len, self.w = dim, seq_len, nn.Linear(dim, dim)

    def forward(self, x):
        raise KeyError("lookup")
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "mynets.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    return "mynets"


def test_user_code_is_one_line_naming_the_class_and_the_request(monkeypatch):
    class Mine:
        pass

    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    with pytest.raises(UserCodeError, match=r"Mine raised ZeroDivisionError: division by zero when asked to step it; "
                                            r"fix the class \(-v or VP_TRACEBACK=1") as err:
        with user_code(Mine(), "step it"):
            1 / 0
    assert isinstance(err.value.__cause__, ZeroDivisionError) and "\n" not in str(err.value)
    with pytest.raises(VPIntegratorError, match="^mine$"):  # the package's own one-line errors pass unchanged
        with user_code(Mine, "step it"):
            raise VPIntegratorError("mine")
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises(ZeroDivisionError):  # the original, with its traceback
        with user_code(Mine, "step it"):
            1 / 0


def test_verbose_logs_the_full_traceback(monkeypatch, caplog):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    with caplog.at_level(logging.DEBUG, logger="vpintegrator"), pytest.raises(UserCodeError):
        with user_code("Mine", "step it"):
            raise KeyError("deep")
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)


def test_a_model_raising_in_init_is_one_line(user_module):
    from vpintegrator.models import build_model

    with pytest.raises(UserCodeError, match=r"mynets:Broken raised RuntimeError: my layer is not finished when asked "
                                            r"to build the model 'mynets:Broken' with dim=3"):
        build_model("mynets:Broken", dim=3)


@pytest.mark.parametrize("cls, words", [
    ("WrongShape", r"maps a \(1, 1, 3\) window to \(1, 1, 1\); expected \(1, pred_window, 3\)"),
    ("NoParameters", "has no parameters: nothing to train"),
    ("Raises", r"mynets:Raises raised KeyError: 'lookup' when asked to map a \(1, 1, 3\) window"),
])
def test_vp_train_of_a_bad_user_model_is_one_line(user_module, tiny_data, tmp_path, cls, words):
    from vpintegrator.cli.train import main

    res = CliRunner().invoke(main, ["--data", tiny_data, "--model", f"mynets:{cls}", "--epochs", "1",
                                    "--out", str(tmp_path / "run"), "--quiet"])
    assert res.exit_code == 1, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("Error: ") and len(res.output.strip().splitlines()) == 1
    import re

    assert re.search(words, line), line
    assert "--model" in line or cls in line  # names the model


@pytest.mark.parametrize("cls, words", [("WrongShape", "to \\(1, 1, 1\\); expected"), ("NoParameters", "no parameters"),
                                        ("Raises", "Raises raised KeyError")])
def test_fit_of_a_bad_module_is_one_line(user_module, tiny_data, cls, words):
    import importlib

    from vpintegrator.data import read_trajectories
    from vpintegrator.training import fit

    module = getattr(importlib.import_module("mynets"), cls)(3)
    with pytest.raises(VPIntegratorError, match=words):
        fit(model=module, train=read_trajectories(tiny_data), epochs=1)


def test_register_model_with_an_instance_is_one_line():
    from vpintegrator.models import build_model, register_model

    with pytest.raises(VPIntegratorError, match=r"got an instance of VolumePreservingFeedForward, not a class; register the class itself"):
        register_model(build_model("vpff", dim=3))


def test_a_user_system_raising_in_init_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "mysys.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from vpintegrator.systems.rigid_body import RigidBody

        @dataclass(frozen=True)
        class Fussy(RigidBody):
            name = "fussy_body"

            def __post_init__(self):
                raise LookupError("no table")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    from vpintegrator.systems import get_system, registry

    for table in ("_REGISTRY", "_DEFAULT_INSTANCES"):  # the class registers itself on import: not for other tests
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))

    with pytest.raises(UserCodeError, match=r"mysys:Fussy raised LookupError: no table when asked to build the system"):
        get_system("mysys:Fussy")


# --------------------------------------------------------------------------- the API's bad arguments

@pytest.mark.parametrize("kwargs, words", [
    ({"traj": slice(None, None, 0)}, "traj slice step must be an integer >= 1"),
    ({"traj": slice(None, None, -1)}, "traj slice step must be an integer >= 1"),
    ({"steps": slice(5, 1, -2)}, "steps slice step must be an integer >= 1"),
    ({"steps": slice(0.5, 3)}, "steps slice start must be an integer or None"),
])
def test_read_trajectories_bad_slices(tiny_data, kwargs, words):
    from vpintegrator.data import read_trajectories

    with pytest.raises(VPIntegratorError, match=words):
        read_trajectories(tiny_data, **kwargs)


@pytest.mark.parametrize("path", [None, "", 3])
def test_load_model_without_a_path(path):
    from vpintegrator.models import load_model

    with pytest.raises(VPIntegratorError, match="load_model: path must be a checkpoint file"):
        load_model(path)


@pytest.mark.parametrize("source, words", [({}, "empty dict: nothing to draw"), ([], "empty list: nothing to draw"),
                                           ({"a": np.zeros(3)}, "the entry 'a' is a ndarray, not a Trajectories")])
def test_plot_all_of_nothing(tmp_path, source, words):
    from vpintegrator.plotting import plot_all

    with pytest.raises(VPIntegratorError, match=words):
        plot_all(source, tmp_path / "figs")
    assert not (tmp_path / "figs").exists()


def test_vp_train_verbose_shows_the_user_traceback(user_module, tiny_data, tmp_path):
    from vpintegrator.cli.train import main

    res = CliRunner().invoke(main, ["--data", tiny_data, "--model", "mynets:Broken", "--epochs", "1",
                                    "--out", str(tmp_path / "run"), "-v"])
    assert res.exit_code == 1
    assert "Traceback" in res.output and 'raise RuntimeError("my layer is not finished")' in res.output
    assert res.output.strip().splitlines()[-1].startswith("Error: mynets:Broken raised RuntimeError")
