"""How big a model is before it is built: sizes that a user's config controls are estimated, and refused with
one line when they cannot fit in memory, before anything is allocated (``model.n_blocks = 100000000``
would take gigabytes of Python objects before failing).

The estimate works for every registered architecture without knowing its layers: the parameter count, the
number of modules and the number of tensors of a model are polynomials of low degree in each of its integer
hyper-parameters (``n_blocks``, ``L``, ``width``, ``n_layers``, ``dim``, ``seq_len``, ...: a layer count
multiplies, a width enters squared; ``dim`` reaches degree 4 in ``vpt`` and ``la_sympnet``). The keys above
``PROBE_MAX`` are replaced by small values ``r, r + 2, r + 4, ...`` (r >= 4) congruent to the asked value
modulo 2 (modulo 6 when the constructor refuses those), so that a layer of half a dimension is still a
polynomial along them; the model is built at each
combination (small models, milliseconds each) and the counts are interpolated to the asked values per key:
through 5 values (degree 4, exact for every shipped architecture: tests/test_model_sizes.py checks them against
the built models) when one or two keys are large, through 3 (degree 2, an estimate) when three or four are.
Nothing of the asked size is built.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..errors import VPIntegratorError

__all__ = ["ModelSize", "PROBE_MAX", "OBJECT_BYTES", "estimate_model_size", "check_model_memory"]

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


def _count(cls, config: dict[str, Any]) -> tuple[int, int]:
    import torch

    with torch.random.fork_rng(devices=[]):  # building draws initial weights: leave the caller's RNGs alone
        model = cls(**config)
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


def estimate_model_size(cls, config: dict[str, Any]) -> ModelSize | None:
    """The size of ``cls(**config)`` without building it; None when no integer key exceeds ``PROBE_MAX``
    (then the model is small), or when the probes cannot be built (the constructor's own checks then speak)."""
    large = {k: v for k, v in config.items() if type(v) is int and v > PROBE_MAX}
    if not large or len(large) > _MAX_PROBED:
        return None
    keys = list(large)
    n_nodes = 5 if len(keys) <= 2 else 3  # degree 4 per key (5 ** 2 builds at most), else 2 (3 ** 4 at most)
    for period in _PERIODS:  # the next when a probe is refused (e.g. a width that must divide by n_heads = 3)
        # per key values >= 4 congruent to the asked one modulo the period: a layer of half (a third) of a
        # dimension is then a polynomial along them too, and the probes stay above the small special cases
        nodes = [tuple(_first(v, period) + i * period for i in range(n_nodes)) for v in large.values()]
        try:
            grid = {combo: _count(cls, {**config, **dict(zip(keys, combo))}) for combo in itertools.product(*nodes)}
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


def check_model_memory(name: str, cls, config: dict[str, Any], *, itemsize: int = 4, copies: float = 1.0,
                       extra: float = 0.0, what: str | None = None, key: str | None = "model",
                       prefix: str = "") -> ModelSize | None:
    """Refuse (one line, before building) a ``cls(**config)`` whose ``copies`` copies at ``itemsize`` bytes,
    its objects and ``extra`` bytes exceed the memory available (``vpintegrator.resources.check_memory``);
    the message names the large keys (``prefix`` before each, e.g. ``"model."``) and the estimate."""
    from .. import resources

    size = estimate_model_size(cls, config)
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
