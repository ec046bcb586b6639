"""Every config on ``Config`` (issue 30, item 4): generation specs and vp-plot's options are ``Config``
subclasses, checked by its one checker."""

from __future__ import annotations

import dataclasses

import pytest

from vpintegrator.config import Config, declared
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
