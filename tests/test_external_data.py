"""Trajectories from elsewhere (issue 43, item 4): a file holding only ``/t`` and ``/y`` (optionally
``/params``), written with plain h5py, trains (CLI and ``vp.fit``) and rolls out with model rows and errors
against its own held-out trajectories; rows that need a system are refused in one line before anything
runs (nothing written); bad files get one line naming the file and the key; the input is never modified."""

from __future__ import annotations

import hashlib
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator import VPIntegratorError
from vpintegrator.cli.rollout import main as rollout_main
from vpintegrator.cli.train import main as train_main
from vpintegrator.data.rollouts import read_rollout

pytestmark = pytest.mark.usefixtures("one_thread")

N_TRAJ, N_STATES, DT = 20, 31, 0.1


def _states(n_traj: int = N_TRAJ, n_states: int = N_STATES, seed: int = 0) -> np.ndarray:
    """A damped rotation in the plane, exactly: what another simulator might have written; (n_traj, n_states, 2)."""
    rng = np.random.default_rng(seed)
    y0 = rng.uniform(-1.0, 1.0, (n_traj, 2))
    t = np.arange(n_states) * DT
    c, s, d = np.cos(t), np.sin(t), np.exp(-0.1 * t)
    q = d * (c * y0[:, :1] + s * y0[:, 1:])
    p = d * (-s * y0[:, :1] + c * y0[:, 1:])
    return np.stack([q, p], axis=-1)


def _write_bare(path: Path, y: np.ndarray | None = None, t: np.ndarray | None = None, **extra) -> Path:
    """A trajectory file as h5py writes it, with nothing of vpintegrator's: /t, /y (and extra datasets)."""
    y = _states() if y is None else y
    t = np.arange(y.shape[1]) * DT if t is None else t
    with h5py.File(path, "w") as f:
        f["t"] = t
        f["y"] = y
        for key, value in extra.items():
            f[key] = value
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def bare(tmp_path):
    return _write_bare(tmp_path / "bare.h5")


def test_read_as_trajectories_without_a_system(bare):
    traj = vp.read_trajectories(bare)
    assert traj.y.shape == (N_TRAJ, N_STATES, 2) and traj.dt == pytest.approx(DT)
    assert not traj.has_system and traj.meta["external"] is True and "system" not in traj.meta
    np.testing.assert_array_equal(traj.y, _states())
    with pytest.raises(VPIntegratorError, match="name no system") as err:
        traj.base_system
    assert "\n" not in str(err.value)
    system = traj.system  # the stand-in: a dimension, no invariants, and no equations
    assert system.dim == 2 and system.invariants(traj.y) == {} and system.name == "unknown"
    with pytest.raises(VPIntegratorError, match="without a system") as err:
        system.vector_field(traj.y[:, 0])
    assert "\n" not in str(err.value)
    meta = vp.read_metadata(bare)
    assert meta["dim"] == 2 and meta["n_traj"] == N_TRAJ and meta["n_states"] == N_STATES


def test_params_without_names_get_column_names(tmp_path):
    path = _write_bare(tmp_path / "p.h5", params=np.arange(2.0 * N_TRAJ).reshape(N_TRAJ, 2))
    traj = vp.read_trajectories(path, traj=[3])
    assert traj.param_names == ("params[0]", "params[1]") and traj.params.tolist() == [[6.0, 7.0]]


