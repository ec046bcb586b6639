"""The studies plan the same commands, byte for byte, whatever parses their flags: every task (name,
command line, outputs, dependencies, exclusive) of 10 option sets over the four studies, hashed and compared
with ``tests/data/study_plans.json`` (written from the main before the studies' flags became ``Config``
keys; paths under the repository written as ``<repo>``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from vpintegrator.studies import rigid_body, rigid_body_quality, rigid_body_structure
from vpintegrator.studies.runner import REPO

EXPECTED = Path(__file__).parent / "data" / "study_plans.json"

# the plans name the repository's configs/study files; against an installed wheel they are the wheel's copies,
# another path, so the digests (written from a checkout) are compared only where the package is this checkout
pytestmark = pytest.mark.skipif(REPO != Path(__file__).resolve().parents[1],
                                reason="the package is not this checkout's (an installed wheel): its config paths differ")

#: option set name -> (study module, flags); every study-specific flag appears in at least one set
OPTION_SETS = {
    "rigid_body": (rigid_body, []),
    "rigid_body_quick": (rigid_body, ["--quick"]),
    "rigid_body_custom": (rigid_body, ["--models", "st,vpt_exact,vpt", "--seeds", "2,0", "--no-long-volume",
                                       "--timing-concurrent", "--budget", "wall", "--train-seconds", "50",
                                       "--long-t-end", "200", "--timing-t-end", "100", "--n-heldout", "7"]),
    # the budget these digests were written with (the studies' default then; --budget plateau is now)
    "rigid_body_structure": (rigid_body_structure, ["--budget", "cpu"]),
    "rigid_body_structure_custom": (rigid_body_structure, ["--models", "vpt,lpnet", "--seeds", "1", "--n-heldout", "9",
                                                           "--n-long", "3", "--long-t-end", "500", "--wall-ceiling",
                                                           "2", "--train-seconds", "30", "--budget", "cpu"]),
    "rigid_body_quality": (rigid_body_quality, ["--budget", "cpu"]),
    "rigid_body_quality_custom": (rigid_body_quality, ["--phase1-seconds", "10", "--phase2-seconds", "20",
                                                       "--phase3-seconds", "100", "--unroll", "2", "--unroll3", "4",
                                                       "--budget", "wall", "--seeds", "4"]),
    # the default budget in work (step budgets from measured epoch costs): digests written when it became the default
    "rigid_body_structure_plateau": (rigid_body_structure, []),
    "rigid_body_quality_plateau": (rigid_body_quality, []),
}


def _text(x) -> str:
    return str(x).replace(str(REPO), "<repo>")


def planned(module, flags: list[str]) -> list[list]:
    """Every task of the study's plan for ``flags`` (with ``--out runs/plan``, in the working directory)."""
    parsed = module.STUDY.parse(["--out", "runs/plan", *flags])
    runner = module.plan(parsed[0] if isinstance(parsed, tuple) else parsed)
    return [[t.name, [_text(c) for c in t.cmd], [_text(o) for o in t.outputs], list(t.deps), t.exclusive]
            for t in runner.tasks.values()]


def digests() -> dict[str, dict]:
    out = {}
    for name, (module, flags) in OPTION_SETS.items():
        tasks = planned(module, flags)
        out[name] = {"tasks": len(tasks), "sha256": hashlib.sha256(json.dumps(tasks).encode()).hexdigest()}
    return out


def test_study_plans_are_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = json.loads(EXPECTED.read_text())
    got = digests()
    assert sum(v["tasks"] for v in got.values()) == sum(v["tasks"] for v in expected.values())
    for name in OPTION_SETS:
        assert got[name] == expected[name], name


if __name__ == "__main__":  # write the expected digests (from the code before a change): python tests/test_study_plans.py
    import os
    import tempfile

    target = EXPECTED.resolve()
    os.chdir(tempfile.mkdtemp())
    target.write_text(json.dumps(digests(), indent=1) + "\n")
    print(target.read_text())
