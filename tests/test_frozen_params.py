"""Parameters with ``requires_grad=False`` never change in training, whatever the optimiser: Levenberg–Marquardt
(single run and seed ensemble) and Adam alike (issue 32, item 6); and ``fit`` of a user's own module writes a
full run directory (issue 32, item 6)."""

from __future__ import annotations

import json

import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.data.windows import load_trajectories
from vpintegrator.models import build_model, load_model, without_attention
from vpintegrator.models import registry
from vpintegrator.models.volume import VolumePreservingTransformer
from vpintegrator.training import fit

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}
LM = dict(epochs=2, batch_size=32, dtype="float64", device="cpu", seed=5, optimizer="lm", lm_windows=48,
          lm_iters_per_epoch=3, lm_resample_every=2, init_scale=0.1)
FROZEN = "blocks.0.feedforward.layers.1"  # the first feed-forward layer with a bias


def _frozen(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in model.named_parameters() if not p.requires_grad}


def _user_frozen(seed: int = 3) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model("vpt", dim=3, seq_len=2, L=1, n_blocks=1).double()
    for p in model.get_submodule(FROZEN).parameters():
        with torch.no_grad():
            p.normal_()  # nonzero: a frozen layer of trained weights
        p.requires_grad_(False)
    return model


class FrozenFirstLayerVPT(VolumePreservingTransformer):
    """A registered VPT whose first feed-forward layer is frozen (so that an ensemble can build it by name)."""

    model_name = "test_frozen_vpt"

    def __init__(self, dim: int, seq_len: int = 2, L: int = 1, n_blocks: int = 1) -> None:
        super().__init__(dim, seq_len=seq_len, L=L, n_blocks=n_blocks)
        for p in self.get_submodule(FROZEN).parameters():
            with torch.no_grad():
                p.uniform_(-1.0, 1.0)
            p.requires_grad_(False)


@pytest.fixture
def frozen_vpt():
    registry.register_model(FrozenFirstLayerVPT)
    yield "test_frozen_vpt"
    registry._MODELS.pop("test_frozen_vpt", None)
    registry._PAPER_CONFIGS.pop("test_frozen_vpt", None)


@pytest.mark.parametrize("which", ["without_attention", "user_frozen_layer"])
def test_lm_single_run_leaves_frozen_parameters_bit_identical(tiny_data, which):
    traj = load_trajectories([tiny_data])
    if which == "without_attention":
        torch.manual_seed(1)
        model = without_attention(build_model("vpt", dim=3, seq_len=2, L=1, n_blocks=1).double())
    else:
        model = _user_frozen()
    before = _frozen(model)
    trainable = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
    assert before
    result = fit(model=model, train=traj, **LM)
    after = _frozen(result.model)
    assert after.keys() == before.keys()
    for k in before:
        assert torch.equal(after[k], before[k]), k
    moved = [k for k, p in result.model.named_parameters() if p.requires_grad and not torch.equal(p, trainable[k])]
    assert moved, "LM took no step: the test would not see frozen weights move"


def _initial(name: str, member_seed: int, **kw) -> torch.nn.Module:
    """The model ``fit(seed=member_seed)`` initialises (init_scale applied)."""
    from vpintegrator.training import TrainConfig
    from vpintegrator.training.plan import build_plan, new_model

    plan = build_plan(TrainConfig.from_dict(dict(data=["x.h5"], model={"name": name}, **kw)))
    return new_model(plan.model, plan.optim, member_seed, 3, "the test", "cpu", torch.float64)[0]


def test_lm_ensemble_leaves_frozen_parameters_bit_identical(tiny_data, tmp_path, frozen_vpt):
    ens = fit(model={"name": frozen_vpt}, train=load_trajectories([tiny_data]), ensemble=2,
              out=str(tmp_path / "ens"), **LM)
    for seed, member in zip((5, 6), ens.members):
        init = _initial(frozen_vpt, seed, **LM)
        expected = _frozen(init)
        got = {k: v for k, v in member.model.named_parameters() if k in expected}
        for k in expected:
            assert torch.equal(got[k].detach(), expected[k]), (seed, k)
        assert not torch.equal(member.model.get_submodule("blocks.0.feedforward.layers.2").weight,
                               init.get_submodule("blocks.0.feedforward.layers.2").weight)


