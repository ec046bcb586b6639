"""Shared test fixtures: the tolerance table, the GPU marker and the number of xdist workers."""

from __future__ import annotations

import pytest

# One tolerance table for every float32/float64 comparison (e3nn style): name -> dtype name -> tol.
# Tests take it through the ``tol`` fixture: ``tol("det")``, ``tol("allclose", "float32")``.
TOL = {
    "allclose": {"float32": 1e-5, "float64": 1e-12},  # one computation against another of the same values
    "det": {"float32": 1e-4, "float64": 1e-10},  # |det J - 1| of a volume-preserving map
    "symplectic": {"float32": 1e-4, "float64": 1e-11},  # ||J^T Omega J - Omega||_F / ||Omega||_F
    "engines": {"float32": 1e-5, "float64": 1e-10},  # two engines, same calls; reductions may round apart
}


@pytest.fixture
def tol():
    """``tol(kind="allclose", dtype="float64")``: the table's tolerance (dtype a name or a torch dtype)."""

    def lookup(kind: str = "allclose", dtype="float64") -> float:
        return TOL[kind][str(dtype).removeprefix("torch.")]

    return lookup


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the README's test command): one worker per CPU this process may run on, at most 8, at least 1.
    xdist's own count is of physical cores where psutil is installed, one on a runner whose two vCPUs share a core;
    each worker holds torch and the compiled kernels (~1 GB), hence the cap. With ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    set, xdist's own hook reads it."""
    import os

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's implementation, which reads the variable
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(usable, 8))


#: CI runs the whole suite once (the README's command); against the installed wheel and on Python 3.10 it runs only
#: the tests marked ``installed`` (.ci/run): the test files below, which hold what can differ there. The rule, held by
#: tests/test_ci_subset.py: (1) packaging, metadata, imports, start-up and the compiled-kernel cache; (2) every kind
#: of file the wheel ships (configs, specs, results, pretrained weights), opened from the installed package; (3) the
#: installed commands and fresh interpreters on the package; (4) code that branches on the Python version; (5) a
#: sample of the rest, one quick file per area (data, models, training, rollout, plotting, studies). Any test file
#: that asks for the installed metadata, the Python version, an installed command by name, or the shipped files
#: through the ``installed`` fixture belongs here.
INSTALLED = {
    # (1) packaging, metadata, imports, start-up, the kernel cache
    "test_packaging.py", "test_api.py", "test_startup.py", "test_jit_cache.py", "test_no_absolute_paths.py",
    "test_moved_pickles.py", "test_config_base.py", "test_cli_conventions.py", "test_verify_types.py",
    # (2) the shipped files
    "test_shipped_results.py", "test_shipped_study_results.py", "test_pretrained_info.py", "test_pretrained_lpnet.py",
    "test_pretrained_family_lpnet.py", "test_pretrained_family_sympnet.py", "test_gml.py", "test_study_schema.py",
    # (3) the installed commands, fresh interpreters
    "test_cli_gen.py", "test_signals.py", "test_user_system.py", "test_user_model.py", "test_ci_subset.py",
    # (5) a sample of the rest
    "test_windows.py", "test_metrics.py", "test_layers.py", "test_training.py", "test_rollout_core.py",
    "test_plotting_display.py", "test_study_config.py", "test_hdf5.py",
}


def pytest_collection_modifyitems(config, items):
    installed = pytest.mark.installed
    for item in items:
        if item.path.name in INSTALLED:
            item.add_marker(installed)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread is faster and keeps the shared 2-core CPU calm."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> str:
    """12 rigid-body trajectories of 16 states (RK4, h = 0.2) on the unit sphere, as an HDF5 file."""
    import numpy as np

    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.data import integrate

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(12, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    traj = integrate("rigid_body", y0, 0.2, 15, method="rk4")
    return str(write_trajectories(tmp_path_factory.mktemp("data") / "tiny.h5", traj))


@pytest.fixture(scope="module")
def toda_data():
    """Training (mu = 0.30 ... 0.60) and held-out (the midpoints) Toda bump trajectories, N = 40, to T = 30:
    ``(system, train, test)`` (the reduction tests' lattice)."""
    import numpy as np

    from vpintegrator.data import integrate
    from vpintegrator.systems import get_system, sample_initial_conditions

    system = get_system("toda", N=40)
    train_mu = list(0.30 + 0.03 * np.arange(11))
    test_mu = list(0.315 + 0.03 * np.arange(10))
    train = integrate(system, sample_initial_conditions(system, "bump", mu=train_mu), 0.1, 300,
                      method="stormer_verlet_y6", compiled=False)
    test = integrate(system, sample_initial_conditions(system, "bump", mu=test_mu), 0.1, 300,
                     method="stormer_verlet_y6", compiled=False)
    return system, train, test


@pytest.fixture
def repo_script():
    """A loader of the repository's ``scripts/NAME.py`` as a module; the test skips where the repository's scripts
    are not beside the tests (the suite run against the wheel)."""
    import importlib.util
    from pathlib import Path

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
        if not path.is_file():
            pytest.skip("repository script (not in the wheel)")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def same_rows(repo_script):
    """``scripts/same_rows_under_load.py`` as a module (its differ, its tiny study ``TINY``, its path ``__file__``)."""
    return repo_script("same_rows_under_load")
