"""Reduction files: a PSD basis saved with its lattice, N, 2n and the data it was fitted on, read back whole."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.data import integrate
from vpintegrator.errors import VPIntegratorError
from vpintegrator.reduction import fit_psd, load_reduction, reduction_meta, save_reduction
from vpintegrator.systems import get_system, sample_initial_conditions


@pytest.fixture(scope="module")
def toda_train():
    system = get_system("toda", N=20)
    return integrate(system, sample_initial_conditions(system, "bump", mu=[0.3, 0.4, 0.5]), 0.1, 50,
                     method="stormer_verlet", compiled=False)


@pytest.mark.parametrize("method", ["cotangent_lift", "balanced_cotangent_lift", "complex_svd"])
def test_psd_round_trip_with_provenance(toda_train, tmp_path, method):
    basis = fit_psd(toda_train, 6, method)
    path = tmp_path / "basis.npz"
    save_reduction(basis, path, fitted_on=toda_train)
    back = load_reduction(path, n_sites=20, reduced_dim=6)
    assert back.method == method and back.scales == basis.scales
    assert (basis.scales is not None) == (method == "balanced_cotangent_lift")
    np.testing.assert_array_equal(back.phi, basis.phi)
    np.testing.assert_array_equal(back.singular_values, basis.singular_values)
    y = toda_train.y[:, -1]
    np.testing.assert_array_equal(back.project(y), basis.project(y))
    meta = reduction_meta(path)
    assert meta["kind"] == "psd" and meta["method"] == method
    assert meta["n_sites"] == 20 and meta["full_dim"] == 40 and meta["reduced_dim"] == 6
    assert meta["fitted_on"]["system"] == "toda" and meta["fitted_on"]["shape"] == [3, 51, 40]
    assert meta["fitted_on"]["params"] == {"N": 20.0, "alpha": 0.64}
    assert "versions" in meta["provenance"]


def test_other_lattice_size_and_dimension_refused_in_one_line(toda_train, tmp_path):
    path = tmp_path / "basis.npz"
    save_reduction(fit_psd(toda_train, 4), path, fitted_on=toda_train)
    with pytest.raises(VPIntegratorError, match=r"basis\.npz: a reduction of a toda lattice of N = 20 \(40 "
                                                r"components\) but the data has N = 200 \(400 components\)"):
        load_reduction(path, n_sites=200)
    with pytest.raises(VPIntegratorError, match=r"basis\.npz: a reduction to 2n = 4 components, not 8"):
        load_reduction(path, reduced_dim=8)


def test_reduced_dim_above_the_rank_refused(toda_train):
    with pytest.raises(VPIntegratorError, match=r"reduced_dim = 10 needs 5 basis vectors but .* rank"):
        fit_psd(toda_train.y[:, :1], 10)  # 3 states: rank <= 3 for q, p together


def test_bad_files_one_line(tmp_path):
    with pytest.raises(VPIntegratorError, match="no such reduction file"):
        load_reduction(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not an archive")
    with pytest.raises(VPIntegratorError, match=r"junk\.npz: not a reduction file") as err:
        load_reduction(junk)
    assert "\n" not in str(err.value)
    other = tmp_path / "other.npz"
    np.savez(other, meta=np.array('{"format": "something"}'))
    with pytest.raises(VPIntegratorError, match=r"other\.npz: not a reduction file"):
        load_reduction(other)
    with pytest.raises(VPIntegratorError, match="give a PSDBasis or a SymplecticAutoencoder"):
        save_reduction(np.eye(4), tmp_path / "x.npz")


def test_failed_write_keeps_the_earlier_file(toda_train, tmp_path, monkeypatch):
    path = tmp_path / "basis.npz"
    save_reduction(fit_psd(toda_train, 4), path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError):
        save_reduction(fit_psd(toda_train, 6), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["basis.npz"]


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.99])
def test_a_cut_archive_is_one_line_naming_the_file(toda_train, tmp_path, keep):
    """A truncated (cut) basis archive, read by load_reduction and by --observe file:PATH, is one line naming
    the file (issue 69: a zipfile traceback)."""
    from vpintegrator.reduction.observation import reduction_observation

    whole = tmp_path / "basis.npz"
    save_reduction(fit_psd(toda_train, 4), whole, fitted_on=toda_train)
    cut = tmp_path / "cut.npz"
    data = whole.read_bytes()
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(VPIntegratorError, match=r"cut\.npz: not a reduction file") as err:
        load_reduction(cut)
    assert "\n" not in str(err.value)
    with pytest.raises(VPIntegratorError, match=r"cut\.npz: not a reduction file"):
        reduction_observation(f"file:{cut}", 40, "toda")
