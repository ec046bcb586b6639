"""Shared test fixtures: the tolerance table and the GPU marker."""

from __future__ import annotations

import pytest

# One tolerance table for every float32/float64 comparison (e3nn style): name -> dtype name -> tol.
TOL = {
    "allclose": {"float32": 1e-5, "float64": 1e-12},
    "det": {"float32": 1e-4, "float64": 1e-10},
}


def pytest_collection_modifyitems(config, items):
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
