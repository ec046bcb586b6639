"""Reduction files: a fitted PSD basis or symplectic autoencoder saved with what it was fitted on.

One format for both, a NumPy ``.npz`` archive (no pickles: ``np.load(allow_pickle=False)`` reads it) written
atomically (a temporary file renamed onto the target, ``vpintegrator._io.atomic_path``):

- ``meta``: JSON text: ``format`` (``"vpintegrator-reduction"``), ``version``, ``kind`` (``"psd"`` or
  ``"symplectic_autoencoder"``), ``n_sites`` (N), ``full_dim`` (2N), ``reduced_dim`` (2n), ``fitted_on`` (the
  data: system, its parameters, spec, trajectories, states, ``data_record``), ``provenance`` (versions, git,
  time, command: ``provenance_record``), and per kind ``method`` (PSD) or ``config`` (the autoencoder's sizes);
- the arrays: ``phi`` (PSD; ``phi_imag`` too for the complex SVD) and ``singular_values``; the autoencoder's
  state dict, one array per tensor, under ``w:<name>``.

[`load_reduction`][vpintegrator.reduction.files.load_reduction] reads either back; with ``n_sites`` it refuses,
in one line naming the file, a reduction of another lattice size.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["REDUCTION_FORMAT", "data_record", "save_reduction", "load_reduction", "reduction_meta"]

#: the ``format`` of a reduction file's ``meta``
REDUCTION_FORMAT = "vpintegrator-reduction"
_VERSION = 1
_WEIGHT = "w:"


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


def save_reduction(reduction: Any, path: str | os.PathLike[str], fitted_on: Any = None) -> None:
    """Write a ``PSDBasis`` or a ``SymplecticAutoencoder`` to ``path`` (module docstring), atomically.

    Parameters
    ----------
    reduction : PSDBasis or SymplecticAutoencoder
    path : path-like
        The ``.npz`` file to write (replaced if it exists; an interrupted write leaves it as it was).
    fitted_on : Trajectories, ndarray or dict, optional
        The data it was fitted on (recorded by ``data_record``); an autoencoder records its own
        (``fitted_on``), which this replaces when given.
    """
    from .._io import atomic_path
    from ..provenance import provenance_record
    from .psd import PSDBasis

    record = fitted_on if isinstance(fitted_on, Mapping) else (None if fitted_on is None
                                                                 else data_record(fitted_on))
    arrays: dict[str, np.ndarray] = {}
    if isinstance(reduction, PSDBasis):
        meta: dict[str, Any] = {"kind": "psd", "method": reduction.method, "n_sites": reduction.n_sites,
                                "reduced_dim": reduction.reduced_dim}
        arrays["phi"] = np.ascontiguousarray(reduction.phi.real, dtype=np.float64)
        if np.iscomplexobj(reduction.phi):
            arrays["phi_imag"] = np.ascontiguousarray(reduction.phi.imag, dtype=np.float64)
        arrays["singular_values"] = np.asarray(reduction.singular_values, dtype=np.float64)
    else:
        from .autoencoder import SymplecticAutoencoder

        if not isinstance(reduction, SymplecticAutoencoder):
            raise VPIntegratorError(f"save_reduction: give a PSDBasis or a SymplecticAutoencoder; got "
                                    f"{type(reduction).__name__}")
        meta = {"kind": "symplectic_autoencoder", "n_sites": reduction.n_sites,
                "reduced_dim": reduction.reduced_dim, "config": dict(reduction.config),
                "fit_seconds": float(reduction.fit_seconds)}
        record = record if record is not None else dict(reduction.fitted_on)
        for k, v in reduction.state_dict().items():
            arrays[_WEIGHT + k] = v.detach().to("cpu").double().numpy()
    meta.update(format=REDUCTION_FORMAT, version=_VERSION, full_dim=2 * int(meta["n_sites"]),
                fitted_on=record or {}, provenance=provenance_record())
    with atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(_jsonable(meta), sort_keys=True)), **arrays)


def reduction_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta`` record of the reduction file at ``path`` (one-line errors: missing, not a reduction file)."""
    return _read(path)[0]


def _read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not os.path.isfile(path):
        raise VPIntegratorError(f"{path}: no such reduction file; give a file written by save_reduction "
                                "(or SymplecticAutoencoder.save)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise VPIntegratorError(f"{path}: not a reduction file ({type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else 'unreadable'}); give a file written "
                                "by save_reduction") from None
    if not isinstance(meta, dict) or meta.get("format") != REDUCTION_FORMAT:
        raise VPIntegratorError(f"{path}: not a reduction file (no format {REDUCTION_FORMAT!r}); give a file "
                                "written by save_reduction")
    if int(meta.get("version", 0)) > _VERSION:
        raise VPIntegratorError(f"{path}: reduction file version {meta.get('version')} is newer than this "
                                f"vpintegrator reads ({_VERSION}); upgrade vpintegrator")
    return meta, arrays


def load_reduction(path: str | os.PathLike[str], n_sites: int | None = None,
                   reduced_dim: int | None = None) -> Any:
    """The ``PSDBasis`` or ``SymplecticAutoencoder`` saved at ``path`` (``save_reduction``).

    Parameters
    ----------
    path : path-like
    n_sites : int, optional
        The lattice size N the caller's data has: a reduction of another N is refused in one line naming
        the file.
    reduced_dim : int, optional
        The reduced dimension the caller expects: another is refused likewise.
    """
    meta, arrays = _read(path)
    where = f"{path}"
    fitted = meta.get("fitted_on") or {}
    if n_sites is not None and int(meta["n_sites"]) != int(n_sites):
        of = f" {fitted['system']}" if fitted.get("system") else ""
        raise VPIntegratorError(f"{where}: a reduction of a{of} lattice of N = {meta['n_sites']} "
                                f"({meta['full_dim']} components) but the data has N = {n_sites} "
                                f"({2 * int(n_sites)} components); fit one on this lattice's data")
    if reduced_dim is not None and int(meta["reduced_dim"]) != int(reduced_dim):
        raise VPIntegratorError(f"{where}: a reduction to 2n = {meta['reduced_dim']} components, not "
                                f"{reduced_dim}; give the matching reduced dimension or another file")
    if meta.get("kind") == "psd":
        from .psd import PSD_METHODS, PSDBasis

        if meta.get("method") not in PSD_METHODS or "phi" not in arrays:
            raise VPIntegratorError(f"{where}: a PSD reduction file without a valid method or phi; write it again "
                                    "with save_reduction")
        phi = arrays["phi"] if "phi_imag" not in arrays else arrays["phi"] + 1j * arrays["phi_imag"]
        return PSDBasis(method=str(meta["method"]), phi=np.ascontiguousarray(phi),
                        singular_values=arrays.get("singular_values", np.zeros(0)))
    if meta.get("kind") == "symplectic_autoencoder":
        from .autoencoder import autoencoder_from_record

        weights = {k[len(_WEIGHT):]: v for k, v in arrays.items() if k.startswith(_WEIGHT)}
        try:
            model = autoencoder_from_record(meta["config"], weights)
        except (KeyError, TypeError, RuntimeError) as err:
            raise VPIntegratorError(f"{where}: the autoencoder's weights do not match its config "
                                    f"({type(err).__name__}); write it again with SymplecticAutoencoder.save") from None
        model.fitted_on = dict(fitted)
        model.fit_seconds = float(meta.get("fit_seconds", 0.0))
        return model
    raise VPIntegratorError(f"{where}: unknown reduction kind {meta.get('kind')!r}; valid: psd, "
                            "symplectic_autoencoder")