def test_train_and_roll_out_from_the_clis(bare, tmp_path):
    """vp-train 1 epoch, then vp-rollout of the model: its test split (the file's own held-out trajectories)
    against the file's own states; the input untouched."""
    before = (_sha(bare), bare.stat().st_mtime_ns)
    run = tmp_path / "run"
    _ok(CliRunner().invoke(train_main, ["--data", str(bare), "--model", "vpff", "--epochs", "1", "--batch-size", "32",
                                        "--device", "cpu", "--out", str(run)]))
    out = tmp_path / "roll.h5"
    result = _ok(CliRunner().invoke(rollout_main, ["--data", str(bare), "--model", f"vpff={run}", "--device", "cpu",
                                                   "--out", str(out)]))
    assert "names no system" in result.output
    r = read_rollout(out)
    test = r.traj_index
    assert 0 < test.size < N_TRAJ  # the test split of the model's training run
    np.testing.assert_array_equal(r.reference.y, _states()[test])  # the reference is the file's own states
    assert "system" not in r.meta and r.meta["reference_mode"] == "data"
    rows = {row["method"]: row for row in r.table}
    assert set(rows) == {"vpff"} and rows["vpff"]["reference"] == "data"
    err = r.metrics["vpff"].rel_error
    want = np.linalg.norm(r.methods["vpff"].y - r.reference.y, axis=-1) / np.linalg.norm(r.reference.y, axis=-1)
    np.testing.assert_allclose(err[:, 1:], want[:, 1:], rtol=1e-10, equal_nan=True)
    assert "Errors against the data" in out.with_suffix(".md").read_text()
    assert (_sha(bare), bare.stat().st_mtime_ns) == before


def test_fit_from_python(bare, tmp_path):
    result = vp.fit(dict(data=[str(bare)], model={"name": "vpff"}, epochs=1, batch_size=32, device="cpu",
                         out=str(tmp_path / "run")))
    assert np.isfinite(result.history[-1]["train_loss"])
    result = vp.fit(model="vpff", train=vp.read_trajectories(bare), epochs=1, batch_size=32, device="cpu")
    assert np.isfinite(result.history[-1]["train_loss"])


def test_validation_rollouts_within_the_file(bare, tmp_path):
    """monitor = val_rollout scores rollouts against the validation trajectories themselves; past the file's
    horizon (or with an invariant drift term) there is nothing to continue them with: one line."""
    base = dict(data=[str(bare)], model={"name": "vpff"}, epochs=1, batch_size=32, device="cpu",
                monitor="val_rollout")
    result = vp.fit(dict(base, val_rollout_steps=N_STATES - 1, out=str(tmp_path / "a")))
    assert np.isfinite(result.history[-1]["val_rollout"])
    for change in ({"val_rollout_steps": 2 * N_STATES}, {"val_rollout_drift_weight": 1.0}):
        with pytest.raises(VPIntegratorError, match="without a system") as err:
            vp.fit(dict(base, **change, out=str(tmp_path / "b")))
        assert "\n" not in str(err.value) and str(bare) in str(err.value)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(bare file, run directory of a one-epoch vpt trained on it: seq_len 3, so init matters)."""
    folder = tmp_path_factory.mktemp("trained")
    bare = _write_bare(folder / "bare.h5")
    run = folder / "run"
    vp.fit(dict(data=[str(bare)], model={"name": "vpt"}, epochs=1, batch_size=32, device="cpu", out=str(run)))
    return bare, run


@pytest.mark.parametrize("names", ["rk4", "exact_flow", "gauss_legendre4,rk4"])
def test_rows_that_need_a_system_are_one_line_and_nothing_is_written(trained, tmp_path, names):
    bare, run = trained
    before = _sha(bare)
    out = tmp_path / "roll.h5"
    result = CliRunner().invoke(rollout_main, ["--data", str(bare), "--model", f"vpt={run}", "--integrators", names,
                                               "--device", "cpu", "--out", str(out)])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and "--integrators" in lines[0] and "names no system" in lines[0]
    assert names.replace(",", ", ") in lines[0] and str(bare.name) in lines[0]
    assert not out.exists() and not out.with_suffix(".csv").exists() and _sha(bare) == before


@pytest.mark.parametrize("change, key", [({"heldout": 3}, "heldout"), ({"t_end": 100.0}, "t_end"),
                                         ({"init": "rk4"}, "init")])
def test_what_needs_the_equations_is_refused(trained, tmp_path, change, key):
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    bare, run = trained
    config = RolloutConfig(data=str(bare), models=[str(run)], out=str(tmp_path / "r.h5"), device="cpu", **change)
    with pytest.raises(VPIntegratorError, match="names no system") as err:
        run_rollouts(config)
    assert err.value.key == key and "\n" not in str(err.value)
    assert not (tmp_path / "r.h5").exists()


def test_vp_gen_file_without_schema_version_is_still_refused(tmp_path):
    """A file with vpintegrator's own attributes but no schema_version is a damaged file, not an external one."""
    traj = vp.Trajectories(y=_states(), t=np.arange(N_STATES) * DT, meta={"system": "volterra", "dt": DT})
    path = vp.write_trajectories(tmp_path / "d.h5", traj)
    with h5py.File(path, "a") as f:
        del f.attrs["schema_version"]
    with pytest.raises(VPIntegratorError, match="schema_version"):
        vp.read_trajectories(path)


