"""``init_from`` fine-tunes at ``finetune_lr`` (default lr_min), not at the from-scratch ``lr`` (issue 46,
item 2): one epoch of the shipped config (batches of 256 windows: 20 steps) from ``pretrained:rigid_body_vpt``
on its own kind of data keeps the loss near where it starts, one warning line names the key, and the old
behaviour (the config's lr = 0.01) is what ``finetune_lr = 0.01`` still gives: the loss blows up."""

from __future__ import annotations

import logging

import pytest
import torch

import vpintegrator as vp
from vpintegrator.errors import VPIntegratorError
from vpintegrator.training import TrainConfig


@pytest.fixture(scope="module")
def paper_data(tmp_path_factory):
    """The shipped VPT's kind of data: the paper's initial conditions by implicit midpoint at h = 0.2 (fewer and
    shorter)."""
    path = tmp_path_factory.mktemp("finetune") / "im.h5"
    spec = vp.load_spec("rigid_body_paper", method="implicit_midpoint", n_traj=200, t_end=8.0)
    vp.generate(spec, out=path)
    return str(path)


def _fit(data, out, **overrides):
    torch.set_num_threads(1)
    config = TrainConfig.from_toml("rigid_body_vpt", data=[data], init_from="pretrained:rigid_body_vpt", epochs=1,
                                   out=str(out), dtype="float64", device="cpu", batch_size=256, **overrides)
    return vp.fit(config, progress=False)


def _loss(result) -> float:
    """The validation loss after the epoch (the training loss is averaged over the epoch's steps)."""
    return float(result.history[-1]["val_loss"])


def test_default_fine_tunes_at_lr_min_with_one_warning_line(paper_data, tmp_path, caplog):
    start = _loss(_fit(paper_data, tmp_path / "start", finetune_lr=1e-12))  # the pretrained model's own loss
    with caplog.at_level(logging.WARNING, logger="vpintegrator"):
        result = _fit(paper_data, tmp_path / "default")
    assert _loss(result) <= 10 * start, (start, _loss(result))
    warnings = [r.getMessage() for r in caplog.records if "init_from" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "finetune_lr" in warnings[0] and "lr = 1e-06" in warnings[0] and "lr = 0.01" in warnings[0], warnings
    assert result.history[-1]["lr"] == pytest.approx(1e-6)  # constant: lr_min to lr_min
    blown = _loss(_fit(paper_data, tmp_path / "scratch_rate", finetune_lr=1e-2))  # what lr = 0.01 did
    assert blown > 100 * start, (start, blown)


def test_an_explicit_finetune_lr_is_used_without_warning(paper_data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="vpintegrator"):
        result = _fit(paper_data, tmp_path / "explicit", finetune_lr=1e-7, lr_min=1e-8)
    assert not [r for r in caplog.records if "init_from" in r.getMessage()]
    assert result.history[-1]["lr"] < 1e-7  # the schedule runs from finetune_lr towards lr_min


def test_learning_rates_rule():
    base = dict(data=["x.h5"], model={"name": "vpt"}, epochs=1)
    assert TrainConfig(**base, lr=1e-2, lr_min=1e-6).learning_rates() == (1e-2, 1e-6)
    assert TrainConfig(**base, lr=1e-2, lr_min=1e-6, init_from="a.pt").learning_rates() == (1e-6, 1e-6)
    assert TrainConfig(**base, lr=1e-2, lr_min=1e-6, init_from="a.pt", finetune_lr=1e-4).learning_rates() == (1e-4, 1e-6)
    assert TrainConfig(**base, lr=1e-2, lr_min=1e-6, init_from="a.pt", finetune_lr=1e-7).learning_rates() == (1e-7, 1e-7)
    cosine = TrainConfig(**base, lr=1e-2, lr_min=0.0, scheduler="cosine", init_from="a.pt")
    assert cosine.learning_rates() == (pytest.approx(1e-6), 0.0)
    lm = TrainConfig(**base, optimizer="lm", init_from="a.pt")
    assert not lm.fine_tunes and lm.learning_rates() == (lm.lr, lm.lr_min)
    with pytest.raises(VPIntegratorError, match="finetune_lr"):
        TrainConfig(**base, init_from="a.pt", finetune_lr=0.0)
