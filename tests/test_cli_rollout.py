"""vp-rollout and vp-plot through click's CliRunner: tiny runs, flags and TOML, one-line errors."""

from __future__ import annotations

import re

import pytest
import torch
from click.testing import CliRunner

from vpintegrator.cli.plot import main as plot_main
from vpintegrator.cli.rollout import main as rollout_main
from vpintegrator.data import generate, load_spec
from vpintegrator.models import build_model, save_model
from vpintegrator import resources


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    data = root / "rb.h5"
    generate(load_spec("rigid_body", n_traj=3, t_end=2.0, dt=0.2), out=data)
    torch.manual_seed(0)
    vpt = build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1)
    save_model(vpt, root / "vpt_run" / "best.pt")
    save_model(build_model("vpff", dim=4, n_blocks=1), root / "osc.pt")
    return root, data


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("cmd", [rollout_main, plot_main])
def test_help(cmd):
    res = run(cmd, ["--help"])
    assert res.exit_code == 0 and "Usage" in res.output


def test_rollout_then_plot(files):
    root, data = files
    out = root / "ro.h5"
    res = run(rollout_main, [
        "--data", data, "--model", root / "vpt_run", "--model", f"second={root / 'vpt_run' / 'best.pt'}",
        "--integrators", "implicit_midpoint,rk4", "--integrators", "gauss_legendre4,splitting",
        "--t-end", 4, "--n-traj", 2, "--init", "implicit_midpoint", "--device", "cpu", "--out", out, "--quiet",
    ])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    # the data is DOP853 at 1e-12: it is the exact-flow reference itself (continued with DOP853 beyond t = 2)
    assert lines[0].startswith("Errors against the exact flow: ") and "(DOP853, rtol = 1e-12, atol = 1e-12)" in lines[0]
    assert lines[1].split()[:4] == ["method", "split", "final_rel_error", "valid_time"]
    assert [ln.split()[:2] for ln in lines[2:8]] == [[m, "unknown"] for m in (
        "implicit_midpoint", "rk4", "gauss_legendre4", "splitting", "vpt_run", "second")]  # no split recorded
    assert f"Rollout written to {out}" in res.output and str(out.with_suffix(".csv")) in res.output
    assert out.exists() and out.with_suffix(".md").exists()
    figs = root / "figs"
    res = run(plot_main, [out, "--kind", "all", "--out", figs, "--dpi", 50])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in figs.iterdir()) == sorted(
        f"{k}.{e}" for k in ("trajectories3d", "invariants", "error", "volume", "phase") for e in ("pdf", "png")
    )
    # --traj: data-file indices in both commands (the rollout holds rows 0 and 1 of the data file)
    res = run(plot_main, [out, "--kind", "error", "--kind", "volume", "--traj", "0,1", "--out", root / "f2", "--dpi", 50])
    assert res.exit_code == 0 and sorted(p.name for p in (root / "f2").iterdir()) == ["error.pdf", "error.png", "volume.pdf", "volume.png"]


