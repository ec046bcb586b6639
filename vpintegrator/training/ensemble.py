"""Seed ensembles in one process: N independently initialised members trained at once (``ensemble = N`` or
``seeds = [...]``; ``vp-train --ensemble N``; ``fit(..., ensemble=N)``).

The members' parameters are stacked (``torch.func.stack_module_state``) and the model is evaluated
for all of them at once: a model with a fused chain (the skew VPT at seq 3, the VPFF) as one autograd node
over the stacked parameters (``vpintegrator.nn.fused_members``: the operations of one single run's step, whatever
the number of members; its forward bit for bit each member's own), any other by ``vmap`` over
``torch.func.functional_call``: one forward, one backward and one optimiser step per batch for the whole
ensemble. Each member ``k`` has

* its own initialisation: the global RNGs seeded with ``s_k`` before the model is built, as
  [`fit`][vpintegrator.training.fit] does with ``seed = s_k``;
* its own data order: a ``torch.Generator`` seeded with ``s_k`` draws its permutation each epoch (the
  generator [`fit`][vpintegrator.training.fit] uses), so member ``k`` sees its batches in the order ``fit(seed=s_k)`` does;
* its own loss ``‖pred_k − target_k‖_F / ‖target_k‖_F`` over its batch; the ensemble back-propagates the
  *sum* of the members' losses, so the gradient of member ``k``'s slice of the stacked parameters is
  exactly the gradient of its own loss;
* its own optimiser state: one torch optimiser over the stacked parameters, which for the elementwise
  optimisers (Adam, AdamW, SGD, RMSprop) is the same arithmetic per element as N separate ones. The
  learning-rate schedule is shared (the members take the same number of steps).
* with ``optimizer = "lm"`` (``vpintegrator.training.ensemble_lm``): its own Levenberg–Marquardt iterations, the ones
  ``fit(seed=s_k)`` takes: subsamples (and check windows) drawn from its ``s_k`` generator, its own
  residuals and Jacobian (``vmap`` over the members of the single run's ``jacrev``), its own damping λ_k
  adapted by its own accept/reject; the damped normal equations of all members are solved batched by
  ``vpintegrator.training.optim.lm_update``, the arithmetic of the single run's
  [`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt]. An epoch is ``lm_iters_per_epoch`` iterations
  and its training loss the member's full training loss, as for a single LM run; log.csv's ``lr`` is λ_k.

The train/validation split is ``split_seed``'s for every member, as for every run (the members are compared
on the same validation data). Every member is therefore the run ``fit(seed=s_k)`` would give, up to floating-point reassociation of the batched matrix
products (tests/test_ensemble.py: ~1e-15 in float64; LM, tests/test_ensemble_lm.py: 1e-10, its solves
amplifying the rounding).

Per epoch every member's training loss, validation loss and (``monitor = "val_rollout"``) validation
rollout score are computed (the latter two vmapped as well) and logged in the member's own run directory
``out/member_<k>_seed_<s>/`` (config.toml, log.csv, summary.json, best.pt, last.pt: a normal run
directory, loadable with [`vpintegrator.load_model`][vpintegrator.models.load_model]). A member whose loss turns non-finite is marked
diverged (its files keep the last finite state) and the others go on; with ``patience`` a member stops
(its files freeze) when it alone would have, and the ensemble stops when every member has. All of this is
the one epoch loop of ``vpintegrator.training.loop`` with a member axis of size N; this module is its vmapped step strategy
(``EnsembleSteps``) and the ensemble's own files. At the end
``out/ensemble.csv`` and ``out/ensemble.md`` tabulate the members, and the member with the best validation
score (the monitor: validation loss or rollout score; validation data only) is named in
``out/selected.json`` and linked as ``out/best`` (a copy where links are not possible).

Since the loop is the single run's, its rules hold here too: ``callback`` (given the list of the active
members' [`EpochInfo`][vpintegrator.training.EpochInfo], each with its ``member`` index and ``model``) is called after every epoch,
the last included; a member reaching ``patience`` in the epoch where the run ends anyway (interrupt,
``epochs`` done) stops with the run's reason, as a single run does; an interrupt saves the members' files
at the step it lands on (``steps`` in their ``summary.json``/``last.pt`` counts that step).

Resume (``fit(resume=out)``, ``vp-train --resume OUT``): every save of the members' files (each checkpoint,
an interrupt) ends with ``out/ensemble_last.pt`` (``ENSEMBLE_STATE``), one atomically written file holding the
whole ensemble's training state: the stacked weights, the optimiser and schedule (or each member's LM state),
the members' data generators (as of the epoch's start), the global RNGs, the position in the epoch and every
member's bookkeeping (best score and epoch, patience, stopped or diverged, its weights when it stopped). A
resume loads it, cuts each member's ``log.csv`` back to it and goes on: the continuation is the uninterrupted
run's, bit for bit (one process, the same code on the same data). A kill loses at most what was trained since
that file (one checkpoint interval), for every member at once; the members' ``last.pt`` files are their
weights for [`load_model`][vpintegrator.models.load_model], not resume points of their own.

Not supported, refused with one line: ``optimizer = "lbfgs"`` (its line search couples the members),
torchrun, and resuming a member's directory alone (resume the ensemble's).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import checkpoint as ckpt_io
from ..arrays import relative_loss, squared_norm
from ..stepping import iterate_windows
from .ensemble_lm import EnsembleLM
from .fast_step import FastStep, portable_state, resolve_fast_step
from .optim import label, make_optimizer, make_scheduler
from .strategy import Clock
from .results import (  # noqa: F401 (is_ensemble_member, member_dir_name re-exported)
    TABLE_COLUMNS, FitResult, is_ensemble_member, member_dir_name,
)

if TYPE_CHECKING:
    from .record import Member
    from .plan import TrainPlan

__all__ = ["ENSEMBLE_STATE", "EnsembleSteps", "finish_ensemble", "member_dir_name", "members_finite"]

#: the file in an ensemble's directory that holds its whole training state (what a resume continues from)
ENSEMBLE_STATE = "ensemble_last.pt"

#: the member bookkeeping ``ensemble_last.pt`` keeps (``vpintegrator.training.record.Member`` attributes)
_MEMBER_FIELDS = ("active", "stopped", "epoch", "step", "diverged", "best_loss", "best_epoch", "bad_epochs",
                  "last_train", "last_val", "finite_summary", "plateau_ref", "still_improving", "plateau_slope")
#: the value of a field an ``ensemble_last.pt`` from before it lacks (plateau_ref: the best score was the reference)
_FIELD_DEFAULTS = {"still_improving": None, "plateau_slope": None}


def members_finite(stacked: list[torch.Tensor], n: int) -> list[bool]:
    """Per member ``k``: whether ``t[k]`` is finite throughout, for every stacked tensor ``t`` (n, ...).

    The members' weights are laid side by side, (n, total size), and checked in one reduction over that
    matrix, read back in one host sync (a check per member per tensor was one sync each: 64 members × 54
    tensors, 3 456 an epoch on the GPU)."""
    if not stacked:
        return [True] * n
    with torch.no_grad():
        rows = torch.cat([t.detach().reshape(n, -1) for t in stacked], dim=1)  # (n, total size)
        return torch.isfinite(rows).all(dim=1).tolist()


class EnsembleSteps:
    """The members of an ensemble stacked and stepped together (see the module docstring); the step
    strategy of ``vpintegrator.training.loop.Trainer`` for ``ensemble``/``seeds``."""

    resumable = True
    together = False  # each member diverges alone (the loop judges them after the epoch)
    resume_file = ENSEMBLE_STATE

    #: set by __init__ (declared for type checkers)
    n: int
    n_windows: int
    batch_size: int
    steps_per_epoch: int
    params: dict[str, Any]
    buffers: dict[str, torch.Tensor] | dict[str, Any]
    fast_mode: str
    fast: FastStep | None

    def __init__(self, plan: TrainPlan, record: dict[str, Any], device: torch.device, models: list[torch.nn.Module],
                 train_set, val_set, validator) -> None:
        from torch.func import stack_module_state

        optim = plan.optim
        self.optim, self.epochs, self.split_seed = optim, plan.stop.epochs, plan.data.split_seed
        self.record, self.device, self.seeds = record, device, list(plan.seeds)
        self.models = models
        self.n = len(models)
        self.train_set, self.val_set, self.validator = train_set, val_set, validator
        self.n_windows = len(train_set)
        self.batch_size = int(optim.batch_size)
        self.steps_per_epoch = -(-self.n_windows // self.batch_size)
        # each member's data order: the generator fit(seed=s_k) draws its permutations from
        self.generators = [torch.Generator().manual_seed(s) for s in self.seeds]
        # where in the epoch (a checkpoint mid-epoch, an interrupt): the steps taken, the generators' states
        # before this epoch's orders were drawn, the members' loss sums and per-step losses so far
        self.batch_in_epoch = 0
        self.epoch_start = [g.get_state() for g in self.generators]
        self.partial: tuple[torch.Tensor, torch.Tensor] | None = None
        self.orders = torch.empty(0, dtype=torch.long)  # (N, n_windows) the members' orders (begin_epoch)

        # stacked parameters: one leaf tensor (N, *shape) per parameter; buffers shared when equal
        self.template = copy.deepcopy(models[0])
        params, buffers = stack_module_state(models)
        # a parameter the model freezes (requires_grad=False, e.g. without_attention's) stays frozen
        grad = {k: p.requires_grad for k, p in self.template.named_parameters()}
        self.params = {k: v.detach().requires_grad_(grad[k]) for k, v in params.items()}
        own = dict(models[0].named_buffers())
        theirs = [dict(m.named_buffers()) for m in models[1:]]  # once per member (not per member and buffer)
        shared = all(torch.equal(b[k], own[k]) for b in theirs for k in own)
        self.buffers = {k: v.clone() for k, v in own.items()} if shared else buffers
        self.buffer_dim = None if shared else 0
        # the members' fused chain (one autograd node for all of them), where the model has one
        from ..nn.fused_members import members_layers

        self.chain = members_layers(self.template)
        self.frozen: dict[int, dict[str, torch.Tensor]] = {}  # the weights of members that stopped
        self.lm: EnsembleLM | None = None
        self.optimizer: Any = None  # a torch optimiser over the stacked parameters; none for LM
        self.scheduler: Any = None
        if optim.name == "lm":  # an "epoch" is lm_iters_per_epoch iterations of every member; no schedule
            self.lm = EnsembleLM(self.template, self.params, self.buffers, self.buffer_dim, train_set,
                                 self.generators, optim.lm)
            self.steps_per_epoch = int(optim.lm.iters_per_epoch)
        else:
            trained = [p for p in self.params.values() if p.requires_grad]
            lr, lr_min = optim.rates  # (lr, lr_min): an ensemble does not fine-tune (no init_from)
            self.optimizer = make_optimizer(optim.name, trained, lr, **optim.kwargs)
            decay_epochs = optim.decay_epochs if optim.decay_epochs is not None else 1.0
            horizon = decay_epochs * (self.steps_per_epoch if optim.schedule_per == "step" else 1)
            self.scheduler = make_scheduler(optim.scheduler, self.optimizer, lr_min / lr, horizon)
        # the whole vmapped step as one CUDA graph where it can run (fast_step "auto"/"graph"; made by start,
        # after a resume loaded the optimiser's state)
        self.host_losses = False  # the members' losses stay on the device until the epoch ends
        self.fast_mode = resolve_fast_step(optim.fast_step, optim.name, device, False)
        self.fast = None

    def start(self) -> None:
        if self.fast_mode != "off":
            self.fast = FastStep(self.fast_mode, self._batch_losses, self.optimizer, self.device,
                                 fallback=self.optim.fast_step == "auto")

    # -- the ensemble's training state (ensemble_last.pt) ----------------------------------------------

    def state(self, members: list[Member], at: Clock) -> dict[str, Any]:
        """The whole ensemble's training state at ``at``, with the ``members``' bookkeeping, as
        ``ensemble_last.pt`` holds it (loadable with ``torch.load(weights_only=True)``)."""
        records = []
        for m in members:
            # plain data only (summary.json's values, e.g. torch's version string class, as JSON has them)
            rec = json.loads(json.dumps({f: getattr(m, f) for f in _MEMBER_FIELDS}, default=str))
            rec["frozen"] = self.frozen.get(m.k)
            rec["best_state"] = m.best_state
            rec["history_rows"] = len(m.history)
            records.append(rec)
        loss_acc, losses = self.partial if self.partial is not None else (None, None)
        if self.lm is not None:
            opt: dict[str, Any] = {"lambda": self.lm.lam.clone(), "iteration": int(self.lm.iteration),
                                   "index": self.lm.index, "check": self.lm.check,
                                   "restarts": self.lm.restarts.clone(), "stuck": self.lm.stuck.clone()}
        else:
            opt = portable_state(self.optimizer.state_dict())
        return {
            "kind": "ensemble_last", "version": 1, "n_members": self.n, "seeds": list(self.seeds),
            "epoch": int(at.epoch), "step": int(at.step), "batch_in_epoch": int(self.batch_in_epoch),
            "params": {k: v.detach().clone() for k, v in self.params.items()},
            "buffers": {k: v.clone() for k, v in self.buffers.items()},
            "optimizer": opt,
            "scheduler": {} if self.scheduler is None else portable_state(self.scheduler.state_dict()),
            "rng": ckpt_io.rng_state(self.device),
            "generators": [g.get_state() for g in self.generators],
            "epoch_start": [t.clone() for t in self.epoch_start],
            "loss_acc": loss_acc, "losses": losses,
            "members": records,
            "wall_time": float(at.wall), "cpu_time": float(at.cpu),
        }

    def save_state(self, out: Path, members: list[Member], at: Clock) -> None:
        """Write ``state(members, at)`` to ``out/ensemble_last.pt`` atomically (after the members' own files)."""
        from .._io import atomic_path

        path = out / ENSEMBLE_STATE
        payload = {**self.state(members, at), "provenance": ckpt_io.run_provenance(path.parent)}
        with atomic_path(path, suffix=".pt") as tmp:
            torch.save(payload, tmp)

    def load(self, path: Path, members: list[Member]) -> Clock:
        """Continue from ``ensemble_last.pt`` at ``path``: every member's weights, the optimiser, the
        generators and RNGs, the position in the epoch and the members' bookkeeping and histories."""
        from ..errors import VPIntegratorError
        from ..models import read_torch_file

        where = path.parent
        if not path.is_file():
            raise VPIntegratorError(
                f"resume {where}: no {ENSEMBLE_STATE} there (the ensemble's training state, written with its "
                "first checkpoint); an ensemble killed before it, or written by an older version, cannot be "
                "resumed: train it again with overwrite", key="resume")
        state = read_torch_file(path, map_location="cpu", what="checkpoint")
        if not isinstance(state, dict) or state.get("kind") != "ensemble_last":
            raise VPIntegratorError(f"checkpoint {path}: not an ensemble's training state (written by vp-train "
                                    "--ensemble)", key="resume")
        if list(state.get("seeds", [])) != list(self.seeds) or len(state.get("members", [])) != self.n:
            raise VPIntegratorError(
                f"checkpoint {path}: holds the members of seeds {state.get('seeds')}, but {where / 'config.toml'} "
                f"gives seeds {list(self.seeds)}; was it replaced by another ensemble's?", key="resume")
        done = int(state["epoch"])
        if self.epochs is not None and self.epochs < done:
            raise VPIntegratorError(
                f"epochs {self.epochs} is less than the {done} epochs the ensemble in {where} has done; "
                f"epochs is the total: give at least {done} (resume never goes back)", key="epochs")
        try:
            with torch.no_grad():
                for k, v in self.params.items():
                    v.copy_(state["params"][k])
                for k, v in self.buffers.items():
                    v.copy_(state["buffers"][k])
            if self.lm is not None:
                opt = state["optimizer"]
                self.lm.lam = opt["lambda"].to(self.lm.lam.device)
                self.lm.iteration = int(opt["iteration"])
                self.lm.index = opt["index"]
                self.lm.check = opt["check"]
                if "restarts" in opt:  # a state from before the damping's restarts: none yet
                    self.lm.restarts, self.lm.stuck = opt["restarts"].clone(), opt["stuck"].clone()
            else:
                self.optimizer.load_state_dict(state["optimizer"])
                self.scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise VPIntegratorError(
                f"checkpoint {path}: its weights or optimizer state do not match the ensemble's model and optimizer "
                f"in {where / 'config.toml'} ({first}); was it replaced by another run's?", key="resume") from None
        ckpt_io.check_inputs_unchanged(path, state)
        ckpt_io.set_rng_state(state["rng"], self.device)
        for g, s in zip(self.generators, state["generators"]):
            g.set_state(s)
        self.epoch_start = list(state["epoch_start"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
        if state["loss_acc"] is not None:
            self.partial = (state["loss_acc"].to(self.device), state["losses"].to(self.device))
        self.frozen = {}
        for m, rec in zip(members, state["members"]):
            for f in _MEMBER_FIELDS:
                setattr(m, f, rec[f] if f in rec else _FIELD_DEFAULTS.get(f, rec["best_loss"]))
            m.best_state, m.best_dirty = rec["best_state"], False
            if rec["frozen"] is not None:
                self.frozen[m.k] = rec["frozen"]
            if m.run_dir is not None:
                log = m.run_dir / "log.csv"
                member_epoch = done if m.active else m.epoch
                m.history = ckpt_io.read_log(log, max_epoch=member_epoch)
                if len(m.history) < int(rec["history_rows"]):
                    what = "is missing" if not log.exists() else f"holds {len(m.history)} epochs"
                    raise VPIntegratorError(
                        f"resume {where}: {log} {what}, but {ENSEMBLE_STATE} is at epoch {member_epoch} for that "
                        "member: its history would restart mid-run; put the member's log.csv back, or train the "
                        "ensemble again", key="resume")
        return Clock(done, int(state["step"]), float(state["wall_time"]), float(state["cpu_time"]))

    # -- the vmapped model ------------------------------------------------------------------------

    def _forward(self, x: torch.Tensor, shared_input: bool = False) -> torch.Tensor:
        """All members on ``x`` (N, B, ...) -- or on one (B, ...) for all with ``shared_input``: (N, B, ...).

        A model with a fused chain (the skew VPT, the VPFF) runs all members as one autograd node
        (``vpintegrator.nn.fused_members``: the operations of one single run's fused step, whatever N); other
        models, and any model under ``torch.compile`` or a ``torch.func`` transform, by ``vmap`` over the members."""
        from torch.func import functional_call, vmap

        if self.chain is not None and self.buffer_dim is None:
            from ..nn.fused_members import members_chain

            rows = x.expand(self.n, *x.shape) if shared_input else x
            out = members_chain(self.chain, self.params, rows)
            if out is not None:
                return out
        template = self.template

        def one(p, b, xx):
            return functional_call(template, (p, b), (xx,))

        return vmap(one, in_dims=(0, self.buffer_dim, None if shared_input else 0))(self.params, self.buffers, x)

    def member_state(self, k: int) -> dict[str, torch.Tensor]:
        if k in self.frozen:
            return {name: t.clone() for name, t in self.frozen[k].items()}
        out = {}
        for name, t in self.models[k].state_dict().items():
            if name in self.params:
                out[name] = self.params[name][k].detach().clone()
            elif self.buffer_dim == 0 and name in self.buffers:
                out[name] = self.buffers[name][k].clone()
            else:
                out[name] = t.detach().clone()
        return out

    def member_model(self, k: int) -> torch.nn.Module:
        """Member ``k``'s module with its current weights."""
        model = self.models[k]
        model.load_state_dict(self.member_state(k))
        return model

    def freeze(self, k: int, state: dict[str, torch.Tensor] | None) -> None:
        """Member ``k`` stopped: its weights from now on are ``state`` (its current ones for None)."""
        self.frozen[k] = self.member_state(k) if state is None else state

    def train_mode(self) -> None:
        self.template.train()

    def lrs(self) -> list[float]:
        """Per member: the learning rate now (shared); for ``lm`` the member's own damping λ."""
        if self.lm is not None:
            return self.lm.lam.tolist()
        return [float(self.optimizer.param_groups[0]["lr"])] * self.n

    def finite_weights(self) -> list[bool]:
        """Per member: whether every one of its weights is finite (one batched check, one host sync)."""
        return members_finite(list(self.params.values()), self.n)

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
        return relative_loss(pred, target, start=1)

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
        if self.optim.schedule_per == "step":
            self.scheduler.step()
        return losses.detach()

    # -- one epoch, as the loop asks (vpintegrator.training.strategy) -----------------------------------

    def begin_epoch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's order for the epoch (again, from the generators' states at its start, when resumed
        mid-epoch; LM draws its subsamples as it steps): the members' loss sums (N,) and per-step losses
        (steps, N), with a mid-epoch checkpoint's rows."""
        acc = torch.zeros(self.n, dtype=torch.float64, device=self.device)
        losses = torch.empty(self.steps_per_epoch, self.n, dtype=torch.float64, device=self.device)
        if self.lm is None:
            if self.batch_in_epoch == 0:
                self.epoch_start = [g.get_state() for g in self.generators]
            else:  # resumed mid-epoch: this epoch's orders again, from the generators' states at its start
                for g, s in zip(self.generators, self.epoch_start):
                    g.set_state(s)
            self.orders = torch.stack([torch.randperm(self.n_windows, generator=g)
                                       for g in self.generators]).to(self.device)
        if self.partial is not None:
            if self.lm is None:
                acc.copy_(self.partial[0])
            losses[: self.batch_in_epoch] = self.partial[1]
        self.partial = None
        return acc, losses

    def step(self, b: int, stop: bool, save: bool) -> tuple[torch.Tensor, tuple[bool, bool] | None]:
        """Batch ``b`` of every member's order (LM: one iteration of every member)."""
        if self.lm is not None:
            return self.lm.step(), None
        bs = self.batch_size
        return self._step(self.orders[:, b * bs : (b + 1) * bs]), None

    def pause(self, acc: torch.Tensor, losses: torch.Tensor) -> None:
        if self.lm is not None:
            self.partial = (torch.zeros(self.n, dtype=torch.float64), losses.clone())
        else:
            self.partial = (acc.clone(), losses.clone())

    def end_epoch(self, acc: torch.Tensor, losses: torch.Tensor) -> list[float]:
        """Mean batch loss per member (LM: the full training loss after the epoch; NaN for a member whose loss
        before an iteration was not finite: it diverged there, as its single run would)."""
        self.partial = None  # a mid-epoch checkpoint's sums are the epoch's, not the next one's
        if self.lm is not None:
            with label("vp/train_loss"):
                train = torch.tensor(self.val_losses(self.train_set), dtype=torch.float64)
            train[~torch.isfinite(losses).all(0).cpu()] = math.nan
            return train.tolist()
        if self.optim.schedule_per == "epoch":
            self.scheduler.step()
        return (acc / len(losses)).tolist()  # the epoch's host sync of the losses (len: the steps taken)

    @torch.no_grad()
    def val_losses(self, dataset=None) -> list[float]:
        """Every member's reference loss over the whole validation set, or ``dataset`` (NaN without one)."""
        n = self.n
        dataset = self.val_set if dataset is None else dataset
        if dataset is None:
            return [math.nan] * n
        self.template.eval()
        num = torch.zeros(n, dtype=torch.float64, device=self.device)
        den = torch.zeros((), dtype=torch.float64, device=self.device)
        order = torch.arange(len(dataset), device=self.device)
        bs = self.batch_size
        for b in range(-(-len(dataset) // bs)):
            x, target = dataset.batch(order[b * bs : (b + 1) * bs])
            pred = self._forward(x, shared_input=True)
            num += squared_norm(pred - target, start=1).double()
            den += squared_norm(target).double()
        self.template.train()
        return torch.sqrt(num / den).tolist()

    @torch.no_grad()
    def val_rollouts(self) -> list[float]:
        """Every member's validation rollout score (``RolloutValidator``'s, vmapped over the members)."""
        v = self.validator
        ref = v._ref(next(iter(self.params.values())))
        n = self.n
        T, P, total = v.seq_len, v.pred_window, ref.shape[1]
        self.template.eval()
        x = ref[:, :T].expand(n, *ref[:, :T].shape)  # (N, n_traj, T, dim): every member from the same windows
        parts = iterate_windows(v.call(self._forward), x, -(-(total - T) // P))  # the rollout core's advance
        self.template.train()
        pred = torch.cat(parts, 2)[:, :, : total - T].double()
        return v.score(pred, ref).tolist()

    # -- files --------------------------------------------------------------------------------------

    def member_record(self, m) -> dict[str, Any]:
        # the member's own config: a single run with its seed
        return {**self.record, "seed": m.seed, "out": self.record.get("out") if m.path is None else str(m.path), "ensemble": None,
                "seeds": None}

    def last_extra(self, m: Member, at: Clock) -> dict[str, Any]:
        return {"kind": "last", "epoch": int(at.epoch), "step": int(at.step),
                "ensemble": {"member": m.k, "seed": m.seed, "n_members": self.n}}

    def summary_extra(self, m) -> dict[str, Any]:
        lm = {} if self.lm is None else {"lm_restarts": int(self.lm.restarts[m.k])}
        return {**lm, "ensemble": {"member": m.k, "seed": m.seed, "n_members": self.n,
                                   "seeds": list(self.seeds), "split_seed": int(self.split_seed)}}

    def stuck(self) -> list[bool]:
        """Per member: whether its Levenberg–Marquardt is stuck (damping at the cap after its restarts)."""
        return [False] * self.n if self.lm is None else self.lm.stuck.tolist()



def finish_ensemble(members: list[Member], results: list[FitResult], monitor: str, optimizer: str, out: Path | None,
                    validated: bool, name: str, epochs: int, stopped: str, wall_time: float, device: str,
                    dtype: str) -> FitResult:
    """The ensemble's result (a [`FitResult`][vpintegrator.training.FitResult] with members) from its ``members``' bookkeeping and ``results`` (one each); with ``out``
    also ``out/ensemble.csv``, ``ensemble.md``, ``selected.json`` and ``best``. ``validated``: the run has
    validation data (a member is selected by it only then); ``monitor`` what the run watched, ``optimizer`` its
    optimiser's name."""
    return _Table(members, monitor, optimizer, out, validated, name, epochs).finish(results, stopped, wall_time, device, dtype)


class _Table:
    """The ensemble's table and selection, from the loop's members."""

    def __init__(self, members: list[Member], monitor: str, optimizer: str, out: Path | None, validated: bool,
                 name: str, epochs: int) -> None:
        self.members, self.monitor, self.optimizer, self.out, self.validated = members, monitor, optimizer, out, validated
        self.seeds, self.name, self.epochs = [m.seed for m in members], name, epochs

    def finish(self, results: list[FitResult], stopped: str, wall_time: float, device: str,
               dtype: str) -> FitResult:
        candidates = [m for m in self.members
                      if m.diverged is None and m.best_epoch > 0 and math.isfinite(m.best_loss)]
        selected = None
        if self.validated and candidates:  # validation data only
            selected = min(candidates, key=lambda m: (m.best_loss, m.k)).k
        monitor = self.monitor if self.validated else "train_loss"
        table = []
        for m in self.members:
            table.append({
                "member": m.k, "seed": m.seed, "best_epoch": m.best_epoch,
                "best_score": ckpt_io.json_float(m.best_loss), "train_loss": ckpt_io.json_float(m.last_train),
                "val_loss": ckpt_io.json_float(m.last_val), "stopped": m.stopped, "selected": m.k == selected,
            })
        if self.out is not None:
            self._write_table(self.out, table, monitor, selected)
        return FitResult.of_ensemble(
            run_dir=self.out, seeds=list(self.seeds), members=results, selected=selected, monitor=monitor,
            stopped=stopped, wall_time=wall_time, device=device, dtype=dtype, table=table,
        )

    def _write_table(self, out: Path, table: list[dict[str, Any]], monitor: str, selected: int | None) -> None:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(TABLE_COLUMNS)
        for r in table:
            writer.writerow([r["member"], r["seed"], r["best_epoch"],
                             *("" if r[c] is None else repr(r[c]) for c in ("best_score", "train_loss", "val_loss")),
                             r["stopped"], int(r["selected"])])
        ckpt_io.write_text(out / "ensemble.csv", buf.getvalue())

        def num(v):
            return "–" if v is None else f"{v:.4e}"

        score = {"val_rollout": "best val rollout error", "val_loss": "best val loss"}.get(monitor, "best train loss")
        lines = [f"# Ensemble of {len(table)} ({self.name}, {self.optimizer}, {self.epochs} epochs)", "",
                 f"| member | seed | best epoch | {score} | final train loss | final val loss | stopped |",
                 "|---:|---:|---:|---:|---:|---:|---|"]
        for r in table:
            mark = " **(selected)**" if r["selected"] else ""
            lines.append(f"| {r['member']}{mark} | {r['seed']} | {r['best_epoch']} | {num(r['best_score'])} | "
                         f"{num(r['train_loss'])} | {num(r['val_loss'])} | {r['stopped']} |")
        lines.append("")
        if selected is None:
            why = ("no validation data (val_fraction = 0)" if not self.validated
                   else "every member diverged")
            lines.append(f"No member selected: {why}.")
            info: dict[str, Any] = {"selected": None, "reason": why, "monitor": monitor}
        else:
            m = self.members[selected]
            name = member_dir_name(m.k, m.seed)
            lines.append(f"Selected: member {m.k} (seed {m.seed}), the best {monitor} on the validation data "
                         f"({m.best_loss:.4e} at epoch {m.best_epoch}); `best/` is `{name}/`.")
            info = {"selected": m.k, "seed": m.seed, "dir": name, "monitor": monitor,
                    "score": float(m.best_loss), "best_epoch": int(m.best_epoch)}
            link = out / "best"
            if link.is_symlink() or link.exists():
                link.unlink() if link.is_symlink() else shutil.rmtree(link)
            try:
                os.symlink(name, link, target_is_directory=True)
            except (OSError, NotImplementedError):
                shutil.copytree(out / name, link)
        ckpt_io.write_text(out / "ensemble.md", "\n".join(lines) + "\n")
        ckpt_io.write_json(out / "selected.json", info)
