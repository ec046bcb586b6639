"""The reduction study prices every row for the same output (issue 65): the full state every ``output_every``, decoded
where the row is reduced, no other state handed out — checked by what the priced call decodes, not by its time."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.studies.reduction import measure as reduction  # the module that prices a row


@pytest.mark.parametrize("h, every, outputs", [(1.2, 2.4, 50), (0.3, 2.4, 50), (0.3, 6.0, 20), (1.2, 1.2, 100),
                                               (0.1, 2.0, 60)])
def test_a_priced_row_decodes_exactly_its_outputs(h, every, outputs, monkeypatch):
    from vpintegrator.data import integrate
    from vpintegrator.systems import get_system

    system = get_system("toda", N=8)
    y0 = np.concatenate([0.05 * np.sin(np.arange(8.0)), np.zeros(8)])  # a small bump at rest: Verlet is stable
    monkeypatch.setattr(reduction, "_min_cpu", lambda call, repeats: (call(), 1.0)[1])  # run it once, untimed
    seen: list[np.ndarray] = []
    reduction._stepper_cost(system, "stormer_verlet", h, y0, 1, every, decode=lambda z: seen.append(np.array(z)))
    states = np.concatenate(seen)
    assert len(states) == outputs  # T / every outputs (T = 120), none more
    n = int(round(reduction.T / h))
    want = np.asarray(integrate(system, y0[None], h, n, method="stormer_verlet").y)[0]
    k = int(round(every / h))
    np.testing.assert_allclose(states, want[k::k], rtol=1e-12, atol=1e-12)  # the states at the output times
