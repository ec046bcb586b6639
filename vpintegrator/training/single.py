"""The single-model step strategy of the one epoch loop (``vpintegrator.training.loop``): one model, a torch optimiser (eager,
LBFGS, the graph fast step, DDP under ``torchrun``) or Levenberg–Marquardt, mid-epoch checkpoints and
exact resume.

Under ``torchrun`` (``WORLD_SIZE > 1``) the model is wrapped in DistributedDataParallel and every rank
takes a contiguous slice of each global batch. The loss is a ratio of norms over the whole batch, so the
ranks all-reduce its numerator and denominator before the backward pass: each rank back-propagates
``W · N_r / (2 √(N D))`` (``N = Σ N_r``, ``D = Σ D_r``), whose DDP average is exactly the gradient of
``√(N / D)``.

What the loop asks of it is ``vpintegrator.training.strategy.StepStrategy`` (the same for
``vpintegrator.training.ensemble.EnsembleSteps``): the loop runs the batches, counts the steps, checks
divergence, takes the mid-epoch checkpoints and stop requests; this class answers ``begin_epoch``,
``step``, ``pause``, ``end_epoch`` and the questions about its model and files, and never calls the loop.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..arrays import squared_norm
from ..errors import VPIntegratorError
from ..stepping import iterate_windows
from . import checkpoint as ckpt_io
from . import ddp
from .fast_step import FastStep, portable_state, resolve_fast_step
from .optim import LevenbergMarquardt, LMSubsample, label, make_optimizer, make_scheduler, relative_loss
from .strategy import Clock

if TYPE_CHECKING:
    from .record import Member
    from .plan import TrainPlan

__all__ = ["SingleSteps", "Unrolled", "unrolled", "window_loss"]


@torch.no_grad()
def window_loss(model: torch.nn.Module | None, dataset, batch_size: int, dist: ddp.DistInfo | None = None,
                squared: bool = False) -> float:
    """The reference loss ``‖pred − target‖_F / ‖target‖_F`` over every window of ``dataset`` (or its square).

    Numerator and denominator are summed in float64 over batches of ``batch_size`` windows (split across
    DDP ranks and all-reduced); NaN for no dataset. The model is left in training mode. ``model = None``
    scores the identity (do-nothing) map: every target state predicted as the window's last input state.
    """
    if dataset is None:
        return math.nan
    dist = dist or ddp.DistInfo()
    device = dataset.y.device
    if model is None:
        model = _Identity()
    model.eval()
    n = torch.zeros((), dtype=torch.float64, device=device)
    d = torch.zeros((), dtype=torch.float64, device=device)
    order = torch.arange(len(dataset), device=device)
    for b in range(-(-len(dataset) // batch_size)):
        idx = order[b * batch_size : (b + 1) * batch_size]
        if dist.enabled:
            idx = torch.tensor_split(idx, dist.world_size)[dist.rank]
            if idx.numel() == 0:
                continue
        x, target = dataset.batch(idx)
        pred = model(x)
        n += squared_norm(pred - target).double()
        d += squared_norm(target).double()
    model.train()
    stats = ddp.all_reduce(torch.stack([n, d]), dist)
    return float(stats[0] / stats[1] if squared else torch.sqrt(stats[0] / stats[1]))


class _Identity(nn.Module):
    """The do-nothing map of ``window_loss``: (batch, seq_len, dim) -> (batch, 1, dim), the last input state,
    which the loss broadcasts over the target's ``pred_window`` states."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1:]


