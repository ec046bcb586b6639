"""The partial-observation study's data: the training file per system and the held-out conditions."""

from __future__ import annotations

from pathlib import Path

from .design import H, HORIZONS, SYSTEMS


def make_data(out: Path, system: str, n_train: int, t_train: float) -> Path:
    """The training file of ``system`` (seed 0, ``n_train`` trajectories to ``t_train``), written once under
    ``OUT/data``. The held-out conditions are drawn by the rollout from the file's own sampler with another seed
    (``vp-rollout --heldout``, ``HELDOUT_SEED``) and integrated by the exact flow to t = 100. A system with fixed
    initial conditions (a ``heldout_spec``: the Toda lattice) has its spec's conditions (``n_train`` does not
    apply) and its held-out file (``heldout_data``)."""
    from ...data import generate, load_spec

    info = SYSTEMS[system]
    folder = out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    if "heldout_spec" in info:
        train = folder / f"{system}_train_N{info['params']['N']}_t{t_train:g}.h5"
        if not train.is_file():
            generate(load_spec(info["spec"], params=info["params"], t_end=t_train, dt=H), out=train, workers=1)
        return train
    train = folder / f"{system}_train_n{n_train}_t{t_train:g}.h5"
    if not train.is_file():
        generate(load_spec(info["spec"], n_traj=n_train, t_end=t_train, dt=H, seed=0), out=train)
    return train


def heldout_mu(system: str, n_test: int) -> list[float]:
    """The ``n_test`` held-out parameters of a system with fixed initial conditions: the midpoints of
    ``n_test`` equal bins of its training values' range (for the Toda bump family, training mu = 0.30, 0.33 ...
    0.60: mu = 0.30 + 0.30 (k + 1/2) / n_test, none of them a training value; ``n_test = 10`` gives
    toda_bump_heldout's midpoints 0.315 ... 0.585)."""
    from ...data import load_spec

    info = SYSTEMS[system]
    mu = [float(m) for m in load_spec(info["spec"], params=info["params"]).sampler_args["mu"]]
    lo, hi = min(mu), max(mu)
    held = [round(lo + (hi - lo) * (k + 0.5) / int(n_test), 12) for k in range(int(n_test))]
    assert not set(held) & set(mu), "a held-out mu is a training mu"
    return held


def heldout_data(out: Path, system: str, n_test: int) -> Path | None:
    """The held-out file of a system with fixed initial conditions: its ``heldout_spec`` at the ``n_test``
    parameters of ``heldout_mu``, to t = 100 at ``H`` by DOP853 at 1e-12 (the exact flow), written once under
    ``OUT/data``; None for a system whose held-out conditions are drawn from its sampler."""
    from ...data import generate, load_spec

    info = SYSTEMS[system]
    if "heldout_spec" not in info:
        return None
    path = out / "data" / f"{system}_heldout_N{info['params']['N']}_n{int(n_test)}_t{max(HORIZONS):g}.h5"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        generate(load_spec(info["heldout_spec"], params=info["params"], t_end=max(HORIZONS), dt=H,
                           sampler_args={"mu": heldout_mu(system, n_test)}), out=path, workers=1)
    return path

