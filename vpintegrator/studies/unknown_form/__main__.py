"""``python -m vpintegrator.studies.unknown_form``: the study through the one study driver."""

from ..driver import main
from . import STUDY

raise SystemExit(main(STUDY))
