"""Torch devices by name, one rule for training and rollout: ``auto``, ``cpu``, ``cuda``, ``cuda:N``."""

from __future__ import annotations

from typing import Any

from .errors import VPIntegratorError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")


def check_device_name(device: Any, key: str = "device") -> str:
    """``device`` as a valid device name, else a one-line error naming ``key``."""
    name = "auto" if device is None else str(device)
    base, _, index = name.partition(":")
    if not (name in ("auto", "cpu", "cuda") or (base == "cuda" and index.isdigit())):
        raise VPIntegratorError(f"{key}: unknown device {name!r}; valid: {', '.join(DEVICE_CHOICES)}", key=key)
    return name


def resolve_device(device: Any = "auto", key: str = "device") -> Any:
    """``auto`` -> cuda if available else cpu; ``cuda`` without CUDA is an error that says so."""
    import torch

    name = check_device_name(device, key)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise VPIntegratorError(
                f"{key} {name!r} requested but CUDA is not available (torch {torch.__version__}); "
                "use device cpu or auto",
                key=key,
            )
        if ":" in name and int(name[5:]) >= torch.cuda.device_count():
            raise VPIntegratorError(f"{key} {name!r}: only {torch.cuda.device_count()} CUDA device(s) visible", key=key)
    return torch.device(name)
