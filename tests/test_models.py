"""Models: parameter counts, registry, volume preservation, permutation behaviour, dtypes, model files."""

from __future__ import annotations

import pytest
import torch
from ulp import assert_ulp_close

import vpintegrator.models as models_module
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import (
    StandardTransformerIntegrator,
    VolumePreservingFeedForward,
    VolumePreservingTransformer,
    build_model,
    count_parameters,
    list_models,
    list_pretrained,
    load_checkpoint,
    load_model,
    save_model,
)
from vpintegrator.nn import VolumePreservingLowerLayer, VolumePreservingUpperLayer
from vpintegrator.testing import assert_volume_preserving, audit_volume

DET64 = 1e-10
PAPER = {
    "vpff": dict(dim=3, n_blocks=6),
    "vpt": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpt_arbitrary": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, skew_sym=False),
    "st": dict(dim=3, seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False),
}
PAPER_COUNTS = {"vpff": 135, "vpt": 162, "vpt_arbitrary": 180, "st": 189}


def paper_model(key: str, dtype=torch.float64, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(key.split("_")[0], **PAPER[key]).to(dtype)


def windows(n, seq, dim, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, seq, dim, generator=gen, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("key", PAPER_COUNTS)
def test_paper_parameter_counts(key):
    assert count_parameters(paper_model(key)) == PAPER_COUNTS[key]


@pytest.mark.parametrize("dim, n_blocks, n_linear", [(2, 1, 1), (3, 6, 1), (4, 2, 3), (5, 1, 2)])
def test_vpff_parameter_formula(dim, n_blocks, n_linear):
    m = dim * (dim - 1) // 2
    expected = n_blocks * ((2 * n_linear + 2) * m + 3 * dim) + dim * dim
    assert count_parameters(VolumePreservingFeedForward(dim, n_blocks, n_linear)) == expected


def test_vpff_layer_order_is_gml():
    net = VolumePreservingFeedForward(3, n_blocks=2, n_linear=2)
    kinds = [
        ("L" if isinstance(layer, VolumePreservingLowerLayer) else "U", layer.activation, layer.bias is not None)
        for layer in net.layers
    ]
    block = [
        ("L", "identity", False), ("U", "identity", False),  # the extra (n_linear − 1) linear pair
        ("L", "identity", False), ("U", "identity", True),
        ("L", "tanh", True), ("U", "tanh", True),
    ]
    assert kinds == block * 2 + [("L", "identity", False), ("U", "identity", True)]
    upper_first = VolumePreservingFeedForward(3, init_upper=True)
    assert isinstance(upper_first.layers[0], VolumePreservingUpperLayer)


def test_vpt_units_are_attention_then_full_vpff():
    vpt = paper_model("vpt")
    assert len(vpt.blocks) == 3
    for unit in vpt.blocks:
        assert unit.attention.skew_sym
        assert count_parameters(unit.feedforward) == 51  # 2 blocks · 21 + final linear pair 9


def test_registry_and_config_round_trip():
    assert list_models() == ["delay_mlp", "delay_vpff", "divfree", "g_sympnet", "g_sympnet_ctx", "gru", "hnn", "la_sympnet", "lp_transformer", "lphnn", "lpnet",
                             "lpnet_ctx", "lru", "node", "st",
                             "symplectic_transformer", "vpff", "vpff_ctx", "vpt"]
    for key in PAPER:
        model = paper_model(key)
        assert model.config["name"] == key.split("_")[0]
        rebuilt = build_model(**model.config)
        assert type(rebuilt) is type(model) and rebuilt.config == model.config
        assert (model.dim, model.seq_len, model.pred_window) == (
            3, PAPER[key].get("seq_len", 1), PAPER[key].get("seq_len", 1)
        )


@pytest.mark.parametrize("key", PAPER)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_shape_and_dtype(key, dtype):
    model = paper_model(key, dtype)
    x = windows(5, model.seq_len, 3, dtype)
    y = model(x)
    assert y.shape == (5, model.pred_window, 3) and y.dtype == dtype


@pytest.mark.parametrize("key", PAPER)
def test_float32_agrees_with_float64(key):
    m64 = paper_model(key)
    m32 = build_model(**m64.config)
    m32.load_state_dict({k: v.float() for k, v in m64.state_dict().items()})
    x = windows(64, m64.seq_len, 3)
    y64 = m64(x).detach()
    torch.testing.assert_close(m32(x.float()).double(), y64, rtol=1e-4, atol=1e-4 * (1 + float(y64.abs().max())))


def test_vpff_acts_on_each_state_independently():
    model = paper_model("vpff")
    x = windows(4, 5, 3)
    # the same layers on inputs of another shape (BLAS may pick another kernel): a few ulp
    assert_ulp_close(model(x).detach().numpy(), torch.cat([model(x[:, i : i + 1]) for i in range(5)], dim=1).detach().numpy(), ulps=16)


@pytest.mark.parametrize("dim, seq", [(2, 2), (3, 1), (3, 3), (3, 5), (4, 3), (5, 4)])
def test_vpff_is_volume_preserving(dim, seq):
    torch.manual_seed(dim + seq)
    model = VolumePreservingFeedForward(dim, n_blocks=3, n_linear=2).double()
    assert_volume_preserving(model, windows(32, seq, dim), atol=DET64)


@pytest.mark.parametrize("dim, seq", [(2, 2), (3, 3), (3, 5), (4, 3), (5, 4), (3, 7)])
def test_vpt_is_volume_preserving(dim, seq):
    # det J as the product of the layers' determinants, each at its actual input: the whole-map
    # determinant of a deep random VPT carries eps·cond(J) rounding (cond up to ~1e7, see
    # vpintegrator.testing), the per-layer ones do not
    torch.manual_seed(dim * seq)
    model = VolumePreservingTransformer(dim, seq, n_blocks=1, L=2).double()
    assert_volume_preserving(model, windows(32, seq, dim), atol=DET64, method="chain")


@pytest.mark.parametrize("dim, seq", [(3, 3), (4, 2), (3, 5)])
def test_one_unit_vpt_whole_map_determinant(dim, seq):
    torch.manual_seed(0)
    model = VolumePreservingTransformer(dim, seq).double()
    assert_volume_preserving(model, windows(32, seq, dim), atol=DET64, method="full")


def test_paper_vpt_is_volume_preserving():
    assert_volume_preserving(paper_model("vpt"), n=64, atol=DET64, method="chain")


def test_arbitrary_vpt_and_st_are_not_volume_preserving():
    for key in ("vpt_arbitrary", "st"):
        assert audit_volume(paper_model(key), n=32).median_error > 1e-3


@pytest.mark.parametrize("key, equivariant", [("vpt", True), ("st", True), ("vpff", True), ("vpt_arbitrary", False)])
def test_permutation_along_seq(key, equivariant):
    model = paper_model(key)
    x = windows(16, 3, 3)
    perm = torch.tensor([2, 0, 1])
    diff = (model(x[:, perm]) - model(x)[:, perm]).abs().max()
    assert (diff < 1e-12) == equivariant


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: build_model("symplectic_transfomer", dim=3),
         r"unknown model 'symplectic_transfomer' \(did you mean 'symplectic_transformer'\?\); valid names: delay_mlp, delay_vpff, divfree, g_sympnet, g_sympnet_ctx, gru, hnn, "
         "la_sympnet, lp_transformer, lphnn, lpnet, lpnet_ctx, lru, node, st, symplectic_transformer, vpff, vpff_ctx, vpt"),
        (lambda: build_model("vpt", seq_len=3), "missing required key 'dim'"),
        (lambda: build_model("vpt", dim=3, seq_len=3, n_layers=2), "unknown key 'n_layers'; valid keys: dim, seq_len"),
        (lambda: build_model("vpff", dim=3, activation="relu"), "activation: expected one of"),
        (lambda: build_model("vpt", dim=3, seq_len=0), "seq_len: expected an integer >= 1, got 0"),
        (lambda: build_model("st", dim=3, n_heads=2), "n_heads: must divide dim = 3"),
        (lambda: build_model("st", dim=3, form="x"), "form: expected one of gml, standard"),
        (lambda: build_model("vpt", dim=2.5, seq_len=3), "dim: expected an integer >= 1, got 2.5"),
        (lambda: build_model("vpt", dim=3, seq_len=3, skew_sym="false"), "skew_sym: expected true or false"),
        (lambda: build_model("st", dim=3, add_connection=1), "add_connection: expected true or false, got 1"),
        (lambda: build_model("vpff", dim=3, init_upper=None), "init_upper: expected true or false"),
    ],
)
def test_bad_config_is_a_clear_error(call, match):
    with pytest.raises(VPIntegratorError, match=match):
        call()


