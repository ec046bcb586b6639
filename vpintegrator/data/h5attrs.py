"""The attribute codec of both HDF5 file kinds (trajectory files, ``vpintegrator.data.trajectory_files``, and
rollout files, ``vpintegrator.data.rollouts``): metadata as attributes of a file, group or dataset, scalars and
flat lists natively, anything else as JSON text listed in ``json_keys``; a System under ``system`` flattened,
here only, into ``system``/``system_class``/``param_<name>``.
"""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

from ..errors import VPIntegratorError
from ..provenance import parse_provenance
from ..systems.registry import System, system_meta

__all__ = ["write_attrs"]

_JSON_KEYS_ATTR = "json_keys"


def _is_native(value: Any) -> bool:
    """Whether an attribute value round-trips through HDF5 natively (scalar or flat list)."""
    if isinstance(value, (bool, int, float, str, np.bool_, np.integer, np.floating)):
        return True
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.ndim != 1 or arr.dtype == object:
            return False
        return arr.dtype.kind in "biufU" and (arr.size > 0 or isinstance(value, np.ndarray))
    return False


def _to_attr(value: Any) -> Any:
    if isinstance(value, str):  # str subclasses (TorchVersion, np.str_) would become fixed-width numpy
        return str(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.dtype.kind == "U":
            return np.array([str(v) for v in arr], dtype=h5py.string_dtype())
        return arr
    return value


def _from_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_from_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _meta_to_attrs(meta: dict[str, Any]) -> dict[str, Any]:
    """Flatten ``meta`` into HDF5 attributes: a [`System`][vpintegrator.systems.System] object under ``system`` becomes
    ``system``/``system_class``/``param_<name>`` (the only place it is flattened); odd values -> JSON."""
    attrs: dict[str, Any] = {}
    json_keys: list[str] = []
    if isinstance(meta.get("system"), System):
        meta = {**meta, **system_meta(meta["system"])}
    for key, value in meta.items():
        if key == _JSON_KEYS_ATTR:
            continue
        attrs[key] = value
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key == "invariant_names":  # always a list of str, even when empty
            out[key] = np.array([str(v) for v in value], dtype=h5py.string_dtype())
        elif _is_native(value):
            out[key] = _to_attr(value)
        else:
            try:
                out[key] = json.dumps(value if not isinstance(value, np.ndarray) else value.tolist())
            except TypeError:
                raise VPIntegratorError(
                    f"metadata key {key!r} has a value of type {type(value).__name__} that cannot be stored "
                    "in HDF5 attributes; use str, bool, int, float, lists of these, or dicts of them"
                ) from None
            json_keys.append(key)
    out[_JSON_KEYS_ATTR] = np.array(json_keys, dtype=h5py.string_dtype())
    return out


def _attrs_to_meta(attrs: h5py.AttributeManager) -> dict[str, Any]:
    """Attributes -> meta (flat, like ``integrate``'s: system parameters stay ``param_<name>``)."""
    raw = {key: _from_attr(attrs[key]) for key in attrs.keys()}
    json_keys = set(raw.pop(_JSON_KEYS_ATTR, []) or [])
    meta = {key: json.loads(value) if key in json_keys else value for key, value in raw.items()}
    if isinstance(meta.get("provenance"), str):  # JSON text written without json_keys (provenance_attr)
        meta["provenance"] = parse_provenance(meta["provenance"])
    return meta


def write_attrs(obj, meta: dict[str, Any], skip_none: bool = False) -> None:
    """Store ``meta`` as HDF5 attributes of ``obj`` (a file, group or dataset) by ``_meta_to_attrs``,
    beside those it has (``json_keys``, written where there are any, lists the JSON-stored keys of both); ``skip_none``: keys whose
    value is None are left out (absent rather than stored as JSON null)."""
    if skip_none:
        meta = {key: value for key, value in meta.items() if value is not None}
    attrs = _meta_to_attrs(meta)
    new_json = [str(k) for k in _from_attr(attrs.pop(_JSON_KEYS_ATTR))]
    old_json = [k for k in _from_attr(obj.attrs.get(_JSON_KEYS_ATTR, np.array([]))) if k not in attrs]
    for key, value in attrs.items():
        obj.attrs[key] = value
    if old_json or new_json:  # written only where there are any
        obj.attrs[_JSON_KEYS_ATTR] = np.array(old_json + new_json, dtype=h5py.string_dtype())