def test_toml_config_and_flags_win(files, tmp_path):
    root, data = files
    cfg = tmp_path / "ro.toml"
    cfg.write_text(f'[rollout]\ndata = "{data}"\nintegrators = ["rk4"]\nt_end = 3.0\nout = "{tmp_path / "a.h5"}"\n')
    res = run(rollout_main, [cfg, "--out", tmp_path / "b.h5", "--quiet"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "b.h5").exists() and not (tmp_path / "a.h5").exists()
    cfg.write_text(f'data = "{data}"\nintegrator = "rk4"\n')
    res = run(rollout_main, [cfg])
    assert res.exit_code == 1 and "unknown key 'integrator'; valid keys: data" in res.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "{root}/osc.pt"], "model dim 4 does not match the data's dim 3"),
        (["--integrators", "rk4,leapfrog"], "unknown integrator 'leapfrog'; valid: euler, rk4, implicit_midpoint"),
        (["--model", "{root}/vpt_run", "--t-end", "0.4"], "shorter than seq_len = 3"),
        (["--model", "{root}/missing_run"], "no such checkpoint file or run directory"),
        (["--integrators", "rk4", "--traj", "0,7"], "--traj index 7 is out of range"),
        (["--integrators", "rk4", "--traj", "zero"], "--traj must be a comma list of integers"),
        (["--integrators", "rk4", "--n-traj", "1", "--traj", "0"], "--traj and n_traj both given"),
        (["--integrators", "rk4", "--init", "magic"], "--init 'magic' is unknown"),
        (["--integrators", "rk4", "--set", "t_end=3", "--t-end", "3"], "t_end is also given by its own flag"),
        (["--integrators", "rk4", "--set", "integrator=rk4"], "unknown key 'integrator'"),
        (["--integrators", "rk4", "--device", "cuda:0"], None),
        (["--integrators", "rk4", "--data", "{root}/nope.h5"], "file not found"),
        ([], "nothing to roll out"),
    ],
)
def test_rollout_one_line_errors(files, tmp_path, args, message):
    root, data = files
    args = [a.format(root=root) for a in args]
    if "--data" not in args:
        args = ["--data", data, *args]
    res = run(rollout_main, [*args, "--out", tmp_path / "x.h5"])
    if message is None:  # --device cuda only fails on a machine without CUDA (and only for models)
        assert res.exit_code == 0
        return
    assert res.exit_code == 1
    assert res.output.startswith("Error: ") and len(res.output.strip().splitlines()) == 1
    assert message in res.output
    assert not (tmp_path / "x.h5").exists()


def test_plot_errors(files, tmp_path):
    root, data = files
    res = run(plot_main, [data, "--out", tmp_path])
    assert res.exit_code == 1 and "expected 'vpintegrator-rollout'" in res.output
    res = run(plot_main, [tmp_path / "none.h5"])
    assert res.exit_code == 1 and res.output.startswith("Error: file not found")
    res = run(plot_main, [data, "--kind", "spaghetti"])
    assert res.exit_code == 2 and "'spaghetti' is not one of" in res.output


def test_set_and_traj_are_data_file_indices(files, tmp_path):
    from vpintegrator.rollout import read_rollout

    root, data = files
    out = tmp_path / "s.h5"
    res = run(rollout_main, [
        "--data", data, "--integrators", "rk4", "--traj", "2,0", "--set", "blowup=1e6", "--set", "t_end=2.6",
        "--set", 'models=[["mine", "{}"]]'.format(root / "vpt_run"), "--out", out, "--quiet",
    ])
    assert res.exit_code == 0, res.output
    r = read_rollout(out)
    assert r.traj_index.tolist() == [2, 0] and r.labels == ["rk4", "mine"]
    assert r.meta["blowup"] == 1e6 and r.meta["n_steps"] == 13 and r.meta["n_states"] == 14


# --- issue 11: nothing lost, nothing silently wrong ------------------------------------------------------


def _blowup_args(data, out, *extra):
    # explicit Euler lets the rigid body's |z| grow; a tight blow-up factor makes it fail within 20 steps
    return ["--data", data, "--integrators", "euler,rk4", "--blowup", "1.001", "--t-end", 4, "--n-traj", 3,
            "--out", out, *extra]


def test_failed_method_is_reported_under_quiet(files, tmp_path):
    root, data = files
    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout_main, [str(a) for a in _blowup_args(data, out, "--quiet")])
    assert res.exit_code == 0, res.output
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("Warning: euler:")]
    assert len(warn) == 1, res.stderr
    assert re.search(r"euler: \d+ of 3 trajectories failed .*first: trajectory \d+ at step \d+ \(t = [\d.]+\)", warn[0])
    assert "rk4" not in res.stderr  # only failed methods are reported
    assert out.exists()


def test_failed_method_is_reported_once_without_quiet(files, tmp_path):
    root, data = files
    res = CliRunner().invoke(rollout_main, [str(a) for a in _blowup_args(data, tmp_path / "ro.h5")])
    assert res.exit_code == 0, res.output
    assert sum("euler: " in ln and "failed" in ln for ln in res.stderr.splitlines()) == 1, res.stderr