@pytest.mark.parametrize("key", ["vpt", "st"])
@pytest.mark.parametrize(
    "shape, match",
    [
        ((4, 3), r"expected input of shape \(batch, seq_len=3, dim=3\) or one window \(seq_len=3, dim=3\), got \(4, 3\)$"),
        ((9,), r"got \(9,\)"),
        ((1, 2, 3, 3), r"got \(1, 2, 3, 3\)"),
        ((2, 4, 3), r"got \(2, 4, 3\)"),
        ((2, 3, 4), r"got \(2, 3, 4\)"),
    ],
)
def test_wrong_input_shape_names_expected_and_got(key, shape, match):
    with pytest.raises(VPIntegratorError, match=match):
        paper_model(key, torch.float32)(torch.zeros(shape))


def test_wrong_input_dtype_is_a_clear_error():
    with pytest.raises(VPIntegratorError, match="input is torch.float64 .* parameters are torch.float32"):
        paper_model("vpt", torch.float32)(windows(2, 3, 3))


# ---------------------------------------------------------------- model files


@pytest.mark.parametrize("key", PAPER)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_save_load_round_trip(tmp_path, key, dtype):
    model = paper_model(key, dtype)
    path = save_model(model, tmp_path / "model.pt", extra={"epoch": 7})
    loaded = load_model(path)
    assert loaded.config == model.config
    assert next(loaded.parameters()).dtype == dtype
    assert (loaded.dim, loaded.seq_len, loaded.pred_window) == (model.dim, model.seq_len, model.pred_window)
    x = windows(8, model.seq_len, 3, dtype)
    assert torch.equal(loaded(x), model(x))
    payload = load_checkpoint(path)
    assert payload["format"] == "vpintegrator-model" and payload["version"] == 1 and payload["epoch"] == 7
    assert "vpintegrator_version" in payload


