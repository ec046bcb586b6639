"""Context-conditioned structure-preserving integrators for families of systems.

A family's parameters differ from trajectory to trajectory; a parameter-blind map cannot know them. A
*context model* reads the first ``context_len`` observed states (the prefix) once, turns them into a
context vector c by an **encoder**, and steps with layers conditioned on c
(``vpintegrator.nn.conditioned``): for every fixed c each step keeps what ``preserves`` says.

Encoders, prefix (batch, k, dim) -> c (batch, context_dim):

- ``"finite_difference"`` (``FiniteDifferenceEncoder``): a physics estimate, no parameters. The
  system's vector field is linear in a parameter vector θ, ż = F(z) θ (``parameter_features``);
  central differences (z_{i+1} − z_{i−1}) / 2 = F(z_i)(hθ) + O(h³) at the prefix's interior states give hθ
  by (ridge-regularised) least squares, so c = hθ̂ (the step size h folded in: no dt needed). Needs k >= 3.
- ``"attention"`` (``AttentionEncoder``): the package's multi-head attention over the prefix
  (tokens from each state and its position), pooled by a learned query, then a small MLP.
- the oracle: c = hθ from the true parameters, given to ``ContextModel.step`` or to the rollout
  (``vpintegrator.rollout.context``) in place of the estimate; it separates identification error from
  integration error for the same trained step (models with the ``finite_difference`` encoder, whose c is
  hθ).

As a window model (training, ``ModelStep``) a context model maps ``seq_len = context_len`` states to the
next ``pred_window`` states: c from the window, then ``pred_window`` steps from its last state. Trained on
windows cut anywhere in a trajectory it learns to read the parameters from any k consecutive states (they
are constant along a trajectory); ``vp-rollout`` freezes c from the first k states
([`ContextStep`][vpintegrator.rollout.context.ContextStep]).

θ, F and the system's dimension are the system's: its linear parameter form
([`System.parameter_features`][vpintegrator.systems.System.parameter_features], ``theta_names``), looked up
by the registry name (shipped: ``rigid_body`` (a, b, c), ``coupled_oscillator`` (1/m₁, 1/m₂, k₁, k₂, k); a
user's system that defines the form works the same way).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn.common import check_positive_int
from ..nn.attention import MultiHeadAttention
from ..nn.conditioned import ConditionedGradientLayer, ConditionedLiePoissonLayer, ConditionedShear
from ..systems import System, system_class
from .registry import _record_config, register_model

__all__ = ["ENCODERS", "parameter_features", "finite_difference_context", "FiniteDifferenceEncoder",
           "AttentionEncoder", "ContextModel", "BoundContextModel", "ContextLiePoissonNet", "ContextGSympNet",
           "ContextVolumeNet"]

#: the context encoders a context model can use
ENCODERS = ("finite_difference", "attention")


def _check_system(system: Any) -> type[System]:
    """The class of ``system`` (a registry name, ``"package.module:ClassName"`` or a System) with a linear
    parameter form, or a one-line error naming what is missing."""
    if isinstance(system, System) or (isinstance(system, type) and issubclass(system, System)):
        cls = system if isinstance(system, type) else type(system)
    else:
        try:
            cls = system_class(system)
        except VPIntegratorError as err:
            raise VPIntegratorError(f"system: the finite-difference encoder knows the systems with a linear "
                                    f"parameter form; {err}", key="system") from None
    missing = cls.linear_form_missing()
    if missing:
        raise VPIntegratorError(f"system: the finite-difference encoder knows the systems with a linear parameter "
                                f"form f = F(y) θ; {cls.name or cls.__name__!r} lacks {', '.join(missing)}; use "
                                "encoder='attention', or define them on the system (vpintegrator.systems.System)",
                                key="system")
    return cls


def parameter_features(system: Any, z: Any) -> Any:
    """F(z) with ż = F(z) θ of ``system`` (a name or a System): z (..., dim) -> (..., dim, p), θ in the system's
    ``theta_names`` order; a torch tensor or a NumPy array
    ([`System.parameter_features`][vpintegrator.systems.System.parameter_features])."""
    return _check_system(system).parameter_features(z)


def finite_difference_context(system: Any, prefix: torch.Tensor, ridge: float = 1e-10) -> torch.Tensor:
    """hθ̂ from central differences of a prefix (module docstring): (batch, k, dim) -> (batch, p); k >= 3.

    Least squares over every interior state and component, with a ridge ``ridge · tr(AᵀA)/p`` that only
    matters where the prefix does not determine θ (e.g. a rigid body spinning about a principal axis)."""
    _check_system(system)
    k = prefix.shape[-2]
    if k < 3:
        raise VPIntegratorError(f"context_len: central differences need at least 3 prefix states; got {k}",
                                key="context_len")
    A = parameter_features(system, prefix[..., 1:-1, :])  # (..., k-2, dim, p)
    rhs = 0.5 * (prefix[..., 2:, :] - prefix[..., :-2, :])  # (..., k-2, dim)
    p = A.shape[-1]
    A = A.reshape(*A.shape[:-3], -1, p)  # (..., (k-2)·dim, p)
    rhs = rhs.reshape(*rhs.shape[:-2], -1)  # (..., (k-2)·dim)
    M = A.mT @ A  # (..., p, p)
    lam = ridge * M.diagonal(dim1=-2, dim2=-1).sum(-1) / p + torch.finfo(M.dtype).tiny
    eye = torch.eye(p, dtype=M.dtype, device=M.device)
    return torch.linalg.solve(M + lam[..., None, None] * eye, (A.mT @ rhs.unsqueeze(-1)))[..., 0]


class FiniteDifferenceEncoder(nn.Module):
    """c = hθ̂ by ``finite_difference_context``; no learnable parameters.
    prefix (batch, k, dim) -> (batch, p)."""

    def __init__(self, system: str) -> None:
        super().__init__()
        self.system = system
        self.context_dim = len(_check_system(system).theta_names)

    def forward(self, prefix: torch.Tensor) -> torch.Tensor:
        return finite_difference_context(self.system, prefix)

    def extra_repr(self) -> str:
        return f"system={self.system!r}"


class AttentionEncoder(nn.Module):
    """Multi-head attention over the prefix, pooled by a learned query: (batch, k, dim) -> (batch, context_dim).

    tokens e_i = tanh(W [z_i; one_hot(i)] + b) (width), e ← e + MHA(e) (standard form, ``n_heads``),
    pooled = Σ_i softmax_i(e_i·q) e_i, c = W₂ tanh(W₁ pooled + b₁) + b₂.
    """

    def __init__(self, dim: int, context_len: int, context_dim: int, width: int = 16, n_heads: int = 2) -> None:
        super().__init__()
        self.context_len, self.context_dim = context_len, context_dim
        self.embed = nn.Linear(dim + context_len, width)
        self.attention = MultiHeadAttention(width, n_heads=n_heads, form="standard", add_connection=True)
        self.query = nn.Parameter(torch.randn(width) / width**0.5)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, context_dim)

    def forward(self, prefix: torch.Tensor) -> torch.Tensor:
        k = prefix.shape[-2]
        pos = torch.eye(k, dtype=prefix.dtype, device=prefix.device).expand(*prefix.shape[:-1], k)  # (..., k, k)
        e = torch.tanh(self.embed(torch.cat((prefix, pos), -1)))  # (..., k, width)
        batched = e.ndim == 3
        e = self.attention(e if batched else e.unsqueeze(0))
        e = e if batched else e[0]
        weights = torch.softmax(e @ self.query, -1)  # (..., k)
        pooled = (weights.unsqueeze(-1) * e).sum(-2)  # (..., width)
        return self.out(torch.tanh(self.hidden(pooled)))


class BoundContextModel(nn.Module):
    """A context model's one-step map with the context c fixed: x (batch, 1, dim) -> (batch, 1, dim).

    What the structure audits check (``vpintegrator.testing.assert_preserves(model, context=c)``):
    ``preserves`` and ``window_chain()`` are the model's, each layer bound to c."""

    def __init__(self, model: "ContextModel", context: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.context = context
        self.dim: int = model.dim
        self.seq_len: int = 1
        self.pred_window: int = 1
        self.preserves = tuple(model.preserves)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.step(x, self.context)

    def window_chain(self) -> list[nn.Module]:
        return [_BoundLayer(layer, self.context) for layer in self.model.layers]


class _BoundLayer(nn.Module):
    def __init__(self, layer: nn.Module, context: torch.Tensor) -> None:
        super().__init__()
        self.layer, self.context = layer, context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x, self.context)


