"""scripts/gpu_check.sh (the GPU checks as steps that each fit one device call) on a machine without a GPU:
--list and the argument errors; every step's commands parse (each flag accepted by its argparse/click/
torchrun parser, nothing run), on CUDA and in --smoke; it refuses to run without CUDA; the step plumbing
end to end in --smoke (log, status line, scratch removed, a step killed at its limit); scripts/gpu_report.py
puts each figure of real-format logs beside its target; scripts/ddp_check.py runs the DDP path at world
sizes 1 and 2 over Gloo (the world-size-1 run, through gpu_check.sh, under -m slow); scripts/gpu_parity.py
compares the CPU with itself."""

from __future__ import annotations

import argparse
import os
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
if not SCRIPT.is_file():  # the suite run against an installed wheel (.ci/run) has no scripts/
    pytest.skip("scripts/gpu_check.sh is in the repository, not the wheel", allow_module_level=True)
STEPS = ["env", "pytest_gpu", "train", "parity", "ensemble", "rollout", "ddp", "compile", "lm", "rollout_io"]


def _env(**extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTHON", "OUT",
                "GPU_CHECK_BUDGET", "GPU_CHECK_STEP_LIMIT"):
        env.pop(key, None)
    return env | extra


def _check(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env or _env(), cwd=ROOT)


def _dry_run(out: Path, *extra: str) -> dict[str, list[list[str]]]:
    proc = _check("--dry-run", "--out", str(out), *extra)
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()  # a dry run writes nothing
    steps: dict[str, list[list[str]]] = {}
    for line in proc.stdout.splitlines():
        name, command = line.split("\t")
        steps.setdefault(name, []).append(shlex.split(command))
    return steps


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict[str, dict[str, list[list[str]]]]:
    """Each step's commands, as run on a GPU ("cuda") and as run by --smoke on the CPU ("smoke")."""
    out = tmp_path_factory.mktemp("gpu_check") / "out"
    return {"cuda": _dry_run(out), "smoke": _dry_run(out, "--smoke")}


@pytest.fixture(params=["cuda", "smoke"])
def dry_run(request, dry_runs) -> dict[str, list[list[str]]]:
    return dry_runs[request.param] | {"mode": [[request.param]]}


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