def _nan_y():
    y = _states()
    y[4, 7, 1] = np.nan
    return y


BAD = [
    ("no_y", dict(y=None), "'/y'"),
    ("no_t", dict(t=None), "'/t'"),
    ("t_decreasing", dict(t=np.arange(N_STATES)[::-1] * DT), "'/t'"),
    ("t_repeated", dict(t=np.concatenate([[0.0], np.arange(N_STATES - 1) * DT])), "'/t'"),
    ("t_irregular", dict(t=np.arange(N_STATES) ** 1.5 * DT), "'/t'"),
    ("t_nan", dict(t=np.where(np.arange(N_STATES) == 3, np.nan, np.arange(N_STATES) * DT)), "'/t'"),
    ("t_shape", dict(t=np.arange(N_STATES - 1) * DT), "'/t'"),
    ("y_rank2", dict(y=_states()[0]), "'/y'"),
    ("y_rank4", dict(y=_states()[..., None]), "'/y'"),
    ("y_int", dict(y=np.zeros((3, N_STATES, 2), dtype=np.int64)), "'/y'"),
    ("y_one_state", dict(y=_states()[:, :1], t=np.zeros(1)), "'/y'"),
    ("y_nan", dict(y=_nan_y()), "'/y'"),
    ("params_shape", dict(params=np.zeros((N_TRAJ + 1, 2))), "'/params'"),
]


def _write_broken(path: Path, how: dict) -> Path:
    y = how.get("y", _states())
    t = how.get("t", np.arange(N_STATES) * DT)
    with h5py.File(path, "w") as f:
        if t is not None:
            f["t"] = t
        if y is not None:
            f["y"] = y
        if "params" in how:
            f["params"] = how["params"]
    return path


