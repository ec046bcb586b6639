#!/usr/bin/env python
"""The coupled-oscillator study: VPT against the standard transformer, Störmer–Verlet and RK4, energy drift
over 10⁴ steps (dt = 0.4, t in [0, 4000]), with figures and a results table. A preset of the comparison engine:
``vp-study coupled_oscillator`` is ``vp-study compare --preset coupled_oscillator``
(``vpintegrator/studies/presets/coupled_oscillator.toml``: its problem, rows, budgets and named evaluation).

Usage::

    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator --dry-run   # the plan, its CPU cost
    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator
    python scripts/reproduce_coupled_oscillator.py --out runs/co_quick --quick          # minutes
    python scripts/reproduce_coupled_oscillator.py --out runs/co_tables --table-only --results coupled_oscillator_quick
    python scripts/reproduce_coupled_oscillator.py --help                               # every option

Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from vpintegrator.studies.driver import main

if __name__ == "__main__":
    raise SystemExit(main("coupled_oscillator", prog="scripts/reproduce_coupled_oscillator.py"))
