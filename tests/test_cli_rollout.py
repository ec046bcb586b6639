"""vp-rollout and vp-plot through click's CliRunner: tiny runs, flags and TOML, one-line errors."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from vpintegrator.cli.plot import main as plot_main
from vpintegrator.cli.rollout import main as rollout_main
from vpintegrator.data import generate, load_spec
from vpintegrator.models import build_model, save_model


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
    assert lines[0].split()[:3] == ["method", "final_rel_error", "valid_time"]
    assert [ln.split()[0] for ln in lines[1:7]] == ["implicit_midpoint", "rk4", "gauss_legendre4", "splitting", "vpt_run", "second"]
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
    res = run(rollout_main, ["--config", cfg, "--out", tmp_path / "b.h5", "--quiet"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "b.h5").exists() and not (tmp_path / "a.h5").exists()
    cfg.write_text(f'data = "{data}"\nintegrator = "rk4"\n')
    res = run(rollout_main, ["--config", cfg])
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
