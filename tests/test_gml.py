"""Weights trained with GeometricMachineLearning.jl: read_gml / load_model("gml:..."), and the GML options
(ST upscaling to transformer_dim, matrix-softmax attention)."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.models import build_model, count_parameters, load_model, save_model
from vpintegrator.models.gml import read_gml
from vpintegrator.nn import MultiHeadAttention

DATA = Path(__file__).parent / "data" / "gml"
VPFF = DATA / "transformer_rigid_body_nn_vpff.h5"
ST = DATA / "transformer_rigid_body_nn_st.h5"
H = 0.2

pytestmark = pytest.mark.usefixtures("one_thread")


def _h5(path: Path, key: str) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return np.asarray(f[key][()])


@pytest.fixture(scope="module")
def reference() -> torch.Tensor:
    """Implicit-midpoint trajectories (inertia (2, 1, 2/3), h = 0.2, 60 steps) from 40 points on the unit sphere,
    the first the tutorial's (sin 1.1, 0, cos 1.1)."""
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(40, 3))
    y0[0] = (math.sin(1.1), 0.0, math.cos(1.1))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return torch.from_numpy(integrate("rigid_body", y0, H, 60, method="implicit_midpoint").y)


def _rel(pred: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return (pred - ref).norm(dim=-1) / ref.norm(dim=-1)


def _one_step_error(model, Y: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return _rel(model(Y[:, :-1]), Y[:, 1:])


def _window_error(model, Y: torch.Tensor, seq: int = 3) -> torch.Tensor:
    """Each window of ``seq`` states -> the next ``seq`` states, against the reference."""
    W = Y.unfold(1, seq, 1).transpose(-1, -2)  # (n_traj, n_windows, seq, dim)
    n = W.shape[1] - seq
    with torch.no_grad():
        return _rel(model(W[:, :n].reshape(-1, seq, 3)), W[:, seq:].reshape(-1, seq, 3))


# ------------------------------------------------------------------------------- the published files


@pytest.mark.parametrize("file, name, count", [(VPFF, "vpff", 135), (ST, "st", 189)])
def test_published_files_load(file, name, count):
    model = read_gml(file)
    assert model.config["name"] == name and count_parameters(model) == count
    assert all(p.dtype == torch.float64 for p in model.parameters()) and not model.training
    assert model.gml_provenance == str(file.resolve())
    rebuilt = build_model(**model.config)
    rebuilt.load_state_dict(model.state_dict())  # config round-trips through build_model
    assert model.config == {**rebuilt.config}
    expect = {"vpff": dict(dim=3, n_blocks=6, n_linear=1, init_upper=False, seq_len=1),
              "st": dict(dim=3, n_heads=1, n_blocks=2, L=3, add_connection=False, seq_len=3, transformer_dim=None)}
    assert expect[name].items() <= model.config.items()
    assert all(p.dtype == torch.float32 for p in read_gml(file, dtype="float32").parameters())


def test_vpff_weights_land_where_they_should():
    """Layer 1 (lower, no bias) and 2 (upper, bias) rebuilt from the raw HDF5 by GML's indexing rule."""
    model = read_gml(VPFF)
    S1, S2, b2 = _h5(VPFF, "L1/weight/S"), _h5(VPFF, "L2/weight/S"), _h5(VPFF, "L2/bias")
    n = int(_h5(VPFF, "L1/weight/n"))
    lower, upper = np.zeros((n, n)), np.zeros((n, n))
    for i in range(1, n + 1):  # 1-based, as GML's getindex: L[i, j] = S[(i-2)(i-1)/2 + j] for i > j
        for j in range(1, i):
            lower[i - 1, j - 1] = S1[(i - 2) * (i - 1) // 2 + j - 1]
            upper[j - 1, i - 1] = S2[(i - 2) * (i - 1) // 2 + j - 1]  # U[j, i] = S[(i-2)(i-1)/2 + j], i > j
    layers = list(model.layers)
    assert type(layers[0]).__name__ == "VolumePreservingLowerLayer" and layers[0].bias is None
    np.testing.assert_array_equal(layers[0].matrix().detach().numpy(), lower)
    np.testing.assert_array_equal(layers[1].matrix().detach().numpy(), upper)
    np.testing.assert_array_equal(layers[1].bias.detach().numpy(), b2)
    with h5py.File(VPFF, "r") as f:  # every layer: lower/upper as the file says, bias where the file has one
        for k, layer in enumerate(layers, start=1):
            g = f[f"L{k}"]
            assert g["weight"].attrs["gml_type"].decode().startswith(type(layer).__name__[len("VolumePreserving"):-5])
            assert ("bias" in g) == (layer.bias is not None)


def test_st_weights_land_where_they_should():
    model = read_gml(ST)
    block = model.blocks[0]
    # ResNet layer L2: W_julia = h5ᵀ; attention L1: GML's PK is our query, its PQ our key
    np.testing.assert_array_equal(block.resnet[0].weight.detach().numpy(), _h5(ST, "L2/weight").T)
    np.testing.assert_array_equal(block.resnet[0].bias.detach().numpy(), _h5(ST, "L2/bias"))
    np.testing.assert_array_equal(block.attention.query[0].weight.detach().numpy(), _h5(ST, "L1/PK/head_1").T)
    np.testing.assert_array_equal(block.attention.key[0].weight.detach().numpy(), _h5(ST, "L1/PQ/head_1").T)
    np.testing.assert_array_equal(block.attention.value[0].weight.detach().numpy(), _h5(ST, "L1/PV/head_1").T)
    np.testing.assert_array_equal(model.blocks[2].resnet[2].weight.detach().numpy(), _h5(ST, "L12/weight").T)


def _gml_st_forward(path: Path, Z: np.ndarray, L: int = 3, n_res: int = 3) -> np.ndarray:
    """GML's StandardTransformerIntegrator on one window Z (dim, T), as its Julia code reads (columns)."""
    k = 1
    for _ in range(L):
        PQ, PK, PV = (_h5(path, f"L{k}/{p}/head_1").T for p in ("PQ", "PK", "PV"))  # Julia (dim, d_head)
        C = (PQ.T @ Z).T @ (PK.T @ Z) / math.sqrt(Z.shape[0])
        P = np.exp(C - C.max(axis=0)) / np.exp(C - C.max(axis=0)).sum(axis=0)  # softmax over each column
        Z = PV.T @ Z @ P
        k += 1
        for j in range(n_res):
            W, b = _h5(path, f"L{k}/weight").T, _h5(path, f"L{k}/bias")
            y = W @ Z + b[:, None]
            Z = Z + (np.tanh(y) if j < n_res - 1 else y)
            k += 1
    return Z


def test_st_matches_gml_code(reference):
    model = read_gml(ST)
    windows = reference[:4, :3].numpy()
    expected = np.stack([_gml_st_forward(ST, w.T).T for w in windows])
    with torch.no_grad():
        np.testing.assert_allclose(model(torch.from_numpy(windows)).numpy(), expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------- a sensible integrator, and why


def test_vpff_predicts_implicit_midpoint(reference):
    err = _one_step_error(read_gml(VPFF), reference)
    assert err.max() < 5e-3 and err.mean() < 1e-3  # measured: max 1.9e-3, mean 7e-4
    # iterated from the tutorial's initial condition, 50 steps (t = 10): measured 0.029
    model, z = read_gml(VPFF), reference[:1, :1]
    with torch.no_grad():
        for _ in range(50):
            z = model(z)
    assert _rel(z[0, 0], reference[0, 50]) < 0.06


def test_vpff_wrong_storage_order_or_triangle_is_much_worse(reference):
    """What a transposed triangle or a different S order would give: errors of order 1, not 1e-3."""
    good = _one_step_error(read_gml(VPFF), reference).mean()
    for perm in ([2, 1, 0], [0, 2, 1], [1, 0, 2]):
        model = read_gml(VPFF)
        with torch.no_grad():
            for layer in model.layers:
                layer.weight.copy_(layer.weight[perm])
        assert _one_step_error(model, reference).mean() > 300 * good
    swapped = build_model("vpff", dim=3, n_blocks=6, init_upper=True).double()  # Lᵀ and Uᵀ: transposed
    swapped.load_state_dict(read_gml(VPFF).state_dict())
    assert _one_step_error(swapped, reference).mean() > 300 * good


def test_st_predicts_implicit_midpoint(reference):
    err = _window_error(read_gml(ST), reference)
    assert err.mean() < 0.06 and err.max() < 0.15  # measured: mean 0.041, max 0.10 (a short training)
    transposed = read_gml(ST)
    with torch.no_grad():
        for block in transposed.blocks:
            for layer in block.resnet:
                layer.weight.copy_(layer.weight.T.clone())
    assert _window_error(transposed, reference).mean() > 10 * err.mean()


# --------------------------------------------------------------------------- load_model, CLI, files


def test_load_model_gml_spec_and_config():
    m = load_model(f"gml:{ST}?seq_len=5&name=st&dtype=float32")
    assert m.seq_len == 5 and m.config["name"] == "st" and next(m.parameters()).dtype == torch.float32
    m = load_model(f"gml:{ST}?seq_len=5", hparams={"seq_len": 4, "add_connection": True})
    assert m.seq_len == 4 and m.config["add_connection"] is True
    m = load_model(f"gml:{VPFF}")
    assert m.config["name"] == "vpff" and m.seq_len == 1 and not m.training
    with pytest.raises(VPIntegratorError, match=r"hparams is only for gml:FILE.h5"):
        load_model("pretrained:rigid_body_vpt", hparams={"seq_len": 3})


def test_saved_gml_model_reloads_identically(tmp_path, reference):
    model = load_model(f"gml:{VPFF}")
    path = save_model(model, tmp_path / "vpff.pt")
    back = load_model(path)
    from vpintegrator.provenance import redact_path

    # the file names its source without this machine's absolute path (issue 33)
    assert back.config == model.config and back.gml_provenance == redact_path(model.gml_provenance)
    assert not back.gml_provenance.startswith("/")
    for (k, a), (k2, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert k == k2 and a.dtype == b.dtype and torch.equal(a, b)
    with torch.no_grad():
        assert torch.equal(model(reference[:, :5]), back(reference[:, :5]))


def test_vp_rollout_with_gml_models(tiny_data, tmp_path):
    from vpintegrator.cli.rollout import main as rollout_main

    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout_main, [
        "--data", tiny_data, "--model", f"gml:{ST}", "--model", f"vpff=gml:{VPFF}", "--integrators",
        "implicit_midpoint", "--t-end", "2", "--n-traj", "2", "--out", str(out), "--quiet",
    ], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    labels = [ln.split()[0] for ln in res.output.splitlines()[2:5]]  # after the reference line and the header
    assert labels == ["implicit_midpoint", "transformer_rigid_body_nn_st", "vpff"]
    res = CliRunner().invoke(rollout_main, ["--data", tiny_data, "--model", f"gml:{tmp_path / 'none.h5'}",
                                            "--out", str(tmp_path / "x.h5"), "--quiet"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.output.startswith("Error: ") and len(res.output.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------- bad inputs


def _write(path: Path, layers: dict) -> Path:
    """An HDF5 file from {"L1/weight": array or (gml_type, S, n) or {attr...}}."""
    with h5py.File(path, "w") as f:
        for key, value in layers.items():
            if isinstance(value, tuple):
                g = f.create_group(key)
                g.attrs["gml_type"] = np.bytes_(value[0])
                g["S"], g["n"] = np.asarray(value[1], dtype=np.float32), np.int64(value[2])
            else:
                f[key] = np.asarray(value, dtype=np.float32)
    return path


def _copy_vpff(tmp_path: Path, edit) -> Path:
    path = tmp_path / "edited.h5"
    path.write_bytes(VPFF.read_bytes())
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


def _bad_cases(tmp_path: Path):
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5\n")
    data = _write(tmp_path / "data.h5", {"y": np.zeros((2, 3, 3)), "t": np.arange(3.0)})
    return [
        (lambda: read_gml(tmp_path / "missing.h5"), r"missing.h5 does not exist"),
        (lambda: read_gml(tmp_path), r"is a directory"),
        (lambda: read_gml(text), r"notes.h5: not an HDF5 file"),
        (lambda: read_gml(data), r"data.h5: no groups L1 … Ln at the top level: not a GeometricMachineLearning"),
        (lambda: read_gml(_write(tmp_path / "x.h5", {"L1/weight": ("StiefelManifold", [0.0, 1.0, 2.0], 3)})),
         r"x.h5: group L1/weight: gml_type 'StiefelManifold' is not supported; supported: LowerTriangular, "
         r"UpperTriangular, SkewSymMatrix"),
        (lambda: read_gml(_copy_vpff(tmp_path, lambda f: f["L7/weight"].attrs.modify("gml_type", np.bytes_("Foo")))),
         r"edited.h5: group L7/weight: gml_type 'Foo' is not supported"),
        (lambda: read_gml(_copy_vpff(tmp_path, lambda f: f.__delitem__("L5"))), r"group L5 is missing"),
        (lambda: read_gml(_copy_vpff(tmp_path, lambda f: f.create_group("extra"))),
         r"entry 'extra' at the top level is not a layer group"),
        (lambda: read_gml(_copy_vpff(tmp_path, lambda f: f.__delitem__("L26"))), r"group L25: 25 triangular layers"),
        (lambda: read_gml(_copy_vpff(tmp_path, lambda f: f.__delitem__("L3/bias"))), r"group L3: .*not GML's"),
        (lambda: read_gml(_copy_vpff(tmp_path, lambda f: f["L1"].create_dataset("gamma", data=[1.0]))),
         r"group L1: entries \['gamma', 'weight'\] are not a layer this reader knows"),
        (lambda: read_gml(VPFF, n_blocks=3), r"config n_blocks = 3 contradicts group L1…L26, which gives n_blocks = 6"),
        (lambda: read_gml(ST, n_heads=3), r"config n_heads = 3 contradicts group L1/PQ"),
        (lambda: read_gml(ST, dim=4), r"config dim = 4 contradicts group L1"),
        (lambda: read_gml(ST, transformer_dim=6), r"config transformer_dim = 6 contradicts group L1"),
        (lambda: read_gml(VPFF, name="vpt"), r"name 'vpt' contradicts group L1 .*holds a 'vpff' network"),
        (lambda: read_gml(VPFF, seq_len=0), r"seq_len"),
        (lambda: read_gml(VPFF, dtype="float16"), r"dtype must be one of float32, float64; got 'float16'"),
        (lambda: load_model(f"gml:{VPFF}?seq_len"), r"'seq_len' is not KEY=VALUE"),
        (lambda: load_model("gml:"), r"no file after 'gml:'"),
        (lambda: load_model(f"gml:{VPFF}?unknown=1"), r"unknown key 'unknown'"),
    ]


def test_bad_inputs_are_one_line(tmp_path):
    for call, match in _bad_cases(tmp_path):
        with pytest.raises(VPIntegratorError, match=match) as info:
            call()
        assert "\n" not in str(info.value)
    with pytest.raises(FileNotFoundError):  # a missing file is also a FileNotFoundError
        load_model(f"gml:{tmp_path / 'missing.h5'}")


# ------------------------------------------------------------- GML's options: upscaling, matrix softmax


def _write_gml(model, path: Path) -> Path:
    """Our model in GML's HDF5 layout (the inverse of read_gml's mapping, written independently)."""
    def mat(a):  # Julia (rows, cols) as h5py sees it: transposed
        return a.detach().double().numpy().T

    layers = []
    if model.config["name"] == "vpff":
        layers = list(model.layers)
    elif model.config["name"] == "vpt":
        for b in model.blocks:
            layers += [b.attention, *b.feedforward.layers]
    else:
        layers = ([model.upscale] if hasattr(model, "upscale") else []) + [
            m for b in model.blocks for m in (b.attention, *b.resnet)] + ([model.downscale] if hasattr(model, "downscale") else [])
    entries = {}
    for k, m in enumerate(layers, start=1):
        kind = type(m).__name__
        if kind.startswith("VolumePreserving") and kind.endswith("Layer"):
            entries[f"L{k}/weight"] = (kind[16:21] + "Triangular", m.weight.detach().numpy(), m.dim)
            if m.bias is not None:
                entries[f"L{k}/bias"] = m.bias.detach().numpy()
        elif kind == "VolumePreservingAttention":
            entries[f"L{k}/A"] = ("SkewSymMatrix", m.weight.detach().numpy(), m.dim) if m.skew_sym else mat(m.weight)
        elif kind == "MultiHeadAttention":
            for part, group in (("PQ", m.key), ("PK", m.query), ("PV", m.value)):
                for h, p in enumerate(group, start=1):
                    entries[f"L{k}/{part}/head_{h}"] = mat(p.weight)
        elif kind == "ResNetLayer":
            entries[f"L{k}/weight"], entries[f"L{k}/bias"] = mat(m.weight), m.bias.detach().numpy()
        else:  # Dense: W (out, in), b
            entries[f"L{k}/W"], entries[f"L{k}/b"] = mat(m.weight), m.bias.detach().numpy()
    return _write(path, entries)


@pytest.mark.parametrize("config", [
    dict(name="vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, skew_sym=True),
    dict(name="vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, skew_sym=False),
    dict(name="vpt", dim=4, seq_len=3, n_blocks=1, n_linear=2, L=2, skew_sym=True, init_upper=True),
    dict(name="vpff", dim=4, n_blocks=2, n_linear=3),
    dict(name="st", dim=4, seq_len=3, n_heads=2, n_blocks=1, L=2),
    dict(name="st", dim=3, seq_len=3, n_heads=2, n_blocks=2, L=2, transformer_dim=6, upscaling_activation="tanh"),
])
def test_synthetic_gml_files_read_back(config, tmp_path):
    torch.manual_seed(0)
    model = build_model(**config).double()
    back = read_gml(_write_gml(model, tmp_path / "m.h5"), **{k: v for k, v in config.items() if k in (
        "seq_len", "upscaling_activation")})
    inferred = {k: v for k, v in back.config.items() if k in config}
    assert inferred == {k: v for k, v in model.config.items() if k in config}
    assert count_parameters(back) == count_parameters(model)
    x = torch.randn(5, 3, config["dim"], dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), rtol=0, atol=1e-6)  # the file is float32


def _gml_st_count(dim, width, n_blocks, L):
    """GML's parameterlength of StandardTransformerIntegrator (gml MHA 3 D², ResNet D² + D, Dense with bias)."""
    scale = 0 if width == dim else (dim * width + width) + (width * dim + dim)
    return scale + L * (3 * width**2 + (n_blocks + 1) * (width**2 + width))


@pytest.mark.parametrize("dim, width, n_heads, n_blocks, L", [(3, 6, 1, 2, 3), (3, 6, 3, 1, 2), (4, 8, 2, 2, 1), (3, 3, 1, 2, 3)])
def test_st_upscaling(dim, width, n_heads, n_blocks, L, tmp_path):
    torch.manual_seed(1)
    model = build_model("st", dim=dim, transformer_dim=width, n_heads=n_heads, n_blocks=n_blocks, L=L)
    assert count_parameters(model) == _gml_st_count(dim, width, n_blocks, L)
    assert (width == 6 and dim == 3 and n_blocks == 2 and L == 3) <= (count_parameters(model) == 747)
    x = torch.randn(4, 3, dim)
    y = model(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    rebuilt = build_model(**model.config)
    rebuilt.load_state_dict(model.state_dict())
    back = load_model(save_model(model, tmp_path / "st.pt"))
    assert back.config == model.config
    with torch.no_grad():
        assert torch.equal(rebuilt(x), y) and torch.equal(back(x), y)


def test_st_default_is_unchanged_by_the_new_options():
    torch.manual_seed(0)
    default = build_model("st", dim=3)
    torch.manual_seed(0)
    explicit = build_model("st", dim=3, transformer_dim=3, upscaling_activation="identity", softmax="vector")
    assert list(default.state_dict()) == list(explicit.state_dict()) and not hasattr(default, "upscale")
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), explicit.state_dict().values()))
    x = torch.randn(3, 3, 3)
    assert torch.equal(default(x), explicit(x))


def test_matrix_softmax_matches_gml_formula():
    torch.manual_seed(2)
    layer = MultiHeadAttention(4, 2, softmax="matrix").double()
    x = torch.randn(5, 6, 4, dtype=torch.float64)
    PQ, PK, PV = (p.detach() for p in layer.projections())  # ours: query, key, value
    out = []
    for X in x:
        Z, heads = X.T, []
        for i in range(2):  # GML: PV' Z MatrixSoftmax((PQ' Z)'(PK' Z) / √dim), GML's PQ our key, PK our query
            C = (PK[i].T @ Z).T @ (PQ[i].T @ Z) / 2.0
            heads.append(PV[i].T @ Z @ (torch.exp(C) / torch.exp(C).sum()))
        out.append(torch.cat(heads).T)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), torch.stack(out), rtol=0, atol=1e-12)
    with pytest.raises(VPIntegratorError, match=r"softmax: expected one of vector, matrix, got 'row'"):
        MultiHeadAttention(4, 2, softmax="row")


def test_compiled_path_refuses_options_it_lacks():
    from vpintegrator.rollout import numba_model as compiled

    if not compiled.AVAILABLE:
        pytest.skip("numba not installed")
    assert compiled.pack(build_model("st", dim=3)) is not None
    assert compiled.pack(build_model("st", dim=3, transformer_dim=6)) is None
    assert compiled.pack(build_model("st", dim=3, softmax="matrix")) is None
    assert compiled.pack(read_gml(VPFF)) is not None and compiled.pack(read_gml(ST)) is not None


def test_init_from_gml_file_fine_tunes_from_its_weights(tiny_data, tmp_path):
    """``--init-from gml:FILE`` (issue 69): the existing GML file is read (it said the file did not exist) and
    the run starts from its weights; a missing one is one line naming it."""
    from vpintegrator.cli.train import main as train_main

    gml = f"gml:{DATA / 'transformer_rigid_body_nn_vpff.h5'}"
    args = ["--data", tiny_data, "--model", "vpff", "--set", "model.n_blocks=6", "--epochs", "1", "--init-from"]
    res = CliRunner().invoke(train_main, [*args, gml, "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    start = load_model(gml).state_dict()
    tuned = load_model(tmp_path / "run").state_dict()
    assert all(torch.allclose(start[k].float(), tuned[k].float(), atol=1e-3) for k in start)  # lr_min: barely moved
    res = CliRunner().invoke(train_main, [*args, "gml:nope.h5", "--out", str(tmp_path / "none")])
    assert res.exit_code != 0 and "nope.h5 does not exist" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "none" / "best.pt").exists()
