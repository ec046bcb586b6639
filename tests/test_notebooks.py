"""The example notebooks (docs/notebooks/) run top to bottom at small sizes and show what they say.

Each notebook has one cell tagged ``parameters`` with its sizes; the test inserts a cell after it that sets
small ones (and a working directory under tmp_path), executes the notebook in a fresh kernel (nbclient),
and checks the printed results. The stored notebooks carry no outputs. The notebooks live in the
repository, not in the wheel: against an installed wheel (a copy of tests/ only) these tests skip.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "docs" / "notebooks"
needs_notebooks = pytest.mark.skipif(not NOTEBOOKS.is_dir(), reason="docs/notebooks/ (repository files, not in the wheel)")
pytestmark = needs_notebooks

# small sizes per notebook: every key must be a name the parameters cell sets
SMALL = {
    "01_quickstart.ipynb": dict(N_TRAJ=30, EPOCHS=1, LM_WINDOWS=128, TIME_LIMIT=30.0, T_ROLLOUT=30.0, N_ROLLOUT=2),
    "02_own_system.ipynb": dict(N_TRAJ=20, EPOCHS=1, LM_WINDOWS=128, TIME_LIMIT=30.0, T_ROLLOUT=5.0, N_ROLLOUT=2),
    "03_hamiltonian_symplectic.ipynb": dict(N_TRAJ=20, T_END=20.0, EPOCHS=1, LM_WINDOWS=128, VAL_ROLLOUT_STEPS=10,
                                            TIME_LIMIT=30.0, T_ROLLOUT=40.0, N_ROLLOUT=2),
    "04_own_model.ipynb": dict(N_TRAJ=20, T_END=4.0, N_PAIRS=2, EPOCHS=1, LM_WINDOWS=128, TIME_LIMIT=30.0, T_ROLLOUT=8.0,
                               N_ROLLOUT=2),
}


def _read(name: str):
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _parameters_cell(nb) -> int:
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and nb.cells[tagged[0]].cell_type == "code", tagged
    return tagged[0]


def test_every_notebook_is_tested_and_stored_without_outputs():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(SMALL)
    for name, small in SMALL.items():
        nb = _read(name)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{name}: store it without outputs"
        params = nb.cells[_parameters_cell(nb)].source
        assigned = {t.id for node in ast.parse(params).body if isinstance(node, ast.Assign) for t in node.targets}
        assert set(small) | {"WORKDIR"} <= assigned, f"{name}: the parameters cell lacks {set(small) - assigned}"


def _run(name: str, tmp_path: Path, monkeypatch) -> str:
    """Execute the notebook at its small sizes; return everything its cells printed."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    nb = _read(name)
    values = {**SMALL[name], "WORKDIR": str(tmp_path / "work")}
    small = "\n".join(f"{key} = {value!r}" for key, value in values.items())
    nb.cells.insert(_parameters_cell(nb) + 1, nbformat.v4.new_code_cell(small))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel is a child process: one thread, as the other tests
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    return "\n".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                     for out in cell.outputs if out.output_type == "stream")


def _rows(text: str) -> dict[str, list[str]]:
    """The rows of a printed markdown metrics table, by method."""
    return {cells[1].strip(): [c.strip() for c in cells[2:-1]]
            for cells in (line.split("|") for line in text.splitlines() if line.startswith("| ") and "---" not in line)
            if cells[1].strip() != "method"}


def test_quickstart(tmp_path, monkeypatch, tol):
    text = _run("01_quickstart.ipynb", tmp_path, monkeypatch)
    assert re.search(r"^162 parameters, 1 epochs", text, re.M), text  # the paper's VPT
    det_error = float(re.search(r"max \|det J - 1\| over 256 random windows: (\S+)", text).group(1))
    assert det_error < tol("det", "float64")
    assert set(_rows(text)) == {"implicit_midpoint", "rk4", "gauss_legendre4", "vpt"}
    work = tmp_path / "work"
    assert {p.name for p in (work / "figures").iterdir() if p.suffix == ".png"} == {"error.png", "invariants.png"}
    assert (work / "vpt" / "best.pt").is_file() and (work / "rollout.h5").is_file()


@pytest.mark.slow
def test_own_system(tmp_path, monkeypatch):
    text = _run("02_own_system.ipynb", tmp_path, monkeypatch)
    assert "Pendulum(omega=1.5) divergence at a few states: [0. 0. 0.]" in text
    assert "Trajectories(system='pendulum', n_traj=20, n_states=201, dim=2" in text
    rows = _rows(text)
    assert set(rows) == {"implicit_midpoint", "rk4", "vpt"} and all(r[-1] == "0" for r in rows.values())  # none failed


@pytest.mark.slow
def test_hamiltonian_symplectic(tmp_path, monkeypatch, tol):
    text = _run("03_hamiltonian_symplectic.ipynb", tmp_path, monkeypatch)
    errors = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^(.+?)max relative ‖JᵀΩJ − Ω‖: (\S+)$", text, re.M)}
    assert set(errors) == {"g_sympnet", "symplectic_transformer", "stormer_verlet (one step)", "rk4 (one step)"}
    assert max(errors["g_sympnet"], errors["symplectic_transformer"], errors["stormer_verlet (one step)"]) < tol("symplectic", "float64")
    assert errors["rk4 (one step)"] > 1e-6
    drifts = dict(re.findall(r"^(\S+)\s+max relative energy drift (\S+)", text, re.M))
    assert set(drifts) == {"stormer_verlet", "rk4", "g_sympnet", "coupled_oscillator_symplectic_transformer"}


@pytest.mark.slow
def test_own_model(tmp_path, monkeypatch):
    text = _run("04_own_model.ipynb", tmp_path, monkeypatch)
    assert "{'name': 'shear_net', 'n_pairs': 2, 'seq_len': 1, 'dim': 3, 'model_class': 'shearnets:ShearNet'}" in text
    assert "registered: True | parameters: 27" in text
    volume = float(re.search(r"^volume: max error (\S+)$", text, re.M).group(1))
    assert volume < 1e-12
    assert "summary.json: shear_net shearnets:ShearNet" in text
    rows = _rows(text)
    assert set(rows) == {"implicit_midpoint", "rk4", "shear"} and all(r[-2] == "0" for r in rows.values())  # none failed
    assert all(r[0] == "test" for r in rows.values())  # held-out trajectories
    from vpintegrator.rollout.numba_model import AVAILABLE

    if AVAILABLE:
        gap = float(re.search(r"^packed: 5 ops, max \|kernel - forward\| = (\S+)$", text, re.M).group(1))
        assert gap < 1e-12
        assert re.search(r"^work-precision: shear error \S+ at T, \S+ s per unit time, runner numba$", text, re.M), text
