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
from vpintegrator.data import integrate
from vpintegrator.models import build_model
from vpintegrator.plotting import (
    DISPLAY_NAMES,
    INTEGRATOR_COLORS,
    INTEGRATOR_STYLES,
    KINDS,
    MODEL_MARKERS,
    MODEL_PALETTE,
    display_name,
    figure_style,
    method_colors,
    method_styles,
    plot_all,
    plot_error,
    plot_invariants,
    plot_phase,
    plot_rollout,
    plot_trajectories3d,
    plot_volume,
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
        assert colours["RK4"] == INTEGRATOR_COLORS["rk4"] and colours["VPT"] == MODEL_PALETTE[0]
        assert colours["VP splitting"] == INTEGRATOR_COLORS["splitting"]


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
    assert [lab for lab in _labels(fig) if not lab.startswith("trajectory")] == ["RK4"]
    assert "reference" in _labels(plot_rollout(rigid, "invariants"))


def test_rigid_body_sphere_is_drawn(rigid):
    from mpl_toolkits.mplot3d.art3d import Line3DCollection

    ax = plot_trajectories3d(rigid).axes[0]
    assert any(isinstance(c, Line3DCollection) for c in ax.collections)
    assert [ax.get_xlabel(), ax.get_ylabel(), ax.get_zlabel()] == ["$z_1$", "$z_2$", "$z_3$"]
    assert not any(isinstance(c, Line3DCollection) for c in plot_trajectories3d(rigid, sphere=False).axes[0].collections)


def test_the_cumulative_volume_panel_draws_the_running_maximum(rigid):
    """Issue 57: the cumulative |Σ log det J| of implicit midpoint oscillates over decades and covered the
    other lines; the panel draws its running maximum (monotone in t), labelled so, from the file's values."""
    from vpintegrator.plotting.rollout import _running_max

    assert np.array_equal(_running_max(np.array([[0.0, -1e-3, 1e-9, 0.0, -2e-3, 1e-12]])),
                          np.array([[np.nan, 1e-3, 1e-3, 1e-3, 2e-3, 2e-3]]), equal_nan=True)
    fig = plot_volume(rigid, methods=["implicit_midpoint"], band=False)
    cum = rigid.metrics["implicit_midpoint"].cum_log_det_J
    lines = [ln for ln in fig.axes[1].get_lines() if len(ln.get_ydata()) > 1]
    assert len(lines) == cum.shape[0]
    for line, row in zip(lines, cum):
        y = np.asarray(line.get_ydata(), dtype=float)
        want = np.maximum.accumulate(np.abs(np.asarray(row, dtype=float)))  # the slow obvious reference
        np.testing.assert_allclose(y[np.isfinite(y)], want[np.isfinite(y)], rtol=0, atol=0)
        assert np.all(np.diff(y[np.isfinite(y)]) >= 0)
    assert "max" in fig.axes[1].get_ylabel()


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
    assert colours["implicit midpoint"] == INTEGRATOR_COLORS["implicit_midpoint"]
    assert colours["RK4"] == INTEGRATOR_COLORS["rk4"]
    rk4 = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "RK4"][0]
    expected = np.linalg.norm(methods["rk4"].y[0] - ref.y[0], axis=-1) / np.linalg.norm(ref.y[0], axis=-1)
    np.testing.assert_allclose(rk4.get_ydata(), np.where(expected > 0, expected, np.nan))
    # invariants come from traj.system: implicit midpoint keeps both rigid-body invariants to rounding
    fig = plot_invariants(methods, reference=ref, traj=[0])
    imr = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "implicit midpoint"][0]
    assert np.nanmax(imr.get_ydata()) < 1e-12
    assert "trajectory 0" in _title(fig)
    # one Trajectories is labelled by its method; without a reference there is no error figure
    written = plot_all(methods["rk4"], tmp_path / "figs", dpi=40)
    assert sorted(p.stem for p in written) == sorted(["trajectories3d", "invariants", "phase"] * 2)
    assert "RK4" in _labels(plot_rollout(methods["rk4"], "phase"))
    with pytest.raises(VPIntegratorError, match="need a reference"):
        plot_error(methods)
    written = plot_all(methods, tmp_path / "figs2", dpi=40, reference=ref, formats=["png"])
    assert sorted(p.name for p in written) == ["error.png", "invariants.png", "phase.png", "trajectories3d.png"]


