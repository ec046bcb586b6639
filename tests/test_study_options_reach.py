"""Every option a study's ``--help`` lists reaches its plan or is refused in one line (issue 65): no study accepts a
flag and ignores it (the partial-observation study once read neither --budget, --wall-ceiling nor --max-steps and
stopped its trainings on a wall clock of its own).

For each study and each of its keys (the flags of its ``--help``), the plan built with the key at a valid value
other than its default must differ from the plan built with the defaults (the command line it records aside), or
the study must refuse the flag in one line (a ``StudyError``) — and only the flags listed in ``REFUSED`` may be
refused."""

from __future__ import annotations

import dataclasses

import click
import pytest

from vpintegrator.studies.driver import load
from vpintegrator.studies.options import STUDIES
from vpintegrator.studies.runner import StudyError

#: a valid value other than the default, where the generic one (by type) does not fit the key
VALUES: dict[tuple[str, str], str] = {
    ("rigid_body", "models"): "vpt",
    ("rigid_body_structure", "models"): "lpnet",
    ("coupled_oscillator", "preset"): "{tmp}/preset.toml",  # (a preset of compare: its keys are compare's)
    ("coupled_oscillator", "problems"): "rigid_body",
    ("coupled_oscillator", "model"): "vpff",
    ("coupled_oscillator", "rows"): "rk4,vpt",
    ("context", "context_lens"): "3,5",
    ("context", "splits"): "interpolation",
    ("unknown_form", "systems"): "rigid_body_exp",
    ("unknown_form", "sweep"): "1",
    ("partial_observation", "systems"): "toda",
    ("partial_observation", "approaches"): "vpt",
    ("memory", "systems"): "kac_zwanzig",
    ("memory", "approaches"): "gru",
    ("memory", "n_train"): "50",  # (the generic value, 2 x 20, is its default)
    ("reduction", "systems"): "toda",
    ("reduction", "sizes"): "200,400",
    ("reduction", "floor_dims"): "4,8",
    ("reduction", "reduced_dims"): "8",
    ("reduction", "autoencoder_sizes"): "400",
    ("reduction", "ladder"): "quick",
    ("reduction", "output_every"): "4",
    ("compare", "problems"): "coupled_oscillator",
    ("compare", "model"): "vpff",
    ("compare", "rows"): "rk4,vpt",
    ("compare", "preset"): "coupled_oscillator",
    # the studies that train through the runner's vp-train tasks: a device
    **{(name, "seeds_as_members"): "cpu"
       for name in ("rigid_body", "rigid_body_structure", "rigid_body_quality")},
}
#: flags a study refuses (one line) rather than uses: --results without --table-only, --table-only without a run,
#: a pretrained export where the study ships none, and the flags that do not apply to a study
REFUSED = {  # (and "results" in every study: read by --table-only only)
    ("rigid_body_structure", "table_only"), ("rigid_body_quality", "table_only"), ("coupled_oscillator", "table_only"),
    ("rigid_body_quality", "config"), ("compare", "table_only"),
    ("partial_observation", "export_pretrained"), ("partial_observation", "skip_existing"),
    ("memory", "export_pretrained"), ("memory", "skip_existing"),
    ("reduction", "export_pretrained"), ("reduction", "jobs"), ("reduction", "overwrite"),
    # their trainings are not the runner's vp-train tasks (members.MEMBER_STUDIES)
    ("unknown_form", "seeds_as_members"), ("partial_observation", "seeds_as_members"), ("memory", "seeds_as_members"),
    ("reduction", "seeds_as_members"),
}
CASES = [(name, f.name) for name in STUDIES for f in dataclasses.fields(load(name).options) if f.name != "out"]


def _study(name: str):
    return load(name)


def _fields(plan) -> dict:
    values = dataclasses.asdict(plan) if dataclasses.is_dataclass(plan) else plan._asdict()
    return {k: v for k, v in values.items() if k not in ("argv", "command")}


def _argv(name: str, field: dataclasses.Field, tmp) -> list[str]:
    flag = "--" + field.name.replace("_", "-")
    if (name, field.name) in VALUES:
        (tmp / "vpt.toml").write_text('epochs = 1\n')
        (tmp / "preset.toml").write_text('problems = "rigid_body"\n')
        return [flag, VALUES[(name, field.name)].format(tmp=tmp)]
    default = field.default if field.default is not dataclasses.MISSING else None
    kind = str(field.type)
    if "bool" in kind:
        return [flag] if not default else ["--no-" + field.name.replace("_", "-")]
    if field.name == "budget":
        return [flag, "cpu" if default != "cpu" else "wall"]
    if "list[int]" in kind:
        return [flag, "1,3"]
    if "int" in kind:
        return [flag, str((default or 20) * 2)]
    if "float" in kind:
        return [flag, str((default or 20.0) * 2)]
    return [flag, "x"]


@pytest.mark.parametrize("name,key", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_every_listed_option_reaches_the_plan_or_is_refused_in_one_line(name, key, tmp_path):
    study = _study(name)
    field = next(f for f in dataclasses.fields(study.options) if f.name == key)
    base = ["--out", str(tmp_path / "run")]
    command = study.command(prog=f"vp-study {name}")
    assert f"--{key.replace('_', '-')}" in command.get_help(click.Context(command))  # the flag its --help lists
    default_plan = _fields(study.parse(base))
    refused = key == "results" or (name, key) in REFUSED
    try:
        plan = _fields(study.parse(base + _argv(name, field, tmp_path)))
    except StudyError as err:
        assert refused, f"{name} --{key}: refused ({err}); give the test a valid value in VALUES"
        assert "\n" not in str(err) and str(err)
        return
    assert not refused, f"{name} --{key} is listed as refused but was accepted"
    assert plan != default_plan, f"{name} --{key} is accepted and ignored: the plan does not change"
