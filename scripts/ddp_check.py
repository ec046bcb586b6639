"""The DDP training path through a real process group, even on one device: NCCL on CUDA, Gloo on the CPU.

    torchrun --standalone --nproc_per_node=1 scripts/ddp_check.py --device cuda --out DIR
    torchrun --standalone --nproc_per_node=2 scripts/ddp_check.py --device cuda --backend gloo --out DIR

Under ``torchrun`` with ``WORLD_SIZE = 1`` ``vp-train`` trains without DDP (there is nobody to all-reduce
with), so a machine with one GPU never runs the DDP path through ``vp-train``. This script joins the
process group itself (``nccl`` on CUDA, ``gloo`` on the CPU) and runs the trainer's DDP path at any world
size: the model wrapped in DistributedDataParallel (its gradient all-reduce), the loss's numerator and
denominator all-reduced by the trainer. Rank 0 then trains the same tiny VPT (float64, 3 epochs, a last
global batch of one window) in one plain process and prints both; the exit status is 1 when the weights
differ by more than ``--rtol`` (DDP averages the same gradient: equal to float64 rounding).

What each run proves. At world size 1 the gradient all-reduce is a call into the backend with nobody to
exchange with: over NCCL it shows that the process group starts, DDP wraps the CUDA model and its hooks
and the trainer's all-reduces run, but no data moves between ranks. At world size 2 the ranks exchange
gradients and loss sums for real. Ranks take GPU ``local_rank % device_count``, so on a machine with one
GPU both ranks share it: NCCL refuses two ranks on one GPU, Gloo does not (it all-reduces CUDA tensors
through host memory), so ``--backend gloo`` with two processes runs the DDP path with CUDA tensors and a real
exchange, though not NCCL's; NCCL across ranks needs two GPUs.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist


def _distinfo_class():
    from vpintegrator.training.ddp import DistInfo

    @dataclass(frozen=True)
    class AllRanks(DistInfo):
        """A DistInfo whose DDP path is on at any world size (DistInfo's is on from two ranks)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            object.__setattr__(self, "enabled", True)

    return AllRanks


def _config(data: Path, out: Path, device: str) -> dict:
    # 11 training trajectories x 13 starts = 143 windows; batch 71 leaves a last global batch of one window
    return dict(data=[str(data)], epochs=3, batch_size=71, dtype="float64", device=device, out=str(out),
                model={"name": "vpt", "seq_len": 2, "L": 2}, fast_step="off")


def _write_data(path: Path) -> None:
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.data import integrate

    rng = np.random.default_rng(2)
    y0 = rng.normal(size=(12, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    write_trajectories(path, integrate("rigid_body", y0, 0.2, 15, method="rk4"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (NCCL) or cpu (Gloo)")
    parser.add_argument("--out", required=True, help="directory for the data and the two runs (made; must be new)")
    parser.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"],
                        help="process group backend (auto: nccl on CUDA, gloo on the CPU)")
    parser.add_argument("--rtol", type=float, default=1e-9, help="largest relative weight difference accepted")
    args = parser.parse_args()
    if "LOCAL_RANK" not in os.environ:
        print("ddp_check: run me under torchrun, e.g. torchrun --standalone --nproc_per_node=1 "
              "scripts/ddp_check.py --out DIR", file=sys.stderr)
        return 2
    from vpintegrator.training import TrainConfig, fit
    from vpintegrator.training.loop import Trainer
    from vpintegrator.training.plan import build_plan

    cuda = args.device.startswith("cuda")
    backend = args.backend if args.backend != "auto" else "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        print("ddp_check: --backend nccl needs --device cuda", file=sys.stderr)
        return 2
    rank, world, local_rank = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if cuda and not torch.cuda.is_available():
        print("ddp_check: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    # one GPU for two ranks: they share it (Gloo only; NCCL refuses two ranks on one device)
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    out = Path(args.out).resolve()
    data = out / "data.h5"
    dist.init_process_group(backend=backend)
    try:
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            _write_data(data)
        dist.barrier()
        config = TrainConfig.from_dict(_config(data, out / f"ddp_{backend}_{world}", str(device)))
        config.validate()
        ddp_result = Trainer(build_plan(config), _distinfo_class()(rank, world, local_rank, True), device, None,
                             False).run()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0
    os.environ["WORLD_SIZE"] = "1"  # the reference: one plain process (fit joins no process group)
    single = fit(_config(data, out / "single", str(device)), progress=False)
    ref = single.model.state_dict()
    worst = 0.0
    for key, value in ddp_result.model.state_dict().items():
        scale = float(ref[key].abs().max()) or 1.0
        worst = max(worst, float((value - ref[key]).abs().max()) / scale)
    ok = worst <= args.rtol and ddp_result.steps == single.steps
    shared = " (the ranks share it)" if cuda and world > torch.cuda.device_count() else ""
    print(f"ddp_check: DDP over {backend}, world size {world}, {device}{shared}: train loss {ddp_result.train_loss:.12g}, "
          f"val loss {ddp_result.val_loss:.12g}, {ddp_result.steps} steps; one process: train loss "
          f"{single.train_loss:.12g}, val loss {single.val_loss:.12g}, {single.steps} steps; largest relative "
          f"weight difference {worst:.3g} (tolerance {args.rtol:g}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    from vpintegrator.training.ddp import exit_rank

    exit_rank(main())  # not sys.exit: DDP leaves Gloo threads that can abort the interpreter's teardown
