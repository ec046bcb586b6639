"""Every config on ``Config`` (issue 30, item 4): generation specs and vp-plot's options are ``Config``
subclasses, checked by its one checker."""

from __future__ import annotations

import dataclasses

import pytest

from vpintegrator.config import Config, declared, documented
from vpintegrator.data.spec import GenerationSpec, load_spec
from vpintegrator.errors import VPIntegratorError


def test_generation_spec_is_a_config_checked_once():
    spec = load_spec("rigid_body_paper")
    assert isinstance(spec, Config)
    assert set(GenerationSpec.keys()) == {f.name for f in dataclasses.fields(GenerationSpec)}
    assert spec.to_dict()["dt"] == spec.dt
    again = GenerationSpec.from_dict({k: v for k, v in spec.to_dict().items()})
    assert again == spec
    with pytest.raises(VPIntegratorError, match=r"rigid_body_paper.toml: key 'integration.dt' must be a finite number > 0"):
        dataclasses.replace(spec, dt=-1.0)
    with pytest.raises(VPIntegratorError, match=r"^GenerationSpec.n_traj must be an integer >= 1"):
        GenerationSpec(name="x", system="rigid_body", sampler="paper_sphere", dt=0.1, t_end=1.0, n_traj=0)
    with pytest.raises(VPIntegratorError, match=r"t_end \(0.05\) must be >= dt"):
        GenerationSpec(name="x", system="rigid_body", sampler="paper_sphere", dt=0.1, t_end=0.05)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dt = 0.1  # type: ignore[misc]


def test_generation_spec_flags_come_from_the_declarations():
    keys = declared(GenerationSpec)
    assert keys["dt"].help and keys["name"].flag == ""


def test_plot_options_are_a_config_and_vp_plot_derives_from_them(tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli import plot
    from vpintegrator.plotting.options import PlotOptions, check_options

    assert issubclass(PlotOptions, Config)
    keys = declared(PlotOptions)
    assert {n for n, k in keys.items() if k.flag != ""} == {"max_points", "dpi"}  # the derived flags
    help_text = CliRunner().invoke(plot.main, ["--help"], terminal_width=400).output
    for name, k in keys.items():
        assert f"{name}: {k.help.rstrip('.')}" in " ".join(help_text.split())  # --set's help: each key once
    assert "[default: 200]" in help_text and "[default: 20000]" in help_text
    check_options({"dpi": 300, "band": True, "formats": ["png"], "unknown": 1})  # not a plot option: the caller's
    with pytest.raises(VPIntegratorError, match=r"^band must be true or false; got 'yes'"):
        check_options({"band": "yes"})
    with pytest.raises(VPIntegratorError, match=r"^dpi must be a whole number > 0"):
        check_options({"dpi": 0})
    f = tmp_path / "x.h5"
    f.write_bytes(b"")
    bad = CliRunner().invoke(plot.main, [str(f), "--set", "dpy=3"])
    assert bad.exit_code != 0 and "unknown key 'dpy'" in bad.output and "did you mean 'dpi'" in bad.output
    twice = CliRunner().invoke(plot.main, [str(f), "--dpi", "100", "--set", "dpi=120"])
    assert twice.exit_code != 0 and "also given by its own flag --dpi" in twice.output
    zero = CliRunner().invoke(plot.main, [str(f), "--dpi", "0"])
    assert zero.exit_code != 0 and "dpi must be a whole number > 0" in zero.output


@pytest.mark.parametrize("cls_name, inside", [
    ("TrainConfig", {"optimizer_kwargs"}),  # documented under optimizer
    ("GenerationSpec", {"params", "sampler_args"}),  # under system and sampler
])
def test_config_keys_are_documented_once(cls_name, inside):
    """TrainConfig and GenerationSpec: every key has one documentation, its entry in the class docstring;
    a flag's help is that entry's first sentence (not a second text on the declaration)."""
    from vpintegrator.config import first_sentence
    from vpintegrator.training.config import TrainConfig

    cls = {"TrainConfig": TrainConfig, "GenerationSpec": GenerationSpec}[cls_name]
    docs = documented(cls)
    assert set(cls.keys()) - set(docs) == inside
    for name, info in declared(cls).items():
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        assert not field.metadata["vpintegrator.key"].help, f"{name}: help= on the declaration and a docstring entry"
        if info.flag != "":
            assert info.help == first_sentence(docs[name]) and len(info.help) < 300, name


def test_documented_and_first_sentence():
    @dataclasses.dataclass
    class C(Config):
        """A config.

        Parameters
        ----------
        a, b : int
            Both keys, e.g. ``a = 1``. More [`text`][vpintegrator.config.key] here.
        c : str
            See [`key`][vpintegrator.config.key].

        Notes
        -----
        d : not a key
            never read
        """

        a: int = 1
        b: int = 2
        c: str = ""
        d: int = 0

    docs = documented(C)
    assert set(docs) == {"a", "b", "c"}
    from vpintegrator.config import first_sentence

    assert first_sentence(docs["a"]) == "Both keys, e.g. a = 1."
    assert declared(C)["c"].help == "See key."
    assert declared(C)["d"].help == ""
