"""The package's end-to-end studies, run over its command-line tools.

- ``vpintegrator.studies.rigid_body``: the paper's rigid-body study (Brantner, de Romemont, Kraus, Li,
  arXiv 2312.11166), entry point ``scripts/reproduce_rigid_body.py``;
- ``vpintegrator.studies.coupled_oscillator``: VPT against the standard transformer, Störmer–Verlet
  and RK4 on the coupled oscillator, entry point ``scripts/reproduce_coupled_oscillator.py``;
- ``vpintegrator.studies.options``: ``StudyOptions`` (the flags every study takes, declared once on a
  ``Config``), ``StudyPlan`` (those flags resolved: each study's frozen plan extends it), ``Study`` (a study:
  its keys, its plan builder and what runs) and ``STUDIES``, the studies
  ``vp-study NAME`` / ``python -m vpintegrator study NAME`` runs (``rigid_body``, ``rigid_body_structure``,
  ``rigid_body_quality``, ``coupled_oscillator``, ``context``, ``unknown_form``, ``partial_observation``);
- ``vpintegrator.studies.driver``: the one study driver (``main``: parse a study's command line once, build
  its plan once, run it; ``vp-study``, the scripts and ``python -m vpintegrator.studies.NAME`` all go through
  it);
- ``vpintegrator.studies.runner``: the task runner every study uses (``vp-gen``, ``vp-train``, ``vp-rollout``
  and ``vp-plot`` as subprocesses, ``--skip-existing``, logs) and ``vpintegrator.studies.runner.StudyError``;
- ``vpintegrator.studies.stats``: mean ± std over seeds, number formatting, Markdown tables, strict
  JSON and atomic writes.

Nothing here imports torch at import time: the studies run the CLIs in child processes.
"""
