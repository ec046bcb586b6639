"""The one epoch loop behind [`fit`][vpintegrator.training.fit]: a single run and a seed ensemble alike.

Design. The loop runs over a *member axis*: a list of ``vpintegrator.training.record.Member`` (one
run's bookkeeping each: best epoch, patience, history, ``log.csv`` and its sinks, ``best.pt``), one for a
single run, N for an ensemble. How one optimiser step is taken is a *step strategy*, a
``vpintegrator.training.strategy.StepStrategy`` (a typed ``Protocol``; it never calls the loop):

- ``vpintegrator.training.single.SingleSteps``: one model and one optimiser: eager torch step, LBFGS,
  the graph fast step (``vpintegrator.training.fast_step``), DDP under ``torchrun``, Levenberg–Marquardt, ``unroll``,
  mid-epoch checkpoints and exact resume (``last.pt`` holds its training state);
- ``vpintegrator.training.ensemble.EnsembleSteps``: N members stacked and stepped together by
  ``vmap`` (one forward, backward and optimiser step per batch for all of them).

Everything else is written once, here: the batches of each epoch (``_train_epoch``: the step count, a
single model's divergence at its first non-finite loss, mid-epoch checkpoints every ``checkpoint_seconds``
and stop requests, for every strategy), then per epoch the validation losses and rollout scores, then per active member the divergence checks
(non-finite training loss, validation loss or weights: the member stops, its files keep the last finite
state), the best-epoch rule, the log row, the summary; the callback, the progress bar; the stop
reasons, agreed by every DDP rank, in the order interrupt, Levenberg–Marquardt stuck (``lm_stuck``: its
damping at the cap again after its restarts, ``vpintegrator.training.optim.restart_damping``; per member, at
the step it got stuck), epochs done, patience (per member: a member stops when it alone would have; the run
when every member has; the score's trend over the window is recorded, ``record.plateau_trend``), callback,
steps (``max_steps``: checked after every optimiser step, so the run takes exactly that many), time limit
(which clock's budget stopped it, CPU or wall, is recorded: ``summary.json`` ``stop_clock``; in one process
the budgets are also checked after every optimiser step). An epoch a budget or a stuck LM ends in ends there,
short (``short_epoch``), validated and judged, so one long epoch -- many Levenberg–Marquardt iterations of a
large model -- cannot overrun a budget; checkpoints
(every ``checkpoint_every`` epochs and every ``checkpoint_seconds``) and the final files. A single run
that diverges raises one line after writing its files; an ensemble goes on with its other members.

Ctrl-C or SIGTERM finish the current optimiser step, save ``last.pt`` (and an ensemble's
``ensemble_last.pt``; the mid-epoch state is resumable exactly) and raise [`TrainingInterrupted`][vpintegrator.training.TrainingInterrupted] (a ``KeyboardInterrupt``); a second signal
aborts at once. Under ``torchrun`` only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from .._signals import handling
from ..clock import process_cpu
from .._version import __version__
from ..errors import VPIntegratorError
from ..rundir import clear_complete, write_complete
from . import checkpoint as ckpt_io
from . import ddp
from .ensemble import ENSEMBLE_STATE, EnsembleSteps, finish_ensemble, member_dir_name
from .optim import label
from .record import Member, plateau_trend
from .results import EpochInfo, FitResult, TrainingInterrupted, identity_record
from .plan import SYSTEM_KEYS, Prepared, TrainPlan, prepare
from .single import SingleSteps, window_loss
from .strategy import Clock, StepStrategy
from .sinks import check_logger, make_sinks

__all__ = ["Trainer", "Diverged", "StopRequest", "describe", "progress_bar", "progress_fraction", "progress_lines"]

_PHRASE = {"loss": "loss is", "validation": "validation loss is", "weights": "weights are",
           "training": "training loss is"}


# -- what stops a run early: a non-finite loss or weights (Diverged), SIGINT/SIGTERM (StopRequest: a flag
# checked between optimiser steps, so that last.pt is saved) ---------------------------------------


class Diverged(Exception):
    """A non-finite loss or weights: training stops (every rank at the same point)."""

    #: set by __init__ (declared for type checkers)
    what: str
    value: float
    epoch: int
    step: int

    def __init__(self, what: str, value: float, epoch: int, step: int) -> None:
        super().__init__(what)
        self.what, self.value, self.epoch, self.step = what, value, epoch, step


class StopRequest:
    """SIGINT/SIGTERM set a flag checked between optimiser steps; a second signal aborts at once."""

    #: set by __init__ (declared for type checkers)
    requested: bool

    def __init__(self) -> None:
        self.requested = False
        self._handling = handling((signal.SIGINT, signal.SIGTERM), self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt(f"signal {signum} received twice")
        self.requested = True

    def __enter__(self) -> "StopRequest":
        self._handling.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handling.__exit__(*exc)


# -- the progress of fit (progress=True) on stderr: a click bar on a terminal; elsewhere (a notebook, a
# batch-job log) a plain line at the first epoch, then at most one per interval
# ($VPINTEGRATOR_PROGRESS_INTERVAL seconds, default 15) and one at the end. The time left is the smaller
# of what the epochs left take at the current rate and what the time limit leaves. ------------------

_UNITS = 1000  # bar length when it follows a fraction of the run


def progress_fraction(epochs_done: int, epochs_total: int | None, elapsed: float, time_limit: float | None) -> float:
    """How far the run is, in [0, 1]: the larger of the epochs done and the time budget spent.

    Whichever ends the run first decides, so the bar's ETA never exceeds the time limit and is not
    stretched to it when the epochs end first.
    """
    parts = []
    if epochs_total:
        parts.append(epochs_done / epochs_total)
    if time_limit:
        parts.append(elapsed / time_limit)
    return min(max(parts, default=0.0), 1.0)


def describe(info) -> str | None:
    """One epoch's [`EpochInfo`][vpintegrator.training.EpochInfo] in a few words."""
    if info is None:
        return None
    val = "" if math.isnan(info.val_loss) else f" val_loss {info.val_loss:.3e}"
    rollout = "" if math.isnan(getattr(info, "val_rollout", math.nan)) else f" val_rollout {info.val_rollout:.3e}"
    return f"epoch {info.epoch} train_loss {info.train_loss:.3e}{val}{rollout} lr {info.lr:.1e}"


