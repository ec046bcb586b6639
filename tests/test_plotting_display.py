"""Figures display inline in a fresh Jupyter kernel (an ``image/png`` output, not the text ``<Figure ...>``)."""

from __future__ import annotations

import pytest

CELLS = [
    "import vpintegrator as vp\n"
    "from vpintegrator.plotting import plot_error\n"
    "ref = vp.generate(vp.load_spec('rigid_body', n_traj=2, t_end=1.0, dt=0.2))\n"
    "rk4 = vp.integrate('rigid_body', ref.y[:, 0], dt=0.2, n_steps=ref.n_steps, method='rk4')",
    "plot_error({'rk4': rk4}, reference=ref)",  # a figure as the cell's value
]


def test_a_figure_is_a_png_in_a_fresh_kernel(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own default (the inline backend)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[-1].outputs
    assert [o.output_type for o in outputs] == ["execute_result"], outputs
    assert "image/png" in outputs[0].data, outputs[0].data.get("text/plain")
    import base64

    assert base64.b64decode(outputs[0].data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_outside_ipython_nothing_is_registered():
    from vpintegrator.plotting import enable_notebook_display

    assert enable_notebook_display() is False