def test_one_type_for_files_and_memory(rigid, in_memory):
    """plot_data gives a RolloutResult from a file and from memory alike (the
    rollout file's type), with the figures' fields: kinds, the reference first in drawing order, the name."""
    from vpintegrator.data.rollouts import RolloutResult
    from vpintegrator.plotting import plot_data

    ref, methods = in_memory
    mem = plot_data(methods, reference=ref)
    assert isinstance(mem, RolloutResult) and mem.path is None and mem.name == "trajectories" and mem.table == []
    assert mem.labels == ["implicit_midpoint", "rk4"] and mem.all_labels == ["reference", "implicit_midpoint", "rk4"]
    assert mem.kinds == {"implicit_midpoint": "integrator", "rk4": "integrator"} and not mem.paper
    assert mem.invariant_names == ("energy", "casimir") and mem.n_traj == 3 and mem.dim == 3
    assert mem.system_name == "rigid_body" and mem.system.name == "rigid_body"
    np.testing.assert_array_equal(mem.metrics["rk4"].invariants["energy"],
                                  ref.system.invariants(methods["rk4"].y)["energy"])
    no_ref = plot_data(methods)
    assert no_ref.reference is None and no_ref.all_labels == ["implicit_midpoint", "rk4"] and no_ref.dim == 3
    data = plot_data(rigid)
    assert data is rigid and data.name == str(rigid.path) and data.kinds["vpt"] == "model"
    assert data.all_labels == ["reference", *rigid.labels] and data.states("reference") is rigid.reference
    thin = plot_data(rigid, max_points=5)
    assert isinstance(thin, RolloutResult) and len(thin.t) <= 5 and thin.table == rigid.table
    with pytest.raises(VPIntegratorError, match="a rollout file has its own reference"):
        plot_data(rigid, reference=ref)
    with pytest.raises(VPIntegratorError, match="already has its reference"):
        plot_data(mem, reference=ref)


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
        (["--dpi", "100000"], "Error: --dpi must be a whole number > 0 and at most 6000"),  # issue 36: died of memory
        (["--max-points", "1"], "Error: --max-points must be a whole number >= 2"),
        (["--traj", "0"], "Error: --traj 0 is not in"),
        (["--traj", "x"], "Error: --traj must be a comma list of integers"),
        (["--set", "dpi=0"], "Error: dpi must be a whole number > 0"),  # given by --set: named as the key
        (["--set", "colour=red"], "Error: --set: unknown key 'colour'; valid keys: methods,"),
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


# --- figures for papers: colour-blind-safe styles, display names, ax=, journal widths ------------------

# Machado, Oliveira & Fernandes (2009), "A physiologically-based model for simulation of color vision
# deficiency", IEEE TVCG 15(6): severity-1.0 matrices, applied to linear RGB.
CVD = {
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}
#: CIE76 ΔE every pair of a paper figure's colours keeps under each simulated deficiency (≈ 2.3 is a just
#: noticeable difference; 15 is a clear difference between thin lines)
MIN_DELTA_E = 15.0