def _script_args(script: str, args: list[str], monkeypatch) -> argparse.Namespace:
    """What ``python SCRIPT ARGS`` parses its flags into: its main() runs up to parse_args, nothing more."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, *a, **k):
        raise _Parsed(original(self, *a, **k))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [script, *args])
    monkeypatch.chdir(ROOT)
    with pytest.raises(_Parsed) as parsed:  # a bad flag is argparse's SystemExit(2) instead
        runpy.run_path(str(ROOT / script), run_name="__main__")
    monkeypatch.undo()
    return parsed.value.namespace


def _click_args(module: str, args: list[str], monkeypatch):
    import importlib

    main = importlib.import_module(module).main
    monkeypatch.chdir(ROOT)  # CONFIG paths are relative to the repository root, as in the script
    return main.make_context(module.rsplit(".", 1)[-1], list(args)).params  # a bad flag raises click's UsageError


# -- the steps and their arguments ----------------------------------------------------------------------


def test_list_gives_every_step_in_order_with_limits_that_fit_a_call():
    proc = _check("--list")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == STEPS == runpy.run_path(str(ROOT / "scripts" / "gpu_report.py"))["STEP_ORDER"]
    for name, limit, files, what in rows:
        assert limit.endswith(" s") and 0 < int(limit[:-2]) <= 540, name  # 9 minutes of a 10-minute call
        assert files.endswith(" files") and 1 <= int(files[:-6]) <= 3, name
        assert what


def test_the_docs_give_every_step_with_its_limit():
    """docs/benchmarks.md's table of steps is --list's: same names, order and limits."""
    import re

    listed = [tuple(line.split("\t")[:2]) for line in _check("--list").stdout.splitlines()]
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    documented = re.findall(r"^\| `(\w+)` \| (\d+ s) \|", text, re.MULTILINE)
    assert documented == listed


def _groups() -> list[list[str]]:
    proc = _check("--groups")
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines()]


def test_groups_each_fit_one_call_of_a_lent_session_and_cover_every_step():
    """A lent session has 15 minutes of device time, its start included: one group is one call (issue 57)."""
    limits = {r[0]: int(r[1][:-2]) for r in (line.split("\t") for line in _check("--list").stdout.splitlines())}
    files = {r[0]: int(r[2].split()[0]) for r in (line.split("\t") for line in _check("--list").stdout.splitlines())}
    covered = []
    for name, steps, total, what in _groups():
        members = steps.split(",")
        assert total == f"{sum(limits[m] for m in members)} s" and sum(limits[m] for m in members) <= 570, name
        assert sum(files[m] for m in members) <= 8, name
        covered += members
    assert sorted(set(covered)) == sorted(STEPS)
    assert _groups()[0][0] == "figures"  # the figures first


def test_the_docs_give_every_group():
    import re

    text = (ROOT / "docs" / "benchmarks.md").read_text()
    documented = re.findall(r"^\| `(\w+)` \| ([a-z_, ]+) \| (\d+ s) \|", text, re.MULTILINE)
    assert documented == [(n, s.replace(",", ", "), t) for n, s, t, _ in _groups()]
    assert "PYTHON=python3 bash scripts/gpu_check.sh --group figures" in text


def test_a_group_runs_its_steps(tmp_path):
    proc = _check("--group", "compile", "--dry-run", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0 and [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["compile"]


# -- the dependency lists cannot drift from pyproject (issue 57: tomli-w was missing from all three) ------------

def _deps(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_deps.py"), *args], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_gpu_deps_are_pyprojects_dependencies():
    import re

    from vpintegrator._toml import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~; \[]", d, maxsplit=1)[0].replace("-", "_").lower() for d in declared}
    on_312 = set(_deps("--required", "--python-version", "3.12")) | set(_deps("--optional"))
    assert on_312 == (names - {"tomli"}) | {"pytest"}  # tomli only below 3.11
    assert "tomli" in _deps("--required", "--python-version", "3.10")
    assert "tomli_w" in on_312
    wheels = _deps("--wheels", "--python-version", "3.12")
    assert "tomli-w" in wheels and not {"numpy", "torch"} & set(wheels)


def _blocked(tmp_path: Path, name: str) -> str:
    """A folder that makes ``import NAME`` fail, to put first on PYTHONPATH: a device image without NAME."""
    blocker = tmp_path / "blocked" / name
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(f"raise ImportError('{name} is not in this image')\n")
    return str(blocker.parent)


def test_env_step_reports_a_missing_runtime_dependency(tmp_path):
    """The failure the issue found: the env step said 'missing: none' on an image without tomli_w."""
    env = _env(PYTHONPATH=_blocked(tmp_path, "tomli_w"))
    proc = _check("--smoke", "--only", "env", "--out", str(tmp_path / "out"), env=env)
    log = (tmp_path / "out" / "env.log").read_text()
    assert proc.returncode == 1, log
    assert "tomli_w: ImportError" in log and "missing: tomli_w" in log


def test_setup_says_a_runtime_dependency_is_missing(tmp_path):
    env = _env(PYTHONPATH=_blocked(tmp_path, "tomli_w"))
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_setup.sh"), "--wheels", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 1
    assert "MISSING tomli_w (required)" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("args, message", [
    ([], "name the steps to run: --only STEP[,STEP...] (--list shows them), or --all"),
    (["--only"], "--only needs a step name"),
    (["--only", "nope"], "unknown step 'nope'; the steps: env pytest_gpu train"),
    (["--only", "train,train"], "step 'train' named twice"),
    (["--only", "pytest_gpu,rollout_io"], "steps pytest_gpu rollout_io may take 930 s together, more than one device call's 570 s"),
    (["--group"], "--group needs a group name"),
    (["--group", "nope"], "unknown group 'nope'; the groups: figures tests extras compile io"),
    (["--group", "figures", "--only", "env"], "give --group NAME, --only STEP[,STEP...] or --all, one of them"),
    (["--only", "train", "--all"], "give --only STEP[,STEP...] or --all, not both"),
    (["--fast"], "unknown argument --fast"),
    (["--out"], "--out needs a directory"),
])
def test_argument_errors_are_one_line_and_run_nothing(tmp_path, args, message):
    proc = _check(*args, env=_env(OUT=str(tmp_path / "out")))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_budget_and_file_count_of_steps_named_together(tmp_path):
    assert "more than the 8 a device call returns" in _check(
        "--only", "env,pytest_gpu,lm,parity", env=_env(GPU_CHECK_BUDGET="5000")).stderr
    assert "may take 495 s together" in _check("--only", "env,pytest_gpu", env=_env(GPU_CHECK_BUDGET="490")).stderr


def test_dry_run_lists_the_commands_of_every_step(dry_run):
    assert [name for name in dry_run if name != "mode"] == STEPS
    assert all(argv[0] in ("python", "python3", "cp") for name, cmds in dry_run.items() if name != "mode" for argv in cmds)


def _device(dry_run) -> str:
    return "cpu" if dry_run["mode"] == [["smoke"]] else "cuda"


@pytest.mark.parametrize("name, expected", [
    ("train", {"fast_steps": "auto,off", "batch_size": 16384}),
    ("compile", {"fast_steps": "compile", "batch_size": 16384}),
    ("ensemble", {}),
    ("rollout", {"skip": "a,a2,a3,b,c,d3"}),
    ("rollout_io", {"skip": "a,a2,a3,b,c,d1,d2"}),
    ("parity", {}),
])
def test_benchmark_flags_parse(dry_run, monkeypatch, name, expected):
    [argv] = dry_run[name]
    namespace = _script_args(argv[1], argv[2:], monkeypatch)
    assert {k: getattr(namespace, k) for k in expected} == expected
    assert namespace.device == _device(dry_run)
    if name == "ensemble" and _device(dry_run) == "cuda":
        assert namespace.sizes == [1, 64]  # P2e: 64 seeds
    if name == "rollout" and _device(dry_run) == "cuda":
        assert namespace.max_ics == 10**6  # P4: 10^6 initial conditions


def test_lm_step_makes_its_data_and_parses(dry_run, monkeypatch):
    gen, train, copy = dry_run["lm"]
    assert gen[1:3] == ["-m", "vpintegrator.cli.gen"]
    params = _click_args(gen[2], gen[3:], monkeypatch)
    assert params["spec"] == "rigid_body_paper" and str(params["out"]) == "$SCRATCH/rb.h5"
    params = _click_args(train[2], train[3:], monkeypatch)
    assert str(params["config"]) == "configs/rigid_body_vpt_lm.toml" and params["device"] == _device(dry_run)
    assert copy[0] == "cp" and copy[1] == "$SCRATCH/lm/log.csv" and copy[2].endswith("/lm_cuda.csv")


def test_ddp_step_runs_world_sizes_one_and_two(dry_run, monkeypatch):
    from torch.distributed.run import get_args_parser

    launched = []
    for argv in dry_run["ddp"]:
        assert argv[1:3] == ["-m", "torch.distributed.run"]
        launch = get_args_parser().parse_args(argv[3:])
        namespace = _script_args(launch.training_script, launch.training_script_args, monkeypatch)
        launched.append((launch.nproc_per_node, namespace.backend, namespace.device))
    nccl = "nccl" if _device(dry_run) == "cuda" else "gloo"
    assert launched == [("1", nccl, _device(dry_run)), ("2", "gloo", _device(dry_run))]


def test_pytest_step_collects_the_gpu_tests(dry_runs, tmp_path):
    [argv] = dry_runs["cuda"]["pytest_gpu"]
    assert dry_runs["smoke"]["pytest_gpu"] == [argv]
    assert argv[1:5] == ["-m", "pytest", "-m", "gpu"]
    files = [a for a in argv if a.startswith("tests/")]
    assert "tests/test_fast_step.py" in files and "tests/test_training.py" in files
    assert "tests/test_gpu_check.py" not in files
    args = [a for a in argv[1:] if not a.startswith("--junitxml")] + ["--junitxml", str(tmp_path / "j.xml")]
    proc = subprocess.run([sys.executable, *args, "--collect-only"], capture_output=True, text=True, timeout=300,
                          env=_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "test_cuda_graph_step_equals_the_eager_step" in proc.stdout
    assert "test_lm_on_cuda_equals_lm_on_the_cpu" in proc.stdout
    assert "test_auto_is_eager_on_the_cpu" not in proc.stdout  # -m gpu selects the GPU tests only


# -- running steps ----------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_says_so_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    proc = _check("--only", "train", "--out", str(out))
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "no CUDA device here (torch.cuda.is_available() is False): nothing was run" in proc.stderr
    assert not out.exists()


def test_smoke_step_writes_its_log_and_status_and_removes_its_scratch(tmp_path):
    """--smoke --only parity on the CPU: the step's commands under its limit, its two files, nothing else."""
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    proc = _check("--smoke", "--only", "parity", "--out", str(out), env=_env(TMPDIR=str(scratch)), timeout=300)
    assert proc.returncode == 0, proc.stderr + (out / "parity.log").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["parity.log", "parity.tsv"]
    name, rc, seconds, command = (out / "parity.tsv").read_text().rstrip("\n").split("\t")
    assert (name, rc) == ("parity", "0") and int(seconds) >= 0
    assert command == "python3 scripts/gpu_parity.py --device cpu --n-traj 4 --epochs 1 --ics 4 --steps 6"
    log = (out / "parity.log").read_text()
    assert log.startswith("gpu_check: machine: ") and "no CUDA device" in log.splitlines()[0]
    assert "parity: PASS" in log and "gpu_check: parity: exit 0 after" in log
    assert "largest relative difference train loss 0, val loss 0, weights 0" in log
    assert list(scratch.glob("gpu_check_*")) == []  # the step's scratch directory is gone
    text, clean = _gpu_report()["report"](out)  # the report from the files the step wrote
    assert clean and "| parity | ok |" in text and "no CUDA device (parity)" in text
    assert "- losses, paper VPT, Adam, float64, 4 trajectories, 1 epochs" in text and "\n- PASS\n" in text


