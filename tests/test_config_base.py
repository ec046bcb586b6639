"""The declarative config base (vpintegrator.config.Config, key()): one declaration per key gives the
check (run once: at construction, and by replace() for the keys it changes), TOML reading and writing,
the --set handler and the CLI option with its help, default, choices and shell completion."""

from __future__ import annotations

import collections
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner

from vpintegrator import config as config_layer
from vpintegrator._toml import tomllib
from vpintegrator.cli._common import cli_errors
from vpintegrator.cli._options import ConfigCommand, read_set, set_option
from vpintegrator.config import Config, key
from vpintegrator.errors import VPIntegratorError


@dataclass
class Toy(Config):
    """A config of four keys; everything below is derived from these four lines."""

    n: int = key(3, type=int, low=1, help="How many.")
    mode: str = key("a", choices=("a", "b"), help="Which way.")
    rate: float | None = key(None, type=float, low=0, open_low=True, optional=True, show_default="none",
                             help="How fast.")
    loud: bool = key(False, type=bool, help="Say it.")

    def _check_together(self) -> None:
        if self.mode == "b" and self.rate is None:
            raise VPIntegratorError("mode 'b' needs a rate; set rate", key="rate")


@click.command("toy", cls=ConfigCommand, config=lambda: Toy)
@set_option("Any Toy key.")
@cli_errors
def toy(flags, set_):
    values = read_set(set_, Toy.keys(), flags)
    click.echo(Toy.from_dict({**values, **flags}, source="flags").to_toml(), nl=False)


def _run(*args):
    return CliRunner().invoke(toy, [str(a) for a in args])


@pytest.fixture
def checks(monkeypatch):
    """key -> how many times its declared check ran."""
    count: collections.Counter = collections.Counter()
    validate = config_layer.Key.validate

    def counting(self, name, value, label=None):
        count[name] += 1
        return validate(self, name, value, label)

    monkeypatch.setattr(config_layer.Key, "validate", counting)
    return count


def test_a_config_is_checked_once_and_replace_checks_what_it_changes(checks):
    toy = Toy.from_dict({"n": 2, "mode": "b", "rate": 0.5})
    assert checks == {"n": 1, "mode": 1, "rate": 1, "loud": 1}
    checks.clear()
    other = toy.replace(n=5, rate=None)  # None: not given
    assert checks == {"n": 1} and (other.n, other.rate, toy.n) == (5, 0.5, 2)
    with pytest.raises(VPIntegratorError, match=r"^config: mode 'b' needs a rate; set rate$"):
        Toy(mode="b")  # the rules between keys, at construction


def test_train_config_checks_every_key_once(checks, tmp_path):
    from vpintegrator.training import TrainConfig

    config = TrainConfig.from_dict({"data": ["x.h5"], "model": "vpt", "lr": 0.1})
    assert set(checks) == set(TrainConfig.keys()) and set(checks.values()) == {1}
    checks.clear()
    config.replace(out=str(tmp_path), lr=0.1)  # lr unchanged: not checked again
    assert checks == {"out": 1}


@pytest.mark.parametrize("values, message, key", [
    ({"n": 0}, r"^f.toml: n must be a positive integer; got 0$", "n"),
    ({"n": True}, r"n must be a positive integer; got True", "n"),
    ({"mode": "c"}, r"mode must be 'a' or 'b'; got 'c'", "mode"),
    ({"rate": float("nan")}, r"rate must be a finite number > 0; got nan", "rate"),
    ({"loud": 1}, r"loud must be true or false; got 1", "loud"),
    ({"nn": 1}, r"^f.toml: unknown key 'nn'; valid keys: n, mode, rate, loud; did you mean 'n'\?$", "nn"),
])
def test_bad_values_are_one_line_errors_naming_the_key(values, message, key):
    with pytest.raises(VPIntegratorError, match=message) as info:
        Toy.from_dict(values, source="f.toml")
    assert info.value.key == key


def test_assignment_checks_the_key():
    toy = Toy()
    toy.n = 4
    with pytest.raises(VPIntegratorError, match="n must be a positive integer; got -1"):
        toy.n = -1
    assert toy.n == 4


def test_toml_round_trip():
    toy = Toy(n=7, mode="b", rate=2.5, loud=True)
    assert Toy.from_dict(tomllib.loads(toy.to_toml())) == toy
    assert "rate" not in Toy().to_toml()  # None: not set


