#!/usr/bin/env python
"""The rigid-body structure study (issue 21): Lie–Poisson networks (Casimir-exact, Poisson maps), their
symmetric variant and the Lie–Poisson transformer next to the VPT, over seeds, on held-out initial
conditions against the exact flow, to t = 100 and t = 10 000.

Usage::

    OMP_NUM_THREADS=1 python scripts/reproduce_rigid_body_structure.py --out runs/rigid_body_structure \
        --export-pretrained vpintegrator/pretrained
    python scripts/reproduce_rigid_body_structure.py --out runs/rigid_body_structure --table-only

What it runs and writes: ``vpintegrator/studies/rigid_body_structure/``.
"""

from vpintegrator.studies.driver import main

if __name__ == "__main__":
    raise SystemExit(main("rigid_body_structure", prog="scripts/reproduce_rigid_body_structure.py"))