class SingleSteps:
    """One model trained by one optimiser (one process of it under DDP).

    ``plan`` is the run's plan, ``record`` the config its files record (``config.toml``); the loop
    (``vpintegrator.training.loop.Trainer``) drives it step by step.
    """

    n = 1
    resumable = True
    together = True  # one model: a non-finite loss stops the run
    resume_file = "last.pt"  # the training state is in the model's last.pt (last_extra)

    #: set by __init__ (declared for type checkers)
    steps_per_epoch: int
    fast_mode: str
    fast: FastStep | None
    batch_in_epoch: int
    epoch_start_state: torch.Tensor | Any
    loss_sum: float
    loss_count: int

    def __init__(self, plan: TrainPlan, record: dict[str, Any], dist: ddp.DistInfo, device: torch.device,
                 model: torch.nn.Module, train_set, val_set, validator) -> None:
        from ..data.windows import WindowBatchSampler

        optim = plan.optim
        self.optim, self.epochs, self.record, self.dist, self.device = optim, plan.stop.epochs, record, dist, device
        self.squared = optim.loss == "relative_squared"  # the loss key: the relative error or its square
        self.model = model
        self.models = [model]
        self.objective = unrolled(model, plan.data.unroll)  # what the loss sees (the model for unroll = 1)
        self.train_set, self.val_set, self.validator = train_set, val_set, validator

        # data order: a generator of its own (same seed on every rank: same global permutation)
        self.generator = torch.Generator().manual_seed(plan.seed)
        self.sampler = WindowBatchSampler(len(train_set), optim.batch_size, True, self.generator, dist.rank,
                                          dist.world_size)
        self.steps_per_epoch = len(self.sampler)
        self.lm: LMSubsample | None = None
        self.scheduler: Any = None  # a LambdaLR; none for LM
        self.optimizer: torch.optim.Optimizer
        if optim.name == "lm":
            # an "epoch" of LM is lm_iters_per_epoch iterations; no lr schedule
            self.optimizer = LevenbergMarquardt(model.parameters(), lam=optim.lm.lam)
            self.lm = LMSubsample(self.optimizer, self.objective, train_set, self.generator, optim.lm.windows,
                                  optim.lm.resample_every, optim.lm.check_windows)
            self.steps_per_epoch = int(optim.lm.iters_per_epoch)
        else:
            lr, lr_min = optim.rates  # with init_from: finetune_lr (default lr_min)
            self.optimizer = make_optimizer(optim.name, model.parameters(), lr, **optim.kwargs)
            decay = optim.decay_epochs if optim.decay_epochs is not None else 1.0
            horizon = decay * (self.steps_per_epoch if optim.schedule_per == "step" else 1)
            self.scheduler = make_scheduler(optim.scheduler, self.optimizer, lr_min / lr, horizon)
        self.host_losses = self.lm is not None  # LM's loss is a host float every iteration
        self.order = torch.empty(0, dtype=torch.long)  # the epoch's permutation of the windows (begin_epoch)
        self.fast_mode = resolve_fast_step(optim.fast_step, optim.name, device, dist.enabled)
        self.fast: FastStep | None = None
        self.net = self.objective
        if dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            self.net = DistributedDataParallel(self.objective, device_ids=ids)
        self.batch_in_epoch = 0
        self.epoch_start_state = self.generator.get_state()
        self.loss_sum, self.loss_count = 0.0, 0

    def start(self) -> None:
        """After a resume's state is loaded: the fast step (a CUDA graph of the whole step) where it runs."""
        if self.fast_mode != "off":
            self.fast = FastStep(self.fast_mode, self._window_loss, self.optimizer, self.device,
                                 fallback=self.optim.fast_step == "auto")

    # -- checkpoints -------------------------------------------------------------------------------

    def last_extra(self, m: Member, at: Clock) -> dict[str, Any]:
        """What ``last.pt`` holds beside the weights: the training state (exact resume)."""
        return {
            "epoch": at.epoch,
            "step": at.step,
            "batch_in_epoch": self.batch_in_epoch,
            "optimizer": self.lm.state_dict() if self.lm is not None else portable_state(self.optimizer.state_dict()),
            "scheduler": {} if self.scheduler is None else portable_state(self.scheduler.state_dict()),
            "rng": {**ckpt_io.rng_state(self.device), "data_epoch_start": self.epoch_start_state.clone()},
            "train_state": {
                "loss_sum": float(self.loss_sum),
                "loss_count": int(self.loss_count),
                "best_loss": float(m.best_loss),
                "best_epoch": int(m.best_epoch),
                "bad_epochs": int(m.bad_epochs),
                "plateau_ref": float(m.plateau_ref),
                "wall_time": float(at.wall),
                "cpu_time": float(at.cpu),
                "train_loss": float(m.last_train),
                "val_loss": float(m.last_val),
            },
            "kind": "last",
        }

    def save_state(self, out: Path, members: list[Member], at: Clock) -> None:
        """Nothing beside ``last.pt``: it holds the whole training state (``last_extra``)."""

    def load(self, path: Path, members: list[Member]) -> Clock:
        """Continue from ``last.pt`` at ``path``: weights, optimiser, RNGs, data order and bookkeeping."""
        rec = members[0]
        ckpt = ckpt_io.read_last(path)
        done = int(ckpt["epoch"])
        if self.epochs is not None and self.epochs < done:
            raise VPIntegratorError(
                f"epochs {self.epochs} is less than the {done} epochs the run in {path.parent} has done; "
                f"epochs is the total: give at least {done} (resume never goes back)", key="epochs"
            )
        try:
            self.model.load_state_dict(ckpt["state_dict"])
            if self.lm is None:
                self.optimizer.load_state_dict(ckpt["optimizer"])
                self.scheduler.load_state_dict(ckpt["scheduler"])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise VPIntegratorError(
                f"checkpoint {path}: its weights or optimizer state do not match the run's model and optimizer in "
                f"{path.parent / 'config.toml'} ({first}); was last.pt replaced by another run's?"
            ) from None
        ckpt_io.set_rng_state(ckpt["rng"], self.device)
        self.epoch_start_state = ckpt["rng"]["data_epoch_start"]
        self.generator.set_state(self.epoch_start_state)
        if self.lm is not None:  # after the generator: LM saves its state as of the last iteration
            if "lambda" not in ckpt["optimizer"]:
                raise VPIntegratorError(f"{path}: no Levenberg–Marquardt state in it; not an optimizer = 'lm' run")
            self.lm.load_state_dict(ckpt["optimizer"])
        epoch = int(ckpt["epoch"])
        self.batch_in_epoch = int(ckpt["batch_in_epoch"])
        st = ckpt["train_state"]
        self.loss_sum, self.loss_count = float(st["loss_sum"]), int(st["loss_count"])
        rec.best_loss, rec.best_epoch = float(st["best_loss"]), int(st["best_epoch"])
        rec.bad_epochs = int(st["bad_epochs"])
        rec.plateau_ref = float(st.get("plateau_ref", rec.best_loss))  # a state from before the key: the best score
        rec.last_train, rec.last_val = float(st["train_loss"]), float(st["val_loss"])
        if rec.run_dir is not None:
            ckpt_io.check_inputs_unchanged(path, ckpt)
            rec.history = ckpt_io.read_log(rec.run_dir / "log.csv", max_epoch=epoch)
            if len(rec.history) < epoch:
                what = "is missing" if not (rec.run_dir / "log.csv").exists() else f"holds {len(rec.history)} epochs"
                raise VPIntegratorError(
                    f"resume {rec.run_dir}: log.csv {what}, but last.pt is at epoch {epoch}: the run's history "
                    "would restart mid-run; put the run's log.csv back, or train a new run", key="resume")
        # cpu_time NaN: a last.pt from before cpu_time was recorded
        return Clock(epoch, int(ckpt["step"]), float(st["wall_time"]), float(st.get("cpu_time", math.nan)))

    def summary_extra(self, m: Member) -> dict[str, Any]:
        """LM: how many times its damping restarted from ``lm_lambda`` at the cap (``lm_restarts``)."""
        return {} if self.lm is None else {"lm_restarts": self.lm.optimizer.restarts}

    def stuck(self) -> list[bool]:
        """Whether the model's Levenberg–Marquardt is stuck (its damping at the cap after its restarts)."""
        return [self.lm is not None and self.lm.optimizer.stuck]

    def member_record(self, m) -> dict[str, Any]:
        return self.record

    # -- the members' view -------------------------------------------------------------------------

    def member_state(self, k: int) -> dict[str, torch.Tensor]:
        return {name: v.detach().clone() for name, v in self.model.state_dict().items()}

    def member_model(self, k: int) -> torch.nn.Module:
        return self.model

    def train_mode(self) -> None:
        self.model.train()

    def freeze(self, k: int, state: dict[str, torch.Tensor] | None) -> None:
        """The one model stopped: the run ends with it (its files keep the weights it stopped with)."""

    def lr(self) -> float:
        """The learning rate now; for ``lm`` the damping λ (what log.csv's ``lr`` column holds)."""
        if isinstance(self.optimizer, LevenbergMarquardt):
            return self.optimizer.lam
        return float(self.optimizer.param_groups[0]["lr"])

    def lrs(self) -> list[float]:
        return [self.lr()]

    def finite_weights(self) -> list[bool]:
        """Whether every weight is finite (one host sync)."""
        flags = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()])
        return [bool(flags.all())]

    def val_losses(self, dataset=None) -> list[float]:
        """The reference loss over the whole validation set (or ``dataset``)."""
        dataset = self.val_set if dataset is None else dataset
        return [window_loss(self.objective, dataset, self.optim.batch_size, self.dist, self.squared)]

    def val_rollouts(self) -> list[float]:
        return [self.validator(self.model)]

    # -- one optimiser step -----------------------------------------------------------------------

    def _batch_loss(self, idx: torch.Tensor, stop_flag: float, save_flag: float = 0.0
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward pass: (loss to back-propagate, the batch's reference loss, ranks asking to stop / to save)."""
        empty = idx.numel() == 0
        if empty:  # a rank with nothing in a small last batch still joins DDP's gradient all-reduce
            idx = self._last_global_batch[:1]
        with label("vp/gather"):
            x, target = self.train_set.batch(idx)
        with label("vp/forward"):
            pred = self.net(x)
        num, den = squared_norm(pred - target), squared_norm(target)
        if empty:
            num, den = num * 0.0, den * 0.0
        if not self.dist.enabled:
            loss = num / den if self.squared else torch.sqrt(num / den)
            return loss, loss.detach(), torch.zeros(2)
        flags = torch.tensor([stop_flag, save_flag], dtype=num.dtype, device=num.device)
        stats = torch.cat([torch.stack([num.detach(), den.detach()]), flags])
        ddp.all_reduce(stats, self.dist)
        n, d = stats[0], stats[1]
        if self.squared:  # d(N/D) = dN / D: each rank's numerator over the global D (DDP averages)
            return num * (self.dist.world_size / d), n / d, stats[2:]
        return num * (self.dist.world_size / (2.0 * torch.sqrt(n * d))), torch.sqrt(n / d), stats[2:]

    def _window_loss(self, idx: torch.Tensor) -> torch.Tensor:
        """The reference loss of the windows ``idx`` (the fast step's body; one process)."""
        x, target = self.train_set.batch(idx)
        return relative_loss(self.objective(x), target) ** (2 if self.squared else 1)

    def _step(self, idx: torch.Tensor, asked: bool = False, save: bool = False) -> tuple[torch.Tensor, bool, bool]:
        """One optimiser step: (the batch's loss, stop now?, checkpoint now?) -- the last two agreed by all ranks
        (``asked``, ``save``: this rank's requests)."""
        flag, save_flag = (1.0 if asked else 0.0), (1.0 if save else 0.0)
        if isinstance(self.optimizer, torch.optim.LBFGS):
            holder: dict[str, torch.Tensor] = {}

            def closure() -> torch.Tensor:
                self.optimizer.zero_grad(set_to_none=True)
                loss, reported, stop = self._batch_loss(idx, flag, save_flag)
                with label("vp/backward"):
                    loss.backward()
                holder.setdefault("reported", reported)
                holder.setdefault("stop", stop)
                return reported

            self.optimizer.step(closure)
            reported, stop = holder["reported"], holder["stop"]
        elif self.fast is not None:
            with label("vp/fast_step"):
                reported = self.fast(idx)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            loss, reported, stop = self._batch_loss(idx, flag, save_flag)
            with label("vp/backward"):
                loss.backward()
            with label("vp/optimizer"):
                self.optimizer.step()
        if self.optim.schedule_per == "step":
            self.scheduler.step()
        if not self.dist.enabled:
            return reported, asked, save
        stop_now, save_now = (v > 0 for v in stop.tolist())
        return reported, stop_now, save_now

    # -- one epoch, as the loop asks (vpintegrator.training.strategy) --------------------------------

    def begin_epoch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The epoch's data order (replayed from its starting state when resumed mid-epoch): the running
        loss sum (1,), continued from a mid-epoch checkpoint's, and room for the per-step losses (S, 1)."""
        if self.batch_in_epoch == 0:
            self.epoch_start_state = self.generator.get_state()
            if self.lm is None:
                self.loss_sum, self.loss_count = 0.0, 0
        elif self.lm is None:  # resuming mid-epoch: replay this epoch's permutation from its starting state
            self.generator.set_state(self.epoch_start_state)
        if self.lm is None:
            self.order = self.sampler.epoch_order().to(self.device)
        # the running sum continues from a mid-epoch checkpoint's, so a resumed epoch sums exactly as one run
        acc = torch.tensor([self.loss_sum], dtype=torch.float64, device=self.device)
        losses = torch.zeros(self.steps_per_epoch, 1, dtype=torch.float64, device=self.device)
        return acc, losses

    def step(self, b: int, stop: bool, save: bool) -> tuple[torch.Tensor, tuple[bool, bool] | None]:
        """Batch ``b`` of the epoch's order (LM: one iteration on its subsample)."""
        if self.lm is not None:
            return torch.tensor(self.lm.step(), dtype=torch.float64), None
        bs = self.sampler.batch_size
        self._last_global_batch = self.order[b * bs : (b + 1) * bs]
        reported, stop_now, save_now = self._step(self.sampler.shard(self.order, b), stop, save)
        return reported, ((stop_now, save_now) if self.dist.enabled else None)

    def pause(self, acc: torch.Tensor, losses: torch.Tensor) -> None:
        if self.lm is None:
            self.loss_sum, self.loss_count = float(acc[0]), self.batch_in_epoch

    def end_epoch(self, acc: torch.Tensor, losses: torch.Tensor) -> list[float]:
        """[the mean batch loss] (LM: the full training loss after the epoch)."""
        if self.lm is not None:
            with label("vp/train_loss"):
                train_loss = self.val_losses(self.train_set)[0]  # LM: the full training loss
        else:
            self.loss_sum, self.loss_count = float(acc[0]), len(losses)  # the steps taken (a budget may cut it)
            if self.optim.schedule_per == "epoch":
                self.scheduler.step()
            train_loss = self.loss_sum / max(self.loss_count, 1)
        self.epoch_start_state = self.generator.get_state()
        return [train_loss]


# -- Multi-window (unrolled) training targets: the model iterated on its own predictions.
#
# With ``unroll = k`` the training objective of a window is the model's free rollout over ``k`` windows,
# compared with the data's next ``k·pred_window`` states, instead of one window from the true states. The
# loss then sees how a window's error propagates into the next ones (phase drift, drift of invariants),
# which the one-window loss barely constrains. ``k = 1`` is the plain one-window objective.


class Unrolled(nn.Module):
    """``model`` applied ``k`` times on its own output: (batch, seq_len, dim) → (batch, k·pred_window, dim).

    The input of iteration j + 1 is the last ``seq_len`` states of the input and the predictions so far
    (for pred_window = seq_len: the previous prediction, the non-overlapping windows of a rollout). The
    parameters are the model's own (``Unrolled(m, k).model is m``), so optimisers, ``torch.func`` and DDP
    see the same tensors.
    """

    #: set by __init__ (declared for type checkers)
    k: int
    dim: torch.Tensor | nn.Module
    seq_len: int
    pred_window: int

    def __init__(self, model: nn.Module, k: int) -> None:
        super().__init__()
        self.model = model
        self.k = int(k)
        sizes: Any = model  # integer attributes of the model (nn.Module types them as tensors or modules)
        self.dim = model.dim
        self.seq_len = int(sizes.seq_len)
        self.pred_window = self.k * int(sizes.pred_window)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = iterate_windows(self.model, x, self.k)  # the rollout core's window advance
        return outs[0] if self.k == 1 else torch.cat(outs, 1)


def unrolled(model: nn.Module, k: int) -> nn.Module:
    """``model`` itself for ``k = 1``, else ``Unrolled`` ``(model, k)``."""
    return model if int(k) == 1 else Unrolled(model, k)
