"""The ensemble's finiteness check of the members' weights: one batched reduction read back once per epoch
(issue 68 item 2), giving the verdicts of the per-member, per-tensor check it replaced."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vpintegrator.training import fit
from vpintegrator.training.ensemble import members_finite

pytestmark = pytest.mark.usefixtures("one_thread")

#: shapes of stacked parameters as a small VPT has them (after the member axis)
SHAPES = [(3, 3), (3,), (6,), (1,), (2, 3, 3)]


def _reference(stacked: list[torch.Tensor], n: int) -> list[bool]:
    """The obviously correct check: member by member, tensor by tensor (what the ensemble did before)."""
    return [all(bool(torch.isfinite(t[k]).all()) for t in stacked) for k in range(n)]


def _stacked(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, *shape, generator=g, dtype=torch.float64) for shape in SHAPES]


#: (member, tensor, flat position, value) of the weights made non-finite; several in one case
CASES = {
    "none": [],
    "nan_in_first_member": [(0, 0, 4, math.nan)],
    "nan_in_a_middle_member": [(2, 2, 5, math.nan)],
    "inf_in_the_last_member": [(4, 4, 17, math.inf)],
    "-inf_in_a_scalar_weight": [(1, 3, 0, -math.inf)],
    "two_members": [(1, 1, 0, math.nan), (3, 4, 0, math.inf)],
    "every_member": [(k, 0, 0, math.nan) for k in range(5)],
}


def _verdict_errors(check) -> list[str]:
    """Cases where ``check(stacked, n)`` disagrees with the per-member reference (5 members)."""
    errors = []
    for name, bad in CASES.items():
        stacked = _stacked(5)
        for k, t, i, value in bad:
            stacked[t][k].view(-1)[i] = value
        want, got = _reference(stacked, 5), check(stacked, 5)
        if got != want:
            errors.append(f"{name}: {got} != {want}")
    return errors


def test_batched_check_gives_the_per_member_verdicts():
    assert _verdict_errors(members_finite) == []


def test_the_verdict_test_catches_a_member_layout_mutant():
    """The mutation that shows the test above can fail: laying the weights out (size, n) instead of (n, size)
    mixes the members' weights, and the test reports it."""
    def mutant(stacked, n):
        rows = torch.cat([t.reshape(-1, n) for t in stacked], dim=0)
        return torch.isfinite(rows).all(dim=0).tolist()

    assert _verdict_errors(mutant)


class _HostReads(TorchDispatchMode):
    """Counts the aten ops dispatched and those that read one value back to the host (one sync each on a GPU)."""

    READS = {"_local_scalar_dense", "is_nonzero", "item", "equal"}

    def __init__(self):
        super().__init__()
        self.ops, self.reads = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.reads += func.__name__.split(".")[0] in self.READS
        return func(*args, **(kwargs or {}))


def _count(n: int) -> _HostReads:
    stacked = _stacked(n)
    with _HostReads() as mode:
        members_finite(stacked, n)
    return mode


def test_the_check_is_one_reduction_whatever_the_members():
    """No scalar read per member or tensor (the old check: members × tensors of them, 3 456 an epoch at 64
    members); the ops dispatched do not grow with the members (the one read back is ``tolist`` of the (n,)
    verdicts)."""
    few, many = _count(2), _count(16)
    assert few.reads == many.reads == 0
    assert few.ops == many.ops <= 3 * len(SHAPES) + 3  # per tensor: detach, view (+ alias); cat, isfinite, all


def test_a_member_with_a_nan_weight_is_found_by_the_ensemble(tiny_data, tmp_path, monkeypatch):
    """Through the trainer: member 1's weights turn NaN in its first epoch; the epoch's check marks it alone
    diverged, the others train on."""
    from vpintegrator.training import ensemble

    calls = []
    real = ensemble.EnsembleSteps.finite_weights

    def poisoned(self):
        if not calls:
            with torch.no_grad():
                next(iter(self.params.values()))[1].view(-1)[0] = math.nan
        calls.append(real(self))
        return calls[-1]

    monkeypatch.setattr(ensemble.EnsembleSteps, "finite_weights", poisoned)
    result = fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=2,
                      batch_size=32, dtype="float64", seeds=[5, 6, 7], out=str(tmp_path / "ens")))
    assert calls[0] == [True, False, True]
    stopped = [m.stopped for m in result.members]
    assert stopped[1] == "diverged" and stopped[0] == stopped[2] == "epochs"
    assert len(calls) == 2  # one check an epoch