def _lab_seen_with(colour, deficiency=None) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour, as seen with a colour-vision deficiency (Machado 2009)."""
    rgb = np.asarray(matplotlib.colors.to_rgb(colour))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    if deficiency is not None:
        lin = np.clip(CVD[deficiency] @ lin, 0.0, 1.0)
    xyz = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                    [0.0193339, 0.1191920, 0.9503041]]) @ lin / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _delta_e(a, b, deficiency=None) -> float:
    return float(np.linalg.norm(_lab_seen_with(a, deficiency) - _lab_seen_with(b, deficiency)))  # CIE76


PAPER_FIGURE = ["reference", "implicit_midpoint", "rk4", "gauss_legendre4", "splitting", "vpt", "vpff", "st"]


def test_delta_e_check_sees_the_old_palette_fail():
    # matplotlib's tab10 green (old Gauss–Legendre 4) and red (old first model) under deuteranopia: the
    # issue's ΔE 7.3; the check must be able to fail
    assert _delta_e("#2ca02c", "#d62728", "deuteranopia") == pytest.approx(7.3, abs=0.05)
    assert _delta_e("#2ca02c", "#d62728") > 100  # clearly apart with normal colour vision
    assert _delta_e("#2ca02c", "#d62728", "deuteranopia") < MIN_DELTA_E


@pytest.mark.parametrize("deficiency", [None, *CVD])
def test_paper_figure_colours_are_colour_blind_distinguishable(deficiency):
    colours = list(method_colors(PAPER_FIGURE).values())
    assert len(set(colours)) == len(PAPER_FIGURE)  # the reference, 4 integrators and 3 models: 8 colours
    worst = min((_delta_e(a, b, deficiency), a, b) for i, a in enumerate(colours) for b in colours[i + 1:])
    assert worst[0] >= MIN_DELTA_E, worst


def test_every_method_has_its_own_colour_dash_and_marker():
    from vpintegrator.integrators import list_integrators

    integrators = list_integrators()
    assert set(integrators) <= set(INTEGRATOR_STYLES) and set(integrators) <= set(DISPLAY_NAMES)
    models = [f"model_{k}" for k in range(len(MODEL_PALETTE) * len(MODEL_MARKERS))]
    styles = method_styles(["reference", *INTEGRATOR_STYLES, *models])
    triples = [(s.color, str(s.linestyle), s.marker) for s in styles.values()]
    assert len(set(triples)) == len(triples)
    # where several trajectories are drawn the dash tells the trajectory: a paper figure's methods still
    # differ by (colour, marker), and models are solid, integrators not
    paper = method_styles(PAPER_FIGURE)
    assert len({(s.color, s.marker) for s in paper.values()}) == len(PAPER_FIGURE)
    assert all(styles[m].linestyle == "-" for m in models) and all(styles[k].linestyle != "-" for k in integrators)


def test_rk4_stays_visible_over_gauss_legendre4(rigid, tmp_path):
    res = _rollout_file(tmp_path, "rigid_body", ["gauss_legendre4", "rk4"], n_traj=2, traj=[1], dt=0.2)
    fig = plot_error(res)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    rk4, gl4 = lines["RK4"], lines["Gauss–Legendre 4"]
    assert rk4.get_marker() != gl4.get_marker() and rk4.get_linestyle() != gl4.get_linestyle()
    assert rk4.get_markevery()[1] == gl4.get_markevery()[1] >= 1  # sparse markers ...
    assert rk4.get_markevery()[0] != gl4.get_markevery()[0]  # ... in different places


def test_display_names_in_legends_and_user_labels_kept(rigid, in_memory):
    assert display_name("gauss_legendre4") == "Gauss–Legendre 4" and display_name("implicit_midpoint") == "implicit midpoint"
    assert display_name("rk4") == "RK4" and display_name("vpt") == "VPT" and display_name("my_vpt_s1") == "my_vpt_s1"
    labels = _labels(plot_rollout(rigid, "invariants"))
    assert labels[:5] == ["reference", "implicit midpoint", "RK4", "VP splitting", "VPT"]
    assert not any("_" in lab for lab in labels)
    ref, methods = in_memory
    fig = plot_error({"my_model_seed1": methods["rk4"], "implicit_midpoint": methods["implicit_midpoint"]},
                     reference=ref)
    assert _labels(fig)[:2] == ["my_model_seed1", "implicit midpoint"]


def test_ax_draws_into_the_given_axes(rigid):
    fig = Figure(layout="constrained")
    grid = fig.subplots(2, 3)
    assert plot_error(rigid, ax=grid[0, 1]) is fig
    assert plot_invariants(rigid, axes=grid[1, :2]) is fig
    assert plot_volume(rigid, axes=[grid[0, 2], grid[1, 2]]) is fig
    assert grid[0, 1].get_lines() and grid[1, 0].get_lines() and grid[1, 1].get_lines() and grid[1, 2].get_lines()
    assert not grid[0, 0].get_lines() and not fig.legends  # the legend goes into the first given Axes
    assert "RK4" in [t.get_text() for t in grid[0, 1].get_legend().get_texts()]
    assert not fig.get_suptitle()
    fig3d = Figure()
    ax3d = fig3d.add_subplot(projection="3d")
    assert plot_trajectories3d(rigid, ax=ax3d) is fig3d and ax3d.get_lines()
    assert plot_rollout(rigid, "phase", axes=Figure().subplots(1, 3)).axes[0].get_lines()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda r: plot_error(r, ax=Figure().subplots(1, 2)), r"ax: this figure draws 1 panel; give one matplotlib Axes, got 2 Axes$"),
        (lambda r: plot_invariants(r, axes=Figure().add_subplot()), r"axes: this figure draws 2 panels; give 2 matplotlib Axes"),
        (lambda r: plot_trajectories3d(r, ax=Figure().add_subplot()), r"ax: give 3D Axes"),
        (lambda r: plot_phase(r, axes="left"), r"axes: this figure draws 3 panels; .*, got a str$"),
        (lambda r: plot_error(r, style="tiny"), r"style 'tiny' is not a preset \(default, single, double\)"),
        (lambda r: plot_error(r, style={"font.sise": 3}), r"style \(dict\): .*font.sise"),
    ],
)
def test_bad_ax_and_style_are_one_line_errors(rigid, call, match):
    with pytest.raises(VPIntegratorError, match=match) as err:
        call(rigid)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("preset, width", [("single", 3.5), ("double", 7.2)])
def test_column_presets_give_the_width(rigid, tmp_path, preset, width):
    from PIL import Image

    for kind in KINDS:
        assert plot_rollout(rigid, kind, style=preset).get_figwidth() == pytest.approx(width)
    fig = plot_rollout(rigid, "invariants", style=preset)
    assert {t.get_fontsize() for t in fig.legends[0].get_texts()} == {figure_style(preset).rc["legend.fontsize"]}
    written = plot_all(rigid, tmp_path / preset, kinds=["error", "phase"], formats=["png"], dpi=100, style=preset)
    assert [Image.open(p).size[0] for p in written] == [round(100 * width)] * 2  # saved exactly that wide


def test_user_mplstyle_file(rigid, tmp_path):
    path = tmp_path / "paper.mplstyle"
    path.write_text("lines.linewidth: 2.5\nlegend.fontsize: 9\nfigure.figsize: 5.0, 3.0\n", encoding="utf-8")
    fig = plot_error(rigid, style=str(path))
    assert fig.get_figwidth() == pytest.approx(5.0)
    assert {ln.get_linewidth() for ln in fig.axes[0].get_lines() if ln.get_label() == "VPT"} == {2.5}
    assert {t.get_fontsize() for t in fig.legends[0].get_texts()} == {9.0}
    # a list applies in order: the column width, then the file's fonts (the file's figsize wins)
    assert plot_error(rigid, style=["single", path]).get_figwidth() == pytest.approx(5.0)
    with pytest.raises(VPIntegratorError, match="is not a preset"):
        plot_error(rigid, style=str(tmp_path / "missing.mplstyle"))


def test_cli_style_by_set(rigid, tmp_path):
    from PIL import Image

    out = tmp_path / "figs"
    res = _cli(rigid.path, "--out", out, "--kind", "error", "--dpi", 100, "--set", "style=single",
               "--set", 'formats=["png"]')
    assert res.exit_code == 0, res.output
    assert Image.open(out / "error.png").size[0] == 350
    res = _cli(rigid.path, "--out", tmp_path / "bad", "--set", "style=tiny")
    assert res.exit_code == 1 and res.output.startswith("Error: style 'tiny' is not a preset") and res.output.count("\n") == 1, res.output


@pytest.fixture(scope="module")
def long_names(tmp_path_factory):
    """Methods with long display names: legends wider than a journal column."""
    return _rollout_file(tmp_path_factory.mktemp("long"), "rigid_body",
                         ["implicit_midpoint", "rk4", "splitting", "gauss_legendre4", "implicit_midpoint_y6",
                          "splitting_blanes_moan4"], n_traj=8, traj=[3, 5], dt=0.2)


@pytest.mark.parametrize("preset", ["single", "double", None])
def test_every_element_lies_inside_the_canvas(long_names, tmp_path, preset):
    """A column preset saves exactly the figure's width (no tight cropping): titles, labels, legend and a
    3-D box must fit inside it (they were cropped: the legend, the volume figure's y label, the 3-D ticks)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for kind in KINDS:
        fig = plot_rollout(long_names, kind, style=preset)
        save_figure(fig, tmp_path / f"{preset}-{kind}", formats=["png"], dpi=100)
        box = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())  # inches, every artist
        width, height = fig.get_size_inches()
        assert box.x0 >= -0.01 and box.y0 >= -0.01 and box.x1 <= width + 0.01 and box.y1 <= height + 0.01, \
            (kind, box.bounds, (width, height))
        if kind != "trajectories3d":
            assert len(_labels(fig)) >= 7  # nothing dropped to make it fit