def test_cli_options_are_derived_from_the_declarations():
    text = " ".join(_run("--help").output.split())
    for fragment in ("--n INTEGER How many. [default: 3]", "--mode NAME Which way. [default: a] [choices: a, b]",
                     "--rate FLOAT How fast. [default: (none)]", "--loud / --no-loud Say it. [default: no-loud]"):
        assert fragment in text, fragment
    mode = next(p for p in toy.params if p.name == "mode")
    assert [c.value for c in mode.type.shell_complete(click.Context(toy), mode, "")] == ["a", "b"]


def test_cli_flags_set_and_their_errors():
    result = _run("--n", 5, "--set", "rate=0.5", "--loud")
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.output) == {"n": 5, "mode": "a", "rate": 0.5, "loud": True}
    assert _run("--n", 0).output == "Error: flags: --n must be a positive integer; got 0\n"
    assert _run("--set", "n=0").output == "Error: flags: n must be a positive integer; got 0\n"  # as the user wrote it
    assert _run("--mode", "c").output.startswith("Error: flags: --mode must be 'a' or 'b'; got 'c'")
    assert _run("--n", 2, "--set", "n=3").output == (
        "Error: --set n=...: n is also given by its own flag --n; give it once\n")
    assert _run("--set", "mdoe=b").output == (
        "Error: --set: unknown key 'mdoe'; valid keys: n, mode, rate, loud; did you mean 'mode'?\n")


def test_the_commands_flags_are_the_config_keys():
    """Every derived flag of vp-train, vp-rollout and vp-gen is a declared key (adding a key adds its flag)."""
    from vpintegrator.cli import gen, rollout, train
    from vpintegrator.config import declared
    from vpintegrator.data.spec import GenerationSpec
    from vpintegrator.rollout import RolloutConfig
    from vpintegrator.training import TrainConfig

    for command, cls in ((train.main, TrainConfig), (rollout.main, RolloutConfig), (gen.main, GenerationSpec)):
        flagged = {k for k, info in declared(cls).items() if info.flag != ""}
        assert {p.name for p in command.params if p in command._derived} == flagged


def test_resumable_keys_are_declared():
    from vpintegrator.training.config import RESUMABLE_KEYS

    assert set(RESUMABLE_KEYS) == {"epochs", "time_limit", "cpu_time_limit", "device", "fast_step", "patience", "min_delta",
                                   "checkpoint_every", "checkpoint_seconds", "out", "max_steps", "min_rel_delta"}


def test_rollout_config_is_checked_when_built(tmp_path):
    from vpintegrator.rollout import RolloutConfig

    for kw, message in ((dict(chunk_steps=0), "chunk_steps must be an int >= 1; got 0"),
                        (dict(t_end=-1.0), "t_end must be a finite number > 0; got -1.0"),
                        (dict(traj=[0], n_traj=1), "traj and n_traj both given"),
                        (dict(init="magic"), "init 'magic' is unknown")):
        with pytest.raises(VPIntegratorError, match=message):
            RolloutConfig(data=str(tmp_path / "d.h5"), **kw)
    assert RolloutConfig(data="d.h5", integrators="rk4").integrators == ["rk4"]


def test_set_of_a_table_key_conflicts_only_with_that_keys_flag(tmp_path):
    from vpintegrator.cli import train

    def run(*args):
        return CliRunner().invoke(train.main, ["--data", "x.h5", "--model", "vpt", *args, "--print-config"])

    ok = run("--set", "model.L=2")  # --model gives model.name, not the whole table
    assert ok.exit_code == 0, ok.output
    assert tomllib.loads(ok.output)["model"]["L"] == 2
    assert run("--set", "model.name=vpff").output == (
        "Error: --set model.name=...: model.name is also given by its own flag --model; give it once\n")


