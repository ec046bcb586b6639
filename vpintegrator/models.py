"""Neural integrators, the model registry and model files.

Every model is a ``torch.nn.Module`` with attributes ``dim``, ``seq_len``, ``pred_window`` and ``config``
(the keyword arguments plus ``"name"``; ``build_model(**model.config)`` rebuilds it). ``forward`` maps
(batch, seq_len, dim) to (batch, pred_window, dim).

===========  =====================================  ====================================================
name         class                                  paper configuration (parameters)
===========  =====================================  ====================================================
``vpff``     :class:`VolumePreservingFeedForward`   dim 3, n_blocks 6 (135)
``vpt``      :class:`VolumePreservingTransformer`   dim 3, seq_len 3, n_blocks 2, L 3 (162; 180 arbitrary)
``st``       :class:`StandardTransformerIntegrator` dim 3, seq_len 3, n_blocks 2, L 3, 1 head (189)
===========  =====================================  ====================================================

Model file format (``save_model``/``load_model``): one ``torch.save`` dict
``{"format": "vpintegrator-model", "version": 1, "config": {...}, "state_dict": {...},
"vpintegrator_version": "...", **extra}``, loadable with ``torch.load(weights_only=True)`` (no pickled code).
"""

from __future__ import annotations

import inspect
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._io import atomic_path
from ._version import __version__
from .errors import VPIntegratorError
from .nn.feedforward import chain_index, chain_supported, triangular_chain_planes
from .nn._common import check_bool, check_input, check_positive_int, from_planes, get_activation, to_planes
from .nn.attention import MHA_FORMS, MultiHeadAttention, VolumePreservingAttention
from .nn.feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer

__all__ = [
    "VolumePreservingFeedForward",
    "VolumePreservingTransformer",
    "StandardTransformerIntegrator",
    "build_model",
    "list_models",
    "default_model_config",
    "save_model",
    "load_model",
    "load_checkpoint",
    "list_pretrained",
    "count_parameters",
]

MODEL_FORMAT = "vpintegrator-model"
MODEL_FORMAT_VERSION = 1
PRETRAINED_PREFIX = "pretrained:"
PRETRAINED_DIR = Path(__file__).parent / "pretrained"
_RESERVED_KEYS = ("format", "version", "config", "state_dict", "vpintegrator_version")


def count_parameters(model: nn.Module) -> int:
    """Number of learnable scalars (``requires_grad`` parameters) of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _first_parameter(model: nn.Module) -> torch.Tensor | None:
    return next(model.parameters(), None)


def _record_config(model: nn.Module, name: str, frame_locals: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments (defaults filled in) plus ``name``: what ``build_model`` needs."""
    params = inspect.signature(type(model).__init__).parameters
    config: dict[str, Any] = {"name": name}
    for key in params:
        if key != "self":
            config[key] = frame_locals[key]
    return config


