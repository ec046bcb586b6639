"""Seed ensembles in one process: N independently initialised members trained at once (``ensemble = N`` or
``seeds = [...]``; ``vp-train --ensemble N``; ``fit(..., ensemble=N)``).

The members' parameters are stacked (:func:`torch.func.stack_module_state`) and the model is evaluated
for all of them by ``vmap`` over :func:`torch.func.functional_call`: one forward, one backward and one
optimiser step per batch for the whole ensemble. Each member ``k`` has

* its own initialisation: the global RNGs seeded with ``s_k`` before the model is built, as
  :func:`~vpintegrator.training.fit` does with ``seed = s_k``;
* its own data order: a ``torch.Generator`` seeded with ``s_k`` draws its permutation each epoch (the
  generator :func:`fit` uses), so member ``k`` sees its batches in the order ``fit(seed=s_k)`` does;
* its own loss ``‖pred_k − target_k‖_F / ‖target_k‖_F`` over its batch; the ensemble back-propagates the
  *sum* of the members' losses, so the gradient of member ``k``'s slice of the stacked parameters is
  exactly the gradient of its own loss;
* its own optimiser state: one torch optimiser over the stacked parameters, which for the elementwise
  optimisers (Adam, AdamW, SGD, RMSprop) is the same arithmetic per element as N separate ones. The
  learning-rate schedule is shared (the members take the same number of steps).

The train/validation split is ``seed``'s for every member (the members are compared on the same
validation data). A member whose seed equals ``seed`` -- or any member with ``val_fraction = 0`` -- is
therefore the run ``fit(seed=s_k)`` would give, up to floating-point reassociation of the batched matrix
products (tests/test_ensemble.py: ~1e-15 in float64).

Per epoch every member's training loss, validation loss and (``monitor = "val_rollout"``) validation
rollout score are computed (the latter two vmapped as well) and logged in the member's own run directory
``out/member_<k>_seed_<s>/`` (config.toml, log.csv, summary.json, best.pt, last.pt: a normal run
directory, loadable with :func:`vpintegrator.load_model`). A member whose loss turns non-finite is marked
diverged (its files keep the last finite state) and the others go on; with ``patience`` a member stops
(its files freeze) when it alone would have, and the ensemble stops when every member has. At the end
``out/ensemble.csv`` and ``out/ensemble.md`` tabulate the members, and the member with the best validation
score (the monitor: validation loss or rollout score; validation data only) is named in
``out/selected.json`` and linked as ``out/best`` (a copy where links are not possible).

Not supported, refused with one line: ``optimizer = "lm"`` and ``"lbfgs"`` (not elementwise), torchrun,
and resuming (an ensemble's member directories are not resumable; train again).
"""

from __future__ import annotations

import copy
import csv
import io
import math
import os
import shutil
import time

from pathlib import Path
from typing import Any, Callable

import torch

from .._version import __version__
from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from ..rollout.core import iterate_windows
from .config import TrainConfig
from .fast_step import FastStep, fast_step_summary, resolve_fast_step
from .guards import StopRequest
from .optim import label, make_optimizer, make_scheduler
from .record import RunRecord
from .results import (  # noqa: F401 (is_ensemble_dir, member_dir_name re-exported)
    TABLE_COLUMNS, EnsembleResult, EpochInfo, FitResult, TrainingInterrupted, is_ensemble_dir, member_dir_name,
)
from .setup import check_windows_fit, load_data, new_model, resolve_config, window_sets

__all__ = ["EnsembleResult", "EnsembleTrainer", "member_dir_name", "is_ensemble_dir"]

class _Member(RunRecord):
    """One member: a run's bookkeeping (:class:`~vpintegrator.training.record.RunRecord`, what
    :class:`Trainer` keeps for its one model) plus the member's seed, data order and state."""

    def __init__(self, k: int, seed: int, model: torch.nn.Module, run_dir: Path | None,
                 log_columns: tuple[str, ...], min_delta: float) -> None:
        super().__init__(run_dir, log_columns, min_delta)
        self.k, self.seed, self.model = k, seed, model
        self.generator = torch.Generator().manual_seed(seed)
        self.active = True
        self.stopped = "running"
        self.epoch = self.step = 0
        self.diverged: dict[str, Any] | None = None
        self.frozen: dict[str, torch.Tensor] | None = None  # the weights when it stopped (inactive members)