def test_lm_ensemble_class_skips_frozen_parameters(tiny_data):
    """:class:`EnsembleLM` itself: the flat vector covers the trainable parameters only, and ``without_attention``'s
    zeroed weights stay exactly zero in every member."""
    from torch.func import stack_module_state

    from vpintegrator.data import windows
    from vpintegrator.training import TrainConfig
    from vpintegrator.training.ensemble_lm import EnsembleLM
    from vpintegrator.training.plan import build_plan

    models = []
    for s in (1, 2):
        torch.manual_seed(s)
        models.append(without_attention(build_model("vpt", dim=3, seq_len=2, L=1, n_blocks=1).double()))
    params, buffers = stack_module_state(models)
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    y = windows.states_tensor(load_trajectories([tiny_data]), "float64")
    ds = windows.WindowDataset(y, 2, 2)
    lm_plan = build_plan(TrainConfig.from_dict(dict(data=[tiny_data], model=MODEL, **LM))).optim.lm
    lm = EnsembleLM(models[0], params, buffers, 0, ds, [torch.Generator().manual_seed(s) for s in (1, 2)], lm_plan)
    n_trainable = sum(p.numel() for p in models[0].parameters() if p.requires_grad)
    assert lm.theta().shape == (2, n_trainable)
    for _ in range(3):
        lm.step()
    assert torch.equal(params["blocks.0.attention.weight"], torch.zeros(2, 3, dtype=torch.float64))
    assert not torch.equal(params["blocks.0.feedforward.layers.0.weight"],
                           torch.stack([m.blocks[0].feedforward.layers[0].weight for m in models]))


def test_adam_ensemble_leaves_frozen_parameters_bit_identical(tiny_data, frozen_vpt):
    adam = LM | dict(optimizer="adam", lr=1e-2)
    ens = fit(model={"name": frozen_vpt}, train=load_trajectories([tiny_data]), ensemble=2, **adam)
    for seed, member in zip((5, 6), ens.members):
        expected = _frozen(_initial(frozen_vpt, seed, **adam))
        got = dict(member.model.named_parameters())
        for k in expected:
            assert torch.equal(got[k].detach(), expected[k]), (seed, k)


class Shift(torch.nn.Module):
    """A user module (not from the registry): x ↦ x + W x + b per state."""

    dim, seq_len = 3, 2

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        torch.nn.init.zeros_(self.lin.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lin(x)


def test_fit_writes_a_run_directory_for_a_user_module(tiny_data, tmp_path):
    traj = load_trajectories([tiny_data])
    module = Shift()
    result = fit(model=module, train=traj, out=str(tmp_path / "run"),
                 **dict(epochs=3, batch_size=32, lr=1e-2, dtype="float64", device="cpu", seed=5))
    run = tmp_path / "run"
    assert result.run_dir == run.resolve()
    assert {"config.toml", "log.csv", "summary.json", "best.pt", "last.pt"} <= {p.name for p in run.iterdir()}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["model"] == "Shift" and summary["epochs"] == 3
    # the weights load into the user's own module; load_model names the class and says how
    fresh = Shift().double()
    assert load_model(run / "last.pt", into=fresh) is fresh
    for k, v in module.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    best = torch.load(run / "best.pt", weights_only=True)
    assert best["config"]["module"].endswith("Shift") and best["epoch"] == summary["best_epoch"]
    load_model(run / "best.pt", into=Shift().double())
    with pytest.raises(VPIntegratorError, match=r"Shift.*load_model\(.*into=") as info:
        load_model(run / "best.pt")
    assert "\n" not in str(info.value)