def test_round_trip_stiefel_and_standard_forms(tmp_path):
    for config in (dict(stiefel=True, n_heads=3), dict(form="standard", n_heads=3, add_connection=True)):
        torch.manual_seed(0)
        model = build_model("st", dim=3, **config)
        loaded = load_model(save_model(model, tmp_path / "st.pt", overwrite=True))
        x = windows(4, 3, 3, torch.float32)
        assert torch.equal(loaded(x), model(x))


def test_file_is_plain_weights(tmp_path):
    path = save_model(paper_model("vpt"), tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    assert set(payload) == {"format", "version", "config", "state_dict", "vpintegrator_version", "provenance"}


def test_run_directory_prefers_best_then_last(tmp_path):
    a, b = paper_model("vpt", seed=1), paper_model("vpt", seed=2)
    save_model(a, tmp_path / "last.pt")
    x = windows(2, 3, 3)
    assert torch.equal(load_model(tmp_path)(x), a(x))
    save_model(b, tmp_path / "best.pt")
    assert torch.equal(load_model(tmp_path)(x), b(x))
    (tmp_path / "empty").mkdir()
    with pytest.raises(VPIntegratorError, match="without best.pt or last.pt"):
        load_model(tmp_path / "empty")


def test_a_run_checkpoint_of_another_model_family_is_refused(tmp_path):
    """Issue 36: a run whose best.pt held another family's model was rolled out silently under the run's name."""
    (tmp_path / "config.toml").write_text('data = ["d.h5"]\n\n[model]\nname = "vpt"\n')
    save_model(paper_model("vpff", seed=1), tmp_path / "best.pt")
    with pytest.raises(VPIntegratorError, match=r"best.pt: holds a 'vpff' model, but the run's config.toml trained 'vpt'"):
        load_model(tmp_path)
    save_model(paper_model("vpt", seed=1), tmp_path / "best.pt", overwrite=True)
    assert load_model(tmp_path).config["name"] == "vpt"


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = save_model(paper_model("vpt", seed=1), tmp_path / "m.pt")
    before = path.read_bytes()

    def failing_save(obj, f):
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(KeyboardInterrupt):
        save_model(paper_model("vpt", seed=2), path, overwrite=True)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]


