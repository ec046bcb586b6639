"""Ship a study's models as ``pretrained:`` files: per model, the seed with the best validation score.

The choice reads ``summary.json``'s ``best_loss`` (the validation loss or, with ``monitor = "val_rollout"``,
the validation rollout error) of every ``RUN/train/<prefix>_s<seed>/`` run: validation data only, never the
test trajectories. ``provenance.json`` in the target directory keeps one entry per shipped file (the
entries of other studies are kept), with the study, the seed, every seed's score and the training summary.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from .runner import StudyError
from ..provenance import provenance_record
from .stats import read_json, write_json

RULE = "lowest validation score (summary.json best_loss) over seeds"


def best_seed(run: Path, prefix: str,
              flag: str = "--export-pretrained") -> tuple[int, dict[int, float], dict[str, Any]]:
    """``(seed, {seed: score}, summary of that seed)`` over the finished runs ``run/train/<prefix>_s<seed>``
    (a completion record, ``vpintegrator.rundir.is_complete``, and a best.pt)."""
    scores, summaries = {}, {}
    for d in sorted((Path(run) / "train").glob(f"{prefix}_s*")):
        seed = d.name[len(prefix) + 2:]
        summary = read_json(d / "summary.json")
        if summary is None or not (d / "best.pt").exists() or not seed.isdigit() or not _finished(d):
            continue
        score = summary.get("best_loss")
        if score is not None and math.isfinite(float(score)):
            scores[int(seed)], summaries[int(seed)] = float(score), summary
    if not scores:
        raise StudyError(f"{flag}: no finished {prefix} training in {Path(run) / 'train'}")
    best = min(scores, key=scores.__getitem__)
    return best, scores, summaries[best]


def _finished(run_dir: Path) -> bool:
    from ..errors import VPIntegratorError
    from ..rundir import is_complete

    try:
        return is_complete(run_dir)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


def export_pretrained(run: str | Path, picks: dict[str, str], out_dir: str | Path, study: str,
                      flag: str = "--export-pretrained", **extra: Any) -> dict[str, dict[str, Any]]:
    """Copy ``run/train/<prefix>_s<best seed>/best.pt`` to ``out_dir/<name>.pt`` for each ``name: prefix``
    of ``picks``; merge the entries into ``out_dir/provenance.json``; return them by name."""
    from .._io import atomic_path

    run, out_dir = Path(run), Path(out_dir)
    chosen = {}
    for name, prefix in picks.items():
        seed, scores, summary = best_seed(run, prefix, flag)
        chosen[name] = {
            "file": f"{name}.pt", "study": study, "source": str(run / "train" / f"{prefix}_s{seed}" / "best.pt"),
            "seed": seed, "monitor": summary.get("monitor"), "best_val": scores[seed],
            "val_by_seed": {str(k): v for k, v in sorted(scores.items())}, "best_epoch": summary.get("best_epoch"),
            "train_loss_last": summary.get("train_loss"), "wall_time": summary.get("wall_time"),
            "n_params": summary.get("n_params"), **extra,
        }
    out_dir.mkdir(parents=True, exist_ok=True)
    for info in chosen.values():
        with atomic_path(out_dir / info["file"]) as tmp:
            shutil.copyfile(info["source"], tmp)
        info["provenance"] = provenance_record([info["source"]], relative_to=run)  # the copied best.pt's sha256
        info["source"] = os.path.relpath(info["source"], run)
    previous = read_json(out_dir / "provenance.json") or {}
    models = {k: v for k, v in (previous.get("models") or {}).items() if k not in chosen}
    write_json(out_dir / "provenance.json", {"rule": RULE, "models": {**models, **chosen}})
    for name, info in chosen.items():
        print(f"pretrained: {out_dir / info['file']} <- {info['source']} (seed {info['seed']}, "
              f"{info['monitor']} {info['best_val']:.4g})")
    return chosen
