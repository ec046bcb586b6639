"""scripts/gpu_check.sh (every GPU check and benchmark, one report) on a machine without a GPU: the steps it
lists parse (each command's flags are accepted by its argparse/click/torchrun parser, nothing is run), it
refuses to run without CUDA, and scripts/gpu_report.py puts each figure of real-format logs beside its target.
scripts/ddp_check.py (the DDP path at world size 1) runs here over Gloo."""

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
STEPS = ["data", "pytest_gpu", "bench_train", "bench_ensemble", "bench_rollout", "lm_cuda", "ddp_nccl"]


def _env() -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTHON"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> dict[str, list[str]]:
    out = tmp_path_factory.mktemp("gpu_check") / "out"
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], capture_output=True, text=True, timeout=60,
                          env=_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()  # a dry run writes nothing
    steps = {}
    for line in proc.stdout.splitlines():
        name, command = line.split("\t")
        steps[name] = shlex.split(command)
    return steps


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


def test_dry_run_lists_every_step(dry_run):
    assert list(dry_run) == STEPS
    assert all(argv[0] == "python" for argv in dry_run.values())


@pytest.mark.parametrize("name,expected", [
    ("bench_train", {"device": "cuda", "fast_steps": "auto,off,compile"}),
    ("bench_ensemble", {"device": "cuda", "sizes": [1, 8, 64]}),
    ("bench_rollout", {"device": "cuda", "max_ics": 10**6, "skip": "a,a2,b,c"}),
])
def test_benchmark_flags_parse(dry_run, monkeypatch, name, expected):
    argv = dry_run[name]
    namespace = _script_args(argv[1], argv[2:], monkeypatch)
    assert {k: getattr(namespace, k) for k in expected} == expected


def test_cli_steps_parse(dry_run, monkeypatch):
    gen = dry_run["data"]
    assert gen[1:3] == ["-m", "vpintegrator.cli.gen"]
    assert _click_args(gen[2], gen[3:], monkeypatch)["spec"] == "rigid_body_paper"
    train = dry_run["lm_cuda"]
    params = _click_args(train[2], train[3:], monkeypatch)
    assert str(params["config"]) == "configs/rigid_body_vpt_lm.toml" and params["device"] == "cuda"


def test_torchrun_step_parses(dry_run, monkeypatch):
    from torch.distributed.run import get_args_parser

    argv = dry_run["ddp_nccl"]
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    launch = get_args_parser().parse_args(argv[3:])
    assert launch.nproc_per_node == "1" and launch.standalone
    namespace = _script_args(launch.training_script, launch.training_script_args, monkeypatch)
    assert namespace.device == "cuda"


