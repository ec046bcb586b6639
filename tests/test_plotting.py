"""Figures: every kind writes PDF and PNG; fixed colours; the rigid body's sphere; errors."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from vpintegrator.data import generate, load_spec
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import build_model
from vpintegrator.plotting import (
    INTEGRATOR_COLORS,
    KINDS,
    MODEL_PALETTE,
    method_colors,
    plot_all,
    plot_rollout,
    plot_trajectories3d,
    save_figure,
)
from vpintegrator.rollout import RolloutConfig, read_rollout, run_rollouts

matplotlib.use("Agg")


def _rollout_file(tmp_path, spec, integrators, models=(), n_traj=2, **kw):
    data = tmp_path / "data.h5"
    generate(load_spec(spec, n_traj=n_traj, t_end=3.0, **kw), out=data)
    out = tmp_path / "ro.h5"
    run_rollouts(RolloutConfig(data=data, out=out, integrators=list(integrators), models=list(models), t_end=4.0))
    return read_rollout(out)


@pytest.fixture(scope="module")
def rigid(tmp_path_factory):
    torch.manual_seed(0)
    vpt = build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1)
    with torch.no_grad():
        for p in vpt.parameters():
            p.mul_(0.1)
    return _rollout_file(
        tmp_path_factory.mktemp("rigid"), "rigid_body", ["implicit_midpoint,rk4,splitting"], [("vpt", vpt)], dt=0.2
    )


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_writes_pdf_and_png(rigid, kind, tmp_path):
    fig = plot_rollout(rigid, kind)
    assert isinstance(fig, Figure)
    paths = save_figure(fig, tmp_path / kind, dpi=50)
    assert [p.suffix for p in paths] == [".pdf", ".png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("kind", ["invariants", "error", "volume"])
def test_aggregate_over_trajectories(rigid, kind):
    assert isinstance(plot_rollout(rigid, kind, traj=None), Figure)


def test_fixed_colours(rigid):
    fig = plot_rollout(rigid, "error")
    colours = {line.get_label(): matplotlib.colors.to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert colours["rk4"] == INTEGRATOR_COLORS["rk4"] and colours["vpt"] == MODEL_PALETTE[0]


def test_method_colors_are_stable():
    a = method_colors(["reference", "rk4", "vpt", "st", "implicit_midpoint"])
    b = method_colors(["implicit_midpoint", "vpt", "st"])
    assert a["reference"] == "black"
    assert a["rk4"] == INTEGRATOR_COLORS["rk4"] and a["implicit_midpoint"] == b["implicit_midpoint"]
    assert a["vpt"] == b["vpt"] == MODEL_PALETTE[0] and a["st"] == MODEL_PALETTE[1]
    assert len(set(a.values())) == len(a)


def test_rigid_body_sphere_is_drawn(rigid):
    from mpl_toolkits.mplot3d.art3d import Line3DCollection

    ax = plot_trajectories3d(rigid).axes[0]
    assert any(isinstance(c, Line3DCollection) for c in ax.collections)
    assert [ax.get_xlabel(), ax.get_ylabel(), ax.get_zlabel()] == ["$z_1$", "$z_2$", "$z_3$"]
    assert not any(isinstance(c, Line3DCollection) for c in plot_trajectories3d(rigid, sphere=False).axes[0].collections)


def test_log_scales(rigid):
    assert plot_rollout(rigid, "error").axes[0].get_yscale() == "log"
    assert all(ax.get_yscale() == "log" for ax in plot_rollout(rigid, "invariants").axes)
    assert all(ax.get_yscale() == "log" for ax in plot_rollout(rigid, "volume").axes)


def test_coupled_oscillator_phase_pairs(tmp_path):
    res = _rollout_file(tmp_path, "coupled_oscillator", ["stormer_verlet,implicit_midpoint"], n_traj=None, dt=0.4)
    fig = plot_rollout(res, "phase")
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [("$q_1$", "$p_1$"), ("$q_2$", "$p_2$")]
    paths = plot_all(res, tmp_path / "figs", dpi=50)
    assert sorted(p.name for p in paths) == sorted(f"{k}.{e}" for k in KINDS for e in ("pdf", "png"))


def test_errors(rigid):
    with pytest.raises(VPIntegratorError, match="valid kinds: trajectories3d"):
        plot_rollout(rigid, "spaghetti")
    with pytest.raises(VPIntegratorError, match="no method 'nope'"):
        plot_rollout(rigid, "error", methods=["nope"])
    with pytest.raises(VPIntegratorError, match="traj 5 is out of range"):
        plot_rollout(rigid, "error", traj=5)
    with pytest.raises(VPIntegratorError, match="schema"):
        read_rollout(rigid.path.with_name("data.h5"))
