#!/usr/bin/env python
"""The paper's rigid-body study (Brantner, de Romemont, Kraus, Li 2025, arXiv 2312.11166), end to end over the CLIs.

Usage::

    OMP_NUM_THREADS=1 scripts/reproduce_rigid_body.py --out runs/reproduce_rigid_body           # the study
    OMP_NUM_THREADS=1 scripts/reproduce_rigid_body.py --quick --out runs/quick                  # a few minutes
    scripts/reproduce_rigid_body.py --out RUN --skip-existing     # resume a killed study
    scripts/reproduce_rigid_body.py --out RUN --overwrite         # run it again over an earlier study in RUN
    scripts/reproduce_rigid_body.py --out RUN --table-only        # rebuild results.md/json only
    scripts/reproduce_rigid_body.py --help                        # every option

What it runs and writes (the run directory's layout): ``vpintegrator/studies/rigid_body.py``.
Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from vpintegrator.studies.driver import main

if __name__ == "__main__":
    raise SystemExit(main("rigid_body", prog="scripts/reproduce_rigid_body.py"))
