"""The former home of ``vpintegrator.nn.common``: a model pickled whole
(``torch.save(model)``) before the move names its activation ``vpintegrator.nn._common.identity``, which
this keeps loadable. Import from ``vpintegrator.nn.common``."""

from .common import identity

__all__ = ["identity"]