def test_title_false_and_label_overrides(rigid, tmp_path):
    """title=False drops the figure title (panel names stay), title="..." replaces it; method_names= renames
    methods over the readable defaults; systems read as words ("rigid body")."""
    assert "rigid body" in _title(plot_rollout(rigid, "error")) and "rigid_body" not in _title(plot_rollout(rigid, "error"))
    for kind in KINDS:
        fig = plot_rollout(rigid, kind, title=False)
        assert not fig.get_suptitle() and "trajector" not in _title(fig), kind
    assert [ax.get_title() for ax in plot_rollout(rigid, "volume", title=False).axes] == [
        "volume change per map", "cumulative, running maximum"]
    assert plot_rollout(rigid, "invariants", title="Drift").get_suptitle() == "Drift"
    labels = _labels(plot_rollout(rigid, "error", method_names={"vpt": "VPT (ours)", "rk4": "Runge–Kutta 4"}))
    assert "VPT (ours)" in labels and "Runge–Kutta 4" in labels and "implicit midpoint" in labels
    assert "VPT" in _labels(plot_rollout(rigid, "error"))  # the override held for that figure only
    with pytest.raises(VPIntegratorError, match="title must be true, false or a text"):
        plot_error(rigid, title=3)
    with pytest.raises(VPIntegratorError, match="method_names must map method labels to texts"):
        plot_error(rigid, method_names=["vpt"])


