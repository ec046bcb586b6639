"""Seeds as ensemble members (``--seeds-as-members DEVICE``, off by default), for the study runner.

The ``vp-train`` tasks that differ only by ``--seed`` (and ``--out``), with the same dependencies, run as one
ensemble run (``vp-train ... --set seeds=[...] --device DEVICE``, ``vpintegrator.training.ensemble``: the members
stacked, each with its own initialisation, data order, plateau, checkpoints) in ``RUN/members/<first task>/``;
afterwards each member's run directory is moved to its task's ``--out`` (a link to it left in the ensemble's
directory), so what reads the trainings sees the files of K single runs, and each task is stamped done as if run
alone (its log names the ensemble's). A member equals the single run of its seed (to round-off) wherever the rules
that stop it are per member (epochs, ``--budget plateau``: patience and step counts); a CPU or wall budget is the
whole ensemble's, the K runs' together (the seconds times K), and each member's ``summary.json`` records the
ensemble's CPU and wall seconds (the whole run's, not a K-th). An ensemble run that was interrupted starts again
under ``--skip-existing`` (not resumed). Tasks the plan gives anything else to tell apart (another config, data,
``--init-from``) run alone, as do resumed ones. The planned tasks, and so a study's plan, are the same with or
without it: it changes how the runner executes them. The studies that train through the runner take it
(``MEMBER_STUDIES``); the driver passes it to the runners a study makes (``seeds_as_members``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

#: the studies whose trainings run as the runner's ``vp-train`` tasks: those ``--seeds-as-members`` applies to
MEMBER_STUDIES = ("rigid_body", "rigid_body_structure", "rigid_body_quality")
#: the budget flags of a task, scaled by the number of members when its seeds run as one ensemble
BUDGET_FLAGS = ("--cpu-time-limit", "--time-limit")
#: ``--seeds-as-members``' device for the runners made in its block (``seeds_as_members``)
MEMBERS: contextvars.ContextVar[str | None] = contextvars.ContextVar("vp_seeds_as_members", default=None)

@contextlib.contextmanager
def seeds_as_members(device: str | None) -> Iterator[None]:
    """Within the block a ``Runner`` made without ``members`` runs its tasks that differ only by seed as one
    ensemble run on ``device`` (None: as planned). The driver's way of passing ``--seeds-as-members`` to the
    runners the studies make."""
    token = MEMBERS.set(device)
    try:
        yield
    finally:
        MEMBERS.reset(token)


def seed_and_out(cmd: list[Any]) -> tuple[list[Any], int, Path] | None:
    """A fresh ``vp-train`` task's command without its ``--seed`` and ``--out`` values, and those; None for any
    other command (another program, a resume, an ensemble or a device of its own)."""
    words = [str(c) for c in cmd]
    if not words or words[0] != "vp-train" or "--resume" in words or "--ensemble" in words or "--device" in words \
            or any(w.startswith(("seeds=", "seed=", "--seed=", "--out=")) for w in words):
        return None
    rest: list[Any] = []
    seed = out = None
    i = 0
    while i < len(cmd):
        if words[i] in ("--seed", "--out") and i + 1 < len(cmd):
            if words[i] == "--seed":
                seed = words[i + 1]
            else:
                out = Path(words[i + 1])
            i += 2
            continue
        rest.append(cmd[i])
        i += 1
    if seed is None or out is None or not seed.isdigit():
        return None
    return rest, int(seed), out


def scaled_budget(cmd: list[Any], n: int) -> list[Any]:
    """``cmd`` with its CPU and wall budgets (``BUDGET_FLAGS``) times ``n``: the n runs' seconds together."""
    out = list(cmd)
    for i, word in enumerate(out[:-1]):
        if str(word) in BUDGET_FLAGS:
            out[i + 1] = f"{float(out[i + 1]) * n:g}"
    return out


def move_member(src: Path, out: Path, replace: bool) -> str | None:
    """Member ``src`` of an ensemble to ``out`` (its task's run directory), a relative link left in its place;
    why not (a line), or None."""
    if src.is_symlink() or not (src / "summary.json").exists():
        return f"{src} is not the member's run directory (no summary.json, or a link)"
    if out.exists() or out.is_symlink():
        if not replace:
            return f"{out} exists; rerun with --overwrite or --skip-existing"
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(out))
    with contextlib.suppress(OSError, NotImplementedError):
        os.symlink(os.path.relpath(out, src.parent), src, target_is_directory=True)
    return None
