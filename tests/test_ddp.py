"""2-process DistributedDataParallel (torchrun, gloo on CPU) equals single-process training."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.data import integrate
from vpintegrator.systems import get_system
from vpintegrator.training import fit

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not available in this build"
)


@pytest.fixture
def tiny_config(tmp_path):
    rng = np.random.default_rng(2)
    y0 = rng.normal(size=(12, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = write_trajectories(tmp_path / "tiny.h5", integrate(get_system("rigid_body"), y0, 0.2, 15, method="rk4"))
    # 11 training trajectories x 13 starts = 143 windows (no test split); batch 71 leaves a last global batch
    # of one window, so one rank gets an empty slice (it must still join the gradient all-reduce)
    config = tmp_path / "tiny.toml"
    config.write_text(
        f'data = ["{data}"]\nepochs = 3\nbatch_size = 71\ntest_fraction = 0.0\ndtype = "float64"\ndevice = "cpu"\n\n'
        '[model]\nname = "vpt"\nseq_len = 2\nL = 2\n'
    )
    return config


def test_two_process_ddp_equals_single_process(tiny_config, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    ddp_run = tmp_path / "ddp"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "vpintegrator.cli.train", str(tiny_config), "--out", str(ddp_run), "--quiet",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("Run written to") == 1  # only rank 0 reports (and writes)

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = fit(tiny_config, out=str(tmp_path / "single"))
    finally:
        torch.set_num_threads(old)

    ddp = torch.load(ddp_run / "last.pt", weights_only=True)
    ref = single.model.state_dict()
    for key, value in ddp["state_dict"].items():
        torch.testing.assert_close(value, ref[key], rtol=1e-12, atol=1e-12)
    assert ddp["step"] == single.steps == 3 * 3
    summary = json.loads((ddp_run / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["val_loss"] == pytest.approx(single.val_loss, rel=1e-12)
    assert summary["train_loss"] == pytest.approx(single.train_loss, rel=1e-12)