def test_save_rejects_reserved_extra_keys_and_foreign_modules(tmp_path):
    with pytest.raises(VPIntegratorError, match="extra key 'config' is reserved"):
        save_model(paper_model("vpt"), tmp_path / "m.pt", extra={"config": {}})
    with pytest.raises(VPIntegratorError, match="has no registry config"):
        save_model(torch.nn.Linear(3, 3), tmp_path / "m.pt")


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_model(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    with pytest.raises(VPIntegratorError, match="junk.pt: not a torch file"):
        load_model(junk)
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(VPIntegratorError, match="other.pt: not a vpintegrator model"):
        load_model(other)
    pickled = tmp_path / "pickled.pt"
    torch.save({"format": "vpintegrator-model", "obj": torch.nn.Linear(2, 2)}, pickled)
    with pytest.raises(VPIntegratorError, match="weights_only=True"):
        load_model(pickled)
    bad_config = tmp_path / "bad_config.pt"
    save_model(paper_model("vpt"), bad_config)
    payload = torch.load(bad_config, weights_only=True)
    payload["config"]["L"] = 2
    torch.save(payload, bad_config)
    with pytest.raises(VPIntegratorError, match="bad_config.pt: key 'state_dict' does not match"):
        load_model(bad_config)


def test_pretrained_hook(tmp_path, monkeypatch):
    with pytest.raises(VPIntegratorError, match="no pretrained model 'no_such_model'; available:"):
        load_model("pretrained:no_such_model")
    monkeypatch.setattr(models_module.files, "PRETRAINED_DIR", tmp_path)
    model = paper_model("vpt")
    save_model(model, tmp_path / "rigid_body_vpt.pt")
    assert list_pretrained() == ["rigid_body_vpt"]
    x = windows(2, 3, 3)
    assert torch.equal(load_model("pretrained:rigid_body_vpt")(x), model(x))


@pytest.mark.parametrize(
    "name, model_name, n_params",
    [("rigid_body_vpt", "vpt", 162), ("rigid_body_vpff", "vpff", 135), ("rigid_body_st", "st", 189),
     ("rigid_body_lpnet", "lpnet", 128)],
)
def test_shipped_pretrained_models_load_by_name(name, model_name, n_params):
    model = load_model(f"pretrained:{name}")
    assert model.config["name"] == model_name
    assert sum(p.numel() for p in model.parameters()) == n_params
    x = windows(4, model.seq_len, 3).to(next(model.parameters()).dtype)
    assert model(x).shape == (4, model.pred_window, 3)


@pytest.mark.gpu
@pytest.mark.parametrize("key", PAPER)
def test_models_on_cuda_match_cpu_and_load_onto_cuda(tmp_path, key):
    model = paper_model(key)
    x = windows(16, model.seq_len, 3)
    y = model(x)
    # float64 on both devices: summation order only (~1e-16 relative a layer); atol 1e-10 as for the layers
    torch.testing.assert_close(model.cuda()(x.cuda()).cpu(), y, rtol=0, atol=1e-10)
    path = save_model(model, tmp_path / "m.pt")
    loaded = load_model(path, map_location="cuda")
    assert next(loaded.parameters()).is_cuda
    torch.testing.assert_close(loaded(x.cuda()).cpu(), y, rtol=0, atol=1e-10)


@pytest.mark.gpu
def test_vpt_volume_preserving_on_cuda():
    # float64 Jacobian on CUDA: the CPU's tolerance DET64, rounding differing by summation order only
    assert_volume_preserving(paper_model("vpt"), n=64, device="cuda", atol=DET64, method="chain")


@pytest.mark.parametrize("key", ["vpff", "vpt", "vpt_arbitrary", "st"])
def test_forward_equals_composition_of_public_layers(key):
    # the models run VPFF/VPT in the internal (dim, seq, batch) layout; the layers' public forward
    # uses (batch, seq, dim): both must be the same map
    from vpintegrator.testing import window_chain

    model = paper_model(key)
    x = windows(32, model.seq_len, 3)
    y = x
    for layer in window_chain(model):
        y = layer(y)
    torch.testing.assert_close(model(x), y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("key", ["vpt", "vpt_arbitrary"])
def test_fast_cayley_path_equals_inv_baseline_in_the_model(key):
    from vpintegrator.nn import cayley_method

    model = paper_model(key)
    x = windows(64, 3, 3)
    with cayley_method("inv"):
        slow = model(x)
    torch.testing.assert_close(model(x), slow, rtol=1e-10, atol=1e-10)
    slow.sum().backward()
    grads_slow = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g_fast, g_slow in zip((p.grad for p in model.parameters()), grads_slow):
        torch.testing.assert_close(g_fast, g_slow, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name", ["rigid_body_vpt", "rigid_body_vpff"])
def test_shipped_volume_preserving_models_preserve_volume(name):
    from vpintegrator.testing import assert_volume_preserving

    assert_volume_preserving(load_model(f"pretrained:{name}").double(), method="chain")


@pytest.mark.parametrize("name,n_params", [("vpff", 135), ("vpt", 162), ("st", 189)])
def test_default_model_config_is_the_papers(name, n_params):
    config = models_module.default_model_config(name)
    assert "dim" not in config
    assert count_parameters(build_model(name, dim=3, **config)) == n_params
    with pytest.raises(VPIntegratorError, match="unknown model 'mamba'"):
        models_module.default_model_config("mamba")


# ---------------------------------------------------------------- Python API conventions (every architecture)


_DIM = {"lpnet": 3, "lp_transformer": 3, "lpnet_ctx": 3, "vpff_ctx": 3, "lphnn": 3}  # so(3)* only; dim 4 fits every other family


def _small_or_paper(name: str):
    """The architecture at its defaults (the paper's where there is one), at dim 4 (3 for so(3)* models)."""
    torch.manual_seed(0)
    return build_model(name, dim=_DIM.get(name, 4)).double()


@pytest.mark.parametrize("name", models_module.list_models())
def test_build_model_defaults_are_the_clis(name):
    from vpintegrator.training.plan import build_model as train_build_model

    dim = _DIM.get(name, 4)
    cli_model, _ = train_build_model({"name": name}, dim, "test data")
    assert build_model(name, dim=dim).config == cli_model.config
    assert count_parameters(build_model(name, dim=dim)) == count_parameters(cli_model)


def test_build_model_vpt_is_the_papers_162():
    assert count_parameters(build_model("vpt", dim=3, seq_len=3)) == 162
    assert count_parameters(build_model("vpt", dim=3)) == 162
    assert count_parameters(build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1)) == 33  # explicit keys win


@pytest.mark.parametrize("name", models_module.list_models())
def test_every_model_pickles(name, tmp_path):
    import io
    import pickle

    model = _small_or_paper(name)
    x = torch.randn(5, model.seq_len, model.dim, dtype=torch.float64)
    copy = pickle.loads(pickle.dumps(model))
    torch.testing.assert_close(copy(x), model(x), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded) is type(model) and loaded.config == model.config
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", models_module.list_models())
def test_every_model_takes_an_unbatched_window(name):
    model = _small_or_paper(name)
    x = torch.randn(5, model.seq_len, model.dim, dtype=torch.float64)
    batched = model(x)
    one = model(x[2])  # (seq, dim) -> (pred_window, dim)
    assert one.shape == (model.pred_window, model.dim)
    torch.testing.assert_close(one, batched[2], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", models_module.list_models())
def test_vmap_of_jacrev_over_windows(name):
    from torch.func import jacrev, vmap

    model = _small_or_paper(name)
    x = torch.randn(3, model.seq_len, model.dim, dtype=torch.float64)
    J = vmap(jacrev(model))(x)  # (batch, pred_window, dim, seq, dim)
    assert J.shape == (3, model.pred_window, model.dim, model.seq_len, model.dim)
    for b in range(3):  # against autograd's Jacobian of the batched call, one window at a time
        ref = torch.autograd.functional.jacobian(lambda w: model(w.unsqueeze(0))[0], x[b])
        torch.testing.assert_close(J[b], ref, rtol=1e-9, atol=1e-10)


def test_registered_defaults_fill_build_model(monkeypatch):
    from vpintegrator.models import registry

    class Tiny(torch.nn.Module):
        model_name = "tiny_test_model"

        def __init__(self, dim: int, width: int = 1, seq_len: int = 1) -> None:
            super().__init__()
            self.dim, self.seq_len, self.pred_window = dim, seq_len, seq_len
            self.config = {"name": self.model_name, "dim": dim, "width": width, "seq_len": seq_len}

    monkeypatch.setitem(registry._MODELS, "tiny_test_model", Tiny)
    monkeypatch.setitem(registry._PAPER_CONFIGS, "tiny_test_model", {"width": 7})
    assert build_model("tiny_test_model", dim=2).config["width"] == 7  # the registered default, not the class's
    assert build_model("tiny_test_model", dim=2, width=3).config["width"] == 3
