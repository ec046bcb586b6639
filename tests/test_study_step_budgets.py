"""Budgets in work: the studies that train through ``vp-train`` subprocesses turn their seconds into optimiser steps
by each model's measured epoch cost (``--budget plateau``, their default), the plateau rule beside it, and every
budget option (``--train-seconds``, ``--max-steps``, ``--patience``, ``--budget``) reaches every ``vp-train`` call —
read here off the planned commands, with the expected step counts written out from the cost tables."""

from __future__ import annotations

import math

import pytest

from vpintegrator.studies import rigid_body_structure

#: (study module, models planned, the default seconds, the flags that pick them, task name of a model's training)
CASES = {
    "rigid_body_structure": (rigid_body_structure, ("lpnet", "vpt_sym"), 240.0,
                             ["--seeds", "0", "--models", "lpnet,vpt_sym"], "train_{}_s0"),
}


def _commands(name: str, tmp_path, *args: str) -> dict[str, list[str]]:
    module, models, _, flags, task = CASES[name]
    parsed = module.STUDY.parse(["--out", str(tmp_path / name), *flags, *args])
    plan = module.plan(parsed[0] if isinstance(parsed, tuple) else parsed)
    return {m: [str(c) for c in plan.tasks[task.format(m)].cmd] for m in models}


def _set(cmd: list[str], key: str) -> str | None:
    """The value of ``--set KEY=VALUE`` in a command (None: not set)."""
    return next((cmd[i + 1].split("=", 1)[1] for i, c in enumerate(cmd) if c == "--set"
                 and cmd[i + 1].startswith(key + "=")), None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_default_budget_is_each_models_seconds_in_whole_measured_epochs(name, tmp_path):
    module, models, seconds, _, _ = CASES[name]
    commands = _commands(name, tmp_path)
    for model, cmd in commands.items():  # whole epochs of 10 LM steps, written out here
        assert _set(cmd, "max_steps") == str(10 * math.floor(seconds / module.EPOCH_COSTS[model]))
        assert _set(cmd, "patience") == "10" and "--cpu-time-limit" not in cmd
    assert len({_set(c, "max_steps") for c in commands.values()}) == len(models)  # priced per model


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_budget_option_reaches_every_training(name, tmp_path):
    module, models, _, _, _ = CASES[name]
    short = _commands(name, tmp_path, "--train-seconds", "30")
    assert all(_set(c, "max_steps") == str(10 * math.floor(30.0 / module.EPOCH_COSTS[m])) for m, c in short.items())
    given = _commands(name, tmp_path, "--max-steps", "70", "--patience", "3")
    assert all(_set(c, "max_steps") == "70" and _set(c, "patience") == "3" for c in given.values())
    cpu = _commands(name, tmp_path, "--budget", "cpu", "--train-seconds", "50")
    assert all(c[c.index("--cpu-time-limit") + 1] == "50" and _set(c, "max_steps") is None for c in cpu.values())


def test_the_quality_studys_phases_are_priced_at_their_unroll(tmp_path):
    """Phase 1 (unroll 1) and phase 2 (unroll 3) of the shipped config: their seconds in whole epochs of the cost
    measured at that unroll; an unroll never measured (4) is scaled from the one below; another config needs
    --max-steps (one line)."""
    from vpintegrator.studies import rigid_body_quality as quality
    from vpintegrator.studies.runner import StudyError

    def commands(*args: str) -> dict[str, list[str]]:
        plan = quality.plan(quality.STUDY.parse(["--out", str(tmp_path / "q"), "--seeds", "0", *args]))
        return {p: [str(c) for c in plan.tasks[f"train_{p}_s0"].cmd] for p in ("p1", "p2")}

    cmd = commands()
    assert _set(cmd["p1"], "max_steps") == str(10 * math.floor(450.0 / quality.EPOCH_COSTS[("vpt", 1)]))
    assert _set(cmd["p2"], "max_steps") == str(10 * math.floor(450.0 / quality.EPOCH_COSTS[("vpt", 3)]))
    four = commands("--unroll", "4", "--phase2-seconds", "100")
    assert _set(four["p2"], "max_steps") == str(10 * math.floor(100.0 / (quality.EPOCH_COSTS[("vpt", 3)] * 4 / 3)))
    assert all(_set(c, "max_steps") == "40" and _set(c, "patience") == "2"
               for c in commands("--max-steps", "40", "--patience", "2").values())
    (tmp_path / "other.toml").write_text("epochs = 1\n")
    with pytest.raises(StudyError, match="--max-steps"):
        commands("--config", str(tmp_path / "other.toml"))
    assert _set(commands("--config", str(tmp_path / "other.toml"), "--max-steps", "30")["p1"], "max_steps") == "30"
