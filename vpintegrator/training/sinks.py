"""Tracking sinks of the one log writer (``logger = "tensorboard" | "mlflow"``): every row that
``vpintegrator.training.record.RunRecord.log`` appends to ``log.csv`` also goes to each sink.

- ``tensorboard`` (extra ``[tensorboard]``): ``torch.utils.tensorboard.SummaryWriter`` writing
  ``<run dir>/tensorboard/``; scalars ``train_loss``, ``val_loss``, ``lr``, ``seconds`` and
  ``val_rollout`` (with that monitor) at global step = epoch.
- ``mlflow`` (extra ``[mlflow]``): one MLflow run per run directory (an ensemble: one per member), named
  after the directory, with the config as parameters and the same metrics at step = epoch; the tracking
  URI and experiment are MLflow's own settings (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``).

Non-finite values (a NaN validation loss without validation data) are not sent.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

from ..errors import VPIntegratorError

__all__ = ["make_sinks", "TensorBoardSink", "MLflowSink"]


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


class TensorBoardSink:
    """Per-epoch scalars into a TensorBoard event directory."""

    #: set by __init__ (declared for type checkers)
    writer: Any

    def __init__(self, log_dir: Path) -> None:
        tb = _need("torch.utils.tensorboard", "tensorboard", "tensorboard")
        self.writer = tb.SummaryWriter(log_dir=str(log_dir))

    def log(self, row: dict[str, float]) -> None:
        for key, value in _metrics(row).items():
            self.writer.add_scalar(key, value, global_step=int(row["epoch"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MLflowSink:
    """Per-epoch metrics into one MLflow run (through ``MlflowClient``, so an ensemble's members log to
    runs of their own at the same time)."""

    #: set by __init__ (declared for type checkers)
    client: Any
    run_id: Any

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        mlflow = _need("mlflow", "mlflow", "mlflow")
        self.client = mlflow.tracking.MlflowClient()
        experiment = mlflow.get_experiment_by_name(_experiment_name())
        experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(
            _experiment_name())
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        for key, value in params.items():
            self.client.log_param(self.run_id, key, str(value)[:500])

    def log(self, row: dict[str, float]) -> None:
        for key, value in _metrics(row).items():
            self.client.log_metric(self.run_id, key, value, step=int(row["epoch"]))

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _experiment_name() -> str:
    import os

    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or "vpintegrator"


def make_sinks(config, member, resolved) -> list[Any]:
    """The sinks of ``config.logger`` for ``member`` (a ``vpintegrator.training.record.Member``)."""
    logger = config.logger or "none"
    if logger == "none":
        return []
    if logger == "tensorboard":
        if member.run_dir is None:
            raise VPIntegratorError("logger = 'tensorboard' writes into the run directory; give out (a directory) "
                                    "or set logger = 'none'", key="logger")
        return [TensorBoardSink(member.run_dir / "tensorboard")]
    if logger == "mlflow":
        name = member.path.name if member.path is not None else f"fit-seed-{member.seed}"
        params = {k: v for k, v in resolved.to_dict().items() if v is not None and k not in ("data",)}
        params["seed"] = member.seed
        return [MLflowSink(name, params)]
    raise VPIntegratorError(f"logger must be 'none', 'tensorboard' or 'mlflow'; got {logger!r}", key="logger")


def check_logger(config, has_out: bool) -> None:
    """Refuse a ``logger`` whose package is missing (or ``tensorboard`` without a run directory) before any
    file is written."""
    logger = config.logger or "none"
    if logger == "tensorboard":
        _need("torch.utils.tensorboard", "tensorboard", "tensorboard")
        if not has_out:
            raise VPIntegratorError("logger = 'tensorboard' writes into the run directory; give out (a directory) "
                                    "or set logger = 'none'", key="logger")
    elif logger == "mlflow":
        _need("mlflow", "mlflow", "mlflow")
