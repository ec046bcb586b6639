"""The run directory's files and the training state they keep: RNG state, ``config.toml``, ``log.csv``'s
columns, ``summary.json``, ``last.pt`` (read back on resume) and the checks of a run directory being
replaced or resumed. One run's bookkeeping (the best epoch, patience, the log writer, ``best.pt``) is
``vpintegrator.training.record``; the tracking sinks that get every row of the log,
``vpintegrator.training.sinks``.

A run directory holds ``config.toml`` (the resolved config), ``last.pt`` / ``best.pt``
([`vpintegrator.models.save_model`][vpintegrator.models.save_model] files; ``last.pt`` also holds the training state), ``log.csv``
(``epoch,train_loss,val_loss,lr,seconds,cpu_seconds`` per epoch: ``seconds`` wall, ``cpu_seconds`` the
process's CPU time; plus ``val_rollout`` with that monitor) and
``summary.json``. Every file is written atomically (``vpintegrator._io.atomic_path``): an interrupted
write leaves the previous file intact. RNG states are stored as tensors, ints and lists so that the
checkpoints load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import random
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from .._io import atomic_path
from .._outputs import check_new_run_dir
from ..errors import VPIntegratorError
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
    "config_text",
    "check_same_call",
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


def write_summary(run_dir: Path, values: dict[str, Any], provenance: dict[str, Any] | None = None) -> None:
    """Write ``run_dir/summary.json``: ``values`` with the paths relative to ``run_dir`` and the run's
    ``provenance`` (``run_provenance``, unless the caller made it for the save: ``provenance``)."""
    if provenance is None:
        provenance = run_provenance(run_dir)
    write_json(run_dir / "summary.json", {**relative_run_paths(values, run_dir), "provenance": provenance})


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
