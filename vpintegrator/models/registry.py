"""The model registry: names, the paper's default hyper-parameters, ``build_model``."""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from ..errors import VPIntegratorError
from .lie_poisson import LiePoissonNet, LiePoissonTransformer
from .standard import StandardTransformerIntegrator
from .symplectic import GSympNet, LASympNet, SymplecticTransformer
from .volume import VolumePreservingFeedForward, VolumePreservingTransformer

__all__ = ["build_model", "list_models", "default_model_config", "register_model", "model_preserves", "model_size"]

_MODELS: dict[str, type[nn.Module]] = {
    cls.model_name: cls
    for cls in (VolumePreservingFeedForward, VolumePreservingTransformer, StandardTransformerIntegrator,
                LASympNet, GSympNet, SymplecticTransformer, LiePoissonNet, LiePoissonTransformer)
}


# The paper's hyper-parameters per architecture (Brantner et al. 2025; configs/rigid_body_*.toml): what a
# model gets for every key its config leaves out (``dim`` excepted: it comes from the data).
_PAPER_CONFIGS: dict[str, dict[str, Any]] = {
    "vpff": dict(seq_len=1, n_blocks=6, n_linear=1, activation="tanh"),
    "vpt": dict(seq_len=3, n_blocks=2, n_linear=1, L=3, activation="tanh", skew_sym=True),
    "st": dict(seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False, form="gml", activation="tanh"),
    # the symplectic side: GML's constructor defaults (no paper configuration; upscaling 2·dim when left out)
    "la_sympnet": dict(seq_len=1, depth=5, nhidden=1, activation="tanh", init_upper_linear=True, init_upper_act=True),
    "g_sympnet": dict(seq_len=1, n_layers=2, activation="tanh", init_upper=True),
    "symplectic_transformer": dict(seq_len=3, n_sympnet=2, L=1, sympnet_activation="tanh",
                                   attention_activation="matrix_softmax", init_upper=True, symmetric=True),
    # Lie–Poisson networks for so(3)* (issue 21; no paper configuration: sized like the paper's VPT)
    "lpnet": dict(seq_len=1, n_layers=8, width=4),
    "lp_transformer": dict(seq_len=3, L=2, n_layers=4, width=4),
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
    """``" (did you mean 'x'?)"`` for the registered model closest to ``name`` (``vpintegrator.config.did_you_mean``)."""
    from ..config import did_you_mean

    return did_you_mean(name, list_models())


def register_model(cls: type[nn.Module], defaults: dict[str, Any] | None = None) -> type[nn.Module]:
    """Add an architecture to the registry under ``cls.model_name``, with its default hyper-parameters.

    ``cls`` is an ``nn.Module`` whose constructor takes ``dim`` plus keyword arguments and records them in
    ``self.config`` (see the shipped classes); ``defaults`` is what [`default_model_config`][vpintegrator.models.default_model_config] returns for
    it (what ``vp-train --model NAME`` trains without a ``[model]`` table). Returns ``cls``.
    """
    name = getattr(cls, "model_name", None)
    if not isinstance(name, str) or not name:
        raise VPIntegratorError(f"register_model: {cls!r} has no model_name string attribute; set one")
    if name in _MODELS and _MODELS[name] is not cls:
        raise VPIntegratorError(f"register_model: the name {name!r} is taken by {_MODELS[name].__name__}; choose another")
    _MODELS[name] = cls
    _PAPER_CONFIGS[name] = dict(defaults or {})
    return cls


def list_models() -> list[str]:
    """Registry names accepted by [`build_model`][vpintegrator.models.build_model]."""
    return sorted(_MODELS)


def build_model(name: str, **config: Any) -> nn.Module:
    """Build a registered model from its name and keyword configuration.

    Parameters
    ----------
    name : str
        One of [`list_models`][vpintegrator.models.list_models] (``"vpff"``, ``"vpt"``, ``"st"``).
    **config
        The class's keyword arguments (e.g. ``dim=3, seq_len=3, n_blocks=2, L=3``); ``dim`` is required,
        and every key left out takes the paper's value ([`default_model_config`][vpintegrator.models.default_model_config]), as ``vp-train
        --model NAME`` does: ``build_model("vpt", dim=3)`` is the paper's 162-parameter VPT. ``model.config``
        (which contains ``name``) round-trips: ``build_model(**model.config)``.

    Returns
    -------
    torch.nn.Module
        In float32 (``torch.get_default_dtype()``) on the CPU; use ``.to(dtype=..., device=...)``.

    Raises
    ------
    VPIntegratorError
        An unknown name or key, a bad value, or sizes (``n_blocks``, ``L``, ``width``, ...) whose model
        would not fit in the memory available: refused before it is built, the estimate in the message
        (``vpintegrator.models.sizes``).
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
    config = {**_PAPER_CONFIGS.get(name, {}), **config}  # the same defaults as vp-train --model NAME
    for key, p in params.items():
        if p.default is inspect.Parameter.empty and key not in config:
            raise VPIntegratorError(f"model config for {name!r}: missing required key {key!r}")
    from .sizes import check_model_memory

    check_model_memory(name, cls, config)  # a size that cannot fit is refused before anything is built
    try:
        return cls(**config)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"model config for {name!r}: {err}", key=err.key) from None


def model_size(name: str, **config: Any):
    """The size of ``build_model(name, **config)`` without building it (``vpintegrator.models.sizes``): a
    ``ModelSize`` (``numel`` parameters and buffers, ``objects`` modules and tensors, the ``large`` keys that
    were probed), or None when every integer key is at most ``sizes.PROBE_MAX`` (a small model) or the
    name is unknown. Keys left out take the paper's values, as in [`build_model`][vpintegrator.models.build_model].

    Examples
    --------
    >>> model_size("vpff", dim=3, n_blocks=10**8).numel
    27900000135.0
    """
    from .sizes import estimate_model_size

    if name not in _MODELS:
        return None
    return estimate_model_size(_MODELS[name], {**_PAPER_CONFIGS.get(name, {}), **config})


def model_preserves(model: nn.Module | str, **config: Any) -> tuple[str, ...]:
    """What an architecture keeps by construction: a tuple of ``"volume"``, ``"symplectic"``, ``"casimir"``,
    ``"poisson"``, ``"symmetric"`` (time-reversible: ``symmetric=True`` of vpff, vpt, lpnet, lp_transformer)
    (empty: nothing).

    ``model`` is a model (its ``preserves`` attribute) or a registry name (built with ``config`` on the
    defaults, since some claims depend on the configuration: the VPT with arbitrary attention weights keeps
    nothing, the symplectic transformer with vector softmax and symmetric A is not symplectic). A model
    without the attribute (a user's) claims nothing. Every claim is tested by the matching audit of
    [`vpintegrator.testing`][vpintegrator.testing] in float64.
    """
    if isinstance(model, str):
        dim = config.pop("dim", 4 if model in ("la_sympnet", "g_sympnet", "symplectic_transformer") else 3)
        model = build_model(model, dim=dim, **config)
    return tuple(getattr(model, "preserves", ()))
