"""The package's run-time dependencies as the GPU scripts need them, read from pyproject.toml (issue 57).

    python scripts/gpu_deps.py --wheels [--python-version X.Y]    distributions scripts/gpu_wheels.sh downloads
    python scripts/gpu_deps.py --required [--python-version X.Y]  import names gpu_setup.sh and the env step require
    python scripts/gpu_deps.py --optional                          import names that are optional on the device

One list, pyproject's ``[project] dependencies``, so the wheels, the set-up and the ``env`` step cannot drift
from what the package imports (``tomli-w`` went missing from all three once). A marker such as
``python_version < '3.11'`` is evaluated for ``--python-version`` (default: the running Python). The
device image's own builds (``numpy``, ``torch``) are never downloaded; ``numba`` and ``matplotlib`` are
optional there (the steps run without them: generation falls back to ``solve_ivp``, no step draws a figure);
``pytest`` runs the GPU tests and ``hatchling``/``editables`` build ``pip install -e .``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
IMAGE = {"numpy", "torch"}  # the device image's CUDA builds: never replaced
OPTIONAL = {"numba", "matplotlib"}  # heavy, and every step runs without them
TEST_RUNNER = ["pytest"]
BUILD = ["hatchling", "editables"]
_MARKER = re.compile(r"""^python_version\s*(<=|>=|<|>|==|!=)\s*['"](\d+)\.(\d+)['"]$""")


def _marker_holds(marker: str, version: tuple[int, int]) -> bool:
    """``python_version OP 'X.Y'`` (the only marker pyproject uses) evaluated for ``version``."""
    match = _MARKER.match(marker.strip())
    if match is None:
        raise SystemExit(f"gpu_deps: pyproject.toml: marker {marker!r} is not 'python_version OP X.Y'; "
                         "extend scripts/gpu_deps.py to read it")
    op, want = match.group(1), (int(match.group(2)), int(match.group(3)))
    return {"<": version < want, "<=": version <= want, ">": version > want, ">=": version >= want,
            "==": version == want, "!=": version != want}[op]


def dependencies(version: tuple[int, int]) -> list[str]:
    """Distribution names of pyproject's run-time dependencies that apply on Python ``version``."""
    names = []
    for spec in tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]:
        requirement, _, marker = spec.partition(";")
        if marker and not _marker_holds(marker, version):
            continue
        names.append(re.split(r"[<>=!~\[ ]", requirement.strip(), maxsplit=1)[0].lower())
    return names


def import_name(distribution: str) -> str:
    """The module a distribution installs (``tomli-w`` -> ``tomli_w``)."""
    return distribution.replace("-", "_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--wheels", action="store_true", help="distributions to download as wheels")
    which.add_argument("--required", action="store_true", help="import names required on the device")
    which.add_argument("--optional", action="store_true", help="import names optional on the device")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    args = parser.parse_args(argv)
    try:
        version = tuple(int(part) for part in args.python_version.split("."))[:2]
    except ValueError:
        parser.error(f"--python-version {args.python_version!r}: give X.Y, e.g. 3.12")
    deps = dependencies(version)  # type: ignore[arg-type]
    if args.wheels:
        names = [d for d in deps if d not in IMAGE | OPTIONAL] + TEST_RUNNER + BUILD
    elif args.required:
        names = [import_name(d) for d in deps if d not in OPTIONAL] + TEST_RUNNER
    else:
        names = [import_name(d) for d in deps if d in OPTIONAL]
    print(" ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
