"""Bad input, table-driven: every case (tests/bad_inputs/cases_*.py) ends in one error line with the right
exit code, no traceback, and every input file byte-for-byte unchanged (hashes before and after)."""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import re
import shutil
import types
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bad_inputs import PLACEHOLDERS, Case
from vpintegrator._shipped import results_files
from vpintegrator.errors import VPIntegratorError

AREAS = ("gen", "train", "rollout", "plot", "api", "outputs", "shards", "external", "sindy", "study")
CASES: list[Case] = []
for _area in AREAS:
    try:
        CASES += importlib.import_module(f"bad_inputs.cases_{_area}").CASES
    except ModuleNotFoundError as err:
        if err.name != f"bad_inputs.cases_{_area}":
            raise

COMMANDS = {"vp-gen": "gen", "vp-train": "train", "vp-rollout": "rollout", "vp-plot": "plot", "vp-study": "study"}

pytestmark = pytest.mark.usefixtures("one_thread")


class _Evil:
    def __reduce__(self):  # loading this pickle would run a command; it must be refused, never run
        import os

        return (os.system, ("touch EVIL_RAN",))


def _write_good_data(ws: Path) -> None:
    from vpintegrator.data import write_trajectories
    from vpintegrator.data import integrate

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(8, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    write_trajectories(ws / "data.h5", integrate("rigid_body", y0, 0.2, 20, method="rk4"))
    write_trajectories(ws / "data_im.h5", integrate("rigid_body", y0, 0.2, 20, method="implicit_midpoint"))
    q = rng.uniform(-1, 1, size=(6, 4))
    write_trajectories(ws / "co.h5", integrate("coupled_oscillator", q, 0.4, 20, method="implicit_midpoint"))
    (ws / "family.toml").write_text(
        '[system]\nname = "rigid_body"\n[parameters]\ninertia = { dist = "uniform", low = 0.5, high = 3.0 }\n'
        '[initial_conditions]\nsampler = "sphere"\nn_traj = 4\n[integration]\ndt = 0.2\nt_end = 1.0\nmethod = "rk4"\n')
    from vpintegrator.data import generate, load_spec

    generate(load_spec(ws / "family.toml"), out=ws / "family_bad.h5", workers=1)
    with h5py.File(ws / "family_bad.h5", "r+") as f:
        f.attrs["parameter_dists"] = '{"moment": {"dist": "uniform", "low": 0.5, "high": 3.0}}'
    (ws / "family.toml").unlink()
    for name, change in (("nan", ("y", (2, 5, 1), np.nan)), ("inf", ("y", (3, 7, 0), np.inf)),
                         ("unknown_system", ("attr", "system", "pendulum")), ("v0", ("attr", "schema_version", 0))):
        shutil.copy(ws / "data.h5", ws / f"{name}.h5")
        with h5py.File(ws / f"{name}.h5", "r+") as f:
            if change[0] == "y":
                y = f["y"][:]
                y[change[1]] = change[2]
                f["y"][...] = y
            else:
                f.attrs[change[1]] = change[2]


@pytest.fixture(scope="session")
def workspace_template(tmp_path_factory) -> Path:
    """Good and bad input files, built once; each case gets a fresh copy."""
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main

    ws = tmp_path_factory.mktemp("bad_inputs") / "ws"
    ws.mkdir()
    _write_good_data(ws)
    (ws / "spec.toml").write_text(
        '[system]\nname = "rigid_body"\n[initial_conditions]\nsampler = "sphere"\nn_traj = 4\n'
        '[integration]\ndt = 0.1\nt_end = 1.0\nmethod = "rk4"\n'
    )
    (ws / "config.toml").write_text(
        f'data = ["{ws / "data.h5"}"]\nepochs = 2\nbatch_size = 32\ndtype = "float64"\ndevice = "cpu"\n'
        '[model]\nname = "vpt"\nseq_len = 3\nn_blocks = 1\nL = 2\n'
    )
    (ws / "rollout.toml").write_text(f'data = "{ws / "data.h5"}"\nintegrators = ["rk4"]\nn_traj = 2\n')
    result = CliRunner().invoke(train_main, [str(ws / "config.toml"), "--out", str(ws / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(rollout_main, ["--data", str(ws / "data.h5"), "--model", f"vpt={ws / 'run'}",
                                               "--integrators", "rk4", "--n-traj", "3", "--device", "cpu",
                                               "--out", str(ws / "rollout.h5"), "--quiet"])
    assert result.exit_code == 0, result.output
    last = (ws / "run" / "last.pt").read_bytes()
    (ws / "truncated.pt").write_bytes(last[: len(last) // 2])
    (ws / "foreign.pt").write_bytes(pickle.dumps(_Evil()))
    torch.save(torch.zeros(3), ws / "zeros.pt")
    (ws / "notes.txt").write_text("not data\n")
    (ws / "empty.h5").write_bytes(b"")
    (ws / "adir").mkdir()
    (ws / "out").mkdir()
    _write_existing_outputs(ws)
    _write_study_results(ws)
    return ws


def _write_study_results(ws: Path) -> None:
    """studies/<case>/unknown_form.json: result files that are not what the unknown_form study wrote."""
    import json

    row = {"system": "rigid_body", "noise": 0.0, "seed": 0, "method": "node@rk4", "approach": "node",
           "errors": {"10": [1e-3, 2e-3]}, "structure": None, "failed": 0, "cost": 1e-5, "train_cpu": 3.0}
    docs = {
        "other_study": {"study": "rigid_body", "results": [{"model": "vpt", "seed": 0}]},
        "missing_key": {"rows": [row, {k: v for k, v in row.items() if k != "errors"}]},
        "wrong_type": {"rows": [{**row, "seed": "zero"}]},
        "errors_text": {"rows": [{**row, "errors": {"10": "small"}}]},
        "rows_not_list": {"rows": {"0": row}},
        "unknown_system": {"rows": [{**row, "system": "pendulum"}]},
    }
    for name, doc in docs.items():
        (ws / "studies" / name).mkdir(parents=True)
        (ws / "studies" / name / "unknown_form.json").write_text(json.dumps(doc))
    interval = {"median": 0.1, "lo": 0.05, "hi": 0.2, "n": 10}
    po = {"system": "coupled_oscillator", "observe": "q", "seed": 0, "label": "vpt_T4", "approach": "vpt", "T": 4,
          "kind": "model", "err_t10": interval, "err_t100": interval}
    red = {"system": "toda", "N": 40, "row": "psd_galerkin", "label": "PSD-Galerkin k=8", "seed": None, "cost": 1e-3,
           "offline_cpu": 2.0, "err_t120": interval, "err_t960": interval}
    results = {  # --results FILE of another study's kind (issue 69: tracebacks in reduction and partial_observation)
        "po_other_study": docs["missing_key"], "po_missing_key": {"rows": [{k: v for k, v in po.items() if k != "T"}]},
        "po_wrong_type": {"rows": [{**po, "T": "four"}]}, "po_row_type": {"rows": [po, "vpt"]},
        "po_interval_text": {"rows": [{**po, "err_t10": {"median": "small"}}]},
        "red_other_study": {"rows": [po]}, "red_missing_key": {"rows": [{k: v for k, v in red.items() if k != "N"}]},
        "red_wrong_type": {"rows": [{**red, "N": "forty"}]}, "red_row_type": {"rows": [3]},
        "red_not_object": [red], "uf_results_missing_key": docs["missing_key"],
    }
    shipped = results_files(archived=True)  # docs/data/ (and its archive/) in a checkout, vpintegrator/_results/ in a wheel
    rb = json.loads(shipped["rigid_body_study"].read_text())
    rb["rows"]["vpff"]["train_loss_best"]["mean"] = "small"
    rbs = json.loads(shipped["rigid_body_structure_study"].read_text())
    rbs["rows"][0]["seed"] = "zero"
    co = json.loads(shipped["coupled_oscillator_study"].read_text())
    co["tables"]["default"][0]["final_rel_error"] = "big"
    cx = json.loads(shipped["context_oscillator"].read_text())
    del cx["rows"][0]["context_len"]
    results.update({"rb_string": rb, "rbs_string": rbs, "co_string": co, "cx_missing_key": cx})
    for name, doc in results.items():
        (ws / "studies" / f"{name}.json").write_text(json.dumps(doc))


def _write_existing_outputs(ws: Path) -> None:
    """Files where an output might go, none of which the commands may replace (see PLACEHOLDERS)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (ws / "mysys.py").write_text("from vpintegrator.systems import System\n\n\nclass MySystem(System):\n    pass\n")
    with h5py.File(ws / "foreign.h5", "w") as f:
        f["x"] = np.arange(3.0)
    with h5py.File(ws / "other_schema.h5", "w") as f:
        f.attrs["schema"] = "someone-else"
        f["y"] = np.zeros((1, 2, 3))
    for link, target in (("link_data.h5", "data.h5"), ("link_rollout.h5", "rollout.h5"),
                         ("link_model.pt", "run/best.pt"), ("link_run", "run")):
        (ws / link).symlink_to(target)  # relative: the links stay inside each case's copy
    shutil.copytree(ws / "run", ws / "run_foreign")
    (ws / "run_foreign" / "notes.txt").write_text("my notes\n")  # kept by --overwrite, but:
    (ws / "run_foreign" / "log.csv").write_text("my own log\n")  # where the new run writes: refused
    (ws / "figs").mkdir()
    fig = plt.figure()
    plt.plot([0, 1])
    for name in ("error.pdf", "error.png", "training.png"):
        fig.savefig(ws / "figs" / name)
    plt.close(fig)
    (ws / "figs_foreign").mkdir()
    for name in ("error.png", "training.png"):
        (ws / "figs_foreign" / name).write_bytes(b"\x89PNG\r\n\x1a\n" + b"the user's own picture")


def _paths(ws: Path) -> dict[str, str]:
    files = {
        "data": "data.h5", "data_im": "data_im.h5", "co": "co.h5", "nan": "nan.h5", "inf": "inf.h5",
        "family_bad": "family_bad.h5",
        "unknown_system": "unknown_system.h5", "v0": "v0.h5", "spec": "spec.toml", "config": "config.toml",
        "rollout_toml": "rollout.toml", "run": "run", "model": "run/best.pt", "truncated_pt": "truncated.pt",
        "foreign_pt": "foreign.pt", "zeros_pt": "zeros.pt", "rollout": "rollout.h5", "text": "notes.txt",
        "empty": "empty.h5", "dir": "adir", "out": "out", "ws": ".",
        "source": "mysys.py", "foreign_h5": "foreign.h5", "other_schema": "other_schema.h5",
        "link_data": "link_data.h5", "link_rollout": "link_rollout.h5", "link_model": "link_model.pt",
        "link_run": "link_run", "run_foreign": "run_foreign", "figs": "figs", "figs_foreign": "figs_foreign",
        "studies": "studies",
    }
    assert set(files) == set(PLACEHOLDERS)
    return {k: str(ws / v) for k, v in files.items()}


def _hashes(ws: Path) -> dict[str, str]:
    out = {}
    for p in sorted(ws.rglob("*")):
        rel = p.relative_to(ws)
        if rel.parts[0] == "out":
            continue
        link = f"link to {os.readlink(p)}: " if p.is_symlink() else ""
        out[str(rel)] = link + ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, workspace_template, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    shutil.copytree(workspace_template, ws, symlinks=True)
    monkeypatch.chdir(ws)
    paths = _paths(ws)
    before = _hashes(ws)
    if case.api is not None:
        with pytest.raises(VPIntegratorError) as info:
            case.api(types.SimpleNamespace(**paths))
        line = str(info.value)
        assert "\n" not in line.strip(), line
    else:
        main = importlib.import_module(f"vpintegrator.cli.{COMMANDS[case.command]}").main
        args = [a.format(**paths) for a in case.args]
        result = CliRunner().invoke(main, args)
        output = result.output
        assert "Traceback" not in output, output
        assert result.exit_code == case.exit_code, (result.exit_code, output, result.exception)
        errors = [ln for ln in output.splitlines() if ln.startswith("Error:") or re.match(r"[\w ]+: error: ", ln)]
        assert len(errors) == 1, output
        line = errors[0]
    assert re.search(case.match, line), line
    assert not (ws / "EVIL_RAN").exists(), "a foreign pickle ran code"
    assert _hashes(ws) == before, "an input file changed"


def test_case_ids_are_unique_and_there_are_enough():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 150
    assert {c.command for c in CASES} >= {"vp-gen", "vp-train", "vp-rollout", "vp-plot", None}
