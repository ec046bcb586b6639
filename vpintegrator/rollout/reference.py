"""The reference of a comparison run (``vp-rollout``'s ``reference`` key): what the errors are measured
against, described (``describe_reference``: the line above the metrics table and the rollout file's
``reference*`` attributes) and written (``write_reference``: ``/reference`` of the rollout file).

``reference = "exact"`` (the default): the exact flow, DOP853 at rtol = atol = 1e-12 integrated from the
initial conditions over the whole horizon, unless the data file was itself made by DOP853 at tolerances
<= 1e-12 (then the data is the exact flow within its horizon, continued by the same DOP853 beyond).
``reference = "data"``: the data file, continued beyond its horizon with the data's own generator.
Held-out conditions (``heldout``) are integrated from their initial conditions by the exact flow or, with
``"data"``, the data's generator. A parametric data set's rows (``plan.system`` a
``vpintegrator.systems.family.SystemFamily``) are each integrated with their own parameters.

Data that names no system (a file of ``/t`` and ``/y`` only: ``plan.system`` a
``vpintegrator.systems.unknown.UnknownSystem``): the reference is the data file itself, whatever
``reference`` says (there is no exact flow and no generator); what would need the equations (classical,
oracle and exact-flow rows, held-out conditions, a horizon past the file, a first window made by an
integrator) is refused in one line before the run starts.

Written in ``vpintegrator.rollout.compare`` (the comparison run, their only user); importable here too.
"""

from __future__ import annotations

from .compare import describe_reference, write_reference

__all__ = ["describe_reference", "write_reference"]
