"""The rigid-body study's (``vpintegrator.studies.rigid_body``) setup (``design``), the numbers of a run (``values``),
its results (``tables``: ``results.md``/``results.json``) and CPU timing (``timing``: ``timing/timing.json``, ``.md``;
``cost``: the timing rows on the cost meter, ``timing/cost.json``)."""

from __future__ import annotations

from .design import (ALL_MODELS, BAND_TARGET, COLUMNS, DT, ERROR_TARGET, HELDOUT_SEED, IM_MODELS,  # noqa: F401
                     INTEGRATORS, LOSS_TARGET, PAPER, PAPER_REF, PAPER_T, PAPER_TIMING_T, PAPER_TRAJ, QUICK_MODELS,
                     REFERENCE,
                     write_heldout_spec)
from .tables import ROW, SCHEMA, build_results, format_results, read_results, write_results  # noqa: F401
from .timing import write_timing, write_timing_spec  # noqa: F401
from .values import (PER_IC, _errors_at, budget_lines, heldout_statistics, rollout_values,  # noqa: F401
                     stop_cell, stop_record, stop_text, stop_token, training_budget, z_band)
