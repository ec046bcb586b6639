#!/usr/bin/env python
"""Lines of the hand-written package (every ``vpintegrator/**/*.py``), at a git revision and in the working tree.

Prints the total (all lines, and lines that are neither blank nor comments) at ``--before`` (a git revision,
default ``HEAD``) and in the working tree, and the difference, per file for the files that changed. Issue 59
asks that the package not grow through writing each method once:

    python scripts/count_lines.py --before 9d17359
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def counts(text: str) -> tuple[int, int]:
    """(all lines, lines of code: neither blank nor a comment)."""
    lines = text.splitlines()
    return len(lines), sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))


def at_revision(rev: str) -> dict[str, tuple[int, int]]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "vpintegrator"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    return {n: counts(subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout) for n in names if n.endswith(".py")}


def in_tree() -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(ROOT)): counts(p.read_text()) for p in sorted((ROOT / "vpintegrator").rglob("*.py"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="HEAD", help="git revision to compare with (default HEAD)")
    args = ap.parse_args()
    old, new = at_revision(args.before), in_tree()
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, (0, 0)), new.get(name, (0, 0))
        if a != b:
            print(f"{name:<60}{a[0]:>7} -> {b[0]:<7}({b[0] - a[0]:+d} lines, {b[1] - a[1]:+d} of code)")
    total_old = tuple(sum(v[i] for v in old.values()) for i in (0, 1))
    total_new = tuple(sum(v[i] for v in new.values()) for i in (0, 1))
    print(f"vpintegrator/**/*.py at {args.before}: {total_old[0]} lines ({total_old[1]} of code); working tree: "
          f"{total_new[0]} lines ({total_new[1]} of code); difference {total_new[0] - total_old[0]:+d} "
          f"({total_new[1] - total_old[1]:+d} of code)")


if __name__ == "__main__":
    main()
