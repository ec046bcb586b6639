"""The run directory and the run's record: RNG state, ``config.toml``, ``log.csv``, ``summary.json``,
``last.pt``, ``best.pt``, each member's bookkeeping (``RunRecord``/``Member``: the best epoch, patience, the
history and the one log writer) and the tracking sinks that get every row of the log.

A run directory holds ``config.toml`` (the resolved config), ``last.pt`` / ``best.pt``
([`vpintegrator.models.save_model`][vpintegrator.models.save_model] files; ``last.pt`` also holds the training state), ``log.csv``
(``epoch,train_loss,val_loss,lr,seconds,cpu_seconds`` per epoch: ``seconds`` wall, ``cpu_seconds`` the
process's CPU time; plus ``val_rollout`` with that monitor) and
``summary.json``. Every file is written atomically (``vpintegrator._io.atomic_path``): an interrupted
write leaves the previous file intact. RNG states are stored as tensors, ints and lists so that the
checkpoints load with ``torch.load(weights_only=True)``.

One run's per-epoch bookkeeping is the same for a single run and for each member of a seed ensemble: the
one epoch loop (``vpintegrator.training.loop.Trainer``) keeps one ``Member`` per model on its member axis
(one for a single run, N for a seed ensemble), so the rule that picks the best epoch, the log's format and
the best checkpoint are written once.

Tracking sinks of the one log writer (``logger = "tensorboard" | "mlflow"``): every row that
``RunRecord.log`` appends to ``log.csv`` also goes to each sink.

- ``tensorboard`` (extra ``[tensorboard]``): ``torch.utils.tensorboard.SummaryWriter`` writing
  ``<run dir>/tensorboard/``; scalars ``train_loss``, ``val_loss``, ``lr``, ``seconds`` and
  ``val_rollout`` (with that monitor) at global step = epoch; the config as hyperparameters (HParams tab)
  and the run's ``config.toml`` as the text ``config``.
- ``mlflow`` (extra ``[mlflow]``): one MLflow run per run directory (an ensemble: one per member), named
  after the directory, tagged with the git commit (from a checkout) and the package versions, with the
  config as flat parameters (``model.n_blocks``, ...), the same metrics at step = epoch, and the run's
  ``config.toml``, ``summary.json`` and ``best.pt`` as artifacts when it ends; the tracking URI and
  experiment are MLflow's own settings (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``). Inside a run
  the user opened (``with mlflow.start_run(): fit(...)``) a single run logs into that run and leaves it open,
  as ``mlflow.autolog`` does; an ensemble's members get child runs of it (``MLflowSink``).

A sink can also be an object of the user's (a W&B or Lightning-style logger wrapper, a list collecting
rows): ``fit(..., logger=obj)`` or ``logger=[obj, ...]`` (``user_sinks``). Each object needs ``log(row)``
(``row``: ``epoch`` and the logged values, as in ``log.csv``; an ensemble's rows also carry ``member`` and
``seed``) and may have ``close()``, called once when ``fit`` returns (also on an error or Ctrl-C); they run
beside the named logger of the config (``logger = "mlflow"`` and an object: both get every row).

Setting a sink up (e.g. MLflow's first connection) is not counted in the run's ``wall_time``.

Non-finite values (a NaN validation loss without validation data) are not sent.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import datetime
import importlib
import json
import math
import random
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch

from .._io import atomic_path
from .._outputs import check_new_run_dir
from ..clock import process_cpu
from ..errors import VPIntegratorError
from ..protocols import SinkProtocol
from ..provenance import provenance_record
from ..rundir import CPU_COLUMN, LOG_COLUMNS, ROLLOUT_COLUMN, absolute_run_paths, format_row, read_log, relative_run_paths

__all__ = [
    "CPU_COLUMN",
    "LOG_COLUMNS",
    "ROLLOUT_COLUMN",
    "rng_state",
    "set_rng_state",
    "seed_everything",
    "default_out",
    "write_text",
    "write_json",
    "write_config",
    "write_summary",
    "run_provenance",
    "json_float",
    "read_log",
    "check_inputs_unchanged",
    "log_columns",
    "format_row",
    "check_new_run_dir",
    "read_last",
    "RunRecord",
    "Member",
    "make_sinks",
    "config_text",
    "check_same_call",
    "check_logger",
    "TensorBoardSink",
    "MLflowSink",
    "user_sinks",
    "sink_objects",
]

_LAST_KEYS = ("state_dict", "optimizer", "scheduler", "rng", "epoch", "train_state")


# ---------------------------------------------------------------------------------------------------
# RNG state in weights_only-loadable form (tensors, ints, lists)


def rng_state(device: torch.device) -> dict[str, Any]:
    """torch's (and CUDA's on a CUDA device), NumPy's and Python's global RNG states."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": [int(py_state[0]), [int(v) for v in py_state[1]], py_state[2]],
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what ``rng_state`` saved."""
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].numpy().astype(np.uint32),
            int(np_state["pos"]),
            int(np_state["has_gauss"]),
            float(np_state["cached_gaussian"]),
        )
    )
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), NumPy's and Python's global RNGs (the model init draws from torch's)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


# ---------------------------------------------------------------------------------------------------
# files


def default_out(model_name: str) -> Path:
    """``runs/<model>-<YYYYmmdd-HHMMSS>`` (a model given as ``"package.module:ClassName"``: its class name)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{model_name.rpartition(':')[2]}-{stamp}"


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def json_float(x: float | None) -> float | None:
    """``x`` for JSON: non-finite values become ``null``."""
    return None if x is None or not math.isfinite(x) else float(x)


