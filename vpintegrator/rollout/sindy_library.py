"""The feature libraries of the SINDy rows (``vpintegrator.rollout.sindy``): ``Library`` (Θ(z) and its analytic
gradient, so a fitted field has an exact Jacobian and a compiled kernel), the named libraries (``polyD``,
``trig``, ``exp`` and their ``+`` unions), counted before they are built (``library_size``: a library of more
than ``MAX_FEATURES`` features is refused at once, never built), and pysindy's library objects
(``PolynomialLibrary``, ``FourierLibrary(n_frequencies=1)``, ``IdentityLibrary``, their sums) turned into the
same features. pysindy is an optional extra (``require_pysindy``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["INSTALL", "MAX_FEATURES", "require_pysindy", "Library", "library", "library_size"]

#: what a user without pysindy is told
INSTALL = 'pip install "vpintegrator[sindy]"'
#: a library with more features than this (high degree on many state components) is left out of the default
#: grid, and refused when asked for by name or object
MAX_FEATURES = 1000


def require_pysindy(what: str = "sindy rows") -> Any:
    """pysindy, or a one-line error saying how to install it (key ``integrators``)."""
    try:
        import pysindy
    except ImportError:
        raise VPIntegratorError(f"{what} uses pysindy, an optional extra: {INSTALL}", key="integrators") from None
    return pysindy


# --------------------------------------------------------------------------- the feature libraries


@dataclass(frozen=True)
class Library:
    """A feature library Θ(z): monomials (exponent rows), then sin z_j, cos z_j, exp z_j for the listed j.

    Attributes
    ----------
    name : str
    dim : int
    powers : ndarray, shape (n_mono, dim)
        Exponents of the monomials (the constant first when present).
    sin, cos, exp : tuple of int
        The components of the trigonometric and exponential features.
    """

    name: str
    dim: int
    powers: np.ndarray
    sin: tuple[int, ...] = ()
    cos: tuple[int, ...] = ()
    exp: tuple[int, ...] = ()

    @property
    def n_features(self) -> int:
        return int(self.powers.shape[0]) + len(self.sin) + len(self.cos) + len(self.exp)

    def names(self, state_names: Sequence[str] = ()) -> list[str]:
        """The features' names: ``1``, ``x0``, ``x0^2 x1``, ``sin(x2)``, ``exp(x0)`` (the components named by
        ``state_names`` when given: ``z1^2 z2``)."""
        v = list(state_names) if len(state_names) == self.dim else [f"x{j}" for j in range(self.dim)]
        out = []
        for row in self.powers:
            parts = [v[j] + (f"^{int(p)}" if p > 1 else "") for j, p in enumerate(row) if p > 0]
            out.append(" ".join(parts) or "1")
        out += [f"sin({v[j]})" for j in self.sin] + [f"cos({v[j]})" for j in self.cos] + [f"exp({v[j]})" for j in self.exp]
        return out

    def select(self, keep: np.ndarray) -> "Library":
        """The library of the features ``keep`` (bool, n_features) only (in the same order)."""
        n_mono = self.powers.shape[0]
        keep = np.asarray(keep, dtype=bool)
        k_mono, rest = keep[:n_mono], keep[n_mono:]
        a, b = len(self.sin), len(self.cos)
        pick = lambda comps, mask: tuple(c for c, m in zip(comps, mask) if m)  # noqa: E731
        return Library(self.name, self.dim, self.powers[k_mono], pick(self.sin, rest[:a]), pick(self.cos, rest[a:a + b]),
                       pick(self.exp, rest[a + b:]))

    def transform(self, z: np.ndarray) -> np.ndarray:
        """Θ(z); z (n, dim) -> (n, n_features)."""
        z = np.asarray(z, dtype=np.float64)
        cols = [np.prod(z[:, None, :] ** self.powers[None], axis=-1)] if self.powers.shape[0] else []
        if self.sin:
            cols.append(np.sin(z[:, list(self.sin)]))
        if self.cos:
            cols.append(np.cos(z[:, list(self.cos)]))
        if self.exp:
            cols.append(np.exp(z[:, list(self.exp)]))
        return np.concatenate(cols, axis=1) if cols else np.zeros((z.shape[0], 0))

    def gradient(self, z: np.ndarray) -> np.ndarray:
        """∂Θ/∂z; z (n, dim) -> (n, n_features, dim), analytic."""
        z = np.asarray(z, dtype=np.float64)
        n, dim = z.shape
        out = np.zeros((n, self.n_features, dim))
        m = self.powers.shape[0]
        for j in range(dim):
            if m:
                lowered = self.powers.copy()
                lowered[:, j] = np.maximum(lowered[:, j] - 1, 0)
                out[:, :m, j] = self.powers[None, :, j] * np.prod(z[:, None, :] ** lowered[None], axis=-1)
        col = m
        for comps, d in ((self.sin, np.cos), (self.cos, lambda x: -np.sin(x)), (self.exp, np.exp)):
            for c in comps:
                out[:, col, c] = d(z[:, c])
                col += 1
        return out


def _monomials(dim: int, degree: int) -> np.ndarray:
    """Exponent rows of every monomial of degree 0 .. ``degree`` (graded, then lexicographic)."""
    rows = [np.zeros(dim, dtype=np.int64)]
    for d in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(dim), d):
            row = np.zeros(dim, dtype=np.int64)
            for j in combo:
                row[j] += 1
            rows.append(row)
    return np.array(rows, dtype=np.int64)


def _parse(name: Any) -> tuple[int, bool, bool]:
    """``(degree, trig, exp)`` of a library name, else a one-line error naming ``library``."""
    if not isinstance(name, str):
        raise VPIntegratorError(f"SINDy library {name!r}: give a name (polyD, trig, exp, joined by '+') or a pysindy "
                                "feature library", key="library")
    degree, trig, exp = 0, False, False
    for part in name.split("+"):
        if part.startswith("poly") and part[4:].isdigit() and int(part[4:]) >= 1:
            degree = max(degree, int(part[4:]))
        elif part == "trig":
            trig = True
        elif part == "exp":
            exp = True
        else:
            raise VPIntegratorError(f"SINDy library {name!r}: parts are polyD (D >= 1), trig and exp, joined by '+'",
                                    key="library")
    return degree, trig, exp


def library_size(name: str, dim: int) -> int:
    """The number of features of the library ``name`` on states of ``dim``, counted without building it
    (``C(dim + D, D)`` monomials up to degree D, ``2 dim`` trigonometric, ``dim`` exponential features)."""
    degree, trig, exp = _parse(name)
    return math.comb(int(dim) + degree, degree) + (2 * int(dim) if trig else 0) + (int(dim) if exp else 0)


def _check_features(what: str, n_features: int, dim: int) -> None:
    """A library of no features or of more than ``MAX_FEATURES``: one line naming ``library``, before it is built."""
    if n_features < 1:
        raise VPIntegratorError(f"SINDy library {what}: it has no features on {dim} state components; give at least "
                                "one (e.g. poly1)", key="library")
    if n_features > MAX_FEATURES:
        raise VPIntegratorError(
            f"SINDy library {what}: {n_features} features on {dim} state components, more than MAX_FEATURES = "
            f"{MAX_FEATURES} (Θ would be samples × {n_features}); give a lower degree or fewer parts", key="library")


def library(name: str, dim: int) -> Library:
    """The library ``name`` (``polyD``, ``trig``, ``exp``, or a ``+`` union of them) on states of ``dim``; one of
    more than ``MAX_FEATURES`` features is refused (one line naming ``library``) before it is built."""
    _check_features(repr(name), library_size(name, dim), dim)
    degree, trig, exp = _parse(name)
    comps = tuple(range(dim))
    return Library(name, dim, _monomials(dim, degree), comps if trig else (), comps if trig else (),
                   comps if exp else ())


def _one_line(obj: Any) -> str:
    """``repr(obj)`` on one line (the type's name where the repr itself fails, as pysindy's CustomLibrary's does)."""
    try:
        text = repr(obj)
    except Exception:  # a foreign object's broken __repr__
        text = f"{type(obj).__name__}(...)"
    return " ".join(text.split())


def _from_pysindy(lib: Any, dim: int) -> Library:
    """A pysindy feature library as the exact features here (so the field keeps its analytic Jacobian):
    ``PolynomialLibrary``, ``FourierLibrary(n_frequencies=1)``, ``IdentityLibrary`` and their sums
    (``ConcatLibrary``); anything else is a one-line error naming ``library``."""
    ps = require_pysindy("a pysindy feature library")
    name = _one_line(lib)
    if isinstance(lib, ps.ConcatLibrary):
        parts = [_from_pysindy(part, dim) for part in lib.libraries]
        if not parts:
            _check_features(name, 0, dim)
        rows = [tuple(r) for part in parts for r in part.powers]
        unique = list(dict.fromkeys(rows))  # the constant of two parts once
        union = lambda attr: tuple(dict.fromkeys(c for part in parts for c in getattr(part, attr)))  # noqa: E731
        powers = np.array(unique, dtype=np.int64).reshape(len(unique), dim)
        out = Library(name, dim, powers, union("sin"), union("cos"), union("exp"))
    elif isinstance(lib, ps.PolynomialLibrary):
        degree = lib.degree
        if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 0:
            raise VPIntegratorError(f"SINDy library {name}: degree must be an int >= 0; got {degree!r}", key="library")
        _check_features(name, math.comb(dim + int(degree), int(degree)), dim)  # at most this many: counted first
        powers = _monomials(dim, int(degree))
        keep = np.ones(powers.shape[0], dtype=bool)
        if not lib.include_bias:
            keep &= powers.sum(axis=1) > 0
        if not lib.include_interaction:
            keep &= (powers > 0).sum(axis=1) <= 1
        if lib.interaction_only:
            keep &= powers.max(axis=1, initial=0) <= 1
        out = Library(name, dim, powers[keep])
    elif isinstance(lib, ps.FourierLibrary):
        if lib.n_frequencies != 1:
            raise VPIntegratorError(f"SINDy library {name}: only n_frequencies=1 (sin z_j, cos z_j) has an analytic "
                                    "field here; give FourierLibrary(n_frequencies=1)", key="library")
        comps = tuple(range(dim))
        out = Library(name, dim, np.zeros((0, dim), dtype=np.int64), comps if lib.include_sin else (),
                      comps if lib.include_cos else ())
    else:  # (pysindy's IdentityLibrary() is a PolynomialLibrary(degree=1, include_bias=False))
        raise VPIntegratorError(
            f"SINDy library {name}: a {type(lib).__name__} cannot be written as an analytic field; give "
            "PolynomialLibrary, FourierLibrary(n_frequencies=1), IdentityLibrary, their sum (a + b), or a name "
            "(poly3, trig, exp, poly3+trig+exp)", key="library")
    _check_features(name, out.n_features, dim)
    return out


def _library_of(given: Any, dim: int) -> Library:
    """A library name or a pysindy feature library, as a ``Library`` on states of ``dim``."""
    if isinstance(given, str):
        return library(given, dim)
    ps = require_pysindy("a pysindy feature library")
    if isinstance(given, ps.feature_library.base.BaseFeatureLibrary):
        return _from_pysindy(given, dim)
    raise VPIntegratorError(f"SINDy library {_one_line(given)[:80]}: give a name (polyD, trig, exp, joined by '+') or "
                            "a pysindy feature library", key="library")


def _label(given: Any) -> str:
    return given if isinstance(given, str) else _one_line(given)