class VolumePreservingFeedForward(nn.Module):
    """Volume-preserving feed-forward network (GML ``VolumePreservingFeedForward``), position-wise.

    Layer order (GML, ``init_upper=False``), each layer x ↦ x + σ(x Lᵀ + b) with L strictly lower
    ("lower") or strictly upper ("upper") triangular::

        for each of n_blocks blocks:
            (n_linear − 1) × [lower linear, no bias; upper linear, no bias]
            lower linear, no bias; upper linear + bias
            lower σ + bias;        upper σ + bias
        final: lower linear, no bias; upper linear + bias

    ``init_upper=True`` swaps lower and upper everywhere. Every layer has det J = 1, so the network does.
    Parameters for dim d, m = d(d−1)/2: ``n_blocks·((2 n_linear + 2)·m + 3 d) + d²``;
    d = 3, n_blocks = 6, n_linear = 1 → 6·21 + 9 = 135.

    Parameters
    ----------
    dim : int
    n_blocks : int
    n_linear : int
    activation : str
        Nonlinearity σ of the nonlinear layers (``"tanh"``).
    init_upper : bool
        Start every pair with the upper layer.
    seq_len : int
        Window length it is used with as an integrator (1: one step z_n -> z_{n+1}); ``pred_window`` equals
        it. The network acts on each state independently, so ``forward`` accepts any seq.
    """

    model_name = "vpff"

    def __init__(
        self,
        dim: int,
        n_blocks: int = 1,
        n_linear: int = 1,
        activation: str = "tanh",
        init_upper: bool = False,
        seq_len: int = 1,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        check_positive_int(n_blocks, "n_blocks", minimum=0)
        check_positive_int(n_linear, "n_linear")
        get_activation(activation)
        check_bool(init_upper, "init_upper")
        self.seq_len = self.pred_window = check_positive_int(seq_len, "seq_len")
        self.config = _record_config(self, self.model_name, locals())
        first, second = (
            (VolumePreservingUpperLayer, VolumePreservingLowerLayer)
            if init_upper
            else (VolumePreservingLowerLayer, VolumePreservingUpperLayer)
        )
        layers: list[nn.Module] = []
        for _ in range(n_blocks):
            for _ in range(n_linear - 1):
                layers += [first(dim, "identity", bias=False), second(dim, "identity", bias=False)]
            layers += [first(dim, "identity", bias=False), second(dim, "identity", bias=True)]
            layers += [first(dim, activation, bias=True), second(dim, activation, bias=True)]
        layers += [first(dim, "identity", bias=False), second(dim, "identity", bias=True)]
        self.layers = nn.Sequential(*layers)
        # where each layer's free entries sit in the stacked matrices of the fused chain (not saved)
        self.register_buffer("_chain_index", chain_index(layers), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, dim) -> (batch, seq, dim), each state mapped independently."""
        check_input(x, type(self).__name__, self.dim, like=_first_parameter(self))
        return from_planes(self._forward_planes(to_planes(x)))

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """On contiguous xp (dim, seq, batch), layer after layer without changing layout."""
        layers = list(self.layers)
        if chain_supported(layers, xp):  # the whole stack as one autograd node, bitwise the same forward
            return triangular_chain_planes(layers, self._chain_index, xp)
        for layer in layers:
            xp = layer._forward_planes(xp)
        return xp

    def window_chain(self) -> list[nn.Module]:
        """The layers whose composition is ``forward`` (for :mod:`vpintegrator.testing`)."""
        return list(self.layers)


class _VPTBlock(nn.Module):
    def __init__(self, attention: nn.Module, feedforward: nn.Module) -> None:
        super().__init__()
        self.attention = attention
        self.feedforward = feedforward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.feedforward(self.attention(x))

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        return self.feedforward._forward_planes(self.attention._forward_planes(xp))

    def window_chain(self) -> list[nn.Module]:
        return [self.attention, self.feedforward]


class VolumePreservingTransformer(nn.Module):
    """The volume-preserving transformer (GML ``VolumePreservingTransformer``).

    L × [VolumePreservingAttention(dim, skew_sym), VolumePreservingFeedForward(dim, n_blocks, n_linear)],
    each feed-forward part with its final linear pair (as GML's Chain); no upscaling, no normalisation,
    no residual around the attention. Maps a window X[i:i+T] to X[i+T:i+2T] (T = seq_len = pred_window).
    Volume preserving on ℝ^{T·dim} when ``skew_sym=True``.

    Parameters: L·(n_A + n_VPFF), n_A = d(d−1)/2 (skew) or d² (arbitrary); paper config (d 3, T 3,
    n_blocks 2, n_linear 1, L 3) → 162 (skew), 180 (arbitrary).

    Parameters
    ----------
    dim, seq_len : int
    n_blocks, n_linear : int
        Of each feed-forward part.
    L : int
        Number of transformer units.
    activation : str
    skew_sym : bool
        Skew-symmetric attention weighting (volume preserving) or GML's arbitrary weighting (not).
    init_upper : bool
        Passed to the feed-forward parts.

    Defaults: L = 1 and ``skew_sym=True`` (GML's constructor defaults are L = 2 and ``skew_sym=false``).
    """

    model_name = "vpt"

    def __init__(
        self,
        dim: int,
        seq_len: int,
        n_blocks: int = 1,
        n_linear: int = 1,
        L: int = 1,
        activation: str = "tanh",
        skew_sym: bool = True,
        init_upper: bool = False,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.seq_len = self.pred_window = check_positive_int(seq_len, "seq_len")
        check_positive_int(L, "L")
        self.config = _record_config(self, self.model_name, locals())
        self.blocks = nn.Sequential(
            *(
                _VPTBlock(
                    VolumePreservingAttention(dim, skew_sym=skew_sym),
                    VolumePreservingFeedForward(dim, n_blocks, n_linear, activation, init_upper=init_upper),
                )
                for _ in range(L)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim)."""
        check_input(x, type(self).__name__, self.dim, self.seq_len, like=_first_parameter(self))
        xp = to_planes(x)  # (dim, seq_len, batch) between the layers
        for block in self.blocks:
            xp = block._forward_planes(xp)
        return from_planes(xp)

    def window_chain(self) -> list[nn.Module]:
        """The units whose composition is ``forward`` (for :mod:`vpintegrator.testing`)."""
        return list(self.blocks)


class _STBlock(nn.Module):
    def __init__(self, attention: nn.Module, resnet: nn.Module) -> None:
        super().__init__()
        self.attention = attention
        self.resnet = resnet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resnet(self.attention(x))

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        xp = to_planes(self.attention(from_planes(xp)))  # attention in (batch, seq, dim)
        for layer in self.resnet:
            xp = layer._forward_planes(xp)
        return xp

    def window_chain(self) -> list[nn.Module]:
        return [self.attention, self.resnet]


class StandardTransformerIntegrator(nn.Module):
    """The paper's standard-transformer baseline (GML ``StandardTransformerIntegrator``, transformer_dim = dim).

    L × [MultiHeadAttention(dim, n_heads, form, add_connection, stiefel),
    ResNet: n_blocks × (x ↦ x + σ(x Wᵀ + b)), then x ↦ x + (x Wᵀ + b)]. No positional encoding.
    Paper config (dim 3, n_heads 1, n_blocks 2, L 3, no add connection, gml form) → 189 parameters.

    Parameters
    ----------
    dim : int
    n_heads : int
    n_blocks : int
        Nonlinear ResNet layers per unit.
    L : int
        Number of transformer units.
    add_connection : bool
        Add the input to the attention output.
    seq_len : int
        Window length (= pred_window).
    form : {"gml", "standard"}
        Attention form, see :class:`~vpintegrator.nn.MultiHeadAttention`.
    stiefel : bool
        Orthonormal attention projections (gml form).
    activation : str
        ResNet nonlinearity.
    """

    model_name = "st"

    def __init__(
        self,
        dim: int,
        n_heads: int = 1,
        n_blocks: int = 2,
        L: int = 3,
        add_connection: bool = False,
        seq_len: int = 3,
        form: str = "gml",
        stiefel: bool = False,
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.seq_len = self.pred_window = check_positive_int(seq_len, "seq_len")
        check_positive_int(L, "L")
        check_positive_int(n_blocks, "n_blocks", minimum=0)
        get_activation(activation)
        if form not in MHA_FORMS:
            raise VPIntegratorError(f"form: expected one of {', '.join(MHA_FORMS)}, got {form!r}")
        self.config = _record_config(self, self.model_name, locals())
        self.blocks = nn.Sequential(
            *(
                _STBlock(
                    MultiHeadAttention(dim, n_heads, form=form, add_connection=add_connection, stiefel=stiefel),
                    nn.Sequential(
                        *(ResNetLayer(dim, activation) for _ in range(n_blocks)),
                        ResNetLayer(dim, "identity"),
                    ),
                )
                for _ in range(L)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim)."""
        check_input(x, type(self).__name__, self.dim, self.seq_len, like=_first_parameter(self))
        xp = to_planes(x)  # (dim, seq_len, batch) between the layers
        for block in self.blocks:
            xp = block._forward_planes(xp)
        return from_planes(xp)

    def window_chain(self) -> list[nn.Module]:
        """The units whose composition is ``forward`` (for :mod:`vpintegrator.testing`)."""
        return list(self.blocks)


_MODELS: dict[str, type[nn.Module]] = {
    cls.model_name: cls
    for cls in (VolumePreservingFeedForward, VolumePreservingTransformer, StandardTransformerIntegrator)
}


# The paper's hyper-parameters per architecture (Brantner et al. 2025; configs/rigid_body_*.toml): what a
# model gets for every key its config leaves out (``dim`` excepted: it comes from the data).
_PAPER_CONFIGS: dict[str, dict[str, Any]] = {
    "vpff": dict(seq_len=1, n_blocks=6, n_linear=1, activation="tanh"),
    "vpt": dict(seq_len=3, n_blocks=2, n_linear=1, L=3, activation="tanh", skew_sym=True),
    "st": dict(seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False, form="gml", activation="tanh"),
}


def default_model_config(name: str) -> dict[str, Any]:
    """The paper's hyper-parameters of the architecture ``name`` (without ``dim``, which the data gives).

    ``vpff``: 6 blocks (135 parameters at dim 3); ``vpt``: seq_len 3, 2 blocks, L 3, skew-symmetric
    attention (162); ``st``: seq_len 3, 2 blocks, L 3, one head, GML's form (189). Training fills the keys
    a ``[model]`` table leaves out from here, so ``vp-train --model vpt`` trains the paper's VPT.
    """
    if name not in _MODELS:
        raise VPIntegratorError(
            f"model name: unknown model {name!r}{_did_you_mean(name)}; valid names: {', '.join(list_models())}"
        )
    return dict(_PAPER_CONFIGS[name])


def _did_you_mean(name: Any) -> str:
    import difflib

    close = difflib.get_close_matches(str(name), list_models(), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def list_models() -> list[str]:
    """Registry names accepted by :func:`build_model`."""
    return sorted(_MODELS)


def build_model(name: str, **config: Any) -> nn.Module:
    """Build a registered model from its name and keyword configuration.

    Parameters
    ----------
    name : str
        One of :func:`list_models` (``"vpff"``, ``"vpt"``, ``"st"``).
    **config
        The class's keyword arguments (e.g. ``dim=3, seq_len=3, n_blocks=2, L=3``). ``model.config``
        (which contains ``name``) round-trips: ``build_model(**model.config)``.

    Returns
    -------
    torch.nn.Module
        In float32 (``torch.get_default_dtype()``) on the CPU; use ``.to(dtype=..., device=...)``.
    """
    if name not in _MODELS:
        raise VPIntegratorError(
            f"model name: unknown model {name!r}{_did_you_mean(name)}; valid names: {', '.join(list_models())}"
        )
    cls = _MODELS[name]
    params = {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}
    for key in config:
        if key not in params:
            raise VPIntegratorError(
                f"model config for {name!r}: unknown key {key!r}; valid keys: {', '.join(params)}"
            )
    for key, p in params.items():
        if p.default is inspect.Parameter.empty and key not in config:
            raise VPIntegratorError(f"model config for {name!r}: missing required key {key!r}")
    try:
        return cls(**config)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"model config for {name!r}: {err}", key=err.key) from None


def save_model(model: nn.Module, path: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
    """Write ``model`` (config + state_dict) atomically to ``path``.

    Parameters
    ----------
    model : nn.Module
        A model built by this package (it has ``config``).
    path : path-like
        Target file, conventionally ``*.pt``.
    extra : dict, optional
        More entries for the file (training state: optimizer, epoch, ...); values must be loadable with
        ``torch.load(weights_only=True)`` (tensors, numbers, strings, lists, dicts). Keys must not be one of
        ``format, version, config, state_dict, vpintegrator_version``.

    Returns
    -------
    Path
        The file written.
    """
    config = getattr(model, "config", None)
    if not isinstance(config, dict) or config.get("name") not in _MODELS:
        raise VPIntegratorError(
            f"save_model: model {type(model).__name__} has no registry config; build it with build_model()"
        )
    extra = dict(extra or {})
    clash = [k for k in extra if k in _RESERVED_KEYS]
    if clash:
        raise VPIntegratorError(f"save_model: extra key {clash[0]!r} is reserved; rename it")
    payload = {
        "format": MODEL_FORMAT,
        "version": MODEL_FORMAT_VERSION,
        "config": dict(config),
        "state_dict": model.state_dict(),
        "vpintegrator_version": __version__,
        **extra,
    }
    path = Path(path)
    with atomic_path(path, suffix=".pt") as tmp:
        torch.save(payload, tmp)
    return path


def list_pretrained() -> list[str]:
    """Names usable as ``load_model("pretrained:<name>")`` (files ``vpintegrator/pretrained/<name>.pt``)."""
    if not PRETRAINED_DIR.is_dir():
        return []
    return sorted(p.stem for p in PRETRAINED_DIR.glob("*.pt"))


def _resolve_model_path(path: str | os.PathLike) -> Path:
    text = os.fspath(path)
    if isinstance(text, str) and text.startswith(PRETRAINED_PREFIX):
        name = text[len(PRETRAINED_PREFIX) :]
        available = list_pretrained()
        if name not in available:
            shipped = ", ".join(available) if available else "none are shipped with this install"
            raise VPIntegratorError(f"model {text!r}: no pretrained model {name!r}; available: {shipped}")
        return PRETRAINED_DIR / f"{name}.pt"
    p = Path(text)
    if p.is_dir():
        for candidate in ("best.pt", "last.pt"):
            if (p / candidate).is_file():
                return p / candidate
        raise VPIntegratorError(f"model path {p}: a directory without best.pt or last.pt; pass a run directory or a .pt file")
    if not p.exists():
        raise _MissingFile(f"model file {p} does not exist; give a .pt file, a run directory or pretrained:<name>")
    return p


class _MissingFile(VPIntegratorError, FileNotFoundError):
    """A missing model file: a one-line :class:`VPIntegratorError` that is also a ``FileNotFoundError``."""


_ZIP_MAGIC = b"PK\x03\x04"


def read_torch_file(file: str | os.PathLike, map_location: Any = "cpu", what: str = "model file") -> Any:
    """``torch.load(file, weights_only=True)`` with one-line errors naming ``file`` (never runs pickled code).

    Empty, truncated, HDF5, text and foreign (code-carrying) files each get a message saying what was
    expected instead of torch's multi-line traceback.
    """
    file = Path(file)
    if file.is_dir():
        raise VPIntegratorError(f"{what} {file}: is a directory; expected a .pt file written by vpintegrator")
    with open(file, "rb") as f:
        head = f.read(8)
    if not head:
        raise VPIntegratorError(f"{what} {file}: empty file; expected a .pt file written by vpintegrator")
    if head.startswith(b"\x89HDF"):
        raise VPIntegratorError(
            f"{what} {file}: an HDF5 file (data or rollout), not a torch checkpoint; give a .pt file or a run directory"
        )
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error below says it all
            warnings.simplefilter("ignore")
            return torch.load(file, map_location=map_location, weights_only=True)
    except Exception as err:  # unpickling errors have many types; report them uniformly
        text = str(err).lower()
        foreign = "unsupported global" in text or ("unsupported operand" in text and head[:1] == b"\x80")  # a pickle
        if isinstance(err, pickle.UnpicklingError) and foreign:
            reason = ("refused by torch.load(weights_only=True): it holds objects other than tensors and plain "
                      "data (a foreign pickle, possibly code; it was not run)")
        elif head.startswith(_ZIP_MAGIC):
            reason = "truncated or corrupt torch file (its zip archive is incomplete)"
        else:
            first = str(err).split(". ")[0].splitlines()[0] if str(err) else ""
            reason = f"not a torch file ({type(err).__name__}: {first})"
        raise VPIntegratorError(
            f"{what} {file}: {reason}; expected a .pt file written by vpintegrator (vp-train's best.pt / last.pt)"
        ) from None


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Read and validate a model file written by :func:`save_model`; return the whole dict.

    ``path`` may be a file, a run directory (``best.pt``, else ``last.pt``) or ``"pretrained:<name>"``.
    Loaded with ``torch.load(weights_only=True)``.
    """
    file = _resolve_model_path(path)
    payload = read_torch_file(file, map_location=map_location, what="model file")
    if not isinstance(payload, dict):
        raise VPIntegratorError(
            f"model file {file}: holds a {type(payload).__name__}, expected a dict written by vpintegrator.save_model "
            "(a .pt file from vp-train's run directory)"
        )
    if payload.get("format") != MODEL_FORMAT:
        raise VPIntegratorError(
            f"model file {file}: not a vpintegrator model (key 'format' should be {MODEL_FORMAT!r}); "
            "write it with vpintegrator.save_model"
        )
    if payload.get("version") != MODEL_FORMAT_VERSION:
        raise VPIntegratorError(
            f"model file {file}: format version {payload.get('version')!r}, this vpintegrator reads "
            f"version {MODEL_FORMAT_VERSION}; upgrade vpintegrator"
        )
    for key in ("config", "state_dict"):
        if not isinstance(payload.get(key), dict):
            raise VPIntegratorError(f"model file {file}: key {key!r} is missing or not a dict")
    payload["path"] = str(file)
    return payload


def load_model(path: str | os.PathLike, map_location: Any = "cpu") -> nn.Module:
    """Rebuild a model from a file written by :func:`save_model`.

    Parameters
    ----------
    path : path-like or str
        A ``.pt`` file, a run directory (uses ``best.pt``, else ``last.pt``), or ``"pretrained:<name>"``.
    map_location : str or torch.device
        Device to load onto (``torch.load``'s ``map_location``).

    Returns
    -------
    nn.Module
        In eval mode, with the dtype and device of the saved (mapped) state_dict.
    """
    payload = load_checkpoint(path, map_location=map_location)
    file, config, state = payload["path"], dict(payload["config"]), payload["state_dict"]
    name = config.pop("name", None)
    try:
        model = build_model(name, **config)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"model file {file}: key 'config' does not build a model ({err})") from err
    floats = [t for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if floats:
        model = model.to(device=floats[0].device, dtype=floats[0].dtype)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise VPIntegratorError(
            f"model file {file}: key 'state_dict' does not match config {payload['config']} ({str(err).splitlines()[0]})"
        ) from err
    return model.eval()
