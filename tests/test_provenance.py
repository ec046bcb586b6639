"""Issue 22 item 3: the provenance record in every output, run-directory paths relative to the run directory,
and attributes that describe what was actually done."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vpintegrator import provenance as prov
from vpintegrator._toml import tomllib
from vpintegrator.data.trajectory_files import read_metadata, read_trajectories, write_trajectories
from vpintegrator.data.trajectories import Trajectories

KEYS = {"vpintegrator", "git", "versions", "platform", "command", "time", "inputs"}


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _tiny_traj() -> Trajectories:
    t = np.linspace(0.0, 1.0, 5)
    return Trajectories(y=np.ones((2, 5, 3)), t=t, meta={"system": "rigid_body", "param_inertia": [2.0, 1.0, 0.5]})


# -- the record ---------------------------------------------------------------------------------------


def test_record_names_versions_command_time_and_hashes_inputs(tmp_path):
    data = tmp_path / "a.bin"
    data.write_bytes(b"x" * 3_000_000)  # several read chunks
    rec = prov.provenance_record([data, tmp_path / "missing.h5", "pretrained:vpt"])
    assert set(rec) == KEYS
    from vpintegrator import __version__

    assert rec["vpintegrator"] == __version__
    assert rec["versions"]["numpy"] == np.__version__ and rec["versions"]["torch"] == str(torch.__version__)
    assert rec["versions"]["h5py"] == h5py.__version__ and rec["versions"]["python"].count(".") == 2
    assert set(rec["versions"]) == {"python", "numpy", "scipy", "torch", "h5py", "numba", "pysindy", "scikit-learn",
                                    "blas"}
    from threadpoolctl import threadpool_info  # the BLAS and the kernels it runs here (the fits round by them)

    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    assert rec["versions"]["blas"] == "; ".join(f"{i['internal_api']} {i['version']} {i['architecture']}" for i in blas)
    assert blas and str(blas[0]["architecture"]) in rec["versions"]["blas"]
    from importlib import metadata

    for name in ("pysindy", "scikit-learn"):  # the fitted rows' libraries: their versions, or None when absent
        try:
            assert rec["versions"][name] == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert rec["versions"][name] is None
    assert rec["command"] == prov.command_line(sys.argv) and len(rec["command"]) == len(sys.argv)
    assert not any(a.startswith("/") for a in rec["command"])  # no absolute path of this machine (issue 33)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["time"])
    assert rec["inputs"][0] == {"path": prov.redact_path(data), "sha256": _sha(data), "bytes": 3_000_000}
    assert not rec["inputs"][0]["path"].startswith("/")
    assert rec["inputs"][1]["sha256"] is None and rec["inputs"][2] == {"path": "pretrained:vpt", "sha256": None,
                                                                       "bytes": None}
    # JSON-ready and loadable by torch.load(weights_only=True): plain types only
    assert json.loads(prov.provenance_attr([data])) ["inputs"][0]["sha256"] == _sha(data)
    torch.save(rec, tmp_path / "r.pt")
    assert torch.load(tmp_path / "r.pt", weights_only=True) == rec


def test_input_paths_relative_to_a_directory(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.h5").write_bytes(b"abc")
    rec = prov.provenance_record([tmp_path / "data" / "d.h5"], relative_to=tmp_path / "run")
    assert rec["inputs"][0]["path"] == os.path.join("..", "data", "d.h5")


def test_a_file_is_hashed_once_per_path_size_and_mtime(tmp_path):
    f = tmp_path / "d.h5"
    f.write_bytes(b"aaaa")
    first = prov.file_sha256(f)
    st = f.stat()
    f.write_bytes(b"bbbb")  # same size; same modification time restored: the cached hash is given
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert prov.file_sha256(f) == first
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: hashed again
    assert prov.file_sha256(f) == _sha(f) != first


def test_git_state_of_this_checkout():
    root = Path(prov.__file__).resolve().parent.parent
    if not (root / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not run from a git checkout")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    state = prov._git_state(root)
    assert state["commit"] == head and isinstance(state["dirty"], bool)


def test_no_git_state_outside_a_checkout_or_without_git(tmp_path, monkeypatch):
    assert prov._git_state(tmp_path) is None  # no .git
    (tmp_path / ".git").mkdir()  # a broken checkout: git fails, no error
    assert prov._git_state(tmp_path) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no git at all
    assert prov._git_state(Path(prov.__file__).resolve().parent.parent) is None


def test_parse_provenance():
    assert prov.parse_provenance('{"a": 1}') == {"a": 1} and prov.parse_provenance(b'{"a": 1}') == {"a": 1}
    assert prov.parse_provenance(None) is None and prov.parse_provenance("not json") is None
    assert prov.parse_provenance("[1]") is None


# -- trajectory files ---------------------------------------------------------------------------------------


def test_trajectory_file_carries_provenance_as_json_text(tmp_path):
    path = write_trajectories(tmp_path / "d.h5", _tiny_traj())
    with h5py.File(path, "r") as f:
        raw = f.attrs["provenance"]
    text = raw.decode() if isinstance(raw, bytes) else raw
    assert set(json.loads(text)) == KEYS
    meta = read_trajectories(path).meta
    assert set(meta["provenance"]) == KEYS and meta["provenance"]["command"] == prov.command_line(sys.argv)
    assert read_metadata(path)["provenance"] == meta["provenance"]


def test_a_copy_gets_its_own_provenance_and_an_explicit_one_is_stored(tmp_path):
    first = read_trajectories(write_trajectories(tmp_path / "a.h5", _tiny_traj()))
    first.meta["provenance"] = {"made": "elsewhere"}
    copy = read_trajectories(write_trajectories(tmp_path / "b.h5", first))
    assert set(copy.meta["provenance"]) == KEYS
    given = prov.provenance_record([tmp_path / "a.h5"])
    again = read_trajectories(write_trajectories(tmp_path / "c.h5", first, provenance=given))
    assert again.meta["provenance"]["inputs"][0]["sha256"] == _sha(tmp_path / "a.h5")


def test_files_without_provenance_still_read_and_plain_json_text_decodes(tmp_path):
    path = write_trajectories(tmp_path / "d.h5", _tiny_traj())
    with h5py.File(path, "a") as f:
        del f.attrs["provenance"]
    assert "provenance" not in read_trajectories(path).meta
    with h5py.File(path, "a") as f:  # as a rollout writer stores it: provenance_attr() text, not in json_keys
        f.attrs["provenance"] = prov.provenance_attr()
    assert set(read_trajectories(path).meta["provenance"]) == KEYS


def test_generate_records_the_spec_file_and_describes_the_method_used(tmp_path):
    from vpintegrator.data import generate
    from vpintegrator.data.spec import load_spec

    spec = load_spec("rigid_body_paper", method="implicit_midpoint", t_end=0.4, n_traj=None)
    out = generate(spec, tmp_path / "d.h5")
    meta = read_trajectories(out).meta
    assert "DOP853" not in meta["description"] and meta["description"].endswith("implicit_midpoint (fixed step dt)")
    assert "t in [0, 0.4]" in meta["description"] and "dt = 0.2" in meta["description"]
    assert meta["provenance"]["inputs"] == [{"path": prov.redact_path(spec.source), "sha256": _sha(spec.source),
                                             "bytes": Path(spec.source).stat().st_size}]
    default = generate(load_spec("rigid_body_paper", t_end=0.4, rtol=1e-10))
    assert default.meta["description"].endswith("DOP853 (rtol = 1e-10, atol = 1e-12)")


@pytest.mark.parametrize(("text", "expected"), [
    ("Rigid body, 300 random initial conditions, dt = 0.1, t in [0, 100], DOP853",
     "Rigid body, 7 random initial conditions, dt = 0.5, t in [0, 2], rk4 (fixed step dt)"),
    ("mine", "mine, rk4 (fixed step dt)"),
    ("", "rigid_body, 7 trajectories, dt = 0.5, rk4 (fixed step dt)"),
])
def test_describe_run(text, expected):
    import dataclasses

    from vpintegrator.data.generation import describe_run
    from vpintegrator.data.generation_plan import build_plan
    from vpintegrator.data.spec import load_spec

    spec = dataclasses.replace(load_spec("rigid_body", method="rk4", dt=0.5, t_end=2.0), description=text)
    assert describe_run(build_plan(spec), 7, 2.0) == expected


# -- checkpoints and run directories ----------------------------------------------------------------------


def test_save_model_records_provenance(tmp_path):
    from vpintegrator.models import build_model, load_model, save_model

    path = save_model(build_model("vpff", dim=3), tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    assert set(payload["provenance"]) == KEYS and payload["provenance"]["inputs"] == []
    load_model(path)
    mine = save_model(build_model("vpff", dim=3), tmp_path / "n.pt", extra={"provenance": {"by": "hand"}})
    assert torch.load(mine, weights_only=True)["provenance"] == {"by": "hand"}


def _fit(tiny_data, out, **kw):
    from vpintegrator.training import fit

    return fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1}, epochs=2, batch_size=16,
                    dtype="float64", device="cpu", out=str(out), **kw))


def test_run_directory_records_provenance_and_relative_paths(tiny_data, tmp_path):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    data = work / "data" / "tiny.h5"
    shutil.copy(tiny_data, data)
    run = work / "runs" / "r"
    _fit(str(data), run)
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["data"] == [os.path.join("..", "..", "data", "tiny.h5")] and config["out"] == "."
    summary = json.loads((run / "summary.json").read_text())
    assert summary["data"]["sources"] == config["data"]
    want = [{"path": config["data"][0], "sha256": _sha(data), "bytes": data.stat().st_size}]
    assert summary["provenance"]["inputs"] == want
    for name in ("last.pt", "best.pt"):
        assert torch.load(run / name, weights_only=True)["provenance"]["inputs"] == want
    assert str(tmp_path) not in (run / "config.toml").read_text() + (run / "summary.json").read_text()
    from vpintegrator.rundir import read_summary
    from vpintegrator.training import TrainConfig

    assert read_summary(run)["data"]["sources"] == [str(data)]
    assert TrainConfig.from_toml(run / "config.toml").data == [str(data)]
    # the run directory moved together with its data still resumes
    moved = tmp_path / "elsewhere"
    shutil.move(str(work), str(moved))
    from vpintegrator.training import fit

    result = fit(resume=moved / "runs" / "r", epochs=3)
    assert result.history[-1]["epoch"] == 3
    assert json.loads((moved / "runs" / "r" / "summary.json").read_text())["provenance"]["inputs"] == want


def test_old_run_directory_with_absolute_paths_resumes(tiny_data, tmp_path):
    run = tmp_path / "old"
    _fit(tiny_data, run)
    text = (run / "config.toml").read_text()
    config = tomllib.loads(text)
    absolute = text.replace(f'"{config["data"][0]}"', json.dumps(str(Path(tiny_data).resolve())))
    absolute = absolute.replace('out = "."', f"out = {json.dumps(str(run))}")
    assert absolute != text
    (run / "config.toml").write_text(absolute)
    from vpintegrator.training import fit

    assert fit(resume=run, epochs=3).history[-1]["epoch"] == 3


def test_vp_gen_implicit_midpoint_description_says_so(tmp_path):
    """The issue's case: ``vp-gen rigid_body_paper --method implicit_midpoint`` no longer says DOP853."""
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main

    out = tmp_path / "im.h5"
    res = CliRunner().invoke(main, ["rigid_body_paper", "--method", "implicit_midpoint", "--t-end", "0.4",
                                    "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    meta = read_metadata(out)
    assert meta["method"] == "implicit_midpoint" and "DOP853" not in meta["description"]
    assert meta["description"].startswith("Rigid body, the paper's 1238 initial conditions")
    assert meta["provenance"]["command"] == prov.command_line(sys.argv)  # CliRunner runs in this process


def test_resume_of_a_run_directory_moved_without_its_data_says_how_to_fix(tiny_data, tmp_path):
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.training import fit

    (tmp_path / "d").mkdir()
    shutil.copy(tiny_data, tmp_path / "d" / "tiny.h5")
    _fit(str(tmp_path / "d" / "tiny.h5"), tmp_path / "runs" / "r")
    shutil.copytree(tmp_path / "runs" / "r", tmp_path / "elsewhere" / "deeper" / "r")
    with pytest.raises(VPIntegratorError, match=r"resume .*r: data file .*tiny\.h5 not found \(config\.toml gives the "
                                                r"data relative to the run directory\); move or copy the run"):
        fit(resume=tmp_path / "elsewhere" / "deeper" / "r", epochs=3)