class ContextModel(nn.Module):
    """The shared part of the context models: ``encode``, ``step``, ``forward``, ``bind``.

    Attributes: ``dim``, ``context_len`` (k, the prefix), ``seq_len`` (= k: the window a step reads),
    ``pred_window`` (steps per call), ``context_dim``, ``encoder`` (a module), ``layers`` (the conditioned
    layers, applied in order), ``preserves`` (what every step keeps for every fixed c), ``oracle_ready``
    (c is hθ: the true parameters can replace the estimate).
    """

    model_name = ""
    preserves: tuple[str, ...] = ()
    dim: int
    context_len: int
    seq_len: int
    pred_window: int
    context_dim: int
    layers: nn.ModuleList
    config: dict[str, Any]

    def _setup(self, dim: int, context_len: int, pred_window: int, encoder: str, system: str, context_dim: int,
               encoder_width: int, n_heads: int) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.context_len = self.seq_len = check_positive_int(context_len, "context_len")
        self.pred_window = check_positive_int(pred_window, "pred_window")
        if encoder not in ENCODERS:
            raise VPIntegratorError(f"encoder: expected one of {', '.join(ENCODERS)}, got {encoder!r}", key="encoder")
        self.encoder_kind = encoder
        if encoder == "finite_difference":
            cls = _check_system(system)
            if cls.dim != dim:
                raise VPIntegratorError(f"system: {system!r} has dim {cls.dim} but the model has dim {dim}; "
                                        "give the system of the data", key="system")
            if context_len < 3:
                raise VPIntegratorError(f"context_len: the finite-difference encoder needs at least 3 states; got "
                                        f"{context_len}", key="context_len")
            self.encoder: nn.Module = FiniteDifferenceEncoder(system)
            self.context_dim = len(cls.theta_names)
        else:
            self.context_dim = check_positive_int(context_dim, "context_dim")
            self.encoder = AttentionEncoder(dim, context_len, self.context_dim, check_positive_int(encoder_width, "encoder_width"),
                                            check_positive_int(n_heads, "n_heads"))
        self.oracle_ready = encoder == "finite_difference"
        self.system = system

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """c from the first ``context_len`` states: prefix (batch, ≥k, dim) -> (batch, context_dim)."""
        if prefix.shape[-2] < self.context_len:
            raise VPIntegratorError(f"{self.model_name}: the prefix has {prefix.shape[-2]} states; the context needs "
                                    f"{self.context_len}")
        return self.encoder(prefix[..., : self.context_len, :])

    def step(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """One step of every state with the context fixed: x (batch, seq, dim), c (batch, context_dim) or
        (context_dim,) -> (batch, seq, dim)."""
        for layer in self.layers:
            x = layer(x, context)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, context_len, dim) -> (batch, pred_window, dim): c from x, then ``pred_window`` steps from
        its last state; one window (context_len, dim) -> (pred_window, dim)."""
        c = self.encode(x)
        z = x[..., -1:, :]
        out = []
        for _ in range(self.pred_window):
            z = self.step(z, c)
            out.append(z)
        return torch.cat(out, -2)

    def bind(self, context: torch.Tensor) -> BoundContextModel:
        """The one-step map with c fixed (for the structure audits); context (context_dim,)."""
        return BoundContextModel(self, context)


def _encoder_args(locals_: dict[str, Any]) -> tuple:
    return (locals_["encoder"], locals_["system"], locals_["context_dim"], locals_["encoder_width"], locals_["n_heads"])


# the rigid-body net (10 layers: 6 missed the t = 10 target, docs/context.md; a 3-state finite-difference context) and its symplectic and
# volume-preserving siblings
@register_model(defaults=dict(context_len=3, n_layers=10, width=4, encoder="finite_difference", system="rigid_body"))
class ContextLiePoissonNet(ContextModel):
    """Context-conditioned Lie–Poisson network on so(3)* (``lpnet_ctx``): ``n_layers`` layers
    z ↦ R(k_l, −ψ_l(k_l·z; c)) z. For every fixed c: Casimir-exact, Poisson, volume preserving.

    Parameters
    ----------
    dim : int
        3.
    context_len : int
        k, prefix states read for c (>= 3 with the finite-difference encoder).
    n_layers, width : int
        Layers and units of each ψ_l.
    pred_window : int
        Steps per call (the training target's length).
    encoder : {"finite_difference", "attention"}
    system : str
        The finite-difference encoder's system (``rigid_body``).
    context_dim, encoder_width, n_heads : int
        The attention encoder's output size, width and heads.
    """

    model_name = "lpnet_ctx"
    preserves = ("volume", "casimir", "poisson")

    def __init__(self, dim: int, context_len: int = 3, n_layers: int = 10, width: int = 4, pred_window: int = 1,
                 encoder: str = "finite_difference", system: str = "rigid_body", context_dim: int = 4,
                 encoder_width: int = 16, n_heads: int = 2) -> None:
        super().__init__()
        if dim != 3:
            raise VPIntegratorError(f"dim: the Lie–Poisson networks act on so(3)* (the rigid body): dim must be 3, got {dim}")
        self._setup(dim, context_len, pred_window, *_encoder_args(locals()))
        check_positive_int(n_layers, "n_layers")
        check_positive_int(width, "width")
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.layers = nn.ModuleList(ConditionedLiePoissonLayer(width, self.context_dim) for _ in range(n_layers))


@register_model(defaults=dict(context_len=5, n_layers=4, width=8, encoder="finite_difference",
                              system="coupled_oscillator"))
class ContextGSympNet(ContextModel):
    """Context-conditioned G-SympNet (``g_sympnet_ctx``): ``n_layers`` gradient shears alternating q and p, each
    conditioned on c. Symplectic (hence volume preserving) for every fixed c.

    Parameters as ``ContextLiePoissonNet``; ``dim`` even, ``width`` the hidden units,
    ``system`` default ``coupled_oscillator``.
    """

    model_name = "g_sympnet_ctx"
    example_dim = 4  # (q, p): model_preserves builds it at an even dim
    preserves = ("volume", "symplectic")

    def __init__(self, dim: int, context_len: int = 5, n_layers: int = 4, width: int = 8, pred_window: int = 1,
                 encoder: str = "finite_difference", system: str = "coupled_oscillator", context_dim: int = 4,
                 encoder_width: int = 16, n_heads: int = 2) -> None:
        super().__init__()
        if isinstance(dim, int) and dim % 2:
            raise VPIntegratorError(f"dim must be even (q, p) for a symplectic model; got {dim}")
        self._setup(dim, context_len, pred_window, *_encoder_args(locals()))
        check_positive_int(n_layers, "n_layers")
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.layers = nn.ModuleList(ConditionedGradientLayer(dim, width, self.context_dim, side="qp"[i % 2])
                                    for i in range(n_layers))


@register_model(defaults=dict(context_len=3, n_layers=6, encoder="finite_difference", system="rigid_body"))
class ContextVolumeNet(ContextModel):
    """Context-conditioned volume-preserving network (``vpff_ctx``): ``n_layers`` shears
    x ↦ x + a(c) ⊙ tanh(L x + β(c)), L alternately strictly lower and upper triangular. det J = 1 for every
    fixed c. Parameters as ``ContextLiePoissonNet`` (any ``dim``).
    """

    model_name = "vpff_ctx"
    preserves = ("volume",)

    def __init__(self, dim: int, context_len: int = 3, n_layers: int = 6, pred_window: int = 1,
                 encoder: str = "finite_difference", system: str = "rigid_body", context_dim: int = 4,
                 encoder_width: int = 16, n_heads: int = 2) -> None:
        super().__init__()
        self._setup(dim, context_len, pred_window, *_encoder_args(locals()))
        check_positive_int(n_layers, "n_layers")
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.layers = nn.ModuleList(ConditionedShear(dim, self.context_dim, lower=i % 2 == 0) for i in range(n_layers))
