"""Reduction files: a fitted PSD basis or symplectic autoencoder saved with what it was fitted on.

One format for both, a NumPy ``.npz`` archive (no pickles: ``np.load(allow_pickle=False)`` reads it) written
atomically (a temporary file renamed onto the target, ``vpintegrator._io.atomic_path``;
``vpintegrator.reduction.fileformat``):

- ``meta``: JSON text: ``format`` (``"vpintegrator-reduction"``), ``version``, ``kind`` (``"psd"`` or
  ``"symplectic_autoencoder"``), ``n_sites`` (N), ``full_dim`` (2N), ``reduced_dim`` (2n), ``fitted_on`` (the
  data: system, its parameters, spec, trajectories, states, ``data_record``), ``provenance`` (versions, git,
  time, command: ``provenance_record``), and per kind ``method`` (PSD; ``scales`` too for the balanced lift)
  or ``config`` and ``fit_seconds`` (the autoencoder);
- the arrays: ``phi`` (PSD; ``phi_imag`` too for the complex SVD) and ``singular_values``; the autoencoder's
  state dict, one array per tensor, under ``w:<name>``.

[`load_reduction`][vpintegrator.reduction.files.load_reduction] reads either back; with ``n_sites`` it refuses,
in one line naming the file, a reduction of another lattice size.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from ..errors import VPIntegratorError
from .fileformat import check_archive, data_record, read_archive, reduction_meta, write_archive
from .psd import PSD_METHODS, PSDBasis

__all__ = ["save_reduction", "load_reduction", "reduction_meta", "data_record"]


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
    record = fitted_on if isinstance(fitted_on, Mapping) else (None if fitted_on is None
                                                                 else data_record(fitted_on))
    if not isinstance(reduction, PSDBasis):
        save = getattr(reduction, "save", None)
        if save is None or not hasattr(reduction, "encoder"):
            raise VPIntegratorError(f"save_reduction: give a PSDBasis or a SymplecticAutoencoder; got "
                                    f"{type(reduction).__name__}")
        save(path, fitted_on=record)
        return
    arrays = {"phi": np.ascontiguousarray(reduction.phi.real, dtype=np.float64),
              "singular_values": np.asarray(reduction.singular_values, dtype=np.float64)}
    if np.iscomplexobj(reduction.phi):
        arrays["phi_imag"] = np.ascontiguousarray(reduction.phi.imag, dtype=np.float64)
    extra = {} if reduction.scales is None else {"scales": [float(v) for v in reduction.scales]}
    write_archive(path, {"kind": "psd", "method": reduction.method, "n_sites": reduction.n_sites,
                         "reduced_dim": reduction.reduced_dim, "fitted_on": record or {}, **extra}, arrays)


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
    meta, arrays = read_archive(path)
    check_archive(meta, path, n_sites, reduced_dim)
    if meta.get("kind") == "psd":
        if meta.get("method") not in PSD_METHODS or "phi" not in arrays:
            raise VPIntegratorError(f"{path}: a PSD reduction file without a valid method or phi; write it again "
                                    "with save_reduction")
        phi = arrays["phi"] if "phi_imag" not in arrays else arrays["phi"] + 1j * arrays["phi_imag"]
        scales = meta.get("scales")
        return PSDBasis(method=str(meta["method"]), phi=np.ascontiguousarray(phi),
                        singular_values=arrays.get("singular_values", np.zeros(0)),
                        scales=None if scales is None else (float(scales[0]), float(scales[1])))
    if meta.get("kind") == "symplectic_autoencoder":
        from .autoencoder import autoencoder_from_archive

        return autoencoder_from_archive(meta, arrays, path)
    raise VPIntegratorError(f"{path}: unknown reduction kind {meta.get('kind')!r}; valid: psd, "
                            "symplectic_autoencoder")
