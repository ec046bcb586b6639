"""Weights trained with GeometricMachineLearning.jl (GML): [`read_gml`][vpintegrator.models.read_gml] reads its HDF5 weight files.

File layout (GML's ``save`` to HDF5): top-level groups ``L1 … Ln``, the layers of the network's ``Chain``
in order; in each, the layer's parameters by name. Special matrices are a group with a ``gml_type``
attribute (``LowerTriangular``, ``UpperTriangular``, ``SkewSymMatrix``) holding the vector ``S`` and the
size ``n``; plain matrices are datasets. Julia is column-major, so h5py sees every matrix transposed:
A_julia = h5ᵀ.

How GML's parameters land in ours (checked against GML's source, ``src/arrays``, ``src/layers``):

================================  ==========================================  ============================
GML layer (group entries)         GML formula (columns z)                     ours
================================  ==========================================  ============================
VolumePreserving{Lower,Upper}     z + σ(L z + b); L[i, j] (i > j) =           ``weight`` = S (the same
Layer (``weight``: S, n;          S[(i−1)(i−2)/2 + j] (1-based), Upper the   ``torch.tril_indices``
``bias``, absent if no bias)      transpose of that layout                    order), ``bias`` = bias
ResNetLayer (``weight``, bias)    z + σ(W z + b)                              ``weight`` = h5ᵀ
Dense (``W``, ``b``)              σ(W z + b), W (out, in)                     ``weight`` = h5ᵀ
VolumePreservingAttention (A)     skew: SkewSymMatrix S; arbitrary: matrix    ``weight`` = S, or h5ᵀ
MultiHeadAttention (PQ, PK, PV,   V softmax_col((PQᵀZ)ᵀ(PKᵀZ)/√dim)           ``query`` = PKᵀ… see below
each ``head_1 … head_h``)
================================  ==========================================  ============================

GML's P^K plays our query and its P^Q our key (see [`MultiHeadAttention`][vpintegrator.nn.MultiHeadAttention]): our
``query[i].weight`` = PK head_i (Julia (dim, d_head) = h5ᵀ), ``key[i].weight`` = PQ head_i,
``value[i].weight`` = PV head_i.

The architecture and its hyper-parameters are read from the layer sequence (VPFF: n_blocks, n_linear,
init_upper; VPT: L, n_blocks, n_linear, skew_sym; ST: L, n_blocks, n_heads, transformer_dim; dim).
What weights cannot tell comes from the caller or defaults: ``seq_len`` (3 for vpt/st, 1 for vpff),
``activation`` (tanh, GML's default), ``add_connection`` of the ST (False, as the paper's networks: GML's
own default is true, so give ``add_connection=True`` for a network trained with it),
``upscaling_activation`` (identity), ``softmax`` (vector). Stiefel attention weights and the
``standard`` attention form are not GML files of these architectures and are refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..arrays import resolve_dtype
from ..config import parse_value
from ..errors import VPIntegratorError
from .registry import _MODELS, build_model

__all__ = ["read_gml", "parse_gml_spec", "GML_PREFIX", "SUPPORTED_GML_TYPES"]

GML_PREFIX = "gml:"
SUPPORTED_GML_TYPES = ("LowerTriangular", "UpperTriangular", "SkewSymMatrix")
_GML_NAMES = {"lower": "VolumePreservingLowerLayer", "upper": "VolumePreservingUpperLayer", "resnet": "ResNetLayer",
              "dense": "Dense", "mha": "MultiHeadAttention", "vpa": "VolumePreservingAttention"}
_LAYER_HELP = ("known layers: VolumePreserving{Lower,Upper}Layer (weight[, bias]), ResNetLayer (weight, bias), "
               "Dense (W, b), MultiHeadAttention (PQ, PK, PV), VolumePreservingAttention (A)")


class GMLMissingFile(VPIntegratorError, FileNotFoundError):
    """A missing GML weight file: a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] that is also a ``FileNotFoundError``."""


@dataclass
class _Layer:
    """One group ``L<k>`` as read: its kind and its arrays in GML's (Julia) orientation."""

    group: str
    kind: str  # lower, upper, resnet, dense, mha, vpa
    arrays: dict[str, Any] = field(default_factory=dict)
    skew: bool = False  # vpa: SkewSymMatrix weighting

    @property
    def has_bias(self) -> bool:
        return "bias" in self.arrays

    def width(self) -> int:
        """The state dimension the layer acts on (its input)."""
        if self.kind in ("lower", "upper"):
            return int(self.arrays["n"])
        if self.kind == "vpa":
            return int(self.arrays["n"]) if self.skew else self.arrays["A"].shape[0]
        if self.kind == "mha":
            return self.arrays["PQ"][0].shape[0]
        return self.arrays["weight"].shape[1]  # resnet, dense: W (out, in)


