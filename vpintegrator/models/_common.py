"""Helpers shared by the model classes: parameter counts and the recorded constructor config.

Written in ``vpintegrator.models.registry`` (beside ``build_model``, which rebuilds a model from that config);
importable here too.
"""

from __future__ import annotations

from .registry import _first_parameter, _record_config, count_parameters  # noqa: F401