def test_a_step_past_its_limit_is_killed_and_says_so(tmp_path):
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    proc = _check("--smoke", "--only", "parity", "--out", str(out),
                  env=_env(TMPDIR=str(scratch), GPU_CHECK_STEP_LIMIT="2"))
    assert proc.returncode == 1
    assert (out / "parity.tsv").read_text().split("\t")[:2] == ["parity", "124"]
    assert "gpu_check: parity: exit 124 after" in (out / "parity.log").read_text()
    assert "(killed at its limit of 2 s)" in proc.stderr
    assert list(scratch.glob("gpu_check_*")) == []  # the scratch directory goes with the killed step


# -- the ten-minute plan (issue 89): one call, one log, every figure printed as measured, no torch.compile ------

PLAN_STEPS = ["setup", "f64_graph", "train", "ensemble", "rollout_model"]


def _plan() -> list[tuple[str, int]]:
    proc = _check("--plans")
    assert proc.returncode == 0, proc.stderr
    return [(name, int(limit[:-2])) for plan, name, limit, _ in (line.split("\t") for line in proc.stdout.splitlines())
            if plan == "ten-minutes"]


def test_the_ten_minute_plan_fits_540_s_and_builds_no_compiled_step(dry_runs, tmp_path, monkeypatch):
    """Its limits add up to at most 540 s (9 minutes of a 10-minute call); none of its commands asks for a
    torch.compile step (and the runs' fast step on CUDA, ``auto``, is the CUDA graph); every benchmark flag
    parses; the float64 graph tests it names exist."""
    plan = _plan()
    assert [name for name, _ in plan] == PLAN_STEPS and sum(limit for _, limit in plan) <= 540
    out = tmp_path / "out"
    for mode, extra in (("cuda", ()), ("smoke", ("--smoke",))):
        steps = _dry_run(out, "--plan", "ten-minutes", *extra)
        assert list(steps) == (PLAN_STEPS if mode == "cuda" else PLAN_STEPS[1:])  # --smoke installs nothing
        argvs = [argv for cmds in steps.values() for argv in cmds]
        assert not [argv for argv in argvs if any("compile" in a for a in argv)], "a step asks for torch.compile"
        for name in ("train", "ensemble", "rollout_model"):
            [argv] = steps[name]
            namespace = _script_args(argv[1], argv[2:], monkeypatch)
            assert namespace.device == ("cpu" if mode == "smoke" else "cuda")
            if name == "train":
                assert namespace.fast_steps == "auto,off"  # P2g: graph against eager in the same run
            if name == "ensemble":
                assert namespace.fast_step == "auto" and (mode == "smoke" or namespace.sizes == [1, 64])
            if name == "rollout_model":
                assert set(namespace.skip.split(",")) == {"a", "a2", "a3", "b", "c", "d2", "d3"}
                assert mode == "smoke" or namespace.max_ics == 10**6
        if mode == "cuda":
            assert steps["train"] == dry_runs["cuda"]["train"] and steps["ensemble"] == dry_runs["cuda"]["ensemble"]
    [argv] = steps["f64_graph"]
    tests = [a for a in argv if a.startswith("tests/")]
    assert len(tests) == 2
    for test in tests:
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text() and "float64" in (ROOT / path).read_text()


