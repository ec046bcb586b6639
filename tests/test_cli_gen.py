"""`vp-gen` through click's CliRunner, plus subprocess tests: no torch import, clean interrupts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.cli.gen import main
from vpintegrator.data import list_specs, load_spec, read_trajectories, write_trajectories
from vpintegrator.data import integrate
from vpintegrator.data.trajectories import Trajectories
from vpintegrator import resources


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def _assert_one_line_error(result) -> str:
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an escaped exception
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_help():
    result = _run("--help")
    assert result.exit_code == 0
    for flag in ("--n-traj", "--dt", "--t-end", "--method", "--rtol", "--atol", "--seed", "--out", "--list"):
        assert flag in result.output


def test_list_shows_every_spec_with_its_description():
    result = _run("--list")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert len(lines) == len(list_specs())
    for name, line in zip(list_specs(), lines):
        assert line.split()[0] == name
        assert load_spec(name).description in line


def test_tiny_run_writes_file_and_prints_summary(tmp_path):
    out = tmp_path / "tiny.h5"
    result = _run("rigid_body", "--n-traj", "4", "--t-end", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    traj = read_trajectories(out)
    assert traj.y.shape == (4, 11, 3)
    assert f"wrote {out}" in result.output
    assert "y (4, 11, 3) float64" in result.output
    assert "max relative invariant drift: energy" in result.output and "casimir" in result.output


def test_paper_data_set(tmp_path):
    out = tmp_path / "X.h5"
    result = _run("rigid_body_paper", "--out", str(out))
    assert result.exit_code == 0, result.output
    traj = read_trajectories(out)
    assert traj.y.shape == (1238, 101, 3) and traj.meta["method"] == "dop853"
    assert np.max(np.abs(np.linalg.norm(traj.y, axis=-1) - 1)) <= 1e-10
    assert "y (1238, 101, 3) float64" in result.output


def test_flags_override_the_spec(tmp_path):
    out = tmp_path / "o.h5"
    result = _run(
        "volterra", "--n-traj", "3", "--dt", "0.05", "--t-end", "0.5", "--rtol", "1e-10", "--atol", "1e-11",
        "--seed", "5", "--chunk-size", "2", "--out", str(out),
    )
    assert result.exit_code == 0, result.output
    meta = read_trajectories(out).meta
    assert (meta["n_traj"], meta["n_states"], meta["dt"], meta["rtol"], meta["atol"], meta["seed"], meta["chunk_size"]) == (
        3, 11, 0.05, 1e-10, 1e-11, 5, 2)


def test_spec_given_as_toml_path(tmp_path):
    spec = tmp_path / "mine.toml"
    spec.write_text(
        'description = "mine"\n[system]\nname = "abc_flow"\n[initial_conditions]\nsampler = "box"\nn_traj = 2\n'
        "[integration]\ndt = 0.1\nt_end = 0.3\n"
    )
    result = _run(str(spec), "--out", str(tmp_path / "m.h5"))
    assert result.exit_code == 0, result.output
    assert "max relative invariant drift: none" in result.output
    assert read_trajectories(tmp_path / "m.h5").y.shape == (2, 4, 3)


def test_method_implicit_midpoint_reproduces_integrate(tmp_path):
    out = tmp_path / "imr.h5"
    result = _run("rigid_body_paper", "--method", "implicit_midpoint", "--n-traj", "20", "--t-end", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    traj = read_trajectories(out)
    want = integrate("rigid_body", traj.y[:, 0], 0.2, 10, method="implicit_midpoint")
    np.testing.assert_array_equal(traj.y, want.y)
    assert traj.meta["method"] == "implicit_midpoint"


def _toml(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    return str(path)


def _h5(tmp_path) -> str:
    path = tmp_path / "data.h5"
    write_trajectories(path, Trajectories(y=np.zeros((1, 2, 3)), t=[0.0, 1.0], meta={"system": "rigid_body"}))
    return str(path)


def test_set_overrides_any_spec_key(tmp_path):
    out = tmp_path / "x.h5"
    result = _run("rigid_body", "--n-traj", "2", "--set", "t_end=0.4", "--set", "system.inertia=[1.0, 2.0, 3.0]",
                  "--set", "integration.method=rk4", "--out", str(out))
    assert result.exit_code == 0, result.output
    back = read_trajectories(out)
    assert back.n_states == 5 and back.meta["method"] == "rk4"
    assert back.system.inertia == (1.0, 2.0, 3.0)


GOOD = '[system]\nname = "rigid_body"\n[initial_conditions]\n{ic}\n[integration]\ndt = 0.1\nt_end = 0.5\n{extra}'


@pytest.mark.parametrize(
    "case, match",
    [
        ("unknown_spec", r"unknown spec 'no_such_spec'; valid specs: .*rigid_body_paper"),
        ("dt_zero", r"^Error: --dt must be a finite number > 0; got 0.0"),
        ("dt_negative", r"^Error: --dt must be a finite number > 0; got -1.0"),
        ("nan_initial_condition", r"nan\.toml: \[initial_conditions\] .*not finite"),
        ("malformed_toml", r"malformed\.toml: malformed TOML"),
        ("unknown_key", r"unknown_key\.toml: unknown key 'integration.colour'"),
        ("unknown_method", r"unknown method 'rk5'; valid methods: dop853"),
        ("unknown_system", r"unknown system 'pendulum'; valid systems"),
        ("missing_file", r"spec file .*missing\.toml' not found"),
        ("bad_n_traj", r"^Error: --n-traj must be an integer >= 1; got 0"),
        ("hdf5_as_spec", r"spec file .*data\.h5: not a TOML text file"),
        ("bad_set", r"--set: 'dt' is not KEY=VALUE"),
        ("set_unknown_key", r"--set: unknown key 'colour'"),
    ],
)
def test_bad_inputs_give_one_line_error(tmp_path, case, match):
    out = str(tmp_path / "out.h5")
    args = {
        "unknown_spec": ["no_such_spec"],
        "dt_zero": ["rigid_body", "--dt", "0"],
        "dt_negative": ["rigid_body", "--dt", "-1"],
        "nan_initial_condition": [_toml(tmp_path, "nan.toml", GOOD.format(ic='sampler = "list"\npoints = [[0.0, nan, 1.0]]', extra=""))],
        "malformed_toml": [_toml(tmp_path, "malformed.toml", "[system\nname = 'rigid_body'\n")],
        "unknown_key": [_toml(tmp_path, "unknown_key.toml", GOOD.format(ic='sampler = "sphere"\nn_traj = 2', extra="colour = 1"))],
        "unknown_method": ["rigid_body", "--method", "rk5"],
        "unknown_system": [_toml(tmp_path, "sys.toml", GOOD.replace("rigid_body", "pendulum").format(ic='sampler = "box"\nn_traj = 2', extra=""))],
        "missing_file": [str(tmp_path / "missing.toml")],
        "bad_n_traj": ["rigid_body", "--n-traj", "0"],
        "hdf5_as_spec": [_h5(tmp_path)],
        "bad_set": ["rigid_body", "--set", "dt"],
        "set_unknown_key": ["rigid_body", "--set", "colour=1"],
    }[case]
    result = _run(*args, "--out", out)
    assert result.exit_code == 1
    line = _assert_one_line_error(result)
    assert re.search(match, line), line
    assert not os.path.exists(out)


def test_missing_spec_is_a_usage_error():
    result = _run()
    assert result.exit_code == 2 and "vp-gen --list" in result.output


def test_cli_gen_does_not_import_torch():
    code = "import vpintegrator.cli.gen, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- interrupts: a real process, killed mid-write -------------------------------------------------------


def _tmp_files(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("earlier", [False, True], ids=["no-earlier-file", "earlier-file"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupt_leaves_no_partial_file(tmp_path, sig, earlier):
    out = tmp_path / "big.h5"
    if earlier:
        write_trajectories(out, Trajectories(y=np.zeros((1, 2, 3)), t=[0.0, 1.0], meta={"system": "old"}))
        before = out.read_bytes()
    # ~10^6 trajectories x 1001 steps: minutes of work, so the signal lands mid-run
    # --overwrite: the earlier file may be replaced by a finished run, but an interrupted one leaves it intact
    cmd = [sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", "1000000", "--out", str(out),
           "--overwrite"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a background shell ignores SIGINT and children inherit that; give the child Python's default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not _tmp_files(tmp_path):  # the writer has opened its temporary file: generation is under way
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "vp-gen never started writing"
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # 130, or death by SIGINT, which a shell reports as the same 130: under heavy CPU load the interpreter,
    # after printing the message and calling sys.exit(130), sometimes ends in CPython's exit_sigint() during
    # finalisation (strace: kill(self, SIGINT) after the handlers were reset; seen on the code before the
    # signal policy too). The user-visible contract is checked either way: the message, no traceback, no
    # partial file, the earlier file intact.
    assert proc.returncode in (130, -signal.SIGINT), stderr
    assert "Traceback" not in stderr and "Interrupted" in stderr
    assert _tmp_files(tmp_path) == []
    if earlier:
        assert out.read_bytes() == before
    else:
        assert not out.exists()


# ---------------------------------------------------------------------------------------------------
# bad input is one line, before any work (more cases in tests/bad_inputs/cases_gen.py)


@pytest.mark.parametrize("args, match", [
    (["rigid_body", "--dt", "1e-9", "--t-end", "10"], r"one trajectory of 10000000001 states needs about .*TiB of "
                                                      r"memory .*give a larger --dt"),
    (["rigid_body", "--n-traj", "1000000000000000"], r"PiB of memory .*fewer trajectories \(--n-traj\)"),
    (["rigid_body", "--dt", "1e-300", "--t-end", "1e300"], r"too many steps: give a larger --dt"),
    (["rigid_body", "--seed", "99999999999999999999999999"], r"--seed must be an integer >= 0 and < 2\*\*63"),
    (["rigid_body", "--rtol", "2"], r"--rtol must be < 1"),
    (["rigid_body", "--set", "system.name=volterra"], r"--set: 'system.name' cannot be changed"),
    (["rigid_body", "--set", "initial_conditions.sampler=nope"], r"unknown sampler 'nope'"),
])
def test_impossible_work_and_absurd_numbers_are_one_line_errors(tmp_path, args, match):
    out = tmp_path / "x.h5"
    line = _assert_one_line_error(_run(*args, "--out", str(out)))
    assert re.search(match, line), line
    assert list(tmp_path.iterdir()) == []


def test_out_that_is_the_spec_or_cannot_be_written(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[system]\nname = "rigid_body"\n[initial_conditions]\nsampler = "sphere"\nn_traj = 2\n'
                    '[integration]\ndt = 0.1\nt_end = 0.5\nmethod = "rk4"\n')
    before = spec.read_bytes()
    line = _assert_one_line_error(_run(str(spec), "--out", str(spec)))
    assert re.search(r"--out .*s\.toml is the input file", line), line
    line = _assert_one_line_error(_run(str(spec), "--set", f"output.path={spec}"))
    assert "is the input file" in line
    line = _assert_one_line_error(_run(str(spec), "--out", str(spec / "x.h5")))
    assert re.search(r"--out .*s\.toml is a file, not a directory", line), line
    assert spec.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_disk_estimate_is_checked_against_the_output_folder(tmp_path, monkeypatch):

    seen = []
    monkeypatch.setattr(resources, "free_disk", lambda folder: seen.append(folder) or 10)
    line = _assert_one_line_error(_run("rigid_body", "--n-traj", "5", "--out", str(tmp_path / "new" / "x.h5")))
    assert re.search(r"5 trajectories x 1001 states x dim 3 x 8 bytes = 117\.3 KiB .*would not fit on the disk "
                     r".*fewer trajectories \(--n-traj\)", line), line
    assert seen == [tmp_path] and list(tmp_path.iterdir()) == []
