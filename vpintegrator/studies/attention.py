"""Does a trained transformer's attention carry information? The studies' attention step.

For one trained window model and a data file of exact-flow trajectories (conditions the model never saw):

- the attention coupling ([`vpintegrator.testing.attention_coupling`][vpintegrator.testing.attention_coupling]: ‖cross-state Jacobian blocks‖ /
  ‖own-state blocks‖, median and max over windows) on windows of the data, for the trained model and for a
  freshly initialised one of the same configuration (seed 0), on the same windows;
- the relative error ‖z − z_ref‖ / ‖z_ref‖ at ``t_end`` of the model and of
  [`without_attention`][vpintegrator.models.without_attention] (the model with every attention layer the identity), both
  started from the data's first window: median, 10–90 % interval and mean over the trajectories (a blown-up
  rollout counts as an infinite error);
- for a Lie–Poisson transformer also the error of [`constant_coupling`][vpintegrator.models.constant_coupling] (every
  coupling's ψ the constant ψ̄ of the same windows): zeroing ψ (``without_attention``) removes a position-wise
  rotation as well as the cross-state information, the constant removes only the cross-state information.

Everything is float64 on the CPU. Run as a study step::

    python -m vpintegrator.studies.attention --model RUN_DIR --data HELDOUT.h5 --n-traj 20 --t-end 100 --out OUT.json
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass
from pathlib import Path

from ..config import Config, key
from .options import Study
from .runner import StudyError, Task
from .stats import median_interval, relative_errors, write_json


def _errors(model, ref, dt: float, n_steps: int):
    import numpy as np

    from vpintegrator.rollout import ModelStep, rollout

    y = rollout(ModelStep(model, device="cpu"), ref[:, : int(getattr(model, "seq_len"))], dt, n_steps).y
    err = relative_errors(y, ref, [n_steps])[n_steps]
    return {**median_interval(err), "mean": float(np.mean(err))}


def probe(model_path: str | Path, data_path: str | Path, n_traj: int = 20, t_end: float | None = None, n_windows: int = 10) -> dict[str, Any]:
    """The coupling and the with/without-attention errors of the model at ``model_path`` (a run directory,
    ``.pt`` file or ``pretrained:<name>``) on the first ``n_traj`` trajectories of ``data_path`` to ``t_end``
    (default: the data's horizon); ``n_windows`` windows per trajectory, evenly spaced."""
    import numpy as np
    import torch

    from vpintegrator.data import read_trajectories
    from vpintegrator.models import build_model, constant_coupling, load_model, without_attention
    from vpintegrator.models.ablation import attention_layers
    from vpintegrator.nn.lie_poisson import LiePoissonCoupling
    from vpintegrator.testing import attention_coupling

    model = load_model(model_path).double().eval()
    T, dim, config = int(getattr(model, "seq_len")), int(getattr(model, "dim")), dict(getattr(model, "config"))
    data = read_trajectories(data_path)
    n = min(int(n_traj), data.y.shape[0])
    dt = float(data.dt)
    n_steps = data.y.shape[1] - 1 if t_end is None else int(round(float(t_end) / dt))
    if n_steps > data.y.shape[1] - 1 or n_steps < T:
        raise StudyError(f"--t-end {t_end}: the data {data_path} holds t <= {data.t[-1]:g}; give a t-end within it")
    ref = np.asarray(data.y[:n, : n_steps + 1], dtype=np.float64)  # (n, n_steps + 1, dim)
    starts = np.unique(np.linspace(0, n_steps - T, num=max(1, n_windows)).astype(int))
    windows = torch.as_tensor(np.stack([ref[:, k : k + T] for k in starts], 1).reshape(-1, T, dim))
    with torch.no_grad():
        trained = attention_coupling(model, windows)
    torch.manual_seed(0)
    fresh = attention_coupling(build_model(**config).double(), windows)
    has_coupling = any(isinstance(m, LiePoissonCoupling) for _, m in attention_layers(model))
    constant = _errors(constant_coupling(model, windows), ref, dt, n_steps) if has_coupling else None
    return {
        "model": str(model_path), "data": str(data_path), "n_traj": n, "t_end": n_steps * dt,
        "coupling": {"median": float(trained.median), "max": float(trained.max)},
        "coupling_fresh": {"median": float(fresh.median), "max": float(fresh.max)},
        "error": _errors(model, ref, dt, n_steps),
        "error_without_attention": _errors(without_attention(model), ref, dt, n_steps),
        "error_constant_coupling": constant,
    }


def section(entries: Any) -> list[str]:
    """Markdown lines: the attention table of ``entries``, (name, ``probe`` result) pairs; [] if none."""
    from .stats import fmt_num, md_table

    entries = [(name, a) for name, a in entries if a]
    if not entries:
        return []
    f = lambda v: fmt_num(v, 3, small=1e-2, missing="–")  # noqa: E731
    span = lambda e: f"{f(e['median'])} [{f(e['lo'])}, {f(e['hi'])}]"  # noqa: E731
    body = [[name, f"{f(a['coupling']['median'])} / {f(a['coupling']['max'])}",
             f"{f(a['coupling_fresh']['median'])} / {f(a['coupling_fresh']['max'])}", span(a["error"]),
             span(a["error_without_attention"]),
             span(a["error_constant_coupling"]) if a.get("error_constant_coupling") else "–"] for name, a in entries]
    a0 = entries[0][1]
    return ["### Attention", "",
            "Coupling: ‖cross-state Jacobian blocks‖ / ‖own-state blocks‖ of the trained window map on held-out "
            "exact-flow windows (median / max), a fresh initialisation of the same model on the same windows beside "
            f"it; error at t = {a0['t_end']:g} on the first {a0['n_traj']} held-out ICs, median [10–90 %], of the "
            "model, of `without_attention(model)` (every attention layer the identity) and, for the Lie–Poisson "
            "transformer, of `constant_coupling(model)` (every coupling's ψ its mean on the same windows: the "
            "position-wise rotation kept, all cross-state information removed), all from the exact first window.", "",
            *md_table(["model", "coupling median / max", "fresh init", "error", "error without attention",
                       "error, constant coupling"], body), ""]


@dataclass
class AttentionOptions(Config):
    """The attention step's keys (flags ``--model``, ``--data``, ``--n-traj``, ``--t-end``, ``--out``).

    Parameters
    ----------
    model : str
        Run directory, .pt file or pretrained:<name>.
    data : str
        HDF5 trajectories of the exact flow (held-out conditions).
    n_traj : int
        First trajectories of --data (default 20).
    t_end : float
        Horizon of the errors (default: the data's).
    out : str
        JSON file written.
    """

    _source_in_messages = False

    model: str | None = key(None, optional=True, type=str)
    data: str | None = key(None, optional=True, type=str)
    n_traj: int = key(20, type=int, low=1, expected=">= 1")
    t_end: float | None = key(None, optional=True, type=float, low=0.0, open_low=True, expected="a positive number")
    out: str | None = key(None, optional=True, type=str)


@dataclass(frozen=True)
class AttentionPlan:
    """The attention step's keys, checked once (``build_plan``)."""

    model: str
    data: str
    n_traj: int
    t_end: float | None
    out: str


def build_plan(options: AttentionOptions, argv: tuple[str, ...] = ()) -> AttentionPlan:
    """The step's plan: ``--model``, ``--data`` and ``--out`` given."""
    o = options
    for name in ("model", "data", "out"):
        if getattr(o, name) is None:
            raise StudyError(f"--{name} is required (the flag, or {name} in the --plan file)")
    return AttentionPlan(str(o.model), str(o.data), o.n_traj, o.t_end, str(o.out))


def run(a: AttentionPlan) -> int:
    import torch

    torch.set_num_threads(1)
    write_json(Path(a.out), probe(a.model, a.data, a.n_traj, a.t_end))
    print(f"wrote {a.out}")
    return 0


def tasks(run: Path, models: Any, seeds: Any, data: Path, gen: str, n_traj: int, t_end: float) -> list[Task]:
    """The step as a study's tasks, seed-major: per seed and window model ``RUN/attention/<model>_s<seed>.json`` of
    ``RUN/train/<model>_s<seed>`` on ``data`` (made by the task ``gen``), after that training."""
    return [Task(f"attention_{m}_s{s}", ["python", "-m", "vpintegrator.studies.attention", "--model", run / "train" /
                                         f"{m}_s{s}", "--data", data, "--n-traj", str(n_traj), "--t-end", f"{t_end:g}",
                                         "--out", run / "attention" / f"{m}_s{s}.json"],
                 [run / "attention" / f"{m}_s{s}.json"], [gen, f"train_{m}_s{s}"]) for s in seeds for m in models]


#: the step as the runner runs it (``python -m vpintegrator.studies.attention``)
STUDY = Study(AttentionOptions, run, build_plan, doc=__doc__, required=("model", "data", "out"),
              prog="python -m vpintegrator.studies.attention", interrupted="Interrupted.")


if __name__ == "__main__":
    from .driver import main

    raise SystemExit(main(STUDY))
