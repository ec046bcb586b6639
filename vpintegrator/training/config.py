"""The training configuration: [`TrainConfig`][vpintegrator.training.TrainConfig], on the one config layer (``vpintegrator.config``).

The ``vp-train`` TOML is flat (the keys are the fields of [`TrainConfig`][vpintegrator.training.TrainConfig]) plus a ``[model]`` table.
Each key is declared once (``vpintegrator.config.key``: type, bounds or choices, flag, whether a resumed
run may change it) and documented once, in [`TrainConfig`][vpintegrator.training.TrainConfig]'s
``Parameters`` section; its check, its ``vp-train`` flag and that flag's help (the first sentence of its
entry) derive from these, so a new key is one field and one entry. A config is checked when it is built; ``TrainConfig.replace``
checks the keys it changes. What needs the files (the data exist and agree, the model's hyper-parameters,
the run directory) is checked when [`fit`][vpintegrator.training.fit] starts. Errors are one line and
carry the offending key (``VPIntegratorError.key``), which a CLI renders as its flag.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..arrays import DTYPES
from .. import config as config_layer
from ..config import Config, declared, key
from ..data.split_rule import DEFAULT_SPLIT
from ..device import check_device_name
from ..errors import VPIntegratorError
from ..fastpath import FAST_STEPS as _FAST_STEPS, check_fast_step

#: the values of ``normalise`` (``vpintegrator.models.normalise.NORMALISE_MODES``; written here, torch-free)
NORMALISE_MODES = ("auto", "on", "off", "affine", "symplectic", "uniform")

__all__ = ["TrainConfig", "merge_overrides", "DTYPES", "MONITORS", "SCHEDULE_PER", "RESUMABLE_KEYS", "OPTIMIZERS",
           "SCHEDULERS", "FAST_STEPS", "list_optimizers", "list_schedulers"]

# -- the names a config chooses from: optimisers, learning-rate schedules, fast-step modes (torch-free, so
# that vp-train --help lists them without importing torch; make_optimizer, make_scheduler and
# vpintegrator.training.fast_step build what they name) -----------------------------------------------

_ADAM_DEFAULTS = {"betas": (0.9, 0.99), "eps": 1e-8}
#: torch optimisers by name: the ``torch.optim`` class and our defaults (under the config's ``optimizer_kwargs``)
OPTIMIZERS: dict[str, tuple[str, dict[str, Any]]] = {
    "adam": ("Adam", _ADAM_DEFAULTS),
    "adamw": ("AdamW", _ADAM_DEFAULTS),
    "sgd": ("SGD", {}),
    "rmsprop": ("RMSprop", {}),
    "lbfgs": ("LBFGS", {}),
}
#: the learning-rate schedules (their shapes are in ``vpintegrator.training.optim``)
SCHEDULERS = ("exponential", "cosine", "constant")
#: the values of the ``fast_step`` config key
FAST_STEPS = _FAST_STEPS  # vpintegrator.fastpath's: the same names in vp-rollout


def list_optimizers() -> list[str]:
    """Names accepted by ``TrainConfig.optimizer``: the torch ones of [`make_optimizer`][vpintegrator.training.make_optimizer] and ``lm``
    ([`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt] on window subsamples, driven by ``fit``)."""
    return sorted([*OPTIMIZERS, "lm"])


def list_schedulers() -> list[str]:
    """Names accepted by [`make_scheduler`][vpintegrator.training.make_scheduler]."""
    return sorted(SCHEDULERS)

MONITORS = ("val_loss", "val_rollout")
#: how the trajectories are split (``split_by``): by initial condition, or holding out parameters of a parametric data set
SPLITS = ("initial_conditions", "parameters_interpolation", "parameters_extrapolation")
SCHEDULE_PER = ("step", "epoch")
#: the values of the ``logger`` key (``vpintegrator.training.sinks``)
LOGGERS = ("none", "tensorboard", "mlflow")



# -- the checks of single keys that are more than a type, bounds or choices ---------------------------


def _bad(name: str, expected: str, got: Any) -> VPIntegratorError:
    return VPIntegratorError(f"{name} must be {expected}; got {got!r}", key=name)


def _check_data(value: Any) -> list[str]:
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise VPIntegratorError(
            f"data must list at least one HDF5 file; got {value!r} (set data = [...] in the TOML or give the data "
            "files)", key="data"
        )
    if not all(isinstance(p, (str, os.PathLike)) for p in value):
        raise _bad("data", "a list of file paths", value)
    seen: dict[tuple[int, int], str] = {}
    for p in value:  # the same file twice would put copies of training trajectories in the held-out split
        try:
            st = os.stat(p)
        except (OSError, ValueError):
            continue  # a missing file is reported where the data is read
        if (st.st_dev, st.st_ino) in seen:
            raise VPIntegratorError(
                f"data lists the same file twice: {seen[(st.st_dev, st.st_ino)]} and {p} (its trajectories would "
                "be split as if they were different ones, copies in training and test); give each file once",
                key="data")
        seen[(st.st_dev, st.st_ino)] = str(p)
    return [str(p) for p in value]


def _check_model(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise VPIntegratorError(
            f"model needs a name (one of the registered models, e.g. vpt, vpff, st); got {value!r} (set model, or "
            "add [model] name = ... to the TOML)", key="model"
        )
    return value


def _check_out(value: Any) -> Any:
    if not isinstance(value, (str, os.PathLike)):
        raise _bad("out", "a directory path", value)
    return value


def _check_device(value: Any) -> str:
    if not isinstance(value, str):
        raise _bad("device", "auto, cpu, cuda or cuda:N", value)
    check_device_name(value)
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _check_seeds(value: Any) -> list[int]:
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not value or not all(_is_int(s) and 0 <= s < 2**63 for s in value):
        raise _bad("seeds", "a non-empty list of non-negative integers (below 2**63)", value)
    value = [int(s) for s in value]
    if len(set(value)) != len(value):
        raise _bad("seeds", "distinct integers (two equal seeds train the same member twice)", value)
    return value


def _check_observe(value: Any) -> str | None:
    from ..data.observation import check_observe_spec
    from ..reduction import observation as _reductions  # noqa: F401  (registers psd:K, psd_balanced:K, file:PATH)

    return check_observe_spec(value)


def _check_init_from(value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise _bad("init_from", "a model file, run directory or pretrained:<name>", value)
    return str(value)


@dataclass(eq=True)
class TrainConfig(Config):
    """Everything that defines a training run (the ``vp-train`` TOML, flat, plus a ``[model]`` table).

    Parameters
    ----------
    data : list of str
        HDF5 trajectory files (several shards are concatenated along n_traj). Relative paths are resolved
        against the working directory.
    model : dict
        ``{"name": ..., **kwargs}`` for
        [`vpintegrator.models.build_model`][vpintegrator.models.build_model]; the name is a registry name or
        ``"package.module:ClassName"`` of your own model class (recorded as ``model_class``). Keys left out
        take the registered defaults of that architecture
        ([`vpintegrator.models.default_model_config`][vpintegrator.models.default_model_config]: the paper's
        values), ``dim`` the data's. The windows use the model's ``seq_len`` and ``pred_window``.
    out : str, optional
        Run directory to create. Default ``runs/<model>-<YYYYmmdd-HHMMSS>``; it must not hold a run already.
    epochs : int, optional
        Total epochs (with --resume: the total, not the extra). An epoch visits every training window once.
        At least one of ``epochs``, ``time_limit`` and ``cpu_time_limit`` is needed.
    time_limit : float, optional
        Wall-time budget in seconds for this invocation (the progress bar's ETA honours it). Checked after
        each epoch: training stops before an epoch that would, judging by the last one, end past the budget.
        In one process (not under torchrun) it is also checked after every optimiser step: an epoch the
        budget runs out in ends there, a short epoch (its training loss the mean over the steps taken; LM:
        the full one), validated and judged like any other, and the run stops; so a budget is overrun by at
        most one optimiser step and one validation, however long an epoch is (at least one step runs).
        Under torchrun the ranks agree after each epoch only.
    cpu_time_limit : float, optional
        CPU-time budget in seconds for this invocation (process CPU seconds, all threads; independent of the
        machine's load). The process's CPU time (every thread's, as ``time.process_time``), checked like
        ``time_limit``. Unlike wall time it does not shrink when other processes load the machine, so a
        budget buys the same training on a busy box; give ``time_limit`` too as a wall-time ceiling.
    batch_size : int
        Global batch size (windows per optimiser step, summed over DDP ranks).
    lr : float
        Initial learning rate of the schedule.
    lr_min : float
        Final learning rate of the schedule.
    optimizer : str
        The optimiser, one of [`list_optimizers`][vpintegrator.training.list_optimizers]; lm is
        Levenberg-Marquardt: an epoch is then --lm-iters-per-epoch iterations, log.csv's lr column is the
        damping lambda; float64 recommended; no torchrun. ``optimizer_kwargs`` go to the torch optimiser on
        top of our defaults (adam/adamw: betas (0.9, 0.99), eps 1e-8).
    scheduler : str
        Learning-rate schedule from --lr to --lr-min. ``exponential`` (lr → lr_min geometrically, then
        held), ``cosine`` (to lr_min, then held) or ``constant``.
    schedule_per : "step" or "epoch"
        Advance the schedule per step or epoch. After every optimiser step is the reference.
    decay_epochs : float, optional
        Epochs over which the learning rate reaches --lr-min. Default ``epochs``. GML's scripts computed the
        decay from the epoch count but applied it per step; ``decay_epochs = epochs / steps_per_epoch``
        reproduces that.
    stride : int
        Distance between window starts.
    val_fraction : float
        Share of trajectories held out for validation (split by trajectory, by ``split_seed``; 0: none).
    test_fraction : float
        Share of trajectories held out for testing (never trained on; vp-rollout's default trajectories).
        Default 0.1; 0 for none. Split by trajectory with the same permutation (``split_seed``), disjoint from the
        validation ones (``vpintegrator.data.windows.split_train_val_test``), and never used for training,
        early stopping or model selection. ``val_fraction + test_fraction`` must leave training
        trajectories. The split (trajectory indices into the data, several files concatenated in the order
        given) is recorded as ``split = {"train", "val", "test"}`` in ``summary.json`` and in every
        checkpoint (``best.pt``, ``last.pt``, every ensemble member's); ``vp-rollout`` rolls out a model's
        test trajectories by default. A run made before this key existed resumes with ``test_fraction = 0``
        (its own split). The split depends on the data and ``split_seed`` only, never on ``seed``: runs of
        several seeds on one file share their test (and validation) trajectories.
    split_by : str
        Split the trajectories by initial condition, or hold out parameters of a parametric data set:
        parameters_interpolation (a cube inside the box) or parameters_extrapolation (the box's ends).
        ``"initial_conditions"`` (default) is the permutation above; for a data set with
        per-trajectory parameters (``/params``), ``"parameters_interpolation"`` makes the test trajectories
        those whose parameters lie in a cube inside the parameter box drawn with ``split_seed``,
        ``"parameters_extrapolation"`` those at the box's ends, with the same ``test_fraction``,
        ``val_fraction`` and ``split_seed``
        (``vpintegrator.rollout.splits.parameter_split``); the record gains ``split_by``.
    patience : int
        Early stopping patience in epochs (0: off). Training stops after this many epochs without the
        validation loss improving by more than ``min_delta``.
    min_delta : float
        Early stopping: the least improvement of the validation loss that counts.
    min_rel_delta : float
        Early stopping: the least *relative* improvement that counts (a number in [0, 1); default 0). An epoch
        improves when its score is below ``best · (1 − min_rel_delta) − min_delta``. With ``patience`` this is
        the plateau rule the studies stop by (``vp-study ... --budget plateau``): the run stops once its
        validation score has not fallen by ``min_rel_delta`` of itself for ``patience`` epochs, an epoch count
        that no load on the machine moves (``summary.json`` ``stopped = "early_stopping"``). At that stop the
        score's trend over those ``patience`` epochs is judged too: ``summary.json`` ``plateau_slope`` (the
        least-squares slope of log(score) per epoch) and ``still_improving: true`` when it still falls clearly
        (2 standard errors below zero, and by the rule's own threshold over the window; patience 3 or more).
        The run stops either way; the study tables count the runs stopped still improving.
    max_steps : int, optional
        Stop after exactly this many optimiser steps (counted over every invocation of the run; ``stopped =
        "steps"``): a budget in steps, which no load on the machine moves. The epoch it runs out in ends there,
        short (validated and judged like any epoch; ``summary.json`` ``short_epoch``); a resume with a larger
        budget goes on with the next epoch. The progress bar then counts steps. Default none.
    loss : str
        The loss and validation score: ``"relative"``, ``‖pred − target‖ / ‖target‖`` over a batch, or its square
        ``"relative_squared"`` (the symplectic autoencoder's; a torch optimiser, not an ensemble).
    judge_start : bool
        Judge the initial weights as epoch 0 (``log.csv``'s row 0): a run that never beats them keeps them.
    seed : int
        Seed for initialisation and data order (the train/validation/test split is split_seed's). The model
        initialisation and the order of the training windows; not the split (``split_seed``), so runs of
        several seeds on one data file share their validation and test trajectories.
    split_seed : int
        Seed of the train/validation/test split (apart from seed: every seed shares it). The split is a function
        of the data (its number of trajectories; with ``split_by = "parameters_*"`` their parameters) and of
        this seed only, as scikit-learn's ``train_test_split(random_state=...)``: two runs with different
        ``seed`` on one file share their test trajectories. Recorded as ``split_seed`` in ``summary.json`` and
        every checkpoint, beside the ``split`` itself. A run made before this key existed (its split was
        ``seed``'s) resumes with ``split_seed = seed``: its own split.
    device : str
        auto, cpu, cuda or cuda:N. ``auto`` is cuda if available.
    dtype : "float32" or "float64"
        Floating-point precision.
    fast_step : "auto", "off", "graph" or "compile"
        auto: the whole step as one CUDA graph where possible; off: eager; graph; compile: torch.compile,
        graph-captured on CUDA. How a torch optimiser's step runs (``vpintegrator.training.fast_step``):
        ``graph`` records the whole step (batch gather, forward, loss, backward, optimiser) in a CUDA graph
        and replays it (CUDA, one process, adam/adamw/rmsprop); ``compile`` runs the loss through
        ``torch.compile`` first (and captures it where a graph can run; an ensemble's vmapped step of all its
        members compiles as one, through the component-wise layers); ``off`` is the eager step; ``auto``
        (default) is ``graph`` where it can run, else ``off``. The losses equal the eager path's to float
        rounding. The same key of ``vp-rollout`` takes the same names (``true``/``false`` of older rollout
        configs are auto/off).
    checkpoint_every : int
        Write last.pt, best.pt and summary.json every N epochs (and always at the end).
    checkpoint_seconds : float
        Also write last.pt once this many seconds passed since the last write. The write happens mid-epoch
        if need be (resumable exactly), whichever of the two comes first: a ``kill -9`` loses at most
        ``checkpoint_every`` epochs or ``checkpoint_seconds`` seconds of training.
    lm_windows : int
        lm: training windows per random subsample. ``optimizer = "lm"`` only (Levenberg–Marquardt, see
        [`fit`][vpintegrator.training.fit]), as the other ``lm_*`` keys. With ``lm`` an epoch is
        ``lm_iters_per_epoch`` iterations, not a pass over the data; ``batch_size`` then only sets the chunk
        size of the loss evaluations, and ``lr``, ``lr_min``, the scheduler and ``optimizer_kwargs`` are not
        used.
    lm_resample_every : int
        lm: redraw the subsample every N iterations.
    lm_iters_per_epoch : int
        lm: iterations per epoch.
    lm_lambda : float
        lm: initial damping lambda. A step rejected with the damping at its cap (1e12) restarts it from this value,
        at most twice (``LevenbergMarquardt.RESTARTS``); the next time at the cap the run stops with ``stopped =
        "lm_stuck"`` (no step can be taken: not a plateau). ``summary.json`` ``lm_restarts`` counts the restarts.
    lm_check_windows : int
        lm: windows of a check set a step must not worsen (0: no check). With each subsample, draw this many
        other windows; a step is accepted only if it lowers the subsample's loss *and* does not raise the
        loss of these (guards against steps that fit the subsample and wreck the rest).
    init_scale : float
        Factor on the freshly initialised weights. Orthogonality-constrained ones are excepted; values below
        1 start the network closer to a map without nonlinear effects.
    monitor : "val_loss" or "val_rollout"
        What best.pt tracks: the validation loss or the mean relative error of a free rollout of the
        validation trajectories over --val-rollout-steps steps. ``val_rollout``: the rollout runs
        non-overlapping windows from the trajectories' first ``seq_len`` states, the reference continued
        beyond the data with the data's own generator; errors are capped at 10 (a blown-up rollout scores
        10). Logged in log.csv's extra ``val_rollout`` column. The training loss alone does not rank
        rollouts (docs/results.md).
    val_rollout_steps : int
        monitor val_rollout: rollout length in steps (500: t = 100 at the paper's h = 0.2).
    val_rollout_error : "mean" or "final"
        monitor val_rollout: the error averaged over the rollout, or at its last step (the validation
        horizon). Either is the relative error, averaged over the validation trajectories.
    val_rollout_drift_weight : float
        monitor val_rollout: add this weight times the invariants' maximum relative drift (0: error alone;
        rigid-body targets 0.05/1e-3: 50). For each validation trajectory the drift is the largest maximum
        relative drift ``max_t |I(ŷ_t) − I(y_0)| / |I(y_0)|`` over the system's invariants (capped at 10),
        averaged over the trajectories. With weight ``e/b`` the score is ``e`` times (error/``e`` +
        drift/``b``), so targets "error ≤ e and drift ≤ b" weigh alike. The system must evaluate its
        invariants on torch tensors (``torch_invariants``).
    ensemble : int, optional
        Train N members (seeds SEED, SEED+1, ...; or --set seeds=[...]) at once in this process, OUT getting
        member_<k>_seed_<s>/ run directories, ensemble.csv/.md and best/ (the member with the best
        validation score); any optimizer but lbfgs (lm included); not resumable. Member ``k`` has seed
        ``seed + k`` (or ``seeds[k]``) for its initialisation and its data order
        (``vpintegrator.training.ensemble``); the train/validation split is ``split_seed``'s, as for every run;
        the selected member is recorded in ``selected.json``. Torch optimisers with elementwise updates, or
        ``lm`` (each member its own subsamples and λ).
    seeds : list of int, optional
        The members' seeds (an ensemble of ``len(seeds)``; with ``ensemble`` too, the lengths must agree).
    unroll : int
        Windows of free rollout per training target (1: none). With k > 1 the model is iterated k times on
        its own predictions from each input window (``vpintegrator.training.single.Unrolled``) and the loss (training
        and validation) compares the k·pred_window predicted states with the data's. Costs k forward passes
        per window; not with ``ensemble``.
    init_from : str, optional
        Start from the weights of this model (.pt file, run directory or pretrained:NAME). Instead of a fresh
        initialisation (``init_scale`` is then not applied): fine-tuning, e.g. a second phase with ``unroll
        > 1`` after a one-window phase. Its architecture must equal the configured model's (every
        hyper-parameter); the optimiser starts afresh. Not with ``ensemble``. With a torch optimiser the run
        fine-tunes at ``finetune_lr`` (default ``lr_min``), not at ``lr``: see ``finetune_lr``.
    finetune_lr : float, optional
        With init_from: the learning rate to fine-tune at (default lr_min, the schedule's final rate). A fresh
        optimiser at the from-scratch ``lr`` (1e-2 in the shipped Adam configs) throws the pretrained
        weights away in a few steps (the loss of ``pretrained:rigid_body_vpt`` on its own kind of data went
        from 4.5e-5 to 0.59 in one epoch), so with ``init_from`` the schedule runs from ``finetune_lr`` to
        ``min(lr_min, finetune_lr)`` and ``lr`` is not used; left out, it is ``lr_min`` (a constant rate: where
        a from-scratch schedule ends; ``1e-4 · lr`` when ``lr_min`` is 0), and one warning line says so. Not used by ``optimizer = "lm"``
        (Levenberg–Marquardt accepts only steps that lower the loss) or without init_from.
    observe : str, optional
        Train on observed channels only: q, p, names (z1,z2), indices (0,1), basis:K, or a reduction: psd:K,
        psd_balanced:K or file:PATH. basis:K and psd:K (the cotangent-lift PSD basis of K = 2n components;
        psd_balanced:K the balanced lift, ``vpintegrator.reduction.psd``) are fitted on the training split; file:PATH is a PSD basis or symplectic autoencoder file (``vpintegrator.reduction``). ``vpintegrator.data.observation``: the windows hold the observed channels of the
        data's states (a file that holds observed channels only is used as it is, and must carry the same
        observation); the model's ``dim`` is the observed one. The observation is recorded in every checkpoint
        (``trained_on["observation"]``) and ``summary.json``; ``vp-rollout`` rolls the model out on the same
        observation and refuses another. Left out: the whole state.
    normalise : str
        Train and roll out in normalised coordinates y = A (x − b) (A diagonal, b and diag(A) fitted on the
        training split): auto, on, off, or a rule: affine, symplectic, uniform. Each model kind gets the
        conjugation its structure admits (``vpintegrator.models.normalise``: volume-preserving and plain
        models per-component scale and shift; symplectic ones a shift and conformally symplectic per-pair scales;
        Lie–Poisson ones, and a model that does not say what it keeps, one scale and no shift). ``auto``: only
        where the coordinates need it (a component's |mean| above 10 standard deviations, or a spread outside
        [0.01, 100]); ``on``: always; a rule the model's structure does not admit is refused. The losses (and
        the ``val_rollout`` score) are then those of the normalised states; ``summary.json`` and every
        checkpoint record what was applied (``normalisation``: ``rule``, ``shift`` b, ``scale`` diag(A)) or why
        not, and ``vp-rollout`` steps the model in its coordinates. Context models and learned vector fields
        are not normalised.
    step : float, optional
        Train at this step Δ: every (Δ / dt)-th state of the data (dt the data's step; Δ a multiple of it, else
        one line). The model's step is Δ. Default: the data's step.
    logger : "none", "tensorboard" or "mlflow", optional
        Also write per-epoch metrics to tensorboard (<run>/tensorboard/) or mlflow (extras [tensorboard],
        [mlflow]). The per-epoch log row: train and validation loss, lr, seconds, the validation rollout
        score; ``mlflow`` makes one MLflow run per run directory (the tracking URI from MLflow's own
        settings), or logs into the user's active MLflow run (``mlflow.start_run()``; an ensemble's
        members: child runs of it). Left out (None) or ``"none"``: ``log.csv`` only (``vpintegrator.training.sinks``).
    """

    data: list[str] = key(default_factory=list, check=_check_data, flag="")
    model: dict[str, Any] = key(default_factory=dict, check=_check_model, flag="")
    out: str | None = key(None, optional=True, check=_check_out, path="any", resumable=True,
                          show_default="runs/<model>-<date>-<time>")
    epochs: int | None = key(100, type=int, low=1, optional=True, resumable=True)
    time_limit: float | None = key(None, type=float, low=0, open_low=True, optional=True, resumable=True,
                                   expected="a finite number of seconds > 0", metavar="SECONDS", show_default="none")
    cpu_time_limit: float | None = key(None, type=float, low=0, open_low=True, optional=True, resumable=True,
                                       expected="a finite number of seconds > 0", metavar="SECONDS",
                                       show_default="none")
    batch_size: int = key(16384, type=int, low=1)
    lr: float = key(1e-2, type=float, low=0, open_low=True)
    lr_min: float = key(1e-6, type=float, low=0, expected="a finite number in [0, lr]")
    optimizer: str = key("adam", choices=tuple(list_optimizers()), what="optimizer")
    optimizer_kwargs: dict[str, Any] = key(default_factory=dict, type=dict, flag="")
    scheduler: str = key("exponential", choices=tuple(list_schedulers()), what="scheduler")
    schedule_per: str = key("step", choices=SCHEDULE_PER)
    decay_epochs: float | None = key(None, type=float, low=0, open_low=True, optional=True, show_default="--epochs")
    stride: int = key(1, type=int, low=1)
    val_fraction: float = key(DEFAULT_SPLIT[0], type=float, low=0, high=1, open_high=True,
                              expected="a number in [0, 1)")
    test_fraction: float = key(DEFAULT_SPLIT[1], type=float, low=0, high=1, open_high=True,
                               expected="a number in [0, 1)")
    split_by: str = key("initial_conditions", choices=SPLITS)
    patience: int = key(0, type=int, low=0, resumable=True,
                        expected="a non-negative integer (0 disables early stopping)")
    min_delta: float = key(0.0, type=float, low=0, expected="a finite number >= 0", resumable=True)
    min_rel_delta: float = key(0.0, type=float, low=0, high=1, open_high=True, expected="a number in [0, 1)",
                               resumable=True)
    max_steps: int | None = key(None, type=int, low=1, optional=True, resumable=True, show_default="none")
    loss: str = key("relative", choices=("relative", "relative_squared"))
    judge_start: bool = key(False, type=bool)
    seed: int = key(1234, type=int, low=0, high=2**63, open_high=True,
                    expected="a non-negative integer (below 2**63)")
    split_seed: int = key(DEFAULT_SPLIT[2], type=int, low=0, high=2**63, open_high=True,
                          expected="a non-negative integer (below 2**63)")
    device: str = key("auto", check=_check_device, metavar="DEVICE", resumable=True)
    dtype: str = key("float32", choices=DTYPES, expected=" or ".join(DTYPES))
    fast_step: str = key("auto", choices=FAST_STEPS, check=check_fast_step, resumable=True)
    checkpoint_every: int = key(1, type=int, low=1, resumable=True)
    checkpoint_seconds: float = key(30.0, type=float, low=0, open_low=True, resumable=True,
                                    expected="a finite number > 0 (seconds between writes of last.pt)")
    lm_windows: int = key(1024, type=int, low=1)
    lm_resample_every: int = key(10, type=int, low=1)
    lm_iters_per_epoch: int = key(10, type=int, low=1)
    lm_lambda: float = key(1e-3, type=float, low=0, open_low=True,
                           expected="a finite number > 0 (the initial Levenberg–Marquardt damping)")
    lm_check_windows: int = key(0, type=int, low=0, expected="a non-negative integer (0: no check set)")
    init_scale: float = key(1.0, type=float, low=0, open_low=True,
                            expected="a finite number > 0 (factor on the initial weights)")
    monitor: str = key("val_loss", choices=MONITORS)
    val_rollout_steps: int = key(500, type=int, low=1,
                                 expected="a positive integer (steps of the validation rollout)")
    val_rollout_error: str = key("mean", choices=("mean", "final"))
    val_rollout_drift_weight: float = key(0.0, type=float, low=0,
                                          expected="a number >= 0 (the weight of the invariant drift)")
    ensemble: int | None = key(None, type=int, low=1, optional=True, metavar="N", show_default=False,
                               expected="a positive integer (the number of members)")
    seeds: list[int] | None = key(None, optional=True, check=_check_seeds, flag="")
    unroll: int = key(1, type=int, low=1,
                      expected="a positive integer (windows of free rollout per training target; 1: none)")
    init_from: str | None = key(None, optional=True, check=_check_init_from, metavar="MODEL", show_default=False)
    finetune_lr: float | None = key(None, type=float, low=0, open_low=True, optional=True, show_default="lr_min",
                                    expected="a finite number > 0 (the learning rate with init_from)")
    observe: str | None = key(None, optional=True, check=_check_observe, metavar="SPEC", show_default="the whole state")
    normalise: str = key("auto", choices=NORMALISE_MODES, metavar="MODE")
    step: float | None = key(None, type=float, low=0, open_low=True, optional=True, metavar="DT",
                             expected="a finite number > 0 (a multiple of the data's step)",
                             show_default="the data's step")
    logger: str | None = key(None, optional=True, choices=LOGGERS, expected=" or ".join(map(repr, LOGGERS)),
                             show_default="none")

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], **overrides: Any) -> "TrainConfig":
        """Read a TOML file (a path or a shipped config's name, ``list_configs()``); ``overrides`` that are
        not ``None`` win over the file's values.

        An override ``model="vpt"`` (a string) replaces only the model name of the file's ``[model]``
        (another architecture drops the file's hyper-parameters); a dict override merges into it.
        """
        from .._shipped import config_path

        path = config_path(path)  # a file, or a shipped name (vpintegrator.training.list_configs())
        values = config_layer.read_toml(path)
        values = _run_dir_paths(values, Path(path))
        if not values:
            raise VPIntegratorError(
                f"config file {Path(path)}: empty (no keys); expected a vp-train TOML with data = [...] and a "
                "[model] table (see configs/)"
            )
        return cls.from_dict(merge_overrides(values, overrides), source=str(Path(path)))

    def _merge(self, values: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
        return merge_overrides(values, overrides)

    # -- the rules between keys ----------------------------------------------------------------------

    def _check_together(self) -> None:
        if self.epochs is None and self.time_limit is None and self.cpu_time_limit is None and self.max_steps is None:
            raise VPIntegratorError("give epochs, time_limit or cpu_time_limit (or max_steps); none was set", key="epochs")
        if not self.lr_min <= self.lr:
            raise VPIntegratorError(f"lr_min must be a finite number in [0, lr={self.lr}]; got {self.lr_min!r}",
                                    key="lr_min")
        if self.scheduler != "constant" and self.decay_epochs is None and self.epochs is None and self.optimizer != "lm":
            raise VPIntegratorError(
                f"decay_epochs (the epochs over which lr reaches lr_min) is needed by scheduler {self.scheduler!r} "
                "with only a time limit", key="decay_epochs"
            )
        if self.scheduler == "exponential" and self.lr_min <= 0:
            raise VPIntegratorError(f"lr_min must be positive for the exponential scheduler; got {self.lr_min!r}",
                                    key="lr_min")
        if self.monitor != "val_rollout":
            for name, default in (("val_rollout_error", "mean"), ("val_rollout_drift_weight", 0.0)):
                if getattr(self, name) != default:
                    raise VPIntegratorError(
                        f"{name} = {getattr(self, name)!r} shapes the validation-rollout score, which monitor = "
                        f"{self.monitor!r} does not compute; set monitor = 'val_rollout' or leave {name} out",
                        key=name)
        if not self.val_fraction + self.test_fraction < 1:
            raise VPIntegratorError(
                f"test_fraction = {self.test_fraction!r} and val_fraction = {self.val_fraction!r} hold out every "
                "trajectory (their sum must be below 1: training needs trajectories); lower test_fraction or "
                "val_fraction",
                key="test_fraction",
            )
        if self.monitor == "val_rollout" and not self.val_fraction > 0:
            raise VPIntegratorError(
                f"monitor = 'val_rollout' rolls out the validation trajectories; set val_fraction > 0 "
                f"(got {self.val_fraction!r}) or monitor = 'val_loss'", key="val_fraction"
            )
        if self.loss != "relative" and (self.optimizer == "lm" or self.is_ensemble):
            raise VPIntegratorError(f"loss = {self.loss!r} trains one model by a torch optimiser; give loss = "
                                    "'relative' for optimizer = 'lm' or an ensemble", key="loss")
        self._check_ensemble()

    def _check_ensemble(self) -> None:
        if self.ensemble is not None and self.seeds is not None and self.ensemble != len(self.seeds):
            raise VPIntegratorError(
                f"ensemble = {self.ensemble} but seeds lists {len(self.seeds)} seeds; give one of them, or make "
                "them agree", key="ensemble"
            )
        if not self.is_ensemble:
            return
        if self.init_from is not None:
            raise VPIntegratorError(
                "init_from cannot start an ensemble (every member would start from the same weights); remove "
                "init_from or train the seeds one by one", key="init_from"
            )
        if self.unroll != 1:
            raise VPIntegratorError(
                f"unroll = {self.unroll} cannot train an ensemble (the ensemble trains one-window targets); set "
                "unroll = 1 or train the seeds one by one", key="unroll"
            )
        if self.optimizer == "lbfgs":
            raise VPIntegratorError(
                "optimizer 'lbfgs' cannot train an ensemble (its line search couples the members); use adam, "
                "adamw, sgd, rmsprop or lm, or train the seeds one by one", key="optimizer",
            )

    @property
    def fine_tunes(self) -> bool:
        """Whether the run fine-tunes at ``finetune_lr`` (``init_from`` with a torch optimiser)."""
        return self.init_from is not None and self.optimizer != "lm"

    def learning_rates(self) -> tuple[float, float]:
        """``(first, last)``: the rates the schedule runs between. ``(lr, lr_min)``; when the run fine-tunes
        (``init_from``, a torch optimiser) ``(finetune_lr, min(lr_min, finetune_lr))`` with ``finetune_lr``
        defaulting to ``lr_min`` (``1e-4 · lr`` when ``lr_min`` is 0)."""
        if not self.fine_tunes:
            return float(self.lr), float(self.lr_min)
        if self.finetune_lr is not None:
            first = float(self.finetune_lr)
        else:  # where a from-scratch schedule ends (a zero lr_min: the shipped schedules' ratio 1e-4 below lr)
            first = float(self.lr_min) if self.lr_min > 0 else 1e-4 * float(self.lr)
        return first, min(float(self.lr_min), first)

    @property
    def is_ensemble(self) -> bool:
        """Whether this config trains an ensemble (``ensemble`` or ``seeds`` set)."""
        return self.ensemble is not None or self.seeds is not None

    def ensemble_seeds(self) -> list[int]:
        """The members' seeds: ``seeds``, else ``seed, seed + 1, ...`` (``ensemble`` of them), else ``[seed]``."""
        if self.seeds is not None:
            return list(self.seeds)
        return [int(self.seed) + k for k in range(int(self.ensemble or 1))]


#: Keys that may change when a run is resumed (declared ``resumable``); anything else would make it a
#: different run.
RESUMABLE_KEYS = tuple(name for name, info in declared(TrainConfig).items() if info.resumable)


def _run_dir_paths(values: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run directory's ``config.toml`` stores its paths relative to the run directory: resolve them
    (``vpintegrator.rundir.absolute_run_paths``); any other TOML's paths stay as written."""
    from .._outputs import holds_run
    from ..rundir import absolute_run_paths

    if path.name == "config.toml" and path.parent.is_dir() and holds_run(path.parent):
        return absolute_run_paths(values, path.parent)
    return values


def merge_overrides(values: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the ``overrides`` that are not ``None`` on top.

    ``model``: a string is the model name, a table merges into ``values``' model table; when the name
    changes, the old table's hyper-parameters (they belonged to another architecture) are dropped. An
    empty ``data`` list is "not given".
    """
    merged = copy.deepcopy(dict(values))
    for key, value in overrides.items():
        if value is None or (key == "data" and isinstance(value, (list, tuple)) and not value):
            continue
        if key == "model":
            new = {"name": value} if isinstance(value, str) else dict(value) if isinstance(value, Mapping) else value
            old = merged.get("model")
            if not isinstance(new, dict) or not isinstance(old, Mapping):
                merged["model"] = copy.deepcopy(new)
                continue
            old = dict(old) if new.get("name") in (None, old.get("name")) else {}
            merged["model"] = config_layer.merge(old, new)
        else:  # other tables (optimizer_kwargs) are replaced whole, as in the TOML
            merged[key] = copy.deepcopy(value)
    return merged
