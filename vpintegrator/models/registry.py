"""The model registry: names, default hyper-parameters, ``build_model``; a user's model by import path.

A model family registers itself beside its class: ``@register_model(defaults={...})`` (or bare
``@register_model``) above ``class MyNet(nn.Module)`` with ``model_name = "my_net"``. A class defined outside
the package also goes by its import path ``"package.module:ClassName"`` wherever a model name is accepted
(``build_model``, ``vp-train --model``, a config's ``[model] name``); its models record the path in their
``config`` as ``model_class`` (and so every checkpoint and ``config.toml``), and a fresh process imports it
from there (as ``system_class`` does for systems).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, TypeVar, overload

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..plugins import UserCodeError, class_path, import_class, importable_path, is_class_path, user_code

__all__ = ["build_model", "list_models", "default_model_config", "register_model", "model_preserves", "model_class", "model_size",
           "ModelSize", "PROBE_MAX", "OBJECT_BYTES", "estimate_model_size", "check_model_memory", "count_parameters"]

M = TypeVar("M", bound=type[nn.Module])

# name -> class, in registration order (the shipped families register themselves when vpintegrator.models
# imports their modules: vpff, vpt, st, la_sympnet, g_sympnet, symplectic_transformer, lpnet, lp_transformer)
_MODELS: dict[str, type[nn.Module]] = {}
# name -> the hyper-parameters a model gets for every key its config leaves out (``dim`` excepted: it comes
# from the data); for the shipped families the paper's (Brantner et al. 2025; configs/rigid_body_*.toml)
# or GML's constructor defaults, given to ``register_model`` beside each class
_PAPER_CONFIGS: dict[str, dict[str, Any]] = {}


# -- what a model records: its constructor's config (what build_model needs; a model of a class outside the
# package gets its own in _describe) and its parameter count


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


def default_model_config(name: str) -> dict[str, Any]:
    """The default hyper-parameters of the architecture ``name`` (without ``dim``, which the data gives).

    ``name`` is a registry name or a ``"package.module:ClassName"`` path. ``vpff``: 6 blocks (135
    parameters at dim 3); ``vpt``: seq_len 3, 2 blocks, L 3, skew-symmetric attention (162); ``st``: seq_len
    3, 2 blocks, L 3, one head, GML's form (189). Training fills the keys a ``[model]`` table leaves out from
    here, so ``vp-train --model vpt`` trains the paper's VPT. A class registered without defaults (or not
    registered) has none: its constructor's own defaults apply.
    """
    return dict(_PAPER_CONFIGS.get(_key(model_class(name)), {}))


def _did_you_mean(name: Any) -> str:
    """``" (did you mean 'x'?)"`` for the registered model closest to ``name`` (``vpintegrator.config.did_you_mean``)."""
    from ..config import did_you_mean

    return did_you_mean(name, list_models())


@overload
def register_model(cls: M, defaults: dict[str, Any] | None = None) -> M: ...


@overload
def register_model(cls: None = None, defaults: dict[str, Any] | None = None) -> Callable[[M], M]: ...


def register_model(cls: Any = None, defaults: dict[str, Any] | None = None) -> Any:
    """Add an architecture to the registry under ``cls.model_name``, with its default hyper-parameters.

    Three forms: ``register_model(MyNet, {"width": 8})``, and as a decorator beside the class,
    ``@register_model(defaults={"width": 8})`` or bare ``@register_model``.

    ``cls`` is an ``nn.Module`` whose constructor takes ``dim`` plus keyword arguments, with attributes
    ``dim``, ``seq_len``, ``pred_window`` and (optionally) ``config``, the constructor's arguments plus
    ``"name"`` (the shipped classes record it; [`build_model`][vpintegrator.models.build_model] records
    one for a class that does not). ``defaults`` is what
    [`default_model_config`][vpintegrator.models.default_model_config] returns for it (what ``vp-train
    --model NAME`` trains without a ``[model]`` table). Registering another class under a taken name is an
    error (the same class again, or a class of the same import path, as a re-run notebook cell makes,
    replaces it). Returns ``cls`` (the decorator forms: a decorator that does).
    """
    if cls is None:
        return lambda c: register_model(c, defaults)
    if isinstance(cls, nn.Module):
        raise VPIntegratorError(f"register_model: got an instance of {type(cls).__name__}, not a class; register the "
                                f"class itself: register_model({type(cls).__name__})")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise VPIntegratorError(f"register_model: {cls!r} is not a torch.nn.Module subclass; register a model class")
    if defaults is not None and not isinstance(defaults, dict):
        raise VPIntegratorError(f"register_model: defaults must be a dict of keyword arguments; got {defaults!r}")
    name = getattr(cls, "model_name", None)
    if not isinstance(name, str) or not name or is_class_path(name):
        raise VPIntegratorError(f"register_model: {cls!r} has no model_name string attribute (without ':'); set one")
    old = _MODELS.get(name)
    if old is not None and old is not cls and class_path(old) != class_path(cls):
        raise VPIntegratorError(f"register_model: the name {name!r} is taken by {old.__name__}; choose another")
    _MODELS[name] = cls
    _PAPER_CONFIGS[name] = dict(defaults or {})
    return cls


def list_models() -> list[str]:
    """Registry names accepted by [`build_model`][vpintegrator.models.build_model] (and any
    ``"package.module:ClassName"`` of a model class)."""
    return sorted(_MODELS)


def _unknown(name: Any) -> VPIntegratorError:
    return VPIntegratorError(
        f"model name: unknown model {name!r}{_did_you_mean(name)}; valid names: {', '.join(list_models())} "
        "(or your own model class as 'package.module:ClassName')"
    )


def model_class(name: str) -> type[nn.Module]:
    """The class behind a registry name or a ``"package.module:ClassName"`` path.

    A class imported by path that has a ``model_name`` not taken by another class is registered under it
    (with no defaults unless its module registered it with some). A missing module or class is a one-line
    error naming the path and how to fix it (install the package or put its folder on ``PYTHONPATH``).
    """
    if isinstance(name, str) and name in _MODELS:
        return _MODELS[name]
    if is_class_path(name):
        cls = import_class(name, "model", nn.Module, "a torch.nn.Module subclass")
        key = getattr(cls, "model_name", None)
        if isinstance(key, str) and key and not is_class_path(key) and key not in _MODELS:
            register_model(cls)
        return cls
    raise _unknown(name)


def _key(cls: type[nn.Module]) -> str:
    """The name a model of ``cls`` records: its registry name, else its import path."""
    key = getattr(cls, "model_name", None)
    if isinstance(key, str) and _MODELS.get(key) is cls:
        return key
    return class_path(cls)


def buildable(hparams: Any) -> bool:
    """Whether a model's hyper-parameters ``hparams`` (a model's ``config`` dict) name a class ``build_model``
    can find: a registry name, an import path, or a recorded ``model_class``."""
    if not isinstance(hparams, dict):
        return False
    name = hparams.get("name")
    return name in _MODELS or is_class_path(name) or is_class_path(hparams.get("model_class"))


def build_model(name: str, **hparams: Any) -> nn.Module:
    """Build a model from its registry name (or import path) and keyword hyper-parameters.

    Parameters
    ----------
    name : str
        One of [`list_models`][vpintegrator.models.list_models] (``"vpff"``, ``"vpt"``, ``"st"``, ...), or
        ``"package.module:ClassName"`` of your own ``nn.Module`` class (docs: *Your own model*).
    **hparams
        The class's keyword arguments (e.g. ``dim=3, seq_len=3, n_blocks=2, L=3``); ``dim`` is required,
        and every key left out takes the registered default ([`default_model_config`][vpintegrator.models.default_model_config]), as ``vp-train
        --model NAME`` does: ``build_model("vpt", dim=3)`` is the paper's 162-parameter VPT. ``model.config``
        (which contains ``name``, and ``model_class`` for a class outside the package) round-trips:
        ``build_model(**model.config)``; ``model_class`` (an import path) wins over ``name``.

    Returns
    -------
    torch.nn.Module
        In float32 (``torch.get_default_dtype()``) on the CPU; use ``.to(dtype=..., device=...)``.

    Raises
    ------
    VPIntegratorError
        An unknown name or key, a bad value, or sizes (``n_blocks``, ``L``, ``width``, ...) whose model
        would not fit in the memory available: refused before it is built, the estimate in the message
        (below).
    """
    path = hparams.pop("model_class", None)
    if path is not None and not is_class_path(path):
        raise VPIntegratorError(f"model config for {name!r}: model_class must be 'package.module:ClassName'; got {path!r}")
    cls = model_class(path if path is not None else name)
    key = _key(cls)
    params = {k: p for k, p in inspect.signature(cls.__init__).parameters.items()
              if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    for k in hparams:
        if k not in params:
            raise VPIntegratorError(
                f"model config for {name!r}: unknown key {k!r}; valid keys: {', '.join(params)}"
            )
    hparams = {**_PAPER_CONFIGS.get(key, {}), **hparams}  # the same defaults as vp-train --model NAME
    for k, p in params.items():
        if p.default is inspect.Parameter.empty and k not in hparams:
            raise VPIntegratorError(f"model config for {name!r}: missing required key {k!r}")
    check_model_memory(name, cls, hparams)  # a size that cannot fit is refused before anything is built
    try:
        with user_code(cls, f"build the model {name!r} with " + ", ".join(f"{k}={v!r}" for k, v in hparams.items())):
            model = cls(**hparams)
    except UserCodeError:
        raise
    except VPIntegratorError as err:
        raise VPIntegratorError(f"model config for {name!r}: {err}", key=err.key) from None
    if not isinstance(model, nn.Module):
        raise VPIntegratorError(f"model {name!r}: {class_path(cls)}(...) gave a {type(model).__name__}, not a "
                                "torch.nn.Module; a model class must build a module")
    _describe(model, key, hparams, params)
    return model


def _describe(model: nn.Module, key: str, hparams: dict[str, Any], params: dict[str, inspect.Parameter]) -> None:
    """A model of a class outside the package gets a ``config`` (its own, else its arguments with the
    constructor's defaults) with ``name`` and ``model_class``; a shipped model's is left as it is."""
    path = importable_path(type(model))
    own = getattr(model, "config", None)
    if path is None and isinstance(own, dict) and "name" in own:
        return
    if not isinstance(own, dict):
        own = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
        own.update(hparams)
    own = {"name": own.get("name", key), **{k: v for k, v in own.items() if k != "name"}}
    if path is not None:
        own["model_class"] = path
    model.config = own  # type: ignore[assignment]


def model_size(name: str, **hparams: Any) -> "ModelSize | None":
    """The size of ``build_model(name, **hparams)`` without building it (below): a
    ``ModelSize`` (``numel`` parameters and buffers, ``objects`` modules and tensors, the ``large`` keys that
    were probed), or None when every integer key is at most ``PROBE_MAX`` (a small model) or the
    name is unknown. Keys left out take the paper's values, as in [`build_model`][vpintegrator.models.build_model].

    Examples
    --------
    >>> model_size("vpff", dim=3, n_blocks=10**8).numel
    27900000135.0
    """
    if name not in _MODELS and not is_class_path(name):
        return None
    cls = model_class(name)
    return estimate_model_size(cls, {**_PAPER_CONFIGS.get(_key(cls), {}), **hparams})


def model_preserves(model: nn.Module | str, **hparams: Any) -> tuple[str, ...]:
    """What an architecture keeps by construction: a tuple of ``"volume"``, ``"symplectic"``, ``"casimir"``,
    ``"poisson"``, ``"symmetric"`` (time-reversible: ``symmetric=True`` of vpff, vpt, lpnet, lp_transformer)
    (empty: nothing).

    ``model`` is a model (its ``preserves`` attribute) or a registry name or import path (built with
    ``hparams`` on the defaults, at the class's ``example_dim`` (3 unless it says otherwise) when ``hparams``
    has no ``dim``, since some claims depend on the configuration: the VPT with arbitrary attention weights keeps
    nothing, the symplectic transformer with vector softmax and symmetric A is not symplectic). A model
    without the attribute (a user's) claims nothing. Every claim is tested by the matching audit of
    [`vpintegrator.testing`][vpintegrator.testing] in float64.
    """
    if isinstance(model, str):
        dim = hparams.pop("dim", getattr(model_class(model), "example_dim", 3))
        model = build_model(model, dim=dim, **hparams)
    return tuple(getattr(model, "preserves", ()))


# --------------------------------------------------------------------------- sizes
#
# How big a model is before it is built: sizes that a user's config controls are estimated, and refused with
# one line when they cannot fit in memory, before anything is allocated (``model.n_blocks = 100000000``
# would take gigabytes of Python objects before failing).
#
# The estimate works for every registered architecture without knowing its layers: the parameter count, the
# number of modules and the number of tensors of a model are polynomials of low degree in each of its integer
# hyper-parameters (``n_blocks``, ``L``, ``width``, ``n_layers``, ``dim``, ``seq_len``, ...: a layer count
# multiplies, a width enters squared; ``dim`` reaches degree 4 in ``vpt`` and ``la_sympnet``). The keys above
# ``PROBE_MAX`` are replaced by small values ``r, r + 2, r + 4, ...`` (r >= 4) congruent to the asked value
# modulo 2 (modulo 6 when the constructor refuses those), so that a layer of half a dimension is still a
# polynomial along them; the model is built at each
# combination (small models, milliseconds each) and the counts are interpolated to the asked values per key:
# through 5 values (degree 4, exact for every shipped architecture: tests/test_model_sizes.py checks them against
# the built models) when one or two keys are large, through 3 (degree 2, an estimate) when three or four are.
# Nothing of the asked size is built.


#: integer hyper-parameters up to this value are built as they are; larger ones are probed and interpolated
PROBE_MAX = 16
#: the Python objects behind each module and each tensor of a model (measured: 0.5–0.8 KiB)
OBJECT_BYTES = 1024
#: at most this many keys are probed together (3 ** 4 small builds); with more the estimate is skipped (every
#: shipped architecture has at most 6 integer keys, ``dim`` from the data among them)
_MAX_PROBED = 4
#: the probes of a key are congruent to its value modulo one of these (see estimate_model_size)
_PERIODS = (2, 6)


def _first(value: int, period: int) -> int:
    """The smallest probe value >= 4 congruent to ``value`` modulo ``period``."""
    return 4 + (value - 4) % period


@dataclass(frozen=True)
class ModelSize:
    """A model's size as estimated: ``numel`` numbers in its parameters and buffers, ``objects`` modules and
    tensors (Python objects), and the keys that were probed (``{key: value}``, the large ones)."""

    numel: float
    objects: float
    large: dict[str, int]

    def nbytes(self, itemsize: int = 4, copies: float = 1.0) -> float:
        """Bytes for ``copies`` copies of the numbers at ``itemsize`` bytes each, plus the objects once."""
        return self.numel * itemsize * copies + self.objects * OBJECT_BYTES


def _count(cls, hparams: dict[str, Any]) -> tuple[int, int]:
    import torch

    with torch.random.fork_rng(devices=[]):  # building draws initial weights: leave the caller's RNGs alone
        model = cls(**hparams)
    tensors = list(model.parameters()) + list(model.buffers())
    return int(sum(t.numel() for t in tensors)), len(list(model.modules())) + len(tensors)


def _lagrange(xs: tuple[int, ...], x: int) -> list[Fraction]:
    """The Lagrange weights of the nodes ``xs`` at ``x``, exactly (at x = 1e8 the weights reach 1e30 and
    cancel: floats would lose every digit)."""
    out = []
    for i, xi in enumerate(xs):
        w = Fraction(1)
        for j, xj in enumerate(xs):
            if j != i:
                w *= Fraction(x - xj, xi - xj)
        out.append(w)
    return out


def estimate_model_size(cls: type, hparams: dict[str, Any]) -> ModelSize | None:
    """The size of ``cls(**hparams)`` without building it; None when no integer key exceeds ``PROBE_MAX``
    (then the model is small), or when the probes cannot be built (the constructor's own checks then speak)."""
    large = {k: v for k, v in hparams.items() if type(v) is int and v > PROBE_MAX}
    if not large or len(large) > _MAX_PROBED:
        return None
    keys = list(large)
    n_nodes = 5 if len(keys) <= 2 else 3  # degree 4 per key (5 ** 2 builds at most), else 2 (3 ** 4 at most)
    for period in _PERIODS:  # the next when a probe is refused (e.g. a width that must divide by n_heads = 3)
        # per key values >= 4 congruent to the asked one modulo the period: a layer of half (a third) of a
        # dimension is then a polynomial along them too, and the probes stay above the small special cases
        nodes = [tuple(_first(v, period) + i * period for i in range(n_nodes)) for v in large.values()]
        try:
            grid = {combo: _count(cls, {**hparams, **dict(zip(keys, combo))}) for combo in itertools.product(*nodes)}
        except Exception:  # the constructor's own checks speak for the real model
            continue
        break
    else:
        return None
    weights = [_lagrange(nodes[i], large[k]) for i, k in enumerate(keys)]
    numel = objects = Fraction(0)
    for combo, (n, o) in grid.items():
        w = Fraction(1)
        for i, value in enumerate(combo):
            w *= weights[i][nodes[i].index(value)]
        numel += w * n
        objects += w * o
    return ModelSize(max(float(numel), 0.0), max(float(objects), 0.0), dict(large))


def check_model_memory(name: str, cls: type, hparams: dict[str, Any], *, itemsize: int = 4, copies: float = 1.0,
                       extra: float = 0.0, what: str | None = None, key: str | None = "model",
                       prefix: str = "") -> ModelSize | None:
    """Refuse (one line, before building) a ``cls(**hparams)`` whose ``copies`` copies at ``itemsize`` bytes,
    its objects and ``extra`` bytes exceed the memory available (``vpintegrator.resources.check_memory``);
    the message names the large keys (``prefix`` before each, e.g. ``"model."``) and the estimate."""
    from .. import resources

    size = estimate_model_size(cls, hparams)
    if size is None:
        return None
    keys = ", ".join(f"{prefix}{k} = {v}" for k, v in size.large.items())
    label = what or f"model {name!r} with {keys} ({size.numel:.3g} parameters)"
    need = size.nbytes(itemsize, copies) + float(extra)
    try:
        resources.check_memory(need, label, f"give a smaller {' or '.join(prefix + k for k in size.large)}", key=key)
    except VPIntegratorError:
        raise
    return size
