"""The reduction file's archive: a NumPy ``.npz`` of a JSON ``meta`` and arrays, written atomically
(``vpintegrator.reduction.files`` describes the format and reads and writes whole reductions)."""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import Any, Mapping

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["REDUCTION_FORMAT", "WEIGHT_PREFIX", "data_record", "write_archive", "read_archive", "reduction_meta",
           "check_archive"]

#: the ``format`` of a reduction file's ``meta``
REDUCTION_FORMAT = "vpintegrator-reduction"
VERSION = 1
#: the prefix of an autoencoder's state-dict arrays
WEIGHT_PREFIX = "w:"


def data_record(data: Any) -> dict[str, Any]:
    """What a reduction was fitted on, JSON-ready: for a Trajectories its system, parameters (``param_*``),
    spec, description, source files and shape; for an array its shape."""
    y = np.asarray(getattr(data, "y", data))
    record: dict[str, Any] = {"shape": [int(s) for s in y.shape]}
    meta = getattr(data, "meta", None)
    if isinstance(meta, Mapping):
        for k in ("system", "spec", "description", "source", "source_files", "dt", "t_end", "sampler",
                  "sampler_args"):
            v = meta.get(k)
            if isinstance(v, (str, int, float, bool)) or (isinstance(v, list) and all(isinstance(s, str) for s in v)):
                record[k] = v
        record["params"] = {k[len("param_"):]: float(v) for k, v in meta.items()
                            if k.startswith("param_") and np.ndim(v) == 0 and np.isreal(v)}
    return record


def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def write_archive(path: str | os.PathLike[str], meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``meta`` (with the format, version, ``full_dim`` and provenance added) and ``arrays`` to ``path``,
    atomically (``vpintegrator._io.atomic_path``)."""
    from .._io import atomic_path
    from ..provenance import provenance_record

    meta = {**meta, "format": REDUCTION_FORMAT, "version": VERSION, "full_dim": 2 * int(meta["n_sites"]),
            "provenance": provenance_record()}
    with atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as f:
            payload: dict[str, Any] = {"meta": np.array(json.dumps(_jsonable(meta), sort_keys=True)), **arrays}
            np.savez(f, **payload)


def reduction_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta`` record of the reduction file at ``path`` (one-line errors: missing, not a reduction file)."""
    return read_archive(path)[0]


def read_archive(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not os.path.isfile(path):
        raise VPIntegratorError(f"{path}: no such reduction file; give a file written by save_reduction "
                                "(or SymplecticAutoencoder.save)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:  # cut, damaged
        raise VPIntegratorError(f"{path}: not a reduction file ({type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else 'unreadable'}); give a file written "
                                "by save_reduction") from None
    if not isinstance(meta, dict) or meta.get("format") != REDUCTION_FORMAT:
        raise VPIntegratorError(f"{path}: not a reduction file (no format {REDUCTION_FORMAT!r}); give a file "
                                "written by save_reduction")
    if int(meta.get("version", 0)) > VERSION:
        raise VPIntegratorError(f"{path}: reduction file version {meta.get('version')} is newer than this "
                                f"vpintegrator reads ({VERSION}); upgrade vpintegrator")
    return meta, arrays


def check_archive(meta: Mapping[str, Any], path: Any, n_sites: int | None, reduced_dim: int | None) -> None:
    """Refuse, in one line naming the file, a reduction of another lattice size ``n_sites`` or another
    ``reduced_dim`` (None: not checked)."""
    fitted = meta.get("fitted_on") or {}
    if n_sites is not None and int(meta["n_sites"]) != int(n_sites):
        of = f" {fitted['system']}" if fitted.get("system") else ""
        raise VPIntegratorError(f"{path}: a reduction of a{of} lattice of N = {meta['n_sites']} "
                                f"({meta['full_dim']} components) but the data has N = {n_sites} "
                                f"({2 * int(n_sites)} components); fit one on this lattice's data")
    if reduced_dim is not None and int(meta["reduced_dim"]) != int(reduced_dim):
        raise VPIntegratorError(f"{path}: a reduction to 2n = {meta['reduced_dim']} components, not "
                                f"{reduced_dim}; give the matching reduced dimension or another file")