def test_fail_on_blowup_exits_3_after_writing_everything(files, tmp_path):
    root, data = files
    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout_main, [str(a) for a in _blowup_args(data, out, "--quiet", "--fail-on-blowup")])
    assert res.exit_code == 3, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "euler" in errors[0] and "exit status 3" in errors[0]
    assert out.exists() and out.with_suffix(".csv").exists() and out.with_suffix(".md").exists()
    from vpintegrator.rollout import read_rollout

    assert read_rollout(out).methods["euler"].n_failed > 0
    # no failure: exit 0 even with the flag
    res = CliRunner().invoke(rollout_main, [str(a) for a in [
        "--data", data, "--integrators", "rk4", "--n-traj", 2, "--out", tmp_path / "ok.h5", "--quiet", "--fail-on-blowup"]])
    assert res.exit_code == 0, res.output
    assert "--fail-on-blowup" in run(rollout_main, ["--help"]).output and "3" in run(rollout_main, ["--help"]).output


def test_report_failures_carry_time(files, tmp_path):
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    root, data = files
    rep = run_rollouts(RolloutConfig(data=str(data), integrators=["euler"], blowup=1.001, t_end=4.0, n_traj=3,
                                     out=str(tmp_path / "r.h5")))
    n, traj, step = rep.failures["euler"]
    assert n >= 1 and 0 <= traj < 3 and step >= 1
    assert rep.failures["euler"].t == pytest.approx(0.2 * step)


@pytest.mark.parametrize("which", ["data", "model", "config", "table"])
def test_out_over_an_input_is_refused_before_any_work(files, tmp_path, which):
    import hashlib
    import shutil

    root, data = files
    d = tmp_path / "rb.h5"
    shutil.copy(data, d)
    shutil.copytree(root / "vpt_run", tmp_path / "run")
    cfg = tmp_path / "ro.toml"
    cfg.write_text(f'data = "{d}"\nintegrators = ["rk4"]\nn_traj = 1\n')
    if which == "table":  # out r.h5 writes r.csv and r.md beside it: a config named r.md is protected too
        md = tmp_path / "r.md"
        shutil.copy(cfg, md)
        args = [md, "--out", tmp_path / "r.h5"]
    else:
        target = {"data": d, "model": tmp_path / "run" / "best.pt", "config": cfg}[which]
        args = [cfg, "--model", tmp_path / "run", "--out", target]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*") if p.is_file()}
    res = CliRunner().invoke(rollout_main, [str(a) for a in args])
    assert res.exit_code == 1, res.output
    assert "--out" in res.output and "is the input file" in res.output
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before


def test_memory_estimate_refuses_before_starting(files, tmp_path, monkeypatch):

    root, data = files
    res = CliRunner().invoke(rollout_main, [str(a) for a in [
        "--data", data, "--integrators", "rk4", "--t-end", "1e9", "--out", tmp_path / "r.h5"]])
    assert res.exit_code == 1 and "Traceback" not in res.output
    line = [ln for ln in res.output.splitlines() if ln.startswith("Error:")][0]
    assert re.search(r"--t-end .* needs about [\d.]+ [GT]iB of memory but .* available.*n_traj.*chunk_steps.*volume", line)
    assert list(tmp_path.iterdir()) == []
    # a small run is refused when (monkeypatched) memory is short, and accepted when it is not
    monkeypatch.setattr(resources, "available_memory", lambda: 10 << 20)
    res = CliRunner().invoke(rollout_main, [str(a) for a in [
        "--data", data, "--integrators", "rk4", "--out", tmp_path / "r.h5"]])
    assert res.exit_code == 1 and "of memory" in res.output
    monkeypatch.setattr(resources, "available_memory", lambda: 64 << 30)
    res = CliRunner().invoke(rollout_main, [str(a) for a in [
        "--data", data, "--integrators", "rk4", "--out", tmp_path / "r.h5"]])
    assert res.exit_code == 0, res.output


