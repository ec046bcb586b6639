"""The model-agnostic trainer behind :func:`~vpintegrator.training.fit`.

One run: read the data (:func:`vpintegrator.data.windows.load_trajectories`), build the model (the
paper's hyper-parameters for keys the config leaves out), cut windows, and loop over epochs with a torch
optimiser or Levenberg–Marquardt, validating, logging and checkpointing (:mod:`.checkpoint`) after each.
Ctrl-C or SIGTERM finish the current optimiser step, save ``last.pt`` (mid-epoch, resumable exactly) and
raise :class:`TrainingInterrupted` (a ``KeyboardInterrupt``); a second signal aborts at once.

Under ``torchrun`` (``WORLD_SIZE > 1``) the model is wrapped in DistributedDataParallel and every rank
takes a contiguous slice of each global batch. The loss is a ratio of norms over the whole batch, so the
ranks all-reduce its numerator and denominator before the backward pass: each rank back-propagates
``W · N_r / (2 √(N D))`` (``N = Σ N_r``, ``D = Σ D_r``), whose DDP average is exactly the gradient of
``√(N / D)``. Only rank 0 writes files.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from .._version import __version__
from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from . import ddp
from .config import TrainConfig
from .fast_step import FastStep, fast_step_summary, portable_state, resolve_fast_step
from .optim import LevenbergMarquardt, LMSubsample, label, make_optimizer, make_scheduler, relative_loss
from .progress import progress_bar
from .guards import Diverged, StopRequest
from .record import RunRecord
from .results import EpochInfo, FitResult, TrainingInterrupted
from .unroll import unrolled
from .setup import check_windows_fit, load_data, new_model, resolve_config, window_sets
from .validation import window_loss

__all__ = ["Trainer"]


class Trainer:
    """One training run (one process of it under DDP). Built by :func:`fit`."""

    def __init__(self, config: TrainConfig, dist: ddp.DistInfo, device: torch.device, resume: Path | None,
                 callback: Callable[[EpochInfo], bool | None] | None, progress: bool) -> None:
        from ..data.windows import WindowBatchSampler

        self.config, self.callback, self.progress, self.resume_dir = config, callback, progress, resume
        self.dist, self.device = dist, device
        self.dtype = torch.float64 if config.dtype == "float64" else torch.float32

        data_paths, data = load_data(config)
        self.model, name = new_model(config, config.seed, data.dim, data_paths[0], device, self.dtype)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        seq_len, pred_window = int(self.model.seq_len), int(self.model.pred_window)
        check_windows_fit(name, seq_len, pred_window * config.unroll, data.n_states, data_paths[0])
        self.objective = unrolled(self.model, config.unroll)  # what the loss sees (the model for unroll = 1)
        self.resolved = resolve_config(config, data_paths, self.model, name)  # what config.toml records
        self.train_set, self.val_set, self.rollout_validator, self.data_info = window_sets(
            config, data, data_paths, seq_len, pred_window, device
        )
        self.log_columns = ckpt_io.log_columns(config)

        # data order: a generator of its own (same seed on every rank: same global permutation)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.sampler = WindowBatchSampler(
            len(self.train_set), config.batch_size, True, self.generator, self.dist.rank, self.dist.world_size
        )
        self.steps_per_epoch = len(self.sampler)

        self.lm: LMSubsample | None = None
        self.scheduler = None
        if config.optimizer == "lm":
            # an "epoch" of LM is lm_iters_per_epoch iterations; no lr schedule
            self.optimizer = LevenbergMarquardt(self.model.parameters(), lam=config.lm_lambda)
            self.lm = LMSubsample(self.optimizer, self.objective, self.train_set, self.generator, config.lm_windows,
                                  config.lm_resample_every, config.lm_check_windows)
            self.steps_per_epoch = int(config.lm_iters_per_epoch)
        else:
            self.optimizer = make_optimizer(
                config.optimizer, self.model.parameters(), config.lr, **config.optimizer_kwargs
            )
            decay_epochs = self.resolved.decay_epochs if self.resolved.decay_epochs is not None else 1.0
            horizon = decay_epochs * (self.steps_per_epoch if config.schedule_per == "step" else 1)
            self.scheduler = make_scheduler(config.scheduler, self.optimizer, config.lr_min / config.lr, horizon)

        # the fast step (a CUDA graph of the whole step) where it can run; made after a resume's state is loaded
        self.fast_mode = resolve_fast_step(config.fast_step, config.optimizer, device, dist.enabled)
        self.net = self.objective
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            self.net = DistributedDataParallel(self.objective, device_ids=ids)

        # training state
        self.epoch = self.step = self.batch_in_epoch = 0
        self.epoch_start_state = self.generator.get_state()
        self.loss_sum, self.loss_count = 0.0, 0
        self.wall_before = 0.0  # seconds spent by earlier invocations of this run
        # the best epoch, patience, history and log.csv (only rank 0 writes files)
        self.record = RunRecord(self.run_dir if self.dist.is_main else None, self.log_columns, config.min_delta)
        self.last_save = time.perf_counter()
        if resume is not None:
            self._load(resume / "last.pt")
        self.fast = None if self.fast_mode == "off" else FastStep(
            self.fast_mode, self._window_loss, self.optimizer, self.device, fallback=config.fast_step == "auto")

    # -- checkpoints -------------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path | None:
        return Path(self.resolved.out) if self.resolved.out is not None else None

    def _training_state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "batch_in_epoch": self.batch_in_epoch,
            "optimizer": self.lm.state_dict() if self.lm is not None else portable_state(self.optimizer.state_dict()),
            "scheduler": {} if self.scheduler is None else portable_state(self.scheduler.state_dict()),
            "rng": {**ckpt_io.rng_state(self.device), "data_epoch_start": self.epoch_start_state.clone()},
            "train_state": {
                "loss_sum": float(self.loss_sum),
                "loss_count": int(self.loss_count),
                "best_loss": float(self.record.best_loss),
                "best_epoch": int(self.record.best_epoch),
                "bad_epochs": int(self.record.bad_epochs),
                "wall_time": float(self._wall()),
                "train_loss": float(self.record.last_train),
                "val_loss": float(self.record.last_val),
            },
        }

    def _load(self, path: Path) -> None:
        ckpt = ckpt_io.read_last(path)
        done = int(ckpt["epoch"])
        if self.config.epochs is not None and self.config.epochs < done:
            raise VPIntegratorError(
                f"epochs {self.config.epochs} is less than the {done} epochs the run in {path.parent} has done; "
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
        self.epoch, self.step = int(ckpt["epoch"]), int(ckpt["step"])
        self.batch_in_epoch = int(ckpt["batch_in_epoch"])
        st = ckpt["train_state"]
        self.loss_sum, self.loss_count = float(st["loss_sum"]), int(st["loss_count"])
        self.record.best_loss, self.record.best_epoch = float(st["best_loss"]), int(st["best_epoch"])
        self.record.bad_epochs, self.wall_before = int(st["bad_epochs"]), float(st["wall_time"])
        self.record.last_train, self.record.last_val = float(st["train_loss"]), float(st["val_loss"])
        if self.run_dir is not None:
            self.record.history = ckpt_io.read_log(self.run_dir / "log.csv", max_epoch=self.epoch)

    def _check_weights(self) -> None:
        """Raise :class:`Diverged` if any weight is NaN/Inf (one host sync; before every checkpoint)."""
        flags = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()])
        if not bool(flags.all()):
            raise Diverged("weights are", math.nan, self.epoch + (1 if self.batch_in_epoch else 0), self.step)

    def _check_losses(self, losses: torch.Tensor, step0: int) -> None:
        """``losses`` are this epoch's per-step losses from step ``step0 + 1`` on (read only when their sum is
        not finite): raise :class:`Diverged` naming the first non-finite one."""
        bad = (~torch.isfinite(losses)).nonzero()
        if len(bad):
            k = int(bad[0, 0])
            raise Diverged("loss is", float(losses[k]), self.epoch + 1, step0 + k + 1)

    def _checkpoint_due(self) -> bool:
        """Time for a checkpoint by wall time (rank 0 decides; DDP carries the decision to every rank)."""
        return (self.dist.is_main and self.run_dir is not None
                and time.perf_counter() - self.last_save >= self.config.checkpoint_seconds)

    def _save(self) -> None:
        self.last_save = time.perf_counter()
        if not self.dist.is_main or self.run_dir is None:
            return
        from ..models import save_model

        run = self.run_dir
        self.record.save_best(self.model)
        save_model(self.model, run / "last.pt", extra={**self._training_state(), "kind": "last"}, overwrite=True)
        self._write_summary()

    def _write_summary(self, stopped: str = "running", extra: dict[str, Any] | None = None) -> None:
        if not self.dist.is_main or self.run_dir is None:
            return
        ckpt_io.write_json(self.run_dir / "summary.json", {**self._summary(stopped), **(extra or {})})

    def _summary(self, stopped: str) -> dict[str, Any]:
        return ({
            "model": self.resolved.model.get("name"),
            "n_params": int(self.n_params),
            "epochs": int(self.epoch),
            "steps": int(self.step),
            "steps_per_epoch": int(self.steps_per_epoch),
            "train_loss": ckpt_io.json_float(self.record.last_train),
            "val_loss": ckpt_io.json_float(self.record.last_val),
            "best_loss": ckpt_io.json_float(self.record.best_loss),
            "best_epoch": int(self.record.best_epoch),
            "monitor": self.config.monitor if self.val_set is not None else "train_loss",
            "lr": self._lr(),
            "wall_time": round(self._wall(), 3),
            "stopped": stopped,
            "device": str(self.device),
            "fast_step": self.fast_mode,
            **fast_step_summary(self.fast),
            "dtype": self.resolved.dtype,
            "world_size": self.dist.world_size,
            "data": self.data_info,
            "vpintegrator_version": __version__,
            "torch_version": torch.__version__,
        })

    def _lr(self) -> float:
        """The learning rate now; for ``lm`` the damping λ (what log.csv's ``lr`` column holds)."""
        return self.optimizer.lam if self.lm is not None else float(self.optimizer.param_groups[0]["lr"])

    def _wall(self) -> float:
        return self.wall_before + (time.perf_counter() - self.t_start)

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
        num = (pred - target).square().sum()
        den = target.square().sum()
        if empty:
            num, den = num * 0.0, den * 0.0
        if not self.dist.enabled:
            loss = torch.sqrt(num / den)
            return loss, loss.detach(), torch.zeros(2)
        flags = torch.tensor([stop_flag, save_flag], dtype=num.dtype, device=num.device)
        stats = torch.cat([torch.stack([num.detach(), den.detach()]), flags])
        ddp.all_reduce(stats, self.dist)
        n, d = stats[0], stats[1]
        local = num * (self.dist.world_size / (2.0 * torch.sqrt(n * d)))
        return local, torch.sqrt(n / d), stats[2:]

    def _window_loss(self, idx: torch.Tensor) -> torch.Tensor:
        """The reference loss of the windows ``idx`` (the fast step's body; one process)."""
        x, target = self.train_set.batch(idx)
        return relative_loss(self.objective(x), target)

    def _step(self, idx: torch.Tensor, save: bool = False) -> tuple[torch.Tensor, bool, bool]:
        """One optimiser step: (the batch's loss, stop now?, checkpoint now?) -- the last two agreed by all ranks."""
        flag = 1.0 if self.stop.requested else 0.0
        save_flag = 1.0 if save else 0.0
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
        if self.config.schedule_per == "step":
            self.scheduler.step()
        self.step += 1
        if not self.dist.enabled:
            return reported, self.stop.requested, save
        stop_now, save_now = (v > 0 for v in stop.tolist())
        return reported, stop_now, save_now

    def _validate(self, dataset=None) -> float:
        """The reference loss over the whole validation set (or ``dataset``)."""
        dataset = self.val_set if dataset is None else dataset
        return window_loss(self.objective, dataset, self.config.batch_size, self.dist)

    # -- the loop ----------------------------------------------------------------------------------

    def _epochs_left(self) -> int | None:
        return None if self.config.epochs is None else max(self.config.epochs - self.epoch, 0)

    def run(self) -> FitResult:
        self.t_start = time.perf_counter()
        run = self.run_dir
        if self.dist.is_main and run is not None:
            run.mkdir(parents=True, exist_ok=True)
            from .._io import remove_orphans

            for name in ("config.toml", "log.csv", "summary.json", "last.pt", "best.pt"):
                remove_orphans(run / name)  # temporary files of a killed earlier invocation
            ckpt_io.write_text(run / "config.toml", self.resolved.to_toml())
            self.record.start_log()  # the rows up to the checkpoint; epochs are appended from here
        stopped = "epochs"
        show = self.progress and self.dist.is_main
        try:
            with StopRequest() as self.stop, progress_bar(show, self._epochs_left(), self.config.time_limit) as bar:
                stopped = self._loop(bar)
        except Diverged as err:
            self._diverged(err)
        self._write_summary(stopped)
        result = self._result(stopped)
        if stopped == "interrupted":
            where = f"; saved {run / 'last.pt'}, resume from {run}" if run else ""
            raise TrainingInterrupted(
                f"training interrupted at epoch {self.epoch} (+{self.batch_in_epoch} batches){where}", result
            )
        return result

    def _diverged(self, err: Diverged) -> None:
        """Stop on a non-finite loss: keep every file finite (the last finite best.pt stays, last.pt is not
        written), say so in summary.json, and raise the one-line error."""
        if self.dist.is_main and self.run_dir is not None:
            rec = self.record
            if rec.best_state is not None and all(
                bool(torch.isfinite(v).all()) for v in rec.best_state.values() if v.is_floating_point()
            ) and math.isfinite(rec.best_loss):
                rec.save_best(self.model)
            summary = self.record.finite_summary or {**self._summary("diverged"), "epochs": 0, "train_loss": None,
                                               "val_loss": None}
            ckpt_io.write_json(self.run_dir / "summary.json", {
                **summary, "stopped": "diverged",
                "diverged": {"what": err.what.split()[0], "value": err.value_text, "epoch": err.epoch, "step": err.step},
            })
        cfg = self.config
        if self.lm is not None:
            hint, key = f"raise lm_lambda (now {cfg.lm_lambda:g}) or check the data", "lm_lambda"
        else:
            hint, key = f'lower lr (now {cfg.lr:g}) or use optimizer = "lm"', "lr"
        raise VPIntegratorError(
            f"training diverged: {err.what} {err.value_text} at epoch {err.epoch}, step {err.step}; {hint}", key=key
        ) from None

    def _torch_epoch(self) -> float | None:
        """One epoch of a torch optimiser: its mean batch loss, or None if interrupted mid-epoch."""
        if self.batch_in_epoch == 0:
            self.epoch_start_state = self.generator.get_state()
            self.loss_sum, self.loss_count = 0.0, 0
        else:  # resuming mid-epoch: replay this epoch's permutation from its starting state
            self.generator.set_state(self.epoch_start_state)
        order = self.sampler.epoch_order().to(self.device)
        # the running sum continues from a mid-epoch checkpoint's, so a resumed epoch sums exactly as one run
        loss_acc = torch.tensor(self.loss_sum, dtype=torch.float64, device=self.device)
        first, count0, step0 = self.batch_in_epoch, self.loss_count, self.step
        losses = torch.empty(self.steps_per_epoch - first, dtype=torch.float64, device=self.device)
        for b in range(first, self.steps_per_epoch):
            bs = self.sampler.batch_size
            self._last_global_batch = order[b * bs : (b + 1) * bs]
            reported, stop_now, save_now = self._step(self.sampler.shard(order, b), self._checkpoint_due())
            losses[b - first] = reported
            loss_acc += reported.double()
            self.batch_in_epoch = b + 1
            self.loss_count = count0 + (b + 1 - first)
            if (stop_now or save_now) and self.batch_in_epoch < self.steps_per_epoch:
                self.loss_sum = float(loss_acc)  # a host sync only when checkpointing mid-epoch
                if not math.isfinite(self.loss_sum):
                    self._check_losses(losses[: b + 1 - first], step0)
                self._check_weights()
                self._save()
                if stop_now:
                    return None
        self.loss_sum = float(loss_acc)  # the epoch's one host sync of the loss
        if not math.isfinite(self.loss_sum):
            self._check_losses(losses, step0)
        if self.config.schedule_per == "epoch":
            self.scheduler.step()
        self.epoch += 1
        self.batch_in_epoch = 0
        return self.loss_sum / max(self.loss_count, 1)

    def _lm_epoch(self) -> float | None:
        """One epoch of LM iterations: the full training loss after it, or None if interrupted."""
        if self.batch_in_epoch == 0:
            self.epoch_start_state = self.generator.get_state()
        for b in range(self.batch_in_epoch, self.steps_per_epoch):
            loss = float(self.lm.step())
            self.step += 1
            if not math.isfinite(loss):
                raise Diverged("loss is", loss, self.epoch + 1, self.step)
            self.batch_in_epoch = b + 1
            if (self.stop.requested or self._checkpoint_due()) and self.batch_in_epoch < self.steps_per_epoch:
                self._check_weights()
                self._save()
                if self.stop.requested:
                    return None
        with label("vp/train_loss"):
            train_loss = self._validate(self.train_set)  # LM: the full training loss
        if not math.isfinite(train_loss):
            raise Diverged("training loss is", train_loss, self.epoch + 1, self.step)
        self.epoch += 1
        self.batch_in_epoch = 0
        return train_loss

    def _loop(self, bar) -> str:
        cfg = self.config
        invocation_start = time.perf_counter()
        self.model.train()
        while self._epochs_left() is None or self._epochs_left() > 0:
            t_epoch = time.perf_counter()
            train_loss = self._lm_epoch() if self.lm is not None else self._torch_epoch()
            if train_loss is None:
                return "interrupted"
            with label("vp/validate"):
                val_loss = self._validate()
            if self.val_set is not None and not math.isfinite(val_loss):
                self.epoch -= 1  # the epoch is not accepted
                raise Diverged("validation loss is", val_loss, self.epoch + 1, self.step)
            self._check_weights()
            self.record.last_train, self.record.last_val = train_loss, val_loss
            monitor = val_loss if self.val_set is not None else train_loss
            val_rollout = math.nan
            if self.rollout_validator is not None:
                with label("vp/validate_rollout"):
                    val_rollout = monitor = self.rollout_validator(self.model)
            self.record.judge(self.epoch, monitor,
                              lambda: {k: v.detach().clone() for k, v in self.model.state_dict().items()})
            lr = self._lr()
            row = {"epoch": self.epoch, "train_loss": train_loss, "val_loss": val_loss, "lr": lr,
                   "seconds": self._wall()}
            if self.rollout_validator is not None:
                row[ckpt_io.ROLLOUT_COLUMN] = val_rollout
            self.record.log(row)
            self.epoch_start_state = self.generator.get_state()
            self.record.finite_summary = self._summary("diverged")
            info = EpochInfo(self.epoch, self.step, train_loss, val_loss, lr, row["seconds"])
            if bar is not None:
                bar(info, time.perf_counter() - invocation_start)
            # stop conditions, agreed on by every rank
            last_epoch_seconds = time.perf_counter() - t_epoch
            elapsed = time.perf_counter() - invocation_start
            flags = torch.tensor(
                [
                    float(self.stop.requested),
                    float(cfg.time_limit is not None and elapsed + last_epoch_seconds > cfg.time_limit),
                    float(bool(self.callback(info)) if self.callback is not None else False),
                ],
                dtype=torch.float64,
                device=self.device,
            )
            ddp.all_reduce(flags, self.dist, op="max")
            finished = self._epochs_left() == 0
            reason = None
            if flags[0] > 0:
                reason = "interrupted" if not finished else "epochs"
            elif finished:
                reason = "epochs"
            elif cfg.patience > 0 and self.record.bad_epochs >= cfg.patience:
                reason = "early_stopping"
            elif flags[2] > 0:
                reason = "callback"
            elif flags[1] > 0:
                reason = "time_limit"
            if reason is not None or self.epoch % cfg.checkpoint_every == 0 or self._checkpoint_due():
                with label("vp/checkpoint"):
                    self._save()
            if reason is not None:
                return reason
        self._save()
        return "epochs"

    def _result(self, stopped: str) -> FitResult:
        return FitResult(
            run_dir=self.run_dir, model=self.model, epochs=self.epoch, steps=self.step,
            train_loss=float(self.record.last_train), val_loss=float(self.record.last_val),
            best_loss=float(self.record.best_loss), best_epoch=int(self.record.best_epoch), wall_time=self._wall(),
            n_params=int(self.n_params), device=str(self.device), dtype=self.resolved.dtype, stopped=stopped,
            history=list(self.record.history),
        )