# --------------------------------------------------------------------------------------------- reading


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_entry(file: str, node: Any, where: str) -> Any:
    """A dataset as an array in Julia orientation (matrices transposed), or a special matrix as a dict."""
    import h5py

    if isinstance(node, h5py.Dataset):
        if "gml_type" in node.attrs:
            kind = _decode(node.attrs["gml_type"])
            raise VPIntegratorError(
                f"{file}: group {where}: gml_type {kind!r} is not supported on a dataset; supported: "
                f"{', '.join(SUPPORTED_GML_TYPES)} (as groups S, n) and plain matrices"
            )
        array = np.asarray(node[()])
        if array.dtype.kind != "f":
            raise VPIntegratorError(f"{file}: group {where}: dtype {array.dtype} is not a float array; "
                                    "expected GML weights (float32 or float64)")
        return array.T.copy() if array.ndim == 2 else array
    if "gml_type" not in node.attrs:
        raise VPIntegratorError(
            f"{file}: group {where}: a group without a gml_type attribute; expected a special matrix "
            f"({', '.join(SUPPORTED_GML_TYPES)}: S and n) or a dataset"
        )
    kind = _decode(node.attrs["gml_type"])
    if kind not in SUPPORTED_GML_TYPES:
        raise VPIntegratorError(
            f"{file}: group {where}: gml_type {kind!r} is not supported; supported: {', '.join(SUPPORTED_GML_TYPES)}"
        )
    if set(node.keys()) != {"S", "n"}:
        raise VPIntegratorError(f"{file}: group {where}: a {kind} holds entries {sorted(node.keys())}; "
                                "expected exactly S and n")
    S, n = np.asarray(node["S"][()]), np.asarray(node["n"][()])
    if S.ndim != 1 or S.dtype.kind != "f" or n.ndim != 0 or n.dtype.kind not in "iu" or S.size != n * (n - 1) // 2:
        raise VPIntegratorError(
            f"{file}: group {where}: a {kind} needs S of length n(n−1)/2 and an integer n; got S {S.shape} "
            f"{S.dtype}, n {n.tolist()!r}"
        )
    return {"type": kind, "S": S, "n": int(n)}


