"""The partial-observation study's attention rows: ``vpt_mix`` (the VPT with ``positional = "mixing"``) is
trained with the VPT's recipe, its coupling measured and its ablations rows of its own name."""

from __future__ import annotations

import json

import pytest


def test_vpt_mix_is_the_vpt_with_position_mixing_and_the_vpts_start():
    from vpintegrator.studies.partial_observation import ABLATED, APPROACHES, ATTENTION, DEFAULTS, TRAINING

    assert APPROACHES["vpt_mix"] == {**APPROACHES["vpt"], "positional": "mixing"}
    assert TRAINING["vpt_mix"] == TRAINING["vpt"] == {"init_scale": 0.3}
    assert "vpt_mix" in ATTENTION and "vpt_mix" in ABLATED and "vpt_mix" in DEFAULTS["approaches"]


@pytest.mark.slow
def test_vpt_mix_rows_from_the_study(tmp_path):
    from vpintegrator.models import load_model
    from vpintegrator.studies.driver import main
    from vpintegrator.studies.partial_observation import STUDY

    out = tmp_path / "po"
    assert main(STUDY, ["--out", str(out), "--set", "systems=coupled_oscillator", "--set", "windows=2",
                        "--set", "approaches=vpt_mix", "--seeds", "0", "--set", "n_train=12", "--set", "n_test=5",
                        "--set", "budget_seconds=0.5", "--set", "patience=1", "--jobs", "1", "-q"]) == 0
    rows = {r["label"]: r for r in json.loads((out / "partial_observation.json").read_text())["rows"]}
    assert {"vpt_mix_T2", "vpt_mix_T2+noattn", "vpt_mix_T2+meanattn"} <= set(rows)
    assert rows["vpt_mix_T2+noattn"]["approach"] == "vpt_mix+noattn"
    assert rows["vpt_mix_T2+meanattn"]["approach"] == "vpt_mix+meanattn"
    assert rows["vpt_mix_T2"]["coupling"] is not None
    run = out / "runs" / "coupled_oscillator" / "vpt_mix_T2_seed0"
    assert any(type(m).__name__ == "_PositionMixing" for m in load_model(run).modules())