def test_pytest_step_collects_the_gpu_tests(dry_run, tmp_path):
    argv = dry_run["pytest_gpu"]
    assert argv[1:5] == ["-m", "pytest", "-m", "gpu"]
    args = [a for a in argv[1:] if not a.startswith("--junitxml")] + ["--junitxml", str(tmp_path / "j.xml")]
    proc = subprocess.run([sys.executable, *args, "--collect-only", "tests/test_fast_step.py"], capture_output=True,
                          text=True, timeout=300, env=_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "test_cuda_graph_step_equals_the_eager_step" in proc.stdout
    assert "test_auto_is_eager_on_the_cpu" not in proc.stdout  # -m gpu selects the GPU tests only


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_says_so_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 2
    assert "no CUDA device here (torch.cuda.is_available() is False): nothing was run" in proc.stderr
    assert not out.exists()


def test_unknown_option_is_refused(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 2 and "unknown option --fast" in proc.stderr


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


def test_report_puts_each_figure_beside_its_target(tmp_path, junit):
    out = tmp_path / "out"
    (out / "runs" / "lm_cuda").mkdir(parents=True)
    junit.rename(out / "pytest_gpu.xml")
    rows = [("pytest_gpu", 1), ("bench_train", 0), ("bench_ensemble", 0), ("bench_rollout", 0), ("lm_cuda", 0),
            ("ddp_nccl", 124)]
    (out / "steps.tsv").write_text("".join(f"{n}\t{rc}\t7\tpython x --{n}\n" for n, rc in rows))
    (out / "bench_train.log").write_text(TRAIN_LOG)
    (out / "bench_ensemble.log").write_text(ENSEMBLE_LOG)
    (out / "bench_rollout.log").write_text(ROLLOUT_LOG)
    (out / "ddp_nccl.log").write_text("starting\nstill waiting for NCCL\n")
    (out / "runs" / "lm_cuda" / "log.csv").write_text(
        "epoch,train_loss,val_loss,lr,seconds\n1,0.01,0.02,0.001,4.5\n2,0.0004,0.0006,0.0003,9.25\n"
        "3,0.0002,0.0003,0.0001,14.0\n")
    text, clean = _gpu_report()["report"](out)
    assert not clean
    assert "| pytest_gpu | FAILED (exit 1) | 7 |" in text and "| ddp_nccl | timed out | 7 |" in text
    assert "fast_step=auto (ran: graph): epochs/s | 312.250 | >= 300 | met |" in text
    assert "fast_step=off (ran: off): epochs/s | 20.500 | (eager baseline; paper 23) |" in text
    assert "fast_step=compile (ran: off; fell back: building the compile step raised RuntimeError: x (y)): " \
           "epochs/s | 150.000 | >= 300 | not met |" in text
    assert "| ensemble of 64 seeds (ran: graph): model-epochs/s | 4000.50 | >= 5000 | not met |" in text
    assert "| ensemble of 1 seeds (ran: graph): model-epochs/s | 300.00 |  |  |" in text
    assert "state-steps/s | 1.5e+09 | >= 1e9 | met |" in text and "(cuda_graph)" in text
    assert "volume no: device s / I/O s | 1.25 |" in text and "volume yes: device s / I/O s | 3.50 |" in text
    assert "seconds to training loss <= 5e-4 (last loss 0.0002 after 3 epochs, 14 s) | 9.2 | reached" in text
    assert "DDP through NCCL (torchrun --nproc_per_node=1) against one process | missing | PASS |" in text
    assert "| test_x::test_ok | passed |" in text and "| test_x::test_skip | skipped | needs CUDA |" in text
    assert "| test_x::test_bad | FAILED | AssertionError: capture broke" in text
    assert "1 passed, 1 FAILED, 1 skipped." in text
    assert "## ddp_nccl: timed out, last lines of ddp_nccl.log" in text and "still waiting for NCCL" in text
    assert "   1000000     yes      2.42" in text  # the rollout tables, with and without the volume
    assert "**Not clean**: 4 of 6 steps exited 0; GPU tests: 1 of 3 passed." in text


def test_report_says_what_is_missing_and_the_cli_writes_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.tsv").write_text("bench_train\t0\t3\tpython scripts/bench_train.py --device cuda\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), str(out)], capture_output=True,
                          text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr  # only a failed step or GPU test makes it 1
    text = (out / "gpu_report.md").read_text()
    assert "| bench_train: epochs/s | missing | >= 300 | missing |" in text
    assert "| ensemble of 64 seeds: model-epochs/s | missing | >= 5000 | missing |" in text
    assert "No JUnit file (pytest_gpu.xml): the tests did not run." in text
    empty = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), str(tmp_path / "none")],
                           capture_output=True, text=True, timeout=120, env=_env())
    assert empty.returncode == 2 and "run scripts/gpu_check.sh" in empty.stderr


def test_ddp_check_runs_the_ddp_path_at_world_size_one(tmp_path):
    """scripts/ddp_check.py under torchrun --nproc_per_node=1 (Gloo here; NCCL on CUDA): DDP equals one process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
           str(ROOT / "scripts" / "ddp_check.py"), "--device", "cpu", "--out", str(tmp_path / "ddp")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ddp_check: DDP over gloo, world size 1, cpu:" in proc.stdout and proc.stdout.rstrip().endswith("PASS")
    assert (tmp_path / "ddp" / "ddp_gloo_1" / "last.pt").exists()
