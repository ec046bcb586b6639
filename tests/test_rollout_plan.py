"""The plan of a comparison run: ``build_plan`` turns a ``RolloutConfig`` into one frozen, typed
``RolloutPlan`` (every check and default resolved there, nothing written), and nothing below it in
``vpintegrator.rollout`` takes a configuration; the old doorway modules are gone."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import typing
from pathlib import Path

import numpy as np
import pytest

import vpintegrator
from vpintegrator.data import generate, load_spec
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout import RolloutConfig
from vpintegrator.protocols import SystemProtocol
from vpintegrator.rollout.plan import Blocks, RolloutPlan, build_plan

ROLLOUT = Path(vpintegrator.__file__).parent / "rollout"

#: the functions of vpintegrator/rollout that take a configuration: the entry points and the plan builder,
#: nothing below them (a shard, a dask task and a worker process get the plan of their block)
TAKES_CONFIG = {
    "plan.py": {"build_plan"},
    "run.py": {"run_rollouts"},
    "precision.py": {"run_work_precision"},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "data.h5"
    generate(load_spec("rigid_body", n_traj=6, t_end=1.0), path, workers=1)
    return path


def test_nothing_below_the_plan_builder_takes_a_config():
    found = {}
    for path in sorted(ROLLOUT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                if {"config", "cfg"} & {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
                    found.setdefault(path.name, set()).add(node.name)
    assert found == TAKES_CONFIG


@pytest.mark.parametrize("name", ["compare", "blocks", "checks", "reference"])
def test_the_doorway_modules_are_gone(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"vpintegrator.rollout.{name}")


def test_the_plan_is_frozen_and_typed():
    assert dataclasses.is_dataclass(RolloutPlan) and RolloutPlan.__dataclass_params__.frozen
    assert Blocks.__dataclass_params__.frozen
    hints = typing.get_type_hints(RolloutPlan)
    untyped = sorted(name for name, hint in hints.items() if hint is typing.Any)
    assert untyped == []
    assert hints["system"] is SystemProtocol  # System, SystemFamily or UnknownSystem: what a run needs of each


def test_every_kind_of_system_a_plan_holds_is_a_system_protocol():
    from vpintegrator.data.observation import resolve_observation
    from vpintegrator.rollout.observed import ObservedSystem
    from vpintegrator.systems import get_system
    from vpintegrator.systems.family import SystemFamily
    from vpintegrator.systems.unknown import UnknownSystem

    body = get_system("rigid_body")
    kinds = [body, SystemFamily([body, body]), UnknownSystem(dim=3, source="x.h5")]
    kinds.append(ObservedSystem(dim=2, source="x.h5", full=body, observation=resolve_observation("0,1", 3)))
    for system in kinds:
        assert isinstance(system, SystemProtocol), type(system)
        assert isinstance(system.dim, int) and isinstance(tuple(system.invariant_names), tuple)
    assert not isinstance(object(), SystemProtocol)  # the check can fail


def _annotated_configs(path: Path) -> set[str]:
    """Functions of ``path`` with a parameter annotated by a ``Config`` subclass (``RolloutConfig``, ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.annotation is not None and "Config" in ast.unparse(arg.annotation):
                    found.add(f"{path.name}:{node.name}")
    return found


def test_no_function_below_the_builder_takes_a_config_by_type():
    """By type, not by name: a parameter annotated ``RolloutConfig`` (or any ``...Config``) below the builder."""
    found = set().union(*(_annotated_configs(p) for p in sorted(ROLLOUT.glob("*.py"))))
    assert found == {f"{f}:{fn}" for f, fns in TAKES_CONFIG.items() for fn in fns}


def test_the_plan_is_built_in_one_pass_resolve_check_plan(data, tmp_path, monkeypatch):
    """build_plan resolves (the keys read once, into the one frozen plan), checks that plan, then plans it: each
    step once, in that order, on one record (no request or resolved record between them: the plan is the only
    dataclass the builder makes), and neither step takes the config."""
    import vpintegrator.rollout.plan as plan_module

    calls = []
    for name in ("check", "plan_of"):
        real = getattr(plan_module, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            assert not any(isinstance(a, RolloutConfig) for a in (*args, *kwargs.values()))
            calls.append((_name, args[0]))
            return _real(*args, **kwargs)

        monkeypatch.setattr(plan_module, name, spy)
    plan, _ = build_plan(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["rk4"], traj=[0, 1]))
    assert [name for name, _ in calls] == ["check", "plan_of"]
    resolved = calls[0][1]
    assert type(resolved) is RolloutPlan and calls[1][1] is resolved  # planned: the checked record, not another
    assert resolved.methods == () and [m.label for m in plan.methods] == ["rk4"]
    records = {n.name for n in ast.walk(ast.parse((ROLLOUT / "plan.py").read_text(encoding="utf-8")))
               if isinstance(n, ast.ClassDef) and any(ast.unparse(d).startswith("dataclass") for d in n.decorator_list)}
    assert records == {"Blocks", "RolloutPlan"}
    for name in ("resolve", "RolloutRequest", "Resolved"):
        assert not hasattr(plan_module, name)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("vpintegrator.rollout.resolve")


def test_the_volume_metric_is_off_by_default_above_volume_max_dim(tmp_path):
    """Unset, ``volume`` is on for small systems and off (with a note in the log and the file) for a lattice
    of hundreds of dimensions, whose every step would take a dense dim x dim determinant; given, it wins."""
    import h5py

    from vpintegrator.rollout import run_rollouts
    from vpintegrator.rollout.plan import VOLUME_MAX_DIM, volume_default

    assert volume_default(None, 3) == (True, "")
    assert volume_default(None, VOLUME_MAX_DIM)[0] and not volume_default(None, VOLUME_MAX_DIM + 1)[0]
    assert "volume = true" in volume_default(None, VOLUME_MAX_DIM + 1)[1]
    assert volume_default(True, 400) == (True, "") and volume_default(False, 3) == (False, "")
    path = tmp_path / "toda.h5"
    generate(load_spec("toda_bump_heldout", t_end=0.5, params={"N": 40, "alpha": 0.64}), path, workers=1)
    lines = []
    report = run_rollouts(RolloutConfig(data=str(path), out=str(tmp_path / "r.h5"), integrators=["stormer_verlet"],
                                        reference="data"), log=lines.append)
    with h5py.File(report.out, "r") as f:
        assert "log_det_J" not in f["methods/stormer_verlet"] and "dim" in str(f.attrs["volume_note"])
        dim = int(f.attrs["dim"])
    assert dim > VOLUME_MAX_DIM and any("volume: off by default" in line for line in lines)
    plan, _ = build_plan(RolloutConfig(data=str(path), out=str(tmp_path / "r2.h5"), integrators=["stormer_verlet"],
                                       reference="data", volume=True))
    assert plan.volume and plan.volume_note == ""


def test_build_plan_resolves_everything_and_writes_nothing(data, tmp_path):
    out = tmp_path / "r.h5"
    config = RolloutConfig(data=str(data), out=str(out), integrators=["rk4", "exact_flow"], heldout=2, t_end=0.5)
    plan, states = build_plan(config)
    assert not out.exists() and not out.with_suffix(".csv").exists()
    assert [m.label for m in plan.methods] == ["rk4", "exact_flow"]
    assert (plan.n_steps, plan.n_data, plan.n_new, plan.n_traj) == (5, 0, 2, 2)  # heldout only: no data rows
    assert plan.traj_index.tolist() == [-1, -1] and plan.heldout_y0.shape == (2, 3)
    assert plan.labels == {"rk4": ("new", "new"), "exact_flow": ("new", "new")} and plan.run_labels == ("new", "new")
    assert plan.reference == "exact" and plan.reference_desc and plan.reference_attrs["reference_mode"] == "exact"
    assert plan.blocks == Blocks(n_whole=2, workers=None) and not plan.blocks.per_traj
    assert plan.out == out and Path(data) in plan.inputs and plan.steps.engine == "auto"
    assert states.y.shape[0] == 0  # the data file's selected trajectories, for /reference
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.n_steps = 3  # type: ignore[misc]
    plan2, _ = build_plan(dataclasses.replace(config, heldout=None, traj=[4, 1]))
    assert plan2.idx.tolist() == [4, 1] and plan2.n_new == 0 and plan2.heldout_y0 is None
    np.testing.assert_array_equal(plan2.t, plan2.t0 + plan2.dt * np.arange(6))


def test_build_plan_checks_first(data, tmp_path):
    with pytest.raises(VPIntegratorError, match="traj index 9 is out of range"):
        build_plan(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["rk4"], traj=[9]))
    with pytest.raises(VPIntegratorError, match="unknown integrator 'nope'"):
        build_plan(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["nope"]))
    with pytest.raises(VPIntegratorError, match="out"):
        build_plan(RolloutConfig(data=str(data), out=str(data), integrators=["rk4"]))