def _read_layer(file: str, g: Any, name: str) -> _Layer:
    import h5py

    keys = set(g.keys()) if isinstance(g, h5py.Group) else set()
    if not isinstance(g, h5py.Group) or not keys:
        raise VPIntegratorError(f"{file}: group {name}: empty or not a group; {_LAYER_HELP}")
    if keys == {"PQ", "PK", "PV"}:
        heads = {}
        for part in ("PQ", "PK", "PV"):
            sub = g[part]
            names = sorted(sub.keys()) if isinstance(sub, h5py.Group) else []
            want = [f"head_{i}" for i in range(1, len(names) + 1)]
            if not names or sorted(want) != names:
                raise VPIntegratorError(f"{file}: group {name}/{part}: entries {names} are not head_1 … head_h")
            heads[part] = [_read_entry(file, sub[h], f"{name}/{part}/{h}") for h in want]
            if any(not isinstance(P, np.ndarray) or P.ndim != 2 for P in heads[part]):
                raise VPIntegratorError(f"{file}: group {name}/{part}: every head must be a (d_head, dim) matrix")
        if len({len(v) for v in heads.values()}) != 1:
            raise VPIntegratorError(f"{file}: group {name}: PQ, PK and PV have different numbers of heads")
        return _Layer(name, "mha", heads)
    if keys == {"A"}:
        A = _read_entry(file, g["A"], f"{name}/A")
        if isinstance(A, dict):
            if A["type"] != "SkewSymMatrix":
                raise VPIntegratorError(f"{file}: group {name}/A: gml_type {A['type']!r} is not an attention "
                                        "weighting; expected SkewSymMatrix or a plain matrix")
            return _Layer(name, "vpa", {"S": A["S"], "n": A["n"]}, skew=True)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise VPIntegratorError(f"{file}: group {name}/A: shape {A.shape[::-1]} is not a square matrix")
        return _Layer(name, "vpa", {"A": A})
    named = {"weight": "bias", "W": "b"}
    wkey = next((w for w in named if w in keys), None)
    if wkey is None or not keys <= {wkey, named[wkey]}:
        raise VPIntegratorError(f"{file}: group {name}: entries {sorted(keys)} are not a layer this reader knows; "
                                f"{_LAYER_HELP}")
    weight = _read_entry(file, g[wkey], f"{name}/{wkey}")
    arrays: dict[str, Any] = {}
    if named[wkey] in keys:
        bias = _read_entry(file, g[named[wkey]], f"{name}/{named[wkey]}")
        if not isinstance(bias, np.ndarray) or bias.ndim != 1:
            raise VPIntegratorError(f"{file}: group {name}/{named[wkey]}: a bias must be a vector")
        arrays["bias"] = bias
    if isinstance(weight, dict):
        if weight["type"] == "SkewSymMatrix" or wkey == "W":
            raise VPIntegratorError(f"{file}: group {name}/{wkey}: gml_type {weight['type']!r} is not a layer "
                                    "weight; expected LowerTriangular, UpperTriangular or a plain matrix")
        kind = "lower" if weight["type"] == "LowerTriangular" else "upper"
        return _Layer(name, kind, {"S": weight["S"], "n": weight["n"], **arrays})
    if weight.ndim != 2:
        raise VPIntegratorError(f"{file}: group {name}/{wkey}: shape {weight.shape} is not a matrix")
    square = weight.shape[0] == weight.shape[1]
    return _Layer(name, "resnet" if square and wkey == "weight" else "dense", {"weight": weight, **arrays})


def _read_layers(file: str) -> list[_Layer]:
    import h5py

    with h5py.File(file, "r") as f:
        names = list(f.keys())
        index = {}
        for key in names:
            m = re.fullmatch(r"L([1-9][0-9]*)", key)
            if m is None:
                if not any(re.fullmatch(r"L[1-9][0-9]*", k) for k in names):
                    break
                raise VPIntegratorError(f"{file}: entry {key!r} at the top level is not a layer group; a GML weight "
                                        "file holds only the groups L1 … Ln")
            index[int(m.group(1))] = key
        if not index:
            raise VPIntegratorError(
                f"{file}: no groups L1 … Ln at the top level: not a GeometricMachineLearning weight file "
                f"(top level: {', '.join(names[:5]) or 'empty'}); give a file written by GML's save to HDF5"
            )
        n = max(index)
        missing = [k for k in range(1, n + 1) if k not in index]
        if missing:
            raise VPIntegratorError(f"{file}: group L{missing[0]} is missing (groups up to L{n} present); "
                                    "the file is incomplete")
        return [_read_layer(file, f[index[k]], index[k]) for k in range(1, n + 1)]


# ----------------------------------------------------------------------------------------- inference


