"""Rewrite the re-export block (``if TYPE_CHECKING:`` imports and the literal ``__all__``) of the lazy
packages from their ``_LAZY`` dicts, the one list each package's public names are written in.

    python scripts/write_exports.py                        # the packages of vpintegrator._lazy.GENERATED
    python scripts/write_exports.py vpintegrator.data      # another lazy package (add it to GENERATED)

``tests/test_api.py`` checks that the blocks of ``GENERATED`` are what this writes.
"""

from __future__ import annotations

import importlib
import sys

from vpintegrator._lazy import GENERATED, write_exports


def main(packages: list[str]) -> None:
    for package in packages or GENERATED:
        file = importlib.import_module(package).__file__
        assert file is not None, package
        print(f"{file}: {'rewritten' if write_exports(file) else 'current'}")


if __name__ == "__main__":
    main(sys.argv[1:])
