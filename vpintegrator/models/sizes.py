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

Written in ``vpintegrator.models.registry`` (beside ``build_model``, its only user); importable here too.
"""

from __future__ import annotations

from .registry import OBJECT_BYTES, PROBE_MAX, ModelSize, check_model_memory, estimate_model_size

__all__ = ["ModelSize", "PROBE_MAX", "OBJECT_BYTES", "estimate_model_size", "check_model_memory"]
