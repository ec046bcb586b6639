"""Normalisation that keeps a model's structure: the affine conjugation y = A (x − b), A diagonal.

A model Φ trained on normalised states y acts on the states x of the data as

    x ↦ b + A⁻¹ Φ(A (x − b))        (each state of a window mapped alike),

whose Jacobian is A⁻¹ DΦ A. ``b`` (``shift``) and ``diag(A)`` (``scale``) are fitted on the training
split's states (mean m, standard deviation σ per component, σ floored at 1e-3 · max σ so that a
component at rest is not blown up). What the conjugation keeps depends on A and b, so each model kind gets
the rule its structure admits (``model.preserves``, [`model_preserves`][vpintegrator.models.model_preserves]):

- ``affine`` (volume-preserving models: vpff, vpt, delay_vpff; and models that claim nothing: st, gru,
  lru, ...): a_i = 1/σ_i, b = m. det(A⁻¹ DΦ A) = det DΦ: any invertible affine map keeps volume
  preservation (and time symmetry, Φ_{−τ} = Φ_τ⁻¹).
- ``symplectic`` (symplectic models on x = (q, p): la_sympnet, g_sympnet, symplectic_transformer): b = m;
  per pair (q_i, p_i) a_i = r_i / s, c_i = 1 / (r_i s), r_i = sqrt(σ(p_i)/σ(q_i)), s the geometric mean
  of sqrt(σ(q_i) σ(p_i)). a_i c_i = 1/s² for every pair, so Aᵀ J A = J / s² and M = A⁻¹ DΦ A has
  Mᵀ J M = J exactly (a per-component affine map would not: it is symplectic only conformally per pair).
- ``uniform`` (Lie–Poisson models: lpnet, lp_transformer, ``casimir`` or ``poisson`` in ``preserves``; and
  a model that does not say what it keeps, no ``preserves``: the safest rule): A = a·I, b = 0,
  a = 1/RMS(x). ‖y‖² = a²‖x‖² keeps the Casimir's level sets, and the bracket, linear in z, only changes
  by the factor a (a Poisson map stays one); a shift or per-component scales would break both.

Periodic components (the data's or the system's ``periodic``, ``vpintegrator.data.trajectories.state_periods``):
under ``affine`` and ``symplectic`` the moments are fitted on the states wrapped to (−P/2, P/2], and every model
call on a window X is X ↦ Φ(X − K) + K with K the whole periods that take X's last state into (−P/2, P/2]
(``Normalisation.window_shift``): the training windows (input and target), the validation rollout and every
runner alike. A field periodic in those components has a flow that commutes with translations by whole periods,
so the model learns one period, not a periodic function of unbounded coordinates; the map is locally a
translation of Φ, so it keeps volume and the symplectic form (det and Mᵀ J M unchanged). ``uniform`` (Lie–Poisson)
wraps nothing: a translation would move the Casimir's level sets. ``auto`` applies the rule wherever a component
is periodic; ``unroll > 1`` with wrapping is refused (the unrolled calls are not wrapped).

The switch (``vp-train --normalise``, the config key ``normalise``): ``off``; ``on`` (the model's rule);
``auto`` (the default: the model's rule where the coordinates need it, see
[`coordinates_need`][vpintegrator.models.normalise.coordinates_need], else off: the package's unit-scale
arenas are unchanged); or a rule by name, refused in one line where it would break the model's structure.
Context models and learned vector fields (their rollout steps do not take a conjugation) are never normalised.
A model file records the normalisation (``trained_on["normalisation"]``: ``rule``, ``shift``, ``scale``);
[`ModelStep`][vpintegrator.rollout.steps.ModelStep] maps the first window in and the states out, so every
runner (eager, ``torch.compile``, numba, the device engine) steps the model in its own coordinates. A file
without one (every file before this) rolls out exactly as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["Normalisation", "NORMALISE_MODES", "NORMALISE_RULES", "structure_rule", "fit_normalisation",
           "coordinates_need", "resolve_normalisation", "model_normalisation"]

#: the conjugations, from the most to the least freedom (module docstring)
NORMALISE_RULES = ("affine", "symplectic", "uniform")
#: the values of the config key ``normalise``
NORMALISE_MODES = ("auto", "on", "off") + NORMALISE_RULES
#: what each rule may be forced on: a rule admits the ones after it in this table (fewer freedoms)
_ADMITS = {"affine": NORMALISE_RULES, "symplectic": ("symplectic", "uniform"), "uniform": ("uniform",)}
#: ``auto`` normalises where a component's |mean| exceeds this many (floored) standard deviations
OFFSET_RATIO = 10.0
#: ... or the spread of the states lies outside this range
SCALE_RANGE = (1e-2, 1e2)
#: standard deviations are floored at this fraction of the largest (a component at rest keeps scale ~1/that)
STD_FLOOR = 1e-3


@dataclass(frozen=True)
class Normalisation:
    """The conjugation y = A (x − b): ``shift`` b and ``scale`` diag(A) per component, and the ``rule`` they
    were fitted by (``NORMALISE_RULES``)."""

    rule: str
    shift: tuple[float, ...]
    scale: tuple[float, ...]
    #: each component's period in the data's coordinates, 0 where not periodic; () none (module docstring)
    period: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.rule not in NORMALISE_RULES:
            raise VPIntegratorError(f"normalisation rule {self.rule!r}: expected one of {', '.join(NORMALISE_RULES)}")
        if len(self.shift) != len(self.scale) or not self.scale:
            raise VPIntegratorError(f"normalisation: shift has {len(self.shift)} components, scale {len(self.scale)}; "
                                    "give one of each per state component")
        if not all(math.isfinite(v) for v in self.shift) or not all(math.isfinite(v) and v > 0 for v in self.scale):
            raise VPIntegratorError("normalisation: shift must be finite and scale finite and > 0 per component")
        if self.period and (len(self.period) != len(self.scale)
                            or not all(math.isfinite(v) and v >= 0 for v in self.period)):
            raise VPIntegratorError(f"normalisation: period must give one finite period >= 0 per component (0: not "
                                    f"periodic); got {self.period!r}")
        if self.wraps and self.rule == "uniform":
            raise VPIntegratorError("normalisation: rule 'uniform' (a Lie-Poisson model) takes no periodic wrapping: a "
                                    "translation would move the Casimir's level sets; give period = ()")

    @property
    def dim(self) -> int:
        return len(self.scale)

    @property
    def wraps(self) -> bool:
        """Whether some component is periodic: each model call then sees its window wrapped (``window_shift``)."""
        return any(v > 0 for v in self.period)

    def window_shift(self, last: Any) -> Any:
        """The translation K (..., dim), in the model's coordinates, that takes a window whose last state is ``last``
        (..., dim) (model coordinates) to the one whose last state lies in (−P/2, P/2] in every periodic component
        (in the data's coordinates): a_i P_i ceil(x_i/P_i − 1/2), x = last/a + b; 0 in the others. A model call
        on a window X is Φ(X − K) + K: the flow of a field periodic in those components commutes with the
        translation by whole periods, and a translation keeps volume and the symplectic form."""
        from ..arrays import wrap

        b, a = self._params(last)
        x = last / a + b
        return a * (x - wrap(x, np.asarray(self.period)))  # the whole periods wrap takes off (0 elsewhere)

    def call(self, model: Any) -> Any:
        """``model`` as its calls run in these coordinates: ``model`` itself, or with periodic components the
        window map X ↦ Φ(X − K) + K (``window_shift`` of X's last state) on windows (..., seq_len, dim)."""
        if not self.wraps:
            return model

        def wrapped(window: Any) -> Any:
            k = self.window_shift(window[..., -1, :])[..., None, :]
            return model(window - k) + k
        return wrapped

    def _params(self, x: Any) -> tuple[Any, Any]:
        if isinstance(x, np.ndarray):
            return np.asarray(self.shift), np.asarray(self.scale)
        import torch

        kw = {"dtype": x.dtype, "device": x.device}
        return torch.tensor(self.shift, **kw), torch.tensor(self.scale, **kw)

    def to_model(self, x: Any) -> Any:
        """y = (x − b) · a for states x (..., dim): NumPy array or tensor (in its dtype and device)."""
        b, a = self._params(x)
        return (x - b) * a

    def from_model(self, y: Any) -> Any:
        """x = y / a + b, the inverse of [`to_model`][vpintegrator.models.normalise.Normalisation.to_model]."""
        b, a = self._params(y)
        return y / a + b

    def record(self) -> dict[str, Any]:
        """``{"rule", "shift", "scale"}`` as plain lists (what a model file and ``summary.json`` keep)."""
        out = {"rule": self.rule, "shift": [float(v) for v in self.shift], "scale": [float(v) for v in self.scale]}
        return {**out, "period": [float(v) for v in self.period]} if self.wraps else out

    @classmethod
    def from_record(cls, record: Any, where: str = "model file") -> "Normalisation":
        """The normalisation a ``record()`` describes; one line naming ``where`` when it is malformed."""
        try:
            return cls(str(record["rule"]), tuple(float(v) for v in record["shift"]),
                       tuple(float(v) for v in record["scale"]), tuple(float(v) for v in record.get("period", ())))
        except (KeyError, TypeError, ValueError) as err:
            raise VPIntegratorError(f"{where}: its normalisation record {record!r} is malformed ({err}); expected "
                                    "{'rule', 'shift', 'scale'} as written by vp-train") from None

    def describe(self) -> str:
        """One line: the rule, b and diag(A)."""
        def fmt(v: tuple[float, ...]) -> str:
            return "[" + ", ".join(f"{x:.4g}" for x in v) + "]"
        wrap = f", windows wrapped in the periodic components (period {fmt(self.period)})" if self.wraps else ""
        return f"{self.rule}: b = {fmt(self.shift)}, diag(A) = {fmt(self.scale)}{wrap}"


def _not_normalisable(model: Any) -> str | None:
    """Why ``model``'s rollout cannot take a conjugation (a context model, a learned vector field), or None."""
    from .vector_field import VectorFieldModel

    if isinstance(model, VectorFieldModel):
        return "a learned vector field (its rollout integrates the field: no conjugation there)"
    if isinstance(getattr(model, "context_len", None), int) and callable(getattr(model, "step", None)):
        return "a context model (its rollout steps read the context: no conjugation there)"
    return None


def structure_rule(model: Any) -> tuple[str, str]:
    """``(rule, why)``: the conjugation ``model``'s structure admits (module docstring) and the reason in words."""
    if not hasattr(model, "preserves"):
        return "uniform", "it does not say what it keeps (no preserves attribute): the safest rule"
    kept = tuple(getattr(model, "preserves", ()) or ())
    if "casimir" in kept or "poisson" in kept:
        return "uniform", "it keeps the Casimir |z|^2 and the Lie-Poisson bracket: one scale, no shift"
    if "symplectic" in kept:
        return "symplectic", "it is symplectic on (q, p): a shift and conformally symplectic per-pair scales"
    if kept:
        return "affine", f"it keeps {', '.join(kept)}, which any invertible affine map keeps: per-component scale and shift"
    return "affine", "it keeps nothing by construction: per-component scale and shift"


def _moments(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and floored standard deviation per component of states (..., dim), NaN ignored."""
    x = np.asarray(states, dtype=np.float64).reshape(-1, np.shape(states)[-1])
    m, s = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    top = float(np.max(s)) if np.isfinite(s).all() and np.max(s) > 0 else 1.0
    return m, np.maximum(s, STD_FLOOR * top)


def _periodic(period: Any, rule: str) -> tuple[float, ...]:
    """The periods a rule's conjugation wraps: () where none is periodic or the rule takes no translation."""
    per = () if period is None else tuple(float(v) for v in np.asarray(period, dtype=np.float64).ravel())
    return per if rule != "uniform" and any(v > 0 for v in per) else ()


def fit_normalisation(states: Any, rule: str, period: Any = None) -> Normalisation:
    """The conjugation of rule ``rule`` fitted on ``states`` (..., dim) (the training split's).

    ``symplectic`` pairs component i with component n + i (x = (q, p), dim = 2n). With ``period`` (dim,) (0
    where not periodic; not for ``uniform``) the moments are those of the states wrapped to (−P/2, P/2], and
    every model call wraps its window (``Normalisation.window_shift``).
    """
    from ..arrays import wrap

    if rule not in NORMALISE_RULES:
        raise VPIntegratorError(f"normalisation rule {rule!r}: expected one of {', '.join(NORMALISE_RULES)}")
    x = np.asarray(states, dtype=np.float64)
    dim = x.shape[-1]
    if x.size == 0 or not np.isfinite(x).any():
        raise VPIntegratorError("normalisation: no finite training states to fit it on; give data, or normalise = 'off'",
                                key="normalise")
    per = _periodic(period, rule)
    if per:
        x = wrap(x, np.asarray(per))
    m, s = _moments(x)
    if rule == "affine":
        return Normalisation(rule, tuple(m.tolist()), tuple((1.0 / s).tolist()), per)
    if rule == "symplectic":
        if dim % 2:
            raise VPIntegratorError(f"normalise symplectic: the states have odd dim {dim}, not (q, p); use "
                                    "normalise = 'uniform' or 'off'", key="normalise")
        n = dim // 2
        sq, sp = s[:n], s[n:]
        r = np.sqrt(sp / sq)
        g = np.exp(np.mean(np.log(np.sqrt(sq * sp))))  # the global scale s: a_i c_i = 1 / s² for every pair
        return Normalisation(rule, tuple(m.tolist()), tuple(np.concatenate([r / g, 1.0 / (r * g)]).tolist()), per)
    rms = float(np.sqrt(np.nanmean(x.reshape(-1, dim) ** 2)))
    a = 1.0 / rms if rms > 0 else 1.0
    return Normalisation(rule, (0.0,) * dim, (a,) * dim)


def coordinates_need(states: Any, rule: str = "affine", period: Any = None) -> str | None:
    """Why the states (..., dim) need the conjugation ``rule`` can make, in words, or None (they are unit-scale).

    ``affine`` and ``symplectic``: some component's |mean| exceeds ``OFFSET_RATIO`` (10) of its (floored)
    standard deviation, or some standard deviation exceeds 100, or the largest is below 0.01. ``uniform``
    (no shift): the RMS component is outside [0.01, 100]. The package's arenas (rigid body, oscillators,
    Toda, FPU, the baths, Volterra's |mean| / std of 2.8) need none. Periodic components (``period``, 0 where
    not) always need it under ``affine`` and ``symplectic``: their windows are wrapped.
    """
    per = _periodic(period, rule)
    if per:
        on = ", ".join(f"{i} (period {p:.6g})" for i, p in enumerate(per) if p > 0)
        return f"components {on} are periodic: each window is wrapped to (-P/2, P/2]"
    x = np.asarray(states, dtype=np.float64)
    m, s = _moments(x)
    lo, hi = SCALE_RANGE
    if rule == "uniform":
        rms = float(np.sqrt(np.nanmean(x.reshape(-1, x.shape[-1]) ** 2)))
        return None if lo <= rms <= hi else f"the states' RMS component is {rms:.3g}, outside [{lo:g}, {hi:g}]"
    ratio = np.abs(m) / s
    i = int(np.argmax(ratio))
    if ratio[i] > OFFSET_RATIO:
        return (f"component {i} sits at {m[i]:.4g} with a spread of {s[i]:.3g} (|mean| > {OFFSET_RATIO:g} std)")
    if float(np.max(s)) > hi or float(np.max(s)) < lo:
        return f"the states' spread reaches {float(np.max(s)):.3g}, outside [{lo:g}, {hi:g}]"
    return None


def resolve_normalisation(mode: str, model: Any, train_states: Any, name: str = "the model", period: Any = None
                          ) -> tuple[Normalisation | None, dict[str, Any]]:
    """What ``normalise = mode`` gives ``model`` on the training split's ``train_states`` (..., dim):
    ``(normalisation or None, record)``. ``record`` is what ``summary.json`` and every checkpoint keep:
    ``{"mode", "applied", "reason"}`` plus ``rule``, ``shift``, ``scale`` (and ``period`` where the data's
    periodic components, ``period`` (dim,), are wrapped) where applied.

    A rule forced where it would break the model's structure, and ``on`` or a rule for a model whose rollout
    takes no conjugation, are one-line errors (key ``normalise``) naming the fix.
    """
    if mode not in NORMALISE_MODES:
        raise VPIntegratorError(f"normalise: {mode!r} is not one of {', '.join(NORMALISE_MODES)}", key="normalise")
    if mode == "off":
        return None, {"mode": mode, "applied": False, "reason": "normalise = 'off'"}
    blocked = _not_normalisable(model)
    rule, why = structure_rule(model)
    if blocked is not None:
        if mode != "auto":
            raise VPIntegratorError(f"normalise = {mode!r}: {name} is {blocked}; set normalise = 'off' (or 'auto')",
                                    key="normalise")
        need = coordinates_need(train_states, rule, period)
        reason = "the training states are unit-scale" if need is None else f"{need}, but {name} is {blocked}"
        return None, {"mode": mode, "applied": False, "reason": reason}
    if mode in NORMALISE_RULES:
        if mode not in _ADMITS[rule]:
            raise VPIntegratorError(
                f"normalise = {mode!r} would break {name}'s structure ({why}); use normalise = 'on' (the rule "
                f"{rule!r}) or 'off'", key="normalise")
        rule, why = mode, f"asked for (normalise = {mode!r})"
    elif mode == "auto":
        need = coordinates_need(train_states, rule, period)
        if need is None:
            offset = rule == "uniform" and coordinates_need(train_states, "affine")
            reason = ("the training states are unit-scale" if not offset else
                      f"{offset}, but {name}'s rule {rule!r} admits no shift ({why}); the scale is fine")
            return None, {"mode": mode, "applied": False, "reason": reason}
        why = f"{need}; rule {rule!r}: {why}"
    else:
        why = f"normalise = 'on'; rule {rule!r}: {why}"
    norm = fit_normalisation(train_states, rule, period)
    if rule == "uniform" and _periodic(period, "affine"):
        why += "; the periodic components are not wrapped (rule 'uniform' admits no translation)"
    return norm, {"mode": mode, "applied": True, "reason": why, **norm.record()}


def model_normalisation(model: Any) -> Normalisation | None:
    """The normalisation ``model`` steps in (its ``trained_on["normalisation"]``, as ``load_model`` and ``fit``
    give it), or None: the raw coordinates."""
    trained_on = getattr(model, "trained_on", None)
    record = trained_on.get("normalisation") if isinstance(trained_on, dict) else None
    if not isinstance(record, dict) or not record.get("applied"):
        return None
    return Normalisation.from_record(record, f"model {type(model).__name__}")
