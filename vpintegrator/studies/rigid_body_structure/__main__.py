"""``python -m vpintegrator.studies.rigid_body_structure``: the study through the one study driver."""

from ..driver import main
from . import STUDY

raise SystemExit(main(STUDY))