@pytest.mark.parametrize("name, how, key", BAD, ids=[b[0] for b in BAD])
def test_bad_files_one_line_naming_file_and_key(tmp_path, name, how, key):
    path = _write_broken(tmp_path / f"{name}.h5", how)
    before = _sha(path)
    with pytest.raises(VPIntegratorError) as err:
        vp.read_trajectories(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and key in msg, msg
    assert _sha(path) == before


@pytest.mark.parametrize("name, how, key", [b for b in BAD if b[0] in ("no_y", "t_decreasing", "y_rank2", "y_nan")],
                         ids=["no_y", "t_decreasing", "y_rank2", "y_nan"])
def test_bad_files_from_vp_train(tmp_path, name, how, key):
    path = _write_broken(tmp_path / f"{name}.h5", how)
    result = CliRunner().invoke(train_main, ["--data", str(path), "--model", "vpff", "--epochs", "1",
                                             "--device", "cpu", "--out", str(tmp_path / "run")])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and path.name in lines[0] and key in lines[0], result.output


def test_params_file_trains_and_rolls_out_from_python(tmp_path):
    """An optional /params is carried along: no oracle rows are added for it (a note says why)."""
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    path = _write_bare(tmp_path / "p.h5", params=np.random.default_rng(1).uniform(size=(N_TRAJ, 2)))
    run = tmp_path / "run"
    vp.fit(dict(data=[str(path)], model={"name": "vpff"}, epochs=1, batch_size=32, device="cpu", out=str(run)))
    lines: list[str] = []
    report = run_rollouts(RolloutConfig(data=str(path), models=[str(run)], out=str(tmp_path / "r.h5"), device="cpu"),
                          log=lines.append)
    assert [row["method"] for row in report.rows] == ["run"] and report.reference.startswith("data: ")
    assert any("names no system" in line for line in lines)


# --- issue 58 / 57: one validation of a data-only file; the CF time axis ------------------------------------------


def test_float32_time_axis_is_a_regular_grid_at_its_own_precision(tmp_path):
    """float32 sample times (steps 0.200000003 and 0.2000000477 as float64) are one step of 0.2."""
    t32 = (np.arange(N_STATES) * np.float32(0.2)).astype(np.float32)
    steps = np.diff(t32.astype(np.float64))
    assert steps.max() - steps.min() > 1e-9 * 0.2  # irregular at float64's tolerance: the case of the issue
    traj = vp.read_trajectories(_write_bare(tmp_path / "t32.h5", t=t32))
    assert traj.dt == 0.2 and traj.meta["dt"] == 0.2
    np.testing.assert_array_equal(traj.t, t32.astype(np.float64))
    far = (np.arange(N_STATES) ** 1.05 * 0.2).astype(np.float32)  # irregular beyond float32's precision: refused
    with pytest.raises(VPIntegratorError, match=r"not a regular grid.*written as float32"):
        vp.read_trajectories(_write_bare(tmp_path / "far.h5", t=far))


def _xarray_file(path: Path, time, *, dims=("trajectory", "time", "state"), names=("z1", "z2")) -> Path:
    """A data file as an xarray user writes it (h5py where xarray or h5netcdf is missing: the same layout)."""
    y = _states()
    try:
        import xarray as xr

        import h5netcdf  # noqa: F401
    except ImportError:
        with h5py.File(path, "w") as f:
            f["time"] = time
            f["state"] = np.array(names, dtype="S")
            f["y"] = y
        return path
    data = np.transpose(y, [("trajectory", "time", "state").index(d) for d in dims])
    xr.Dataset({"y": (dims, data)}, coords={"time": time, "state": list(names)}).to_netcdf(path, engine="h5netcdf")
    return path


def test_a_time_axis_named_time_is_read_as_t(tmp_path):
    path = _xarray_file(tmp_path / "cf.h5", np.arange(N_STATES) * DT)
    traj = vp.read_trajectories(path)
    assert traj.dt == pytest.approx(DT) and traj.y.shape == (N_TRAJ, N_STATES, 2)
    np.testing.assert_array_equal(traj.y, _states())
    meta = vp.read_metadata(path)
    assert meta["time_name"] == "time" and meta["state_names"] == ["z1", "z2"] and meta["n_states"] == N_STATES
    assert vp.read_trajectories(path, steps=slice(0, 5)).t.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_a_datetime_time_axis_is_read_in_seconds(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    times = pd.date_range("2020-01-01", periods=N_STATES, freq="100ms")
    traj = vp.read_trajectories(_xarray_file(tmp_path / "dates.h5", times))
    assert traj.dt == pytest.approx(DT) and traj.t[0] == 0.0 and traj.t[-1] == pytest.approx((N_STATES - 1) * DT)


def test_transposed_xarray_file_is_refused_not_read_swapped(tmp_path):
    pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    path = _xarray_file(tmp_path / "tr.h5", np.arange(N_STATES) * DT, dims=("time", "trajectory", "state"))
    with pytest.raises(VPIntegratorError, match=r"time axis 'time' is axis 0.*transpose") as err:
        vp.read_trajectories(path)
    assert "\n" not in str(err.value)


def test_a_time_file_trains_and_rolls_out_from_the_clis(tmp_path):
    path = _xarray_file(tmp_path / "cf.h5", np.arange(N_STATES) * DT)
    before = _sha(path)
    run = tmp_path / "run"
    _ok(CliRunner().invoke(train_main, ["--data", str(path), "--model", "vpff", "--epochs", "1", "--batch-size", "32",
                                        "--device", "cpu", "--out", str(run)]))
    _ok(CliRunner().invoke(rollout_main, ["--data", str(path), "--model", f"vpff={run}", "--device", "cpu",
                                          "--out", str(tmp_path / "r.h5")]))
    assert read_rollout(tmp_path / "r.h5").methods["vpff"].y.shape[1] > 1 and _sha(path) == before


@pytest.mark.parametrize("own", [False, True], ids=["external", "vp-gen"])
def test_nan_params_are_refused_by_vp_train_and_nothing_is_written(tmp_path, own):
    params = np.random.default_rng(1).uniform(size=(N_TRAJ, 2))
    params[7, 0] = np.nan
    if own:
        traj = vp.Trajectories(y=_states(), t=np.arange(N_STATES) * DT, meta={"system": "volterra", "dt": DT})
        path = vp.write_trajectories(tmp_path / "d.h5", traj)
        with h5py.File(path, "a") as f:
            f["params"] = params
            f["params"].attrs["names"] = ["a", "b"]
    else:
        path = _write_bare(tmp_path / "p.h5", params=params)
    before = _sha(path)
    result = CliRunner().invoke(train_main, ["--data", str(path), "--model", "vpff", "--epochs", "1",
                                             "--device", "cpu", "--out", str(tmp_path / "run")])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "'/params' holds NaN at [7, 0]" in lines[0], result.output
    assert not (tmp_path / "run").exists() and _sha(path) == before


def test_numpy_datetimes_are_read_in_seconds_and_nat_is_refused(tmp_path):
    """h5py's opaque datetime64 (what h5py writes for numpy dates): seconds since 1970; a NaT is a NaN time."""
    t = (np.datetime64("2020-01-01T00:00:00", "ns") + np.arange(N_STATES) * np.timedelta64(100, "ms"))
    path = _write_bare(tmp_path / "dates.h5", t=t.astype(h5py.opaque_dtype(t.dtype)))
    traj = vp.read_trajectories(path)
    assert traj.dt == pytest.approx(DT, rel=1e-6) and traj.t[0] == pytest.approx(1577836800.0)
    t[4] = np.datetime64("NaT")
    bad = _write_bare(tmp_path / "nat.h5", t=t.astype(h5py.opaque_dtype(t.dtype)))
    with pytest.raises(VPIntegratorError, match=r"dataset '/t' holds NaN at \[4\]"):
        vp.read_trajectories(bad)

def test_the_table_caption_names_the_horizon_asked(bare, tiny_data, tmp_path):
    """The line above the table says where the errors end: the --t-end asked when it is within the data
    (issue 57: it said the file's last time), the file's last time when the run goes beyond it."""
    from vpintegrator.models import build_model
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    model = build_model("vpff", dim=2)
    for t_end, caption_end in ((1.0, "for t <= 1."), (None, "for t <= 3.")):  # the bare file: t in [0, 3]
        out = tmp_path / f"bare_{t_end}.h5"
        run_rollouts(RolloutConfig(data=str(bare), models=[("m", model)], t_end=t_end, out=str(out), device="cpu"))
        caption = out.with_suffix(".md").read_text().splitlines()[0]
        assert caption.startswith("Errors against the data") and caption.endswith(caption_end), caption
    for t_end, caption_end in ((1.0, "for t <= 1."), (5.0, "for t <= 3, continued with rk4 beyond.")):  # t <= 3
        out = tmp_path / f"rb_{t_end}.h5"
        run_rollouts(RolloutConfig(data=tiny_data, integrators=["implicit_midpoint"], reference="data", t_end=t_end,
                                   out=str(out)))
        caption = out.with_suffix(".md").read_text().splitlines()[0]
        assert caption.startswith("Errors against the data") and caption.endswith(caption_end), caption
