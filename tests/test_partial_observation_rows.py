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


def test_the_symplectic_transformer_is_a_default_row_with_its_coupling_measured():
    """Issue 55 item 2 names GML's symplectic transformer among the multi-step models on observations: it is a
    default approach (its tutorial's L = 4, n_sympnet = 2; the VPT's start), an attention model (coupling
    measured), not ablated (``mean_attention`` is the VPT's)."""
    from vpintegrator.studies.partial_observation import ABLATED, APPROACHES, ATTENTION, DEFAULTS, QUICK, TRAINING

    assert APPROACHES["sympt"] == {"name": "symplectic_transformer", "L": 4, "n_sympnet": 2}
    assert TRAINING["sympt"] == TRAINING["vpt"]
    assert "sympt" in ATTENTION and "sympt" not in ABLATED
    assert "sympt" in DEFAULTS["approaches"] and "sympt" not in QUICK["approaches"]


@pytest.mark.slow
def test_symplectic_transformer_rows_from_the_study(tmp_path):
    """From the study's command: a trained symplectic transformer on observed q (T = 2), its coupling measured
    by the same Jacobian as the VPT's, the model recording the observation it was trained on."""
    import torch

    from vpintegrator.models import load_model
    from vpintegrator.studies.driver import main
    from vpintegrator.studies.partial_observation import STUDY
    from vpintegrator.testing import attention_coupling

    out = tmp_path / "po"
    assert main(STUDY, ["--out", str(out), "--set", "systems=coupled_oscillator", "--set", "windows=2",
                        "--set", "approaches=sympt", "--seeds", "0", "--set", "n_train=12", "--set", "n_test=5",
                        "--set", "budget_seconds=0.5", "--set", "patience=1", "--jobs", "1", "-q"]) == 0
    rows = {r["label"]: r for r in json.loads((out / "partial_observation.json").read_text())["rows"]}
    assert "sympt_T2" in rows and not any(label.startswith("sympt_T2+") for label in rows)
    model = load_model(out / "runs" / "coupled_oscillator" / "sympt_T2_seed0")
    assert type(model).__name__ == "SymplecticTransformer" and model.seq_len == 2 and model.dim == 2
    assert model.trained_on["observation"]["spec"] == "q"
    x = torch.randn(3, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert rows["sympt_T2"]["coupling"] > 0 and attention_coupling(model, x).median > 0


@pytest.mark.parametrize("name", ["default", "toda_default", "toda_default_steps", "plateau", "toda_plateau"])
def test_table_only_draws_a_shipped_results_file_into_a_new_directory(tmp_path, name):
    """``--table-only --results FILE`` draws the tables of a shipped results file (no run directory needed):
    the same rows as the documentation page; an OUT holding a run of the study is refused in one line and left
    as it was."""
    from pathlib import Path

    from vpintegrator.studies.driver import main
    from vpintegrator.studies.partial_observation import STUDY

    root = Path(__file__).resolve().parents[1]
    from vpintegrator._shipped import results_files

    source = results_files(archived=True).get(f"partial_observation/{name}")
    if source is None or not (root / "docs" / "data").is_dir():
        pytest.skip("repository files (not in the wheel)")
    out = tmp_path / "drawn"
    assert main(STUDY, ["--out", str(out), "--table-only", "--results", str(source), "-q"]) == 0
    drawn = (out / "results.md").read_text()
    page = (root / "docs" / "partial_observation.md").read_text()
    rows = [line for line in drawn.splitlines() if line.startswith("| ") and not line.startswith("| approach")]
    assert rows and [line for line in rows if line not in page] == []
    assert (out / "partial_observation_plateau.png").is_file()
    # a run directory of the study is never drawn over
    run = tmp_path / "run"
    run.mkdir()
    (run / "partial_observation.json").write_text('{"rows": []}')
    assert main(STUDY, ["--out", str(run), "--table-only", "--results", str(source), "-q"]) == 2
    assert sorted(p.name for p in run.iterdir()) == ["partial_observation.json"]
    # another study's results file is one line, and nothing is written
    other = root / "docs" / "data" / "reduction" / "default.json"
    if other.is_file():
        assert main(STUDY, ["--out", str(tmp_path / "other"), "--table-only", "--results", str(other), "-q"]) == 2
        assert not (tmp_path / "other").exists()