def write_json(path: Path, values: dict[str, Any]) -> None:
    write_text(path, json.dumps(values, indent=2) + "\n")


def write_config(run_dir: Path, values: Mapping[str, Any]) -> None:
    """Write ``run_dir/config.toml``: the config's ``values`` (a run's resolved record) with their paths (data, init_from, out) relative to
    ``run_dir`` (``vpintegrator.rundir.relative_run_paths``; [`TrainConfig.from_toml`][vpintegrator.training.TrainConfig.from_toml] resolves
    them again)."""
    write_text(run_dir / "config.toml", config_text(run_dir, values))


def config_text(run_dir: Path, values: Mapping[str, Any]) -> str:
    """The text of the ``config.toml`` that ``write_config`` writes into ``run_dir`` for ``values``."""
    from .. import config as config_layer

    return config_layer.dump_toml(relative_run_paths(copy.deepcopy(dict(values)), run_dir))


def check_same_call(run_dir: Path, values: Mapping[str, Any]) -> None:
    """``fit``'s default (``overwrite=None``) for an ``out`` that holds a run: it is replaced only when the
    same call wrote it (a notebook cell run again): the run finished and its ``config.toml`` is the one
    this call writes (``config_text``). Else a one-line ``OutputError`` naming ``out`` (relative) and what to
    do: an unfinished run is resumed, another configuration's run kept."""
    from .._outputs import OutputError
    from ..provenance import redact_path
    from ..rundir import is_complete

    shown = redact_path(run_dir)
    try:
        finished = is_complete(run_dir)
    except VPIntegratorError:
        finished = False
    if not finished:
        raise OutputError(f"out {shown}: holds an unfinished run; continue it with resume = {shown}, or pass "
                          "overwrite=True to train it again from the start", key="out")
    try:
        same = (run_dir / "config.toml").read_text(encoding="utf-8") == config_text(run_dir, values)
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        raise OutputError(f"out {shown}: holds a run of another configuration (its config.toml); choose another "
                          "out, or pass overwrite=True to replace it", key="out")


