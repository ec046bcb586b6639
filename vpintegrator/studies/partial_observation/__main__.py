"""``python -m vpintegrator.studies.partial_observation``: the study through the one study driver."""

from ..driver import main
from . import STUDY

raise SystemExit(main(STUDY))
