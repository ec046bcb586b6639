"""Numbers and files of the studies: mean ± std over seeds, number formatting, Markdown tables, strict JSON,
atomic writes, a study's rows merged by key (``merge_keyed``).

Means and standard deviations are over seeds, the std with ddof = 1 (the sample standard deviation). A
value that is ±inf (a rollout that blew up) makes the mean ±inf; a NaN (not defined) makes it NaN; the std
of one value or of values that are not all finite is not defined. JSON is written strictly: NaN becomes
``null`` and ±inf ``"inf"``/``"-inf"``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Sequence

from .._io import atomic_path
from ..provenance import provenance_record

# --------------------------------------------------------------------------- statistics


def mean_std(values: Iterable[float]) -> tuple[float, float]:
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


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """``{"mean", "std", "n", "values"}`` of the values that are not None (``mean_std``); mean and std
    are None where there is no value, the std None where it is not defined."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "n": 0, "values": []}
    mean, std = mean_std(vals)
    return {"mean": mean, "std": None if math.isnan(std) else std, "n": len(vals), "values": vals}


def median_interval(values: Iterable[float | None], lo: float = 10.0, hi: float = 90.0) -> dict[str, Any]:
    """``{"median", "lo", "hi", "n"}`` over the values (e.g. initial conditions): the median and the
    ``lo``–``hi`` % interval by the package's one definition (``vpintegrator.quantiles``: linear interpolation
    between order statistics, a failed value (NaN) counted as +inf, so a blown-up condition moves them up and is
    never dropped). None entries are left out; no values: all None."""
    from ..quantiles import percentiles, sorted_values

    vals = sorted_values(values)
    if vals.size == 0:
        return {"median": None, "lo": None, "hi": None, "n": 0}
    q = percentiles(vals, [lo, 50.0, hi])
    return {"median": q[1], "lo": q[0], "hi": q[2], "n": int(vals.size)}