def _run_inputs(run_dir: Path) -> list[str]:
    """The input files of the run in ``run_dir`` (its config.toml's data and init_from files)."""
    from .. import config as config_layer

    try:
        values = absolute_run_paths(config_layer.read_toml(run_dir / "config.toml"), run_dir)
    except (OSError, VPIntegratorError, ValueError):
        return []
    data = values.get("data") if isinstance(values.get("data"), list) else []
    init = values.get("init_from")
    if isinstance(init, str) and Path(init).is_dir():  # a run directory: the file init_from read
        init = next((str(Path(init) / n) for n in ("best.pt", "last.pt") if (Path(init) / n).is_file()), init)
    return [str(p) for p in data] + ([init] if isinstance(init, str) else [])


def run_provenance(run_dir: Path) -> dict[str, Any]:
    """The ``provenance`` record of the run in ``run_dir`` ([`vpintegrator.provenance`][vpintegrator.provenance]): its input files
    (data, init_from) from its ``config.toml``, with their sha256 (hashed once per process), the paths
    relative to ``run_dir``."""
    return provenance_record(_run_inputs(run_dir), relative_to=run_dir)


def check_inputs_unchanged(last: Path, ckpt: dict[str, Any]) -> None:
    """Refuse (one line) to resume from ``last`` (a run's ``last.pt``, read as ``ckpt``) when an input file
    its ``provenance`` hashed (the data, init_from) now has other contents: the run would go on with other
    data than it was trained on."""
    from ..provenance import file_sha256

    record = ckpt.get("provenance")
    inputs = record.get("inputs") if isinstance(record, dict) else None
    for item in inputs if isinstance(inputs, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("sha256"), str) or not isinstance(item.get("path"), str):
            continue
        p = Path(item["path"]).expanduser()
        p = p if p.is_absolute() else last.parent / p
        now = file_sha256(p)
        if now is not None and now != item["sha256"]:
            raise VPIntegratorError(
                f"resume {last.parent}: {p} has changed since the run's last checkpoint (sha256 {item['sha256'][:12]}… "
                f"then, {now[:12]}… now): the run would go on with other data; put the file it was trained on back, "
                "or train a new run", key="resume")


def write_summary(run_dir: Path, values: dict[str, Any]) -> None:
    """Write ``run_dir/summary.json``: ``values`` with the paths relative to ``run_dir`` and the run's
    ``provenance`` (``run_provenance``)."""
    write_json(run_dir / "summary.json", {**relative_run_paths(values, run_dir), "provenance": run_provenance(run_dir)})


def log_columns(monitor: str) -> tuple[str, ...]:
    """The columns of ``log.csv`` of a run that watches ``monitor``."""
    return LOG_COLUMNS + (CPU_COLUMN,) + ((ROLLOUT_COLUMN,) if monitor == "val_rollout" else ())


# ---------------------------------------------------------------------------------------------------
# resumed runs (their settings: vpintegrator.training.plan.resumed; a new run's directory: check_new_run_dir, in
# vpintegrator._outputs with the other run-directory rules)


def read_last(path: Path) -> dict[str, Any]:
    """The ``last.pt`` of a run (on the CPU), checked for the training state."""
    if not path.exists():
        raise VPIntegratorError(
            f"resume {path.parent}: no last.pt there; expected a run directory written by vp-train", key="resume"
        )
    from ..models import read_torch_file

    ckpt = read_torch_file(path, map_location="cpu", what="checkpoint")
    if not isinstance(ckpt, dict):
        raise VPIntegratorError(
            f"checkpoint {path}: holds a {type(ckpt).__name__}, expected a dict (a last.pt written by vp-train)"
        )
    missing = [k for k in _LAST_KEYS if k not in ckpt]
    if missing:
        raise VPIntegratorError(
            f"checkpoint {path}: missing checkpoint key(s) {', '.join(missing)}; not a vp-train last.pt (best.pt "
            "cannot be resumed from)"
        )
    bad = [k for k in ("state_dict", "optimizer", "scheduler", "rng", "train_state") if not isinstance(ckpt[k], dict)]
    if bad or not isinstance(ckpt["epoch"], int) or ckpt["epoch"] < 0:
        raise VPIntegratorError(f"checkpoint {path}: malformed training state ({', '.join(bad) or 'epoch'}); "
                                "not a vp-train last.pt")
    return ckpt


