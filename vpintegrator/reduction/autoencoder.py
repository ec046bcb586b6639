"""A symplectic autoencoder: a nonlinear reduction of a canonical system, fitted on snapshots.

The architecture is GeometricMachineLearning.jl's ``SymplecticAutoencoder`` (Brantner & Kraus, 2023), written
here in torch. Both halves alternate SympNet gradient layers (``GradientLayerQ`` / ``GradientLayerP``,
symplectic maps of their own dimension) with **PSD-like layers**, the linear maps ``(q, p) -> (Phi q, Phi p)``
whose ``Phi`` (N', n') has orthonormal columns (a point of the Stiefel manifold, kept there by torch's
``orthogonal`` parametrisation), so that ``A = diag(Phi, Phi)`` satisfies ``A^T J_{2N'} A = J_{2n'}``:

- the **encoder** (``n_encoder_blocks`` = 2): ``n_encoder_layers`` gradient layers on R^{2N}, then the
  PSD-like layer down to R^{2n} (``Phi^T``);
- the **decoder** (``n_decoder_blocks`` = 3): per block ``n_decoder_layers`` gradient layers, then a PSD-like
  layer up, through GML's intermediate dimension (``n : (N - n) // (blocks - 1) : N``, last N) to R^{2N}.

What holds, exactly (to rounding, ``tests/test_reduction_autoencoder.py``): the decoder's Jacobian ``D``
(2N, 2n) is symplectic-Stiefel-like, ``D^T J_{2N} D = J_{2n}`` at every reduced state (each layer's
Jacobian is symplectic or a PSD-like ``A``, and the product keeps the identity), so the decoder is a symplectic
immersion and ``H(decode(z))`` is a Hamiltonian system on R^{2n}; the encoder's Jacobian ``E`` (2n, 2N)
satisfies ``E J_{2N} E^T = J_{2n}`` (a Poisson submersion). What does not hold: ``D^T D = I`` (only the
PSD-like layers have orthonormal columns), and the encoder is not the decoder's left inverse
(``encode(decode(z)) != z`` in general): they are trained together on the reconstruction only.

Departures from GML, said plainly: the PSD-like layers start at the cotangent-lift PSD basis of the training
snapshots (GML starts them at random points of the manifold) and the gradient layers' output scale ``a`` at
0, so that training starts from PSD's reconstruction and every step measured is an improvement on it; the
hidden width is ``sympnet_upscale`` times the layer's N' (GML: 5; default here 1, for the CPU); training is
``fit``'s one loop (``vpintegrator.training.autoencoder``: run directory, resume, budgets, sinks): Adam on
minibatches, the loss the relative squared reconstruction error ``sum |y - decode(encode(y))|^2 / sum |y|^2``
(``loss = "relative_squared"``, the snapshots their own validation set), the PSD start judged as epoch 0
(``judge_start``), stopped by the plateau rule or ``max_steps``, keeping the best epoch.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn.utils.parametrizations import orthogonal

from ..errors import VPIntegratorError
from ..nn.sympnet import GradientLayerP, GradientLayerQ
from .fileformat import WEIGHT_PREFIX, check_archive, read_archive, write_archive

__all__ = ["SymplecticAutoencoder", "autoencoder_at_psd", "load_autoencoder", "intermediate_dims"]


def intermediate_dims(full_dim: int, reduced_dim: int, n_blocks: int) -> list[int]:
    """GML's dimensions of a symplectic encoder's or decoder's blocks, ascending from ``reduced_dim`` to
    ``full_dim`` (all even): ``n : (N - n) // (n_blocks - 1) : N`` in half-dimensions, the last made N."""
    n_full, n_red = full_dim // 2, reduced_dim // 2
    if n_blocks < 2:
        raise VPIntegratorError(f"symplectic autoencoder: n_blocks must be >= 2; got {n_blocks}")
    step = max((n_full - n_red) // (n_blocks - 1), 1)
    halves = list(range(n_red, n_full + 1, step))[:n_blocks]
    halves += [n_full] * (n_blocks - len(halves))  # (n_full - n_red < n_blocks - 1: square blocks at the end)
    halves[-1] = n_full
    return [2 * h for h in halves]


class _PSDLike(nn.Module):
    """(q, p) -> (Phi q, Phi p) up (``up``: R^{2n'} -> R^{2N'}) or (Phi^T q, Phi^T p) down; Phi (N', n') with
    orthonormal columns (torch's ``orthogonal`` parametrisation of the Stiefel manifold)."""

    def __init__(self, big: int, small: int, up: bool) -> None:
        super().__init__()
        self.big, self.small, self.up = big, small, up
        # built in float64: the parametrisation keeps a base point, which a float32 one would leave orthonormal
        # to 1e-7 only after a later .double()
        self.lin = nn.Linear(small, big, bias=False, dtype=torch.float64)  # weight (big, small): Phi
        orthogonal(self.lin, "weight")

    @property
    def phi(self) -> torch.Tensor:
        """Phi (N', n'), orthonormal columns."""
        return self.lin.weight

    def set_phi(self, phi: np.ndarray) -> None:
        """Start at ``phi`` (orthonormal columns)."""
        with torch.no_grad():
            self.lin.weight = torch.as_tensor(phi, dtype=self.lin.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        phi = self.phi
        n_in = self.small if self.up else self.big
        q, p = x[..., :n_in], x[..., n_in:]
        m = phi.mT if self.up else phi  # x @ m: rows; up (n'->N'): x @ Phi^T; down: x @ Phi
        return torch.cat([q @ m, p @ m], dim=-1)


def _block_layers(dim: int, n_layers: int, upscale: int, activation: str) -> list[nn.Module]:
    """``n_layers`` gradient layers on R^dim, q first (GML's ``init_q``), their output scale ``a`` at 0."""
    layers: list[nn.Module] = []
    for i in range(n_layers):
        cls = GradientLayerQ if i % 2 == 0 else GradientLayerP
        layer = cls(dim, upscale * dim, activation)
        with torch.no_grad():
            layer.scale.zero_()
        layers.append(layer)
    return layers


class SymplecticAutoencoder(nn.Module):
    """A symplectic autoencoder R^{2N} -> R^{2n} -> R^{2N} (module docstring); build it with
    [`fit_symplectic_autoencoder`][vpintegrator.training.fit_symplectic_autoencoder] or
    [`load_autoencoder`][vpintegrator.reduction.autoencoder.load_autoencoder].

    Parameters
    ----------
    full_dim, reduced_dim : int
        2N and 2n, even, ``reduced_dim <= full_dim``.
    n_encoder_layers, n_encoder_blocks, n_decoder_layers, n_decoder_blocks : int
        GML's sizes (defaults 4, 2, 1, 3).
    sympnet_upscale : int
        Hidden width of a gradient layer on R^{2N'}: ``sympnet_upscale * N'``.
    activation : str
        The gradient layers' activation.

    Attributes
    ----------
    fit_seconds : float
        CPU seconds (``time.process_time``, every thread) the fit took, the PSD initialisation included.
    fitted_on : dict
        What it was fitted on (``vpintegrator.reduction.files.data_record``).
    history : list of float
        The training loss (relative squared reconstruction error) at each epoch.
    """

    def __init__(self, full_dim: int, reduced_dim: int, *, n_encoder_layers: int = 4, n_encoder_blocks: int = 2,
                 n_decoder_layers: int = 1, n_decoder_blocks: int = 3, sympnet_upscale: int = 1,
                 activation: str = "tanh") -> None:
        super().__init__()
        for name, v in (("full_dim", full_dim), ("reduced_dim", reduced_dim)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 2 or v % 2:
                raise VPIntegratorError(f"symplectic autoencoder: {name} must be an even int >= 2; got {v!r}",
                                        key=name)
        if reduced_dim > full_dim:
            raise VPIntegratorError(f"symplectic autoencoder: reduced_dim = {reduced_dim} is above the state's "
                                    f"{full_dim} components; give reduced_dim <= {full_dim}", key="reduced_dim")
        self.config: dict[str, Any] = {
            "full_dim": int(full_dim), "reduced_dim": int(reduced_dim), "n_encoder_layers": int(n_encoder_layers),
            "n_encoder_blocks": int(n_encoder_blocks), "n_decoder_layers": int(n_decoder_layers),
            "n_decoder_blocks": int(n_decoder_blocks), "sympnet_upscale": int(sympnet_upscale),
            "activation": str(activation)}
        enc_dims = intermediate_dims(full_dim, reduced_dim, n_encoder_blocks)[::-1]  # descending
        dec_dims = intermediate_dims(full_dim, reduced_dim, n_decoder_blocks)  # ascending
        enc: list[nn.Module] = []
        for big, small in zip(enc_dims[:-1], enc_dims[1:]):
            enc += _block_layers(big, n_encoder_layers, sympnet_upscale, activation)
            enc.append(_PSDLike(big // 2, small // 2, up=False))
        dec: list[nn.Module] = []
        for small, big in zip(dec_dims[:-1], dec_dims[1:]):
            dec += _block_layers(small, n_decoder_layers, sympnet_upscale, activation)
            dec.append(_PSDLike(big // 2, small // 2, up=True))
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)
        self.dim: int = int(full_dim)  # what fit trains: (b, 1, 2N) -> (b, 1, 2N)
        self.seq_len: int = 1
        self.pred_window: int = 1
        self.fit_seconds: float = 0.0
        self.fitted_on: dict[str, Any] = {}
        self.history: list[float] = []

    @property
    def full_dim(self) -> int:
        """2N."""
        return int(self.config["full_dim"])

    @property
    def reduced_dim(self) -> int:
        """2n."""
        return int(self.config["reduced_dim"])

    @property
    def n_sites(self) -> int:
        """N: the full system's degrees of freedom."""
        return self.full_dim // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction decode(encode(x)) of windows (batch, 1, 2N): what ``fit`` trains."""
        return self.decoder(self.encoder(x))

    def psd_layers(self) -> list[_PSDLike]:
        """The PSD-like layers, encoder's then decoder's."""
        return [m for m in self.modules() if isinstance(m, _PSDLike)]

    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def _run(self, net: nn.Module, x: Any, dim: int, what: str) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 0 or x.shape[-1] != dim:
            hint = (f" (an autoencoder of a lattice of N = {self.n_sites}: states of 2N = {dim} components; fit "
                    "one on this lattice's data)" if what == "state" else "")
            raise VPIntegratorError(f"symplectic autoencoder: a {what} must have shape (..., {dim}); got shape "
                                    f"{x.shape}{hint}")
        with torch.no_grad():
            out = _apply(net, torch.as_tensor(x, dtype=self._dtype()))
        return out.double().numpy()

    def encode(self, x: Any) -> np.ndarray:
        """(..., 2N) -> (..., 2n), float64."""
        return self._run(self.encoder, x, self.full_dim, "state")

    def decode(self, z: Any) -> np.ndarray:
        """(..., 2n) -> (..., 2N), float64."""
        return self._run(self.decoder, z, self.reduced_dim, "reduced state")

    def project(self, x: Any) -> np.ndarray:
        """decode(encode(x)): the reconstruction."""
        return self.decode(self.encode(x))

    def reconstruction_error(self, states: Any) -> np.ndarray:
        """``|y - decode(encode(y))| / |y|`` of each state (as ``psd_floor``): (..., 2N) -> (...)."""
        from ..arrays import relative_error

        y = np.asarray(getattr(states, "y", states), dtype=np.float64)
        return np.asarray(relative_error(self.project(y), y))

    def save(self, path: Any, fitted_on: Mapping[str, Any] | None = None) -> None:
        """Write it to ``path`` (a reduction file, ``vpintegrator.reduction.files``; atomic). ``fitted_on``
        replaces the recorded data (default: what ``fit_symplectic_autoencoder`` recorded)."""
        arrays = {WEIGHT_PREFIX + k: v.detach().to("cpu").double().numpy() for k, v in self.state_dict().items()}
        write_archive(path, {"kind": "symplectic_autoencoder", "n_sites": self.n_sites,
                             "reduced_dim": self.reduced_dim, "config": dict(self.config),
                             "fit_seconds": float(self.fit_seconds),
                             "fitted_on": dict(self.fitted_on if fitted_on is None else fitted_on)}, arrays)


def _apply(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``net`` on states (..., d): the SympNet layers take (batch, seq, d)."""
    out = net(x.reshape(-1, 1, x.shape[-1]))
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _leading_basis(y: np.ndarray, basis: Any, k: int, seed: int) -> np.ndarray:
    """(N, k) orthonormal columns: the cotangent lift's k leading vectors, completed (beyond the snapshots'
    rank) by an orthonormal complement."""
    from .psd import fit_psd

    s = basis.singular_values
    rank = int(np.sum(s > s[0] * max(y.shape) * np.finfo(np.float64).eps)) if s.size and s[0] > 0 else 0
    phi = fit_psd(y, 2 * min(k, rank)).phi
    if phi.shape[1] < k:
        extra = np.random.default_rng(seed).normal(size=(phi.shape[0], k - phi.shape[1]))
        extra -= phi @ (phi.T @ extra)
        phi = np.hstack([phi, np.linalg.qr(extra)[0]])
    return phi


def autoencoder_at_psd(states: Any, reduced_dim: int, seed: int, dtype: torch.dtype,
                       **arch: Any) -> tuple[SymplecticAutoencoder, np.ndarray]:
    """``(model, y)``: the autoencoder before training on ``states`` (their snapshots ``y`` (m, 2N)): its
    gradient layers drawn after ``torch.manual_seed(seed)``, its PSD-like layers at the cotangent-lift basis."""
    from .psd import _snapshots, fit_psd

    y = _snapshots(states, "fit_symplectic_autoencoder")
    full_dim = y.shape[1]
    torch.manual_seed(seed)
    model = SymplecticAutoencoder(full_dim, reduced_dim, **arch).to(dtype)
    # the PSD-like layers start at the cotangent-lift basis (module docstring): the encoder at Phi_n^T, the
    # decoder's chain Phi_{n -> M} ... Phi_{M -> N} at [I; 0] ... Phi_M, so that the product is Phi_n
    dec_dims = intermediate_dims(full_dim, reduced_dim, model.config["n_decoder_blocks"])
    try:
        basis = fit_psd(y, reduced_dim)  # (the one-line error of a reduced_dim above twice the rank)
    except VPIntegratorError as err:
        raise VPIntegratorError(str(err).replace("fit_psd:", "fit_symplectic_autoencoder:"), key=err.key) from None
    phi = _leading_basis(y, basis, max(dec_dims[-2], reduced_dim) // 2, seed)
    layers = model.psd_layers()
    layers[0].set_phi(phi[:, :reduced_dim // 2])
    for layer in layers[1:]:
        if layer.big == full_dim // 2:
            layer.set_phi(phi[:, :layer.small])
        else:
            layer.set_phi(np.eye(layer.big, layer.small))
    return model, y


def autoencoder_from_archive(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                             path: Any) -> SymplecticAutoencoder:
    """The autoencoder of a reduction file's ``meta`` and arrays (``load_reduction``)."""
    cfg = dict(meta.get("config") or {})
    weights = {k[len(WEIGHT_PREFIX):]: v for k, v in arrays.items() if k.startswith(WEIGHT_PREFIX)}
    try:
        model = SymplecticAutoencoder(int(cfg.pop("full_dim")), int(cfg.pop("reduced_dim")), **cfg).double()
        model.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})
    except (KeyError, TypeError, RuntimeError, VPIntegratorError) as err:
        raise VPIntegratorError(f"{path}: the autoencoder's weights do not match its config "
                                f"({type(err).__name__}); write it again with SymplecticAutoencoder.save") from None
    model.fitted_on = dict(meta.get("fitted_on") or {})
    model.fit_seconds = float(meta.get("fit_seconds", 0.0))
    return model


def load_autoencoder(path: Any, n_sites: int | None = None) -> SymplecticAutoencoder:
    """The autoencoder saved at ``path`` (``SymplecticAutoencoder.save``); ``n_sites``: refuse, in one line
    naming the file, an autoencoder of another lattice size."""
    meta, arrays = read_archive(path)
    check_archive(meta, path, n_sites, None)
    if meta.get("kind") != "symplectic_autoencoder":
        raise VPIntegratorError(f"{path}: holds a {meta.get('kind')} reduction, not a symplectic autoencoder; give a "
                                "file written by SymplecticAutoencoder.save (or load it with load_reduction)")
    return autoencoder_from_archive(meta, arrays, path)