def test_disk_estimate_refuses_before_starting(files, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from vpintegrator.rollout.preflight import estimate

    root, data = files
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 30, 1000))
    res = CliRunner().invoke(rollout_main, [str(a) for a in [
        "--data", data, "--integrators", "rk4", "--t-end", 100, "--out", tmp_path / "r.h5"]])
    assert res.exit_code == 1, res.output
    assert re.search(r"Error: --t-end .* needs about .* on disk .* but 1000 B are free", res.output), res.output
    assert not (tmp_path / "r.h5").exists()
    # the estimate counts what is written: per method n_traj x n_states x (dim + 1 + invariants) x 8 + volume
    mem, disk = estimate(3, 501, 3, 2, 1, 1024, 11, volume=False)
    assert disk == 3 * 501 * 6 * 8 + 3 * 501 * 5 * 8 + 501 * 8
    assert estimate(3, 501, 3, 2, 1, 1024, 11, volume=True)[1] > disk
    assert mem > 3 * 11 * 3 * 8


def test_engine_refuses_states_that_cannot_fit():
    import numpy as np

    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.rollout import IntegratorStep, rollout

    with pytest.raises(VPIntegratorError, match=r"n_steps = 1000000000000 .* memory"):
        rollout(IntegratorStep("rigid_body", "rk4", 0.1), np.eye(3), 0.1, 10**12)


def test_non_finite_reference_is_an_error(tmp_path):
    import h5py
    import numpy as np

    from vpintegrator.data import generate, load_spec
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.rollout import RolloutConfig, preflight, run_rollouts

    data = tmp_path / "d.h5"
    generate(load_spec("rigid_body", n_traj=3, t_end=2.0, dt=0.2, method="rk4"), out=data)
    # the file part: NaN in trajectory 1 at state 4 (checked here whatever the reader does)
    traj = __import__("vpintegrator").read_trajectories(data)
    traj.y[1, 4, 0] = np.nan
    with pytest.raises(VPIntegratorError, match=r"d\.h5: the reference is not finite .* trajectory 1 at t = 0\.8"):
        preflight.check_reference(traj, np.arange(3), data)
    # the continuation: the data's generator blows up beyond the file (a tiny blow-up factor)
    with pytest.raises(VPIntegratorError, match=r"continuing the reference .* rk4 failed .* trajectory \d+ at t = "):
        run_rollouts(RolloutConfig(data=str(data), integrators=["rk4"], t_end=400.0, blowup=1.0 + 1e-13,
                                   reference="data", out=str(tmp_path / "r.h5")))
    # the exact-flow reference (the default) fails alike, one line naming it
    with pytest.raises(VPIntegratorError, match=r"exact-flow reference \(DOP853\) failed .* trajectory \d+ at t = "):
        run_rollouts(RolloutConfig(data=str(data), integrators=["rk4"], t_end=400.0, blowup=1.0 + 1e-13,
                                   out=str(tmp_path / "r.h5")))
    assert not (tmp_path / "r.h5").exists() and not list(tmp_path.glob(".r.h5*"))
    with h5py.File(data, "r+") as f:
        y = f["y"][:]
        y[2, 3, 1] = np.inf
        f["y"][...] = y
    res = CliRunner().invoke(rollout_main, ["--data", str(data), "--integrators", "rk4", "--traj", "2",
                                            "--out", str(tmp_path / "r.h5")])
    assert res.exit_code == 1 and "Traceback" not in res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "d.h5" in errors[0], res.output
    assert not (tmp_path / "r.h5").exists()


def test_model_load_failure_becomes_one_line(files, tmp_path, monkeypatch):
    import vpintegrator.models as models

    root, data = files

    def broken(spec, *a, **k):
        raise RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory")

    monkeypatch.setattr(models, "load_model", broken)
    res = CliRunner().invoke(rollout_main, ["--data", str(data), "--model", str(root / "vpt_run"),
                                            "--out", str(tmp_path / "r.h5")])
    assert res.exit_code == 1, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "vpt_run" in errors[0] and "--model" in errors[0], res.output


def test_a_failed_held_out_condition_is_named_as_such_not_as_trajectory_minus_one():
    """/traj_index is -1 for a held-out condition: the failure line says so instead of 'trajectory -1'."""
    from vpintegrator.rollout.report import Failure

    line = Failure("rk4", 2, 10, -1, 297, 59.4).line()
    assert "first: a held-out condition (no row of the data file) at step 297 (t = 59.4)" in line
    assert "trajectory -1" not in line
    assert "first: trajectory 3 at step 5" in Failure("rk4", 1, 10, 3, 5, 1.0).line()