# ---------------------------------------------------------------------------------------------------
# one run's record: the best epoch, patience, the history, log.csv (the one log writer), best.pt


class RunRecord:
    """The bookkeeping of one run.

    Parameters
    ----------
    run_dir : Path or None
        Where ``log.csv`` and ``best.pt`` go (None: nothing is written, e.g. a DDP rank other than 0).
    log_columns : tuple of str
        The columns of ``log.csv`` (``vpintegrator.training.checkpoint.log_columns``).
    min_delta : float
        An epoch improves on the best one when its score is lower by more than this.
    min_rel_delta : float
        The plateau rule's relative improvement: patience (``bad_epochs``) starts again only at an epoch whose
        score is below ``ref · (1 − min_rel_delta) − min_delta``, ``ref`` the score of the last epoch that
        started it again (the best epoch, ``best.pt``, is still any epoch better by ``min_delta``).
    """

    #: set by __init__ (declared for type checkers)
    run_dir: Path | None
    log_columns: tuple[str, ...]
    min_delta: float
    best_loss: float
    best_epoch: int
    bad_epochs: int
    best_dirty: bool
    last_train: float
    last_val: float

    def __init__(self, run_dir: Path | None, log_columns: tuple[str, ...], min_delta: float,
                 min_rel_delta: float = 0.0) -> None:
        self.run_dir, self.log_columns, self.min_delta = run_dir, tuple(log_columns), float(min_delta)
        self.min_rel_delta = float(min_rel_delta)
        self.best_loss, self.best_epoch, self.bad_epochs = math.inf, 0, 0
        self.plateau_ref = math.inf  # the score the plateau rule measures improvement from
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_dirty = False  # best_state not yet written to best.pt
        self.last_train = self.last_val = math.nan
        self.history: list[dict[str, float]] = []
        self.finite_summary: dict[str, Any] | None = None  # summary.json as of the last finite epoch
        self.sinks: list[SinkProtocol] = []  # more writers of each logged row (logger = "tensorboard" | "mlflow")
        self.sink_cpu = 0.0  # process CPU seconds spent in the sinks' calls: not the training's cost
        self.checkpoint_extra: dict[str, Any] = {}  # more keys of best.pt (the run's split)

    def judge(self, epoch: int, score: float, state: Callable[[], dict[str, torch.Tensor]]) -> bool:
        """Record epoch ``epoch``'s monitored ``score``: the best so far (the first epoch always counts)
        keeps ``state()`` (a copy of the weights) and resets patience; otherwise one more bad epoch.
        Returns whether it became the best."""
        improved = math.isfinite(score) and (not math.isfinite(self.best_loss) or score < self.best_loss - self.min_delta)
        ref = getattr(self, "plateau_ref", self.best_loss)  # a record resumed from before the key existed
        progressed = math.isfinite(score) and (
            not math.isfinite(ref) or score < ref * (1.0 - getattr(self, "min_rel_delta", 0.0)) - self.min_delta)
        self.bad_epochs = 0 if progressed or self.best_epoch == 0 else self.bad_epochs + 1
        if progressed or self.best_epoch == 0:
            self.plateau_ref = score
        if improved or self.best_epoch == 0:
            self.best_loss, self.best_epoch = score, epoch
            self.best_state = state()
            self.best_dirty = True
            return True
        return False

    def start_log(self) -> None:
        """(Re)write ``log.csv``: the header and the rows of ``history`` (on resume the rows up to the
        checkpoint: a crash may have left later ones), atomically."""
        if self.run_dir is not None:
            rows = "".join(format_row(r, self.log_columns) + "\n" for r in self.history)
            write_text(self.run_dir / "log.csv", ",".join(self.log_columns) + "\n" + rows)

    def log(self, row: dict[str, float]) -> None:
        """Append one epoch's ``row`` to the history and to ``log.csv``."""
        self.history.append(row)
        if self.run_dir is not None:
            with open(self.run_dir / "log.csv", "a", encoding="utf-8") as f:
                f.write(format_row(row, self.log_columns) + "\n")
        if self.sinks:
            tic = process_cpu()
            for sink in self.sinks:
                sink.log(row)
            self.sink_cpu += process_cpu() - tic

    def close(self) -> None:
        """Close the sinks (flush their files, end their tracking runs)."""
        for sink in self.sinks:
            sink.close()
        self.sinks = []

    def save_best(self, model: torch.nn.Module) -> None:
        """Write ``best.pt`` (``model``'s architecture with the best weights) if the best changed since."""
        if self.run_dir is None or not self.best_dirty or self.best_state is None:
            return
        from ..models import save_model

        best = copy.deepcopy(model)
        best.load_state_dict(self.best_state)
        save_model(best, self.run_dir / "best.pt", overwrite=True, any_module=True,
                   extra={"epoch": self.best_epoch, "best_loss": float(self.best_loss), "kind": "best",
                          **self.checkpoint_extra, "provenance": run_provenance(self.run_dir)})
        self.best_dirty = False


