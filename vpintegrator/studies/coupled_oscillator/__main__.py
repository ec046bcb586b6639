"""``python -m vpintegrator.studies.coupled_oscillator``: the study through the one study driver."""

from ..driver import main
from . import STUDY

raise SystemExit(main(STUDY))