def test_cli_no_title_and_label(rigid, tmp_path, monkeypatch):
    import vpintegrator.plotting.rollout as rollout_module

    seen = {}
    real = rollout_module.save_figure

    def keep(fig, *args, **kwargs):
        seen[str(args[0])] = fig
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(rollout_module, "save_figure", keep)
    res = _cli(rigid.path, "--out", tmp_path / "f", "--kind", "error", "--kind", "invariants", "--no-title",
               "--label", "vpt=VPT (ours)", "--set", 'formats=["png"]')
    assert res.exit_code == 0, res.output
    assert len(seen) == 2
    for fig in seen.values():
        assert not fig.get_suptitle() and "trajector" not in _title(fig)
        assert "VPT (ours)" in _labels(fig)
    res = _cli(rigid.path, "--out", tmp_path / "g", "--label", "vpt")
    assert res.exit_code == 1 and "label 'vpt' is not NAME=TEXT" in res.output and res.output.count("\n") == 1
    res = _cli(rigid.path, "--out", tmp_path / "h", "--no-title", "--set", "title=false")
    assert res.exit_code != 0 and "also given by its own flag --no-title" in res.output


def test_a_data_only_rollout_is_titled_by_its_file_not_a_question_mark(rigid):
    """A rollout of data that names no system (issue 88): the titles name the data file, never a literal '?'."""
    import dataclasses

    from vpintegrator.plotting.style import system_title

    meta = {k: v for k, v in rigid.meta.items() if k != "system"}
    bare = dataclasses.replace(rigid, meta={**meta, "data_file": "runs/obs.h5"})
    for kind in ("error", "trajectories3d", "volume"):
        title = _title(plot_rollout(bare, kind))
        assert "data obs.h5" in title and "?" not in title, (kind, title)
    assert "rigid body" in _title(plot_rollout(rigid, "error"))
    assert system_title({}) == "data of no named system"


def test_the_journal_widths_are_documented_as_the_presets_set_them():
    """Issue 88: the column widths were in --help only; the plotting API page (the package docstring) and the
    walkthrough give each preset's width and text size, the numbers of PRESETS."""
    from pathlib import Path

    import vpintegrator.plotting as plotting
    from vpintegrator.plotting.style import PRESETS

    page = Path(__file__).resolve().parents[1] / "docs" / "walkthrough.md"
    texts = [plotting.__doc__ or ""] + ([page.read_text(encoding="utf-8")] if page.is_file() else [])
    for text in texts:
        flat = " ".join(text.split())
        for name in ("single", "double"):
            width, rc = PRESETS[name]
            assert f"{width:g} in" in flat and f"{rc['font.size']}-pt" in flat, (name, flat[:200])