@pytest.mark.parametrize("command, args", [
    ("train", ["--help"]), ("train", ["--version"]), ("train", ["--list"]),
    ("gen", ["--help"]), ("rollout", ["--help"]), ("plot", ["--help"]),
])
def test_help_imports_no_torch(command, args):
    """``vp-train --help`` lists every TrainConfig key (its flags, choices, defaults) without importing
    torch: ``vpintegrator.training`` is lazy and the config's choices are torch-free (training/config.py)."""
    import subprocess
    import sys

    code = (f"import sys; from click.testing import CliRunner; from vpintegrator.cli.{command} import main; "
            f"r = CliRunner().invoke(main, {args!r}); assert r.exit_code == 0, r.output; "
            "assert '--help' not in " + repr(args) + " or '--set' in r.output, r.output; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_train_help_lists_the_choices_of_the_torch_modules():
    """The torch-free names (training/config.py) are the ones the torch modules build."""
    from click.testing import CliRunner

    from vpintegrator.cli.train import main
    from vpintegrator.training import config as names, optim

    assert set(optim._SCHEDULERS) == set(names.SCHEDULERS)
    assert optim.list_optimizers() == names.list_optimizers() and "lm" in names.list_optimizers()
    out = " ".join(CliRunner().invoke(main, ["--help"], terminal_width=200).output.split())
    for name in (*names.list_optimizers(), *names.SCHEDULERS, *names.FAST_STEPS):
        assert name in out


def test_version_and_list_do_not_load_the_config():
    """vp-train --version / --list end before any key is read: torch is not imported for them."""
    import subprocess
    import sys

    code = ("import sys; from click.testing import CliRunner; from vpintegrator.cli.train import main; "
            "r = CliRunner().invoke(main, ['--version']); assert r.exit_code == 0, r.output; "
            "r = CliRunner().invoke(main, ['--list']); assert r.exit_code == 0 and 'tiny' in r.output, r.output; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("item", ["lr=0.5\nepochs=7", "out=runs/x\n[model]\nname = \"st\"", "lr=0.5\r", "seed=1\x00"])
def test_set_with_a_line_break_is_refused(item):
    """Issue 36: a --set value with a newline dropped (or injected) a second key: --set $'lr=0.5\\nepochs=7' trained
    100 epochs, not 7. One KEY=VALUE per --set."""
    from vpintegrator.errors import VPIntegratorError

    with pytest.raises(VPIntegratorError, match=r"holds a line break \(or NUL\); give one KEY=VALUE per set"):
        config_layer.parse_set([item])
    assert config_layer.parse_set(["lr=0.5", "epochs=7"]) == {"lr": 0.5, "epochs": 7}


def test_set_with_a_line_break_is_one_line_in_the_cli(tmp_path):
    from vpintegrator.cli.train import main

    res = CliRunner().invoke(main, ["--data", "x.h5", "--model", "vpt", "--set", "lr=0.5\nepochs=7", "--print-config"])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "--set" in res.output, res.output


def test_toml_nested_too_deep_is_one_line(tmp_path):
    """Issue 36: a TOML nested 1000 deep raised RecursionError (a traceback)."""
    from vpintegrator.errors import VPIntegratorError

    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(VPIntegratorError, match=r"deep.toml: TOML nested too deep to read"):
        config_layer.read_toml(deep)
    assert config_layer.parse_set(["x=" + "[" * 1000 + "]" * 1000]) == {"x": "[" * 1000 + "]" * 1000}  # a bare string


def test_dump_toml_round_trips_what_the_configs_hold(tmp_path):
    """The TOML writer (tomli-w behind ``dump_toml``): NumPy numbers, paths, tuples, nan/inf and nested
    tables read back as plain values; ``None`` (not set) is left out at every depth; a value TOML cannot
    hold is one error naming its key."""
    import math

    import numpy as np

    from vpintegrator.config import dump_toml, read_toml

    values = {"n": np.int64(3), "x": np.float32(0.5), "flag": np.bool_(True), "path": tmp_path / "a b.h5",
              "pair": (1, 2), "grid": np.array([[1.0, 2.0]]), "inf": float("inf"), "nan": float("nan"), "unset": None,
              "name": 'quote " and é', "model": {"name": "vpt", "L": 3, "skip": None, "inner": {"k": [0.1]}}}
    text = dump_toml(values)
    (tmp_path / "c.toml").write_text(text, encoding="utf-8")
    back = read_toml(tmp_path / "c.toml")
    nan = back.pop("nan")
    assert math.isnan(nan) and "unset" not in back and "skip" not in back["model"]
    assert back == {"n": 3, "x": 0.5, "flag": True, "path": str(tmp_path / "a b.h5"), "pair": [1, 2],
                    "grid": [[1.0, 2.0]], "inf": float("inf"), "name": 'quote " and é',
                    "model": {"name": "vpt", "L": 3, "inner": {"k": [0.1]}}}
    assert text.index("[model]") > text.index("name =")  # scalars first, then the tables
    with pytest.raises(VPIntegratorError, match=r"^model\.bad: cannot write NoneType value None to TOML"):
        dump_toml({"model": {"bad": [1, None]}})