@contextlib.contextmanager
def progress_lines(epochs_left: int | None, time_limit: float | None, unit: str = "epochs",
                   **kwargs: Any) -> Iterator[Any]:
    """``progress_bar`` off a terminal: throttled plain lines (``kwargs`` go to
    ``vpintegrator._progress.ProgressLines``: ``interval``, ``stream``, ``clock``)."""
    from .._progress import ProgressLines

    limit = f", time limit {time_limit:g} s" if time_limit else ""
    with ProgressLines("training", epochs_left or None, unit=unit, time_limit=time_limit, **kwargs) as lines:

        def update(info, elapsed: float, n: int = 1) -> None:
            lines.update(lines.done + n, (describe(info) or "") + limit)

        yield update


@contextlib.contextmanager
def progress_bar(show: bool, epochs_left: int | None, time_limit: float | None, unit: str = "epochs") -> Iterator[Any]:
    """Yield ``update(info, elapsed, n=1)`` (to call after each epoch, ``n`` the units it took) or None when
    ``show`` is false. ``epochs_left`` is the total left in ``unit``: epochs, or ``"steps"`` for a run with a
    step budget (``max_steps``: the bar counts the optimiser steps, the budget's unit).

    On a terminal a click bar: with only epochs (steps) it counts them (``show_pos``); with a time limit it
    follows ``progress_fraction``, so its ETA honours the limit. In a Jupyter notebook with tqdm installed,
    tqdm's widget (``vpintegrator._progress.notebook_widget``). Elsewhere ``progress_lines``.
    """
    if not show:
        yield None
        return
    from .._progress import notebook_widget, on_terminal

    widget = notebook_widget("training", epochs_left or None, unit)
    if widget is not None:
        limit = f", time limit {time_limit:g} s" if time_limit else ""

        def advance(info, elapsed: float, n: int = 1) -> None:
            widget.update(widget.done + n, (describe(info) or "") + limit)

        with widget:
            yield advance
        return

    if not on_terminal():
        with progress_lines(epochs_left, time_limit, unit) as update:
            yield update
        return
    import click

    by_epochs = time_limit is None

    length = max(epochs_left or 0, 1) if by_epochs else _UNITS
    with click.progressbar(length=length, label="training", item_show_func=describe, file=sys.stderr,
                           show_pos=by_epochs) as bar:
        done = {"epochs": 0}

        def update(info, elapsed: float, n: int = 1) -> None:
            done["epochs"] += n
            if by_epochs:
                bar.update(n, info)
                return
            target = int(_UNITS * progress_fraction(done["epochs"], epochs_left, elapsed, time_limit))
            bar.update(max(min(target, length) - bar.pos, 0), info)  # length: the bar's

        yield update


