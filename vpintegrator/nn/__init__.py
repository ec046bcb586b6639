"""Layers on (batch, seq, dim) tensors: Cayley transform, attention, feed-forward, symplectic and Lie–Poisson layers."""

from .attention import MultiHeadAttention, VolumePreservingAttention
from .cayley import CAYLEY_METHODS, cayley, cayley_method, get_cayley_method
from .feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer
from .lie_poisson import LiePoissonCoupling, LiePoissonLayer
from .symplectic_attention import SymplecticAttentionP, SymplecticAttentionQ
from .sympnet import (
    ActivationLayerP,
    ActivationLayerQ,
    BiasLayer,
    GradientLayerP,
    GradientLayerQ,
    LinearLayerP,
    LinearLayerQ,
)

__all__ = [
    "CAYLEY_METHODS",
    "cayley",
    "cayley_method",
    "get_cayley_method",
    "VolumePreservingAttention",
    "MultiHeadAttention",
    "VolumePreservingLowerLayer",
    "VolumePreservingUpperLayer",
    "ResNetLayer",
    "LinearLayerQ",
    "LinearLayerP",
    "ActivationLayerQ",
    "ActivationLayerP",
    "GradientLayerQ",
    "GradientLayerP",
    "BiasLayer",
    "SymplecticAttentionQ",
    "SymplecticAttentionP",
    "LiePoissonLayer",
    "LiePoissonCoupling",
]
