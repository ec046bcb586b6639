"""Numbers and files of the studies: mean ± std over seeds, number formatting, Markdown tables, strict JSON,
atomic writes.

Means and standard deviations are over seeds, the std with ddof = 1 (the sample standard deviation). A
value that is ±inf (a rollout that blew up) makes the mean ±inf; a NaN (not defined) makes it NaN; the std
of one value or of values that are not all finite is not defined. JSON is written strictly: NaN becomes
``null`` and ±inf ``"inf"``/``"-inf"``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

from .._io import atomic_path

# --------------------------------------------------------------------------- statistics


def mean_std(values: Iterable) -> tuple[float, float]:
    """Mean and std (ddof = 1) of the values that are not None; NaN where not defined.

    No values: (NaN, NaN). One value: (it, NaN). A value ±inf and none NaN: the mean is ±inf (NaN if both
    signs occur), the std NaN; a NaN value: (NaN, NaN).
    """
    import numpy as np

    vals = [float(v) for v in values if v is not None]
    if not vals:
        return math.nan, math.nan
    arr = np.asarray(vals, dtype=np.float64)
    if not np.isfinite(arr).all():
        if np.isnan(arr).any():
            return math.nan, math.nan
        return float(arr.sum()), math.nan  # ±inf, or NaN for inf − inf
    mean = float(arr.mean())
    return mean, (float(arr.std(ddof=1)) if arr.size > 1 else math.nan)


def summarize(values: Iterable) -> dict:
    """``{"mean", "std", "n", "values"}`` of the values that are not None (:func:`mean_std`); mean and std
    are None where there is no value, the std None where it is not defined."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "n": 0, "values": []}
    mean, std = mean_std(vals)
    return {"mean": mean, "std": None if math.isnan(std) else std, "n": len(vals), "values": vals}


# --------------------------------------------------------------------------- formatting


def fmt_num(x, digits: int = 3, small: float = 1e-3, missing: str = "—") -> str:
    """A number for a table: ``digits`` significant digits between ``small`` and 1e4 (and 0), else in
    exponent form with one digit less; ``missing`` for None and NaN; ``inf``/``-inf``; strings as they are."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return missing
    if isinstance(x, str):
        return x
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if small <= abs(x) < 1e4:
        return f"{x:.{digits}g}"
    return f"{x:.{max(digits - 1, 1)}e}"


def md_row(cells: Iterable) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def md_table(head: list, rows: Iterable[Iterable]) -> list[str]:
    """A Markdown table as lines: the header, the rule, one line per row of cells."""
    return [md_row(head), "|" + "|".join("---" for _ in head) + "|", *(md_row(r) for r in rows)]


# --------------------------------------------------------------------------- files


def plain(obj):
    """``obj`` for strict JSON: NaN -> None, ±inf -> ``"inf"``/``"-inf"``, numpy scalars and arrays ->
    Python numbers and lists, tuples -> lists, paths -> strings."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist") and type(obj).__module__ == "numpy":  # numpy scalar or array
        return plain(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def read_json(path):
    """The JSON in ``path``, or None if it is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (parents created)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path, obj) -> None:
    """Write ``obj`` as strict, indented JSON (:func:`plain`), atomically."""
    write_text(path, json.dumps(plain(obj), indent=2, allow_nan=False) + "\n")


def write_if_changed(path, text: str) -> None:
    """Write ``text`` unless ``path`` already holds it (keeps the file's time for make-like checks)."""
    path = Path(path)
    if not path.exists() or path.read_text() != text:
        write_text(path, text)
