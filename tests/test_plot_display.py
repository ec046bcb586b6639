"""Figures in a notebook: plot_all and plot_training return FigureFiles (shown as the images through
_repr_html_/_repr_png_), and re-running the same call replaces its own files instead of failing; another
call's files and files not drawn here are still refused (issue 46, item 5)."""

from __future__ import annotations

import base64

import pytest

from vpintegrator.data import generate, load_spec
from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.plotting import FigureFiles, plot_all, plot_training
from vpintegrator.plotting.style import call_tag, replaces

from test_plot_training import _run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def result():
    ref = generate(load_spec("rigid_body", n_traj=2, t_end=1.0, dt=0.2))
    rk4 = integrate("rigid_body", ref.y[:, 0], dt=0.2, n_steps=ref.n_steps, method="rk4")
    return {"rk4": rk4}, ref


def test_plot_training_is_shown_as_its_image_and_reruns(tmp_path):
    run = _run(tmp_path / "run")
    files = plot_training(run, tmp_path / "figs", dpi=40)
    assert isinstance(files, FigureFiles) and isinstance(files, list)
    assert sorted(p.name for p in files) == ["training.pdf", "training.png"]
    png = files._repr_png_()
    assert png is not None and png.startswith(PNG) and png == (tmp_path / "figs" / "training.png").read_bytes()
    html = files._repr_html_()
    assert base64.b64encode(png).decode() in html and "training.pdf" in html
    again = plot_training(run, tmp_path / "figs", dpi=40)  # the same cell run again: its own files replaced
    assert again == files
    with pytest.raises(VPIntegratorError, match="exists"):
        plot_training(run, tmp_path / "figs", dpi=40, overwrite=False)  # False still refuses
    other = _run(tmp_path / "other")
    with pytest.raises(VPIntegratorError, match="exists"):  # another call's figures are not replaced ...
        plot_training(other, tmp_path / "figs", dpi=40)
    assert plot_training(other, tmp_path / "figs", dpi=40, overwrite=True) == files  # ... unless asked


def test_plot_all_shows_every_png_and_reruns(result, tmp_path):
    files = plot_all(result[0], tmp_path / "figs", kinds=["trajectories3d", "error"], dpi=30, reference=result[1])
    pngs = files.pngs()
    assert [p.name for p in pngs] == ["trajectories3d.png", "error.png"]
    assert files._repr_png_() is None  # two images: the HTML shows both
    html = files._repr_html_()
    assert html.count("<img ") == 2
    assert all(base64.b64encode(p.read_bytes()).decode() in html for p in pngs)
    assert plot_all(result[0], tmp_path / "figs", kinds=["trajectories3d", "error"], dpi=30, reference=result[1]) == files


def test_a_file_not_written_by_the_call_is_refused(result, tmp_path):
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "error.png").write_bytes(b"not a figure")
    with pytest.raises(VPIntegratorError, match="error.png"):
        plot_all(result[0], figs, kinds=["error"], formats=["png"], dpi=30, reference=result[1])
    assert (figs / "error.png").read_bytes() == b"not a figure"


def test_call_tags():
    assert call_tag("plot_all", ["a.h5"]) == call_tag("plot_all", ["./a.h5"])
    assert call_tag("plot_all", ["a.h5"]) != call_tag("plot_all", ["b.h5"]) != call_tag("plot_training", ["b.h5"])
    assert replaces("missing.png", None, call_tag("plot_all")) is False
    assert replaces("missing.png", True, None) is True and replaces("x", False, "t") is False


def test_no_png_written_lists_the_files(result, tmp_path):
    files = plot_all(result[0], tmp_path / "figs", kinds=["error"], formats=["pdf"], dpi=30, reference=result[1])
    assert files._repr_png_() is None
    assert "error.pdf" in files._repr_html_() and "<img" not in files._repr_html_()