class EnsembleTrainer:
    """Train the members of an ensemble together (see the module docstring). Built by :func:`fit`."""

    def __init__(self, config: TrainConfig, device: torch.device,
                 callback: Callable[[list[EpochInfo]], bool | None] | None, progress: bool) -> None:
        from torch.func import stack_module_state


        self.config, self.callback, self.progress, self.device = config, callback, progress, device
        self.dtype = torch.float64 if config.dtype == "float64" else torch.float32
        self.seeds = config.ensemble_seeds()
        n = len(self.seeds)

        data_paths, data = load_data(config)
        models = []
        for s in self.seeds:  # the initialisation fit(seed=s) draws
            model, name = new_model(config, s, data.dim, data_paths[0], device, self.dtype)
            models.append(model)
        ckpt_io.seed_everything(config.seed)
        self.name = name
        self.n_params = sum(p.numel() for p in models[0].parameters())
        seq_len, pred_window = int(models[0].seq_len), int(models[0].pred_window)
        check_windows_fit(name, seq_len, pred_window, data.n_states, data_paths[0])
        self.resolved = resolve_config(config, data_paths, models[0], name, seeds=list(self.seeds), ensemble=n)
        self.train_set, self.val_set, self.rollout_validator, self.data_info = window_sets(
            config, data, data_paths, seq_len, pred_window, device
        )
        self.log_columns = ckpt_io.log_columns(config)
        self.n_windows = len(self.train_set)
        self.batch_size = int(config.batch_size)
        self.steps_per_epoch = -(-self.n_windows // self.batch_size)

        # stacked parameters: one leaf tensor (N, *shape) per parameter; buffers shared when equal
        self.template = copy.deepcopy(models[0])
        params, buffers = stack_module_state(models)
        self.params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        own = dict(models[0].named_buffers())
        shared = all(torch.equal(dict(m.named_buffers())[k], own[k]) for m in models[1:] for k in own)
        self.buffers = {k: v.clone() for k, v in own.items()} if shared else buffers
        self.buffer_dim = None if shared else 0
        out = Path(self.resolved.out) if self.resolved.out is not None else None
        self.out = out
        self.members = [
            _Member(k, s, m, None if out is None else out / member_dir_name(k, s), self.log_columns,
                    config.min_delta)
            for k, (s, m) in enumerate(zip(self.seeds, models))
        ]
        self.optimizer = make_optimizer(config.optimizer, list(self.params.values()), config.lr,
                                        **config.optimizer_kwargs)
        decay_epochs = self.resolved.decay_epochs if self.resolved.decay_epochs is not None else 1.0
        horizon = decay_epochs * (self.steps_per_epoch if config.schedule_per == "step" else 1)
        self.scheduler = make_scheduler(config.scheduler, self.optimizer, config.lr_min / config.lr, horizon)
        # the whole vmapped step as one CUDA graph where it can run (fast_step "auto"/"graph")
        self.fast_mode = resolve_fast_step(config.fast_step, config.optimizer, device, False)
        self.fast = None if self.fast_mode == "off" else FastStep(
            self.fast_mode, self._batch_losses, self.optimizer, device, fallback=config.fast_step == "auto")
        self.epoch = self.step = 0

    # -- the vmapped model ------------------------------------------------------------------------

    def _forward(self, x: torch.Tensor, shared_input: bool = False) -> torch.Tensor:
        """All members on ``x`` (N, B, ...) -- or on one (B, ...) for all with ``shared_input``: (N, B, ...)."""
        from torch.func import functional_call, vmap

        template = self.template

        def one(p, b, xx):
            return functional_call(template, (p, b), (xx,))

        return vmap(one, in_dims=(0, self.buffer_dim, None if shared_input else 0))(self.params, self.buffers, x)

    def _member_state(self, k: int) -> dict[str, torch.Tensor]:
        if self.members[k].frozen is not None:
            return {name: t.clone() for name, t in self.members[k].frozen.items()}
        out = {}
        for name, t in self.members[k].model.state_dict().items():
            if name in self.params:
                out[name] = self.params[name][k].detach().clone()
            elif self.buffer_dim == 0 and name in self.buffers:
                out[name] = self.buffers[name][k].clone()
            else:
                out[name] = t.detach().clone()
        return out

    def _sync_member(self, k: int) -> torch.nn.Module:
        """Member ``k``'s module with its current weights."""
        model = self.members[k].model
        model.load_state_dict(self._member_state(k))
        return model

    # -- one step, one epoch, validation -------------------------------------------------------------

    def _batch_losses(self, idx: torch.Tensor) -> torch.Tensor:
        """Every member's reference loss on its batch ``idx`` (N, B): (N,)."""
        n, b = idx.shape
        with label("vp/gather"):
            x, target = self.train_set.batch(idx.reshape(-1))
            x = x.reshape(n, b, *x.shape[1:])
            target = target.reshape(n, b, *target.shape[1:])
        with label("vp/forward"):
            pred = self._forward(x)
        num = (pred - target).square().reshape(n, -1).sum(1)
        den = target.square().reshape(n, -1).sum(1)
        return torch.sqrt(num / den)

    def _step(self, idx: torch.Tensor) -> torch.Tensor:
        """One optimiser step of every member on its batch ``idx`` (N, B): the members' losses (N,)."""
        if self.fast is not None:
            with label("vp/fast_step"):
                losses = self.fast(idx)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            losses = self._batch_losses(idx)
            with label("vp/backward"):
                losses.sum().backward()  # member k's slice gets exactly the gradient of its own loss
            with label("vp/optimizer"):
                self.optimizer.step()
        if self.config.schedule_per == "step":
            self.scheduler.step()
        self.step += 1
        return losses.detach()

    def _epoch(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """One epoch: (mean batch loss per member (N,), per-step losses (steps, N)); None if interrupted."""
        orders = torch.stack([torch.randperm(self.n_windows, generator=m.generator)
                              for m in self.members]).to(self.device)
        n = len(self.members)
        loss_acc = torch.zeros(n, dtype=torch.float64, device=self.device)
        losses = torch.empty(self.steps_per_epoch, n, dtype=torch.float64, device=self.device)
        bs = self.batch_size
        for b in range(self.steps_per_epoch):
            reported = self._step(orders[:, b * bs : (b + 1) * bs])
            losses[b] = reported
            loss_acc += reported.double()
            if self.stop.requested and b + 1 < self.steps_per_epoch:
                return None
        if self.config.schedule_per == "epoch":
            self.scheduler.step()
        self.epoch += 1
        return loss_acc / self.steps_per_epoch, losses

    @torch.no_grad()
    def _val_losses(self) -> list[float]:
        """Every member's reference loss over the whole validation set (NaN without one)."""
        n = len(self.members)
        if self.val_set is None:
            return [math.nan] * n
        self.template.eval()
        num = torch.zeros(n, dtype=torch.float64, device=self.device)
        den = torch.zeros((), dtype=torch.float64, device=self.device)
        order = torch.arange(len(self.val_set), device=self.device)
        bs = self.batch_size
        for b in range(-(-len(self.val_set) // bs)):
            x, target = self.val_set.batch(order[b * bs : (b + 1) * bs])
            pred = self._forward(x, shared_input=True)
            num += (pred - target).square().reshape(n, -1).sum(1).double()
            den += target.square().sum().double()
        self.template.train()
        return torch.sqrt(num / den).tolist()

    @torch.no_grad()
    def _val_rollouts(self) -> list[float]:
        """Every member's validation rollout score (:class:`RolloutValidator`'s, vmapped over the members)."""
        v = self.rollout_validator
        ref = v._ref(next(iter(self.params.values())))
        n = len(self.members)
        T, P, total = v.seq_len, v.pred_window, ref.shape[1]
        self.template.eval()
        x = ref[:, :T].expand(n, *ref[:, :T].shape)  # (N, n_traj, T, dim): every member from the same windows
        parts = iterate_windows(self._forward, x, -(-(total - T) // P))  # the rollout core's advance
        self.template.train()
        pred = torch.cat(parts, 2)[:, :, : total - T].double()
        target = ref[:, T:].double()
        err = torch.linalg.vector_norm(pred - target, dim=-1) / torch.linalg.vector_norm(target, dim=-1)
        err = torch.nan_to_num(err, nan=v.CAP, posinf=v.CAP).clamp(max=v.CAP)
        return err.reshape(n, -1).mean(1).tolist()

    # -- files --------------------------------------------------------------------------------------

    def _wall(self) -> float:
        return time.perf_counter() - self.t_start

    def _lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _member_config(self, m: _Member) -> TrainConfig:
        cfg = self.resolved.replace(seed=m.seed, out=None if m.run_dir is None else str(m.run_dir))
        cfg.ensemble = cfg.seeds = None  # the member's own config: a single run with its seed
        return cfg

    def _summary(self, m: _Member, stopped: str) -> dict[str, Any]:
        return {
            "model": self.name, "n_params": int(self.n_params), "epochs": int(m.epoch), "steps": int(m.step),
            "steps_per_epoch": int(self.steps_per_epoch), "train_loss": ckpt_io.json_float(m.last_train),
            "val_loss": ckpt_io.json_float(m.last_val), "best_loss": ckpt_io.json_float(m.best_loss),
            "best_epoch": int(m.best_epoch),
            "monitor": self.config.monitor if self.val_set is not None else "train_loss",
            "lr": self._lr(), "wall_time": round(self._wall(), 3), "stopped": stopped, "device": str(self.device),
            "fast_step": self.fast_mode, **fast_step_summary(self.fast),
            "dtype": self.resolved.dtype, "world_size": 1, "data": self.data_info,
            "vpintegrator_version": __version__, "torch_version": torch.__version__,
            "ensemble": {"member": m.k, "seed": m.seed, "n_members": len(self.members),
                         "seeds": list(self.seeds), "split_seed": int(self.config.seed)},
        }

    def _save_member(self, m: _Member, final: str | None = None) -> None:
        """Write member ``m``'s best.pt (when it changed), last.pt and summary.json."""
        if m.run_dir is None:
            return
        from ..models import save_model

        m.save_best(m.model)
        if m.diverged is None:  # a diverged member keeps its last finite last.pt
            self._sync_member(m.k)
            save_model(m.model, m.run_dir / "last.pt", overwrite=True, extra={
                "kind": "last", "epoch": int(m.epoch), "step": int(m.step),
                "ensemble": {"member": m.k, "seed": m.seed, "n_members": len(self.members)},
            })
        summary = self._summary(m, final or m.stopped)
        if m.diverged is not None:
            summary = {**(m.finite_summary or {**summary, "epochs": 0, "train_loss": None, "val_loss": None}),
                       "stopped": "diverged", "diverged": m.diverged}
        ckpt_io.write_json(m.run_dir / "summary.json", summary)

    def _start_files(self) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        ckpt_io.write_text(self.out / "config.toml", self.resolved.to_toml())
        for m in self.members:
            m.run_dir.mkdir(parents=True, exist_ok=True)
            ckpt_io.write_text(m.run_dir / "config.toml", self._member_config(m).to_toml())
            m.start_log()

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> "EnsembleResult":
        self.t_start = time.perf_counter()
        self._start_files()
        stopped = "epochs"
        from .progress import progress_bar

        with StopRequest() as self.stop, progress_bar(self.progress, self.config.epochs,
                                                        self.config.time_limit) as bar:
            stopped = self._loop(bar)
        for m in self.members:
            if m.active:  # the others were written when they stopped
                m.stopped = stopped
                self._save_member(m)
        result = self._finish(stopped)
        if stopped == "interrupted":
            where = f"; the member directories in {self.out} hold last.pt and best.pt" if self.out else ""
            raise TrainingInterrupted(
                f"ensemble training interrupted at epoch {self.epoch} (an ensemble cannot be resumed){where}",
                result._ref(),
            )
        if all(m.diverged is not None for m in self.members):
            d = self.members[0].diverged
            raise VPIntegratorError(
                f"training diverged: every member of the ensemble has a non-finite loss (member 0 at epoch "
                f"{d['epoch']}, step {d['step']}); lower lr (now {self.config.lr:g})", key="lr"
            )
        return result

    def _loop(self, bar) -> str:
        cfg = self.config
        invocation_start = time.perf_counter()
        self.template.train()
        while cfg.epochs is None or self.epoch < cfg.epochs:
            t_epoch = time.perf_counter()
            step0 = self.step
            out = self._epoch()
            if out is None:
                return "interrupted"
            train_losses, step_losses = out
            train = train_losses.tolist()  # the epoch's host sync of the losses
            with label("vp/validate"):
                vals = self._val_losses()
            rollouts = [math.nan] * len(self.members)
            if self.rollout_validator is not None:
                with label("vp/validate_rollout"):
                    rollouts = self._val_rollouts()
            finite_w = [all(bool(torch.isfinite(p[k]).all()) for p in self.params.values())
                        for k in range(len(self.members))]
            lr, seconds = self._lr(), self._wall()
            infos = []
            for m in self.members:
                if not m.active:
                    continue
                k = m.k
                m.epoch, m.step = self.epoch, self.step
                bad = None
                if not math.isfinite(train[k]):
                    col = step_losses[:, k]
                    first = int((~torch.isfinite(col)).nonzero()[0, 0])
                    bad = ("loss", float(col[first]), self.epoch, step0 + first + 1)
                elif self.val_set is not None and not math.isfinite(vals[k]):
                    bad = ("validation", vals[k], self.epoch, self.step)
                elif not finite_w[k]:
                    bad = ("weights", math.nan, self.epoch, self.step)
                if bad is not None:
                    what, value, ep, st = bad
                    m.active, m.stopped = False, "diverged"
                    m.diverged = {"what": what, "value": "nan" if math.isnan(value) else
                                  ("inf" if value > 0 else "-inf"), "epoch": ep, "step": st}
                    m.epoch, m.step = self.epoch - 1, step0
                    if m.best_state is not None:
                        m.frozen = m.best_state
                    self._save_member(m)
                    continue
                m.last_train, m.last_val = train[k], vals[k]
                monitor = vals[k] if self.val_set is not None else train[k]
                if self.rollout_validator is not None:
                    monitor = rollouts[k]
                m.judge(self.epoch, monitor, lambda: self._member_state(k))
                row = {"epoch": self.epoch, "train_loss": train[k], "val_loss": vals[k], "lr": lr,
                       "seconds": seconds}
                if self.rollout_validator is not None:
                    row[ckpt_io.ROLLOUT_COLUMN] = rollouts[k]
                m.log(row)
                m.finite_summary = self._summary(m, "diverged")
                infos.append(EpochInfo(self.epoch, self.step, train[k], vals[k], lr, seconds))
                if cfg.patience > 0 and m.bad_epochs >= cfg.patience:
                    m.active, m.stopped = False, "early_stopping"
                    self._save_member(m)
                    m.frozen = self._member_state(k)
            if bar is not None and infos:
                best = min(infos, key=lambda i: i.train_loss)
                bar(best, time.perf_counter() - invocation_start)
            if not any(m.active for m in self.members):
                return "early_stopping" if any(m.stopped == "early_stopping" for m in self.members) else "diverged"
            elapsed = time.perf_counter() - invocation_start
            finished = cfg.epochs is not None and self.epoch >= cfg.epochs
            reason = None
            if self.stop.requested:
                reason = "epochs" if finished else "interrupted"
            elif finished:
                reason = "epochs"
            elif self.callback is not None and self.callback(infos):
                reason = "callback"
            elif cfg.time_limit is not None and elapsed + (time.perf_counter() - t_epoch) > cfg.time_limit:
                reason = "time_limit"
            if reason is not None:
                return reason
            if self.epoch % cfg.checkpoint_every == 0:
                with label("vp/checkpoint"):
                    for m in self.members:
                        if m.active:
                            self._save_member(m)
        return "epochs"

    # -- the table and the selection ------------------------------------------------------------------

    def _finish(self, stopped: str) -> EnsembleResult:
        candidates = [m for m in self.members
                      if m.diverged is None and m.best_epoch > 0 and math.isfinite(m.best_loss)]
        selected = None
        if self.val_set is not None and candidates:  # validation data only
            selected = min(candidates, key=lambda m: (m.best_loss, m.k)).k
        monitor = self.config.monitor if self.val_set is not None else "train_loss"
        table = []
        for m in self.members:
            table.append({
                "member": m.k, "seed": m.seed, "best_epoch": m.best_epoch,
                "best_score": ckpt_io.json_float(m.best_loss), "train_loss": ckpt_io.json_float(m.last_train),
                "val_loss": ckpt_io.json_float(m.last_val), "stopped": m.stopped, "selected": m.k == selected,
            })
        results = []
        for m in self.members:
            self._sync_member(m.k)
            results.append(FitResult(
                run_dir=m.run_dir, model=m.model, epochs=m.epoch, steps=m.step, train_loss=float(m.last_train),
                val_loss=float(m.last_val), best_loss=float(m.best_loss), best_epoch=int(m.best_epoch),
                wall_time=self._wall(), n_params=int(self.n_params), device=str(self.device),
                dtype=self.resolved.dtype, stopped=m.stopped, history=list(m.history),
            ))
        if self.out is not None:
            self._write_table(table, monitor, selected)
        return EnsembleResult(
            run_dir=self.out, seeds=list(self.seeds), members=results, selected=selected, monitor=monitor,
            stopped=stopped, wall_time=self._wall(), device=str(self.device), dtype=self.resolved.dtype, table=table,
        )

    def _write_table(self, table: list[dict[str, Any]], monitor: str, selected: int | None) -> None:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(TABLE_COLUMNS)
        for r in table:
            writer.writerow([r["member"], r["seed"], r["best_epoch"],
                             *("" if r[c] is None else repr(r[c]) for c in ("best_score", "train_loss", "val_loss")),
                             r["stopped"], int(r["selected"])])
        ckpt_io.write_text(self.out / "ensemble.csv", buf.getvalue())

        def num(v):
            return "–" if v is None else f"{v:.4e}"

        score = {"val_rollout": "best val rollout error", "val_loss": "best val loss"}.get(monitor, "best train loss")
        lines = [f"# Ensemble of {len(table)} ({self.name}, {self.config.optimizer}, {self.epoch} epochs)", "",
                 f"| member | seed | best epoch | {score} | final train loss | final val loss | stopped |",
                 "|---:|---:|---:|---:|---:|---:|---|"]
        for r in table:
            mark = " **(selected)**" if r["selected"] else ""
            lines.append(f"| {r['member']}{mark} | {r['seed']} | {r['best_epoch']} | {num(r['best_score'])} | "
                         f"{num(r['train_loss'])} | {num(r['val_loss'])} | {r['stopped']} |")
        lines.append("")
        if selected is None:
            why = ("no validation data (val_fraction = 0)" if self.val_set is None
                   else "every member diverged")
            lines.append(f"No member selected: {why}.")
            info = {"selected": None, "reason": why, "monitor": monitor}
        else:
            m = self.members[selected]
            name = member_dir_name(m.k, m.seed)
            lines.append(f"Selected: member {m.k} (seed {m.seed}), the best {monitor} on the validation data "
                         f"({m.best_loss:.4e} at epoch {m.best_epoch}); `best/` is `{name}/`.")
            info = {"selected": m.k, "seed": m.seed, "dir": name, "monitor": monitor,
                    "score": float(m.best_loss), "best_epoch": int(m.best_epoch)}
            link = self.out / "best"
            if link.is_symlink() or link.exists():
                link.unlink() if link.is_symlink() else shutil.rmtree(link)
            try:
                os.symlink(name, link, target_is_directory=True)
            except (OSError, NotImplementedError):
                shutil.copytree(m.run_dir, link)
        ckpt_io.write_text(self.out / "ensemble.md", "\n".join(lines) + "\n")
        ckpt_io.write_json(self.out / "selected.json", info)