class Member(RunRecord):
    """One model of the loop's member axis: a run's bookkeeping plus the member's index ``k``, ``seed``,
    reported directory ``path`` (``run_dir`` is where files go: None on a DDP rank other than 0 or without
    an output directory), and whether it still trains (``active``; ``stopped`` says why not, ``epoch`` and
    ``step`` then where it stopped, ``diverged`` the divergence record)."""

    #: set by __init__ (declared for type checkers)
    k: int
    seed: int
    path: Path | None

    def __init__(self, k: int, seed: int, path: Path | None, write: bool, log_columns: tuple[str, ...],
                 min_delta: float, min_rel_delta: float = 0.0) -> None:
        super().__init__(path if write else None, log_columns, min_delta, min_rel_delta)
        self.k, self.seed, self.path = k, seed, path
        self.active = True
        self.stopped = "running"
        self.epoch = self.step = 0
        self.diverged: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------------
# tracking sinks: where every row of the log also goes (logger = "tensorboard" | "mlflow", the user's objects)

#: the user's sink objects of the ``fit`` call running in this context (``user_sinks``)
_USER: contextvars.ContextVar[tuple] = contextvars.ContextVar("vpintegrator_user_sinks", default=())


def sink_objects(logger: Any) -> tuple:
    """The sink objects in a ``logger`` argument of ``fit``: ``()`` for a name (the config key) or None; else
    the object, or each object of a list, checked to have ``log(row)`` (a one-line error naming ``logger``)."""
    if logger is None or isinstance(logger, str):
        return ()
    objects = tuple(logger) if isinstance(logger, (list, tuple)) else (logger,)
    for obj in objects:
        if isinstance(obj, str) or not callable(getattr(obj, "log", None)):
            raise VPIntegratorError(
                f"logger must be 'none', 'tensorboard', 'mlflow' or an object with a log(row) method (and optionally "
                f"close()), or a list of such objects; got {obj!r}", key="logger")
    return objects


@contextlib.contextmanager
def user_sinks(objects: tuple) -> Iterator[None]:
    """Within the block every run's sinks (``make_sinks``) include ``objects`` (see the module docstring);
    their ``close()`` is called once at the end."""
    token = _USER.set(tuple(objects))
    try:
        yield
    finally:
        _USER.reset(token)
        for obj in objects:
            close = getattr(obj, "close", None)
            if callable(close):
                close()


class _UserSink:
    """One member's view of a user's sink object: its rows (with ``member`` and ``seed`` in an ensemble);
    ``close`` is left to ``user_sinks`` (the object may serve several members)."""

    def __init__(self, obj: Any, member: Any, ensemble: bool) -> None:
        self.obj, self.extra = obj, ({"member": member.k, "seed": member.seed} if ensemble else {})

    def log(self, row: dict[str, float]) -> None:
        self.obj.log({**row, **self.extra})

    def close(self) -> None:
        pass


