"""The VPT that sees the order of its window (issue 55): ``positional = "feedforward"`` gives every window
position its own VPFF, ``positional = "mixing"`` puts a learned unit-triangular linear shear across the window's
positions before each unit's attention. The window map stays volume preserving on R^{T*dim} (det J = 1, by a Jacobian of the whole
map, not by the layers' construction), it is no longer equivariant under reordering the window's states (the plain
VPT is: ``tests/test_observed_windows.py``), and the option round-trips through configs and model files and
trains and rolls out from the CLI on observed windows."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import build_model, load_model, save_model
from vpintegrator.models.volume import VolumePreservingTransformer
from vpintegrator.rollout.numba_model import pack

from test_observation import co_file  # noqa: F401  (24 coupled-oscillator trajectories at h = 0.2: a fixture)


def _randomised(model: torch.nn.Module, seed: int = 1, scale: float = 0.5) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    model = model.double()
    for p in model.parameters():
        p.data.normal_(0.0, scale, generator=g)
    return model


OPTIONS = ("feedforward", "mixing")


def _positional(dim: int, T: int, option: str = "feedforward", L: int = 2) -> VolumePreservingTransformer:
    return VolumePreservingTransformer(dim, T, n_blocks=2, L=L, positional=option)


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("dim, T", [(2, 2), (2, 4), (3, 3)])
def test_the_window_map_has_det_one(dim, T, option):
    model = _randomised(_positional(dim, T, option))
    x = torch.randn(6, T, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for w in x:
        J = torch.func.jacrev(lambda v: model(v.reshape(T, dim)).reshape(-1))(w.reshape(-1))
        assert J.shape == (T * dim, T * dim)
        assert abs(float(torch.linalg.det(J.detach())) - 1.0) < 1e-10
    # and not the identity: the positions' maps differ from each other and from the plain VPT's
    with torch.no_grad():
        assert float((model(x) - x).abs().max()) > 1e-2


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("T", [2, 4])
def test_it_tells_the_order_of_its_window(T, option):
    x = torch.randn(5, T, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    model = _randomised(_positional(2, T, option))
    with torch.no_grad():
        y = model(x)
        gap = float((model(x.flip(1)) - y.flip(1)).abs().max())
    assert gap > 1e-2 * float(y.abs().max())


def test_one_feed_forward_per_position_and_the_planes_path_agrees_with_rows():
    model = _randomised(_positional(2, 3))
    ff = model.blocks[0].feedforward
    assert len(ff.positions) == 3
    x = torch.randn(4, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        by_hand = torch.stack([ff.positions[t](x[:, t:t + 1])[:, 0] for t in range(3)], dim=1)  # state by state
        torch.testing.assert_close(ff(x), by_hand, rtol=0, atol=0)
        torch.testing.assert_close(ff._forward_planes(x.permute(2, 1, 0).contiguous()).permute(2, 1, 0), by_hand,
                                   rtol=1e-15, atol=1e-15)
        # the plain VPT with the same attention and position 0's feed-forward everywhere: the positional model
        # with every position's weights set to position 0's must equal it
        plain = VolumePreservingTransformer(2, 3, n_blocks=2, L=2).double()
        tied = _positional(2, 3).double()
        for pb, tb, b in zip(plain.blocks, tied.blocks, model.blocks):
            pb.attention.load_state_dict(b.attention.state_dict())
            tb.attention.load_state_dict(b.attention.state_dict())
            pb.feedforward.load_state_dict(b.feedforward.positions[0].state_dict())
            for f in tb.feedforward.positions:
                f.load_state_dict(b.feedforward.positions[0].state_dict())
        torch.testing.assert_close(tied(x), plain(x), rtol=1e-13, atol=1e-13)


def test_the_mixing_is_the_shear_written_out_and_starts_as_the_plain_vpt():
    """x_t + sum over s < t (units 1, 3) or s > t (units 2, 4) of W_ts x_s, against a loop over positions; with
    the mixing at its initial zero the model is the plain VPT of the same other weights."""
    model = _positional(2, 3, "mixing", L=3).double()
    plain = VolumePreservingTransformer(2, 3, n_blocks=2, L=3).double()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if ".mixing." not in k})
    x = torch.randn(4, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(model(x), plain(x), rtol=0, atol=0)
        _randomised(model)
        for k, block in enumerate(model.blocks):
            mix = block.mixing
            W = mix.weight
            by_hand = x.clone()
            i = 0
            pairs = [(t, s) for t in range(3) for s in range(t)]  # torch.tril_indices order: row by row
            for t, s in pairs:
                a, b = (t, s) if k % 2 == 0 else (s, t)
                by_hand[:, a] += x[:, b] @ W[i].T
                i += 1
            torch.testing.assert_close(mix(x), by_hand, rtol=1e-14, atol=1e-14)
            torch.testing.assert_close(mix._forward_planes(x.permute(2, 1, 0).contiguous()).permute(2, 1, 0), by_hand,
                                       rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("option", OPTIONS)
def test_config_and_model_file_round_trip(tmp_path, option):
    model = _randomised(build_model("vpt", dim=2, seq_len=3, n_blocks=1, L=2, positional=option))
    assert model.config["positional"] == option
    assert model.preserves == ("volume",)
    x = torch.randn(5, 3, 2, dtype=torch.float64)
    path = save_model(model, tmp_path / "pos.pt")
    loaded = load_model(path)
    assert loaded.config == model.config
    assert set(loaded.state_dict()) == set(model.state_dict())
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
        again = build_model(**model.config).double()
        again.load_state_dict(model.state_dict())
        assert torch.equal(again(x), model(x))
    plain = build_model("vpt", dim=2, seq_len=3)
    assert plain.config["positional"] == "none"
    assert not any("positions" in k for k in plain.state_dict())  # the default keeps the old parameter names


def test_bad_values_are_one_line_errors():
    with pytest.raises(VPIntegratorError, match="positional: expected one of 'none', 'feedforward', 'mixing', got 'time'") as e:
        build_model("vpt", dim=2, seq_len=2, positional="time")
    assert "\n" not in str(e.value)
    for option in OPTIONS:
        with pytest.raises(VPIntegratorError, match=f"positional: '{option}' has no symmetric"):
            build_model("vpt", dim=2, seq_len=2, positional=option, symmetric=True)


def test_no_compiled_kernel_so_rollouts_run_the_torch_model():
    """The kernel's packer walks window chains in sequence; the per-position part is side by side, so packing
    must give up (None: the rollout uses torch) rather than pack the positions' VPFFs one after the other. The
    mixing shear has its op (``OP_POSITION_MIXING``; held to torch in tests/test_recurrent_runner.py)."""
    pytest.importorskip("numba")
    assert pack(_randomised(VolumePreservingTransformer(2, 3, n_blocks=2, L=2))) is not None  # the plain VPT packs
    assert pack(_randomised(_positional(2, 3, "feedforward"))) is None
    assert pack(_randomised(_positional(2, 3, "mixing"))) is not None


@pytest.mark.parametrize("option", OPTIONS)
def test_trains_and_rolls_out_from_the_cli_on_observed_q(co_file, tmp_path, option):  # noqa: F811
    from vpintegrator.cli.rollout import main as rollout
    from vpintegrator.cli.train import main as train
    from vpintegrator.data import read_rollout

    cfg = tmp_path / "pos.toml"
    cfg.write_text('data = ["%s"]\nobserve = "q"\nepochs = 2\nbatch_size = 64\ndtype = "float64"\n'
                   '[model]\nname = "vpt"\nseq_len = 2\nn_blocks = 1\nL = 1\n' % co_file)
    run = tmp_path / "run"
    res = CliRunner().invoke(train, [str(cfg), "--set", f'model.positional="{option}"', "--out", str(run), "--quiet"])
    assert res.exit_code == 0, res.output
    model = load_model(run)
    assert model.config["positional"] == option and model.dim == 2
    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout, ["--data", str(co_file), "--model", f"pvpt={run}", "--fit-on-data",
                                       "--n-traj", "3", "--t-end", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ro = read_rollout(out)
    assert "pvpt" in ro.methods


def test_a_gml_file_is_read_as_the_plain_vpt_and_refuses_positional(tmp_path):
    """GML's VPT has no positional part: its files give ``positional = "none"``, and asking for another is the
    reader's one-line contradiction, not a model whose per-position weights were never loaded."""
    from vpintegrator.models.gml import read_gml
    from test_gml import _write_gml

    path = _write_gml(build_model("vpt", dim=2, seq_len=3, n_blocks=1, L=2).double(), tmp_path / "vpt.h5")
    assert read_gml(path).config["positional"] == "none"
    with pytest.raises(VPIntegratorError, match="config positional = 'feedforward' contradicts group L1") as e:
        read_gml(path, positional="feedforward")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("option", OPTIONS)
def test_the_attention_ablations_keep_the_positional_parts(option):
    """``mean_attention`` on one window: the constant Λ̄ is the attention's own Λ at that window (C taken on
    what the attention sees, after the unit's mixing), so the ablated model equals the model there;
    ``without_attention`` keeps the positional parts, so it still tells the order of the window."""
    from vpintegrator.models import mean_attention, without_attention

    model = _randomised(_positional(2, 3, option), scale=0.3)
    w = torch.randn(1, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        torch.testing.assert_close(mean_attention(model, w)(w), model(w), rtol=1e-12, atol=1e-12)
        ablated = without_attention(model)
        x = torch.randn(5, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        y = ablated(x)
        assert float((ablated(x.flip(1)) - y.flip(1)).abs().max()) > 1e-2 * float(y.abs().max())