def test_the_docs_give_the_plan_with_its_limits():
    import re

    text = (ROOT / "docs" / "benchmarks.md").read_text()
    documented = re.findall(r"^\| \d+ \| (\w+) \| (\d+) s \|", text, re.MULTILINE)
    assert [(name, int(limit)) for name, limit in documented] == _plan()
    assert "bash scripts/gpu_check.sh --plan ten-minutes" in text


def test_a_plan_over_its_budget_or_mixed_with_steps_runs_nothing(tmp_path):
    for args, message in ((["--plan", "nope"], "unknown plan 'nope'; the plans: ten-minutes"),
                          (["--plan", "ten-minutes", "--only", "train"], "give --plan NAME, --group NAME")):
        proc = _check(*args, "--out", str(tmp_path / "out"))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr
    script = (ROOT / "scripts" / "gpu_check.sh").read_text().replace("PLAN_BUDGET=540", "PLAN_BUDGET=400")
    (tmp_path / "gpu_check.sh").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "gpu_check.sh"), "--plan", "ten-minutes", "--dry-run"],
                          capture_output=True, text=True, timeout=60, env=_env(), cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"plan ten-minutes's limits add up to {sum(limit for _, limit in _plan())} s, more than 400 s" in proc.stderr


def test_the_plan_runs_on_the_cpu_into_one_log(tmp_path):
    """--plan ten-minutes --smoke end to end: each step under its limit, all of it into one log (and on
    stdout), a status line per step; a step killed at its limit leaves what it printed and the next runs."""
    out = tmp_path / "out"
    proc = _check("--plan", "ten-minutes", "--smoke", "--out", str(out), timeout=600)
    log = (out / "ten-minutes.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert proc.stdout == log  # printed as it goes, and the same in the log
    assert sorted(p.name for p in out.iterdir()) == ["f64_graph.xml", "ten-minutes.log", "ten-minutes.tsv"]
    assert log.startswith("gpu_check: machine: ") and "TORCH_COMPILE_DISABLE=1" in log.splitlines()[1]
    rows = [line.split("\t") for line in (out / "ten-minutes.tsv").read_text().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [(name, "0") for name in PLAN_STEPS]
    heads = [log.index(f"] {name} (limit ") for name in PLAN_STEPS]
    assert heads == sorted(heads)
    assert ("2 passed" if torch.cuda.is_available() else "2 skipped") in log  # the float64 graph tests need CUDA
    assert "ours, fast_step=auto (ran: off)" in log and "epochs/s (fastest timed epoch)" in log  # P2g, as measured
    assert "sequential run 1:" in log and "model-epochs/s (fast_step ran: off)" in log  # P2e
    assert "     10000" in log and "state-steps/s" in log  # P4
    assert log.rstrip().endswith("5 of 5 steps exited 0")
    killed = _check("--plan", "ten-minutes", "--smoke", "--out", str(tmp_path / "k"),
                    env=_env(GPU_CHECK_STEP_LIMIT="2"), timeout=300)
    text = (tmp_path / "k" / "ten-minutes.log").read_text()
    assert killed.returncode == 1 and "train: exit 124 after" in text and "(killed at its limit of 2 s)" in text
    assert "] rollout_model (limit 2 s)" in text and text.rstrip().endswith("steps exited 0")


def test_ddp_check_at_world_size_two_exchanges_gradients(tmp_path):
    """Two ranks over Gloo (what the ddp step runs on a one-GPU machine, there with CUDA tensors): the
    all-reduced gradients and loss sums give the one-process run's weights to float64 rounding."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "scripts" / "ddp_check.py"), "--device", "cpu", "--backend", "gloo", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ddp_check: DDP over gloo, world size 2, cpu:" in proc.stdout and proc.stdout.rstrip().endswith("PASS")


@pytest.mark.parametrize("script, args, message", [
    ("ddp_check.py", ["--device", "cpu", "--backend", "nccl", "--out", "x"], "--backend nccl needs --device cuda"),
    ("gpu_parity.py", ["--device", "cpu", "--steps", "2"], "need --steps >= 4"),
])
def test_script_argument_errors(tmp_path, script, args, message):
    env = _env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_parity_refuses_cuda_without_cuda(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_parity.py")], capture_output=True,
                          text=True, timeout=120, env=_env(), cwd=tmp_path)
    assert proc.returncode == 2 and "use --device cpu for the plumbing check" in proc.stderr


@pytest.mark.parametrize("script", ["gpu_setup.sh", "gpu_wheels.sh"])
def test_setup_scripts_refuse_unknown_arguments(script):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / script), "--fast"], capture_output=True, text=True,
                          timeout=60, env=_env())
    assert proc.returncode == 2 and "unknown" in proc.stderr and "--fast" in proc.stderr


# -- the report ------------------------------------------------------------------------------------------

# lines in the benchmarks' own formats (bench_train's `line`, bench_ensemble's `N = ` line, bench_rollout part d)
TRAIN_LOG = """\
ours, fast_step=off (ran: off)                 20.500 epochs/s    119,000 windows/s     6.50 ms/step   (median 20.1 epochs/s; epoch s: 0.049, 0.050)
ours, fast_step=auto (ran: graph)             312.250 epochs/s  1,000,000 windows/s     0.40 ms/step   (median 300.0 epochs/s; epoch s: 0.003, 0.004)
ours, fast_step=compile (ran: off; fell back: building the compile step raised RuntimeError: x (y))   150.000 epochs/s  900 windows/s     0.80 ms/step   (median 1 epochs/s; epoch s: 0.007)
"""
ENSEMBLE_LOG = """\
N =   1: ensemble    300.00 model-epochs/s (fast_step ran: graph), sequential   290.00 model-epochs/s (1 runs timed), ratio   1.03x (ensemble fit 2.0 s wall incl. setup)
N =  64: ensemble   4000.50 model-epochs/s (fast_step ran: graph), sequential   290.00 model-epochs/s (4 runs timed), ratio  13.79x (ensemble fit 9.0 s wall incl. setup)
"""
ROLLOUT_LOG = """\
(d) rollouts at scale on cuda (NVIDIA H100): paper VPT, trained (pretrained:rigid_body_vpt), cast to float32; state-steps/s = trajectories x steps / s

    (i) model steps only (600 steps = 200 calls of 3 states, states stay on the device; fast: CUDA graph on CUDA, TorchScript trace on the CPU)
       ICs       fast runner   fast s  state-steps/s  eager s  state-steps/s  fast/eager
     10000        cuda_graph    0.037       1.60e+08    0.025       1.18e+08        1.40
   1000000        cuda_graph    0.400       1.50e+09    0.900       6.67e+08        2.25

    (ii) 300 steps in blocks of 64 with every metric; set-up excluded
       ICs  volume  device s  state-steps/s  to host MB   host s  state-steps/s  device/host
   1000000      no     0.074       4.07e+09         1.8    0.059        5.1e+09         0.80
   1000000     yes     2.401       1.25e+08         2.0    1.897       1.58e+08         0.79

    (iii) run_rollouts of the VPT, 120 steps in blocks of 64, writing the HDF5 file; I/O bound = read s + write s
       ICs  volume  device s  state-steps/s   host s  state-steps/s  device/host  file MB  read s  write s  write MB/s  I/O-bound state-steps/s  device s / I/O s
   1000000      no      0.66       4.54e+04     0.67       4.51e+04         1.01        4   0.006    0.056          64                 4.78e+05             1.25
   1000000     yes      2.42       1.24e+04     2.44       1.23e+04         1.01        4   0.003    0.074          51                 3.92e+05             3.50
"""


@pytest.fixture
def junit(tmp_path) -> Path:
    """A real pytest JUnit file: one test passed, one failed, one skipped."""
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2, 'capture broke'\n\n"
        "@pytest.mark.skip(reason='needs CUDA')\ndef test_skip():\n    pass\n"
    )
    xml = tmp_path / "pytest_gpu.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", str(tests)],
                   capture_output=True, timeout=120, cwd=tests)
    return xml


def _gpu_report():
    return runpy.run_path(str(ROOT / "scripts" / "gpu_report.py"))


DDP_LOG = """\
gpu_check: machine: h1, 16 CPUs, Python 3.12.3, torch 2.11.0+cu130, CUDA 13.0, 1 x NVIDIA H100 80GB HBM3
ddp_check: DDP over nccl, world size 1, cuda:0: train loss 12.97, val loss 22.1, 6 steps; one process: train loss 12.97, val loss 22.1, 6 steps; largest relative weight difference 0 (tolerance 1e-09): PASS
ddp_check: DDP over gloo, world size 2, cuda:0 (the ranks share it): train loss 12.97, val loss 22.1, 6 steps; one process: train loss 12.97, val loss 22.1, 6 steps; largest relative weight difference 6.8e-16 (tolerance 1e-09): PASS
"""
PARITY_LOG = """\
parity: losses, paper VPT, Adam, float64, 64 trajectories, 4 epochs (84 steps), cuda fast_step=off (ran: off) vs cpu eager: largest relative difference train loss 3e-15, val loss 2e-15, weights 1e-14
parity: PASS
"""


def _steps(out: Path, rows: list[tuple[str, int]]) -> None:
    """Each step's status file as gpu_check.sh writes it."""
    for name, rc in rows:
        (out / f"{name}.tsv").write_text(f"{name}\t{rc}\t7\tpython x --{name}\n")


def test_report_puts_each_figure_beside_its_target(tmp_path, junit):
    out = tmp_path / "out"
    out.mkdir()
    junit.rename(out / "pytest_gpu.xml")
    _steps(out, [("pytest_gpu", 1), ("train", 0), ("compile", 0), ("ensemble", 0), ("rollout", 0),
                 ("rollout_io", 0), ("lm", 0), ("ddp", 0), ("parity", 124)])
    train, compiled = TRAIN_LOG.splitlines(keepends=True)[:2], TRAIN_LOG.splitlines(keepends=True)[2:]
    (out / "train.log").write_text("".join(train))
    (out / "compile.log").write_text("".join(compiled))
    (out / "ensemble.log").write_text(ENSEMBLE_LOG)
    part_iii = ROLLOUT_LOG.index("    (iii)")
    (out / "rollout.log").write_text(ROLLOUT_LOG[:part_iii])
    (out / "rollout_io.log").write_text(ROLLOUT_LOG[part_iii:])
    (out / "ddp.log").write_text(DDP_LOG)
    (out / "parity.log").write_text(PARITY_LOG + "still comparing rollouts\n")
    (out / "lm_cuda.csv").write_text(
        "epoch,train_loss,val_loss,lr,seconds\n1,0.01,0.02,0.001,4.5\n2,0.0004,0.0006,0.0003,9.25\n"
        "3,0.0002,0.0003,0.0001,14.0\n")
    text, clean = _gpu_report()["report"](out)
    assert not clean
    assert "- h1, 16 CPUs, Python 3.12.3, torch 2.11.0+cu130, CUDA 13.0, 1 x NVIDIA H100 80GB HBM3 (ddp)" in text
    assert "| pytest_gpu | FAILED (exit 1) | 7 |" in text and "| parity | timed out | 7 |" in text
    assert "| env | not run | | |" in text  # every step of gpu_check.sh is listed, run or not
    assert text.index("| pytest_gpu |") < text.index("| train |") < text.index("| rollout_io |")  # its order
    assert "fast_step=auto (ran: graph): epochs/s | 312.250 | >= 300 | met |" in text
    assert "fast_step=off (ran: off): epochs/s | 20.500 | (eager baseline; paper 23) |" in text
    assert "fast_step=compile (ran: off; fell back: building the compile step raised RuntimeError: x (y)): " \
           "epochs/s | 150.000 | >= 300 | not met |" in text
    assert "| fast_step=auto (ran: graph) against the eager step: ratio of epochs/s | 15.23 |" in text
    assert "| ensemble of 64 seeds (ran: graph): model-epochs/s | 4000.50 | >= 5000 | not met |" in text
    assert "| ensemble of 1 seeds (ran: graph): model-epochs/s | 300.00 |  |  |" in text
    assert "state-steps/s | 1.5e+09 | >= 1e9 | met |" in text and "(cuda_graph)" in text
    assert "| rollout of 10^6 ICs, cuda_graph against eager: ratio of state-steps/s | 2.25 |" in text
    assert "volume no: device s / I/O s | 1.25 |" in text and "volume yes: device s / I/O s | 3.50 |" in text
    assert "seconds to training loss <= 5e-4 (last loss 0.0002 after 3 epochs, 14 s) | 9.2 | reached" in text
    assert "| DDP (NCCL, world size 1) against one process | PASS | PASS |" in text
    assert "| DDP (Gloo, world size 2) against one process | PASS | PASS |" in text
    assert "- losses, paper VPT, Adam, float64, 64 trajectories" in text and "- PASS" in text
    assert "| test_x::test_ok | passed |" in text and "| test_x::test_skip | skipped | needs CUDA |" in text
    assert "| test_x::test_bad | FAILED | AssertionError: capture broke" in text
    assert "1 passed, 1 FAILED, 1 skipped." in text
    assert "## parity: timed out, last lines of parity.log" in text and "still comparing rollouts" in text
    assert "   1000000     yes      2.42" in text  # the rollout tables, with and without the volume
    assert "**Not clean**: 7 of 9 steps exited 0; GPU tests: 1 of 3 passed." in text


def test_report_says_what_is_missing_and_the_cli_writes_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _steps(out, [("train", 0)])
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), str(out)], capture_output=True,
                          text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr  # only a failed step or GPU test makes it 1
    text = (out / "gpu_report.md").read_text()
    assert "| bench_train: epochs/s | missing | >= 300 | missing |" in text
    assert "| ensemble of 64 seeds: model-epochs/s | missing | >= 5000 | missing |" in text
    assert "| DDP (NCCL, world size 1) against one process | missing | PASS |" in text
    assert "No JUnit file (pytest_gpu.xml): the tests did not run." in text
    assert "missing: no parity log." in text
    empty = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), str(tmp_path / "none")],
                           capture_output=True, text=True, timeout=120, env=_env())
    assert empty.returncode == 2 and "run scripts/gpu_check.sh --only STEP" in empty.stderr


@pytest.mark.slow
def test_report_of_a_smoke_ddp_run(tmp_path):
    """The ddp step through gpu_check.sh (--smoke: Gloo on the CPU at world sizes 1 and 2) and its report."""
    out = tmp_path / "out"
    proc = _check("--smoke", "--only", "ddp", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    text, clean = _gpu_report()["report"](out)
    assert clean and "| ddp | ok |" in text and "no CUDA device (ddp)" in text
    assert "| DDP (Gloo, world size 2) against one process | PASS | PASS |" in text
    assert "| DDP (NCCL, world size 1) against one process | missing | PASS |" in text  # Gloo on the CPU
    assert "ddp_check: DDP over gloo, world size 1, cpu:" in (out / "ddp.log").read_text()