def _vpff_chunk(file: str, layers: list[_Layer]) -> dict[str, Any]:
    """n_blocks, n_linear, init_upper of a run of triangular layers in GML's VolumePreservingFeedForward order."""
    if not layers or len(layers) % 2:
        where = layers[-1].group if layers else "?"
        raise VPIntegratorError(f"{file}: group {where}: {len(layers)} triangular layers; a VolumePreservingFeedForward "
                                "has them in lower/upper pairs")
    first = layers[0].kind
    second = "upper" if first == "lower" else "lower"
    codes = []
    for i in range(0, len(layers), 2):
        a, b = layers[i], layers[i + 1]
        for lay, want in ((a, first), (b, second)):
            if lay.kind != want:
                raise VPIntegratorError(f"{file}: group {lay.group}: a {lay.kind} layer where GML's order has "
                                        f"a {want} triangular layer")
        code = {(False, False): "A", (False, True): "B", (True, True): "C"}.get((a.has_bias, b.has_bias))
        if code is None:
            raise VPIntegratorError(f"{file}: group {a.group}: a biased layer before an unbiased one; not GML's "
                                    "VolumePreservingFeedForward order")
        codes.append(code)
    # blocks: (A^(n_linear−1) B C) × n_blocks, then the final B (A: linear pair, B: linear pair with bias,
    # C: nonlinear pair)
    i, n_linear, n_blocks = 0, None, 0
    while True:
        start = i
        while i < len(codes) and codes[i] == "A":
            i += 1
        bad = i if i >= len(codes) or codes[i] != "B" else None
        if bad is None and i == len(codes) - 1:
            bad = start if i > start else None  # the final pair B stands alone
            if bad is None:
                break
        if bad is None and codes[i + 1] != "C":
            bad = i + 1
        if bad is None and n_linear is not None and n_linear != i - start + 1:
            bad = start
        if bad is not None:
            bad = min(bad, len(codes) - 1)
            raise VPIntegratorError(
                f"{file}: group {layers[2 * bad].group}: the layer pattern {''.join(codes)} (A linear pair, B linear "
                "pair with bias, C nonlinear pair) is not GML's VolumePreservingFeedForward order "
                "(A^(n_linear-1) B C per block, then B)"
            )
        n_linear, n_blocks, i = i - start + 1, n_blocks + 1, i + 2
    dims = {lay.width() for lay in layers}
    if len(dims) != 1:
        raise VPIntegratorError(f"{file}: group {layers[0].group}: triangular layers of sizes {sorted(dims)}; expected one dim")
    return {"n_blocks": n_blocks, "n_linear": n_linear or 1, "init_upper": first == "upper"}


def _units(file: str, layers: list[_Layer], head: str) -> list[list[_Layer]]:
    """Split at the layers of kind ``head`` (each unit starts with one)."""
    if layers[0].kind != head:
        raise VPIntegratorError(f"{file}: group {layers[0].group}: a {_GML_NAMES[layers[0].kind]} where the "
                                f"transformer's first unit starts with its {_GML_NAMES[head]}")
    units: list[list[_Layer]] = []
    for lay in layers:
        if lay.kind == head:
            units.append([lay])
        else:
            units[-1].append(lay)
    return units


def _same(file: str, units: list[list[_Layer]], values: list[dict[str, Any]]) -> dict[str, Any]:
    for unit, value in zip(units[1:], values[1:]):
        for key in value:
            if value[key] != values[0][key]:
                raise VPIntegratorError(
                    f"{file}: group {unit[0].group}: this transformer unit has {key} = {value[key]!r}, the first "
                    f"{values[0][key]!r}; our models have one configuration for all units"
                )
    return values[0]


