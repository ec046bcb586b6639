"""The rigid-body study's results: its setup constants (``design``), the numbers it extracts from a run directory
(``values``), its results table (``tables``: ``results.md``/``results.json``) and its CPU-timing summary
(``timing``: ``timing/timing.json``, ``timing.md``).

See ``vpintegrator.studies.rigid_body`` for the study itself.
"""

from __future__ import annotations

from .design import (ALL_MODELS, BAND_TARGET, COLUMNS, DT, ERROR_TARGET, HELDOUT_SEED, IM_MODELS,  # noqa: F401
                     INTEGRATORS, LOSS_TARGET, PAPER, PAPER_REF, PAPER_T, PAPER_TRAJ, QUICK_MODELS, REFERENCE,
                     write_heldout_spec)
from .tables import ROW, SCHEMA, build_results, format_results, read_results, write_results  # noqa: F401
from .timing import RESOLUTION, write_timing, write_timing_spec  # noqa: F401
from .values import (PER_IC, _errors_at, budget_lines, heldout_statistics, rollout_values,  # noqa: F401
                     stop_text, training_budget, z_band)