def _need(module: str, extra: str, logger: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise VPIntegratorError(
            f"logger = {logger!r} needs the {extra} package; install it with pip install 'vpintegrator[{extra}]' "
            f"(or pip install {extra}), or set logger = 'none'", key="logger"
        ) from None


def _metrics(row: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k != "epoch" and math.isfinite(float(v))}


def flat_params(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config as flat parameters: tables as dotted keys (``model.n_blocks``), ``None`` values left out;
    numbers, booleans and strings as they are, anything else (lists) as JSON text."""
    import json

    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, f"{name}."))
        elif value is None:
            continue
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def run_tags() -> dict[str, str]:
    """Tags of a tracking run: the git commit (when run from a checkout), the versions of vpintegrator,
    Python, torch, NumPy and the platform ([`vpintegrator.provenance`][vpintegrator.provenance])."""
    from ..provenance import provenance_record

    record = provenance_record()
    tags = {"vpintegrator.version": str(record["vpintegrator"]), "platform": str(record["platform"])}
    tags.update({f"{name}.version": str(v) for name, v in record["versions"].items() if v is not None})
    if record.get("git"):
        tags["git.commit"] = str(record["git"]["commit"])
        tags["git.dirty"] = str(bool(record["git"]["dirty"])).lower()
    return tags


#: the run directory's files a tracking run gets as artifacts when it ends
ARTIFACTS = ("config.toml", "summary.json", "best.pt")


class TensorBoardSink:
    """Per-epoch scalars into a TensorBoard event directory, with the config as hyperparameters (the HParams
    tab, its metrics the logged scalars) and as text (``config``: the ``config.toml`` of the run)."""

    def __init__(self, log_dir: Path, params: dict[str, Any] | None = None, config_text: str | None = None,
                 metrics: tuple[str, ...] = ()) -> None:
        tb = _need("torch.utils.tensorboard", "tensorboard", "tensorboard")
        self.writer = tb.SummaryWriter(log_dir=str(log_dir))
        if params:
            from torch.utils.tensorboard.summary import hparams

            hp = {k: v for k, v in params.items() if isinstance(v, (bool, int, float, str))}
            for event in hparams(hp, {m: math.nan for m in metrics}):
                self.writer.file_writer.add_summary(event)
        if config_text:
            self.writer.add_text("config", "```toml\n" + config_text + "\n```", global_step=0)
        self.writer.flush()

    def log(self, row: dict[str, float]) -> None:
        for key, value in _metrics(row).items():
            self.writer.add_scalar(key, value, global_step=int(row["epoch"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MLflowSink:
    """Per-epoch metrics into one MLflow run (through ``MlflowClient``, so an ensemble's members log to
    runs of their own at the same time): tags (``run_tags``), the config as flat parameters
    (``flat_params``) and, when it ends, the run directory's ``config.toml``, ``summary.json`` and
    ``best.pt`` as artifacts.

    Where the run is: with an MLflow run of the user's open (``mlflow.active_run()``, e.g. ``with
    mlflow.start_run(): fit(...)``), a single run logs into it, as ``mlflow.autolog`` does, and leaves it open
    (``nested=False``); an ensemble member (``nested=True``) gets a child run of it (tag ``mlflow.parentRunId``,
    the parent's experiment). Without one, a run of its own in the experiment ``MLFLOW_EXPERIMENT_NAME``
    (default ``vpintegrator``), ended with the sink."""

    def __init__(self, name: str, params: dict[str, Any], run_dir: Path | None = None,
                 tags: dict[str, str] | None = None, nested: bool = False) -> None:
        mlflow = _need("mlflow", "mlflow", "mlflow")
        self.client = mlflow.tracking.MlflowClient()
        self.run_dir = run_dir
        active_run = getattr(mlflow, "active_run", None)
        active = active_run() if callable(active_run) else None
        self.owned = active is None or nested  # a run of the user's is left open
        if active is not None and not nested:
            self.run_id = active.info.run_id
            _check_params(self.client, self.run_id, params)
        else:
            if active is not None:
                experiment_id = active.info.experiment_id
            else:
                experiment = mlflow.get_experiment_by_name(_experiment_name())
                experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(
                    _experiment_name())
            self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
            if active is not None:
                self.client.set_tag(self.run_id, "mlflow.parentRunId", active.info.run_id)
        for key, value in (tags or {}).items():
            self.client.set_tag(self.run_id, key, value)
        for key, value in params.items():
            self.client.log_param(self.run_id, key, str(value)[:500])

    def log(self, row: dict[str, float]) -> None:
        for key, value in _metrics(row).items():
            self.client.log_metric(self.run_id, key, value, step=int(row["epoch"]))

    def close(self) -> None:
        try:
            if self.run_dir is not None:
                for name in ARTIFACTS:
                    if (self.run_dir / name).is_file():
                        self.client.log_artifact(self.run_id, str(self.run_dir / name))
        finally:
            if self.owned:
                self.client.set_terminated(self.run_id)


def _check_params(client: Any, run_id: str, params: dict[str, Any]) -> None:
    """Refuse (one line, key ``logger``) to log into the user's active run a parameter it already holds with
    another value (MLflow's parameters are written once: a second ``fit`` in the same run)."""
    held = client.get_run(run_id).data.params
    for key, value in params.items():
        if key in held and held[key] != str(value)[:500]:
            raise VPIntegratorError(
                f"logger = 'mlflow': the active MLflow run already has the parameter {key} = {held[key]!r}, this fit "
                f"has {str(value)[:60]!r}; open a run per fit (with mlflow.start_run(nested=True): fit(...))",
                key="logger")


def _experiment_name() -> str:
    import os

    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or "vpintegrator"


def make_sinks(logger: str, monitor: str, ensemble: bool, member, record: Mapping[str, Any]) -> list[SinkProtocol]:
    """The sinks of ``logger`` (the plan's: ``"none"``, ``"tensorboard"``, ``"mlflow"``) for ``member`` (a
    ``vpintegrator.training.loop.Member``; ``record`` its ``config.toml``, ``monitor`` what the run watches),
    then the user's sink objects of the running ``fit`` (``user_sinks``)."""
    return [*_named_sinks(logger, monitor, member, record, ensemble),
            *(_UserSink(o, member, ensemble) for o in _USER.get())]


def _named_sinks(logger: str, monitor: str, member, record: Mapping[str, Any], ensemble: bool = False) -> list[Any]:
    if logger == "none":
        return []
    values = {k: copy.deepcopy(v) for k, v in record.items() if k not in ("data", "out", "init_from")}
    params = {**flat_params(values), "seed": member.seed}
    if logger == "tensorboard":
        if member.run_dir is None:
            raise VPIntegratorError("logger = 'tensorboard' writes into the run directory; give out (a directory) "
                                    "or set logger = 'none'", key="logger")
        from .. import config as config_layer
        from ..rundir import relative_run_paths

        text = config_layer.dump_toml(relative_run_paths(copy.deepcopy(dict(record)), member.run_dir))
        metrics = ("train_loss", "val_loss") + (("val_rollout",) if monitor == "val_rollout" else ())
        return [TensorBoardSink(member.run_dir / "tensorboard", params, text, metrics)]
    if logger == "mlflow":
        name = member.path.name if member.path is not None else f"fit-seed-{member.seed}"
        return [MLflowSink(name, params, member.run_dir, run_tags(), nested=ensemble)]
    raise VPIntegratorError(f"logger must be 'none', 'tensorboard' or 'mlflow'; got {logger!r}", key="logger")


def check_logger(logger: str, has_out: bool) -> None:
    """Refuse a ``logger`` whose package is missing (or ``tensorboard`` without a run directory) before any
    file is written."""
    if logger == "tensorboard":
        _need("torch.utils.tensorboard", "tensorboard", "tensorboard")
        if not has_out:
            raise VPIntegratorError("logger = 'tensorboard' writes into the run directory; give out (a directory) "
                                    "or set logger = 'none'", key="logger")
    elif logger == "mlflow":
        _need("mlflow", "mlflow", "mlflow")
