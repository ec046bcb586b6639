"""mypy on the package against a listed baseline that may only shrink.

    python scripts/mypy_baseline.py            # exit 1 if mypy reports an error the baseline does not list
    python scripts/mypy_baseline.py --update   # rewrite the baseline (after fixing errors: it shrinks)

The baseline (``mypy-baseline.txt`` beside ``pyproject.toml``) lists each error once per occurrence as
``path: message [code]``, without line numbers, so that edits elsewhere in a file do not churn it. Errors
depend on the mypy version and on the stubs of numpy, torch and matplotlib; the file's first line says
which mypy wrote it. Needs ``pip install mypy``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "mypy-baseline.txt"
_ERROR = re.compile(r"^(?P<path>[^:]+):\d+(?::\d+)?: error: (?P<message>.*)$")


def run_mypy() -> tuple[str, Counter]:
    version = subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out = subprocess.run([sys.executable, "-m", "mypy", "vpintegrator", "--no-error-summary", "--no-pretty"],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode not in (0, 1) or "INTERNAL ERROR" in out.stdout + out.stderr:
        sys.exit(f"mypy did not finish (exit {out.returncode}):\n{(out.stdout + out.stderr)[-2000:]}")
    errors = Counter(f"{m['path']}: {m['message']}" for line in out.stdout.splitlines() if (m := _ERROR.match(line)))
    return version, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline with the current errors")
    args = parser.parse_args()
    version, errors = run_mypy()
    if args.update:
        lines = sorted(errors.elements())
        BASELINE.write_text(f"# {version}: {len(lines)} errors\n" + "".join(f"{e}\n" for e in lines), encoding="utf-8")
        print(f"{BASELINE}: {len(lines)} errors")
        return 0
    listed = Counter(line for line in BASELINE.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#"))
    new, fixed = errors - listed, listed - errors
    for e in sorted(new.elements()):
        print(f"new: {e}")
    if fixed:
        print(f"{sum(fixed.values())} listed errors are gone; run with --update to shrink the baseline")
    print(f"mypy: {sum(errors.values())} errors, {sum(listed.values())} listed, {sum(new.values())} new")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