class _FakeTqdm:
    made: list = []

    def __init__(self, total=None, desc="", unit="it", leave=True):
        self.total, self.desc, self.unit, self.n, self.postfix, self.closed = total, desc, unit, 0, "", False
        _FakeTqdm.made.append(self)

    def update(self, n):
        self.n += n

    def set_postfix_str(self, text, refresh=True):
        self.postfix = text

    def close(self):
        self.closed = True


@pytest.fixture
def notebook(monkeypatch):
    """A Jupyter kernel with tqdm: tqdm.auto is a recording fake."""
    import sys
    import types

    from vpintegrator import _progress

    _FakeTqdm.made = []
    monkeypatch.setattr(_progress, "in_notebook", lambda: True)
    monkeypatch.setitem(sys.modules, "tqdm.auto", types.SimpleNamespace(tqdm=_FakeTqdm))
    return _FakeTqdm.made


def test_progress_in_a_notebook_is_tqdms_widget(notebook):
    from vpintegrator._progress import progress

    with progress("vp-gen rigid_body", 10, unit="trajectories") as bar:
        bar.update(4)
        bar.advance(6, "done")
    (made,) = notebook
    assert (made.desc, made.total, made.unit, made.n, made.postfix, made.closed) == \
        ("vp-gen rigid_body", 10, "trajectory", 10, "done", True)


def test_training_progress_in_a_notebook_is_tqdms_widget(notebook):
    from types import SimpleNamespace

    from vpintegrator.training.loop import progress_bar

    info = SimpleNamespace(epoch=1, train_loss=0.5, val_loss=float("nan"), lr=1e-3)
    with progress_bar(True, 3, None) as update:
        update(info, 0.1)
        update(info, 0.2)
    (made,) = notebook
    assert (made.desc, made.total, made.n, made.closed) == ("training", 3, 2, True)
    assert "train_loss 5.000e-01" in made.postfix


def test_outside_a_notebook_no_widget():
    from vpintegrator._progress import in_notebook, notebook_widget

    assert in_notebook() is False and notebook_widget("x", 3) is None


@pytest.mark.parametrize("name", ["vpt", "runs/reproduce_rigid_body/train/vpt_seed0_phase2_unrolled_long_name_of_a_run@best"])
def test_single_column_error_legend_is_not_clipped(result, tmp_path, name):
    """style="single": the error figure's legend lies inside the 3.5-inch file at print resolution (the
    labels wrap when one column is still too wide); no ink touches the file's left or right edge."""
    import numpy as np
    from PIL import Image

    from vpintegrator.plotting import plot_error
    from vpintegrator.plotting.style import save_figure

    methods, ref = result
    fig = plot_error({name: methods["rk4"], "rk4": methods["rk4"]}, reference=ref, style="single")
    (png,) = save_figure(fig, tmp_path / "error", formats=["png"], dpi=300)
    ink = np.asarray(Image.open(png).convert("L")) < 200  # (rows, columns)
    assert ink.shape[1] == 1050  # 3.5 in at 300 dpi
    assert not ink[:, :6].any() and not ink[:, -6:].any()


def test_volume_notes_call_a_singular_map_undefined_never_exactly_zero():
    """A map with det J = 0 (log|det J| = -inf, the standard transformer's) is 'not defined', not 'exactly 0';
    one singular at some maps is named although its other maps are drawn; all-zero values are 'exactly 0'."""
    import numpy as np

    from vpintegrator.plotting.rollout import _volume_notes

    values = {"st": np.array([[-np.inf, -223.8]]), "parrot": np.full((1, 2), -np.inf),
              "exact": np.zeros((1, 2)), "broken": np.full((1, 2), np.nan), "vpt": np.array([[1e-15, -2e-15]])}
    notes = dict((why, names) for names, why in _volume_notes(values, missing=["parrot", "exact", "broken"]))
    assert notes == {"not shown (exactly 0)": ["exact"], "not shown (det J = 0: not defined)": ["parrot"],
                     "det J = 0 at some maps (not drawn)": ["st"], "not shown (not defined: NaN)": ["broken"]}