class Trainer:
    """One training run (one process of it under DDP), of one model or of an ensemble. Built by [`fit`][vpintegrator.training.fit].

    ``inputs`` are the prepared model(s) and window sets (``vpintegrator.training.plan.prepare``,
    or the objects given to [`fit`][vpintegrator.training.fit]); without them they are prepared from ``plan``.
    """

    #: set by __init__ (declared for type checkers)
    progress: bool
    resume_dir: Path | None
    device: torch.device
    ensemble: bool
    seeds: list[int]
    name: str
    data_info: dict[str, Any]
    train_set: Any
    val_set: Any
    rollout_validator: Any
    n_params: int
    log_columns: tuple[str, ...]
    out: Path | None
    wall_before: float
    t_start: float
    last_save: float

    def __init__(self, plan: TrainPlan, dist: ddp.DistInfo, device: torch.device,
                 callback: Callable[[Any], bool | None] | None, progress: bool, inputs: Prepared | None = None) -> None:
        resume = plan.output.resume
        self.plan, self.stop_plan = plan, plan.stop
        self.stop_rule = plan.stop.rule()  # summary.json's stop_rule (the plan is frozen)
        self.callback, self.progress, self.resume_dir = callback, progress, resume
        self.dist, self.device = dist, device
        self.dtype = plan.torch_dtype
        self.ensemble = plan.ensemble
        self.seeds = list(plan.seeds)
        inputs = inputs if inputs is not None else prepare(plan, device)
        self.name, self.record_values = inputs.name, inputs.record
        # the trajectory split (setup.split_record) goes to the top of summary.json and into every checkpoint;
        # None when fit was given its validation data or windows (nothing was split)
        self.data_info = dict(inputs.data_info)
        split = {k: self.data_info.pop(k) for k in ("split", "split_data", "split_seed", "split_by", "ancestors")
                 if k in self.data_info}
        # what the model was trained on (setup.system_record: dt, system, its parameters), for vp-rollout's check
        # (summary.json's "data" keeps its "system" as before)
        split.update({k: self.data_info[k] if k == "system" else self.data_info.pop(k) for k in SYSTEM_KEYS
                      if k in self.data_info})
        self.split_extra: dict[str, Any] = split
        self.train_set, self.val_set, self.rollout_validator = inputs.train_set, inputs.val_set, inputs.validator
        self.model = inputs.models[0]
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.log_columns = ckpt_io.log_columns(plan.stop.monitor)
        self.out = Path(plan.output.out) if plan.output.out is not None else None
        check_logger(plan.output.logger, self.out is not None)

        # training state
        self.epoch = self.step = 0
        self.wall_before = 0.0  # seconds spent by earlier invocations of this run
        self.cpu_before = 0.0  # CPU seconds of earlier invocations (NaN: one of them did not record it)
        self.t_start = time.perf_counter()
        self.c_start = process_cpu()
        self.invocation_start, self.cpu_start = self.t_start, self.c_start  # this invocation's budgets (_loop)
        self.short_epoch = False  # the last epoch was cut short by a budget (_train_epoch)
        #: per member k whose Levenberg–Marquardt is stuck (its damping at the cap after its restarts): the step
        #: it got stuck at (it stops there with "lm_stuck"; a single run's epoch ends there)
        self.stuck_at: dict[int, int] = {}
        #: the log column the plateau rule judges (its trend at a stop: record.plateau_trend)
        self.score_column = (ckpt_io.ROLLOUT_COLUMN if inputs.validator is not None
                             else "val_loss" if inputs.val_set is not None else "train_loss")
        self.progress_unit = "epochs"  # what the progress bar counts: "steps" with a step budget (run)
        self.stop: Any = None
        #: which budget's clock stopped the run at ``time_limit``: "cpu" (cpu_time_limit) or "wall" (time_limit)
        self.stop_clock: str | None = None
        write = dist.is_main
        self.members = []
        for k, s in enumerate(self.seeds):
            path = self.out if not self.ensemble or self.out is None else self.out / member_dir_name(k, s)
            self.members.append(Member(k, s, path, write, self.log_columns, plan.stop.min_delta,
                                       plan.stop.min_rel_delta))
            self.members[-1].checkpoint_extra = dict(self.split_extra)
        # the step strategy (vpintegrator.training.strategy.StepStrategy): SingleSteps (one model; LM, LBFGS,
        # DDP, the graph step) or EnsembleSteps (vmapped members; the ensemble's own files too)
        self.steps: StepStrategy
        if self.ensemble:
            self.steps = EnsembleSteps(plan, self.record_values, device, inputs.models, self.train_set, self.val_set,
                                       self.rollout_validator)
        else:
            self.steps = SingleSteps(plan, self.record_values, dist, device, self.model, self.train_set, self.val_set,
                                     self.rollout_validator)
        #: the identity (do-nothing) map's score as ``best_loss`` measures it (``_identity_score``), taken where a
        #: member stops (every DDP rank there alike: the final summaries have it); NaN until then
        self.identity_loss = math.nan
        self.last_save = time.perf_counter()
        if resume is not None:
            at = self.steps.load(resume / self.steps.resume_file, self.members)
            self.epoch, self.step, self.wall_before, self.cpu_before = at.epoch, at.step, at.wall, at.cpu
        self.steps.start()

    def _identity_score(self) -> float:
        """What the identity (do-nothing) map scores on the monitored data, as ``best_loss`` measures it: the
        validation rollout's score holding the first window's last state, else the loss (``loss``: relative
        or its square) of predicting every target state as its window's last input state, on the validation
        windows (the training windows without them). Computed once (then ``identity_loss``)."""
        if not math.isnan(self.identity_loss):
            return self.identity_loss
        if self.rollout_validator is not None:
            return self.rollout_validator.identity()
        data = self.val_set if self.val_set is not None else self.train_set
        squared = self.plan.optim.loss == "relative_squared"
        return window_loss(None, data, self.plan.optim.batch_size, self.dist, squared)

    # -- per member --------------------------------------------------------------------------------

    def epoch_of(self, m: Member) -> int:
        return self.epoch if m.active else m.epoch

    def step_of(self, m: Member) -> int:
        return self.step if m.active else m.step

    def clock(self, m: Member) -> Clock:
        """Where member ``m`` stands (its own epoch and step when it stopped) and the run's seconds."""
        return Clock(self.epoch_of(m), self.step_of(m), self.wall(), self.cpu())

    def wall(self) -> float:
        return self.wall_before + (time.perf_counter() - self.t_start)

    def cpu(self) -> float:
        """CPU seconds of the training process (all its threads: [`process_cpu`][vpintegrator.clock.process_cpu], every
        invocation of the run; NaN where an earlier invocation did not record it), less the seconds spent in
        the tracking sinks (TensorBoard, MLflow: bookkeeping, not training): summary.json's ``cpu_time``,
        the training cost that work–precision amortises (``vp-rollout --work-precision --amortise N``)."""
        sinks = sum(m.sink_cpu for m in self.members)
        return self.cpu_before + (process_cpu() - self.c_start - sinks)

    def checkpoint_due(self) -> bool:
        """Time for a checkpoint by wall time (rank 0 decides; DDP carries the decision to every rank)."""
        return (self.dist.is_main and self.out is not None
                and time.perf_counter() - self.last_save >= self.plan.output.checkpoint_seconds)

    def save(self) -> None:
        """Write every active member's best.pt (when it changed), last.pt and summary.json."""
        self.last_save = time.perf_counter()
        for m in self.members:
            if m.active:
                self._save_member(m, "running")
        if self.out is not None and self.dist.is_main:  # last: the members' files are older
            self.steps.save_state(self.out, self.members, Clock(self.epoch, self.step, self.wall(), self.cpu()))

    def _save_member(self, m: Member, stopped: str) -> None:
        if m.run_dir is None:
            return
        from ..models import save_model

        provenance = ckpt_io.run_provenance(m.run_dir)  # one record for the save's best.pt, last.pt and summary.json
        m.save_best(self.steps.models[m.k], provenance)
        at = self.clock(m)
        model, extra = self.steps.member_model(m.k), self.steps.last_extra(m, at)
        save_model(model, m.run_dir / "last.pt", overwrite=True, any_module=True,
                   extra={**extra, **self.split_extra, "provenance": provenance})
        ckpt_io.write_summary(m.run_dir, self._summary(m, stopped), provenance)

    def _summary(self, m: Member, stopped: str) -> dict[str, Any]:
        # each module asked once, in a row: the strategy, this loop and its clocks, then the floats made JSON-ready
        s, model = self.steps, self.record_values["model"]
        lr, extra = s.lrs()[m.k], s.summary_extra(m)
        epochs, n_steps, fast = int(self.epoch_of(m)), int(self.step_of(m)), s.fast
        wall, cpu = self.wall(), self.cpu()
        json_float = ckpt_io.json_float
        train, val, best, cpu_time = (json_float(m.last_train), json_float(m.last_val), json_float(m.best_loss),
                                      json_float(round(cpu, 3)))
        return {
            "model": self.name,
            **({"model_class": model["model_class"]} if "model_class" in model else {}),  # a user's class: its import path
            "n_params": int(self.n_params),
            "epochs": epochs,
            "steps": n_steps,
            "steps_per_epoch": int(s.steps_per_epoch),
            "train_loss": train,
            "val_loss": val,
            "best_loss": best,
            "best_epoch": int(m.best_epoch),
            "monitor": self.stop_plan.monitor if self.val_set is not None else "train_loss",
            # the do-nothing baseline on the same score (Trainer._identity_score), best_loss over it, and whether
            # the model is no better than predicting no change (None where the identity map is exact or NaN)
            **identity_record(m.best_loss, self.identity_loss),
            "lr": lr,
            "wall_time": round(wall, 3),
            "cpu_time": cpu_time,
            "stopped": stopped,
            # the record every report reads: which clock's budget stopped a time_limit run, and the rule
            "stop_clock": self.stop_clock if stopped == "time_limit" else None,
            "stop_rule": dict(self.stop_rule),
            # at the plateau rule's stop (early_stopping): whether the score's least-squares trend over the window
            # it judged still fell clearly (record.plateau_trend), and that slope of log(score) per epoch; else None
            "still_improving": m.still_improving if stopped == "early_stopping" else None,
            "plateau_slope": json_float(m.plateau_slope) if stopped == "early_stopping" else None,
            # the last epoch ended early, at fewer than steps_per_epoch steps, because a budget ran out
            "short_epoch": bool(self.short_epoch),
            "device": str(self.device),
            "fast_step": s.fast_mode,
            # what runs (off, graph, compile) and why fast_step = 'auto' fell back to the eager step (or None)
            "fast_step_used": "off" if fast is None else fast.used,
            "fast_step_fallback": None if fast is None else fast.fallback_reason,
            "fast_step_build_seconds": None if fast is None else round(fast.build_seconds, 3),  # compile, capture, check
            "dtype": self.plan.dtype,
            "world_size": self.dist.world_size,
            "data": self.data_info,
            **self.split_extra,
            "vpintegrator_version": __version__,
            "torch_version": torch.__version__,
            **extra,
        }

    def _stop_member(self, m: Member, why: str, step: int | None = None) -> None:
        """Member ``m`` stops training (patience; ``lm_stuck`` at ``step``, where its LM took its last step):
        its files are written and freeze. At the plateau rule's stop, the score's trend over the window it
        judged (``plateau_trend``) is recorded: ``still_improving``, ``plateau_slope``."""
        m.stopped = why
        if why == "early_stopping":
            rows = m.history[-self.stop_plan.patience:]
            m.plateau_slope, m.still_improving = plateau_trend(
                [float(r.get(self.score_column, math.nan)) for r in rows], self.stop_plan.min_rel_delta,
                self.stop_plan.min_delta)
        m.epoch, m.step, m.active = self.epoch, self.step if step is None else step, False
        self.identity_loss = self._identity_score()
        self._save_member(m, why)
        self.steps.freeze(m.k, None)

    def _members_stopped(self) -> str:
        """The run's reason when no member trains any more: the plateau rule's if it stopped one, else LM
        stuck if it stopped one, else diverged."""
        for why in ("early_stopping", "lm_stuck"):
            if any(m.stopped == why for m in self.members):
                return why
        return "diverged"

    def _diverge(self, m: Member, what: str, value: float, epoch: int, step: int, step0: int) -> None:
        """Member ``m``'s loss, validation loss or weights turned non-finite: it stops; its files keep the last
        finite state (best.pt as of the last finite best epoch, no new last.pt) and summary.json says so."""
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        m.diverged = {"what": what, "value": text, "epoch": epoch, "step": step}
        summary = m.finite_summary or {**self._summary(m, "diverged"), "epochs": 0, "train_loss": None,
                                       "val_loss": None}
        m.active, m.stopped = False, "diverged"
        m.epoch, m.step = epoch - 1, step0
        if m.best_state is not None:
            self.steps.freeze(m.k, m.best_state)
        if m.run_dir is not None:
            if m.best_state is not None and math.isfinite(m.best_loss) and all(
                    bool(torch.isfinite(v).all()) for v in m.best_state.values() if v.is_floating_point()):
                m.save_best(self.steps.models[m.k])
            ckpt_io.write_summary(m.run_dir, {**summary, "stopped": "diverged", "diverged": m.diverged})

    def member_result(self, m: Member) -> FitResult:
        model = self.steps.member_model(m.k)
        if "split" in self.split_extra:  # as load_model gives it from the checkpoint: vp-rollout labels rows by it
            model.training_split = self.split_extra["split"]
            model.training_split_data = self.split_extra["split_data"]
        if "ancestors" in self.split_extra:  # the models it was fine-tuned from (init_from): what they trained on
            model.training_ancestors = self.split_extra["ancestors"]
        trained_on = {k: self.split_extra[k] for k in SYSTEM_KEYS if k in self.split_extra}
        if trained_on:  # as load_model gives it: vp-rollout checks the step and the system
            model.trained_on = trained_on  # type: ignore[assignment]  # a plain attribute, as load_model sets it
        return FitResult(
            run_dir=m.path, model=model, epochs=self.epoch_of(m), steps=self.step_of(m),
            train_loss=float(m.last_train), val_loss=float(m.last_val), best_loss=float(m.best_loss),
            best_epoch=int(m.best_epoch), wall_time=self.wall(), n_params=int(self.n_params), device=str(self.device),
            dtype=self.plan.dtype, stopped=m.stopped, history=list(m.history),
            monitor=self.stop_plan.monitor if self.val_set is not None else "train_loss",
            stop_clock=self.stop_clock if m.stopped == "time_limit" else None, best_state=m.best_state,
            still_improving=m.still_improving if m.stopped == "early_stopping" else None,
            identity_loss=float(self.identity_loss),
        )

    # -- the loop ----------------------------------------------------------------------------------

    def _epochs_left(self) -> int | None:
        return None if self.stop_plan.epochs is None else max(self.stop_plan.epochs - self.epoch, 0)

    def _progress_total(self) -> tuple[int | None, str]:
        """What the progress bar counts, and how many are left: the steps of a step budget (``max_steps``, at
        most what the epochs left allow), else the epochs."""
        epochs, budget = self._epochs_left(), self.stop_plan.max_steps
        if budget is None:
            return epochs, "epochs"
        left = max(budget - self.step, 0)
        if epochs is not None:
            left = min(left, epochs * self.steps.steps_per_epoch - self.steps.batch_in_epoch)
        return left, "steps"

    def _make_sinks(self, m: Member) -> None:
        """``m``'s tracking sinks; the time they take to set up (e.g. MLflow's first connection and imports)
        is not the run's: ``wall_time`` and ``cpu_time`` leave it out (and ``cpu_time`` the sinks' calls:
        ``Member.sink_cpu``)."""
        t0, c0 = time.perf_counter(), process_cpu()
        m.sinks = make_sinks(self.plan.output.logger, self.stop_plan.monitor, self.ensemble, m, self.record_values)
        self.t_start += time.perf_counter() - t0
        m.sink_cpu += process_cpu() - c0

    def _start_files(self) -> None:
        if not self.dist.is_main or self.out is None:
            for m in self.members:
                if self.dist.is_main:
                    self._make_sinks(m)
                else:
                    m.sinks = []
            return
        from .._io import remove_orphans

        self.out.mkdir(parents=True, exist_ok=True)
        clear_complete(self.out)  # unfinished until it ends by its own rule (vpintegrator.rundir.COMPLETE)
        if self.ensemble:
            for name in ("config.toml", ENSEMBLE_STATE, "ensemble.csv", "ensemble.md", "selected.json"):
                remove_orphans(self.out / name)
            ckpt_io.write_config(self.out, self.record_values)
        for m in self.members:
            path = m.path
            assert path is not None  # a member's directory: out itself, or out/member-K-seed-S
            path.mkdir(parents=True, exist_ok=True)
            clear_complete(path)
            for name in ("config.toml", "log.csv", "summary.json", "last.pt", "best.pt"):
                remove_orphans(path / name)  # temporary files of a killed earlier invocation
            ckpt_io.write_config(path, self.steps.member_record(m))
            m.start_log()  # the rows up to the checkpoint; epochs are appended from here
            self._make_sinks(m)

    def run(self):
        """Train; a [`FitResult`][vpintegrator.training.FitResult] (with ``members`` for an ensemble)."""
        self.t_start = time.perf_counter()
        self.c_start = process_cpu()
        show = self.progress and self.dist.is_main
        try:
            self._start_files()
            total, self.progress_unit = self._progress_total()
            with StopRequest() as self.stop, progress_bar(show, total, self.stop_plan.time_limit or self.stop_plan.cpu_time_limit,
                                                          self.progress_unit) as bar:
                stopped = self._loop(bar)
            self.identity_loss = self._identity_score()
            for m in self.members:
                if m.active:  # the others were written when they stopped
                    m.stopped = stopped
                    if m.run_dir is not None:
                        ckpt_io.write_summary(m.run_dir, self._summary(m, stopped))
        finally:
            for m in self.members:
                m.close()  # after the final files: a tracking sink takes them as artifacts
        result = self._ensemble_result(stopped) if self.ensemble else self._single_result(stopped)
        self._write_complete(stopped)  # last: an interrupted or diverged run (raised above) has no record
        return result

    def _write_complete(self, stopped: str) -> None:
        """The completion records (``vpintegrator.rundir.write_complete``), after every other file: each
        member's, then the ensemble directory's."""
        if self.out is None or not self.dist.is_main:
            return
        for m in self.members:
            if m.run_dir is not None and m.path != self.out:
                write_complete(m.run_dir, m.stopped or stopped, self.epoch_of(m))
        write_complete(self.out, stopped, self.epoch)

    def _single_result(self, stopped: str) -> FitResult:
        m = self.members[0]
        if m.diverged is not None:
            d, optim = m.diverged, self.plan.optim
            if optim.name == "lm":
                hint, key = f"raise lm_lambda (now {optim.lm.lam:g}) or check the data", "lm_lambda"
            else:
                lr_key = "finetune_lr" if optim.fine_tunes else "lr"
                hint, key = f'lower {lr_key} (now {optim.rates[0]:g}) or use optimizer = "lm"', lr_key
            raise VPIntegratorError(f"training diverged: {_PHRASE[d['what']]} {d['value']} at epoch {d['epoch']}, "
                                    f"step {d['step']}; {hint}", key=key)
        result = self.member_result(m)
        if stopped == "interrupted":
            where = f"; saved {self.out / 'last.pt'}, resume from {self.out}" if self.out else ""
            raise TrainingInterrupted(
                f"training interrupted at epoch {self.epoch} (+{self.steps.batch_in_epoch} batches){where}", result
            )
        return result

    def _ensemble_result(self, stopped: str) -> FitResult:
        result = finish_ensemble(self.members, [self.member_result(m) for m in self.members], self.stop_plan.monitor,
                                 self.plan.optim.name, self.out, self.val_set is not None, self.name, self.epoch,
                                 stopped, self.wall(), str(self.device), self.plan.dtype)
        if stopped == "interrupted":
            where = (f" (+{self.steps.batch_in_epoch} batches); saved {self.out / ENSEMBLE_STATE}, resume from "
                     f"{self.out}") if self.out else ""
            raise TrainingInterrupted(
                f"ensemble training interrupted at epoch {self.epoch}{where}",
                result._ref(),
            )
        if all(m.diverged is not None for m in self.members):
            d = self.members[0].diverged
            assert d is not None
            optim = self.plan.optim
            hint, key = ((f"raise lm_lambda (now {optim.lm.lam:g}) or check the data", "lm_lambda")
                         if optim.name == "lm" else (f"lower lr (now {optim.lr:g})", "lr"))
            raise VPIntegratorError(
                f"training diverged: every member of the ensemble has a non-finite loss (member 0 at epoch "
                f"{d['epoch']}, step {d['step']}); {hint}", key=key
            )
        return result

    def _train_epoch(self) -> tuple[list[float], torch.Tensor] | None:
        """One epoch of optimiser steps, from the strategy's position in it: (per member its training loss,
        the per-step losses (steps, n)), or None when a stop request landed mid-epoch (the files then saved,
        resumable exactly). Counts the steps; asks for mid-epoch checkpoints (every ``checkpoint_seconds``)
        and writes them; a model whose loss decides the run (``together``) raises ``Diverged`` at its first
        non-finite loss (read on the host only where the strategy does: each LM step, a checkpoint, the
        epoch's end)."""
        s = self.steps
        acc, losses = s.begin_epoch()
        first, step0, last = s.batch_in_epoch, self.step, s.steps_per_epoch
        end, self.short_epoch = last, False
        for b in range(first, last):
            save = self.checkpoint_due()
            reported, agreed = s.step(b, self.stop.requested, save)
            self.step += 1
            losses[b] = reported
            acc += reported.double()
            s.batch_in_epoch = b + 1
            if s.together and s.host_losses and not math.isfinite(float(reported)):
                raise Diverged("loss is", float(reported), self.epoch + 1, self.step)
            if self.plan.optim.name == "lm" and self._stuck() and b + 1 < last:
                end, self.short_epoch = b + 1, True  # every training member's LM is stuck: the epoch ends here
                break
            budget = self.stop_plan.max_steps
            if budget is not None and self.step >= budget and b + 1 < last:
                end, self.short_epoch = b + 1, True  # the step budget: exactly max_steps steps (every rank alike)
                break
            if agreed is None and b + 1 < last and not self.stop.requested and any(self._over_budget()):
                end, self.short_epoch = b + 1, True  # one process: a budget ran out; the epoch ends here, short
                break
            stop_now, save_now = agreed if agreed is not None else (self.stop.requested, save)
            if (stop_now or save_now) and b + 1 < last:
                if s.together:
                    self._check_losses(acc, losses, first, b + 1, step0)
                    if not s.finite_weights()[0]:
                        raise Diverged("weights are", math.nan, self.epoch + 1, self.step)
                s.pause(acc, losses[: b + 1])
                self.save()
                if stop_now:
                    return None
        if s.together:
            self._check_losses(acc, losses, first, end, step0)
        losses = losses[:end]
        train = s.end_epoch(acc, losses)
        if s.together and not math.isfinite(train[0]):
            raise Diverged("training loss is", train[0], self.epoch + 1, self.step)
        self.epoch += 1
        s.batch_in_epoch = 0
        return train, losses

    def _stuck(self) -> bool:
        """Note the members whose Levenberg–Marquardt got stuck at this step (``stuck_at``); whether every
        member still training is stuck (the epoch then ends here)."""
        active = [m for m in self.members if m.active]
        for m, stuck in zip(self.members, self.steps.stuck()):
            if stuck and m.active and m.k not in self.stuck_at:
                self.stuck_at[m.k] = self.step
        return bool(self.stuck_at) and all(m.k in self.stuck_at for m in active)

    def _check_losses(self, acc: torch.Tensor, losses: torch.Tensor, first: int, end: int, step0: int) -> None:
        """One model's loss sum ``acc`` (1,) (one host sync); when not finite, raise ``Diverged`` naming the
        first non-finite of the steps ``first`` to ``end`` of this epoch (steps ``step0 + 1`` on)."""
        if math.isfinite(float(acc[0])):
            return
        bad = (~torch.isfinite(losses[first:end, 0])).nonzero()
        if len(bad):
            k = int(bad[0, 0])
            raise Diverged("loss is", float(losses[first + k, 0]), self.epoch + 1, step0 + k + 1)

    def _over_budget(self, epoch_wall: float = 0.0, epoch_cpu: float = 0.0) -> tuple[bool, bool]:
        """(over the CPU budget, over the wall budget) of this invocation, counting ``epoch_wall`` and
        ``epoch_cpu`` seconds more (after an epoch: the next one's, judged by the last; mid-epoch: none)."""
        cfg = self.stop_plan
        cpu = cfg.cpu_time_limit is not None and (process_cpu() - self.cpu_start) + epoch_cpu > cfg.cpu_time_limit
        wall = (cfg.time_limit is not None
                and (time.perf_counter() - self.invocation_start) + epoch_wall > cfg.time_limit)
        return cpu, wall

    def _judge_start(self) -> None:  # the initial weights judged and logged as epoch 0 (train_loss NaN beside val)
        held, rollout = self.val_set is not None, self.rollout_validator is not None
        losses = self.steps.val_losses(None if held else self.train_set)
        for m, loss, score, lr in zip(self.members, losses, self.steps.val_rollouts() if rollout else losses,
                                      self.steps.lrs()):
            m.judge(0, score, functools.partial(self.steps.member_state, m.k))
            row = {"epoch": 0, "train_loss": math.nan if held else loss, "val_loss": loss if held else math.nan,
                   "lr": lr, "seconds": self.wall(), ckpt_io.CPU_COLUMN: self.cpu()}
            m.log({**row, ckpt_io.ROLLOUT_COLUMN: score} if rollout else row)

    def _loop(self, bar) -> str:
        cfg = self.stop_plan
        self.invocation_start = time.perf_counter()
        self.cpu_start = process_cpu()
        self.steps.train_mode()
        if self.stop_plan.judge_start and self.epoch == 0 and self.steps.batch_in_epoch == 0:
            self._judge_start()
        while (left := self._epochs_left()) is None or left > 0:
            t_epoch, cpu_epoch = time.perf_counter(), process_cpu()
            step0 = self.step
            try:
                out = self._train_epoch()
            except Diverged as err:  # a single model's loss (every DDP rank at the same step)
                for m in self.members:
                    if m.active:
                        self._diverge(m, err.what.split()[0], err.value, err.epoch, err.step, step0)
                return "diverged"
            if out is None:
                return "interrupted"
            train, step_losses = out
            with label("vp/validate"):
                vals = self.steps.val_losses()
            rollouts = [math.nan] * len(self.members)
            if self.rollout_validator is not None:
                with label("vp/validate_rollout"):
                    rollouts = self.steps.val_rollouts()
            finite_w = self.steps.finite_weights()
            lrs, seconds, cpu_seconds = self.steps.lrs(), self.wall(), self.cpu()  # LM: each member's own damping
            infos = []
            for m in self.members:
                if not m.active:
                    continue
                k = m.k
                if not math.isfinite(train[k]):  # the ensemble's members (a single model raised Diverged)
                    col = step_losses[:, k]
                    bad = (~torch.isfinite(col)).nonzero()
                    if len(bad):
                        first = int(bad[0, 0])
                        self._diverge(m, "loss", float(col[first]), self.epoch, step0 + first + 1, step0)
                    else:  # LM: the full training loss after the epoch
                        self._diverge(m, "training", train[k], self.epoch, self.step, step0)
                    continue
                if self.val_set is not None and not math.isfinite(vals[k]):
                    self._diverge(m, "validation", vals[k], self.epoch, self.step, step0)
                    continue
                if not finite_w[k]:
                    self._diverge(m, "weights", math.nan, self.epoch, self.step, step0)
                    continue
                m.last_train, m.last_val = train[k], vals[k]
                monitor = vals[k] if self.val_set is not None else train[k]
                if self.rollout_validator is not None:
                    monitor = rollouts[k]
                m.judge(self.epoch, monitor, functools.partial(self.steps.member_state, k))
                lr = lrs[k]
                row = {"epoch": self.epoch, "train_loss": train[k], "val_loss": vals[k], "lr": lr, "seconds": seconds,
                       ckpt_io.CPU_COLUMN: cpu_seconds}
                if self.rollout_validator is not None:
                    row[ckpt_io.ROLLOUT_COLUMN] = rollouts[k]
                m.log(row)
                m.finite_summary = self._summary(m, "diverged")
                model = self.steps.member_model(k) if self.callback is not None else None
                infos.append(EpochInfo(self.epoch, self.step, train[k], vals[k], lr, seconds,
                                       val_rollout=rollouts[k], model=model, member=k))
            if bar is not None and infos:
                bar(min(infos, key=lambda i: i.train_loss), time.perf_counter() - self.invocation_start,
                    self.step - step0 if self.progress_unit == "steps" else 1)
            if not any(m.active for m in self.members):
                return self._members_stopped()
            # stop conditions, agreed on by every rank
            over_cpu, over_wall = self._over_budget(time.perf_counter() - t_epoch, process_cpu() - cpu_epoch)
            asked = False
            if self.callback is not None:
                asked = bool(self.callback(infos if self.ensemble else infos[0]))
            flags = torch.tensor(
                [float(self.stop.requested), float(over_cpu or over_wall), float(asked), float(over_cpu)],
                dtype=torch.float64, device=self.device,
            )
            ddp.all_reduce(flags, self.dist, op="max")
            finished = self._epochs_left() == 0
            reason = None
            if flags[0] > 0:
                reason = "interrupted" if not finished else "epochs"
            else:
                for m in self.members:  # LM stuck: before the epochs and the plateau rule (it is neither)
                    if m.active and m.k in self.stuck_at:
                        self._stop_member(m, "lm_stuck", self.stuck_at[m.k])
                if finished and any(m.active for m in self.members):
                    reason = "epochs"
                elif cfg.patience > 0:
                    for m in self.members:
                        if m.active and m.bad_epochs >= cfg.patience:
                            self._stop_member(m, "early_stopping")
                if reason is not None:
                    pass
                elif not any(m.active for m in self.members):
                    reason = self._members_stopped()
                elif flags[2] > 0:
                    reason = "callback"
                elif cfg.max_steps is not None and self.step >= cfg.max_steps:
                    reason = "steps"
                elif flags[1] > 0:
                    reason = "time_limit"
                    self.stop_clock = "cpu" if flags[3] > 0 else "wall"
            if reason is not None or self.epoch % self.plan.output.checkpoint_every == 0 or self.checkpoint_due():
                with label("vp/checkpoint"):
                    self.save()
            if reason is not None:
                return reason
        self.save()
        return "epochs"
