"""Layers on (batch, seq, dim) tensors: Cayley transform, attention and feed-forward layers."""

from .attention import MultiHeadAttention, VolumePreservingAttention
from .cayley import CAYLEY_METHODS, cayley, cayley_method, get_cayley_method
from .feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer

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
]
