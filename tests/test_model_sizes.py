"""Sizes a user controls are estimated before anything is allocated (issue 36): ``model_size`` equals the built
model's counts for every architecture (one or two keys large: the interpolation is exact), and a model that
cannot fit is refused with one line naming the key and the estimate, by ``build_model`` and by training
(with the optimiser's, the members' and Levenberg–Marquardt's own memory), before any model is built."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vpintegrator import VPIntegratorError, resources
from vpintegrator.cli.train import main
from vpintegrator.models import build_model, count_parameters, model_size
from vpintegrator.training import fit

pytestmark = pytest.mark.usefixtures("one_thread")

GIB = 2**30

# moderate sizes (built in the test), one or two keys above PROBE_MAX = 16, odd and even values
CASES = [
    ("vpff", dict(dim=3, n_blocks=41)), ("vpff", dict(dim=21, n_linear=17, n_blocks=2)),
    ("vpt", dict(dim=3, n_blocks=17, L=19)), ("vpt", dict(dim=19, seq_len=23, n_blocks=1, L=1)),
    ("st", dict(dim=22, n_blocks=20)), ("st", dict(dim=3, n_heads=3, transformer_dim=27)),
    ("st", dict(dim=3, transformer_dim=25)),
    ("la_sympnet", dict(dim=4, nhidden=20, depth=3)), ("la_sympnet", dict(dim=20, depth=2)),
    ("g_sympnet", dict(dim=4, n_layers=20, upscaling_dimension=30)), ("g_sympnet", dict(dim=22)),
    ("symplectic_transformer", dict(dim=4, seq_len=20, n_sympnet=19)), ("symplectic_transformer", dict(dim=22)),
    ("lpnet", dict(dim=3, n_layers=25, width=33)), ("lp_transformer", dict(dim=3, n_layers=20, width=21, seq_len=2, L=1)),
    ("gru", dict(dim=2, width=19, layers=17)), ("gru", dict(dim=21, depth=18)),
    ("lru", dict(dim=3, width=18, state=21)), ("lru", dict(dim=2, layers=17, depth=20)),
]


@pytest.mark.parametrize("name, config", CASES, ids=[f"{n}-{'-'.join(map(str, c.values()))}" for n, c in CASES])
def test_the_estimate_equals_the_built_model(name, config):
    size = model_size(name, **config)
    model = build_model(name, **config)
    tensors = list(model.parameters()) + list(model.buffers())
    assert size.numel == sum(t.numel() for t in tensors)
    assert size.objects == len(list(model.modules())) + len(tensors)
    assert set(size.large) == {k for k, v in config.items() if v > 16}


def test_small_models_are_not_probed():
    assert model_size("vpt", dim=3) is None and model_size("vpff", dim=3, n_blocks=16) is None
    assert count_parameters(build_model("vpt", dim=3)) == 162


HUGE = [("vpff", "n_blocks"), ("vpff", "n_linear"), ("vpt", "n_blocks"), ("vpt", "L"), ("vpt", "n_linear"),
        ("st", "n_blocks"), ("st", "L"), ("st", "transformer_dim"), ("la_sympnet", "nhidden"),
        ("g_sympnet", "n_layers"), ("g_sympnet", "upscaling_dimension"), ("symplectic_transformer", "n_sympnet"),
        ("symplectic_transformer", "L"), ("lpnet", "n_layers"), ("lpnet", "width"), ("lp_transformer", "n_layers"),
        ("lp_transformer", "width"), ("lp_transformer", "L"), ("gru", "width"), ("gru", "layers"), ("lru", "state"),
        ("lru", "width")]


@pytest.mark.parametrize("name, key", HUGE, ids=[f"{n}-{k}" for n, k in HUGE])
def test_build_model_refuses_a_huge_size_in_one_line(name, key, monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: 8 * GIB)
    dim = 4 if "symp" in name else 3
    with pytest.raises(VPIntegratorError) as info:
        build_model(name, dim=dim, **{key: 10**9})
    text = str(info.value)
    assert "\n" not in text and f"{key} = 1000000000" in text and "needs about" in text and "8.0 GiB" in text
    assert f"give a smaller {key}" in text


def _cfg(tiny_data, tmp_path, **kw):
    return dict(data=[tiny_data], model={"name": "vpff", "n_blocks": 2000}, epochs=1, batch_size=64,
                dtype="float64", out=str(tmp_path / "r")) | kw


def test_training_counts_the_optimizer_the_members_and_lm(tiny_data, tmp_path, monkeypatch):
    """vpff with 2000 blocks: 5.58e5 numbers (4.5 MB in float64). Adam trains it in 8 GiB; so does an
    ensemble of 3; Levenberg–Marquardt's normal matrix ((5.58e5)² · 8 B = 2.3 TiB) is refused before the
    model is built, and so is a 3000-member ensemble (7 copies · 3000 · 4.5 MB = 87 GiB)."""
    import vpintegrator.training.plan as setup

    monkeypatch.setattr(resources, "available_memory", lambda: 8 * GIB)
    built = []
    real = setup.new_model
    monkeypatch.setattr(setup, "new_model", lambda *a, **k: built.append(1) or real(*a, **k))
    with pytest.raises(VPIntegratorError, match=r"training model 'vpff' with model.n_blocks = 2000 \(5.58e\+05 "
                                                r"parameters, float64, optimizer lm\) needs about 2.3 TiB"):
        fit(_cfg(tiny_data, tmp_path, optimizer="lm"))
    with pytest.raises(VPIntegratorError, match=r"3000 members, float64, optimizer adam\) needs about"):
        fit(_cfg(tiny_data, tmp_path, ensemble=3000))
    assert not built and not (tmp_path / "r").exists()
    setup.check_training_memory(setup.build_plan(_cfg(tiny_data, tmp_path, ensemble=3)), 3, 3)


def test_vp_train_refuses_before_building(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: 8 * GIB)
    res = CliRunner().invoke(main, ["--data", tiny_data, "--model", "vpt", "--epochs", "1", "--set",
                                    "model.n_blocks=100000000", "--out", str(tmp_path / "r")])
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert res.exit_code == 1 and len(errors) == 1 and "Traceback" not in res.output, res.output
    assert "model.n_blocks = 100000000" in errors[0] and "needs about" in errors[0] and "8.0 GiB" in errors[0]
    assert not (tmp_path / "r").exists()


def test_validation_rollout_steps_are_estimated(tiny_data, tmp_path, monkeypatch):
    """``val_rollout_steps`` (the validation rollouts' length, continued beyond the data by the reference
    integrator) is refused before the data is continued when its states cannot fit."""
    monkeypatch.setattr(resources, "available_memory", lambda: 8 * GIB)
    with pytest.raises(VPIntegratorError, match=r"validation rollouts of val_rollout_steps = 1000000000000 steps "
                                                r"from \d+ trajectories needs about .* give a smaller val_rollout_steps"):
        fit(_cfg(tiny_data, tmp_path, model={"name": "vpff"}, monitor="val_rollout", val_rollout_steps=10**12))
    assert not (tmp_path / "r").exists()
