#!/usr/bin/env python
"""The rigid-body quality targets over seeds (two LM phases per seed, the second with unroll), trajectories 1
and 4 to t = 100 against implicit midpoint and the exact flow.

Usage::

    OMP_NUM_THREADS=1 python scripts/reproduce_rigid_body_quality.py --out runs/rigid_body_quality
    python scripts/reproduce_rigid_body_quality.py --out runs/rigid_body_quality --table-only
    python scripts/reproduce_rigid_body_quality.py --out runs/rigid_body_quality --overwrite   # run again over it

What it runs and writes: ``vpintegrator/studies/rigid_body_quality.py``.
"""

from vpintegrator.studies.driver import main

if __name__ == "__main__":
    raise SystemExit(main("rigid_body_quality", prog="scripts/reproduce_rigid_body_quality.py"))
