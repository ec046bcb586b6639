"""``python -m vpintegrator.studies.context``: the study through the one study driver."""

from ..driver import main
from . import STUDY

raise SystemExit(main(STUDY))