def _infer(file: str, layers: list[_Layer]) -> tuple[str, dict[str, tuple[Any, str]]]:
    """(model name, {key: (value, group it was read from)})."""
    kinds = [lay.kind for lay in layers]
    span = f"{layers[0].group}…{layers[-1].group}"
    if "mha" in kinds:
        body, up, down = layers, None, None
        if body[0].kind == "dense":
            up, body = body[0], body[1:]
        if body and body[-1].kind == "dense":
            down, body = body[-1], body[:-1]
        if (up is None) != (down is None) or not body:
            lone = up or down or layers[0]
            raise VPIntegratorError(f"{file}: group {lone.group}: a Dense layer without its partner; GML's "
                                    "StandardTransformerIntegrator has an upscaling and a downscaling Dense or neither")
        units = _units(file, body, "mha")
        values = []
        for unit in units:
            res = unit[1:]
            bad = next((lay for lay in res if lay.kind != "resnet" or not lay.has_bias), None)
            if bad is not None or not res:
                where = bad.group if bad is not None else unit[0].group
                raise VPIntegratorError(f"{file}: group {where}: expected ResNet layers (weight, bias) after the "
                                        "attention of a StandardTransformerIntegrator unit")
            width = unit[0].width()
            wrong = next((lay for lay in res if lay.width() != width), None)
            if wrong is not None:
                raise VPIntegratorError(f"{file}: group {wrong.group}: a ResNet layer of size {wrong.width()} after "
                                        f"an attention of size {width}")
            values.append({"n_blocks": len(res) - 1, "n_heads": len(unit[0].arrays["PQ"]), "width": width})
        v = _same(file, units, values)
        mha = units[0][0].group
        dim = v["width"] if up is None else up.width()
        if up is not None:
            if up.arrays["weight"].shape != (v["width"], dim) or down.arrays["weight"].shape != (dim, v["width"]):
                raise VPIntegratorError(f"{file}: group {up.group}: Dense layers {up.arrays['weight'].shape[::-1]} and "
                                        f"{down.arrays['weight'].shape[::-1]} do not scale dim ↔ {v['width']}")
            if dim == v["width"]:
                raise VPIntegratorError(f"{file}: group {up.group}: a Dense layer {dim} → {dim}; GML scales only when "
                                        "transformer_dim ≠ dim, and so do we")
            if not (up.has_bias and down.has_bias):
                raise VPIntegratorError(f"{file}: group {up.group}: Dense layers without bias are not supported")
        return "st", {
            "dim": (dim, layers[0].group), "n_heads": (v["n_heads"], f"{mha}/PQ"), "n_blocks": (v["n_blocks"], span),
            "L": (len(units), span), "transformer_dim": (None if up is None else v["width"], mha),
            "form": ("gml", mha), "stiefel": (False, mha),
        }
    if "vpa" in kinds:
        units = _units(file, layers, "vpa")
        values = []
        for unit in units:
            width = unit[0].width()
            ff = unit[1:]
            bad = next((lay for lay in ff if lay.kind not in ("lower", "upper")), None)
            if bad is not None or not ff:
                where = bad.group if bad is not None else unit[0].group
                raise VPIntegratorError(f"{file}: group {where}: expected triangular layers after the attention of a "
                                        "VolumePreservingTransformer unit")
            chunk = _vpff_chunk(file, ff)
            if ff[0].width() != width:
                raise VPIntegratorError(f"{file}: group {ff[0].group}: size {ff[0].width()} after an attention of size {width}")
            values.append({**chunk, "skew_sym": unit[0].skew, "width": width})
        v = _same(file, units, values)
        return "vpt", {
            "dim": (v["width"], layers[0].group), "n_blocks": (v["n_blocks"], span), "n_linear": (v["n_linear"], span),
            "L": (len(units), span), "skew_sym": (v["skew_sym"], f"{layers[0].group}/A"),
            "init_upper": (v["init_upper"], layers[1].group if len(layers) > 1 else span),
            "positional": ("none", span),  # GML's VPT has no positional part: one feed-forward chain per unit
        }
    odd = next((lay for lay in layers if lay.kind not in ("lower", "upper")), None)
    if odd is not None:
        raise VPIntegratorError(f"{file}: group {odd.group}: a {_GML_NAMES[odd.kind]} in a network without attention; "
                                "only VolumePreservingFeedForward (triangular layers) is read without attention")
    chunk = _vpff_chunk(file, layers)
    return "vpff", {"dim": (layers[0].width(), layers[0].group), **{k: (val, span) for k, val in chunk.items()}}


# ------------------------------------------------------------------------------------ weights to ours