def bootstrap_ci(values: Iterable[float], statistic: Callable[..., Any] | None = None, level: float = 0.95, n_resamples: int = 9999,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of ``statistic`` (default: the median) over the values
    (e.g. one number per seed), with ``scipy.stats.bootstrap``; (NaN, NaN) for fewer than 2 values or a
    value that is not finite (an interval over a blow-up is not defined)."""
    import numpy as np
    from scipy.stats import bootstrap  # type: ignore[import-untyped]

    vals = np.asarray([float(v) for v in values if v is not None], dtype=np.float64)
    if vals.size < 2 or not np.isfinite(vals).all():
        return math.nan, math.nan
    if np.all(vals == vals[0]):
        return float(vals[0]), float(vals[0])
    res = bootstrap((vals,), statistic or np.median, confidence_level=level, n_resamples=n_resamples,
                    method="percentile", random_state=np.random.default_rng(seed), vectorized=True)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def over_seeds(per_seed: Sequence[float | None]) -> dict[str, Any]:
    """``{"per_seed", "median", "ci"}`` of one number per seed (None: a seed without one): the median of the seeds'
    numbers (``vpintegrator.quantiles.median``; None where no seed has one) and its percentile-bootstrap 95 %
    interval (``bootstrap_ci``; ``[None, None]`` where it is not defined)."""
    vals = [float(v) for v in per_seed if v is not None]
    lo, hi = bootstrap_ci(vals) if len(vals) > 1 else (math.nan, math.nan)
    return {"per_seed": list(per_seed), "median": median_of(vals),
            "ci": [None if math.isnan(lo) else lo, None if math.isnan(hi) else hi]}


def median_of(values: Iterable[Any]) -> float | None:
    """The median (``vpintegrator.quantiles.median``) of the values that are not None; None where there is none."""
    from ..quantiles import median

    vals = [float(v) for v in values if v is not None]
    return median(vals) if vals else None


def seed_quantiles(per_seed_values: Iterable[Iterable[float | None]]) -> dict[str, Any]:
    """``{"per_seed", "median", "boot_lo", "boot_hi"}`` of per-seed samples (e.g. one error per held-out condition):
    each seed's ``median_interval``, the median of the per-seed medians and its bootstrap 95 % interval."""
    from ..quantiles import median

    per_seed = [median_interval(v) for v in per_seed_values]
    medians = [p["median"] for p in per_seed]
    lo, hi = bootstrap_ci(medians)
    return {"per_seed": per_seed, "median": median(medians), "boot_lo": lo, "boot_hi": hi}


def relative_errors(y: Any, ref: Any, steps: Iterable[int]) -> dict[int, list[float]]:
    """Per step k of ``steps``: the relative error (``vpintegrator.arrays.relative_error``) of each trajectory of
    ``y`` (n, K, dim) at k against ``ref``'s, inf where it is not finite (a rollout that failed)."""
    import numpy as np

    from ..arrays import relative_error

    return {k: [float(e) if np.isfinite(e) else math.inf for e in relative_error(y[:, k], ref[:, k])] for k in steps}


def drift_growth(t: Iterable[float], band: Iterable[float], bounded_below: float = 0.25) -> dict[str, Any]:
    """Is an invariant's drift bounded or secular? The least-squares slope p of log(band) against log(t)
    over the later half of the run (t > t_end / 2, band > 0): ``{"exponent": p, "kind": "bounded" if
    p < bounded_below else "secular"}``; ``kind`` None when fewer than 3 usable points (or a blow-up).

    A bounded oscillation (a symplectic method's energy error) has p ≈ 0, a linear drift p ≈ 1, a random
    walk p ≈ 0.5."""
    import numpy as np

    t = np.asarray(list(t), dtype=np.float64)
    b = np.asarray(list(band), dtype=np.float64)
    if t.shape != b.shape or t.ndim != 1:
        raise ValueError(f"drift_growth: t and band must be 1-D of one length, got {t.shape} and {b.shape}")
    if not np.isfinite(b).all():
        return {"exponent": math.inf, "kind": None}
    keep = (t > t.max() / 2) & (b > 0)
    if keep.sum() < 3:
        return {"exponent": None, "kind": None}
    p = float(np.polyfit(np.log(t[keep]), np.log(b[keep]), 1)[0])
    return {"exponent": p, "kind": "bounded" if p < bounded_below else "secular"}


# --------------------------------------------------------------------------- formatting


def fmt_num(x: float | str | None, digits: int = 3, small: float = 1e-3, missing: str = "—") -> str:
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


def fmt_g(x: Any) -> str:
    """A number in two significant digits (``.2g``): ``—`` for None and NaN, ``inf``/``-inf``; the ``"inf"`` strings
    of a written file read as ±inf."""
    x = as_number(x)
    return "—" if math.isnan(x) else f"{x:.2g}"


def interval_cell(entry: dict[str, Any]) -> str:
    """``median [lo, hi]`` of an ``over_seeds`` entry (``fmt_num``), without the interval where it is not
    defined."""
    m, (lo, hi) = entry["median"], entry["ci"]
    return fmt_num(m) + (f" [{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None and hi is not None else "")


def quantile_cell(entry: dict[str, Any]) -> str:
    """``median [boot_lo, boot_hi] (p10–p90)`` of a ``seed_quantiles`` entry (``fmt_g``): the bootstrap interval
    over seeds, then the smallest 10 % and the largest 90 % quantile of any seed."""
    p10 = min(as_number(p["lo"]) for p in entry["per_seed"])
    p90 = max(as_number(p["hi"]) for p in entry["per_seed"])
    return f"{fmt_g(entry['median'])} [{fmt_g(entry['boot_lo'])}, {fmt_g(entry['boot_hi'])}] ({fmt_g(p10)}–{fmt_g(p90)})"


def as_number(x: Any) -> float:
    """``x`` as a float: None -> NaN, the ``"inf"``/``"-inf"`` of a written file -> ±inf (another string NaN)."""
    if x is None:
        return math.nan
    if isinstance(x, str):
        return {"inf": math.inf, "-inf": -math.inf}.get(x, math.nan)
    return float(x)


def md_row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def md_table(head: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table as lines: the header, the rule, one line per row of cells."""
    return [md_row(head), "|" + "|".join("---" for _ in head) + "|", *(md_row(r) for r in rows)]


# --------------------------------------------------------------------------- files


def plain(obj: Any) -> Any:
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


def unplain(obj: Any, null: Any = None) -> Any:
    """The numbers of [`plain`][vpintegrator.studies.stats.plain] JSON back: ``"inf"``/``"-inf"`` -> ±inf,
    ``null`` (a NaN or a missing value) -> ``null`` (default None)."""
    if isinstance(obj, dict):
        return {k: unplain(v, null) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unplain(v, null) for v in obj]
    if obj is None:
        return null
    if obj in ("inf", "-inf"):
        return math.inf if obj == "inf" else -math.inf
    return obj


def read_results_json(path: str | Path, keys: Iterable[str], script: str) -> dict[str, Any]:
    """The ``results.json`` a study (``script``: the command that runs it) wrote (the shipped ones:
    ``vpintegrator._shipped.results_path``), its numbers back (``unplain``); a missing file, or one without the
    top-level ``keys``, is a one-line error naming it (``vpintegrator.studies.schema.read_results`` checks its rows
    too)."""
    from ..errors import VPIntegratorError

    doc = read_json(path)
    fix = f"give the results.json of a {script} run"
    if doc is None:
        raise VPIntegratorError(f"{path}: no such file; {fix}")
    keys = list(keys)
    if not isinstance(doc, dict) or not set(keys) <= doc.keys():
        raise VPIntegratorError(f"{path}: not the results.json of {script} (expected {', '.join(keys)}); {fix}")
    return unplain(doc)


def read_json(path: str | Path) -> Any:
    """The JSON in ``path`` (a file a study wrote: a step's stamp, a summary, settings, timings), or None if it
    is missing. A file that is there but empty, damaged or not JSON is a one-line error naming it
    (``vpintegrator.rundir.read_own_json``) and saying to delete it: the step that writes it runs again."""
    from ..rundir import read_own_json

    path = Path(path)
    if not path.exists():
        return None
    return read_own_json(path, "a file this study wrote", "delete it and run the same command again with "
                         "--skip-existing (the step that writes it runs again)")


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (parents created)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as strict, indented JSON (``plain``), atomically. A study's results (a dict with ``rows``, or
    ``problems`` for compare) also record how they were made (``provenance``: the libraries' versions, BLAS kernels
    included, and the command), unless they already do: the fitted rows change with them."""
    if isinstance(obj, dict) and ("rows" in obj or "problems" in obj) and "provenance" not in obj:
        obj = {**obj, "provenance": provenance_record()}
    write_text(path, json.dumps(plain(obj), indent=2, allow_nan=False) + "\n")


def write_if_changed(path: str | Path, text: str) -> None:
    """Write ``text`` unless ``path`` already holds it (keeps the file's time for make-like checks)."""
    path = Path(path)
    if not path.exists() or path.read_text() != text:
        write_text(path, text)


def results_provenance(run: str | Path) -> dict[str, Any]:
    """The ``provenance`` record of a study's results built from the run directory ``run``: its input
    files are the tables and records there (every ``*.csv`` and ``*.json`` under ``run`` but the results
    themselves), hashed, with paths relative to ``run``."""
    run = Path(run)
    inputs = sorted(p for p in run.rglob("*") if p.is_file() and p.suffix in (".csv", ".json")
                    and p.name not in ("results.json",) and not p.name.endswith(".tmp"))
    return provenance_record(inputs, relative_to=run)


def write_tables(path: str | Path, text: str) -> None:
    """A study's Markdown results ``text`` at ``path`` and their tables as LaTeX beside it (``path`` with ``.tex``:
    each a booktabs tabular, ``vpintegrator.data.latex.markdown_tables``), both atomically."""
    from ..data.latex import markdown_tables

    write_text(path, text)
    write_text(Path(path).with_suffix(".tex"), markdown_tables(text))


def write_results_files(run: str | Path, text: str, payload: dict[str, Any]) -> str:
    """A study's ``results.md`` (``text``; its tables as LaTeX in ``results.tex``, ``write_tables``) and
    ``results.json`` (``payload`` plus its ``provenance``, from the run directory), all atomically; returns
    ``text``."""
    run = Path(run)
    write_tables(run / "results.md", text)
    write_json(run / "results.json", {**payload, "provenance": results_provenance(run)})
    return text


#: what a directory a results file is redrawn into may already hold (an earlier redraw's files)
REDRAWN = ("results.md", "results.tex", "results.json", "figures")


def redraw_from(out: str | Path, source: str, read: Callable[[Path], Any], draw: Callable[[Any], str],
                key: str = "results", figures: str | None = None) -> tuple[Path, Any, str]:
    """``--table-only --results SOURCE``: a study's tables drawn from a results file, a shipped one by name
    (``vpintegrator._shipped.results_path``: the repository's ``docs/data/`` or the wheel's copy) or a path,
    without its run directory: ``OUT/results.md``, and the file copied to ``OUT/results.json``. ``read``
    gives the results of a file, ``draw`` their Markdown (its tables as LaTeX in ``OUT/results.tex``). ``OUT``
    must be new, empty or an earlier redraw (``REDRAWN``, and files named ``figures*`` where the study draws its figures into OUT itself): a study's
    run directory is never written over. Returns (the file, its results, the text)."""
    import shutil

    from .._shipped import results_path
    from ..errors import VPIntegratorError

    out = Path(out)
    path = results_path(source, key=key)
    def redrawn(name: str) -> bool:
        return name in REDRAWN or (figures is not None and name.startswith(figures))

    if out.exists() and (not out.is_dir() or not all(redrawn(p.name) for p in out.iterdir())):
        raise VPIntegratorError(f"--out {out}: holds other files (a study's run?); give a new or empty directory to "
                                f"redraw --{key} {source} into", key="out")
    res = read(path)
    text = draw(res)
    out.mkdir(parents=True, exist_ok=True)
    write_tables(out / "results.md", text)
    if not (out / "results.json").exists() or not (out / "results.json").samefile(path):
        with atomic_path(out / "results.json") as tmp:
            shutil.copyfile(path, tmp)
    return path, res, text


# --------------------------------------------------------------------------- a study's rows


def merge_keyed(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]],
                key: Callable[[dict[str, Any]], Hashable], at_end: bool = False) -> list[dict[str, Any]]:
    """``old`` with each row whose ``key`` a row of ``new`` has replaced by that row (in its place), then the new
    rows of new keys, in their order; ``at_end``: the rows of ``old`` whose key no row of ``new`` has, then ``new``."""
    if at_end:
        fresh = {key(r) for r in new}
        return [r for r in old if key(r) not in fresh] + list(new)
    keyed = {key(r): r for r in old}
    keyed.update({key(r): r for r in new})
    return list(keyed.values())
