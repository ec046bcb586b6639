"""Rollout figures: every kind from a file and from memory; fixed colours; titles; --traj; vp-plot errors."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from matplotlib.figure import Figure

from vpintegrator.cli.plot import main as plot_main
from vpintegrator.data import generate, load_spec
from vpintegrator.data.rollouts import read_rollout
from vpintegrator.errors import VPIntegratorError
from vpintegrator.integrators import integrate
from vpintegrator.models import build_model
from vpintegrator.plotting import (
    INTEGRATOR_COLORS,
    KINDS,
    MODEL_PALETTE,
    method_colors,
    plot_all,
    plot_error,
    plot_invariants,
    plot_rollout,
    plot_trajectories3d,
    save_figure,
)
from vpintegrator.rollout import RolloutConfig, run_rollouts

matplotlib.use("Agg")
pytestmark = pytest.mark.usefixtures("one_thread")


def _rollout_file(tmp_path, spec, integrators, models=(), n_traj=2, traj=None, t_end=3.0, **kw):
    data = tmp_path / "data.h5"
    generate(load_spec(spec, n_traj=n_traj, t_end=t_end, **kw), out=data)
    out = tmp_path / "ro.h5"
    run_rollouts(RolloutConfig(data=data, out=out, integrators=list(integrators), models=list(models),
                               t_end=t_end + 1.0, traj=traj))
    return read_rollout(out)


def _vpt():
    torch.manual_seed(0)
    vpt = build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1)
    with torch.no_grad():
        for p in vpt.parameters():
            p.mul_(0.1)
    return vpt


@pytest.fixture(scope="module")
def rigid(tmp_path_factory):
    """8 rigid-body trajectories, the rollout of data rows 3 and 5."""
    return _rollout_file(tmp_path_factory.mktemp("rigid"), "rigid_body", ["implicit_midpoint", "rk4", "splitting"],
                         [("vpt", _vpt())], n_traj=8, traj=[3, 5], dt=0.2)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """All 8 trajectories (more than MAX_CURVES: median and band)."""
    return _rollout_file(tmp_path_factory.mktemp("many"), "rigid_body", ["implicit_midpoint", "rk4"], n_traj=8, dt=0.2)


@pytest.fixture(scope="module")
def in_memory():
    """Straight from generate() and integrate(): no file."""
    ref = generate(load_spec("rigid_body", n_traj=3, t_end=2.0, dt=0.2))
    y0 = ref.y[:, 0]
    methods = {m: integrate("rigid_body", y0, dt=0.2, n_steps=ref.n_steps, method=m) for m in ("implicit_midpoint", "rk4")}
    return ref, methods


def _labels(fig):
    return [t.get_text() for t in fig.legends[0].get_texts()] if fig.legends else []


def _title(fig):
    return " ".join([fig.get_suptitle()] + [ax.get_title() for ax in fig.axes])


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_writes_pdf_and_png(rigid, kind, tmp_path):
    fig = plot_rollout(rigid, kind)
    assert isinstance(fig, Figure)
    paths = save_figure(fig, tmp_path / kind, dpi=50)
    assert [p.suffix for p in paths] == [".pdf", ".png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:4] == b"\x89PNG"


def test_default_shows_every_trajectory(rigid, many):
    # few: one curve each, titled by their indices in the data file
    fig = plot_rollout(rigid, "error")
    assert "trajectories 3 and 5" in _title(fig)
    assert len([ln for ln in fig.axes[0].get_lines() if ln.get_color() == INTEGRATOR_COLORS["rk4"]]) == 2
    assert _labels(fig)[-2:] == ["trajectory 3", "trajectory 5"]  # the line style of each
    # many: median and 10-90 % band
    for kind in ("invariants", "error", "volume"):
        fig = plot_rollout(many, kind)
        assert "median and 10–90 % band over 8 trajectories" in _title(fig)
        assert fig.axes[0].collections  # the band
    assert "(5 of 8)" in _title(plot_rollout(many, "phase"))
    assert "trajectories 1 and 6" in _title(plot_rollout(many, "phase", traj=[1, 6]))
    assert "trajectory 5" in _title(plot_rollout(rigid, "invariants", traj=5))


def test_traj_means_data_file_indices(rigid):
    fig = plot_error(rigid, traj=5)
    assert all(len(ln.get_xdata()) == len(rigid.t) for ln in fig.axes[0].get_lines()[:1])
    with pytest.raises(VPIntegratorError, match=r"traj 0 is not in .*available trajectories \(indices in the data file\): 3, 5"):
        plot_error(rigid, traj=0)
    with pytest.raises(VPIntegratorError) as err:
        plot_all(rigid, "unused", traj=[3, 7])
    assert err.value.key == "traj"


def test_fixed_colours_in_every_figure(rigid):
    for kind in ("error", "invariants", "volume"):
        fig = plot_rollout(rigid, kind)
        colours = {ln.get_label(): matplotlib.colors.to_hex(ln.get_color()) for ax in fig.axes for ln in ax.get_lines()
                   if not ln.get_label().startswith("_")}
        assert colours["rk4"] == INTEGRATOR_COLORS["rk4"] and colours["vpt"] == MODEL_PALETTE[0]
        assert colours["splitting"] == INTEGRATOR_COLORS["splitting"]


def test_method_colors_are_stable():
    a = method_colors(["reference", "rk4", "vpt", "st", "implicit_midpoint"])
    b = method_colors(["implicit_midpoint", "vpt", "st"])
    assert a["reference"] == "black"
    assert a["rk4"] == INTEGRATOR_COLORS["rk4"] and a["implicit_midpoint"] == b["implicit_midpoint"]
    assert a["vpt"] == b["vpt"] == MODEL_PALETTE[0] and a["st"] == MODEL_PALETTE[1]
    assert len(set(a.values())) == len(a)


def test_legends_only_for_drawn_lines(rigid):
    assert "reference" not in _labels(plot_rollout(rigid, "error"))  # the reference has no error
    fig = plot_rollout(rigid, "volume", methods=["rk4"])
    assert [lab for lab in _labels(fig) if not lab.startswith("trajectory")] == ["rk4"]
    assert "reference" in _labels(plot_rollout(rigid, "invariants"))


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


def test_from_a_path_with_max_points(rigid):
    fig = plot_error(rigid.path, max_points=5)
    assert max(len(ln.get_xdata()) for ln in fig.axes[0].get_lines()) <= 5
    with pytest.raises(VPIntegratorError, match="max_points must be a whole number >= 2"):
        plot_error(rigid.path, max_points=1)


# --------------------------------------------------------------------------- in memory


def test_in_memory_figures_without_a_file(in_memory, tmp_path):
    ref, methods = in_memory
    fig = plot_error(methods, reference=ref)
    colours = {ln.get_label(): matplotlib.colors.to_hex(ln.get_color()) for ln in fig.axes[0].get_lines()}
    assert colours["implicit_midpoint"] == INTEGRATOR_COLORS["implicit_midpoint"]
    assert colours["rk4"] == INTEGRATOR_COLORS["rk4"]
    rk4 = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "rk4"][0]
    expected = np.linalg.norm(methods["rk4"].y[0] - ref.y[0], axis=-1) / np.linalg.norm(ref.y[0], axis=-1)
    np.testing.assert_allclose(rk4.get_ydata(), np.where(expected > 0, expected, np.nan))
    # invariants come from traj.system: implicit midpoint keeps both rigid-body invariants to rounding
    fig = plot_invariants(methods, reference=ref, traj=[0])
    imr = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "implicit_midpoint"][0]
    assert np.nanmax(imr.get_ydata()) < 1e-12
    assert "trajectory 0" in _title(fig)
    # one Trajectories is labelled by its method; without a reference there is no error figure
    written = plot_all(methods["rk4"], tmp_path / "figs", dpi=40)
    assert sorted(p.stem for p in written) == sorted(["trajectories3d", "invariants", "phase"] * 2)
    assert "rk4" in _labels(plot_rollout(methods["rk4"], "phase"))
    with pytest.raises(VPIntegratorError, match="need a reference"):
        plot_error(methods)
    written = plot_all(methods, tmp_path / "figs2", dpi=40, reference=ref, formats=["png"])
    assert sorted(p.name for p in written) == ["error.png", "invariants.png", "phase.png", "trajectories3d.png"]


def test_in_memory_errors(in_memory):
    ref, methods = in_memory
    with pytest.raises(VPIntegratorError, match="same"):
        plot_error({"short": methods["rk4"].select(steps=slice(0, 4))}, reference=ref)
    with pytest.raises(VPIntegratorError, match="plot source must be"):
        plot_error([1, 2, 3])


def test_paper_trajectory_names(tmp_path):
    res = _rollout_file(tmp_path, "rigid_body_paper", ["rk4"], n_traj=None, traj=[100, 719], t_end=0.6)
    assert "trajectories 1 and 4" in _title(plot_rollout(res, "error"))
    assert "trajectory 4" in _title(plot_rollout(res, "invariants", traj=719))
    assert _labels(plot_rollout(res, "error"))[-2:] == ["trajectory 1", "trajectory 4"]


def test_coupled_oscillator_phase_pairs(tmp_path):
    res = _rollout_file(tmp_path, "coupled_oscillator", ["stormer_verlet", "implicit_midpoint"], n_traj=None, dt=0.4)
    fig = plot_rollout(res, "phase")
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [("$q_1$", "$p_1$"), ("$q_2$", "$p_2$")]
    paths = plot_all(res, tmp_path / "figs", dpi=50)
    assert sorted(p.name for p in paths) == sorted(f"{k}.{e}" for k in KINDS for e in ("pdf", "png"))


def test_errors(rigid):
    with pytest.raises(VPIntegratorError, match="valid kinds: trajectories3d"):
        plot_rollout(rigid, "spaghetti")
    with pytest.raises(VPIntegratorError, match="no method 'nope'"):
        plot_rollout(rigid, "error", methods=["nope"])
    with pytest.raises(VPIntegratorError, match="schema"):
        read_rollout(rigid.path.with_name("data.h5"))
    with pytest.raises(VPIntegratorError, match="unknown plot option 'colour'"):
        plot_all(rigid, "unused", colour="red")


# --------------------------------------------------------------------------- vp-plot


def _cli(*args):
    return CliRunner().invoke(plot_main, [str(a) for a in args])


def test_cli_default_and_options(rigid, tmp_path):
    out = tmp_path / "figs"
    res = _cli(rigid.path, "--out", out, "--dpi", 40, "--kind", "error", "--kind", "phase",
               "--set", 'methods=["rk4"]', "--set", "threshold=0.01")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["error.pdf", "error.png", "phase.pdf", "phase.png"]
    res = _cli(rigid.path, "--out", tmp_path / "one", "--traj", "5", "--kind", "error", "--set", 'formats=["png"]')
    assert res.exit_code == 0, res.output
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["error.png"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dpi", "0"], "Error: --dpi must be a whole number > 0"),
        (["--dpi", "-5"], "Error: --dpi must be a whole number > 0"),
        (["--max-points", "1"], "Error: --max-points must be a whole number >= 2"),
        (["--traj", "0"], "Error: --traj 0 is not in"),
        (["--traj", "x"], "Error: --traj must be a comma list of integers"),
        (["--set", "dpi=0"], "Error: --dpi must be a whole number > 0"),
        (["--set", "colour=red"], "Error: set: unknown key 'colour'"),
        (["--set", "traj=[3]", "--traj", "5"], "Error: --set traj=...: traj is also given by its own flag --traj; give it once"),
        (["--kind", "volume", "--kind", "training"], "Error: --kind training draws run directories"),
    ],
)
def test_cli_one_line_errors(rigid, tmp_path, args, message):
    out = tmp_path / "figs"
    res = _cli(rigid.path, "--out", out, *args)
    assert res.exit_code == 1
    assert res.output.startswith(message) and res.output.count("\n") == 1, res.output
    assert not out.exists() or not list(out.iterdir())


def test_cli_leaves_nothing_half_written(rigid, tmp_path, monkeypatch):
    calls = []

    def fail_on_png(self, fname, *a, format=None, **kw):
        calls.append(format)
        if format == "png":
            raise KeyboardInterrupt
        return original(self, fname, *a, format=format, **kw)

    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", fail_on_png)
    out = tmp_path / "figs"
    res = _cli(rigid.path, "--out", out, "--kind", "error")
    assert res.exit_code == 130 and calls == ["pdf", "png"]
    assert sorted(p.name for p in out.iterdir()) == ["error.pdf"]  # the finished PDF; no partial PNG or temporary


# --- divergence is never silent: the figures mark where a method failed ---------------------------------


@pytest.fixture(scope="module")
def blown(tmp_path_factory):
    """rk4 and explicit Euler with a tight blow-up factor: Euler fails, rk4 does not."""
    root = tmp_path_factory.mktemp("blown")
    data = root / "data.h5"
    generate(load_spec("rigid_body", n_traj=3, t_end=2.0, dt=0.2), out=data)
    out = root / "ro.h5"
    rep = run_rollouts(RolloutConfig(data=data, out=out, integrators=["rk4", "euler"], blowup=1.001, t_end=4.0))
    assert "euler" in rep.failures and "rk4" not in rep.failures
    return read_rollout(out), rep


def _blowup_lines(fig):
    return [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "blow-up"]


@pytest.mark.parametrize("plot", [plot_error, plot_invariants])
def test_failure_time_is_marked(blown, plot):
    res, rep = blown
    fig = plot(res)
    lines = _blowup_lines(fig)
    assert lines, "no blow-up marker"
    first = rep.failures["euler"]
    times = {float(ln.get_xdata()[0]) for ln in lines}
    assert first.t in times or any(abs(t - first.t) < 1e-9 for t in times)
    euler = method_colors(["reference", *res.labels], ["reference", "integrator", "integrator"])["euler"]
    assert {matplotlib.colors.to_hex(ln.get_color()) for ln in lines} == {matplotlib.colors.to_hex(euler)}
    assert "blow-up" in _labels(fig)


@pytest.mark.parametrize("plot", [plot_error, plot_invariants])
def test_no_blowup_legend_without_failure(blown, rigid, plot):
    res, _ = blown
    for fig in (plot(res, methods=["rk4"]), plot(rigid)):
        assert not _blowup_lines(fig) and "blow-up" not in _labels(fig)


def test_failure_marked_in_memory_and_banded(tmp_path):
    from vpintegrator.rollout import IntegratorStep, rollout

    ref = generate(load_spec("rigid_body", n_traj=8, t_end=2.0, dt=0.2))
    eul = rollout(IntegratorStep("rigid_body", "euler", 0.2), ref.y[:, 0], 0.2, ref.n_steps, blowup=1.001)
    assert eul.n_failed > 0
    fig = plot_error({"euler": eul}, reference=ref)  # 8 trajectories: median and band, the first failure marked
    lines = _blowup_lines(fig)
    assert len(lines) == 1 and "blow-up" in _labels(fig)
    assert float(lines[0].get_xdata()[0]) == pytest.approx(0.2 * eul.failed_step[eul.failed_step >= 0].min())


def test_plot_all_refuses_figures_over_inputs(rigid, tmp_path):
    import shutil

    src = tmp_path / "error.png"
    shutil.copy(rigid.path, src)
    before = src.read_bytes()
    with pytest.raises(VPIntegratorError, match=r"error\.png is the input file"):
        plot_all(src, tmp_path, kinds=["error"], formats=["png"])
    with pytest.raises(VPIntegratorError, match=r"is a file, not a directory"):
        plot_all(rigid.path, src)
    assert src.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["error.png"]


def test_plot_all_writes_nothing_when_a_kind_fails(rigid, tmp_path, monkeypatch):
    import vpintegrator.plotting.rollout as R

    def boom(*a, **k):
        raise VPIntegratorError("volume failed")

    monkeypatch.setitem(R._PLOTTERS, "volume", boom)
    with pytest.raises(VPIntegratorError, match="volume failed"):
        plot_all(rigid, tmp_path / "figs", kinds=["error", "volume"])
    assert not (tmp_path / "figs").exists()
