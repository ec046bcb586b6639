"""Tracking sinks of the one log writer (``logger = "tensorboard" | "mlflow"``): every row that
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
import importlib
import json
import math
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..errors import VPIntegratorError
from ..protocols import SinkProtocol
from ..rundir import relative_run_paths

__all__ = ["make_sinks", "check_logger", "TensorBoardSink", "MLflowSink", "user_sinks", "sink_objects",
           "flat_params"]


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