def _put(file: str, where: str, param: torch.Tensor | None, array: np.ndarray | None, what: str) -> None:
    if param is None or array is None:
        if param is not None or array is not None:
            has = "has" if array is not None else "lacks"
            raise VPIntegratorError(f"{file}: group {where}: the file {has} {what}, the model built from it does not match")
        return
    if tuple(param.shape) != tuple(array.shape):
        raise VPIntegratorError(f"{file}: group {where}: {what} of shape {tuple(array.shape)} (GML orientation) does "
                                f"not fit our parameter of shape {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(torch.from_numpy(np.ascontiguousarray(array)).to(param.dtype))


def _load_triangular(file: str, ours: nn.Module, lay: _Layer) -> None:
    mine = "lower" if type(ours).__name__ == "VolumePreservingLowerLayer" else "upper"
    if mine != lay.kind:
        raise VPIntegratorError(f"{file}: group {lay.group}: a {lay.kind} triangular layer where the model has {mine}")
    _put(file, f"{lay.group}/weight", ours.weight, lay.arrays["S"], "S")
    _put(file, f"{lay.group}/bias", ours.bias, lay.arrays.get("bias"), "bias")


def _load_weights(file: str, model: nn.Module, name: str, layers: list[_Layer]) -> None:
    it = iter(layers)
    if name == "vpff":
        for ours in model.layers:
            _load_triangular(file, ours, next(it))
        return
    if getattr(model, "transformer_dim", getattr(model, "dim", None)) != model.dim:
        for ours, lay in ((model.upscale, layers[0]), (model.downscale, layers[-1])):
            _put(file, f"{lay.group}/W", ours.weight, lay.arrays["weight"], "W")
            _put(file, f"{lay.group}/b", ours.bias, lay.arrays["bias"], "b")
        it = iter(layers[1:-1])
    for block in model.blocks:
        lay = next(it)
        if name == "vpt":
            att = block.attention
            _put(file, f"{lay.group}/A", att.weight, lay.arrays["S"] if lay.skew else lay.arrays["A"], "A")
            for ours in block.feedforward.layers:
                _load_triangular(file, ours, next(it))
            continue
        att = block.attention
        for ours_group, part in ((att.query, "PK"), (att.key, "PQ"), (att.value, "PV")):  # GML's PK is our query
            for h, (proj, P) in enumerate(zip(ours_group, lay.arrays[part]), start=1):
                _put(file, f"{lay.group}/{part}/head_{h}", proj.weight, P, part)
        for ours in block.resnet:
            res = next(it)
            _put(file, f"{res.group}/weight", ours.weight, res.arrays["weight"], "weight")
            _put(file, f"{res.group}/bias", ours.bias, res.arrays["bias"], "bias")


# ---------------------------------------------------------------------------------------------- API


def _check_file(file: str) -> None:
    import h5py

    p = Path(file)
    if not p.exists():
        raise GMLMissingFile(f"GML weight file {file} does not exist; give gml:PATH.h5 (a GeometricMachineLearning "
                             "HDF5 weight file)")
    if p.is_dir():
        raise VPIntegratorError(f"GML weight file {file}: is a directory; give an HDF5 file written by GML")
    if not h5py.is_hdf5(p):
        raise VPIntegratorError(f"GML weight file {file}: not an HDF5 file; give an HDF5 weight file written by "
                                "GeometricMachineLearning.jl (a .pt file loads without the gml: prefix)")


def read_gml(path: str | os.PathLike[str], name: str | None = None, *, dtype: Any = "float64", **hparams: Any) -> nn.Module:
    """Read a GeometricMachineLearning.jl HDF5 weight file into a VPFF, VPT or ST.

    Parameters
    ----------
    path : path-like
        The HDF5 file (groups ``L1 … Ln``).
    name : {"vpff", "vpt", "st"}, optional
        The architecture; read from the file when left out. A contradiction is an error.
    dtype : {"float64", "float32"} or torch.dtype
        Of the parameters. Default float64: GML trained these networks in float32, and float32 values are
        exact in float64; our rollouts, metrics and compiled kernels compute in float64, so the model
        evaluates the file's weights without adding float32 rounding of its own.
    **hparams
        Model keys (see [`build_model`][vpintegrator.models.build_model]). Keys the file determines (dim, n_blocks,
        n_linear, L, n_heads, skew_sym, init_upper, positional, transformer_dim, form, stiefel) are checked against it
        (a contradiction is a one-line error naming the key and the group); the others are taken as given,
        else the defaults (seq_len 3 for vpt/st and 1 for vpff, activation tanh, add_connection False).
        ``symmetric=True`` is refused: GML has no symmetric variant, so its weights mean the plain network.

    Returns
    -------
    nn.Module
        In eval mode, with ``model.config`` (round-trips through ``build_model``) and
        ``model.gml_provenance`` (the source file; [`save_model`][vpintegrator.models.save_model] records it).
    """
    file = os.fspath(path)
    _check_file(file)
    try:
        layers = _read_layers(file)
    except VPIntegratorError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as err:  # h5py's errors on a damaged file
        raise VPIntegratorError(f"GML weight file {file}: unreadable HDF5 ({type(err).__name__}: "
                                f"{' '.join(str(err).split())[:160]})") from None
    inferred_name, inferred = _infer(file, layers)
    if name is not None and name != inferred_name:
        if name not in _MODELS:
            raise VPIntegratorError(f"{file}: name {name!r} is not a model; valid names: vpff, vpt, st")
        raise VPIntegratorError(
            f"{file}: name {name!r} contradicts group {layers[0].group} ({_GML_NAMES[layers[0].kind]}): the file holds a "
            f"{inferred_name!r} network; drop name or give {inferred_name!r}"
        )
    for key, given in hparams.items():
        if key not in inferred:
            continue
        value, group = inferred[key]
        same = given == value
        if key == "transformer_dim":
            dim = inferred["dim"][0]
            same = (dim if given is None else given) == (dim if value is None else value)
        if not same:
            raise VPIntegratorError(
                f"{file}: config {key} = {given!r} contradicts group {group}, which gives {key} = {value!r}; "
                f"drop {key} or give {value!r}"
            )
    if hparams.get("symmetric"):
        raise VPIntegratorError(f"{file}: symmetric = true: GML has no symmetric (palindromic) variant, its weights "
                                "define the plain composition; drop symmetric")
    merged = {key: value for key, (value, _) in inferred.items()}
    merged.update({"seq_len": 1 if inferred_name == "vpff" else 3})
    if inferred_name == "st":
        merged["add_connection"] = False
    merged.update(hparams)
    if merged.get("transformer_dim") is None and inferred_name == "st":
        merged.pop("transformer_dim")  # the class default (None) for an unscaled file
    try:
        dtype = resolve_dtype(dtype)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"{file}: {err}") from None
    try:
        model = build_model(inferred_name, **merged)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"{file}: {err}") from None
    model = model.to(dtype)
    _load_weights(file, model, inferred_name, layers)
    model.gml_provenance = str(Path(file).resolve())
    return model.eval()


def _spec_value(text: str) -> Any:
    """A ``--set``-style value (``vpintegrator.config.parse_value``: TOML literal, else the string), with
    ``none``/``null`` for None and booleans in any case."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    return parse_value(text)


def parse_gml_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"gml:PATH[?KEY=VALUE[&KEY=VALUE…]]"`` -> (PATH, {KEY: value}).

    Values are ints, floats, ``true``/``false``, ``none`` or strings; keys are ``name``, ``dtype`` and
    model keys (``seq_len``, ``activation``, ...), as [`read_gml`][vpintegrator.models.read_gml] takes them.
    """
    text = spec[len(GML_PREFIX):] if spec.startswith(GML_PREFIX) else spec
    file, sep, query = text.partition("?")
    params: dict[str, Any] = {}
    for item in query.split("&") if sep else ():
        if not item.strip():  # "FILE.h5?" or a doubled "&"
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise VPIntegratorError(f"model {spec!r}: {item!r} is not KEY=VALUE; write gml:FILE.h5?seq_len=3&name=vpt")
        params[key.strip()] = _spec_value(value.strip())
    if not file:
        raise VPIntegratorError(f"model {spec!r}: no file after {GML_PREFIX!r}; write gml:FILE.h5")
    return file, params
