"""The run directory: RNG state, ``config.toml``, ``log.csv``, ``summary.json``, ``last.pt`` and resume.

A run directory holds ``config.toml`` (the resolved config), ``last.pt`` / ``best.pt``
(:func:`vpintegrator.models.save_model` files; ``last.pt`` also holds the training state), ``log.csv``
(``epoch,train_loss,val_loss,lr,seconds`` per epoch, plus ``val_rollout`` with that monitor) and
``summary.json``. Every file is written atomically (:func:`vpintegrator._io.atomic_path`): an interrupted
write leaves the previous file intact. RNG states are stored as tensors, ints and lists so that the
checkpoints load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import datetime
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._io import atomic_path
from ..errors import VPIntegratorError
from ..rundir import LOG_COLUMNS, ROLLOUT_COLUMN, format_row, read_log
from .config import RESUMABLE_KEYS, TrainConfig

__all__ = [
    "LOG_COLUMNS",
    "ROLLOUT_COLUMN",
    "rng_state",
    "set_rng_state",
    "seed_everything",
    "default_out",
    "write_text",
    "write_json",
    "json_float",
    "read_log",
    "log_columns",
    "format_row",
    "check_new_run_dir",
    "resume_config",
    "read_last",
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
    """Restore what :func:`rng_state` saved."""
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
    """``runs/<model>-<YYYYmmdd-HHMMSS>``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{model_name}-{stamp}"


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def json_float(x: float | None) -> float | None:
    """``x`` for JSON: non-finite values become ``null``."""
    return None if x is None or not math.isfinite(x) else float(x)


def write_json(path: Path, values: dict[str, Any]) -> None:
    write_text(path, json.dumps(values, indent=2) + "\n")


def log_columns(config: TrainConfig) -> tuple[str, ...]:
    """The columns of ``log.csv`` for this config."""
    return LOG_COLUMNS + ((ROLLOUT_COLUMN,) if config.monitor == "val_rollout" else ())


# ---------------------------------------------------------------------------------------------------
# new runs and resumed runs


def check_new_run_dir(out: Path, overwrite: bool = False) -> bool:
    """Refuse an ``out`` that is a file, already holds a run, or is a directory with other files in it
    (an empty directory, or one holding only temporary files of killed runs, is fine). With ``overwrite``
    a directory holding a run is accepted if it holds nothing but run files
    (:func:`vpintegrator._outputs.replace_run_dir` empties it); return whether it must be emptied."""
    from .._outputs import OutputError, check_run_entries, holds_run

    if out.exists() and not out.is_dir():
        raise OutputError(f"out {out}: exists and is not a directory; it is never replaced, also with overwrite; "
                          "choose another out", key="out")
    if out.is_dir() and holds_run(out):
        if not overwrite:
            raise OutputError(
                f"out {out}: already holds a run; continue that run with resume = {out}, choose another out, or "
                "use overwrite to replace it", key="out",
            )
        check_run_entries(out)
        return True
    if out.is_dir() and any(not (p.name.startswith(".") and p.name.endswith(".tmp")) for p in out.iterdir()):
        raise OutputError(
            f"out {out}: a directory that is not empty and holds no run; it is never replaced, also with "
            "overwrite; give a new or empty directory as out", key="out",
        )
    return False


def resume_config(run_dir: Path, config: TrainConfig | None, overrides: dict[str, Any]) -> TrainConfig:
    """The config of the run in ``run_dir`` with the allowed changes (:data:`RESUMABLE_KEYS`) applied.

    ``config``, if given, must agree with the run's on every other key.
    """
    path = run_dir / "config.toml"
    if not run_dir.is_dir() or not path.is_file():
        raise VPIntegratorError(
            f"resume {run_dir}: not a run directory (no config.toml); give a directory written by vp-train",
            key="resume",
        )
    saved = TrainConfig.from_toml(path)
    if config is not None:
        theirs, ours = saved.to_dict(), config.to_dict()
        for key in TrainConfig.keys():
            if key in RESUMABLE_KEYS or key == "decay_epochs":
                continue
            if key == "data":
                same = [str(Path(p).resolve()) for p in ours[key]] == theirs[key]
            elif key == "model":
                same = all(theirs["model"].get(k) == v for k, v in ours["model"].items())
            else:
                same = ours[key] == theirs[key]
            if not same:
                raise VPIntegratorError(
                    f"resume {run_dir}: {key} differs from the run's ({theirs[key]!r} there, {ours[key]!r} "
                    f"here); only {', '.join(RESUMABLE_KEYS)} may change, or start a new run",
                    key="resume",
                )
        overrides = {k: getattr(config, k) for k in RESUMABLE_KEYS if k != "out"} | overrides
    bad = sorted(k for k, v in overrides.items() if v is not None and k not in RESUMABLE_KEYS)
    if bad:
        raise VPIntegratorError(
            f"resume {run_dir}: cannot change {', '.join(bad)} of a run; only {', '.join(RESUMABLE_KEYS)} "
            "may change (start a new run in another out directory for the others)",
            key="resume",
        )
    return saved.replace(**{**overrides, "out": str(run_dir)})


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
