#!/usr/bin/env python
"""The coupled-oscillator study: VPT against the standard transformer, Störmer–Verlet and RK4, energy drift
over 10⁴ steps (dt = 0.4, t in [0, 4000]), with figures and a results table.

Usage::

    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator
    python scripts/reproduce_coupled_oscillator.py --out runs/co_quick --quick          # about 2 minutes
    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator --table-only
    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator --overwrite   # run again over it
    python scripts/reproduce_coupled_oscillator.py --help                               # every option

What it runs and writes: ``vpintegrator/studies/coupled_oscillator/``.
Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from vpintegrator.studies.driver import main

if __name__ == "__main__":
    raise SystemExit(main("coupled_oscillator", prog="scripts/reproduce_coupled_oscillator.py"))
